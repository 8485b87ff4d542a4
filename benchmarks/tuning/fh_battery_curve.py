"""Learning curves of FH-Constrained on ``BatteryStorage`` per seed (issue 12): the
Monte-Carlo evaluations that training records every ``eval_every`` updates (``eval_episodes``
episodes of the reported, Polyak-averaged policy, fixed evaluation key) and the multiplier, for
runs longer than the default, to see whether a seed still improves or has settled.

Usage::

    python benchmarks/tuning/fh_battery_curve.py OUT.json [--iterations 7500] [--seeds heldout:3100]
        ['{"overrides": ...}']
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from battery_learner import seed_key

import fhc_jax as fhc
from fhc_jax.algos import fh_constrained as fc
from fhc_jax.experiment import judge
from fhc_jax.experiment.rundir import write_json_atomic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("overrides", nargs="?", default="{}")
    parser.add_argument("--iterations", type=int, default=7500)
    parser.add_argument("--seeds", default="heldout:3100")
    parser.add_argument("--num-seeds", type=int, default=5)
    args = parser.parse_args()
    env = fhc.BatteryStorage()
    params = env.default_params
    reference = judge.reference_optimum(env, params, 20_000)
    cfg = fc.Config(num_iterations=args.iterations, **json.loads(args.overrides))
    t0 = time.perf_counter()
    out = jax.block_until_ready(jax.jit(jax.vmap(fc.make_train(env, params, cfg)))(
        jax.random.split(seed_key(args.seeds), args.num_seeds)))
    wall = time.perf_counter() - t0
    ex = out.metrics.exact
    its = np.asarray(ex.iteration[0])
    frac = np.asarray(ex.reward) / reference.reward  # (seeds, E)
    costs = np.asarray(ex.costs)[..., 0]
    nu = np.asarray(out.metrics.multipliers)[..., 0]  # (seeds, N)
    marks = [i for i in (1000, 2500, 4000, 5000, 6000, 7500, 10000) if i <= args.iterations]
    for s in range(args.num_seeds):
        cells = " ".join(f"{m}: {100 * frac[s, list(its).index(m)]:.1f}% c {costs[s, list(its).index(m)]:.3f} "
                         f"nu {nu[s, m - 1]:.1f}" for m in marks if m in its)
        print(f"seed {s}: {cells}", flush=True)
    write_json_atomic(Path(args.out), {
        "seeds": args.seeds, "iterations": args.iterations, "overrides": json.loads(args.overrides),
        "reference_reward": reference.reward, "eval_episodes": cfg.eval_episodes, "wall_s": wall,
        "evaluated_at": its.tolist(), "fraction_of_reference": frac.tolist(), "costs": costs.tolist(),
        "multipliers_every_100": nu[:, 99::100].tolist()})
    print("wrote", args.out, f"({wall:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
