#!/usr/bin/env bash
# One device session: BatteryStorage, NN-Constrained and FH-Constrained (sampled path, default
# lengths) against the multiplier's windup: multiplier_max, proportional gain and integral step
# (in the learners' scaled units), 4 tuning seeds, each final policy judged by Monte-Carlo
# (run.eval_episodes episodes) against the discretized reference (77.5 EUR/day at 1 cycle).
# Usage (on the GPU machine, repository root): OUT=/some/dir bash benchmarks/gpu/battery_round1.sh
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
R=$OUT/battery_round1; mkdir -p $R
step() { local t=$1; shift; echo "=== [$(date +%T)] $*"; timeout "$t" "$@"; echo "=== rc=$? [$(date +%T)]"; }
{
  SW="$PY -m fhc_jax.cli sweep --overwrite --quiet --env battery --seeds 4 --set run.eval_episodes=20000"
  step 100 $SW --algo nn-constrained --out $R/nn --grid multiplier_max=20,2 --grid multiplier_gain=0.05,0.005 \
      --grid multiplier_step.init=1e-3,1e-4 --grid logit_step=1,4
  step 80 $SW --algo fh-constrained --out $R/fh --grid multiplier_max=20,2 --grid multiplier_gain=0.005,0.0005 \
      --grid multiplier_step.init=1e-4,1e-5
  $PY benchmarks/tuning_report.py $R/nn $R/fh --top 6
} 2>&1 | tee $OUT/log.txt
