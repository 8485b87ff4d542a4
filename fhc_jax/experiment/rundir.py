"""The run directory: the files a training run leaves behind, written atomically.

Layout of ``runs/NAME``::

    config.json      everything needed to rerun (algo, environment name and settings, full learner
                     config, seeds, chunk size, feasibility tolerance, machine record);
                     ``fhc-jax train --resume`` checks against it
    metrics.csv      one row per (seed, iteration): training metrics of the iteration's batch
                     and, where evaluated (chunk boundaries, iteration 0 included), the exact
                     reward and costs of the policy after that many updates
    summary.json     the judgement (fhc_jax.experiment.judge) per seed: exact reward/costs,
                     feasibility, slack, gap to the exact optimum, learned vs optimal multipliers;
                     worst-seed aggregates; machine record, timings
    policy.npz       final policy tables (R, H, S, A), the optimum's table, the per-stage
                     expected costs of both, and for spatial environments ``grid_shape`` (and
                     ``action_moves``): ``fhc-jax plot`` redraws from files alone
    checkpoints/     orbax checkpoints (``checkpoints/<iteration>/``)
    plots/           PNG figures (:mod:`fhc_jax.experiment.plots`)

Every file is written to a temporary file in the same directory and renamed over the old one
(``os.replace``, atomic on POSIX), so an interrupted run never leaves a truncated file.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

CONFIG = "config.json"
METRICS = "metrics.csv"
SUMMARY = "summary.json"
POLICY = "policy.npz"
CHECKPOINTS = "checkpoints"
PLOTS = "plots"

_COLUMN_NAMES = {"costs": "cost", "multipliers": "multiplier"}


class RunDirectoryError(ValueError):
    """A run directory that cannot be used as asked (exists, differs, is missing files)."""


# ----------------------------------------------------------------------------- atomic writes


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` through a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, payload: Any) -> None:
    """JSON (indented, NaN written as null) through :func:`write_bytes_atomic`."""
    write_bytes_atomic(path, (json.dumps(_jsonable(payload), indent=2) + "\n").encode())


def write_npz_atomic(path: str | Path, **arrays: np.ndarray) -> None:
    """A ``.npz`` archive through :func:`write_bytes_atomic`."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    write_bytes_atomic(path, buf.getvalue())


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; :class:`RunDirectoryError` when missing or invalid."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RunDirectoryError(f"{path} does not exist") from None
    except json.JSONDecodeError as err:
        raise RunDirectoryError(f"{path} is not valid JSON: {err}") from None


# ----------------------------------------------------------------------------- directory checks


def prepare(path: str | Path, *, resume: bool, overwrite: bool) -> Path:
    """Check that ``path`` may be used and create it.

    * new or empty directory: fine;
    * an existing run (has config.json): ``resume`` continues it, ``overwrite`` deletes it,
      neither is refused (nothing already written is lost by accident);
    * any other non-empty directory: refused (``--overwrite`` never deletes foreign files).

    Raises:
        RunDirectoryError: the refusals above, or ``resume`` without a run to resume.
    """
    path = Path(path)
    if resume and overwrite:
        raise RunDirectoryError("--resume and --overwrite exclude each other")
    if path.exists() and not path.is_dir():
        raise RunDirectoryError(f"--out {path} exists and is not a directory")
    is_run = (path / CONFIG).is_file()
    non_empty = path.is_dir() and any(path.iterdir())
    if resume:
        if not is_run:
            raise RunDirectoryError(f"--resume: {path} is not a run directory (no {CONFIG})")
        return path
    if non_empty:
        if not is_run:
            raise RunDirectoryError(f"--out {path} is a non-empty directory that is not a run directory; "
                                    "choose another --out")
        if not overwrite:
            raise RunDirectoryError(f"--out {path} already holds a run; pass --resume to continue it "
                                    "or --overwrite to replace it")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def settings_difference(stored: dict, requested: dict) -> list[str]:
    """Keys whose values differ between two flat settings dicts, as "key: stored -> requested"."""
    out = []
    for k in sorted(set(stored) | set(requested)):
        a, b = stored.get(k, "<absent>"), requested.get(k, "<absent>")
        if _jsonable(a) != _jsonable(b):
            out.append(f"{k}: {a!r} -> {b!r}")
    return out


# ----------------------------------------------------------------------------- metrics.csv


def metric_columns(metrics: dict[str, np.ndarray]) -> list[tuple[str, str, tuple]]:
    """(column, metric key, index) for every scalar in one iteration's metrics, in the order
    reward, costs, multipliers, then the rest alphabetically. ``metrics``: name -> (R, N, ...)."""
    order = [k for k in ("reward", "costs", "multipliers") if k in metrics]
    order += sorted(k for k in metrics if k not in order)
    cols = []
    for k in order:
        shape = metrics[k].shape[2:]
        name = _COLUMN_NAMES.get(k, k)
        if not shape:
            cols.append((name, k, ()))
        else:
            for idx in np.ndindex(*shape):
                cols.append((f"{name}_{'_'.join(map(str, idx))}", k, idx))
    return cols


def metrics_csv(metrics: dict[str, np.ndarray], exact_iterations: np.ndarray, exact_reward: np.ndarray,
                exact_costs: np.ndarray, num_iterations: int) -> str:
    """The text of metrics.csv: rows (seed, iteration) for iteration 0..n (row 0 holds only the
    exact evaluation of the initial policy); empty cells where nothing was measured.

    Args: metrics name -> (R, n, ...); exact_iterations (E,); exact_reward (R, E); exact_costs (R, E, M).
    """
    cols = metric_columns(metrics)
    num_runs, num_constraints = exact_costs.shape[0], exact_costs.shape[-1]
    header = ["seed", "iteration"] + [c for c, _, _ in cols] + ["exact_reward"] + [f"exact_cost_{k}" for k in range(num_constraints)]
    exact_at = {int(it): e for e, it in enumerate(exact_iterations)}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    fmt = lambda v: repr(float(v))
    for r in range(num_runs):
        for it in range(num_iterations + 1):
            row = [r, it]
            if it == 0:
                row += [""] * len(cols)
            else:
                row += [fmt(metrics[k][r, it - 1][idx]) for _, k, idx in cols]
            e = exact_at.get(it)
            if e is None:
                row += [""] * (1 + num_constraints)
            else:
                row += [fmt(exact_reward[r, e])] + [fmt(c) for c in exact_costs[r, e]]
            w.writerow(row)
    return buf.getvalue()


def read_metrics_csv(path: str | Path) -> dict[str, np.ndarray]:
    """metrics.csv as columns: name -> float array over rows (NaN for empty cells); ``seed`` and
    ``iteration`` as int arrays."""
    path = Path(path)
    try:
        with path.open(newline="") as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        raise RunDirectoryError(f"{path} does not exist") from None
    if not rows:
        raise RunDirectoryError(f"{path} is empty")
    header, body = rows[0], rows[1:]
    out: dict[str, np.ndarray] = {}
    for j, name in enumerate(header):
        vals = [row[j] if j < len(row) else "" for row in body]
        if name in ("seed", "iteration"):
            out[name] = np.array([int(v) for v in vals], dtype=np.int64)
        else:
            out[name] = np.array([float(v) if v != "" else np.nan for v in vals], dtype=np.float64)
    return out


def per_seed(columns: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    """A column of :func:`read_metrics_csv` as (iterations (N+1,), values (R, N+1))."""
    seeds = columns["seed"]
    num_runs = int(seeds.max()) + 1
    its = columns["iteration"][seeds == 0]
    values = np.stack([columns[name][seeds == r] for r in range(num_runs)])
    return its, values
