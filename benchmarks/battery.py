"""BatteryStorage benchmark: training throughput of every learner on its sampled path, and
(optionally) quality judged by Monte-Carlo against the environment's reference policy.

1. **Throughput.** env-steps/s of a whole training run in one jit (rollout through
   ``fhc_jax.rollout`` + update), one seed, compile excluded (``jit(...).lower().compile()``),
   median of several runs, at K = 256 and 4096 episodes per update (``--batch-sizes`` for
   more, e.g. 65536 on a GPU). Learners whose module has no sampled path yet are skipped.
2. **Quality** (``--quality``). Each learner's default ``Config`` (``--iterations`` overrides
   the number of updates), 5 seeds in one ``jax.jit(jax.vmap(train))`` call, each final policy
   judged by Monte-Carlo (``--episodes`` per seed, 95% intervals) against the reference
   policy (the completed optimum of the discretized exact model executed in the continuous
   environment).

Usage::

    python benchmarks/battery.py [--batch-sizes 256,4096] [--quality] [--iterations N]

Results go to ``benchmarks/results/battery.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np
from judge import machine_info
from timing import compile_and_time, provenance

import fhc_jax as fhc
from fhc_jax.algos import cpo, fh_constrained, nn_constrained, ppo_lagrangian
from fhc_jax.algos.core.scaffold import play_environment
from fhc_jax.experiment import judge

LEARNERS = {"fh-constrained": fh_constrained, "nn-constrained": nn_constrained, "ppo-lag": ppo_lagrangian, "cpo": cpo}


def has_sampled_path(module) -> bool:
    return module.ALGORITHM.observation_outputs is not None


def throughput(env, params, module, k: int, iterations: int, repeats: int) -> dict:
    cfg = module.Config(num_iterations=iterations, episodes_per_iteration=k, eval_every=0, eval_episodes=2)
    compile_s, t = compile_and_time(module.make_train(env, params, cfg), repeats)
    return {
        "K": k,
        "iterations": iterations,
        "compile_s": compile_s,
        "run_s": t,
        "env_steps_per_s": iterations * k * env.horizon / t,
    }


def quality(
    env,
    params,
    module,
    seeds: int,
    episodes: int,
    iterations: int | None,
    reference,
    config=None,
    train_params=None,
    key=None,
) -> dict:
    """``seeds`` vmapped runs of ``config`` (default: the learner's ``Config()``, with
    ``iterations`` updates if given), each final policy judged by Monte-Carlo (``episodes``)
    against ``reference`` (a ``judgement.Optimum`` or None) on ``params``; the runs train on
    ``train_params`` when given (e.g. a tighter budget than the one judged), else on ``params``,
    with the seeds ``split(key, seeds)`` (default ``key(0)``)."""
    cfg = (
        config
        if config is not None
        else module.Config()
        if iterations is None
        else module.Config(num_iterations=iterations)
    )
    t0 = time.perf_counter()
    out = jax.block_until_ready(
        jax.jit(jax.vmap(module.make_train(env, params if train_params is None else train_params, cfg)))(
            jax.random.split(jax.random.key(0) if key is None else key, seeds)
        )
    )
    wall = time.perf_counter() - t0
    states = [jax.tree.map(lambda x, r=r: x[r], out.state) for r in range(seeds)]
    play_env, play_params = play_environment(module, states[0], env, params)  # Saute: with its budget
    mc = judge.monte_carlo(play_env, play_params, [module.policy(st, play_env, play_params) for st in states], episodes)
    j = judge.judge(
        mc["reward"],
        mc["costs"],
        env.thresholds(params),
        optimum=reference,
        multipliers=np.asarray(out.metrics.multipliers[:, -1]),
        episodes=episodes,
        reward_half_width=mc["reward_half_width"],
        cost_half_width=mc["cost_half_width"],
    )
    return {
        "config": {"num_iterations": cfg.num_iterations, "episodes_per_iteration": cfg.episodes_per_iteration},
        "wall_s": wall,
        "seeds": j.rows(),
        "aggregate": j.summary(),
    }


def print_quality(name: str, q: dict, yardstick: str = "the reference") -> None:
    """One line per seed of a :func:`quality` result."""
    for row in q["seeds"]:
        frac = row.get("fraction_of_optimum")  # None where the yardstick's reward is <= 0
        share = "-" if frac is None else f"{100 * frac:.1f}%"
        print(
            f"[quality] {name:15s} seed {row['seed']}: {row['exact_reward']:9.2f} "
            f"({share} of {yardstick}, gap {row.get('reward_gap', float('nan')):.2f}), cost "
            f"{np.round(row['exact_costs'], 4).tolist()} (95% up to {[round(c[1], 4) for c in row['costs_ci95']]}), "
            f"feasible {row['feasible']} [wall {q['wall_s']:.0f} s]",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", type=lambda v: [int(x) for x in v.split(",")], default=[256, 4096])
    parser.add_argument("--iterations", type=int, default=None, help="updates of the quality runs (default: Config's)")
    parser.add_argument("--speed-iterations", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--learners", default=",".join(LEARNERS))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "battery.json"))
    args = parser.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured

    env = fhc.BatteryStorage()
    params = env.default_params
    learners = {n: LEARNERS[n] for n in args.learners.split(",") if has_sampled_path(LEARNERS[n])}
    result: dict = {
        **source,
        "machine": machine_info(),
        "env": repr(env),
        "horizon": env.horizon,
        "speed": {},
        "quality": {},
    }
    for name, module in learners.items():
        rows = [throughput(env, params, module, k, args.speed_iterations, args.repeats) for k in args.batch_sizes]
        result["speed"][name] = rows
        for r in rows:
            print(
                f"[speed] {name:15s} K={r['K']:>6}: {r['env_steps_per_s'] / 1e6:8.2f}M env-steps/s "
                f"(run {r['run_s']:.3f} s, compile {r['compile_s']:.1f} s)"
            )
    if args.quality:
        reference = judge.reference_optimum(env, params, args.episodes)
        result["reference"] = reference.as_dict()
        print(f"[quality] reference policy: {reference.reward:.2f} EUR/day at {reference.costs.tolist()} cycles")
        for name, module in learners.items():
            q = quality(env, params, module, args.seeds, args.episodes, args.iterations, reference)
            result["quality"][name] = q
            print_quality(name, q)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
