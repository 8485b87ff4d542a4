#!/usr/bin/env bash
# Second tuning round on the GPU (after suite.sh): refine FH-Constrained around the best
# 3000-update configuration with 10 seeds, and try NN-Constrained's trace / step sizes / epochs.
# Usage (GPU machine, repository root): OUT=/some/dir bash benchmarks/gpu/tune_round2.sh
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
R=/tmp/gpu_results2; rm -rf $R; mkdir -p $R
step() { local t=$1; shift; echo "=== [$(date +%T)] $*"; timeout "$t" "$@"; echo "=== rc=$? [$(date +%T)]"; }
{
  SW="$PY -m fhc_jax.cli sweep --overwrite --quiet ${EXTRA:-}"
  FHGRID="--grid actor_step.init=2,3 --grid actor_step.power=0.6,0.7 --grid multiplier_step.init=1e-4,2e-4,3e-4 --grid multiplier_gain=0.01,0.02"
  for n in 2500 3000 4000; do
    step 60 $SW --seeds 10 --out $R/fh$n --set num_iterations=${FH_N:-$n} $FHGRID
  done
  NNSET="--set multiplier_gain=0.05 --set multiplier_step.init=1e-3"
  step 70 $SW --seeds 5 --algo nn-constrained --out $R/nn_trace $NNSET --grid trace=0.5,0.8,1.0 \
      --grid actor_step.init=0.01,0.03 --grid critic_step.init=0.02,0.05,0.1
  step 50 $SW --seeds 5 --algo nn-constrained --out $R/nn_epochs8 $NNSET --set actor_epochs=8 \
      --grid trace=0.5,1.0 --grid actor_step.init=0.01,0.03
  step 50 $SW --seeds 5 --algo nn-constrained --out $R/nn_k256 $NNSET --set episodes_per_iteration=256 \
      --set num_iterations=${NN_N:-3000} --grid trace=0.5,1.0 --grid actor_step.init=0.01,0.03
} 2>&1 | tee $OUT/log2.txt
tar czf $OUT/round2.tgz -C $R .
