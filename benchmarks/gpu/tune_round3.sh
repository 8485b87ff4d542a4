#!/usr/bin/env bash
# Third tuning round on the GPU: robustness of the best FH-Constrained settings over 20 seeds
# (length, batch size, multiplier steps, policy averaging), and NN-Constrained with more actor
# epochs over 10 seeds. Usage (GPU machine, repository root): OUT=/some/dir bash benchmarks/gpu/tune_round3.sh
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
R=/tmp/gpu_results3; rm -rf $R; mkdir -p $R
step() { local t=$1; shift; echo "=== [$(date +%T)] $*"; timeout "$t" "$@"; echo "=== rc=$? [$(date +%T)]"; }
{
  SW="$PY -m fhc_jax.cli sweep --overwrite --quiet ${EXTRA:-}"
  FH="--set actor_step.power=0.6 --grid multiplier_step.init=1e-4,2e-4,3e-4 --grid multiplier_gain=0.01,0.02 --grid policy_averaging=0.99,0.995"
  step 60 $SW --seeds 20 --out $R/fh_k256_n2500 --set num_iterations=${FH_N:-2500} --set actor_step.init=3 $FH
  step 60 $SW --seeds 20 --out $R/fh_k256_n3000 --set num_iterations=${FH_N:-3000} --set actor_step.init=3 $FH
  step 60 $SW --seeds 20 --out $R/fh_k512_n1500 --set episodes_per_iteration=512 --set num_iterations=${FH_N:-1500} --grid actor_step.init=2,3 $FH
  step 60 $SW --seeds 20 --out $R/fh_k512_n2000 --set episodes_per_iteration=512 --set num_iterations=${FH_N:-2000} --grid actor_step.init=2,3 $FH
  NN="--set multiplier_gain=0.05 --set multiplier_step.init=1e-3 --grid trace=0.4,0.5,0.6 --grid actor_step.init=0.02,0.03,0.05"
  step 60 $SW --seeds 10 --algo nn-constrained --out $R/nn_e8 --set actor_epochs=8 $NN
  step 60 $SW --seeds 10 --algo nn-constrained --out $R/nn_e12 --set actor_epochs=12 $NN
} 2>&1 | tee $OUT/log3.txt
tar czf $OUT/round3.tgz -C $R .
