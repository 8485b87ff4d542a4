"""``fhc-jax sweep``: a grid of numeric hyperparameters x seeds as ONE vmapped, sharded program.

The C grid points are validated configs (``Config.replace``) stacked with
:func:`fhc_jax.algos.stack` (numeric fields become arrays with a leading axis; static
fields must not vary, they set shapes and code paths). Configurations and seeds are flattened
into one runs axis of R = C x S (config-major: run = c * S + s; seed s uses the same key in
every configuration), padded to a multiple of the device count and sharded over all devices
(``NamedSharding(Mesh(jax.devices(), ("runs",)), PartitionSpec("runs"))``), then trained in
chunks like ``fhc-jax train``. Several processes or hosts: ``fhc-jax sweep --coordinator
HOST:PORT --num-processes N --process-id I`` (or ``--distributed`` under a cluster scheduler)
in every process (:func:`fhc_jax.experiment.distributed.initialize`); ``jax.devices()`` then lists
every process's devices, every process builds the same global inputs and gathers the results,
and process 0 writes them (docs/distributed.md).

Every configuration's seeds are judged by :func:`fhc_jax.experiment.judge.judge` (one feasibility
rule, ``run.feasibility_tolerance``). Configurations are ranked as the defaults were chosen: by the
number of feasible seeds, then by the worst seed's exact reward
(:meth:`~fhc_jax.experiment.judgement.Judgement.rank_key`); the best is the top-ranked configuration
with at least one feasible seed (None if none has one). Each configuration's row also carries
``statistics`` over its seeds (:func:`fhc_jax.experiment.statistics.seed_statistics`: mean and
IQM of the exact reward, costs and gap with stratified-bootstrap 95% intervals, the probability
of violating the constraint with its Wilson 95% interval).

Progress (unless quiet): the chunk line names the grid (``C configurations x S seeds = R
runs``) and ends with the overall progress counted in configurations (they all train
together), and once trained each configuration prints one plain line, ``[1/C configurations
done] ...`` (:class:`fhc_jax.experiment.progress.RunsProgress`).
"""

from __future__ import annotations

import csv
import io
import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import jax
import numpy as np

from fhc_jax.experiment import judge, rundir, statistics, tracking
from fhc_jax.experiment.config import ExperimentSpec, load_spec
from fhc_jax.experiment.progress import RunsProgress, env_steps_per_iteration
from fhc_jax.experiment.rundir import machine_info
from fhc_jax.experiment.runner import ChunkedTrainer, seed_keys
from fhc_jax.experiment.typed_settings import ConfigError, parse_assignment


def parse_grid(items: Sequence[str]) -> dict[str, list]:
    """``["trace=0.2,0.5", "critic_lr.init=0.5,1"]`` -> ``{"trace": [0.2, 0.5], ...}``
    (each value parsed as TOML).

    Raises:
        ConfigError: a malformed item, an empty value list or a key given twice.
    """
    grid: dict[str, list] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip():
            raise ConfigError(f"--grid expects key=v1,v2,..., found {item!r}")
        if key in grid:
            raise ConfigError(f"--grid {key} is given twice")
        grid[key] = [parse_assignment(f"v={v}")[1] for v in raw.split(",")]
    return grid


def grid_specs(spec: ExperimentSpec, grid: dict[str, list]) -> list[tuple[dict[str, Any], ExperimentSpec]]:
    """Every grid point as (assignment, validated spec), in row-major order of ``grid``.

    Raises:
        ConfigError: a key that is not a numeric hyperparameter (pytree leaf) of the learner
            (env options, ``run.*`` and static fields change shapes or code: separate runs),
            or values rejected by the learner's ``Config``.
    """
    leaves = set(getattr(type(spec.learner), "_leaf_fields", ()))
    for key in grid:
        if key.split(".")[0] not in leaves:
            raise ConfigError(
                f"--grid {key}: only numeric hyperparameters of {spec.algo} can be swept in one program "
                f"(its pytree leaves: {', '.join(sorted(leaves))}, with .init/.power/.decay for schedules); "
                "static fields and env options need separate runs"
            )
    base = spec.settings()
    out = []
    for values in itertools.product(*grid.values()):
        assignment = dict(zip(grid, values))
        out.append((assignment, load_spec(settings={**base, **assignment})))
    return out


def sweep_config(spec: ExperimentSpec, grid: dict[str, list]) -> dict[str, Any]:
    """A sweep directory's config.json (and its trackers' configuration)."""
    return {
        "format_version": rundir.FORMAT_VERSION,
        "kind": "sweep",
        "algo": spec.algo,
        "env": spec.env_name,
        "grid": grid,
        "settings": spec.settings(),
        "machine": machine_info(),
    }


def run_sweep(
    spec: ExperimentSpec,
    grid: dict[str, list],
    *,
    shard: bool = True,
    stream: IO[str] | None = None,
    quiet: bool = False,
    loggers: str | Sequence[str] | None = None,
    out: str | Path | None = None,
) -> dict[str, Any]:
    """Train every grid point x seed in one program; returns the results (see :func:`write_sweep`).

    ``loggers`` (:mod:`fhc_jax.experiment.tracking`: ``"tensorboard"``, ``"wandb"``, several, or
    None) log every run's metrics per iteration as ``config_{c}/seed_{s}/...`` into the sweep
    directory ``out`` (required with loggers).

    Returns a dict with ``grid`` (assignments, C), ``exact_reward`` (C, S), ``exact_costs``
    (C, S, M), ``multipliers`` (C, S, M) or None, ``thresholds`` (M,), ``optimum``
    (:class:`~fhc_jax.experiment.judgement.Optimum` or None), ``tolerance``, ``best`` (index or
    None), ``rows`` (table rows, with each configuration's ``rank``: 1 is best), timings and
    the machine.
    """
    from fhc_jax.algos import stack

    t0 = time.perf_counter()
    loggers = tracking.resolve_loggers(loggers)
    if loggers and out is None:
        raise ConfigError("run_sweep: loggers need out, the sweep directory their logs go to")
    points = grid_specs(spec, grid)
    configs = [p[1].learner for p in points]
    c, s = len(configs), spec.seeds
    stacked = stack(configs)
    hparams = jax.tree.map(lambda x: np.repeat(np.asarray(x), s, axis=0), stacked)
    keys = seed_keys(spec.seed, s)
    keys = jax.random.wrap_key_data(
        np.tile(np.asarray(jax.random.key_data(keys)), (c, 1)), impl=jax.random.key_impl(keys)
    )
    env, params = spec.make_env()
    if not env.has_exact_model:
        raise ConfigError(
            f"sweep: environment {spec.env_name!r} has no exact model (has_exact_model is False); "
            "sweeps rank configurations by their exact judgement"
        )
    cmdp = env.to_cmdp(params)
    thresholds = np.asarray(cmdp.thresholds, np.float64)
    trainer = ChunkedTrainer(
        spec.module.make_learner(env, params, spec.learner), c * s, spec.chunk_size, hparams=hparams, shard=shard
    )
    overall = None if quiet else RunsProgress(c, stream, unit="configurations")  # each trains its S seeds at once
    missing = statistics.unavailable()
    if missing is not None:  # said before training, not after it
        print(
            f"fhc-jax sweep: warning: {missing}; the bootstrap intervals will be missing",
            file=stream if stream is not None else sys.stderr,
            flush=True,
        )
    opt, infeasible = judge.solve_optimum(cmdp)
    if infeasible is not None:  # the same message as fhc-jax solve; the sweep proceeds
        print(
            f"fhc-jax sweep: warning: {infeasible}; the sweep proceeds, but no policy can meet the threshold",
            file=stream if stream is not None else sys.stderr,
            flush=True,
        )
    # a diverged configuration must not stop the others: it is ranked last (non-finite reward)
    trackers = tracking.Trackers(
        loggers,
        out or ".",
        name=Path(out or "sweep").name,
        stream=stream,
        config=sweep_config(spec, grid),
        hparams=spec.settings(),
        run_labels=[f"config_{i}/seed_{j}" for i in range(c) for j in range(s)],
        steps_per_iteration=env_steps_per_iteration(spec.learner, env.horizon),
    )
    try:
        label = f"sweep {spec.algo} on {spec.env_name} ({c} configurations x {s} seeds = {c * s} runs)"
        state = trainer.drive(
            keys,
            env=env,
            params=params,
            stream=stream,
            trackers=trackers,
            stop_on_divergence=False,
            label=None if quiet else label,
            overall=None if quiet else lambda f: overall.status(f * c),
        )
    except BaseException:
        trackers.close()
        raise
    diverged = set(() if state.divergence is None else state.divergence.seeds)
    reward = state.exact_reward[:, -1].reshape(c, s)
    costs = state.exact_costs[:, -1].reshape(c, s, -1)
    nu = state.metrics["multipliers"][:, -1].reshape(c, s, -1) if "multipliers" in state.metrics else None
    judged = judge.judge(
        reward.reshape(-1),
        costs.reshape(c * s, -1),
        thresholds,
        optimum=opt,
        multipliers=None if nu is None else nu.reshape(c * s, -1),
        tolerance=spec.feasibility_tolerance,
        cost_scale=judge.cost_scale(cmdp),
    )
    per_config = [judged.take(slice(i * s, (i + 1) * s)) for i in range(c)]
    order = sorted(range(c), key=lambda i: per_config[i].rank_key(), reverse=True)
    best = order[0] if per_config[order[0]].feasible_seeds > 0 else None
    rank = {i: n + 1 for n, i in enumerate(order)}
    rows = []
    for i, (assignment, _) in enumerate(points):
        j = per_config[i]
        mean_reward = float(j.reward.mean())
        rows.append(
            {
                **assignment,
                "mean_exact_reward": mean_reward,
                "min_exact_reward": float(j.reward.min()),
                "mean_exact_costs": j.costs.mean(0).tolist(),
                "max_exact_costs": j.costs.max(0).tolist(),
                "feasible_seeds": j.feasible_seeds,
                "diverged_seeds": sum(1 for r in range(i * s, (i + 1) * s) if r in diverged),
                "worst_fraction_of_optimum": None
                if j.fraction_of_optimum is None
                else float(j.fraction_of_optimum.min()),
                "relative_gap": None
                if opt is None or not opt.reward
                else float((opt.reward - mean_reward) / abs(opt.reward)),
                "rank": rank[i],
                "best": i == best,
                "statistics": statistics.seed_statistics(j),
            }
        )
        if overall is not None:  # one plain line per completed configuration
            overall.done(
                ", ".join(f"{k}={v}" for k, v in assignment.items()),
                f"rank {rank[i]}, {j.feasible_seeds}/{s} seeds feasible; "
                + statistics.format_line(rows[-1]["statistics"], digits=3),
            )
    result = {
        "grid": [p[0] for p in points],
        "keys": list(grid),
        "exact_reward": reward,
        "exact_costs": costs,
        "multipliers": nu,
        "thresholds": thresholds,
        "optimum": opt,
        "tolerance": judged.tolerance,
        "best": best,
        "rows": rows,
        "env": spec.env_name,
        "env_title": spec.env_title(),
        "timing": {"wall_s": time.perf_counter() - t0, "compile_s": trainer.compile_s, "train_s": state.elapsed_s},
        "machine": machine_info(),
        "sharded": shard,
        "divergence": None if state.divergence is None else state.divergence.as_dict(),
        "feasibility": judge.feasibility(infeasible),
    }
    trackers.log_summary({k: result[k] for k in ("grid", "rows", "best", "timing", "divergence", "feasibility")})
    trackers.close()
    return result


def format_sweep(result: dict[str, Any]) -> str:
    """The sweep's summary table (one line per configuration; * marks the best)."""
    keys = result["keys"]
    head = "  ".join(f"{k:>18}" for k in keys)
    seeds = int(np.shape(result["exact_reward"])[1])
    lines = [
        (
            f"  {head}  {'rank':>4} {'mean reward':>12} {'min reward':>11} {'mean cost':>14} {'max cost':>14} "
            f"{'feasible':>9} {'gap':>7}  {f'IQM reward, 95% CI ({seeds} seeds)':>32}  {'P(violation), 95% CI':>20}"
        )
    ]
    for row in result["rows"]:
        vals = "  ".join(f"{row[k]!s:>18}" for k in keys)
        gap = "-" if row["relative_gap"] is None else f"{row['relative_gap']:.1%}"
        st = row.get("statistics")
        iqm = "-" if st is None else statistics.format_estimate(st["reward"], "iqm", 3)
        viol = "-" if st is None else statistics.format_violation(st["violation_probability"])
        lines.append(
            f"{'*' if row['best'] else ' '} {vals}  {row['rank']:>4} {row['mean_exact_reward']:>12.4f} "
            f"{row['min_exact_reward']:>11.4f} "
            f"{'/'.join(f'{x:.3f}' for x in row['mean_exact_costs']):>14} "
            f"{'/'.join(f'{x:.3f}' for x in row['max_exact_costs']):>14} {row['feasible_seeds']:>9} {gap:>7}"
            f"  {iqm:>32}  {viol:>20}"
        )
    alpha = "/".join(f"{a:g}" for a in result["thresholds"])
    rule = f"cost <= alpha + {result['tolerance']:g} |alpha|, alpha = {alpha}"
    diverged = sum(row.get("diverged_seeds", 0) > 0 for row in result["rows"])
    if diverged:
        lines.append(
            f"{diverged} configuration(s) diverged (non-finite values; ranked last): "
            "see the diverged_seeds column of summary.json"
        )
    if result["best"] is None:
        lines.append(f"no configuration has a feasible seed ({rule})")
    else:
        lines.append(f"* best: most feasible seeds ({rule}), then the highest worst-seed exact reward")
    opt = result["optimum"]
    if opt is not None:
        lines.append(f"optimum: reward {opt.reward:.4f}, cost {'/'.join(f'{x:.3f}' for x in opt.costs)}")
    lines.append(
        f"over {seeds} seeds per configuration: IQM (interquartile mean) with its stratified-bootstrap 95% "
        "interval, P(violation) with its Wilson 95% interval (summary.json: each row's statistics)"
    )
    return "\n".join(lines)


def write_sweep(out: str | Path, spec: ExperimentSpec, grid: dict[str, list], result: dict[str, Any]) -> None:
    """runs.csv (one row per configuration x seed), summary.json and summary.txt (config.json:
    :func:`sweep_config`, written before training)."""
    out = Path(out)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    m = result["exact_costs"].shape[-1]
    w.writerow(
        list(result["keys"])
        + ["seed", "exact_reward"]
        + [f"exact_cost_{k}" for k in range(m)]
        + ([f"multiplier_{k}" for k in range(m)] if result["multipliers"] is not None else [])
    )
    for i, assignment in enumerate(result["grid"]):
        for s in range(result["exact_reward"].shape[1]):
            row = [assignment[k] for k in result["keys"]] + [s, repr(float(result["exact_reward"][i, s]))]
            row += [repr(float(x)) for x in result["exact_costs"][i, s]]
            if result["multipliers"] is not None:
                row += [repr(float(x)) for x in result["multipliers"][i, s]]
            w.writerow(row)
    rundir.write_bytes_atomic(out / "runs.csv", buf.getvalue().encode())
    opt = result["optimum"]
    rundir.write_json_atomic(
        out / rundir.SUMMARY,
        {
            "env": result["env"],
            "env_title": result["env_title"],
            "rows": result["rows"],
            "best": result["best"],
            "thresholds": result["thresholds"],
            "feasibility_tolerance": result["tolerance"],
            "optimum": None if opt is None else opt.as_dict(),
            "timing": result["timing"],
            "machine": result["machine"],
            "sharded": result["sharded"],
            "divergence": result.get("divergence"),
            "feasibility": result.get("feasibility"),
        },
    )
    rundir.write_bytes_atomic(out / "summary.txt", (format_sweep(result) + "\n").encode())
