#!/usr/bin/env bash
# One device session: GPU training throughput on BatteryStorage (the learners' sampled path) and
# the GPU speed rows of the environment and the tabular learners. Every step bounded.
# Usage (on the GPU machine, repository root): OUT=/some/dir bash benchmarks/gpu/sampled_path.sh
# Results: $OUT/*.json and $OUT/log.txt.
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
step() { local t=$1; shift; echo "=== [$(date +%T)] $*"; timeout "$t" "$@"; echo "=== rc=$? [$(date +%T)]"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
  step 200 $PY benchmarks/battery.py --learners nn-constrained,fh-constrained --batch-sizes 4096,65536 \
      --speed-iterations 5 --repeats 3 --out $OUT/battery_gpu.json
  step 60 $PY benchmarks/env_throughput.py --batch-sizes 4096,65536,262144,1048576 --out $OUT/env_throughput_gpu.json
  step 100 $PY benchmarks/fh_constrained.py --skip-quality --batch-sizes 4096,65536,262144 --out $OUT/fh_constrained_gpu.json
  step 100 $PY benchmarks/nn_constrained.py --skip-quality --batch-sizes 4096,65536 --out $OUT/nn_constrained_gpu.json
} 2>&1 | tee $OUT/log.txt
