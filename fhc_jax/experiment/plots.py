"""Figures of a run directory, drawn from its files alone (matplotlib, Agg backend, PNG).

* ``learning_curves.png``: reward and cost per constraint against iterations: the batch
  mean over seeds with a min-max band, the exact evaluations (dots: mean over seeds), the
  threshold alpha and the optimum's reward/cost.
* ``stage_costs.png``: expected cost collected at each stage h = 0..H (terminal last) under
  the final policies (mean and min-max band over seeds) and under the optimum.
* ``policy_maps.png``: most likely action per cell of seed 0's final policy and of the optimum,
  at a few stages, for environments that declare ``is_spatial`` (policy.npz then holds their
  ``grid_shape``, rows x cols). Where the environment's registry entry gives each action's
  displacement (``action_moves``, :data:`fhc_jax.experiment.config.ACTION_MOVES`) the
  action is an arrow (a dot for a zero move); otherwise the cell shows the action's index as a
  colour (actions without known geometry).
* ``multipliers.png``: learned multipliers nu against iterations vs the optimal nu*.

:func:`plot_comparison` draws ``fhc-jax compare``'s figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fhc_jax.experiment import metrics_file, rundir


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, title: str | None = None, *, dpi: int = 110, tight: bool = True) -> Path:
    """Lay out ``fig`` (with ``title`` above it), write it as PNG to ``path`` atomically and
    close it."""
    import io

    if title is not None:
        fig.suptitle(title, fontsize=10)
    if tight:
        fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    pyplot().close(fig)
    rundir.write_bytes_atomic(path, buf.getvalue())
    return Path(path)


def _band(ax, x, values, label, color):
    """Mean over seeds (rows of ``values``) with a min-max band; NaN-aware."""
    ok = ~np.all(np.isnan(values), axis=0)
    x, values = x[ok], values[:, ok]
    ax.plot(x, np.mean(values, 0), color=color, label=label, lw=1.2)
    if values.shape[0] > 1:
        ax.fill_between(x, np.min(values, 0), np.max(values, 0), color=color, alpha=0.2, lw=0)


def learning_curves(columns: dict, thresholds: np.ndarray, optimum: dict | None, path: Path, title: str) -> None:
    plt = pyplot()
    m = len(thresholds)
    fig, axes = plt.subplots(1, 1 + m, figsize=(5 * (1 + m), 3.6), squeeze=False)
    axes = axes[0]
    panels = [("reward", "exact_reward", "reward", None, None if optimum is None else optimum["reward"])]
    panels += [
        (f"cost_{k}", f"exact_cost_{k}", f"cost {k}", thresholds[k], None if optimum is None else optimum["costs"][k])
        for k in range(m)
    ]
    for ax, (col, exact_col, name, alpha, opt) in zip(axes, panels):
        if col in columns:
            its, vals = metrics_file.per_seed(columns, col)
            _band(ax, its, vals, "batch (mean, min-max)", "C0")
        its, ex = metrics_file.per_seed(columns, exact_col)
        ok = ~np.all(np.isnan(ex), axis=0)
        ax.plot(its[ok], np.mean(ex[:, ok], 0), "o-", color="C1", ms=3, lw=0.8, label="exact (mean)")
        if alpha is not None and np.isfinite(alpha):
            ax.axhline(alpha, color="red", ls="--", lw=1, label="threshold alpha")
        if opt is not None:
            ax.axhline(opt, color="black", ls=":", lw=1, label="optimum")
        ax.set_xlabel("iteration")
        ax.set_ylabel(name)
        ax.legend(fontsize=7)
    save_figure(fig, path, title)


def stage_costs(npz: dict, path: Path, title: str) -> None:
    plt = pyplot()
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
    save_figure(fig, path, title)


def _frame(ax, rows: int, cols: int, title: str) -> None:
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)  # row 0 at the top
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=8)


def _arrows(ax, table_h: np.ndarray, grid_shape: tuple[int, int], moves: np.ndarray, title: str) -> None:
    """Most likely action per cell of one stage's (S, A) policy as arrows of its (d_row, d_col)
    displacement ``moves`` (A, 2), coloured by its probability; a dot for a zero move."""
    rows_n, cols_n = grid_shape
    best = np.argmax(table_h, axis=-1)
    prob = np.max(table_h, axis=-1)
    rows, cols = np.divmod(np.arange(rows_n * cols_n), cols_n)
    d_row, d_col = moves[best, 0], moves[best, 1]
    stay = (d_row == 0) & (d_col == 0)
    ax.quiver(
        cols[~stay],
        rows[~stay],
        d_col[~stay],
        d_row[~stay],
        prob[~stay],
        angles="xy",
        scale_units="xy",
        scale=2.2,
        cmap="viridis",
        clim=(0, 1),
        width=0.012,
    )
    ax.scatter(cols[stay], rows[stay], c=prob[stay], cmap="viridis", vmin=0, vmax=1, s=12)
    _frame(ax, rows_n, cols_n, title)


def _action_image(ax, table_h: np.ndarray, grid_shape: tuple[int, int], title: str):
    """Most likely action index per cell of one stage's (S, A) policy as a rows x cols image."""
    num_actions = table_h.shape[-1]
    best = np.argmax(table_h, axis=-1).reshape(grid_shape)
    image = ax.imshow(
        best,
        cmap="tab10" if num_actions <= 10 else "viridis",
        vmin=-0.5,
        vmax=num_actions - 0.5,
        interpolation="nearest",
    )
    _frame(ax, grid_shape[0], grid_shape[1], title)
    return image


def policy_maps(npz: Mapping[str, np.ndarray], path: Path, stages: Sequence[int] | None = None) -> None:
    """``policy_maps.png`` from policy.npz: ``policy`` (R, H, S, A), ``grid_shape`` (2,), and
    optionally ``optimal_policy`` (H, S, A) and ``action_moves`` (A, 2)."""
    plt = pyplot()
    pol = npz["policy"]
    horizon = pol.shape[1]
    grid_shape = tuple(int(x) for x in npz["grid_shape"])
    moves = npz.get("action_moves")
    if stages is None:
        stages = sorted({0, horizon // 2, horizon - 1})
    bad = [h for h in stages if not 0 <= h < horizon]
    if bad:
        raise ValueError(f"--stages must lie in [0, {horizon - 1}] (H = {horizon}), found {bad[0]}")
    rows = [("seed 0", pol[0])] + ([("optimum", npz["optimal_policy"])] if "optimal_policy" in npz else [])
    fig, axes = plt.subplots(len(rows), len(stages), figsize=(2.6 * len(stages), 2.6 * len(rows)), squeeze=False)
    image = None
    for i, (name, table) in enumerate(rows):
        for j, h in enumerate(stages):
            if moves is not None:
                _arrows(axes[i, j], table[h], grid_shape, moves, f"{name}, stage {h}")
            else:
                image = _action_image(axes[i, j], table[h], grid_shape, f"{name}, stage {h}")
    if moves is not None:
        fig.suptitle("most likely action per cell (colour: its probability; dot: no move)", fontsize=9)
    else:
        fig.suptitle("most likely action per cell (colour: action index)", fontsize=9)
        fig.colorbar(image, ax=axes, ticks=range(pol.shape[-1]), fraction=0.03)
    save_figure(fig, path, tight=moves is not None)


def multipliers(columns: dict, optimum: dict | None, path: Path, title: str) -> None:
    plt = pyplot()
    names = sorted(c for c in columns if c.startswith("multiplier_"))
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for k, col in enumerate(names):
        its, vals = metrics_file.per_seed(columns, col)
        _band(ax, its, vals, f"nu_{k} (mean, min-max)", f"C{k}")
        if optimum is not None:
            ax.axhline(optimum["multipliers"][k], color=f"C{k}", ls=":", lw=1, label=f"optimal nu*_{k}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("multiplier nu")
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=10)
    save_figure(fig, path)


def plot_run(path: str | Path, stages: Sequence[int] | None = None) -> list[Path]:
    """Draw every figure of a run directory into ``path/plots/``; returns the files written.

    Needs config.json and metrics.csv; summary.json and policy.npz (written when a run
    completes) add the optimum, the stage-cost profile and the policy maps.
    """
    path = Path(path)
    cfg = rundir.read_config(path)
    columns = metrics_file.read_metrics_csv(path / rundir.METRICS)
    summary = rundir.read_json(path / rundir.SUMMARY) if (path / rundir.SUMMARY).exists() else {}
    optimum = summary.get("optimum")
    npz: dict[str, Any] = {}
    if (path / rundir.POLICY).exists():
        npz = rundir.read_npz(path / rundir.POLICY)
    num_costs = sum(1 for c in columns if c.startswith("exact_cost_"))
    thresholds = np.asarray(summary.get("thresholds", npz.get("thresholds", np.full(num_costs, np.nan))), np.float64)
    title = f"{cfg.get('algo', '?')} on {cfg.get('env_title', '?')}, {cfg.get('seeds')} seeds"
    out = path / rundir.PLOTS
    try:
        out.mkdir(exist_ok=True)
    except OSError as err:
        raise rundir.RunDirectoryError(f"cannot create {out}: {err.strerror or err}") from None
    written = [out / "learning_curves.png"]
    learning_curves(columns, thresholds, optimum, written[-1], title)
    if any(c.startswith("multiplier_") for c in columns):
        written.append(out / "multipliers.png")
        multipliers(columns, optimum, written[-1], title)
    if "stage_costs" in npz:
        written.append(out / "stage_costs.png")
        stage_costs(npz, written[-1], title)
    if "grid_shape" in npz:
        written.append(out / "policy_maps.png")
        policy_maps(npz, written[-1], stages)
    return written


def plot_comparison(
    result: Mapping[str, Any], path: str | Path, constraint: int = 0, colors: Mapping[str, str] | None = None
) -> Path:
    """Fig. 1-style figure: reward (left) and cost (right) per algorithm and input; bars are the
    means over seeds of the paper's metric (solid) and of the exact values of the final
    policies (hatched), dots the seeds; the optimum's reward (black dashed, the unconstrained
    one grey dotted) and the threshold alpha (red dotted). ``result``: the content of
    ``fhc-jax compare``'s JSON; ``colors``: algorithm name -> matplotlib colour."""
    plt = pyplot()
    runs = result["runs"]
    x = np.arange(len(runs))
    width = 0.38
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 1.9 * len(runs) + 2), 4.2))
    colors = dict(colors or {})
    panels = (
        (axes[0], "reward", lambda d: d["reward"], "episode reward"),
        (axes[1], "cost", lambda d: d["costs"][constraint], f"episode cost (constraint {constraint})"),
    )
    rng = np.random.default_rng(0)
    for ax, _, get, ylabel in panels:
        for i, row in enumerate(runs):
            color = colors.get(row["algo"], "C7")
            for offset, key, hatch, lab in (
                (-width / 2, "paper_metric", None, "last 10k episodes (paper metric)"),
                (width / 2, "exact", "//", "final policy, exact"),
            ):
                s = get(row[key])
                ax.bar(
                    x[i] + offset,
                    s["mean"],
                    width,
                    color=color,
                    alpha=0.55 if hatch else 0.85,
                    hatch=hatch,
                    edgecolor="black",
                    lw=0.5,
                    label=lab if i == 0 else None,
                )
                pts = np.asarray(s["per_seed"])
                jitter = rng.uniform(-width / 5, width / 5, len(pts))
                ax.scatter(
                    x[i] + offset + jitter,
                    pts,
                    s=10,
                    color="black",
                    zorder=3,
                    label="seeds" if (i == 0 and hatch) else None,
                )
        ax.set_xticks(x)
        ax.set_xticklabels([f"{row['label']}\n{row['input']}" for row in runs], fontsize=7)
        ax.set_ylabel(ylabel)
    if result["optimum"] is not None:
        axes[0].axhline(
            result["optimum"]["reward"],
            color="black",
            ls="--",
            lw=1,
            label=f"constrained optimum J* = {result['optimum']['reward']:.2f}",
        )
    axes[0].axhline(
        result["unconstrained"]["reward"],
        color="grey",
        ls=":",
        lw=1,
        label=f"unconstrained optimum = {result['unconstrained']['reward']:.2f}",
    )
    alpha = result["thresholds"][constraint]
    axes[1].axhline(alpha, color="red", ls=":", lw=1.5, label=f"threshold alpha = {alpha:g}")
    if result.get("tolerance") is not None:  # None: the rows were judged with different tolerances
        axes[1].axhspan(
            alpha,
            alpha + abs(alpha) * result["tolerance"],
            color="red",
            alpha=0.12,
            lw=0,
            label=f"alpha + {100 * result['tolerance']:g}% (violation above)",
        )
    axes[0].set_title("reward", fontsize=9)
    axes[1].set_title("cost", fontsize=9)
    for ax in axes:  # headroom for the legend above the bars
        low, high = ax.get_ylim()
        ax.set_ylim(min(0.0, low), high + 0.35 * (high - min(0.0, low)))
        ax.legend(fontsize=6.5, loc="upper center", ncol=2)
    fig.suptitle(
        f"{result['env_title']}, {result['seeds']} seeds: "
        "paper metric (solid) and exact values of the final policies (hatched)",
        fontsize=9,
    )
    return save_figure(fig, path, dpi=120)
