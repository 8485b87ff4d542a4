"""Lagrange-multiplier updates, one optax-style family shared by every learner.

Sign convention (as everywhere in fhc_jax): the multipliers are the non-negative *penalties*
nu^(k) = -lambda^(k) of the paper, kept in [0, bound] with bound = -P; the Lagrangian reward is
r - nu . g. ``fhc_jax.solve`` reports the optimal nu* on the same scale.

Each update is a pair of pure functions, like an ``optax.GradientTransformation``:

* ``init(num_constraints, initial) -> MultiplierState``;
* ``update(state, violation, costs=None) -> (multipliers (M,), new state)``, where
  ``violation`` (M,) estimates S^(k)(theta) - alpha^(k) and ``costs`` (M,) is the batch's mean
  episode cost (read only by a derivative term).

Members:

* :func:`pid`: PID-Lagrangian (Stooke et al. 2020, Algorithm 2, with OmniSafe's EMA and delay
  options): I <- clip(I + k_I e, 0, bound); P <- a_p P + (1 - a_p) e; D <- a_d D + (1 - a_d) C;
  nu = clip(k_P P + I + k_D max(0, D - D_{n-d}), 0, bound). With k_P = k_D = 0 it is the
  paper's projected gradient step (algo7), nu <- clip(nu + c(n) violation, 0, bound); with
  k_D = 0 and a_p = 0 it is PI control (:func:`projected_gradient` with a ``gain``).
* :func:`projected_gradient`: the paper's (algo7) with an optional proportional term.
* :func:`optimizer_ascent`: nu <- clip(nu + optimizer_step(-violation), 0, bound) with any optax
  optimizer on the loss -nu . violation (the "learned multiplier" of PPO-Lagrangian).
* :func:`geometric`: I <- clip(I + c(n) max(I, f) clip(v / s, -1, 1), 0, bound),
  nu = clip(I (1 + K_r clip(v / max(s, z sigma), -1, 1)) + K_p v, 0, bound): steps of c(n) of
  the multiplier's own size while the violation exceeds s, a floor f = nu_0 capped by the level
  that first met the budget, and a proportional term relative to the multiplier's size (FH- and
  NN-Constrained's improved variants, on the violation relative to the budget,
  :func:`budget_scale`, with nu_0 and the bound in budget units, :func:`budget_unit`).

**Units.** Every learner trains on signals in units of their typical magnitudes
(:class:`~fhc_jax.envs.wrappers.ScaledSignals`), so the multipliers count penalties in
normalised reward per normalised cost, and the violation each learner passes is *relative*:
(C_hat - alpha) / d with the violation unit d^(k) = max(|alpha^(k)|, H / 100)
(:func:`violation_units`; alpha in training units, H / 100 = 1% of the largest episode cost
of a typical step magnitude, for thresholds at or near 0). "10% over the budget" then moves a
multiplier as fast on every task, whatever the units of its costs and however long its
episodes, and a learner's multiplier law is invariant to the units of rewards and costs.

**Anti-windup** (one rule for all): the integral state is projected onto the same [0, bound]
as the multipliers after every step, so a long violation cannot wind it up past the largest
penalty it could ever produce, and it unwinds at once when the violation changes sign.
At a fixed point violation = 0 the proportional and derivative terms vanish, so every member
has the paper's equilibria.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from fhc_jax.algos.core.hyperparameters import check_integer, check_interval

Array = jax.Array


def violation_units(thresholds: Array, horizon: int) -> Array:
    """The violation unit d^(k) = max(|alpha^(k)|, H / 100) of each constraint (module
    docstring), (M,), from the thresholds in training units (the learner's own, scaled)."""
    return jnp.maximum(jnp.abs(jnp.asarray(thresholds, jnp.float32)), jnp.float32(horizon / 100.0))


#: z of the one-sided upper 95% confidence bound of a candidate's estimated cost
UPPER_BOUND_Z = 1.645

#: ln(1 / 0.05): with no cost event in n episodes, the one-sided 95% upper bound of an event's
#: probability per episode is about this / n (the "rule of three")
RULE_OF_THREE = 2.995732273553991

#: the learner's multiplier targets alpha minus this many standard errors of its own estimate of
#: a candidate's cost (fhc_jax.algos.core.selection.Selection), plus the bound's rule-of-three
#: term, so that at equilibrium the candidates pass the selection's upper-bound check (one
#: standard error of z = 1.645 each: the batch's noise and the estimate's)
SAFETY_MARGIN = 2 * UPPER_BOUND_Z


def upper_bound_excess(episode_costs: Array, num_episodes: Any, z: Any = UPPER_BOUND_Z) -> Array:
    """How far the one-sided upper 95% bound of an expected episode cost lies above the sample
    mean of ``num_episodes`` episodes with the spread of ``episode_costs`` (K, M), in training
    units (costs divided by their typical step magnitude), (M,):

        z sd / sqrt(n)  +  ln(20) max(c_max, 1) / n

    The first term is the normal approximation; the second keeps the bound from collapsing onto
    the mean when no cost event (or no spread) was seen: with no event in n episodes an event's
    probability per episode is below ln(20) / n at 95% (the rule of three), and an event costs at
    most the largest episode cost seen, c_max, or one typical step magnitude (1 training unit)."""
    return spread_excess(jnp.std(episode_costs, axis=0), jnp.max(jnp.abs(episode_costs), axis=0), num_episodes, z)


def spread_excess(spread: Array, largest: Array, num_episodes: Any, z: Any = UPPER_BOUND_Z) -> Array:
    """:func:`upper_bound_excess` from the episode costs' standard deviation ``spread`` (M,) and
    largest magnitude ``largest`` (M,): z sd / sqrt(n) + ln(20) max(c_max, 1) / n, (M,)."""
    n = jnp.asarray(num_episodes, jnp.float32)
    return z * spread / jnp.sqrt(n) + RULE_OF_THREE * jnp.maximum(largest, 1.0) / n


#: a candidate's estimate grows until the multiplier's safety margin (:func:`relative_violation`,
#: z = :data:`SAFETY_MARGIN`) is within this fraction of |alpha| (:func:`estimate_chunks`)
ESTIMATE_TOLERANCE = 0.05


def estimate_chunks(spread: Array, largest: Array, thresholds: Array, max_chunks: int, eval_episodes: int) -> Array:
    """How many chunks of ``eval_episodes`` episodes a candidate's estimate takes, int32 (): the
    fewest, up to ``max_chunks``, whose safety margin :func:`spread_excess` at z =
    :data:`SAFETY_MARGIN` is within :data:`ESTIMATE_TOLERANCE` |alpha| for every constraint.

    With x = 1 / sqrt(n), the margin Z sd x + R L x^2 (L = max(c_max, 1), R = ln 20) is within
    t = tol |alpha| for x <= 2 t / (Z sd + sqrt(Z^2 sd^2 + 4 R L t)). Costs of ordinary spread
    need one chunk; a rare-event budget (a per-episode cost that is mostly 0, with alpha a
    small expected count) needs up to (Z sd / t)^2 episodes, so its margin, and the distance
    the learner keeps below alpha, shrinks as 1 / sqrt(n). A zero threshold (which sampling can
    never certify, :class:`~fhc_jax.algos.core.selection.Selection`) and a non-finite spread
    take one chunk.

    Args:
        spread: standard deviations of the episode costs, (M,) (training units).
        largest: largest episode-cost magnitudes seen, (M,). thresholds: alpha, (M,).
        max_chunks: the most chunks (``eval_chunks_max``, static).
        eval_episodes: episodes per chunk (static).
    """
    tol = ESTIMATE_TOLERANCE * jnp.abs(jnp.asarray(thresholds, jnp.float32))
    zs, rl = SAFETY_MARGIN * spread, RULE_OF_THREE * jnp.maximum(largest, 1.0)
    x = 2.0 * tol / (zs + jnp.sqrt(zs * zs + 4.0 * rl * tol))
    needed = jnp.ceil(1.0 / (x * x) / eval_episodes)
    usable = (tol > 0) & jnp.isfinite(needed)
    chunks = jnp.where(usable, jnp.clip(needed, 1.0, max_chunks), 1.0)
    return jnp.max(chunks).astype(jnp.int32)


def relative_violation(
    episode_costs: Array,
    thresholds: Array,
    units: Array,
    estimate_episodes: int,
    estimate_episodes_max: int | None = None,
) -> Array:
    """The relative violation every learner's multiplier moves with (module docstring, "Units"),
    (M,): (C_hat - alpha + m) / d, with C_hat the batch's mean episode cost and the safety
    margin m = :func:`upper_bound_excess` of the batch's episode costs at z =
    :data:`SAFETY_MARGIN` over the episodes of the learner's estimate of each candidate: the
    multiplier settles where the cost sits that margin below alpha, so that the returned
    policy's upper 95% cost bound is within alpha.

    Args:
        episode_costs: (K, M) episode totals of the batch (training units).
        thresholds: alpha (M,). units: d (M,) (:func:`violation_units`).
        estimate_episodes: episodes of the learner's candidate estimates (``eval_episodes``).
        estimate_episodes_max: the most they grow to (``eval_episodes * eval_chunks_max``): the margin is then
            the one over the episodes :func:`estimate_chunks` gives for the batch's spread, as the
            selection sizes its estimates (None: ``estimate_episodes``).
    """
    spread, largest = jnp.std(episode_costs, axis=0), jnp.max(jnp.abs(episode_costs), axis=0)
    n = estimate_episodes
    if estimate_episodes_max is not None and estimate_episodes_max > estimate_episodes:
        most = estimate_episodes_max // estimate_episodes
        n = estimate_chunks(spread, largest, thresholds, most, estimate_episodes) * estimate_episodes
    margin = spread_excess(spread, largest, n, SAFETY_MARGIN)
    return (jnp.mean(episode_costs, axis=0) - thresholds + margin) / units


def project(multipliers: Array, bound: Array) -> Array:
    """The paper's (.)^- projection written for penalties nu = -lambda: clip to [0, bound].

    The paper keeps lambda in [P, 0] (P < 0) via (x)^- = min(0, max(x, P)); with
    nu = -lambda and bound = -P this is nu in [0, bound].
    """
    return jnp.clip(multipliers, 0.0, bound)


@struct.dataclass
class MultiplierState:
    """State of a multiplier update (M constraints, d = derivative delay).

    Attributes:
        integral: the integral (dual-ascent) part I, in [0, bound], (M,).
        error_ema: P, EMA of the violation, (M,) (PID with a proportional EMA; else unused).
        cost_ema: D, EMA of the mean episode cost, (M,) (PID with a derivative; else unused).
        history: ring buffer of the last d values of D, (d, M) (slot n mod d holds D_{n-d}).
        optimizer: optax state (:func:`optimizer_ascent`; else None).
        count: updates done, int32 ().
        anchor: the integral when the violation first turned non-positive (0 until then), (M,)
            (:func:`geometric`: it caps the floor; else unused).
    """

    integral: Array
    error_ema: Array
    cost_ema: Array
    history: Array
    optimizer: Any
    count: Array
    anchor: Array


class MultiplierUpdate(NamedTuple):
    """A multiplier update: ``init(num_constraints, initial)`` and
    ``update(state, violation, costs=None) -> (multipliers, state)`` (module docstring)."""

    init: Callable[..., MultiplierState]
    update: Callable[..., tuple[Array, MultiplierState]]


def _check_init(owner: str, num_constraints: Any, initial: Any, bound: Any) -> None:
    """One-line errors for an ``init`` call (concrete values only; traced values pass)."""
    check_integer(owner, "num_constraints", num_constraints, 1)
    check_interval(owner, "initial", initial, 0.0)
    if not isinstance(initial, jax.core.Tracer) and not isinstance(bound, jax.core.Tracer):
        if np.any(np.asarray(initial) > np.asarray(bound)):
            raise ValueError(
                f"{owner}.initial must lie in [0, bound = {np.asarray(bound).tolist()}], found "
                f"{np.asarray(initial).tolist()}"
            )


def _check_update(owner: str, state: MultiplierState, violation: Any, costs: Any, needs_costs: bool) -> None:
    """One-line errors for an ``update`` call (shapes are static, so this runs while tracing)."""
    if not isinstance(state, MultiplierState):
        raise ValueError(f"{owner}.update: state must be the MultiplierState from init, found {type(state).__name__}")
    m = state.integral.shape
    if jnp.shape(violation) != m:
        raise ValueError(
            f"{owner}.update: violation must have shape {m} (one entry per constraint, as init), "
            f"found {jnp.shape(violation)}"
        )
    if needs_costs and costs is None:
        raise ValueError(
            f"{owner}.update: the derivative term (kd) needs the batch's mean episode costs: "
            "update(state, violation, costs)"
        )
    if costs is not None and jnp.shape(costs) != m:
        raise ValueError(f"{owner}.update: costs must have shape {m}, found {jnp.shape(costs)}")


def _state(num_constraints: int, initial: Array, delay: int = 1, optimizer: Any = None) -> MultiplierState:
    zeros = jnp.zeros((num_constraints,), jnp.float32)
    return MultiplierState(
        integral=jnp.full((num_constraints,), initial, jnp.float32),
        error_ema=zeros,
        cost_ema=zeros,
        history=jnp.zeros((delay, num_constraints), jnp.float32),
        optimizer=optimizer,
        count=jnp.zeros((), jnp.int32),
        anchor=zeros,
    )


def pid(
    bound: Array,
    kp: Array,
    ki: Array,
    kd: Array | None = None,
    *,
    p_ema: Array | None = None,
    d_ema: Array = 0.0,
    delay: int = 1,
) -> MultiplierUpdate:
    """PID-Lagrangian (module docstring). ``ki`` may be a schedule value c(n) computed by the
    caller; ``kd = None`` drops the derivative term (and its state updates) and
    ``p_ema = None`` uses the raw violation as P.

    Args:
        bound: nu_max = -P > 0. kp, ki, kd: gains >= 0. p_ema, d_ema: EMA factors in [0, 1].
        delay: d >= 1 (static), the derivative compares D_n with D_{n-d}.
    """

    check_interval("pid", "bound", bound, 0.0, low_open=True)
    for name, gain in (("kp", kp), ("ki", ki), ("kd", kd)):
        if gain is not None:
            check_interval("pid", name, gain, 0.0)
    for name, factor in (("p_ema", p_ema), ("d_ema", d_ema)):
        if factor is not None:
            check_interval("pid", name, factor, 0.0, 1.0)
    check_integer("pid", "delay", delay, 1)

    def init(num_constraints: int, initial: Array = 0.0) -> MultiplierState:
        _check_init("pid", num_constraints, initial, bound)
        return _state(num_constraints, initial, delay)

    def update(state: MultiplierState, violation: Array, costs: Array | None = None) -> tuple[Array, MultiplierState]:
        _check_update("pid", state, violation, costs, needs_costs=kd is not None)
        integral = project(state.integral + ki * violation, bound)
        error = violation if p_ema is None else p_ema * state.error_ema + (1.0 - p_ema) * violation
        nu = kp * error + integral
        cost_ema, history = state.cost_ema, state.history
        if kd is not None:
            cost_ema = d_ema * state.cost_ema + (1.0 - d_ema) * costs
            slot = jnp.mod(state.count, history.shape[0])
            nu = nu + kd * jnp.maximum(0.0, cost_ema - history[slot])
            history = history.at[slot].set(cost_ema)
        new = state.replace(
            integral=integral,
            error_ema=error if p_ema is not None else state.error_ema,
            cost_ema=cost_ema,
            history=history,
            count=state.count + 1,
        )
        return project(nu, bound), new

    return MultiplierUpdate(init, update)


def projected_gradient(step: Array, bound: Array, gain: Array = 0.0) -> MultiplierUpdate:
    """The paper's update (algo7) for penalties, nu_I <- clip(nu_I + c(n) violation, 0, bound),
    with an optional proportional term (PI control): nu = clip(nu_I + gain violation, 0, bound).
    ``gain = 0`` is the paper's update exactly (nu = nu_I). ``step`` is c(n)."""
    return pid(bound, kp=gain, ki=step)


def optimizer_ascent(optimizer: optax.GradientTransformation, bound: Array) -> MultiplierUpdate:
    """A learned multiplier: one ``optimizer`` step on the loss -nu . violation (gradient
    -violation), then projection onto [0, bound]. The state's ``integral`` holds nu."""

    check_interval("optimizer_ascent", "bound", bound, 0.0, low_open=True)

    def init(num_constraints: int, initial: Array = 0.0) -> MultiplierState:
        _check_init("optimizer_ascent", num_constraints, initial, bound)
        nu = jnp.full((num_constraints,), initial, jnp.float32)
        return _state(num_constraints, initial, optimizer=optimizer.init(nu))

    def update(state: MultiplierState, violation: Array, costs: Array | None = None) -> tuple[Array, MultiplierState]:
        _check_update("optimizer_ascent", state, violation, costs, needs_costs=False)
        del costs
        updates, opt_state = optimizer.update(-violation, state.optimizer, state.integral)
        nu = project(state.integral + updates, bound)
        return nu, state.replace(integral=nu, optimizer=opt_state, count=state.count + 1)

    return MultiplierUpdate(init, update)


#: the geometric law's saturation s: a relative violation of s (20% of the budget) or more
#: moves the multiplier by the full c(n) of its own size per update; a smaller one by its share
SATURATION = 0.2

#: the geometric law's floor nu_0 in budget units (:func:`budget_unit`): below it the
#: multiplier moves by c(n) nu_0 per update at full violation, above it in proportion to itself
GEOMETRIC_FLOOR = 0.2

#: once the violation has turned non-positive, the geometric law's floor is at most this many
#: times the integral it had then (its anchor): the level that first met the budget sizes the
#: multiplier better than the budget-unit guess nu_0, which can lie far above nu*
ANCHOR_RATIO = 2.0

#: the geometric law's relative proportional term reacts to violations of s or of this many
#: standard errors of the batch's mean cost, whichever is larger: a rare-event cost's batch
#: noise alone then does not swing the multiplier
PROPORTIONAL_NOISE_Z = 3.0


def budget_scale(thresholds: Array, units: Array) -> Array:
    """The size of each budget the geometric law measures violations against, b = max(|alpha|,
    d / 100), (M,) (training units): the threshold itself, also where it lies below the
    violation unit's floor d = H / 100 (a rare-event budget of a few percent of H / 100 is
    then violated by 10% when its cost is 10% over it, not by 1%)."""
    return jnp.maximum(jnp.abs(jnp.asarray(thresholds, jnp.float32)), jnp.asarray(units, jnp.float32) / 100.0)


def tightened_thresholds(thresholds: Array, loosest: Array, step: Array, num_iterations: int, fraction: Array) -> Array:
    """The thresholds a multiplier law steers to at update n when the budget tightens over the
    first ``fraction`` of a run of N updates (a continuation in the budget):
    alpha_n = alpha + (max(L, alpha) - alpha) (1 - n / (f N))_+^2, from the loosest L at
    n = 0 to alpha from n = f N on (alpha itself when f = 0).

    Why: on control tasks the policy that spends the budget well (a frugal swing-up) is
    reached from a policy that already does the task, not from the near-uniform initial
    policy; a multiplier that binds from the first update drives the policy into the
    zero-action basin first, where the cost gradient keeps it. Starting loose lets the policy
    learn the task, and the tightening then trades reward for cost continuously.

    Args:
        thresholds: alpha, (M,). loosest: L, e.g. the largest episode cost the signals allow
            (:func:`~fhc_jax.algos.core.sampled_inputs.critic_value_scale`), (M,).
        step: n (a traced int). num_iterations: N (static). fraction: f in [0, 1] (a Python 0
            returns ``thresholds`` untouched, without tracing the schedule).
    Returns:
        alpha_n, (M,).
    """
    thresholds = jnp.asarray(thresholds, jnp.float32)
    if isinstance(fraction, (int, float)) and fraction == 0:  # a constant budget: alpha itself
        return thresholds
    span = jnp.maximum(jnp.asarray(fraction, jnp.float32) * num_iterations, 1.0)
    weight = jnp.where(fraction > 0, jnp.clip(1.0 - step / span, 0.0, 1.0) ** 2, 0.0)
    return thresholds + (jnp.maximum(loosest, thresholds) - thresholds) * weight


def budget_unit(units: Array, horizon: int) -> Array:
    """One budget unit of a multiplier in training units, H / d (M,): a penalty of 1 budget
    unit costs a policy that spends its whole budget d (the violation unit) about one typical
    step reward per stage. The constrained optimum's nu* in budget units is nu* alpha / (H r):
    the trade-off's elasticity (reward given per share of the budget) times J* / (H r), with r
    the typical step reward -- 0.04 to 3 on the binding tasks of the suite, where nu* itself
    spans 0.5 to 300 training units."""
    return jnp.float32(horizon) / jnp.asarray(units, jnp.float32)


def geometric(
    step: Array,
    bound: Array,
    gain: Array,
    floor: Array,
    saturation: Array = SATURATION,
    relative_gain: Array = 0.0,
    noise: Array = 0.0,
) -> MultiplierUpdate:
    """A saturated, geometric integral law with proportional terms (the improved FH- and
    NN-Constrained's), per constraint, on the violation v relative to the budget:

        I_n  = clip(I_{n-1} + c(n) max(I_{n-1}, f_n) clip(v_n / s, -1, 1), 0, bound)
        nu_n = clip(I_n (1 + K_r clip(v_n / max(s, z sigma_n), -1, 1)) + K_p v_n, 0, bound)

    with the floor f_n = nu_0 until the violation first turns non-positive and
    min(nu_0, :data:`ANCHOR_RATIO` A) from then on, A the integral at that moment (the
    anchor), and sigma_n the standard error of v_n from the batch's spread, z =
    :data:`PROPORTIONAL_NOISE_Z`.

    * The integral: a violation of s or more moves it by c(n) of its own size per update
      whatever its magnitude (a steep trade-off's 10%, a rare-event budget's), so the distance
      is geometric: N updates reach any multiplier within nu_0 exp(sum c(n)) of the start; a
      smaller violation (near the fixed point, noise) moves it in proportion, as the paper's
      law does. The floor lets it leave 0; the anchor keeps a floor far above nu* (a guess in
      budget units) from turning the integral into a fast linear law that batch noise swings.
    * The relative proportional term K_r: the penalty the actor sees this update rises with the
      batch's own violation in proportion to the multiplier's size (a PI law in log space). It
      damps the slow oscillation an integral alone produces when the policy follows the
      multiplier with a lag of many updates; violations within z standard errors of the batch's
      noise count in proportion to that noise, so a rare-event cost does not swing it.
    * K_p adds the violation itself (in training units), which moves nu off 0 at once.

    The fixed points are the paper's (v = 0, or nu = 0 with v <= 0); the integral's step is at
    most c(n) bound, so c(n) keeps its ordering under b(n).

    Args:
        step: c(n) >= 0. bound: nu_max > 0, (M,) or scalar. gain: K_p >= 0.
        floor: nu_0 > 0, (M,) or scalar (same units as nu). saturation: s > 0.
        relative_gain: K_r in [0, 1] (0: the integral and K_p only).
        noise: sigma_n >= 0 of this update's violation, (M,) or scalar (0: s alone).
    """
    check_interval("geometric", "bound", bound, 0.0, low_open=True)
    check_interval("geometric", "gain", gain, 0.0)
    check_interval("geometric", "floor", floor, 0.0, low_open=True)
    check_interval("geometric", "saturation", saturation, 0.0, low_open=True)
    check_interval("geometric", "relative_gain", relative_gain, 0.0, 1.0)

    def init(num_constraints: int, initial: Array = 0.0) -> MultiplierState:
        _check_init("geometric", num_constraints, initial, bound)
        return _state(num_constraints, initial)

    def update(state: MultiplierState, violation: Array, costs: Array | None = None) -> tuple[Array, MultiplierState]:
        _check_update("geometric", state, violation, costs, needs_costs=False)
        del costs
        drive = jnp.clip(violation / saturation, -1.0, 1.0)
        anchored = state.anchor > 0
        floor_n = jnp.where(anchored, jnp.minimum(floor, ANCHOR_RATIO * state.anchor), floor)
        integral = project(state.integral + step * jnp.maximum(state.integral, floor_n) * drive, bound)
        anchor = jnp.where(~anchored & (violation <= 0) & (state.integral > 0), state.integral, state.anchor)
        reach = jnp.maximum(saturation, PROPORTIONAL_NOISE_Z * noise)
        relative = relative_gain * jnp.clip(violation / reach, -1.0, 1.0)
        nu = project(integral * (1.0 + relative) + gain * violation, bound)
        return nu, state.replace(integral=integral, anchor=anchor, count=state.count + 1)

    return MultiplierUpdate(init, update)


def three_timescale_init(
    paper: bool, num_constraints: int, initial: Any, bound: Any, units: Array | None, horizon: int
) -> tuple[Array, MultiplierState]:
    """FH- and NN-Constrained's initial multipliers and law state: nu_0 = ``initial`` in
    [0, ``bound``], counted in training units (paper) or budget units (improved; converted to
    training units with :func:`budget_unit`, which needs the violation units), (M,)."""
    _check_init("three_timescale_init", num_constraints, initial, bound)
    nu = jnp.broadcast_to(jnp.asarray(initial, jnp.float32), (num_constraints,))
    if not paper and units is not None:
        nu = nu * budget_unit(units, horizon)
    return nu, _state(num_constraints, nu)


def three_timescale_step(
    state: MultiplierState,
    critic_estimate: Array,
    episode_costs: Array,
    thresholds: Array,
    units: Array,
    paper: bool,
    step_size: Array,
    bound: Array,
    gain: Array,
    estimate_episodes: int,
    horizon: int,
    relative_gain: Array = 0.0,
    estimate_episodes_max: int | None = None,
) -> tuple[Array, MultiplierState, Array]:
    """One step of FH- and NN-Constrained's multipliers (algo7), nu = -lambda in [0, bound].

    The paper variant moves nu by c(n) times the constraint critics' estimate of the cost over
    its threshold (their terminal value holds -alpha), (W_0 - alpha) / d, in [0, bound]
    training units; the improved one moves it by the :func:`geometric` law on the batch's
    relative violation with the safety margin (:func:`relative_violation`), with ``bound`` and
    the floor nu_0 = :data:`GEOMETRIC_FLOOR` counted in budget units (:func:`budget_unit`), the
    violation measured against the budget itself (:func:`budget_scale`) and its noise taken
    as the standard error of the batch's mean episode cost on the same scale.

    Args:
        state: the law's state. critic_estimate: the constraint critics' mean estimate at s_0,
            (M,) (in the paper variant W_0 = expected cost - alpha). episode_costs: the batch's
            episode totals, (K, M). thresholds: alpha (M,). units: d (M,).
        paper: the paper's law. step_size: c(n). bound: -P (training units in the paper
            variant, budget units in the improved one). gain: K_p (improved).
        estimate_episodes: episodes of the learner's candidate estimates (``eval_episodes``).
        horizon: H (static). relative_gain: K_r of :func:`geometric` (improved).
        estimate_episodes_max: the most episodes the estimates grow to (``eval_episodes * eval_chunks_max``,
            :func:`relative_violation`).
    Returns:
        (nu (M,), the law's new state, the critics' estimate of the expected total cost (M,)).
    """
    if paper:
        violation, critic_costs = critic_estimate / units, critic_estimate + thresholds
        nu, state = projected_gradient(step_size, bound).update(state, violation)  # the paper's (algo7)
        return nu, state, critic_costs
    violation = relative_violation(episode_costs, thresholds, units, estimate_episodes, estimate_episodes_max)
    bound = bound * budget_unit(units, horizon)
    nu, state = budget_geometric_step(
        state, violation, episode_costs, thresholds, units, horizon, step_size, bound, gain, relative_gain
    )
    return nu, state, critic_estimate


def budget_geometric_step(
    state: MultiplierState,
    violation: Array,
    episode_costs: Array,
    thresholds: Array,
    units: Array,
    horizon: int,
    step: Array,
    bound: Array,
    gain: Array,
    relative_gain: Array,
) -> tuple[Array, MultiplierState]:
    """One step of the :func:`geometric` law as every learner that uses it runs it: on the
    violation relative to the budget itself (:func:`budget_scale`), from the floor nu_0 =
    :data:`GEOMETRIC_FLOOR` budget units (:func:`budget_unit`), with the batch's noise sigma the
    standard error of its mean episode cost on the same scale.

    Args:
        state: the law's state. violation: the relative violation (C - alpha + m) / d of
            :func:`relative_violation`, (M,). episode_costs: the batch's episode totals, (K, M).
        thresholds: alpha (M,). units: d (M,). horizon: H (static).
        step: c (a schedule value or a constant). bound: nu_max in training units.
        gain: K_p. relative_gain: K_r.
    Returns:
        (nu (M,), the law's new state), in training units.
    """
    scale = budget_scale(thresholds, units)
    violation = violation * (units / scale)
    unit = budget_unit(units, horizon)
    noise = jnp.std(episode_costs, axis=0) / jnp.sqrt(jnp.float32(episode_costs.shape[0])) / scale
    law = geometric(step, bound, gain, GEOMETRIC_FLOOR * unit, relative_gain=relative_gain, noise=noise)
    return law.update(state, violation)
