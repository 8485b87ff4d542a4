"""Continuous actions: the four neural learners with Gaussian per-stage policies on
``BatteryStorage(continuous_actions=True)`` and gymnax ``Pendulum-v1`` with a torque-energy
budget.

1. **Throughput**: env-steps/s of a whole training run in one jit, one seed, compile excluded
   (``jit(...).lower().compile()``), median of ``--repeats`` runs, at K = 256 and 4096.
2. **Quality** (``--quality``): each learner's default ``Config`` (``--iterations`` overrides
   the number of updates), 5 seeds in one ``jax.jit(jax.vmap(train))`` call, each final policy
   judged by Monte-Carlo (``--episodes`` per seed, 95% intervals; "feasible" means the cost's
   upper 95% bound is within the 2% tolerance of alpha). On the battery the yardstick is the
   environment's reference (the optimum of the discretized exact model executed in the
   continuous environment); on the pendulum, PPO-Lagrangian run with the budget switched off
   (alpha = 1e9: its multiplier stays 0) and the same training budget.

Usage::

    python benchmarks/continuous_actions.py --task battery|pendulum [--quality] [--iterations N]

Results go to ``benchmarks/results/continuous_<task>.json`` (``--out``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from battery import print_quality, quality, throughput
from judge import machine_info
from timing import provenance

import fhc_jax as fhc
from fhc_jax.algos import cpo, ecop, nn_constrained, ppo_lagrangian
from fhc_jax.envs import gymnax_tasks
from fhc_jax.experiment import judge
from fhc_jax.experiment.judgement import Optimum
from fhc_jax.experiment.rundir import write_json_atomic

LEARNERS = {"nn-constrained": nn_constrained, "ecop": ecop, "ppo-lag": ppo_lagrangian, "cpo": cpo}


def make_task(name: str, alpha: float | None = None):
    if name == "battery":
        env = (
            fhc.BatteryStorage(continuous_actions=True)
            if alpha is None
            else fhc.BatteryStorage(continuous_actions=True, cycle_budget=alpha)
        )
    else:
        env = gymnax_tasks.pendulum() if alpha is None else gymnax_tasks.pendulum(alpha=alpha)
    return env, env.default_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=("battery", "pendulum"), default="battery")
    parser.add_argument("--batch-sizes", type=lambda v: [int(x) for x in v.split(",")], default=[256, 4096])
    parser.add_argument("--iterations", type=int, default=None, help="updates of the quality runs (default: Config's)")
    parser.add_argument("--speed-iterations", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--learners", default=",".join(LEARNERS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured
    out = Path(args.out or Path(__file__).parent / "results" / f"continuous_{args.task}.json")

    env, params = make_task(args.task)
    learners = {n: LEARNERS[n] for n in args.learners.split(",")}
    result: dict = {
        **source,
        "machine": machine_info(),
        "env": repr(env),
        "horizon": env.horizon,
        "action_space": str(env.action_space),
        "speed": {},
        "quality": {},
    }
    if not args.no_speed:
        for name, module in learners.items():
            rows = [throughput(env, params, module, k, args.speed_iterations, args.repeats) for k in args.batch_sizes]
            result["speed"][name] = rows
            for r in rows:
                print(
                    f"[speed] {name:15s} K={r['K']:>6}: {r['env_steps_per_s'] / 1e6:8.3f}M env-steps/s "
                    f"(run {r['run_s']:.3f} s, compile {r['compile_s']:.1f} s)",
                    flush=True,
                )
    if args.quality:
        if args.task == "battery":
            reference = judge.reference_optimum(env, params, args.episodes)
            label = "reference (discretized optimum executed with continuous actions)"
        else:
            free_env, free_params = make_task(args.task, alpha=1e9)
            q = quality(free_env, free_params, ppo_lagrangian, args.seeds, args.episodes, args.iterations, None)
            best = max(q["seeds"], key=lambda r: r["exact_reward"])
            result["unconstrained_ppo"] = q
            mc_cost = np.asarray(best["exact_costs"], np.float64)
            reference = Optimum(
                reward=float(best["exact_reward"]),
                costs=mc_cost,
                multipliers=np.zeros(1),
                policy=None,
                stage_costs=None,
                stage_rewards=None,
                solve_time_s=0.0,
            )
            label = "unconstrained PPO (alpha = 1e9, best of its seeds)"
            for row in q["seeds"]:
                print(
                    f"[quality] unconstrained PPO seed {row['seed']}: {row['exact_reward']:9.2f}, "
                    f"cost {row['exact_costs']}",
                    flush=True,
                )
        result["reference"] = reference.as_dict()
        print(
            f"[quality] {label}: {reference.reward:.2f} at costs {np.round(reference.costs, 4).tolist()} "
            f"(alpha {np.asarray(env.thresholds(params)).tolist()})",
            flush=True,
        )
        for name, module in learners.items():
            q = quality(env, params, module, args.seeds, args.episodes, args.iterations, reference)
            result["quality"][name] = q
            print_quality(name, q, "the yardstick")
            write_json_atomic(out, result)  # after every learner: a run cut short keeps what it measured
    write_json_atomic(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
