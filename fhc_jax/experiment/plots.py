"""Figures of a run directory, drawn from its files alone (matplotlib, Agg backend, PNG).

* ``learning_curves.png``: reward and cost per constraint against iterations: the batch
  mean over seeds with a min-max band, the exact evaluations (dots: mean over seeds), the
  threshold alpha and the optimum's reward/cost.
* ``stage_costs.png``: expected cost collected at each stage h = 0..H (terminal last) under
  the final policies (mean and min-max band over seeds) and under the optimum.
* ``policy_maps.png``: most likely action per cell (arrows; a dot for "stay") of seed 0's
  final policy and of the optimum, at a few stages (gridworlds only).
* ``multipliers.png``: learned multipliers nu against iterations vs the optimal nu*.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from fhc_jax.experiment import rundir


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _band(ax, x, values, label, color):
    """Mean over seeds (rows of ``values``) with a min-max band; NaN-aware."""
    ok = ~np.all(np.isnan(values), axis=0)
    x, values = x[ok], values[:, ok]
    ax.plot(x, np.mean(values, 0), color=color, label=label, lw=1.2)
    if values.shape[0] > 1:
        ax.fill_between(x, np.min(values, 0), np.max(values, 0), color=color, alpha=0.2, lw=0)


def learning_curves(columns: dict, thresholds: np.ndarray, optimum: dict | None, path: Path, title: str) -> None:
    plt = _pyplot()
    m = len(thresholds)
    fig, axes = plt.subplots(1, 1 + m, figsize=(5 * (1 + m), 3.6), squeeze=False)
    axes = axes[0]
    panels = [("reward", "exact_reward", "reward", None, None if optimum is None else optimum["reward"])]
    panels += [(f"cost_{k}", f"exact_cost_{k}", f"cost {k}", thresholds[k],
                None if optimum is None else optimum["costs"][k]) for k in range(m)]
    for ax, (col, exact_col, name, alpha, opt) in zip(axes, panels):
        if col in columns:
            its, vals = rundir.per_seed(columns, col)
            _band(ax, its, vals, "batch (mean, min-max)", "C0")
        its, ex = rundir.per_seed(columns, exact_col)
        ok = ~np.all(np.isnan(ex), axis=0)
        ax.plot(its[ok], np.mean(ex[:, ok], 0), "o-", color="C1", ms=3, lw=0.8, label="exact (mean)")
        if alpha is not None:
            ax.axhline(alpha, color="red", ls="--", lw=1, label="threshold alpha")
        if opt is not None:
            ax.axhline(opt, color="black", ls=":", lw=1, label="optimum")
        ax.set_xlabel("iteration")
        ax.set_ylabel(name)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def stage_costs(npz: dict, path: Path, title: str) -> None:
    plt = _pyplot()
    sc = npz["stage_costs"]  # (R, M, H+1)
    m = sc.shape[1]
    fig, axes = plt.subplots(1, m, figsize=(6 * m, 3.6), squeeze=False)
    h = np.arange(sc.shape[-1])
    for k, ax in enumerate(axes[0]):
        _band(ax, h, sc[:, k], "learned (mean, min-max)", "C0")
        if "optimal_stage_costs" in npz:
            ax.plot(h, npz["optimal_stage_costs"][k], color="black", ls=":", label="optimum")
        ax.set_xlabel("stage h (last: terminal)")
        ax.set_ylabel(f"expected cost {k} at stage h")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _arrows(ax, table_h: np.ndarray, size: int, title: str) -> None:
    """Most likely action per cell of one stage's (S, 9) policy, GridWorld action order."""
    best = np.argmax(table_h, axis=-1)
    prob = np.max(table_h, axis=-1)
    rows, cols = np.divmod(np.arange(size * size), size)
    d_row, d_col = best // 3 - 1, best % 3 - 1
    stay = best == 4
    ax.quiver(cols[~stay], rows[~stay], d_col[~stay], d_row[~stay], prob[~stay], angles="xy",
              scale_units="xy", scale=2.2, cmap="viridis", clim=(0, 1), width=0.012)
    ax.scatter(cols[stay], rows[stay], c=prob[stay], cmap="viridis", vmin=0, vmax=1, s=12)
    ax.set_xlim(-0.5, size - 0.5)
    ax.set_ylim(size - 0.5, -0.5)  # row 0 at the top
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=8)


def policy_maps(npz: dict, size: int, path: Path, stages: Sequence[int] | None = None) -> None:
    plt = _pyplot()
    pol = npz["policy"]  # (R, H, S, A)
    horizon = pol.shape[1]
    if stages is None:
        stages = sorted({0, horizon // 2, horizon - 1})
    rows = [("seed 0", pol[0])] + ([("optimum", npz["optimal_policy"])] if "optimal_policy" in npz else [])
    fig, axes = plt.subplots(len(rows), len(stages), figsize=(2.6 * len(stages), 2.6 * len(rows)), squeeze=False)
    for i, (name, table) in enumerate(rows):
        for j, h in enumerate(stages):
            _arrows(axes[i, j], table[h], size, f"{name}, stage {h}")
    fig.suptitle("most likely action per cell (colour: its probability; dot: stay)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def multipliers(columns: dict, optimum: dict | None, path: Path, title: str) -> None:
    plt = _pyplot()
    names = sorted(c for c in columns if c.startswith("multiplier_"))
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for k, col in enumerate(names):
        its, vals = rundir.per_seed(columns, col)
        _band(ax, its, vals, f"nu_{k} (mean, min-max)", f"C{k}")
        if optimum is not None:
            ax.axhline(optimum["multipliers"][k], color=f"C{k}", ls=":", lw=1, label=f"optimal nu*_{k}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("multiplier nu")
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_run(path: str | Path, stages: Sequence[int] | None = None) -> list[Path]:
    """Draw every figure of a run directory into ``path/plots/``; returns the files written.

    Needs config.json and metrics.csv; summary.json and policy.npz (written when a run
    completes) add the optimum, the stage-cost profile and the policy maps.
    """
    path = Path(path)
    cfg = rundir.read_json(path / rundir.CONFIG)
    columns = rundir.read_metrics_csv(path / rundir.METRICS)
    summary = rundir.read_json(path / rundir.SUMMARY) if (path / rundir.SUMMARY).exists() else {}
    optimum = summary.get("optimum")
    env = cfg.get("env", {})
    alpha = np.atleast_1d(np.asarray(env.get("alpha", 25.0), np.float64))
    thresholds = np.asarray(summary.get("thresholds", np.broadcast_to(alpha, (env.get("num_constraints", 1),))))
    title = f"{cfg.get('algo', '?')} on GridWorld {env.get('size')}x{env.get('size')}, H={env.get('horizon')}, {cfg.get('seeds')} seeds"
    out = path / rundir.PLOTS
    out.mkdir(exist_ok=True)
    written = [out / "learning_curves.png"]
    learning_curves(columns, thresholds, optimum, written[-1], title)
    if any(c.startswith("multiplier_") for c in columns):
        written.append(out / "multipliers.png")
        multipliers(columns, optimum, written[-1], title)
    if (path / rundir.POLICY).exists():
        with np.load(path / rundir.POLICY) as f:
            npz = {k: f[k] for k in f.files}
        written.append(out / "stage_costs.png")
        stage_costs(npz, written[-1], title)
        size = env.get("size")
        if isinstance(size, int) and npz["policy"].shape[2] == size * size:
            written.append(out / "policy_maps.png")
            policy_maps(npz, size, written[-1], stages)
    return written
