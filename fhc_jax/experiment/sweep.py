"""``fhc-jax sweep``: a grid of numeric hyperparameters x seeds as ONE vmapped, sharded program.

The C grid points are validated configs (``Config.replace``) stacked with
:func:`fhc_jax.algos.common.stack` (numeric fields become arrays with a leading axis; static
fields must not vary, they set shapes and code paths). Configurations and seeds are flattened
into one runs axis of R = C x S (config-major: run = c * S + s; seed s uses the same key in
every configuration), padded to a multiple of the device count and sharded over all devices
(``NamedSharding(Mesh(jax.devices(), ("runs",)), PartitionSpec("runs"))``), then trained in
chunks like ``fhc-jax train``. Multi-host: call ``jax.distributed.initialize()`` on every
host before the sweep (``fhc-jax sweep --distributed``); ``jax.devices()`` then lists every
host's devices, every process builds the same global inputs and gathers the results.

The best configuration maximises the seed-mean exact reward among those whose seed-mean exact
costs satisfy every threshold (mean cost <= alpha).
"""

from __future__ import annotations

import csv
import io
import itertools
import time
from pathlib import Path
from typing import IO, Any, Sequence

import jax
import numpy as np

from fhc_jax.algos import common
from fhc_jax.experiment import rundir, summary as summ
from fhc_jax.experiment.config_io import ConfigError, ExperimentSpec, load_spec, parse_assignment
from fhc_jax.experiment.progress import Progress, env_steps_per_iteration
from fhc_jax.experiment.registry import load_algorithm
from fhc_jax.experiment.runner import ChunkedTrainer, seed_keys


def parse_grid(items: Sequence[str]) -> dict[str, list]:
    """``["trace=0.2,0.5", "critic_step.init=0.5,1"]`` -> ``{"trace": [0.2, 0.5], ...}``
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
                "static fields and env options need separate runs")
    base = spec.settings()
    out = []
    for values in itertools.product(*grid.values()):
        assignment = dict(zip(grid, values))
        out.append((assignment, load_spec(settings={**base, **assignment})))
    return out


def run_sweep(spec: ExperimentSpec, grid: dict[str, list], *, shard: bool = True, stream: IO[str] | None = None,
              quiet: bool = False) -> dict[str, Any]:
    """Train every grid point x seed in one program; returns the results (see :func:`write_sweep`).

    Returns a dict with ``grid`` (assignments, C), ``exact_reward`` (C, S), ``exact_costs``
    (C, S, M), ``multipliers`` (C, S, M) or None, ``thresholds`` (M,), ``optimum``, ``best``
    (index or None), ``rows`` (table rows), timings and devices.
    """
    t0 = time.perf_counter()
    points = grid_specs(spec, grid)
    configs = [p[1].learner for p in points]
    c, s = len(configs), spec.seeds
    stacked = common.stack(configs)
    hparams = jax.tree.map(lambda x: np.repeat(np.asarray(x), s, axis=0), stacked)
    keys = seed_keys(spec.seed, s)
    keys = jax.random.wrap_key_data(np.tile(np.asarray(jax.random.key_data(keys)), (c, 1)),
                                    impl=jax.random.key_impl(keys))
    module = load_algorithm(spec.algo)
    env, params = spec.make_env()
    cmdp = env.to_cmdp(params)
    thresholds = np.asarray(cmdp.thresholds, np.float64)
    learner = module.make_learner(env, params, spec.learner)
    trainer = ChunkedTrainer(learner, c * s, spec.chunk_size, hparams=hparams, shard=shard)
    progress = None if quiet else Progress(f"sweep {spec.algo} ({c} configs x {s} seeds)", spec.num_iterations,
                                           c * s, env_steps_per_iteration(spec.learner, env.horizon), thresholds, stream)
    state = trainer.run(trainer.init(keys), on_chunk=progress)
    reward = state.exact_reward[:, -1].reshape(c, s)
    costs = state.exact_costs[:, -1].reshape(c, s, -1)
    nu = state.metrics["multipliers"][:, -1].reshape(c, s, -1) if "multipliers" in state.metrics else None
    opt = summ.optimum(cmdp)
    feasible = np.all(costs.mean(1) <= thresholds, axis=-1)
    mean_reward = reward.mean(1)
    best = int(np.argmax(np.where(feasible, mean_reward, -np.inf))) if feasible.any() else None
    rows = []
    for i, (assignment, _) in enumerate(points):
        rows.append({
            **assignment,
            "mean_exact_reward": float(mean_reward[i]),
            "min_exact_reward": float(reward[i].min()),
            "mean_exact_costs": costs[i].mean(0).tolist(),
            "max_exact_costs": costs[i].max(0).tolist(),
            "feasible_seeds": int(np.sum(np.all(costs[i] <= thresholds, axis=-1))),
            "relative_gap": None if opt is None or not opt["reward"] else float((opt["reward"] - mean_reward[i]) / abs(opt["reward"])),
            "best": i == best,
        })
    return {
        "grid": [p[0] for p in points], "keys": list(grid), "exact_reward": reward, "exact_costs": costs,
        "multipliers": nu, "thresholds": thresholds, "optimum": opt, "best": best, "rows": rows,
        "timing": {"wall_s": time.perf_counter() - t0, "compile_s": trainer.compile_s, "train_s": state.elapsed_s},
        "device": summ.device_info(), "sharded": shard,
    }


def format_sweep(result: dict[str, Any]) -> str:
    """The sweep's summary table (one line per configuration; * marks the best)."""
    keys = result["keys"]
    head = "  ".join(f"{k:>18}" for k in keys)
    lines = [f"  {head}  {'mean reward':>12} {'min reward':>11} {'mean cost':>14} {'max cost':>14} {'feasible':>9} {'gap':>7}"]
    for row in result["rows"]:
        vals = "  ".join(f"{row[k]!s:>18}" for k in keys)
        gap = "-" if row["relative_gap"] is None else f"{row['relative_gap']:.1%}"
        lines.append(f"{'*' if row['best'] else ' '} {vals}  {row['mean_exact_reward']:>12.4f} {row['min_exact_reward']:>11.4f} "
                     f"{'/'.join(f'{x:.3f}' for x in row['mean_exact_costs']):>14} "
                     f"{'/'.join(f'{x:.3f}' for x in row['max_exact_costs']):>14} {row['feasible_seeds']:>9} {gap:>7}")
    alpha = "/".join(f"{a:g}" for a in result["thresholds"])
    if result["best"] is None:
        lines.append(f"no configuration meets mean cost <= alpha = {alpha}")
    else:
        lines.append(f"* best: highest mean exact reward with mean exact cost <= alpha = {alpha}")
    opt = result["optimum"]
    if opt is not None:
        lines.append(f"optimum: reward {opt['reward']:.4f}, cost {'/'.join(f'{x:.3f}' for x in opt['costs'])}")
    return "\n".join(lines)


def write_sweep(out: str | Path, spec: ExperimentSpec, grid: dict[str, list], result: dict[str, Any]) -> None:
    """config.json, runs.csv (one row per configuration x seed), summary.json, summary.txt."""
    out = Path(out)
    rundir.write_json_atomic(out / rundir.CONFIG, {"kind": "sweep", "algo": spec.algo, "grid": grid,
                                                   "settings": spec.settings(), "versions": summ.versions()})
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    m = result["exact_costs"].shape[-1]
    w.writerow(list(result["keys"]) + ["seed", "exact_reward"] + [f"exact_cost_{k}" for k in range(m)]
               + ([f"multiplier_{k}" for k in range(m)] if result["multipliers"] is not None else []))
    for i, assignment in enumerate(result["grid"]):
        for s in range(result["exact_reward"].shape[1]):
            row = [assignment[k] for k in result["keys"]] + [s, repr(float(result["exact_reward"][i, s]))]
            row += [repr(float(x)) for x in result["exact_costs"][i, s]]
            if result["multipliers"] is not None:
                row += [repr(float(x)) for x in result["multipliers"][i, s]]
            w.writerow(row)
    rundir.write_bytes_atomic(out / "runs.csv", buf.getvalue().encode())
    opt = result["optimum"]
    rundir.write_json_atomic(out / rundir.SUMMARY, {
        "rows": result["rows"], "best": result["best"], "thresholds": result["thresholds"],
        "optimum": None if opt is None else {"reward": opt["reward"], "costs": opt["costs"], "multipliers": opt["multipliers"]},
        "timing": result["timing"], "device": result["device"], "sharded": result["sharded"],
        "versions": summ.versions(),
    })
    rundir.write_bytes_atomic(out / "summary.txt", (format_sweep(result) + "\n").encode())
