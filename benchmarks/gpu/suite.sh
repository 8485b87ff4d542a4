#!/usr/bin/env bash
# The GPU rows of docs/benchmarks.md: throughput of the environment, FH-Constrained and
# NN-Constrained on the gridworld, and of NN-Constrained and FH-Constrained on BatteryStorage,
# at batch sizes a CPU cannot hold. Every step is bounded by `timeout`.
# Usage (on the GPU machine, repository root): OUT=/some/dir bash benchmarks/gpu/suite.sh
# Results: $OUT/*.json (copy them to benchmarks/results/gpu_<device>/, then run
# `python benchmarks/report.py`) and $OUT/log.txt. Each JSON records the git revision; in a copy
# of the tree without .git (or with a stale one), set BENCHMARK_REVISION to the revision the copy was made from.
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
step() { local t=$1; shift; echo "=== $*"; timeout "$t" "$@"; echo "=== rc=$?"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
  step 180 $PY benchmarks/env_throughput.py --batch-sizes 1,4096,65536,262144 --repeats 5 --out $OUT/env_throughput.json
  step 200 $PY benchmarks/fh_constrained.py --skip-quality --batch-sizes 1,256,4096,65536 --out $OUT/fh_constrained.json
  step 100 $PY benchmarks/nn_constrained.py --skip-quality --batch-sizes 256,4096,65536 --out $OUT/nn_constrained.json
  step 200 $PY benchmarks/battery.py --learners nn-constrained,fh-constrained --batch-sizes 65536,262144 \
      --speed-iterations 5 --repeats 3 --out $OUT/battery_large.json
} 2>&1 | tee $OUT/log.txt
