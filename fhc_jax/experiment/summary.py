"""A run's judgement as summary.json fields and as a plain-text table
(the judging itself is :mod:`fhc_jax.experiment.judge`)."""

from __future__ import annotations

from typing import Any

from fhc_jax.experiment.judge import Judgement


def judgement_fields(judged: Judgement) -> dict[str, Any]:
    """summary.json's judgement: ``seeds`` (:meth:`Judgement.rows`), ``aggregate``
    (:meth:`Judgement.summary`), ``statistics`` (over seeds, with 95% intervals:
    :func:`fhc_jax.experiment.statistics.seed_statistics`), ``thresholds``,
    ``feasibility_tolerance`` and ``optimum`` (reward, costs, multipliers, solve time; None when
    infeasible)."""
    from fhc_jax.experiment.statistics import seed_statistics

    return {
        "seeds": judged.rows(),
        "aggregate": judged.summary(),
        "statistics": seed_statistics(judged),
        "thresholds": judged.thresholds.tolist(),
        "feasibility_tolerance": judged.tolerance,
        "optimum": None if judged.optimum is None else judged.optimum.as_dict(),
    }


def _joined(values, fmt: str = ".3f") -> str:
    return "/".join(f"{v:{fmt}}" for v in values)


def format_table(judged: Judgement, stats: dict[str, Any] | None = None) -> str:
    """One line per seed (exact reward, % of the optimum, exact costs, feasibility, learned
    multipliers), the optimum's line and the feasibility rule; with ``stats``
    (:func:`judgement_fields`' ``statistics``) a last line of statistics over seeds with their
    95% intervals."""
    opt = judged.optimum
    frac = judged.fraction_of_optimum
    mc = judged.episodes is not None
    kind = "mean" if mc else "exact"
    lines = [f"{'seed':>4} {kind + ' reward':>13} {'% of optimum':>13} {kind + ' cost':>16} {'feasible':>9} {'nu':>14}"]
    for r in range(judged.num_seeds):
        pct = "-" if frac is None else f"{100 * frac[r]:.1f}%"
        nu = "-" if judged.multipliers is None else _joined(judged.multipliers[r])
        reward = f"{judged.reward[r]:.4f}" + (f" ± {judged.reward_half_width[r]:.3f}" if mc else "")
        costs = _joined(judged.costs[r]) + (" ± " + _joined(judged.cost_half_width[r]) if mc else "")
        lines.append(f"{r:>4} {reward:>13} {pct:>13} {costs:>16} {'yes' if judged.feasible[r] else 'NO':>9} {nu:>14}")
    if opt is not None:
        name = "ref" if mc else "opt"
        lines.append(f"{name:>4} {opt.reward:>13.4f} {'-' if frac is None else '100.0%':>13} {_joined(opt.costs):>16} {'':>9} "
                     f"{_joined(opt.multipliers):>14}")
    rule = "upper end of the 95% interval of the cost" if mc else "cost"
    lines.append(f"alpha = {_joined(judged.thresholds, 'g')}; feasible: {rule} <= alpha + "
                 f"{judged.tolerance:g} |alpha| ({judged.feasible_seeds}/{judged.num_seeds} seeds; {judged.method})")
    if stats is not None:
        from fhc_jax.experiment.statistics import format_line

        lines.append("over seeds: " + format_line(stats, digits=3))
    return "\n".join(lines)
