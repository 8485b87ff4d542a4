#!/usr/bin/env bash
# One device session: NN-Constrained round 5 (the actors' Adam epsilon, actor step and logit
# step at visit weight 0.5 and proportional gain 0.2; 16 and 8 actor epochs; K = 1024 with 1000
# updates) on tuning seeds (run.seed = 0), the best of each re-run on held-out seeds (1000).
# Usage (on the GPU machine, repository root): OUT=/some/dir bash benchmarks/gpu/nn_round5.sh
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
R=$OUT/round5; mkdir -p $R
step() { local t=$1; shift; echo "=== [$(date +%T)] $*"; timeout "$t" "$@"; echo "=== rc=$? [$(date +%T)]"; }
{
  SW="$PY -m fhc_jax.cli sweep --overwrite --quiet --algo nn-constrained --seeds 8 --set visit_weight_power=0.5 --set multiplier_gain=0.2"
  G="--grid actor_adam_eps=1e-8,1e-4,1e-3,1e-2 --grid actor_step.init=0.03,0.1,0.3 --grid logit_step=1,2"
  step 100 $SW --out $R/nn_e16 --set actor_epochs=16 $G
  step 100 $SW --out $R/nn_e8 --set actor_epochs=8 $G
  step 80 $SW --out $R/nn_e16_k1024 --set actor_epochs=16 --set episodes_per_iteration=1024 --set num_iterations=1000 \
      --grid actor_adam_eps=1e-8,1e-3 --grid actor_step.init=0.03,0.1
  $PY benchmarks/tuning_report.py $R/nn_e16 $R/nn_e8 $R/nn_e16_k1024 --top 6
  step 110 $PY benchmarks/gpu/heldout.py --out $R --top 1 --seeds 10 \
      --sweep $R/nn_e16 "--set actor_epochs=16 --set visit_weight_power=0.5 --set multiplier_gain=0.2" \
      --sweep $R/nn_e8 "--set actor_epochs=8 --set visit_weight_power=0.5 --set multiplier_gain=0.2" \
      --sweep $R/nn_e16_k1024 "--set actor_epochs=16 --set visit_weight_power=0.5 --set multiplier_gain=0.2 --set episodes_per_iteration=1024 --set num_iterations=1000"
} 2>&1 | tee $OUT/log.txt
