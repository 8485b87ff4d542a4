"""metrics.csv, the per-iteration record of a run directory: its columns, its text, and reading
it back (``fhc-jax plot`` draws from it alone).

One row per (seed, iteration) for iteration 0..N: the training metrics of the iteration's batch
(:func:`metric_columns`: reward, cost_k, multiplier_k, then the others) and, where the policy
was evaluated (chunk boundaries, iteration 0 included), its exact reward and costs
(``exact_reward``, ``exact_cost_k``); empty cells where nothing was measured. It is written
whole, atomically, after every chunk (:func:`fhc_jax.experiment.rundir.write_bytes_atomic`).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from fhc_jax.experiment.rundir import RunDirectoryError, one_line

_COLUMN_NAMES = {"costs": "cost", "multipliers": "multiplier"}


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


def metrics_csv(
    metrics: dict[str, np.ndarray],
    exact_iterations: np.ndarray,
    exact_reward: np.ndarray,
    exact_costs: np.ndarray,
    num_iterations: int,
) -> str:
    """The text of metrics.csv: rows (seed, iteration) for iteration 0..n (row 0 holds only the
    exact evaluation of the initial policy); empty cells where nothing was measured.

    Args: metrics name -> (R, n, ...); exact_iterations (E,); exact_reward (R, E); exact_costs (R, E, M).
    """
    cols = metric_columns(metrics)
    num_runs, num_constraints = exact_costs.shape[0], exact_costs.shape[-1]
    header = (
        ["seed", "iteration"]
        + [c for c, _, _ in cols]
        + ["exact_reward"]
        + [f"exact_cost_{k}" for k in range(num_constraints)]
    )
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
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        raise RunDirectoryError(f"{path} does not exist") from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise RunDirectoryError(f"{path} is not a readable CSV file ({one_line(err)})") from None
    except OSError as err:
        raise RunDirectoryError(f"cannot read {path}: {err.strerror or err}") from None
    if not rows:
        raise RunDirectoryError(f"{path} is empty")
    header, body = rows[0], rows[1:]
    if "seed" not in header or "iteration" not in header:
        raise RunDirectoryError(
            f"{path}: the header has no 'seed' and 'iteration' columns; it is not a "
            "metrics.csv written by fhc-jax train"
        )
    out: dict[str, np.ndarray] = {}
    for j, name in enumerate(header):
        vals = [row[j] if j < len(row) else "" for row in body]
        integer = name in ("seed", "iteration")
        parsed = []
        for i, v in enumerate(vals):
            try:
                parsed.append(int(v) if integer else (float(v) if v != "" else np.nan))
            except ValueError:
                raise RunDirectoryError(
                    f"{path}, line {i + 2}, column {name!r}: {v!r} is not "
                    f"{'an integer' if integer else 'a number'}; the file is damaged "
                    "(fhc-jax train --resume rewrites it)"
                ) from None
        out[name] = np.array(parsed, dtype=np.int64 if integer else np.float64)
    return out


def per_seed(columns: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    """A column of :func:`read_metrics_csv` as (iterations (N+1,), values (R, N+1))."""
    seeds = columns["seed"]
    num_runs = int(seeds.max()) + 1
    its = columns["iteration"][seeds == 0]
    values = np.stack([columns[name][seeds == r] for r in range(num_runs)])
    return its, values
