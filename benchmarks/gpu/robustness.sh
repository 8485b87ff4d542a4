#!/usr/bin/env bash
# The robustness suite (benchmarks/robustness.py) in seven parallel slices on one GPU machine,
# balanced by the cells' CPU wall times; each slice merges into its own $OUT/robustness_<slice>.json
# after every cell (a slice cut by LIMIT keeps its finished cells). Merge the parts into
# benchmarks/results/robustness.json with `python benchmarks/gpu/merge_robustness.py $OUT/robustness_*.json`.
# Usage (repository root, GPU machine): OUT=/some/dir LIMIT=480 BENCHMARK_REVISION=<the copied revision> \
#   bash benchmarks/gpu/robustness.sh
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PY:-python3}
LIMIT=${LIMIT:-480}
slice() {
  local name=$1; shift
  timeout "$LIMIT" $PY benchmarks/robustness.py "$@" --out "$OUT/robustness_$name.json" 2>&1 | sed -u "s/^/[$name] /"
}
{
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  slice A --learners ecop,nn_constrained --tasks pendulum &
  sleep 2; slice B --learners cpo,ppo_lagrangian,saute,fh_constrained --tasks pendulum &
  sleep 2; slice C --tasks battery &
  sleep 2; slice D --tasks gridworld &
  sleep 2; slice E --tasks battery_continuous,garnet_s100,garnet_m2 &
  sleep 2; slice F --tasks gridworld5_tight,gridworld5_loose,garnet_s20,garnet_s50 &
  sleep 2; slice G --tasks inventory,inventory_own,inventory_r100_c0.01,inventory_r0.01_c100 &
  wait
} 2>&1 | tee "$OUT/log.txt"
