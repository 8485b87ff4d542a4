"""The unconstrained limit against a reference implementation: the neural learners' plain
``Config()`` on control tasks with a slack budget, side by side with rejax's PPO.

Tasks (the budget is alpha = 1e9, above any policy's cost, so the constraint never binds and
each learner's multiplier stays at 0):

* ``pendulum``: gymnax Pendulum-v1, H = 200 (box actions; its torque-energy cost);
* ``cartpole``: gymnax CartPole-v1, H = 500 (two actions; its position cost).

Each learner (``--learners``, default NN-Constrained, e-COP, PPO-Lagrangian and
Saute-Lagrangian) trains ``--seeds`` seeds in one ``jax.jit(jax.vmap(train))`` call (seeds
``split(key(0), S)``); each final policy is played as users play it (``module.policy``,
sampled actions) for ``--episodes`` episodes. The reference is rejax 0.1.3's PPO with its
published settings for the task (``benchmarks/reference_rejax.py``), which pins gymnax < 1.0
and so runs in its own virtual environment::

    python3 -m venv /work/rejax-venv && /work/rejax-venv/bin/pip install rejax==0.1.3 "gymnax<1.0"
    python benchmarks/deep_reference.py --rejax-python /work/rejax-venv/bin/python

With ``--rejax-python`` the reference is trained again (a subprocess, its JSON stored in
``benchmarks/results/reference/rejax_<task>.json`` with the command that made it); without it
the stored reference is read. The score is the normalised return
(R - R_uniform) / (R_rejax - R_uniform), R_uniform the uniform random policy's return
(Monte-Carlo, same episodes) and R_rejax the median over rejax's seeds; a learner's line reports
its worst seed. Environment steps: K H N for the fhc_jax learners (every episode runs its
H stages), rejax's own step counter for the reference.

Usage::

    python benchmarks/deep_reference.py [--tasks pendulum,cartpole] [--learners ...]
        [--seeds 5] [--episodes 20000] [--rejax-python PATH] [--out FILE]

Results: ``benchmarks/results/deep_reference.json`` (``--out``), written after every learner;
the rows of tasks and learners that a run leaves out are kept from the file (each row records
the revision and command that measured it), so learners can be measured one at a time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
from battery import quality
from judge import machine_info
from timing import provenance

from fhc_jax.algos import ecop, nn_constrained, ppo_lagrangian, saute
from fhc_jax.envs import gymnax_tasks
from fhc_jax.experiment import judge
from fhc_jax.experiment.rundir import write_json_atomic
from fhc_jax.rollout import random_policy

HERE = Path(__file__).parent
LEARNERS = {"nn_constrained": nn_constrained, "ecop": ecop, "ppo_lagrangian": ppo_lagrangian, "saute": saute}
SLACK = 1e9  # a budget no policy reaches


def make_task(name: str):
    """(env, params) of a task with the slack budget."""
    if name == "pendulum":
        env = gymnax_tasks.pendulum(horizon=200, alpha=SLACK)
    elif name == "cartpole":
        env = gymnax_tasks.cartpole(horizon=500, alpha=SLACK)
    else:
        raise ValueError(f"--tasks: each task must be 'pendulum' or 'cartpole', found {name!r}")
    return env, env.default_params


def rejax_reference(task: str, seeds: int, python: str | None) -> dict:
    """rejax's PPO on ``task``: trained by ``python`` (a rejax 0.1.3 environment) through
    ``reference_rejax.py``, or the stored result when ``python`` is None."""
    stored = HERE / "results" / "reference" / f"rejax_{task}.json"
    if python is not None:
        cmd = [python, str(HERE / "reference_rejax.py"), "--task", task, "--seeds", str(seeds), "--out", str(stored)]
        subprocess.run(cmd, check=True)
    if not stored.exists():
        raise SystemExit(
            f"deep_reference: no stored rejax result for {task} ({stored}); pass --rejax-python with a rejax 0.1.3 "
            "environment (module docstring)"
        )
    return json.loads(stored.read_text())


def uniform_return(env, params, episodes: int) -> float:
    """The uniform random policy's mean return (Monte-Carlo)."""
    return float(judge.monte_carlo(env, params, [random_policy(env)], episodes)["reward"][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="pendulum,cartpole")
    parser.add_argument("--learners", default=",".join(LEARNERS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=20_000)
    parser.add_argument("--rejax-python", default=None, help="a python with rejax 0.1.3 (module docstring)")
    parser.add_argument("--out", default=str(HERE / "results" / "deep_reference.json"))
    args = parser.parse_args()
    learners = args.learners.split(",")
    for name in learners:
        if name not in LEARNERS:
            raise SystemExit(f"--learners: each must be one of {', '.join(LEARNERS)}, found {name!r}")
    if args.seeds < 1 or args.episodes < 2:
        raise SystemExit("--seeds must be >= 1 and --episodes >= 2")
    tasks = args.tasks.split(",")
    for task in tasks:
        make_task(task)  # validates the name before anything runs
    source = provenance()
    out = Path(args.out)
    # the rows of the tasks and learners not run now are kept (each row records its revision)
    earlier = json.loads(out.read_text()) if out.exists() else {"tasks": {}}
    result: dict = {**source, "machine": machine_info(), "slack_alpha": SLACK, "tasks": earlier["tasks"]}
    for task in tasks:
        env, params = make_task(task)
        ref = rejax_reference(task, args.seeds, args.rejax_python)
        r_uniform = uniform_return(env, params, args.episodes)
        r_rejax = float(ref["median_return"])
        row: dict = {
            "env": repr(env),
            "horizon": env.horizon,
            "uniform_return": r_uniform,
            "rejax": {k: ref[k] for k in ("median_return", "env_steps", "wall_s", "seeds", "command", "config_source")},
            "learners": {
                name: r for name, r in result["tasks"].get(task, {}).get("learners", {}).items() if name not in learners
            },
        }
        for r in row["learners"].values():  # rescored against this run's references
            r["scores"] = [(x - r_uniform) / (r_rejax - r_uniform) for x in r["returns"]]
            r["worst_score"] = min(r["scores"])
        result["tasks"][task] = row
        print(f"[{task}] uniform {r_uniform:.1f}; rejax PPO median {r_rejax:.1f} ({ref['env_steps']:,} env-steps)")
        for name in learners:
            module = LEARNERS[name]
            t0 = time.perf_counter()
            q = quality(env, params, module, args.seeds, args.episodes, None, None)
            cfg = module.Config()
            returns = [float(s["exact_reward"]) for s in q["seeds"]]
            scores = [(r - r_uniform) / (r_rejax - r_uniform) for r in returns]
            steps = int(cfg.episodes_per_iteration) * env.horizon * int(cfg.num_iterations)
            row["learners"][name] = {
                "returns": returns,
                "scores": scores,
                "worst_score": min(scores),
                "env_steps": steps,
                "steps_vs_rejax": steps / float(ref["env_steps"]),
                "wall_s": q["wall_s"],
                "judge_s": time.perf_counter() - t0 - q["wall_s"],
                "config": q["config"],
                "seeds": args.seeds,
                "revision": source.get("revision"),
                "command": source.get("command"),
            }
            print(
                f"[{task}] {name:15s} returns {np.round(returns, 1).tolist()} worst score {min(scores):.3f} "
                f"({steps:,} env-steps, {steps / ref['env_steps']:.0f}x rejax's; {q['wall_s']:.0f} s)",
                flush=True,
            )
            write_json_atomic(out, result)
    write_json_atomic(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", False)
    sys.exit(main())
