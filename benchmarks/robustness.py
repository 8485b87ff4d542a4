"""Robustness benchmark: every learner's plain ``Config()`` on every task of the suite
(``fhc_jax.envs.suite``), 5 seeds each, judged by the task's referee.

For each (learner, task): the seeds' keys are ``jax.random.fold_in(jax.random.key(424242), i)``
(a base no tuning run used), trained in ONE ``jax.jit(jax.vmap(train))`` call (compiled ahead
with ``.lower().compile()``, so compile and run times are reported apart). Each seed's RETURNED
policy (``TrainResult.state``: the learner's selection by its own estimates) is judged:

* **exact** tasks: ``fhc_jax.evaluate(cmdp, policy_table)`` (float64): reward, costs,
  % of the optimum = 100 J / J* (J* from ``fhc_jax.solve``; 100 (1 - (J* - J) / |J*|) where
  J* < 0), feasible = every cost <= 1.02
  alpha (the judge's rule, ``fhc_jax.experiment.judge.cost_limits``, with the model's cost
  scale);
* **reference** tasks (the battery): ``fhc_jax.rollout_returns`` of the learner's ``policy``
  over ``--episodes`` episodes with a fixed key (the same episodes for every policy); feasible
  = the upper end of each cost's 95% interval (the judge's: 1.96 sd / sqrt(N) plus the rule of
  three ln(20) max(c_max, u) / N, ``fhc_jax.experiment.judge.upper_bound_excess``) <= 1.02
  alpha; % of the reference = 100 J / J_ref, J_ref the same estimate for
  ``env.reference(params)``;
* **budget** tasks (Pendulum): as the reference tasks, without a yardstick for the reward.

Recorded per (learner, task): per seed the reward, costs, % of the optimum (or reference),
feasible, final multipliers; compile, run and judging seconds; nu* of the task (exact tasks:
``fhc_jax.solve``'s multipliers; battery: the reference's). A learner that raises on a task
(e.g. one that refuses box actions) is recorded with its one-line error.

Usage::

    python benchmarks/robustness.py [--learners a,b] [--tasks x,y] [--seeds 5] [--episodes 20000]
                                    [--out benchmarks/results/robustness.json]

Every argument, and the output file (writable; valid JSON if it exists, since it is merged), is
checked before anything is trained: a bad one is one line on stderr, exit status 2. The output
file is MERGED: only the (learner, task) cells run now are replaced, so slices can be run
separately. Each cell names the run it came from (command, machine, versions, date). The
printed table (of the whole merged file) has the tasks as rows and the learners as columns,
each cell "worst% feasible/seeds" (worst seed's % of the optimum or reference; budget tasks
show only the feasible seeds), then the wall time (compile + run) of each cell.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from timing import source_revision

import fhc_jax as fhc
from fhc_jax.algos.core.scaffold import play_environment
from fhc_jax.envs import suite
from fhc_jax.experiment.config import MAX_EPISODES
from fhc_jax.experiment.judge import (
    DEFAULT_TOLERANCE,
    RULE_OF_THREE,
    Z95,
    cost_limits,
    cost_scale,
    step_cost_units,
)
from fhc_jax.experiment.judgement import fraction_of_optimum
from fhc_jax.experiment.rundir import (
    RunDirectoryError,
    check_writable_file,
    machine_info,
)

LEARNERS = ("fh_constrained", "nn_constrained", "ecop", "ppo_lagrangian", "cpo", "saute")
#: base key of the seeds (no tuning run used it)
SEED_BASE = 424242
#: key of every Monte-Carlo judgement (common random numbers across policies)
JUDGE_KEY = 0
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "robustness.json"


def one_line(err: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters)."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def seed_keys(seeds: int) -> jax.Array:
    """The seeds' keys ``fold_in(key(SEED_BASE), i)``, (seeds,)."""
    base = jax.random.key(SEED_BASE)
    return jnp.stack([jax.random.fold_in(base, i) for i in range(seeds)])


def monte_carlo(env, params, make_policy, states: list[Any], episodes: int) -> dict[str, np.ndarray]:
    """Means and 95% half-widths of ``rollout_returns`` for the policies ``make_policy(state)``
    of each state (one compiled program: the state is an argument), same key for all; the
    costs' upper half-width is the judge's (normal term plus the rule of three over the larger
    of the largest episode cost and one typical step cost, ``judge.upper_bound_excess``).

    Returns:
        reward (R,), reward_half_width (R,), costs (R, M), cost_half_width (R, M), cost_unit (M,).
    """
    key = jax.random.key(JUDGE_KEY)
    unit = step_cost_units(env, params)

    @jax.jit
    def stats(state):
        ret = fhc.rollout_returns(key, env, params, make_policy(state), episodes)
        r, c = ret.rewards.astype(jnp.float32), ret.costs.astype(jnp.float32).reshape(episodes, -1)
        return r.mean(), r.std(ddof=1), c.mean(0), c.std(0, ddof=1), jnp.max(jnp.abs(c), axis=0)

    rows = [jax.device_get(stats(st)) for st in states]
    scale = Z95 / np.sqrt(episodes)
    largest = np.maximum(np.array([r[4] for r in rows], np.float64), unit)
    return {
        "reward": np.array([r[0] for r in rows], np.float64),
        "reward_half_width": np.array([r[1] for r in rows], np.float64) * scale,
        "costs": np.array([r[2] for r in rows], np.float64),
        "cost_half_width": np.array([r[3] for r in rows], np.float64) * scale + RULE_OF_THREE * largest / episodes,
        "cost_unit": unit,
    }


def referee(task: suite.Task, env, params, episodes: int) -> dict[str, Any]:
    """What a task's learners are judged against: thresholds, the optimum J* and nu* (exact),
    the reference's Monte-Carlo value and nu* (reference), or the budget alone."""
    t0 = time.perf_counter()
    info: dict[str, Any] = {
        "description": task.description,
        "judgement": task.judgement,
        "thresholds": np.asarray(env.thresholds(params), np.float64).tolist(),
    }
    if task.exact:
        cmdp = env.to_cmdp(params)
        best = fhc.solve(cmdp)
        least, free = suite.cost_range(cmdp)
        info.update(
            optimum_reward=float(best.reward),
            optimum_costs=best.costs.tolist(),
            nu_star=best.multipliers.tolist(),
            cost_min=least.tolist(),
            cost_free=free.tolist(),
            threshold_fractions=suite.threshold_fractions(cmdp).tolist(),
            sizes={"H": cmdp.horizon, "S": cmdp.num_states, "A": cmdp.num_actions, "M": cmdp.num_constraints},
        )
        info["_cmdp"] = cmdp
    elif task.judgement == "reference":
        policy, nu = env.reference(params)
        mc = monte_carlo(env, params, lambda _: policy, [None], episodes)
        info.update(
            reference_reward=float(mc["reward"][0]),
            reference_reward_half_width=float(mc["reward_half_width"][0]),
            reference_costs=mc["costs"][0].tolist(),
            nu_star=np.asarray(nu, np.float64).tolist(),
            episodes=episodes,
        )
    else:
        info.update(nu_star=None, episodes=episodes)
    info["referee_s"] = time.perf_counter() - t0
    return info


def final_multipliers(out: Any) -> np.ndarray | None:
    """The learner's penalties nu after its last update, (R, M), or None if it reports none."""
    nu = getattr(out.metrics, "multipliers", None)
    return None if nu is None else np.asarray(nu[:, -1], np.float64).reshape(nu.shape[0], -1)


def judge_cell(module, task: suite.Task, env, params, ref: dict, out: Any, seeds: int, episodes: int) -> dict[str, Any]:
    """Per-seed judgement of the final policies (module docstring)."""
    alpha = np.asarray(ref["thresholds"], np.float64)
    if task.exact:
        tables = np.asarray(module.policy_table(out.state, env, params), np.float64)
        with jax.enable_x64(True):
            cmdp = ref["_cmdp"].astype(jnp.float64)
            evs = [jax.device_get(fhc.evaluate(cmdp, jnp.asarray(t))) for t in tables]
        reward = np.array([float(e.reward) for e in evs])
        costs = np.array([np.asarray(e.costs, np.float64) for e in evs])
        upper, yardstick = costs, ref["optimum_reward"]
        limits = cost_limits(alpha, DEFAULT_TOLERANCE, cost_scale(ref["_cmdp"]))
        extra: dict[str, Any] = {}
    else:
        states = [jax.tree.map(lambda x: x[i], out.state) for i in range(seeds)]
        play_env, play_params = play_environment(module, states[0], env, params)  # where its policy plays
        mc = monte_carlo(play_env, play_params, lambda st: module.policy(st, play_env, play_params), states, episodes)
        reward, costs = mc["reward"], mc["costs"]
        upper = costs + mc["cost_half_width"]
        limits = cost_limits(alpha, DEFAULT_TOLERANCE, play_env.horizon * mc["cost_unit"])
        yardstick = ref.get("reference_reward")
        extra = {
            "reward_half_width": mc["reward_half_width"],
            "cost_half_width": mc["cost_half_width"],
            "cost_upper_95": upper,
        }
    feasible = np.all(upper <= limits, axis=1)
    # % of the optimum (or reference): 100 J / J* for J* > 0, 100 (1 - (J* - J) / |J*|) below
    no_yardstick = yardstick is None or (yardstick <= 0 and not task.exact)
    frac = None if no_yardstick else fraction_of_optimum(reward, yardstick)
    percent = None if frac is None else 100.0 * frac
    nu = final_multipliers(out)
    status_ok = np.asarray(out.status.ok)  # the learner's own verdict (met and settled)
    selected_at = np.asarray(out.selection.iteration)
    rows = []
    for i in range(seeds):
        row = {
            "seed": i,
            "reward": float(reward[i]),
            "costs": costs[i].tolist(),
            "percent": None if percent is None else float(percent[i]),
            "feasible": bool(feasible[i]),
            "final_multipliers": None if nu is None else nu[i].tolist(),
            "status_ok": bool(status_ok[i]),
            "selected_iteration": int(selected_at[i]),
            "silent_infeasible": bool(not feasible[i] and status_ok[i]),
        }
        row.update({k: np.asarray(v[i]).tolist() for k, v in extra.items()})
        rows.append(row)
    return {
        "seeds": rows,
        "feasible_seeds": int(feasible.sum()),
        "num_seeds": seeds,
        "flagged_seeds": int((~status_ok).sum()),
        "silent_infeasible_seeds": int((~feasible & status_ok).sum()),
        "worst_percent": None if percent is None else float(np.min(percent)),
        "median_percent": None if percent is None else float(np.median(percent)),
        "worst_cost_over_alpha": float(np.max(upper / np.where(alpha == 0, 1.0, alpha))),
        "nu_star": ref["nu_star"],
    }


def run_cell(name: str, task: suite.Task, env, params, ref: dict, seeds: int, episodes: int) -> dict[str, Any]:
    """Train ``seeds`` seeds of learner ``name`` with its plain ``Config()`` and judge them; an
    exception anywhere is recorded as ``error`` with the stage it happened in."""
    cell: dict[str, Any] = {"config": "Config()"}
    stage = "import"
    try:
        module = importlib.import_module(f"fhc_jax.algos.{name}")
        stage = "make_train"
        train = module.make_train(env, params, module.Config())
        keys = seed_keys(seeds)
        stage = "compile"
        t0 = time.perf_counter()
        compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
        cell["compile_s"] = time.perf_counter() - t0
        stage = "train"
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(keys))
        cell["run_s"] = time.perf_counter() - t0
        stage = "judge"
        t0 = time.perf_counter()
        cell.update(judge_cell(module, task, env, params, ref, out, seeds, episodes))
        cell["judge_s"] = time.perf_counter() - t0
    except Exception as err:  # recorded, not fatal: one cell of the table
        cell["error"] = f"{stage}: {one_line(err)}"
    return cell


def cell_text(cell: dict | None) -> str:
    if cell is None:
        return "."
    if "error" in cell:
        return "error"
    n, ok = cell["num_seeds"], cell["feasible_seeds"]
    silent = cell.get("silent_infeasible_seeds", 0)
    mark = f" ({silent} silent)" if silent else ""  # infeasible seeds the learner did not flag
    return (f"{ok}/{n}" if cell.get("worst_percent") is None else f"{cell['worst_percent']:.0f}% {ok}/{n}") + mark


def time_text(cell: dict | None) -> str:
    if cell is None or "run_s" not in cell:
        return "." if cell is None else "-"
    return f"{cell['compile_s'] + cell['run_s']:.0f}s"


def table(results: dict, learners: list[str], tasks: list[str], fmt) -> str:
    """Rows tasks, columns learners, cells ``fmt(cell)``, as a markdown table."""
    lines = ["| task | " + " | ".join(learners) + " |", "|---" * (len(learners) + 1) + "|"]
    for t in tasks:
        lines.append(f"| {t} | " + " | ".join(fmt(results.get(name, {}).get(t)) for name in learners) + " |")
    return "\n".join(lines)


def merge(path: Path, run_id: str, run: dict, refs: dict, cells: dict) -> dict:
    """The file at ``path`` (if any) with the tasks' referees and the (learner, task) cells run
    now replaced, this run added, and runs no cell refers to any longer dropped."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault(
        "benchmark", "robustness: every learner's Config() x every suite task x seeds (benchmarks/robustness.py)"
    )
    data["protocol"] = {
        "seed_keys": f"jax.random.fold_in(jax.random.key({SEED_BASE}), i)",
        "feasible": "every cost <= alpha + 0.02 |alpha| + 1e-6 max(|alpha|, C) (Monte-Carlo: the "
        "upper 95% bound with the rule of three)",
        "judged_policy": "each seed's returned policy (TrainResult.state: the learner's selection by its own "
        "estimates)",
        "monte_carlo_key": JUDGE_KEY,
    }
    # the file's provenance (benchmarks/report.py): the full command, the latest run's machine
    # and jax; each cell names the run (its slice's command and git revision) it came from
    data["command"] = "python benchmarks/robustness.py"
    for key in ("machine", "jax"):
        if key in run:
            data[key] = run[key]
    data.setdefault("tasks", {}).update(refs)
    data.setdefault("runs", {})[run_id] = run
    results = data.setdefault("results", {})
    for learner, by_task in cells.items():
        results.setdefault(learner, {}).update(by_task)
    used = {c.get("run") for by_task in results.values() for c in by_task.values()}
    data["runs"] = {k: v for k, v in data["runs"].items() if k in used}
    return data


def write_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` through a temporary file and a rename (never a truncated file)."""
    from fhc_jax.experiment.rundir import write_bytes_atomic

    write_bytes_atomic(path, text.encode())


def to_json(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: to_json(v) for k, v in x.items() if not k.startswith("_")}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return x


def parse_list(value: str, valid: list[str] | tuple[str, ...], what: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in names if v not in valid]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(bad) or '(none given)'}; valid: {', '.join(valid)}"
        )
    return names


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (``robustness.py: error: ...``),
    exit status 2."""

    def error(self, message: str):
        fail(message)


def fail(message: str, status: int = 2):
    """One line on stderr and exit with ``status``."""
    print(f"robustness.py: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(status)


def check_out(path: Path) -> None:
    """``--out`` before anything is trained: a writable file, and valid JSON holding an object
    where it exists (the results are merged into it after every cell)."""
    try:
        check_writable_file(path, "--out")
    except RunDirectoryError as err:
        fail(str(err))
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            fail(
                f"--out {path} exists but is not a results file to merge into ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}); choose another --out or move it away"
            )
        if not isinstance(data, dict) or not isinstance(data.get("results", {}), dict):
            fail(
                f"--out {path} exists but does not hold this benchmark's results (a JSON object with 'results'); "
                "choose another --out or move it away"
            )


def main(argv: list[str] | None = None) -> dict:
    parser = OneLineParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--learners",
        type=lambda v: parse_list(v, LEARNERS, "learner"),
        default=list(LEARNERS),
        help="comma-separated learners (fhc_jax.algos modules)",
    )
    parser.add_argument(
        "--tasks",
        type=lambda v: parse_list(v, list(suite.TASKS), "task"),
        default=list(suite.TASKS),
        help="comma-separated tasks of fhc_jax.envs.suite",
    )
    parser.add_argument("--seeds", type=int, default=5, help="seeds per (learner, task), >= 1")
    parser.add_argument("--episodes", type=int, default=20_000, help="episodes of each Monte-Carlo judgement, >= 20000")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON file to merge the results into")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        fail(f"--seeds must be an integer >= 1, found {args.seeds}")
    if not 20_000 <= args.episodes <= MAX_EPISODES:
        fail(
            f"--episodes must be an integer in [20000, {MAX_EPISODES}] (rollout_returns draws one key per "
            f"episode), found {args.episodes}"
        )
    check_out(args.out)  # before training: a cell's results are merged into it

    run_id = time.strftime("%Y%m%dT%H%M%S")
    run = {
        "command": shlex.join(["python", "benchmarks/robustness.py", *(sys.argv[1:] if argv is None else argv)]),
        **source_revision(),
        "machine": machine_info(),
        "jax": jax.__version__,
    }
    refs: dict[str, dict] = {}
    cells: dict[str, dict] = {}
    for name in args.tasks:
        task = suite.task(name)
        t0 = time.perf_counter()
        env, params = task.make()
        build_s = time.perf_counter() - t0
        ref = referee(task, env, params, args.episodes)
        ref["build_s"] = build_s
        refs[name] = ref
        print(f"[{name}] {task.description}; nu* = {ref['nu_star']}", flush=True)
        for learner in args.learners:
            cell = run_cell(learner, task, env, params, ref, args.seeds, args.episodes)
            cell["run"] = run_id
            cells.setdefault(learner, {})[name] = cell
            timing = f" ({cell['compile_s']:.0f}s compile + {cell['run_s']:.0f}s run)" if "run_s" in cell else ""
            print(f"  {learner:15s} {cell.get('error') or cell_text(cell)}{timing}", flush=True)
            jax.clear_caches()
            try:  # merge after every cell: partial runs persist
                args.out.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(args.out, json.dumps(to_json(merge(args.out, run_id, run, refs, cells)), indent=1) + "\n")
            except (OSError, ValueError) as err:
                fail(
                    f"cannot write --out {args.out} ({type(err).__name__}: {err}); the cells merged before are kept", 1
                )
    data = json.loads(args.out.read_text())
    learners = [name for name in LEARNERS if name in data["results"]]
    tasks = [t for t in suite.TASKS if any(t in data["results"][name] for name in learners)]
    print("\nworst seed's % of the optimum (reference), feasible seeds:\n")
    print(table(data["results"], learners, tasks, cell_text))
    print("\nwall time per cell (compile + run):\n")
    print(table(data["results"], learners, tasks, time_text))
    return data


if __name__ == "__main__":
    main()
