"""CPO benchmark: quality on the default gridworld (judged exactly) and training throughput.

1. **Quality.** Default ``GridWorld`` (10x10, H = 100, alpha = 25), default ``cpo.Config`` with
   the network input "xy" (paper Env 1) and "xyt" (Env 2), 5 seeds in one
   ``jax.jit(jax.vmap(train))`` call (wall time includes compilation, reported separately too).
   Each seed's final policy is evaluated exactly (``fhc_jax.evaluate``) and compared with
   ``fhc_jax.solve``'s constrained optimum.
2. **Speed.** Training env-steps/s (rollout + CPO update, whole loop in one jit, compile
   excluded via ``jit(...).lower().compile()``, median of several runs) at K = 256 and 4096,
   for both inputs.

Usage::

    python benchmarks/cpo.py [--quick] [--skip-quality] [--skip-speed]

Results go to ``benchmarks/results/cpo.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from judge import machine_info, train_and_judge
from timing import compile_and_time, provenance

from fhc_jax.algos import cpo
from fhc_jax.envs import GridWorld


def quality(env, params, config: cpo.Config, seeds: int = 5) -> dict:
    j = train_and_judge(
        env, params, cpo.make_train(env, params, config), lambda st: cpo.policy_table(st, env, params), seeds
    )
    m = j.out.metrics
    for row, nu in zip(j.rows, np.asarray(j.out.state.multipliers[:, 0])):
        row["final_multiplier_nu"] = float(nu)
    last = max(1, int(np.ceil(10_000 / config.episodes_per_iteration)))
    return {
        "observation": config.observation,
        **j.summary(),
        "last_10000_episodes_mean_reward": float(np.mean(m.reward[:, -last:])),
        "last_10000_episodes_mean_cost": float(np.mean(m.costs[:, -last:, 0])),
        "accepted_step_rate": float(np.mean(np.asarray(m.step_fraction) > 0)),
        "case_counts": np.bincount(np.asarray(m.optimisation_case).ravel(), minlength=5).tolist(),
    }


def steps_per_second(env, params, observation: str, k: int, iterations: int, repeats: int = 3) -> dict:
    cfg = cpo.Config(num_iterations=iterations, episodes_per_iteration=k, eval_every=0, observation=observation)
    compile_s, t = compile_and_time(cpo.make_train(env, params, cfg), repeats)
    return {
        "observation": observation,
        "K": k,
        "iterations": iterations,
        "compile_s": compile_s,
        "run_s": t,
        "env_steps_per_s": iterations * k * env.horizon / t,
        "episodes_per_s": iterations * k / t,
        "updates_per_s": iterations / t,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cpo.json"))
    args = parser.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured

    env = GridWorld()
    params = env.default_params
    result: dict = {
        **source,
        "machine": machine_info(),
        "default_config": {k: v for k, v in vars(cpo.Config()).items()},
    }
    if not args.skip_quality:
        result["quality"] = {}
        for obs in ("xy", "xyt"):
            cfg = cpo.Config(observation=obs)
            if args.quick:
                cfg = cfg.replace(num_iterations=20, eval_every=10)
            q = quality(env, params, cfg)
            result["quality"][obs] = q
            print(
                f"[quality/{obs}] {q['wall_s_including_compile']:.1f}s (compile {q['compile_s']:.1f}s); optimum "
                f"{q['optimum_reward']:.2f} at cost {q['optimum_cost']:.2f}"
            )
            print("   seed | exact reward | gap to opt | exact cost | nu")
            for r in q["seeds"]:
                print(
                    f"   {r['seed']:4d} | {r['exact_reward']:12.2f} | {r['gap_to_optimum']:10.2f} | "
                    f"{r['exact_cost']:10.2f} | {r['final_multiplier_nu']:.3f}"
                )
            print(
                f"   mean | {q['mean_exact_reward']:12.2f} | {q['optimum_reward'] - q['mean_exact_reward']:10.2f} | "
                f"{q['mean_exact_cost']:10.2f} |   (last 10k episodes: reward "
                f"{q['last_10000_episodes_mean_reward']:.2f}, "
                f"cost {q['last_10000_episodes_mean_cost']:.2f})"
            )
    if not args.skip_speed:
        rows = []
        for obs in ("xy", "xyt"):
            for k, iters in ((256, 10), (4096, 5)):
                row = steps_per_second(env, params, obs, k, iters if not args.quick else 3, repeats=3)
                rows.append(row)
                print(
                    f"[speed] {obs:3s} K={k:5d}: {row['env_steps_per_s'] / 1e6:.2f}M env-steps/s, "
                    f"{row['updates_per_s']:.1f} updates/s; compile {row['compile_s']:.1f}s"
                )
        result["speed"] = rows
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
