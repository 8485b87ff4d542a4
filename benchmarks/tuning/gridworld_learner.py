"""One learner on the default ``GridWorld`` (10x10, H = 100, alpha = 25) with config overrides:
R seeds in one ``jax.jit(jax.vmap(train))`` call, each final policy judged exactly against
``fhc_jax.solve``'s optimum (issue 13's scale: reward as % of the optimum, feasible = cost
within 1.02 alpha, learned multiplier against nu*).

Usage::

    python benchmarks/tuning/gridworld_learner.py LEARNER '{"observation": "one_hot", "depth": 0}' OUT.json
        [--seeds fold:7000] [--num-seeds 5]

A dict value changes fields of a schedule default (``{"actor_step": {"init": 0.01}}``).
LEARNER is one of nn_constrained, ecop, fh_constrained. ``--seeds fold:N`` (default
``fold:7000``) trains the seeds ``fold_in(key(0), N + i)``, i < R (the form of the held-out
seeds ``fold_in(key(0), 1000 + i)`` in docs/algorithms/ecop.md; 7000 is a set no default was
chosen on); ``--seeds split`` uses ``split(key(0), R)``, the learner benchmarks' seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.envs import GridWorld
from fhc_jax.experiment import judge
from fhc_jax.experiment.machine import machine_info
from fhc_jax.experiment.rundir import write_json_atomic

LEARNERS = ("nn_constrained", "ecop", "fh_constrained")


def seed_keys(which: str, num: int) -> jax.Array:
    if which == "split":
        return jax.random.split(jax.random.key(0), num)
    if which.startswith("fold:") and which[5:].isdigit():
        base = int(which[5:])
        return jnp.stack([jax.random.fold_in(jax.random.key(0), base + i) for i in range(num)])
    raise SystemExit(f"gridworld_learner: --seeds must be 'split' or 'fold:N' (N a non-negative integer), found {which!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("learner", choices=LEARNERS)
    parser.add_argument("overrides", help="JSON dict of Config fields")
    parser.add_argument("out")
    parser.add_argument("--seeds", default="fold:7000")
    parser.add_argument("--num-seeds", type=int, default=5)
    args = parser.parse_args()
    if args.num_seeds < 1:
        raise SystemExit(f"gridworld_learner: --num-seeds must be >= 1, found {args.num_seeds}")
    keys = seed_keys(args.seeds, args.num_seeds)
    module = importlib.import_module(f"fhc_jax.algos.{args.learner}")
    overrides = json.loads(args.overrides)
    base = module.Config()
    fields = {k: dataclasses.replace(getattr(base, k), **v) if isinstance(v, dict) else v for k, v in overrides.items()}
    config = module.Config(**fields)  # validated before compiling
    env = GridWorld()
    params = env.default_params
    cmdp = env.to_cmdp(params)
    best = judge.optimum(cmdp)
    train = module.make_train(env, params, config)
    t0 = time.perf_counter()
    out = jax.block_until_ready(jax.jit(jax.vmap(train))(keys))
    wall = time.perf_counter() - t0
    nu = np.asarray(out.state.multipliers).reshape(args.num_seeds, -1)
    judged, _ = judge.judge_policies(cmdp, module.policy_table(out.state, env, params), optimum=best, multipliers=nu)
    pct = 100 * np.asarray(judged.fraction_of_optimum)
    cost = np.asarray(judged.costs[:, 0])
    print(f"{args.learner} {json.dumps(overrides)} seeds {args.seeds} x {args.num_seeds}, wall {wall:.0f} s "
          f"(compile included); optimum {best.reward:.2f}, nu* {float(best.multipliers[0]):.3f}")
    print("  % of the optimum per seed: " + " ".join(f"{x:.1f}" for x in pct)
          + f" | worst {pct.min():.1f} mean {pct.mean():.1f}")
    print(f"  cost {cost.min():.2f}-{cost.max():.2f} (alpha 25), within 1.02 alpha {judged.feasible_seeds}/{args.num_seeds}"
          f" | learned nu {nu[:, 0].min():.3f}-{nu[:, 0].max():.3f}")
    write_json_atomic(args.out, {"learner": args.learner, "config": overrides, "seeds": args.seeds,
                                 "num_seeds": args.num_seeds, "wall_s": wall, "machine": machine_info(),
                                 "optimum": best.as_dict(), "summary": judged.summary(), "rows": judged.rows()})


if __name__ == "__main__":
    main()
