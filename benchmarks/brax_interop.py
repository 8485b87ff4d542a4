"""Brax interop: what stepping a Brax environment through ``fhc_jax.envs.from_brax`` costs on
this machine, next to Brax stepped directly, and (``--train``) a learner's plain ``Config()``
trained on it and judged by Monte-Carlo.

**Throughput** (all rows: Brax ``inverted_pendulum``, K episodes of H stages, actions uniform in
[-1, 1], the control-effort cost |a|^2 and the episode totals of reward and cost accumulated in
the loop carry), per Brax physics pipeline (``--backends``):

* ``brax jit(vmap(step)) in lax.scan``: the bare Brax loop, K states stepped by
  ``jax.vmap(env.step)`` inside one ``lax.scan`` over the H stages (no absorbing), returning
  the totals and the final observations (the pendulum's reward is a constant 1, so without an
  output that depends on the states XLA would skip the physics): the floor;
* ``fhc_jax.rollout_returns``: ``from_brax`` (absorbing after ``done``, costs from ``cost_fn``)
  in fhc_jax's Monte-Carlo rollout, the loop of the learners' evaluations and of the judge;
* ``fhc_jax.rollout``: the same episodes with full trajectories recorded (what the learners
  train on).

Compile time is measured apart (``jit(f).lower(key).compile()``); run time is the median of
``--repeats`` calls, each ending in ``jax.block_until_ready``, the three loops called in turn
(so that on a shared machine they see the same load; the load average is recorded).

**Training** (``--train``): ``--learner``'s plain ``Config()`` on ``brax:inverted_pendulum``
(``fhc_jax.envs.brax_interop.brax_task``: H = 100, the control-effort budget ``--alpha``
(default 1), the "spring" pipeline), ``--seeds`` seeds in one ``jit(vmap(train))``, each returned policy judged
by ``fhc_jax.rollout_returns`` over ``--episodes`` episodes (mean and 95% half-width; a seed is
within budget when the upper end of its cost interval is at most 1.02 alpha), next to two
yardsticks judged the same way: zero force (no control cost) and uniformly random actions.

Usage::

    python benchmarks/brax_interop.py [--episodes-per-run 1024] [--horizon 100] [--repeats 7]
                                      [--backends spring,generalized] [--train] [--learner ppo_lagrangian] [--alpha 1]

Results go to ``benchmarks/results/brax_interop.json`` (needs brax: ``pip install -e ".[brax]"``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from timing import provenance

import fhc_jax as fhc
from fhc_jax.envs.brax_interop import brax_task, control_effort, from_brax, import_brax
from fhc_jax.experiment.judge import Z95, cost_limits
from fhc_jax.experiment.rundir import machine_info

ENV = "inverted_pendulum"


def _compile(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(jax.random.key(0)).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(jax.random.key(1)))  # warm-up
    return compile_s, compiled


def _interleaved(compiled: dict, repeats: int) -> dict[str, float]:
    """Median run time of each compiled loop, the loops run in turn (round-robin), so that all
    of them see the same share of a machine that others use too."""
    times: dict[str, list[float]] = {name: [] for name in compiled}
    for r in range(repeats):
        for name, fn in compiled.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(jax.random.key(100 + r)))
            times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(t)) for name, t in times.items()}


def throughput(backend: str, k: int, h: int, repeats: int) -> dict:
    """The three loops of the module docstring on one Brax pipeline."""
    brax = import_brax()
    benv = brax.envs.get_environment(ENV, backend=backend)
    env = from_brax(benv, horizon=h, cost_fn=control_effort, alpha=10.0)
    params, policy, d = env.default_params, fhc.random_policy(env), benv.action_size

    def raw(key):
        k_reset, k_act = jax.random.split(key)
        states = jax.vmap(benv.reset)(jax.random.split(k_reset, k))

        def body(carry, kh):
            states, total_r, total_c = carry
            a = jax.random.uniform(kh, (k, d), jnp.float32, -1.0, 1.0)
            new = jax.vmap(benv.step)(states, a)
            return (new, total_r + new.reward, total_c + jnp.sum(a * a, axis=-1)), None

        init = (states, jnp.zeros(k), jnp.zeros(k))
        (last, total_r, total_c), _ = jax.lax.scan(body, init, jax.random.split(k_act, h))
        return total_r, total_c, last.obs  # the final observations: XLA cannot skip the physics

    def returns(key):  # the reward depends on the physics through the absorbing state
        out = fhc.rollout_returns(key, env, params, policy, k)
        return out.rewards, out.costs

    def trajectories(key):
        t = fhc.rollout(key, env, params, policy, k)
        return t.observations, t.actions, t.rewards, t.costs

    loops = {
        "brax jit(vmap(step)) in lax.scan": raw,
        "fhc_jax.rollout_returns": returns,
        "fhc_jax.rollout": trajectories,
    }
    compiled, compile_s = {}, {}
    for name, fn in loops.items():
        compile_s[name], compiled[name] = _compile(fn)
    run_s = _interleaved(compiled, repeats)
    rows = {}
    for name in loops:
        rows[name] = {
            "compile_s": round(compile_s[name], 2),
            "run_s": run_s[name],
            "env_steps_per_s": k * h / run_s[name],
        }
        print(
            f"  {backend:<12} {name:<34} compile {compile_s[name]:6.1f} s  run {1e3 * run_s[name]:8.1f} ms  "
            f"{k * h / run_s[name] / 1e3:8.1f}k steps/s",
            flush=True,
        )
    base = rows["brax jit(vmap(step)) in lax.scan"]["run_s"]
    for row in rows.values():
        row["speed_vs_brax"] = base / row["run_s"]
    return rows


def monte_carlo(env, params, policy, episodes: int) -> dict:
    """Mean and 95% half-width of the reward and of each cost over ``episodes`` episodes."""
    out = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(jax.random.key(1), env, params, policy, episodes)
    r, c = np.asarray(out.rewards, np.float64), np.asarray(out.costs, np.float64)
    hw = Z95 / np.sqrt(episodes)
    return {
        "reward": float(r.mean()),
        "reward_half_width": float(hw * r.std(ddof=1)),
        "costs": c.mean(0).tolist(),
        "cost_half_width": (hw * c.std(0, ddof=1)).tolist(),
    }


def train(learner: str, seeds: int, episodes: int, alpha: float) -> dict:
    """``learner``'s plain Config() on brax:inverted_pendulum, judged (module docstring)."""
    module = importlib.import_module(f"fhc_jax.algos.{learner}")
    env = brax_task(ENV, horizon=100, alpha=alpha, cost="control", backend="spring")
    params = env.default_params
    thresholds = np.asarray(env.thresholds(params), np.float64)
    limit = cost_limits(thresholds)
    keys = jax.random.split(jax.random.key(0), seeds)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(module.make_train(env, params, module.Config()))).lower(keys).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - t0
    rows = []
    for i in range(seeds):
        state = jax.tree.map(lambda x, i=i: x[i], out.state)
        play_env, play_params = fhc.algos.learner.play_environment(module, state, env, params)
        mc = monte_carlo(play_env, play_params, module.policy(state, play_env, play_params), episodes)
        upper = np.asarray(mc["costs"]) + np.asarray(mc["cost_half_width"])
        mc.update(
            seed=i,
            cost_upper_95=upper.tolist(),
            within_budget=bool(np.all(upper <= limit)),
            status_ok=bool(np.asarray(out.status.ok)[i]),
        )
        rows.append(mc)
        print(
            f"  seed {i}: reward {mc['reward']:.2f} +- {mc['reward_half_width']:.2f}, cost {mc['costs'][0]:.2f} "
            f"+- {mc['cost_half_width'][0]:.2f} (alpha {alpha:g}), within budget {mc['within_budget']}",
            flush=True,
        )
    zero = lambda key, obs, h: jnp.zeros((1,), jnp.float32)
    yardsticks = {
        "zero force": monte_carlo(env, params, zero, episodes),
        "uniformly random": monte_carlo(env, params, fhc.random_policy(env), episodes),
    }
    for name, mc in yardsticks.items():
        print(
            f"  {name}: reward {mc['reward']:.2f} +- {mc['reward_half_width']:.2f}, cost {mc['costs'][0]:.2f}",
            flush=True,
        )
    config = module.Config()
    return {
        "learner": learner,
        "config": "Config()",
        "env": f"brax:{ENV} (spring), H = 100, cost |a|^2, alpha = {alpha:g}",
        "seeds": seeds,
        "episodes": episodes,
        "num_iterations": config.num_iterations,
        "episodes_per_iteration": config.episodes_per_iteration,
        "compile_s": round(compile_s, 1),
        "run_s": round(run_s, 1),
        "wall_s": round(compile_s + run_s, 1),
        "seed_results": rows,
        "within_budget_seeds": sum(r["within_budget"] for r in rows),
        "yardsticks": yardsticks,
        "machine": machine_info(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes-per-run", type=int, default=1024)
    parser.add_argument("--horizon", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backends", default="spring,generalized")
    parser.add_argument("--train", action="store_true", help="also train --learner's plain Config() and judge it")
    parser.add_argument("--learner", default="ppo_lagrangian")
    parser.add_argument("--alpha", type=float, default=1.0, help="the control-effort budget of --train")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=10_000, help="Monte-Carlo episodes per judged policy")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "brax_interop.json"))
    args = parser.parse_args()
    k, h = args.episodes_per_run, args.horizon
    source = provenance()  # the command and the git revision, read before anything is measured
    brax = import_brax()

    print(f"Brax {ENV}, K = {k}, H = {h}, uniform actions, median of {args.repeats} ({jax.devices()[0].platform})")
    rows = {}
    for backend in [b for b in args.backends.split(",") if b]:
        for name, row in throughput(backend, k, h, args.repeats).items():
            rows[f"{backend}: {name}"] = row
    print(f"{'pipeline: loop':<48} {'compile s':>9} {'run ms':>9} {'steps/s':>10} {'vs brax':>8}")
    for name, row in rows.items():
        print(
            f"{name:<48} {row['compile_s']:>9.1f} {1e3 * row['run_s']:>9.1f} {row['env_steps_per_s'] / 1e3:>9.1f}k "
            f"{row['speed_vs_brax']:>7.2f}x"
        )
    out = {
        **source,
        "benchmark": "brax_interop",
        "env": f"brax {ENV} via from_brax (control-effort cost |a|^2)",
        "brax_version": getattr(brax, "__version__", "unknown"),
        "episodes": k,
        "horizon": h,
        "repeats": args.repeats,
        "rows": rows,
        "machine": machine_info(),
        # the machine may be shared: the load during the run puts the speeds in context
        "load_average_1_5_15_min": [round(x, 1) for x in os.getloadavg()],
    }
    path = Path(args.out)
    if args.train:
        print(f"training {args.learner} Config() on brax:{ENV}, {args.seeds} seeds")
        out["training"] = train(args.learner, args.seeds, args.episodes, args.alpha)
        t = out["training"]
        print(
            f"{args.learner}: {t['within_budget_seeds']}/{args.seeds} seeds within budget; "
            f"compile {t['compile_s']} s, train {t['run_s']} s"
        )
    elif path.exists():  # keep the last training record
        previous = json.loads(path.read_text())
        if "training" in previous:
            out["training"] = previous["training"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
