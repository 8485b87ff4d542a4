"""Which policy a run returns and what its status says.

* :class:`Selection` and :func:`offer`: of the reported policies at a run's evaluation marks,
  the best one by the learner's own Monte-Carlo estimates whose upper 95% cost bounds meet
  every threshold (else the least violating). The estimates are made on the footing the learner
  trains on: episodes of its own rollout (on the tabular path, the exact model's expected stage
  signals), in training units (signals divided by their typical magnitudes), so their bounds are
  the ones its multiplier aims below (:func:`~fhc_jax.algos.core.multipliers.upper_bound_excess`)
  and no unit makes them overflow;
* :class:`Status` and :func:`constraint_status`: whether the returned policy met the constraints
  (checked against the exact model where the environment has one) and the multipliers settled;
  ``str(status)`` or :meth:`Status.describe` is its one line per run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.algos.core.evaluation import EVALUATION_KEY
from fhc_jax.algos.core.multipliers import UPPER_BOUND_Z, estimate_chunks, spread_excess

Array = jax.Array

__all__ = [
    "MIN_TREND_POINTS",
    "TREND_TENTHS",
    "TREND_TOLERANCE",
    "UPPER_BOUND_Z",
    "Estimate",
    "Selection",
    "Status",
    "constraint_status",
    "describe_status",
    "estimate",
    "multiplier_settings",
    "offer",
    "offer_estimate",
    "selection_key",
]


def selection_key() -> Array:
    """The key of the learner's own estimates of its candidates (:class:`Selection`): common
    random numbers across candidates and seeds, independent of training and of
    :data:`EVALUATION_KEY`."""
    return jax.random.fold_in(jax.random.key(EVALUATION_KEY), 1)


@struct.dataclass
class Selection:
    """The policy a run returns: of the candidates seen so far (the reported policy at every
    evaluation mark after the start, :func:`~fhc_jax.algos.core.evaluation.evaluation_iterations`),
    the one with the highest estimated reward among those whose estimated costs have an upper
    95% confidence bound within every threshold; while none has, the one whose bound exceeds its
    threshold least (relative to the violation unit). Estimates are the learner's own
    Monte-Carlo means over ``eval_episodes`` episodes of its own rollout (more, in chunks of
    ``eval_episodes``, up to ``eval_chunks_max`` chunks, where a rare-event budget needs them:
    :func:`estimate`), with fixed keys of their own (:func:`selection_key`: common random
    numbers across candidates, independent of training and of every judgement), never the exact
    model. Training units; M constraints.

    Attributes:
        state: the selected candidate's train state.
        iteration: updates done when it was taken, int32 () (-1 before the first mark).
        reward: its estimated J, () (training units).
        costs: its estimated costs S^(k), (M,) (training units).
        upper: upper 95% confidence bounds of ``costs``, (M,) (training units;
            :func:`~fhc_jax.algos.core.multipliers.upper_bound_excess`).
        feasible: every ``upper`` within its threshold, bool ().
        episodes: the episodes of its estimate, float32 () (0 before the first mark).
    """

    state: Any
    iteration: Array
    reward: Array
    costs: Array
    upper: Array
    feasible: Array
    episodes: Array


@struct.dataclass
class Estimate:
    """A candidate's Monte-Carlo estimate from the totals of n episodes (training units).

    Attributes:
        episodes: n, float32 (). reward: mean total reward, (). costs: mean total costs, (M,).
        spread: standard deviations of the total costs, (M,). largest: the largest total-cost
            magnitudes seen, (M,) (the rule-of-three term of the bound).
    """

    episodes: Array
    reward: Array
    costs: Array
    spread: Array
    largest: Array

    @classmethod
    def of(cls, rewards: Array, costs: Array) -> Estimate:
        """The estimate from episode totals: ``rewards`` (N,), ``costs`` (N, M)."""
        return cls(
            episodes=jnp.asarray(rewards.shape[0], jnp.float32),
            reward=jnp.mean(rewards),
            costs=jnp.mean(costs, axis=0),
            spread=jnp.std(costs, axis=0),
            largest=jnp.max(jnp.abs(costs), axis=0),
        )

    def pooled(self, other: Estimate) -> Estimate:
        """The estimate from both estimates' episodes together (means and spreads pooled)."""
        n = self.episodes + other.episodes
        w, v = self.episodes / n, other.episodes / n
        costs = w * self.costs + v * other.costs
        variance = w * (self.spread**2 + (self.costs - costs) ** 2) + v * (other.spread**2 + (other.costs - costs) ** 2)
        return Estimate(
            episodes=n,
            reward=w * self.reward + v * other.reward,
            costs=costs,
            spread=jnp.sqrt(variance),
            largest=jnp.maximum(self.largest, other.largest),
        )

    def upper(self) -> Array:
        """Upper 95% confidence bounds of the expected costs, (M,)
        (:func:`~fhc_jax.algos.core.multipliers.upper_bound_excess`)."""
        return self.costs + spread_excess(self.spread, self.largest, self.episodes)


def estimate(
    episodes: Callable[[Array], tuple[Array, Array]], thresholds: Any, eval_episodes: int, max_chunks: int
) -> Estimate:
    """A candidate's :class:`Estimate`, grown in chunks of ``eval_episodes`` episodes until its
    safety margin is within 5% of alpha (:func:`~fhc_jax.algos.core.multipliers.estimate_chunks`,
    at most ``max_chunks``): a rare-event budget gets the episodes its bound needs, other costs
    one chunk (traceable; a ``lax.while_loop`` over chunks, each of its own key).

    Args:
        episodes: ``key -> (rewards (N,), costs (N, M))``, the candidate's episode totals from
            ``key`` (N = ``eval_episodes``). thresholds: alpha, (M,) (training units).
        eval_episodes: episodes per chunk (static). max_chunks: the most chunks (static).
    """
    first = Estimate.of(*episodes(selection_key()))
    if max_chunks <= 1:
        return first

    def more(carry: tuple[Array, Estimate]) -> Array:
        chunk, est = carry
        return chunk < estimate_chunks(est.spread, est.largest, thresholds, max_chunks, eval_episodes)

    def grow(carry: tuple[Array, Estimate]) -> tuple[Array, Estimate]:
        chunk, est = carry
        return chunk + 1, est.pooled(Estimate.of(*episodes(jax.random.fold_in(selection_key(), chunk))))

    return jax.lax.while_loop(more, grow, (jnp.asarray(1, jnp.int32), first))[1]


def offer(
    selection: Selection,
    state: Any,
    iteration: Array,
    rewards: Array,
    costs: Array,
    thresholds: Any,
    violation_units: Any,
) -> Selection:
    """:func:`offer_estimate` of the :class:`Estimate` from a candidate's episode totals,
    ``rewards`` (N,) and ``costs`` (N, M)."""
    return offer_estimate(selection, state, iteration, Estimate.of(rewards, costs), thresholds, violation_units)


def offer_estimate(
    selection: Selection,
    state: Any,
    iteration: Array,
    est: Estimate,
    thresholds: Any,
    violation_units: Any,
) -> Selection:
    """The :class:`Selection` after offering one candidate, ``state``, with its :class:`Estimate`
    (traceable; everything in training units).

    The candidate replaces the current selection when its upper 95% bounds meet every threshold
    and it is better estimated (or the current one does not meet them), or when neither meets
    them and its largest excess over a threshold, in violation units, is smaller; never when its
    estimates are not finite (a diverged candidate).

    Args:
        selection: the current selection.
        state: the candidate's train state. iteration: its updates done, int32 ().
        est: its estimate (:func:`estimate`).
        thresholds: alpha, (M,). violation_units: d of the relative violation, (M,).
    """
    reward, mean_costs, upper = est.reward, est.costs, est.upper()
    feasible = jnp.all(upper <= thresholds)
    excess = lambda u: jnp.max((u - thresholds) / violation_units)
    valid = jnp.isfinite(reward) & jnp.all(jnp.isfinite(upper))  # a diverged candidate is never taken
    better = valid & jnp.where(
        feasible,
        ~selection.feasible | (reward > selection.reward),
        ~selection.feasible & (excess(upper) < excess(selection.upper)),
    )
    candidate = Selection(
        state=state,
        iteration=iteration,
        reward=reward,
        costs=mean_costs,
        upper=upper,
        feasible=feasible,
        episodes=est.episodes,
    )
    return jax.tree.map(lambda a, b: jnp.where(better, a, b), candidate, selection)


@struct.dataclass
class Status:
    """Whether a run met its constraints and its multipliers settled (M constraints; every field
    gains the leading axes of a batch of runs). ``str(status)`` gives one line per run.

    Attributes:
        met: the returned policy meets every constraint: its exact costs are within alpha where
            the environment has a tabular exact model (the status checks itself against the
            referee there), else the upper 95% bounds of the learner's estimates
            (:attr:`Selection.feasible`), bool ().
        trending: the multiplier still moves by more than :data:`TREND_TOLERANCE` of its
            level per tenth of the run: the least-squares trend over the last
            :data:`TREND_TENTHS` tenths (long enough that the batch-to-batch swings of a law's
            proportional terms and the wander of a noisy integral average out; a multiplier still
            travelling shows over all of them), bool (M,). Not while the law holds the cost at
            alpha: a multiplier whose mean episode cost over the last tenth is within d / 50 of
            alpha (d the violation unit) has done its job, and its wander there is the batch's
            noise passing through the law, not travel still to come (a multiplier trending with
            the cost below that band is still falling toward a cheaper level, or rising toward
            one it has not reached). Never for a learner that keeps no multiplier (CPO: its nu*
            is each update's dual, solved afresh from the batch, not a state that settles; its
            status judges the cost alone).
        above: over the last tenth of the run, the batch's mean episode cost still exceeded
            alpha + d / 50 (d the violation unit), bool (M,).
        short: the run has fewer than :data:`MIN_TREND_POINTS` updates in its last tenth, too
            few to tell whether a multiplier settled, bool ().
        change: the fitted change of each multiplier per tenth of the run (the trend over the
            last :data:`TREND_TENTHS` tenths), (M,).
        window_costs: the mean episode cost over the last tenth, (M,).
        thresholds: alpha, (M,) (environment's units).
        multipliers: the final multipliers nu, (M,) (environment's units).
        costs: the returned policy's costs as ``met`` judged them (exact, or the upper bounds),
            (M,) (environment's units).
        settings: the learner's settings that move its multiplier, by role ("step", "gain",
            "bound"; :func:`multiplier_settings`), so the advice names settings the learner has;
            static (empty: the advice names them generically).
    """

    met: Array
    trending: Array
    above: Array
    short: Array
    change: Array
    window_costs: Array
    thresholds: Array
    multipliers: Array
    costs: Array
    settings: tuple[tuple[str, tuple[str, ...]], ...] = struct.field(pytree_node=False, default=())

    @property
    def settled(self) -> Array:
        """A run long enough to tell, no multiplier trending and no cost above its threshold, bool ()."""
        return ~self.short & ~jnp.any(self.trending | self.above, axis=-1)

    @property
    def ok(self) -> Array:
        """``met`` and ``settled``: nothing to report, bool ()."""
        return self.met & self.settled

    def describe(self, label: str = "") -> str:
        """The one line of a single run (host-side): "constraint met; multiplier settled" or
        what is not yet so and which setting to change (:func:`describe_status`)."""
        line = describe_status(self, label=label)
        return line if line is not None else f"{label + ': ' if label else ''}constraint met; multiplier settled"

    def __str__(self) -> str:
        batch = np.shape(np.asarray(self.met))
        if not batch:
            return self.describe()
        runs = [
            jax.tree.map(lambda x, i=i: np.asarray(x).reshape(-1, *np.shape(x)[len(batch) :])[i], self)
            for i in range(int(np.prod(batch)))
        ]
        return "\n".join(run.describe(label=f"run {i}") for i, run in enumerate(runs))


#: a multiplier counts as trending when its fitted change per tenth of a run exceeds this
#: fraction of its level (a level below a tenth of a training unit counts as that tenth)
TREND_TOLERANCE = 0.1

#: the multiplier's trend is fitted over this many tenths at the end of a run (the cost's level
#: is judged over the last tenth alone)
TREND_TENTHS = 3

#: the fewest updates the last tenth of a run needs for a trend to be fitted (runs of fewer than
#: 10 x this many updates cannot be called settled)
MIN_TREND_POINTS = 5


def constraint_status(
    multipliers: Array,
    costs: Array,
    thresholds: Any,
    violation_units: Any,
    multiplier_units: Any,
    met: Array,
    returned_costs: Any = None,
    settings: tuple[tuple[str, tuple[str, ...]], ...] = (),
) -> Status:
    """:class:`Status` from a run's per-iteration metrics (one function for ``make_train`` and
    the chunked runs of :mod:`fhc_jax.experiment`; traceable).

    Args:
        multipliers: nu after each update, (N, M), environment's units.
        costs: the batch's mean episode costs, (N, M).
        thresholds: alpha, (M,) (:class:`~fhc_jax.algos.core.scaffold.Learner`).
        violation_units: d of the relative violation, (M,).
        multiplier_units: one training unit of nu in the environment's units, (M,).
        met: whether the returned policy meets the constraints, bool ()
            (:meth:`~fhc_jax.algos.core.scaffold.Learner.verify`).
        returned_costs: the costs ``met`` was judged on, (M,) (environment's units), or None.
        settings: :func:`multiplier_settings` of the learner's config (the advice's names; a
            learner whose settings name no multiplier keeps none, and its multipliers are not
            judged for a trend).
    """
    n = multipliers.shape[0]
    keeps = not settings or any(names for _, names in settings)  # CPO's settings name no multiplier
    w = max(1, n // 10)  # a tenth of the run
    span = min(n, TREND_TENTHS * w)
    nu = jnp.asarray(multipliers[n - span :], jnp.float32)
    t = jnp.arange(span, dtype=jnp.float32) - (span - 1) / 2.0
    slope = jnp.sum(t[:, None] * (nu - nu.mean(0)), axis=0) / jnp.maximum(jnp.sum(t * t), 1.0)
    change = slope * w  # per tenth of the run
    level = jnp.maximum(jnp.abs(nu).mean(0), 0.1 * jnp.asarray(multiplier_units, jnp.float32))
    window_costs = jnp.asarray(costs[n - w :], jnp.float32).mean(0)
    alpha = jnp.asarray(thresholds, jnp.float32)
    band = jnp.asarray(violation_units, jnp.float32) / 50.0
    above = window_costs > alpha + band
    held = jnp.abs(window_costs - alpha) <= band  # the law holds the cost at alpha: its wander is noise
    returned = jnp.full(alpha.shape, jnp.nan) if returned_costs is None else jnp.asarray(returned_costs, jnp.float32)
    return Status(
        met=jnp.asarray(met),
        trending=(jnp.abs(change) > TREND_TOLERANCE * level) & ~held & keeps,
        above=above,
        short=jnp.asarray(w < MIN_TREND_POINTS),
        change=change,
        window_costs=window_costs,
        thresholds=alpha,
        multipliers=jnp.asarray(multipliers[n - 1], jnp.float32),
        costs=returned,
        settings=tuple(settings),
    )


#: the setting that sets the multiplier's step under each multiplier law a learner can name in
#: ``Config.multiplier_method`` (e-COP's "paper" law steps by its damping factor beta, eq. (7))
STEP_SETTING = {"paper": "damping", "geometric": "multiplier_step", "pid": "pid_ki", "lagrangian": "multiplier_lr"}


def multiplier_settings(config: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The fields of a learner's ``config`` that move its multiplier, by role: "step" (how far
    one update moves it: the law's step, ``STEP_SETTING`` of ``config.multiplier_method`` where
    the learner names its law, else whichever of ``multiplier_lr``, ``multiplier_step``, ``pid_ki``
    it has), "gain" (its proportional terms) and "bound" (``multiplier_max``); a role the config
    has no field for is empty (CPO keeps no multiplier: every role is)."""
    if not dataclasses.is_dataclass(config):
        return ()
    names = {f.name for f in dataclasses.fields(config)}
    method = getattr(config, "multiplier_method", None)
    if isinstance(method, str) and STEP_SETTING.get(method) in names:
        step: tuple[str, ...] = (STEP_SETTING[method],)
    else:
        step = tuple(n for n in ("multiplier_lr", "multiplier_step", "pid_ki") if n in names)
    gain = tuple(n for n in ("multiplier_gain", "multiplier_relative_gain", "pid_kp") if n in names)
    bound = tuple(n for n in ("multiplier_max",) if n in names)
    return (("step", step), ("gain", gain), ("bound", bound))


def _named(status: Status, role: str, generic: str) -> str | None:
    """The settings of ``role`` the learner has ("a or b"), ``generic`` when the status does not
    say (no settings recorded), None when the learner has none."""
    if not status.settings:
        return generic
    names = dict(status.settings).get(role, ())
    return " or ".join(names) if names else None


def describe_status(status: Status, thresholds: Any = None, multipliers: Any = None, label: str = "") -> str | None:
    """One line for a run whose :class:`Status` is not ok ("constraint not yet met: ..."), or
    None (host-side; one run, not a batch). ``thresholds`` and ``multipliers`` default to the
    status's own."""
    if bool(status.ok):
        return None
    alpha = np.asarray(status.thresholds if thresholds is None else thresholds, np.float64).reshape(-1)
    final = np.asarray(status.multipliers if multipliers is None else multipliers, np.float64).reshape(-1)
    change, costs = np.asarray(status.change).reshape(-1), np.asarray(status.window_costs).reshape(-1)
    parts = []
    for k in range(alpha.shape[0]):
        name = "" if alpha.shape[0] == 1 else f"constraint {k}: "
        if bool(np.asarray(status.above).reshape(-1)[k]):
            parts.append(
                f"{name}mean episode cost {costs[k]:.4g} > alpha {alpha[k]:.4g} over the last tenth of the run"
            )
        if bool(np.asarray(status.trending).reshape(-1)[k]):
            parts.append(
                f"{name}multiplier still {'rising' if change[k] > 0 else 'falling'} "
                f"(by {abs(change[k]):.3g} per tenth of the run over the last {TREND_TENTHS} tenths; "
                f"now {final[k]:.4g})"
            )
    if bool(status.short):
        parts.append(
            f"the run is too short to tell whether the multiplier settled (fewer than {10 * MIN_TREND_POINTS} updates)"
        )
    if not bool(status.met):
        returned = np.asarray(status.costs, np.float64).reshape(-1)
        over = ", ".join(f"{c:.4g}" for c in returned) if np.all(np.isfinite(returned)) else None
        parts.append(
            "the returned policy is above alpha"
            + (f" (cost {over} vs alpha {', '.join(f'{a:.4g}' for a in alpha)})" if over else "")
        )
    where = f"{label}: " if label else ""
    if bool(status.met) and not bool(np.any(np.asarray(status.above))):  # only the multiplier is in doubt
        step = _named(status, "step", "a faster-decaying multiplier_lr")
        smaller = f" or take smaller multiplier steps ({step})" if step else ""
        return (
            f"multiplier not yet settled: {where}{'; '.join(parts)}; the returned policy is within alpha; "
            f"to let it settle, train longer (num_iterations){smaller}, or average over more episodes per update "
            "(episodes_per_iteration: the multiplier follows each batch's noise)"
        )
    return f"constraint not yet met: {where}{'; '.join(parts)}; {_advice(status)}"


def _advice(status: Status) -> str:
    """Which setting to change for a run whose constraint is not met (one clause)."""
    rising = np.asarray(status.trending).reshape(-1) & (np.asarray(status.change).reshape(-1) > 0)
    if np.any(rising):
        step = _named(status, "step", "the multiplier step, multiplier_lr or pid_ki")
        faster = f" or let it move faster (a larger {step})" if step else ""
        return f"the multiplier is still rising: train longer (num_iterations){faster}"
    if np.any(np.asarray(status.above)):
        bound, gain = _named(status, "bound", "multiplier_max"), _named(status, "gain", "its gain")
        raise_ = [f"raise {x}" for x in (bound, gain) if x]
        return (
            f"the cost settled above alpha: {' or '.join(raise_) + ', or ' if raise_ else ''}check that alpha is "
            "feasible (fhc-jax solve --tradeoff shows the cheapest cost on a tabular task)"
        )
    return (
        "train longer (num_iterations), or raise eval_episodes (or eval_chunks_max) for tighter estimates of the "
        "returned policy"
    )
