"""Scaling curves: training speed of every learner and the exact solver's time against the
batch size K, the horizon H, the grid size and the number of constraints M.

**Learners** (``fhc_jax.experiment.config``: fh-constrained, nn-constrained, ppo-lag, cpo,
e-cop, saute-lag). Each point trains on ``GridWorld(size, horizon=H, num_constraints=M)`` with
the learner's default ``Config`` except ``episodes_per_iteration = K``, ``eval_every = 0`` and a
few iterations (speed, not quality): ``num_iterations = clip(round(2e6 / (K H)), 1, 5)``
(about 2M env steps per point: 5 iterations up to K H = 400,000, one from K H = 1.3M up, so
the largest batches stay within the point's budget). ``make_train`` is timed apart (host setup), the whole run is
compiled ahead
(``jax.jit(train).lower(key).compile()``, the ``compile_s`` column) and the run time is the
median of ``--repeats`` calls (5; fewer once a point's calls took a quarter of
``--point-budget-s``) with keys 0, 1, ..., each ending in ``jax.block_until_ready``
(the protocol of ``benchmarks/timing.py``, split so that memory is checked between compiling
and running). ``env_steps_per_s`` = iterations K H / run time. One axis varies at
a time around the base point K = 1024, H = 100, 10x10, M = 1.

**Solver** (``fhc_jax.solve``, the Lagrangian dual; column generation for M > 1): grid size and
M at H = 100, thresholds halfway between the costs of the unconstrained optimum and those of
the policy minimising the total cost (feasible, and binding), the first call (JAX's caches
cleared before it: compilation included) and the median of the following calls, with the
oracle calls.

Each point is bounded: it is skipped, with the reason recorded, when its memory exceeds
``--max-gb`` (checked twice: the rollout's trajectory bytes from K, H, M before compiling,
``trajectory_bytes``; XLA's buffer assignment of the compiled program, temporaries, arguments
and outputs, before running, ``xla_bytes``), when the run time predicted from the learner's
previous point exceeds ``--point-budget-s``, when the whole run has used ``--budget-s``, or
when the learner does not support it (CPO takes at most 6 constraints). The
machine record includes the load (``uptime``) before and after, since other programs may share
the CPU. A run where a point fails (an error) or nothing is measured writes
``<out>.failed.json`` beside the results, leaves them untouched, and exits 1.

Usage::

    python benchmarks/scaling.py [--axes K,H,size,M] [--learners all|NAME,...] [--no-solver]
        [--quick] [--repeats 5] [--max-gb 3] [--point-budget-s 60] [--budget-s 1200] [--out PATH]

``--quick`` is a smoke test (a handful of tiny points, one repeat). Results: ``--out``
(default ``benchmarks/results/scaling.json``) and the figure beside it (same name, ``.png``):
one log-log panel per axis (env-steps/s of every learner; the solver's time).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import jax
import numpy as np
from timing import provenance

import fhc_jax as fhc
from fhc_jax.experiment import config as registry
from fhc_jax.experiment.rundir import machine_info, write_bytes_atomic, write_json_atomic

RESULTS = Path(__file__).resolve().parent / "results" / "scaling.json"
LEARNER_AXES = ("K", "H", "size", "M")
SOLVER_AXES = ("size", "M")

#: base point and the values of each axis of the full run (--quick uses QUICK). The learners
#: that compile in seconds (DENSE_LEARNERS) get every value; the others, whose programs take
#: 5-15 s each to compile on a shared 2-core CPU, get the SPARSE subset (the ends and the
#: base), so that the full run stays near 15 minutes.
FULL = {
    "base": {"K": 1024, "H": 100, "size": 10, "M": 1},
    "K": [64, 256, 1024, 4096, 16384, 65536],
    "H": [10, 30, 100, 300, 1000],
    "size": [4, 10, 20, 50],
    "M": [1, 2, 3, 4],
    "solver_base": {"H": 100, "size": 10, "M": 1},
    "solver_size": [4, 10, 20, 30, 50],
    "solver_M": [1, 2, 3, 4],
}
SPARSE = {"K": [64, 1024, 16384, 65536], "H": [10, 100, 1000], "size": [4, 10, 50], "M": [1, 2, 4]}
DENSE_LEARNERS = ("fh-constrained",)
QUICK = {
    "base": {"K": 64, "H": 10, "size": 4, "M": 1},
    "K": [64, 256],
    "H": [10, 20],
    "size": [4, 5],
    "M": [1, 2],
    "solver_base": {"H": 10, "size": 4, "M": 1},
    "solver_size": [4, 5],
    "solver_M": [1, 2],
}
#: env steps a point aims at (iterations_for)
STEPS_PER_POINT = 2_000_000
MAX_ITERATIONS = 5


def iterations_for(k: int, h: int) -> int:
    """Training iterations of a point: clip(round(2e6 / (K H)), 1, 5)."""
    return int(min(MAX_ITERATIONS, max(1, round(STEPS_PER_POINT / (k * h)))))


def trajectory_bytes(k: int, h: int, m: int) -> int:
    """What a training iteration's rollout writes, estimated before compiling: per step the
    state, action and reward (4 bytes each), M costs (4 bytes each) and two random words."""
    return int(h * k * (4 * (3 + m) + 8))


def xla_bytes(compiled) -> int | None:
    """XLA's buffer assignment of a compiled program: temporaries + arguments + outputs (None
    where the backend does not report it)."""
    try:
        stats = compiled.memory_analysis()
        return int(stats.temp_size_in_bytes + stats.argument_size_in_bytes + stats.output_size_in_bytes)
    except (AttributeError, NotImplementedError, RuntimeError):  # pragma: no cover (backend-specific)
        return None


def compile_train(train: Callable):
    """``jax.jit(train).lower(key).compile()`` and its seconds (the protocol of
    ``benchmarks/timing.py``)."""
    t0 = time.perf_counter()
    compiled = jax.jit(train).lower(jax.random.key(0)).compile()
    return compiled, time.perf_counter() - t0


def median_run(compiled, repeats: int, seconds: float = math.inf) -> tuple[float, int]:
    """Median seconds of up to ``repeats`` calls with keys 0, 1, ..., each ending in
    ``jax.block_until_ready`` (as ``benchmarks/timing.compile_and_time``), stopping early once
    the calls so far took ``seconds``. Returns (median, number of calls)."""
    times: list[float] = []
    while len(times) < repeats and sum(times) < seconds:
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(jax.random.key(len(times))))
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), len(times)


def uptime() -> str:
    """``uptime``'s line (load averages of the CPU), or the reason it could not be read."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        return f"unavailable ({err})"


class Budget:
    """The whole run's wall-clock budget."""

    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.perf_counter()

    @property
    def used(self) -> float:
        return time.perf_counter() - self.start

    def exhausted(self) -> bool:
        return self.used > self.seconds


# ----------------------------------------------------------------------------- learners


def learner_point(
    name: str,
    point: dict,
    repeats: int,
    max_bytes: float,
    predicted_s: float | None,
    point_budget_s: float,
    budget: Budget,
) -> dict:
    """Train one learner at one point and time it, or say why the point was skipped."""
    k, h, size, m = point["K"], point["H"], point["size"], point["M"]
    iters = iterations_for(k, h)
    row: dict[str, Any] = {
        **point,
        "num_states": size * size,
        "iterations": iters,
        "trajectory_bytes": trajectory_bytes(k, h, m),
    }
    if budget.exhausted():
        return {**row, "skipped": f"the run's time budget ({budget.seconds:.0f} s) is used up"}
    if row["trajectory_bytes"] > max_bytes:
        return {
            **row,
            "skipped": f"trajectory {row['trajectory_bytes'] / 2**20:.0f} MiB > --max-gb ({max_bytes / 2**20:.0f} MiB)",
        }
    if predicted_s is not None and predicted_s > point_budget_s:
        return {
            **row,
            "skipped": f"predicted run time {predicted_s:.0f} s (from the previous point) > "
            f"--point-budget-s {point_budget_s:.0f}",
        }
    module = registry.load_algorithm(name)
    env = fhc.GridWorld(size=size, horizon=h, num_constraints=m)
    params = env.default_params
    config = module.Config(num_iterations=iters, episodes_per_iteration=k, eval_every=0)
    t0 = time.perf_counter()
    try:
        train = module.make_train(env, params, config)
    except ValueError as err:  # e.g. a single-constraint learner asked for M > 1
        return {**row, "skipped": f"not supported: {err}"}
    row["setup_s"] = time.perf_counter() - t0
    compiled, row["compile_s"] = compile_train(train)
    row["xla_bytes"] = xla_bytes(compiled)
    if row["xla_bytes"] is not None and row["xla_bytes"] > max_bytes:
        return {
            **row,
            "skipped": f"XLA buffers {row['xla_bytes'] / 2**20:.0f} MiB > --max-gb ({max_bytes / 2**20:.0f} MiB)",
        }
    # repeated while the runs so far took less than a quarter of the point's budget
    run_s, runs = median_run(compiled, repeats, point_budget_s / 4)
    return {
        **row,
        "run_s": run_s,
        "repeats": runs,
        "s_per_iteration": run_s / iters,
        "env_steps_per_s": iters * k * h / run_s,
    }


def _work(point: dict) -> float:
    """What a point's run time is proportional to, roughly: iterations x (K H + H S)."""
    return iterations_for(point["K"], point["H"]) * (point["K"] * point["H"] + point["H"] * point["size"] ** 2)


def learner_curves(names: list[str], axes: list[str], grid: dict, args, budget: Budget) -> dict:
    """Every learner along every requested axis (the base point measured once per learner)."""
    out: dict[str, dict] = {}
    for name in names:
        out[name] = {}
        done: dict[tuple, dict] = {}
        last: dict | None = None
        for axis in axes:
            rows = []
            values = grid[axis] if grid is not FULL or name in DENSE_LEARNERS else SPARSE[axis]
            for value in values:
                point = {**grid["base"], axis: value}
                key = tuple(sorted(point.items()))
                if key not in done:
                    predicted = None
                    if last is not None and "run_s" in last:
                        predicted = last["run_s"] * _work(point) / _work(last)
                    done[key] = _guarded(
                        learner_point,
                        name,
                        point,
                        args.repeats,
                        args.max_gb * 2**30,
                        predicted,
                        args.point_budget_s,
                        budget,
                    )
                    if "run_s" in done[key]:
                        last = done[key]
                    _print_learner(name, axis, done[key])
                rows.append({"axis_value": value, **done[key]})
            out[name][axis] = rows
    return out


def _guarded(measure: Callable[..., dict], *args) -> dict:
    """``measure(*args)``, or the point with ``failed`` naming the error (e.g. XLA running out
    of memory): one failing point does not lose the others."""
    try:
        return measure(*args)
    except Exception as err:  # noqa: BLE001 (recorded, and the run exits 1)
        point = next(a for a in args if isinstance(a, dict))
        return {**point, "failed": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}


def _print_learner(name: str, axis: str, row: dict) -> None:
    where = f"K={row['K']:<6} H={row['H']:<5} {row['size']}x{row['size']:<3} M={row['M']}"
    if "failed" in row:
        print(f"{name:15s} [{axis:4s}] {where}  FAILED: {row['failed']}", flush=True)
    elif "skipped" in row:
        print(f"{name:15s} [{axis:4s}] {where}  skipped: {row['skipped']}", flush=True)
    else:
        print(
            f"{name:15s} [{axis:4s}] {where}  {row['env_steps_per_s'] / 1e6:8.3f}M steps/s  "
            f"run {row['run_s']:7.3f}s ({row['iterations']} it, {row['repeats']} rep)  "
            f"compile {row['compile_s']:6.1f}s  setup {row['setup_s']:5.1f}s",
            flush=True,
        )


# ----------------------------------------------------------------------------- solver


def solver_cmdp(size: int, horizon: int, m: int) -> fhc.TabularCMDP:
    """GridWorld(size, H, M) with thresholds halfway between the costs of the unconstrained
    optimum and those of the policy minimising the total cost: feasible (the half-half mixture
    meets them) and binding for every constraint the unconstrained optimum would break."""
    env = fhc.GridWorld(size=size, horizon=horizon, num_constraints=m)
    cmdp = env.to_cmdp(env.default_params)
    greedy = fhc.solve_unconstrained(cmdp).costs
    # reward = minus the total cost; the reported costs are each constraint's under that policy
    total = cmdp.replace(rewards=-cmdp.costs.sum(0), terminal_rewards=-cmdp.terminal_costs.sum(0))
    low = fhc.solve_unconstrained(total).costs
    return cmdp.replace(thresholds=0.5 * (greedy + low))


def solver_point(point: dict, repeats: int, budget: Budget) -> dict:
    size, h, m = point["size"], point["H"], point["M"]
    row: dict[str, Any] = {**point, "num_states": size * size}
    if budget.exhausted():
        return {**row, "skipped": f"the run's time budget ({budget.seconds:.0f} s) is used up"}
    cmdp = solver_cmdp(size, h, m)
    jax.clear_caches()  # the first call compiles, as in a fresh process
    t0 = time.perf_counter()
    sol = fhc.solve(cmdp)
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sol = fhc.solve(cmdp)
        times.append(time.perf_counter() - t0)
    return {
        **row,
        "first_call_s": first,
        "median_s": float(np.median(times)),
        "repeats": repeats,
        "oracle_calls": sol.oracle_calls,
        "reward": sol.reward,
        "costs": sol.costs.tolist(),
        "thresholds": np.asarray(cmdp.thresholds).tolist(),
        "multipliers": sol.multipliers.tolist(),
    }


def solver_curves(axes: list[str], grid: dict, repeats: int, budget: Budget) -> dict:
    out: dict[str, list] = {}
    done: dict[tuple, dict] = {}
    for axis in axes:
        rows = []
        for value in grid[f"solver_{axis}"]:
            point = {**grid["solver_base"], axis: value}
            key = tuple(sorted(point.items()))
            if key not in done:
                done[key] = _guarded(solver_point, point, repeats, budget)
                r = done[key]
                where = f"H={r['H']:<4} {r['size']}x{r['size']:<3} M={r['M']}"
                if "failed" in r or "skipped" in r:
                    what = f"FAILED: {r['failed']}" if "failed" in r else f"skipped: {r['skipped']}"
                    print(f"{'solve':15s} [{axis:4s}] {where}  {what}", flush=True)
                else:
                    print(
                        f"{'solve':15s} [{axis:4s}] {where}  median {r['median_s']:7.3f}s  first "
                        f"{r['first_call_s']:6.2f}s  "
                        f"{r['oracle_calls']} oracle calls",
                        flush=True,
                    )
            rows.append({"axis_value": value, **done[key]})
        out[axis] = rows
    return out


# ----------------------------------------------------------------------------- analysis and figure


def log_slopes(xs: list[float], ys: list[float]) -> list[float | None]:
    """Local log-log slopes d log y / d log x between consecutive points (None where a point is
    missing or x does not change)."""
    out = []
    for (x0, y0), (x1, y1) in pairwise(zip(xs, ys)):
        ok = None not in (x0, y0, x1, y1) and x0 > 0 and x1 > 0 and x0 != x1 and y0 > 0 and y1 > 0
        out.append(math.log(y1 / y0) / math.log(x1 / x0) if ok else None)
    return out


def curve_summary(rows: list[dict], metric: str, size_as_states: bool = False) -> dict:
    """The curve of one metric along an axis, its local log-log slopes and the bend: the point
    where the slope changes most (None with fewer than three measured points)."""
    xs = [(r["num_states"] if size_as_states else r["axis_value"]) if metric in r else None for r in rows]
    ys = [r.get(metric) for r in rows]
    slopes = log_slopes(xs, ys)
    bend = None
    changes = [(abs(b - a), i + 1) for i, (a, b) in enumerate(pairwise(slopes)) if a is not None and b is not None]
    if changes:
        _, i = max(changes)
        bend = {"at": rows[i]["axis_value"], "slope_before": slopes[i - 1], "slope_after": slopes[i]}
    return {
        "axis_values": [r["axis_value"] for r in rows],
        metric: ys,
        "log_log_slopes": slopes,
        "largest_slope_change": bend,
    }


def analyse(result: dict) -> dict:
    """Slopes and bends of every curve (env-steps/s and compile time of the learners; median and
    first-call time of the solver; grid size measured in states S)."""
    out: dict[str, Any] = {"learners": {}, "solver": {}}
    for name, axes in result.get("learners", {}).items():
        out["learners"][name] = {
            axis: {
                "env_steps_per_s": curve_summary(rows, "env_steps_per_s", axis == "size"),
                "compile_s": curve_summary(rows, "compile_s", axis == "size"),
            }
            for axis, rows in axes.items()
        }
    for axis, rows in result.get("solver", {}).items():
        out["solver"][axis] = {
            "median_s": curve_summary(rows, "median_s", axis == "size"),
            "first_call_s": curve_summary(rows, "first_call_s", axis == "size"),
        }
    return out


def figure(result: dict, path: Path) -> None:
    """One log-log panel per axis: env-steps/s of every learner (K, H, size, M), and the
    solver's median (solid) and first-call (dashed) time (size, M). Written atomically."""
    import io

    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    learners = result.get("learners", {})
    solver = result.get("solver", {})
    panels = [("learners", a) for a in LEARNER_AXES if any(a in v for v in learners.values())]
    panels += [("solver", a) for a in SOLVER_AXES if a in solver]
    if not panels:
        return
    cols = min(3, len(panels))
    rows_n = math.ceil(len(panels) / cols)
    fig, axs = plt.subplots(rows_n, cols, figsize=(4.6 * cols, 3.6 * rows_n), squeeze=False)
    labels = {"K": "episodes per iteration K", "H": "horizon H", "size": "states S (grid size^2)", "M": "constraints M"}
    for ax, (kind, axis) in zip(axs.flat, panels):
        if kind == "learners":
            for i, (name, curves) in enumerate(learners.items()):
                rows = [r for r in curves.get(axis, []) if "env_steps_per_s" in r]
                if rows:
                    x = [r["num_states"] if axis == "size" else r["axis_value"] for r in rows]
                    ax.plot(x, [r["env_steps_per_s"] for r in rows], "o-", color=f"C{i}", label=name, ms=3)
            ax.set_ylabel("training env-steps/s")
            ax.set_title(f"learners vs {axis}")
        else:
            rows = [r for r in solver[axis] if "median_s" in r]
            x = [r["num_states"] if axis == "size" else r["axis_value"] for r in rows]
            ax.plot(x, [r["median_s"] for r in rows], "o-", color="k", label="solve (median)", ms=3)
            ax.plot(x, [r["first_call_s"] for r in rows], "o--", color="0.5", label="first call (compile)", ms=3)
            ax.set_ylabel("seconds")
            ax.set_title(f"fhc_jax.solve vs {axis}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(labels[axis])
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    for ax in list(axs.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())


# ----------------------------------------------------------------------------- command line


def _names(value: str) -> list[str]:
    if value == "all":
        return registry.available_algorithms()
    return [registry.canonical_name(v.strip()) for v in value.split(",") if v.strip()]


def _axes(valid: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(value: str) -> list[str]:
        axes = [v.strip() for v in value.split(",") if v.strip()]
        bad = [a for a in axes if a not in valid]
        if bad or not axes:
            raise argparse.ArgumentTypeError(
                f"--axes takes a comma-separated subset of {','.join(valid)}, found {value!r}"
            )
        return axes

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--axes",
        type=_axes(LEARNER_AXES),
        default=list(LEARNER_AXES),
        help="comma-separated subset of K,H,size,M (the solver runs size and M)",
    )
    parser.add_argument("--learners", default="all", help="'all' or comma-separated learner names")
    parser.add_argument("--no-solver", action="store_true", help="skip the fhc_jax.solve curves")
    parser.add_argument("--quick", action="store_true", help="a handful of tiny points, one repeat (smoke test)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed runs per point (default 5, fewer once a point's runs took a quarter of "
        "--point-budget-s; --quick: 1)",
    )
    parser.add_argument("--max-gb", type=float, default=3.0, help="skip points whose estimated memory exceeds this")
    parser.add_argument(
        "--point-budget-s", type=float, default=60.0, help="skip points whose predicted run time exceeds this (seconds)"
    )
    parser.add_argument("--budget-s", type=float, default=1200.0, help="skip the remaining points after this (seconds)")
    parser.add_argument("--out", default=str(RESULTS), help="results JSON (the PNG goes beside it)")
    args = parser.parse_args(argv)
    try:
        args.learner_names = _names(args.learners)
    except ValueError as err:
        parser.error(f"--learners: {err}")
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    for name in ("repeats", "max_gb", "point_budget_s", "budget_s"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0, found {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    source = provenance()  # the command and the git revision, read before anything is measured
    grid = QUICK if args.quick else FULL
    out = Path(args.out)
    budget = Budget(args.budget_s)
    load_before = uptime()
    print(f"uptime: {load_before}", flush=True)
    result: dict[str, Any] = {
        "quick": args.quick,
        "grid": grid,
        "axes": args.axes,
        "settings": {
            "repeats": args.repeats,
            "max_gb": args.max_gb,
            "point_budget_s": args.point_budget_s,
            "budget_s": args.budget_s,
            "iterations": f"clip(round({STEPS_PER_POINT:.0e} / (K H)), 1, {MAX_ITERATIONS})",
            "eval_every": 0,
        },
    }
    result["learners"] = learner_curves(args.learner_names, args.axes, grid, args, budget) if args.learner_names else {}
    solver_axes = [a for a in args.axes if a in SOLVER_AXES]
    result["solver"] = {} if args.no_solver else solver_curves(solver_axes, grid, args.repeats, budget)
    result["analysis"] = analyse(result)
    result.update(source)
    result["machine"] = machine_info()
    result["uptime_before"], result["uptime_after"] = load_before, uptime()
    result["wall_s"] = budget.used
    rows = [r for axes in result["learners"].values() for rs in axes.values() for r in rs]
    rows += [r for rs in result["solver"].values() for r in rs]
    failed = [r for r in rows if "failed" in r]
    measured = [r for r in rows if "run_s" in r or "median_s" in r]
    if failed or not measured:
        # an incomplete run does not replace the results of a complete one
        out = out.with_name(out.stem + ".failed.json")
        print(f"{len(failed)} point(s) failed" if failed else "no point was measured (all skipped)", file=sys.stderr)
    write_json_atomic(out, result)
    figure(result, out.with_suffix(".png"))
    print(f"uptime: {result['uptime_after']}\nwrote {out} and {out.with_suffix('.png')} ({budget.used:.0f} s)")
    return 1 if failed or not measured else 0


if __name__ == "__main__":
    sys.exit(main())
