"""``fhc-jax solve --tradeoff``: the exact trade-off curves of a model as text tables and a figure.

:func:`report` sweeps each constraint in turn (:func:`fhc_jax.cmdp.tradeoff.tradeoff`, the
others at their thresholds), prints each curve with the threshold in use as a marked row (the
constrained optimum ``solve`` found there) and a sentence on where it lies, and writes the
figure (:func:`plot`): reward against alpha with the threshold marked, and the multiplier (the
curve's slope) below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fhc_jax.cmdp.solve import InfeasibleConstraintError, Solution
from fhc_jax.cmdp.tradeoff import TradeOff, tradeoff
from fhc_jax.experiment import plots

#: the mark of the threshold's row in the printed table
MARK = "<- threshold in use"


def default_plot_path(out: str | None) -> Path:
    """Where the figure goes without ``--plot``: next to ``--out`` (``results.json`` ->
    ``results_tradeoff.png``), else ``tradeoff.png`` in the working directory."""
    if out:
        out = Path(out)
        return out.with_name(f"{out.stem}_tradeoff.png")
    return Path("tradeoff.png")


def table(curve: TradeOff, at_threshold: Solution | None) -> str:
    """:meth:`TradeOff.table` with the threshold in use as one more row, in order of alpha and
    marked, when the constrained optimum there is known (``at_threshold``)."""
    lines = curve.table().splitlines()
    if at_threshold is None:
        return "\n".join(lines)
    k = curve.constraint
    row = (
        f"{curve.threshold:>14.6g}{at_threshold.reward:>14.6g}{at_threshold.multipliers[k]:>16.6g}"
        f"{curve.unconstrained_reward - at_threshold.reward:>14.6g}  {MARK}"
    )
    at = 1 + int(np.searchsorted(curve.alphas, curve.threshold, side="right"))
    return "\n".join(lines[:at] + [row] + lines[at:])


def report(cmdp: Any, num: int, at_threshold: Solution | None, plot_path: str | Path, title: str) -> list[TradeOff]:
    """Print the trade-off curve of every constraint and write their figure.

    Args:
        cmdp: the model (M >= 1).
        num: points per curve (>= 2).
        at_threshold: ``solve``'s optimum at the model's own thresholds, or None (infeasible).
        plot_path: the PNG to write.
        title: the figure's title.
    Returns:
        The curves, one per constraint (those that could be computed).
    """
    curves = []
    for k in range(cmdp.num_constraints):
        try:
            curve = tradeoff(cmdp, num, constraint=k)
        except InfeasibleConstraintError as err:
            print(f"trade-off curve of constraint {k}: none ({err})")
            continue
        others = "" if cmdp.num_constraints == 1 else ", the other constraints at their thresholds"
        print(
            f"trade-off curve of constraint {k} ({num} thresholds from the cheapest policy's cost to the "
            f"unconstrained optimum's{others}; {curve.oracle_calls} "
            f"{'backward inductions' if cmdp.num_constraints == 1 else 'solves'}, {curve.solve_time:.2f} s):"
        )
        print(table(curve, at_threshold if curve.position(curve.threshold) != "infeasible" else None))
        print(curve.describe(curve.threshold))
        curves.append(curve)
    if curves:
        plot(curves, plot_path, title, at_threshold)
        print(f"wrote {plot_path}")
    return curves


def plot(curves: Sequence[TradeOff], path: str | Path, title: str, at_threshold: Solution | None = None) -> Path:
    """Reward V(alpha) (top) and multiplier nu*(alpha) (bottom) against alpha, one column per
    curve; the threshold in use is a dashed line (and a star at the constrained optimum when
    ``at_threshold`` is given), the unconstrained reward a dotted line, and alphas outside
    [cheapest cost, unconstrained cost] are shaded (infeasible to the left, not binding to the
    right) where the threshold lies there."""
    plt = plots.pyplot()
    fig, axes = plt.subplots(2, len(curves), figsize=(5.2 * len(curves), 6.0), squeeze=False, sharex="col")
    for col, curve in enumerate(curves):
        k, top, bottom = curve.constraint, axes[0, col], axes[1, col]
        low = min(curve.cheapest_cost, curve.threshold)
        high = max(curve.unconstrained_cost, curve.threshold)
        pad = 0.04 * (high - low) if high > low else 1.0
        top.plot(curve.alphas, curve.rewards, "o-", ms=3, lw=1.4, color="C0", label="exact optimum V(alpha)")
        top.axhline(curve.unconstrained_reward, color="0.5", ls=":", lw=1, label="unconstrained optimum")
        nu = curve.multipliers[:, k]
        bottom.plot(curve.alphas, nu, "o-", ms=3, lw=1.4, color="C1", label="optimal multiplier nu*(alpha)")
        rest = nu[1:]
        if rest.size and rest.max() > 0 and nu[0] > 10 * rest.max():
            # near the cheapest cost the curve can be almost vertical: keep the rest readable
            bottom.set_ylim(0.0, 1.3 * rest.max())
            bottom.annotate(
                f"nu* = {nu[0]:.3g} at the cheapest cost (off scale)",
                (curve.alphas[0], 1.25 * rest.max()),
                xytext=(6, 0),
                textcoords="offset points",
                fontsize=7,
                va="top",
                color="C1",
            )
        where = curve.position(curve.threshold)
        for ax in (top, bottom):
            ax.axvline(curve.threshold, color="C3", ls="--", lw=1.2)
            if curve.threshold < curve.cheapest_cost:
                ax.axvspan(low - pad, curve.cheapest_cost, color="C3", alpha=0.08)
            if curve.threshold > curve.unconstrained_cost:
                ax.axvspan(curve.unconstrained_cost, high + pad, color="0.5", alpha=0.08)
            ax.set_xlim(low - pad, high + pad)
            ax.grid(alpha=0.3)
        label = f"threshold in use: alpha = {curve.threshold:.4g} ({where})"
        if at_threshold is not None and where != "infeasible":
            top.plot([curve.threshold], [at_threshold.reward], "*", ms=12, color="C3", label=label)
        else:
            top.plot([], [], ls="--", color="C3", label=label)
        top.set_ylabel("expected total reward")
        top.set_title(f"constraint {k}", fontsize=9)
        top.legend(fontsize=7, loc="lower right")
        bottom.set_ylabel(f"nu*: reward per unit of cost {k}", fontsize=8)
        bottom.set_xlabel(f"alpha: budget of expected total cost {k}")
    return plots.save_figure(fig, Path(path), title)
