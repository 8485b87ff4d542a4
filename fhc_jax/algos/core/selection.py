"""Which policy a run returns and what its status says.

* :class:`Selection` and :func:`offer`: of the reported policies at a run's evaluation marks,
  the best one by the learner's own Monte-Carlo estimates whose upper 95% cost bounds meet
  every threshold (else the least violating);
* :class:`Status`, :func:`constraint_status` and :func:`describe_status`: whether the returned
  policy met the constraints and the multipliers settled, and the one line that says what is
  not yet so.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.algos.core.evaluation import EVALUATION_KEY

Array = jax.Array

#: z of the one-sided upper 95% confidence bound of a candidate's estimated costs
UPPER_BOUND_Z = 1.645


def selection_key() -> Array:
    """The key of the learner's own estimates of its candidates (:class:`Selection`): common
    random numbers across candidates and seeds, independent of training and of
    :data:`EVALUATION_KEY`."""
    return jax.random.fold_in(jax.random.key(EVALUATION_KEY), 1)



@struct.dataclass
class Selection:
    """The policy a run returns: of the candidates seen so far (the reported policy at every
    evaluation mark after the start, :func:`evaluation_iterations`), the one with the highest
    estimated reward among those whose estimated costs have an upper 95% confidence bound
    within every threshold; while none has, the one whose bound exceeds its threshold least
    (relative to the violation unit). Estimates are the learner's own Monte-Carlo means over
    ``eval_episodes`` episodes with a fixed key of their own (:data:`SELECTION_KEY`, common
    random numbers across candidates, independent of training and of every judgement),
    never the exact model. Shapes for M constraints.

    Attributes:
        state: the selected candidate's train state.
        iteration: updates done when it was taken, int32 () (-1 before the first mark).
        reward: its estimated J, ().
        costs: its estimated costs S^(k), (M,).
        upper: upper 95% confidence bounds of ``costs``, (M,).
        feasible: every ``upper`` within its threshold, bool ().
    """

    state: Any
    iteration: Array
    reward: Array
    costs: Array
    upper: Array
    feasible: Array



def offer(selection: Selection, state: Any, iteration: Array, rewards: Array, costs: Array, thresholds: Any,
          violation_units: Any) -> Selection:
    """The :class:`Selection` after offering one candidate, ``state``, estimated from its
    episodes' totals (traceable).

    The candidate replaces the current selection when its upper 95% bounds meet every threshold
    and it is better estimated (or the current one does not meet them), or when neither meets
    them and its largest excess over a threshold, in violation units, is smaller.

    Args:
        selection: the current selection.
        state: the candidate's train state. iteration: its updates done, int32 ().
        rewards: its episodes' total rewards, (N,). costs: their total costs, (N, M).
        thresholds: alpha, (M,). violation_units: d of the relative violation, (M,).
    """
    n = rewards.shape[0]
    reward, mean_costs = jnp.mean(rewards), jnp.mean(costs, axis=0)
    upper = mean_costs + UPPER_BOUND_Z * jnp.std(costs, axis=0) / np.sqrt(n)
    feasible = jnp.all(upper <= thresholds)
    excess = lambda u: jnp.max((u - thresholds) / violation_units)
    better = jnp.where(feasible, ~selection.feasible | (reward > selection.reward),
                       ~selection.feasible & (excess(upper) < excess(selection.upper)))
    candidate = Selection(state=state, iteration=iteration, reward=reward, costs=mean_costs, upper=upper,
                          feasible=feasible)
    return jax.tree.map(lambda a, b: jnp.where(better, a, b), candidate, selection)


@struct.dataclass
class Status:
    """Whether a run met its constraints and its multipliers settled (M constraints).

    Attributes:
        met: the returned policy's estimated costs have upper 95% bounds within every
            threshold (:attr:`Selection.feasible`), bool ().
        trending: over the last tenth of the run, the multiplier still moved by more than
            :data:`TREND_TOLERANCE` of its level (least-squares change over the window),
            bool (M,).
        above: over the last tenth of the run, the batch's mean episode cost still exceeded
            alpha + d / 50 (d the violation unit), bool (M,).
        change: the fitted change of each multiplier over the last tenth, (M,).
        window_costs: the mean episode cost over the last tenth, (M,).
    """

    met: Array
    trending: Array
    above: Array
    change: Array
    window_costs: Array

    @property
    def settled(self) -> Array:
        """No multiplier trending and no cost above its threshold, bool ()."""
        return ~jnp.any(self.trending | self.above, axis=-1)

    @property
    def ok(self) -> Array:
        """``met`` and ``settled``: nothing to report, bool ()."""
        return self.met & self.settled


#: a multiplier counts as trending when its fitted change over the last tenth of a run exceeds
#: this fraction of its level (a level below a tenth of a training unit counts as that tenth)
TREND_TOLERANCE = 0.1


def constraint_status(multipliers: Array, costs: Array, thresholds: Any, violation_units: Any,
                      multiplier_units: Any, met: Array) -> Status:
    """:class:`Status` from a run's per-iteration metrics (one function for ``make_train`` and
    the chunked runs of :mod:`fhc_jax.experiment`; traceable).

    Args:
        multipliers: nu after each update, (N, M), environment's units.
        costs: the batch's mean episode costs, (N, M).
        thresholds: alpha, (M,) (:class:`Learner`).
        violation_units: d of the relative violation, (M,) (:class:`Learner`).
        multiplier_units: one training unit of nu in the environment's units, (M,) (:class:`Learner`).
        met: :attr:`Selection.feasible` of the run, bool ().
    """
    n = multipliers.shape[0]
    w = max(1, n // 10)
    nu = jnp.asarray(multipliers[n - w:], jnp.float32)
    t = jnp.arange(w, dtype=jnp.float32) - (w - 1) / 2.0
    slope = jnp.sum(t[:, None] * (nu - nu.mean(0)), axis=0) / jnp.maximum(jnp.sum(t * t), 1.0)
    change = slope * w
    level = jnp.maximum(jnp.abs(nu).mean(0), 0.1 * jnp.asarray(multiplier_units, jnp.float32))
    window_costs = jnp.asarray(costs[n - w:], jnp.float32).mean(0)
    above = window_costs > jnp.asarray(thresholds, jnp.float32) + jnp.asarray(violation_units, jnp.float32) / 50.0
    return Status(met=jnp.asarray(met), trending=jnp.abs(change) > TREND_TOLERANCE * level, above=above,
                  change=change, window_costs=window_costs)


def describe_status(status: Status, thresholds: Any, multipliers: Any = None, label: str = "") -> str | None:
    """One line for a run whose :class:`Status` is not ok ("constraint not yet met: ..."), or
    None (host-side; one run, not a batch). ``multipliers``: its final multipliers (M,)."""
    if bool(status.ok):
        return None
    alpha = np.asarray(thresholds, np.float64).reshape(-1)
    change, costs = np.asarray(status.change).reshape(-1), np.asarray(status.window_costs).reshape(-1)
    parts = []
    for k in range(alpha.shape[0]):
        name = "" if alpha.shape[0] == 1 else f"constraint {k}: "
        if bool(np.asarray(status.above).reshape(-1)[k]):
            parts.append(f"{name}mean episode cost {costs[k]:.4g} > alpha {alpha[k]:.4g} over the last tenth of the run")
        if bool(np.asarray(status.trending).reshape(-1)[k]):
            now = "" if multipliers is None else f" (now {float(np.asarray(multipliers).reshape(-1)[k]):.4g})"
            parts.append(f"{name}multiplier still {'rising' if change[k] > 0 else 'falling'} "
                         f"(by {abs(change[k]):.3g} over the last tenth{now})")
    if not bool(status.met):
        parts.append("no evaluated policy's upper 95% cost bound is within alpha (the least violating is returned)")
    where = f"{label}: " if label else ""
    if bool(status.met) and not bool(np.any(np.asarray(status.above))):  # only a multiplier still moving
        return (f"multiplier not yet settled: {where}{'; '.join(parts)}; the returned policy's upper 95% cost "
                "bound is within alpha; train longer (num_iterations) to let it settle")
    return f"constraint not yet met: {where}{'; '.join(parts)}; train longer (num_iterations) or check alpha"
