#!/usr/bin/env bash
# One device session: NN-Constrained round 4 (the visit weighting of the improved actor's
# regression, logit step, actor step, proportional gain; 8 and 16 actor epochs) on tuning seeds
# (run.seed = 0), the best settings re-run on held-out seeds (run.seed = 1000), and the GPU
# training throughput of NN-Constrained on BatteryStorage at K = 4096 and 65536.
# Usage (on the GPU machine, repository root): OUT=/some/dir bash benchmarks/gpu/nn_round4.sh
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
R=$OUT/round4; mkdir -p $R
step() { local t=$1; shift; echo "=== [$(date +%T)] $*"; timeout "$t" "$@"; echo "=== rc=$? [$(date +%T)]"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c "import jax; print('jax', jax.__version__, jax.devices())"
  SW="$PY -m fhc_jax.cli sweep --overwrite --quiet --algo nn-constrained --seeds 8"
  G="--grid visit_weight_power=0,0.5,1 --grid logit_step=1,2,4 --grid actor_step.init=0.03,0.1 --grid multiplier_gain=0.05,0.2"
  step 150 $SW --out $R/nn_e8 --set actor_epochs=8 $G
  step 150 $SW --out $R/nn_e16 --set actor_epochs=16 ${G/visit_weight_power=0,0.5,1/visit_weight_power=0.5,1}
  $PY benchmarks/tuning_report.py $R/nn_e8 $R/nn_e16 --top 8
  step 120 $PY benchmarks/gpu/heldout.py --out $R --top 2 --seeds 10 \
      --sweep $R/nn_e8 "--set actor_epochs=8" --sweep $R/nn_e16 "--set actor_epochs=16"
  step 90 $PY benchmarks/battery.py --learners nn-constrained --batch-sizes 4096,65536 \
      --speed-iterations 5 --repeats 3 --out $R/battery_gpu.json
} 2>&1 | tee $OUT/log.txt
