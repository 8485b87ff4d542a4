"""Interop overhead: K rollouts of ``from_gymnax(CartPole-v1)`` through fhc_jax versus the same
gymnax environment stepped directly with ``vmap``/``scan``, in the same run.

All rows: gymnax CartPole-v1 (default params), horizon H = 200, the uniformly random policy
(``fhc_jax.uniform_random_policy(2)``, which draws its action from a key), the registered
position cost (1 per stage with |x| > 1.0) and the episode totals of reward and cost
accumulated in the loop carry. Rows:

* ``fhc_jax.rollout_returns``: ``from_gymnax`` wrapper (absorbing after termination, costs from
  ``cost_fn``), fhc_jax's Monte-Carlo rollout (all step keys drawn before the scan);
* ``gymnax step_env``: the bare gymnax transition in a hand-written ``vmap``/``scan`` loop (split
  the key per step, action, ``step_env``, cost), no absorbing and no reset: the floor;
* ``gymnax step``: gymnax's public ``step`` (auto-reset: it also runs ``reset_env`` every step);
* ``gymnax step_env, keys first``: the bare loop with each episode's (H, 2) step keys split
  before its scan, as fhc_jax's rollout does: what remains is the wrapper's own cost (the
  absorbing select and the stored observation).

fhc_jax's rollout also draws its keys with an unrolled threefry (``fhc_jax.rollout``), which
is much faster than jax's rolled threefry loop on CPU, hence its lead over the direct loops.

The speed ratio is (direct run time) / (fhc_jax run time); the target is >= 0.8 against
``gymnax step_env``. ``fhc_jax.rollout`` (full trajectories) is timed too once it supports
non-tabular environments (it records ``state_index`` today, so the row says why it is missing).
Compile time is measured apart (``jit(f).lower(key).compile()``); run time is the median of
``--repeats`` calls, each ending in ``jax.block_until_ready``.

Usage::

    python benchmarks/gymnax_interop.py [--episodes 4096] [--horizon 200] [--repeats 11]

Results go to ``benchmarks/results/gymnax_interop.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from timing import provenance

import fhc_jax as fhc
from fhc_jax.envs.gymnax_tasks import cartpole
from fhc_jax.experiment.rundir import machine_info


def _time(fn, repeats: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(jax.random.key(0)).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(jax.random.key(1)))  # warm-up
    times = []
    for r in range(repeats):
        key = jax.random.key(100 + r)
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(key))
        times.append(time.perf_counter() - t0)
    return compile_s, float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=4096)
    parser.add_argument("--horizon", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "gymnax_interop.json"))
    args = parser.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured
    k, h = args.episodes, args.horizon

    env = cartpole(horizon=h)
    params = env.default_params
    gx, gx_params = env.gymnax_env, params.env_params
    policy = fhc.uniform_random_policy(2)
    cost_fn = env._cost_fn

    def fhc_returns(key):
        out = fhc.rollout_returns(key, env, params, policy, k)
        return out.rewards, out.costs

    def fhc_rollout(key):
        t = fhc.rollout(key, env, params, policy, k)
        return t.episode_rewards, t.episode_costs

    def direct(auto_reset: bool, keys_first: bool = False):
        def one(key):
            k_reset, k_loop = jax.random.split(key)
            obs, state = gx.reset_env(k_reset, gx_params)

            def body(carry, xs):
                obs, state, total_r, total_c = carry
                h_, key = xs
                k_act, k_step = (key[0], key[1]) if keys_first else jax.random.split(key)
                action = policy(k_act, obs, h_)
                if auto_reset:
                    obs, new, reward, _, _, _ = gx.step(k_step, state, action, gx_params)
                else:
                    obs, new, reward, _, _ = gx.step_env(k_step, state, action, gx_params)
                cost = cost_fn(state, action, new, gx_params)
                return (obs, new, total_r + reward, total_c + cost), None

            init = (obs, state, jnp.zeros(()), jnp.zeros(1))
            keys = jax.random.split(k_loop, (h, 2)) if keys_first else jax.random.split(k_loop, h)
            xs = (jnp.arange(h, dtype=jnp.int32), keys)
            (_, _, total_r, total_c), _ = jax.lax.scan(body, init, xs)
            return total_r, total_c

        return lambda key: jax.vmap(one)(jax.random.split(key, k))

    rows = {}
    candidates = {
        "fhc_jax.rollout_returns": fhc_returns,
        "fhc_jax.rollout": fhc_rollout,
        "gymnax step_env": direct(False),
        "gymnax step": direct(True),
        "gymnax step_env, keys first": direct(False, keys_first=True),
    }
    for name, fn in candidates.items():
        try:
            compile_s, run_s = _time(fn, args.repeats)
        except NotImplementedError as err:
            rows[name] = {"missing": str(err)}
            continue
        rows[name] = {"compile_s": round(compile_s, 3), "run_s": run_s, "env_steps_per_s": k * h / run_s}
    base = rows["gymnax step_env"]["run_s"]
    for row in rows.values():
        if "run_s" in row:
            row["speed_vs_step_env"] = base / row["run_s"]

    print(
        f"CartPole-v1, K = {k}, H = {h}, uniform random policy, median of {args.repeats} ({jax.devices()[0].platform})"
    )
    print(f"{'loop':<30} {'compile s':>9} {'run ms':>9} {'env-steps/s':>12} {'vs step_env':>11}")
    for name, row in rows.items():
        if "run_s" not in row:
            print(f"{name:<30} not timed: {row['missing']}")
            continue
        print(
            f"{name:<30} {row['compile_s']:>9.2f} {1e3 * row['run_s']:>9.1f} {row['env_steps_per_s'] / 1e6:>11.1f}M "
            f"{row['speed_vs_step_env']:>10.2f}x"
        )
    ratio = rows["fhc_jax.rollout_returns"]["speed_vs_step_env"]
    print(f"interop speed ratio (fhc_jax.rollout_returns vs gymnax step_env): {ratio:.2f}x (target >= 0.8x)")
    out = {
        "benchmark": "gymnax_interop",
        "env": "gymnax CartPole-v1 via from_gymnax (position cost)",
        "episodes": k,
        "horizon": h,
        "repeats": args.repeats,
        "rows": rows,
        "speed_ratio": ratio,
        "target": 0.8,
        "machine": machine_info(),
        **source,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
