"""Where a learner's time per update goes on the default gridworld: its rollout and its update
timed apart (R seeds vmapped, compile excluded, median of 5 calls, ``jax.block_until_ready``).
Used for the comparison's wall-time breakdown in the README ("Reproducing the paper's
comparison").

Usage::

    python benchmarks/tuning/update_profile.py LEARNER [--observation xy] [--seeds 5] [--set FIELD=VALUE ...]

LEARNER is a module of ``fhc_jax.algos`` (saute, ppo_lagrangian, ecop, nn_constrained, ...);
``--set`` takes integer or float values of static or numeric ``Config`` fields.
"""

from __future__ import annotations

import argparse
import importlib
import time

import jax
import numpy as np

from fhc_jax.envs import GridWorld


def median_time(fn, *args, repeats: int = 5) -> float:
    """Median seconds of ``fn(*args)`` after a warm-up call. The train state and batch are
    arguments, not closed-over constants: ``timing.compile_and_time``'s ``train(key)`` form would
    let XLA fold a constant state into the program (the Saute xyt rollout then tabulates its
    270,000 policy rows at compile time and times at 19 ms instead of 266 ms)."""
    jax.block_until_ready(fn(*args))  # compile and warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("learner")
    parser.add_argument("--observation", default=None)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args()
    module = importlib.import_module(f"fhc_jax.algos.{args.learner}")
    fields = {}
    for item in args.set:
        name, _, value = item.partition("=")
        fields[name] = float(value) if any(c in value for c in ".e") else int(value)
    if args.observation is not None:
        fields["observation"] = args.observation
    config = module.Config(**fields)
    algo, env = module.ALGORITHM, GridWorld()
    params = env.default_params
    setup = algo.setup(env, params, config)
    keys = jax.random.split(jax.random.key(0), args.seeds)
    state = jax.vmap(lambda k: algo.init(k, setup, config))(keys)
    rollout = jax.jit(jax.vmap(lambda s, k: algo.rollout(k, s, setup, config)))
    update = jax.jit(jax.vmap(lambda s, b, k: algo.update(s, b, k, setup, config)))
    batch = rollout(state, keys)
    t_roll, t_update = median_time(rollout, state, keys), median_time(update, state, batch, keys)
    print(f"{args.learner} {fields} x {args.seeds} seeds: rollout {1e3 * t_roll:.1f} ms, "
          f"update {1e3 * t_update:.1f} ms per iteration")


if __name__ == "__main__":
    main()
