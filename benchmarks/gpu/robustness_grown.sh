#!/usr/bin/env bash
# The grown robustness suite's cells (the tasks at other thresholds, the rare-event and the
# all-negative tasks) for every learner, and FH- and NN-Constrained on the original exact tasks,
# in 18 parallel slices on one GPU machine; merge as benchmarks/gpu/robustness.sh says.
# Usage (repository root, GPU machine): OUT=/some/dir LIMIT=540 BENCHMARK_REVISION=<rev> bash benchmarks/gpu/robustness_grown.sh
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PY:-python3}
LIMIT=${LIMIT:-540}
N1=maintenance,maintenance_events,garnet_s20_negative,gridworld5_f15,gridworld5_f50,gridworld5_f85
N2=garnet_s20_f15,garnet_s20_f85,garnet_s50_f15,garnet_s50_f50,garnet_s50_f85,garnet_m2_f30
N3=garnet_m2_f85,inventory_f15,inventory_f50,inventory_f85,garnet_s100_f15,garnet_s100_f85
OLD=gridworld5_tight,gridworld5_loose,garnet_s20,garnet_s50,garnet_s100,garnet_m2,inventory,inventory_own,inventory_r100_c0.01,inventory_r0.01_c100
slice() {
  local name=$1; shift
  timeout "$LIMIT" $PY benchmarks/robustness.py "$@" --out "$OUT/robustness_$name.json" 2>&1 | sed -u "s/^/[$name] /"
}
{
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  i=0
  for L in ecop ppo_lagrangian cpo saute; do
    for T in $N1 $N2 $N3; do slice "$L$i" --learners $L --tasks $T & i=$((i+1)); sleep 1; done
  done
  slice fhA --learners fh_constrained --tasks $N1,$N2 & sleep 1
  slice fhB --learners fh_constrained --tasks $N3,$OLD,gridworld,battery & sleep 1
  slice nnA --learners nn_constrained --tasks $N1 & sleep 1
  slice nnB --learners nn_constrained --tasks $N2 & sleep 1
  slice nnC --learners nn_constrained --tasks $N3 & sleep 1
  slice nnD --learners nn_constrained --tasks gridworld,gridworld5_tight,gridworld5_loose,garnet_s20,garnet_s50 & sleep 1
  slice nnE --learners nn_constrained --tasks garnet_s100,garnet_m2,inventory,inventory_own,inventory_r100_c0.01,inventory_r0.01_c100 & sleep 1
  wait
} 2>&1 | tee "$OUT/log.txt"
