"""Which policy a run returned, and how it compares with the run's last iterate.

A learner returns the best of its candidates (the reported policy at every evaluation mark) by
its own Monte-Carlo estimates whose upper 95% cost bound meets alpha
(:class:`fhc_jax.algos.core.selection.Selection`), not necessarily the last iterate. The
in-training evaluations in the metrics (exact on a tabular exact model, Monte-Carlo otherwise,
:class:`~fhc_jax.experiment.runner.ChunkState`) were made at every chunk end, so they hold the
returned policy's values at its mark and the last iterate's at the end. :func:`returned_policies`
puts them side by side per seed (summary.json's ``returned`` fields) and words, in one line,
a returned policy whose reward lies far below the last iterate's (more than
:data:`FAR_BELOW` of the larger of |reward| and the run's range of evaluated rewards) while the
last iterate's cost is within alpha by the same evaluation: what the user would otherwise take
for a bad run, and why the learner chose it (its own estimate of the last iterate, from
:meth:`~fhc_jax.experiment.runner.ChunkedTrainer.last_iterate_estimates`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: a returned policy is reported when its reward lies this fraction of the reward's scale below
#: the last iterate's (module docstring)
FAR_BELOW = 0.05


def _joined(values: Any, fmt: str = ".4g") -> str:
    return "/".join(f"{v:{fmt}}" for v in np.asarray(values, np.float64).reshape(-1))


def returned_policies(
    selected: Any,
    iterations: Any,
    rewards: Any,
    costs: Any,
    thresholds: Any,
    evaluated_by: str,
    estimate: Callable[[], dict[str, np.ndarray]] | None = None,
    eval_episodes: int | None = None,
) -> list[dict[str, Any]]:
    """Per seed, the returned policy's iteration and in-training values beside the last iterate's.

    Args:
        selected: the returned policy's iteration per seed (``Selection.iteration``), (R,) int
            (-1: no candidate was taken).
        iterations: the iterations of the in-training evaluations, (E,) int (the last one is the
            last iterate's).
        rewards: their rewards per seed, (R, E). costs: their costs, (R, E, M).
        thresholds: alpha, (M,).
        evaluated_by: how the in-training evaluations were made ("exact", "monte-carlo (N
            episodes)").
        estimate: called at most once, when some seed is reported: the learner's own estimates
            of each seed's last iterate, ``{"feasible": (R,) bool, "reward": (R,)}`` (optionally
            ``"episodes": (R,)``, those of the estimate), and of its returned policy,
            ``"returned_reward": (R,)`` (training units: compared only with each other).
        eval_episodes: the learner's ``eval_episodes`` (named in the advice).
    Returns:
        one dict per seed: ``iteration`` (returned), ``last_iteration``, ``evaluated_by``,
        ``reward`` and ``costs`` (the returned policy's in-training evaluation, None when its
        iteration was not evaluated), ``last_reward`` and ``last_costs``, ``far_below``
        (bool) and ``message`` (the one line, or None).
    """
    selected = np.asarray(selected, np.int64).reshape(-1)
    iterations = np.asarray(iterations, np.int64).reshape(-1)
    rewards = np.asarray(rewards, np.float64).reshape(selected.shape[0], -1)
    costs = np.asarray(costs, np.float64).reshape(selected.shape[0], iterations.shape[0], -1)
    alpha = np.asarray(thresholds, np.float64).reshape(-1)
    last = int(iterations[-1])
    out, flagged = [], []
    for r, s in enumerate(selected):
        row: dict[str, Any] = {
            "iteration": int(s),
            "last_iteration": last,
            "evaluated_by": evaluated_by,
            "reward": None,
            "costs": None,
            "last_reward": float(rewards[r, -1]),
            "last_costs": costs[r, -1].tolist(),
            "far_below": False,
            "message": None,
        }
        at = np.flatnonzero(iterations == s)
        if at.size:
            e = int(at[-1])
            row["reward"], row["costs"] = float(rewards[r, e]), costs[r, e].tolist()
            span = np.ptp(rewards[r][np.isfinite(rewards[r])]) if np.any(np.isfinite(rewards[r])) else 0.0
            scale = max(abs(rewards[r, -1]), float(span))
            shortfall = rewards[r, -1] - rewards[r, e]
            within = bool(np.all(costs[r, -1] <= alpha))
            row["far_below"] = bool(s != last and within and np.isfinite(shortfall) and shortfall > FAR_BELOW * scale)
        if row["far_below"]:
            flagged.append(r)
        out.append(row)
    if flagged:
        est = estimate() if estimate is not None else None
        for r in flagged:
            out[r]["message"] = _message(r, out[r], alpha, est, eval_episodes)
    return out


def _message(
    r: int, row: dict[str, Any], alpha: np.ndarray, est: dict[str, np.ndarray] | None, eval_episodes: int | None
) -> str:
    """The one line of a seed whose returned policy lies far below its last iterate."""
    share = (
        f"{row['reward'] / row['last_reward']:.0%} of the last iterate's reward"
        if row["reward"] > 0 and row["last_reward"] > 0
        else "less reward than the last iterate"
    )
    episodes = f"{eval_episodes} episodes" if eval_episodes else "eval_episodes episodes"
    if est is not None and "episodes" in est:
        episodes = f"{int(np.asarray(est['episodes']).reshape(-1)[r])} episodes"
    if est is None:
        why = "the learner's own estimates ranked it first"
    elif not bool(np.asarray(est["feasible"]).reshape(-1)[r]):
        why = (
            f"the learner's own estimate of the last iterate ({episodes} of its rollout) put its upper 95% cost "
            "bound above alpha"
        )
    else:
        why = (
            f"the learner's own estimate of the last iterate's reward ({episodes} of its rollout) was below the "
            "returned policy's"
        )
    return (
        f"seed {r}: returned the iteration-{row['iteration']} policy ({share}: {row['reward']:.4g} vs "
        f"{row['last_reward']:.4g} at iteration {row['last_iteration']}, whose cost {_joined(row['last_costs'])} "
        f"is within alpha {_joined(alpha)} by the {row['evaluated_by']} evaluation) because {why}; raise "
        "eval_episodes (or eval_chunks_max) for tighter estimates, or train longer (num_iterations) so the last "
        "iterates settle"
    )


def returned_line(rows: list[dict[str, Any]]) -> str:
    """One line naming the iteration of every seed's returned policy, e.g. ``returned policies
    (the learner's selection by its own estimates): iteration 100 (the last) for seeds 0, 2;
    iteration 75 for seed 1``."""
    if not rows:
        return "returned policies: none"
    last = rows[0]["last_iteration"]
    groups: dict[int, list[int]] = {}
    for r, row in enumerate(rows):
        groups.setdefault(row["iteration"], []).append(r)
    parts = []
    for it in sorted(groups, reverse=True):
        seeds = groups[it]
        what = (
            "no candidate (the initial policy)" if it < 0 else f"iteration {it}" + (" (the last)" if it == last else "")
        )
        parts.append(f"{what} for seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}")
    return "returned policies (the learner's selection by its own estimates): " + "; ".join(parts)
