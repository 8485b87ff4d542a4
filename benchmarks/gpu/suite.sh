#!/usr/bin/env bash
# One device session: GPU speed benchmarks and vmapped hyperparameter sweeps, every step bounded.
# Usage (on the GPU machine, repository root): OUT=/some/dir bash benchmarks/gpu/suite.sh
# Results: $OUT/suite.tgz (benchmark JSONs, sweep folders) and $OUT/log.txt.
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
R=/tmp/gpu_results; rm -rf $R; mkdir -p $R
step() { local t=$1; shift; echo "=== [$(date +%T)] $*"; timeout "$t" "$@"; echo "=== rc=$? [$(date +%T)]"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
  SW="$PY -m fhc_jax.cli sweep --overwrite --seeds 5 ${EXTRA:-}"
  # FH-Constrained, default length (1600 updates, K = 256): 96 configurations x 5 seeds in one program
  step ${T_FH:-120} $SW --out $R/fh1600 --grid actor_step.init=1,2 --grid multiplier_step.init=5e-5,1e-4,2e-4 \
      --grid multiplier_gain=0.002,0.005,0.01,0.02 --grid trace=0.5,0.8 --grid theta_bound=4,8
  # FH-Constrained, 3000 updates
  step ${T_FH:-120} $SW --out $R/fh3000 --set num_iterations=${FH_LONG:-3000} --grid actor_step.init=1,2 \
      --grid actor_step.power=0.6,0.75 --grid multiplier_step.init=5e-5,1e-4,2e-4 --grid multiplier_gain=0.005,0.01,0.02
  # NN-Constrained, default length (1500 updates, K = 512)
  step ${T_NN:-150} $SW --algo nn-constrained --out $R/nn1500 --grid logit_step=1,2,4 --grid actor_step.init=0.03,0.1 \
      --grid multiplier_gain=0.02,0.05 --grid multiplier_step.init=1e-3,3e-3
  # speed on the GPU
  [ -n "${SKIP_BENCH:-}" ] && exit 0
  step 40 $PY benchmarks/env_throughput.py --batch-sizes 1,4096,65536,262144 --out $R/env_throughput_gpu.json
  step 60 $PY benchmarks/fh_constrained.py --skip-quality --batch-sizes 1,256,4096,65536 --out $R/fh_constrained_gpu.json
  step 50 $PY benchmarks/nn_constrained.py --skip-quality --batch-sizes 256,4096,65536 --out $R/nn_constrained_gpu.json
} 2>&1 | tee $OUT/log.txt
tar czf $OUT/suite.tgz -C $R .
