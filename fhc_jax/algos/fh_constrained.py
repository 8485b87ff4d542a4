"""FH-Constrained: the paper's Algorithm 1, a three-timescale actor-critic for finite-horizon
constrained MDPs, batched over K episodes and compiled as one program per training run.

Per-stage linear critics v_h, constraint critics w_h^(k) (stages 0..H) and Gibbs actors
mu_{theta_h}(s, .) = softmax(phi_h(s)^T theta_h) (stages 0..H-1) on features phi_h(s)
(:mod:`fhc_jax.algos.core.features`, one-hot by default), each family stacked on a leading stage
axis, so all H stages are updated in one vectorised operation. Critics move with a(n), actors
with b(n), the penalties nu = -lambda in [0, multiplier_max] with c(n) (projected step (algo7)),
a(n) > b(n) > c(n) as in Assumption 3.

``Config.variant``: "paper" is (algo1)-(algo7) verbatim (with K = 1 it equals the equations
exactly; the tests check it against an equation-by-equation reference); "improved" (default)
moves the multiplier with the batch's Monte-Carlo violation plus a proportional term, learns
the critics from lambda-returns, uses a visit-averaged actor increment and reports the Polyak
average of the actor, all with the paper's fixed points. ``Config.combine`` sets how the K
per-episode increments form one update, ``Config.update_form`` is a speed choice. The
equations, the sign convention and the derivation of every departure from the paper are in
docs/algorithms/fh_constrained.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct

from fhc_jax.algos.core import scaffold
from fhc_jax.algos.core import features as feat, multipliers
from fhc_jax.algos.core.hyperparameters import (EnvDefault, PowerSchedule, RunConfig, hyperparameters, numeric, resolve_env_defaults,
                                           schedule, static)
from fhc_jax.algos.core.evaluation import EvaluationMetrics, observation_policy
from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.algos.core.sampled_inputs import observation_sample_by_stage
from fhc_jax.algos.core.policies import observation_to_index
from fhc_jax.rollout import rollout as rollout_episodes
from fhc_jax.algos.core.returns import lagrangian_targets, state_baseline, visit_averaged_advantages
from fhc_jax.algos.core.tabular_rollout import (
    Batch, TabularModel, batch_from_trajectory, rollout_policy_table, rollout_tabular, tabular_model,
)
from fhc_jax.algos.core.features import FeatureSpec, FeatureTable, OneHot

Array = jax.Array

VARIANTS = ("paper", "improved")
COMBINE_RULES = ("visits", "mean", "mass")
UPDATE_FORMS = ("auto", "table", "samples")

#: a visited (stage, state) subtracts its samples' mean advantage from two samples on
#: (``returns.state_baseline``): one sample moves its action by its critic-baselined delta
BASELINE_SAMPLES = 2
_FEATURE_SPECS = (feat.OneHot, feat.RadialBasis, feat.TileCoding, feat.Custom, feat.Auto)


@hyperparameters
class Config(RunConfig):
    """Hyperparameters of FH-Constrained. The step sizes were chosen on the default
    ``GridWorld`` (10x10, H = 100, alpha = 25) by vmapped grid searches (``fhc-jax sweep``),
    judged exactly; the learner trains in units of the signals' magnitudes and its multiplier
    law acts on the relative violation, so the defaults carry to other tasks (the robustness
    suite, ``docs/benchmarks.md``; ``docs/algorithms/fh_constrained.md``, Known limits).

    Static fields (set shapes or code paths; part of the compilation cache key):
        num_iterations: updates per training run (N >= 1). Default (``EnvDefault``): 2500 on
            environments with a tabular exact model, 5000 on all others (on BatteryStorage
            two of five tuning seeds stop near 89% of the reference after 2500 updates and
            all five pass 96.8% after 5000; docs/algorithms/fh_constrained.md).
        episodes_per_iteration: K >= 1 episodes rolled out per update (K = 1: the paper's
            per-episode step; the improved variant learns from it too: a state visited once
            moves its sampled action by the critic-baselined delta, ``returns.state_baseline``).
        features: feature spec phi_h(s) (:mod:`fhc_jax.algos.core.features`); by default
            (``EnvDefault``, resolved by ``make_train``) one-hot on environments with a tabular
            exact model and ``features.Auto()`` of the observations on all others (a tile
            coding or radial basis of the components that vary within a stage, sized by their
            number: ``TileCoding(6, 3)`` of BatteryStorage's (soc, d)). ``OneHot`` and
            ``Custom`` need tabular states, ``Auto`` raw observations.
        variant: "paper" (eqs. (algo1)-(algo7) verbatim) or "improved" (module docstring).
        combine: how K per-episode increments are combined into one per feature: "visits"
            divides the summed increment of feature j by the number of samples that activate it
            (phi_j != 0), "mass" by their summed activation sum_k phi_j(s_k) (the same rule for
            one-hot features; for coarse maps whose activations are never exactly 0, such as
            ``RadialBasis``, "visits" divides by K and shrinks each feature's step by its mean
            activation, about 1/X), "mean" by K. Default (``EnvDefault``): "visits" on
            environments with a tabular exact model, "mass" on all others.
        update_form: "auto", "table" or "samples" (speed only, module docstring).
        eval_every: exact evaluation of the policy every this many updates (0: only the
            initial and final policies).
        eval_episodes: episodes of each Monte-Carlo evaluation on environments without a
            tabular exact model.
        path: "tabular" rolls out from the exact tabular model; "sampled" rolls out through
            ``fhc_jax.rollout`` and updates from the recorded episodes (any environment: the
            features are then a coarse map of the observations, ``features.RadialBasis`` or
            ``TileCoding``, on the box the uniform policy's observations span); "auto"
            (default) takes "tabular" where the environment has a tabular exact model.
        check_step_sizes: validate the schedules against Assumption 3 (default True). Set
            False only to experiment with schedules outside the paper's theory (e.g.
            constant step sizes); positivity is always checked.

    Numeric fields (pytree leaves: ``jax.vmap`` over them without recompiling):
        critic_step: a(n), fastest schedule (critics v, w; eqs. (algo1), (algo2), (algo4), (algo5)).
        actor_step: b(n), middle schedule (actor theta; eq. (algo3)).
        multiplier_step: c(n), slowest schedule (multipliers; eq. (algo7)), applied to the
            relative violation (C - alpha) / d (:mod:`fhc_jax.algos.core.multipliers`, "Units").
        theta_bound: Gamma projects every theta entry onto [-theta_bound, theta_bound] (> 0).
        multiplier_max: -P, the penalties nu live in [0, multiplier_max] (> 0), in training
            units (normalised reward per normalised cost, ``fhc_jax.algos.core.scaffold``).
        initial_multiplier: nu at n = 0, in [0, multiplier_max], in training units.
        trace: lambda-return trace of the improved variant, in [0, 1] (ignored by "paper").
            Default (``EnvDefault``): 0.5 on environments with a tabular exact model, 1.0
            (Monte-Carlo targets) on all others, where the linear critics on a coarse map of
            the observation are biased and bootstrapping passes that bias on.
        multiplier_gain: proportional gain K_p >= 0 of the improved variant's multiplier
            (ignored by "paper"): the penalty used is nu = clip(nu_I + K_p (C_hat - alpha) / d),
            where nu_I is the paper's integral update (algo7) on the relative violation and
            C_hat the batch's mean episode cost.
        policy_averaging: beta in [0, 1): the reported policy (:func:`policy_table`, the exact
            evaluations in the metrics, :func:`policy`) is softmax of the exponential Polyak
            average theta_bar <- beta theta_bar + (1 - beta) theta(n+1) (Polyak & Juditsky 1992);
            0 reports the last iterate. Rollouts during training always use theta(n).
        importance_floor: the floor of the behaviour probability mu_a in the improved actor's
            importance-weighted increment delta (e_a / max(mu_a, floor) - 1) on environments
            without tabular states, in (0, 1] (unused elsewhere; the fixed value of earlier
            versions, so their run directories load unchanged). Below the floor an action's
            expected increment shrinks by mu_a / floor. On BatteryStorage 0.01 did no better
            than 0.05 on fresh seeds (docs/algorithms/fh_constrained.md).
    """

    num_iterations: int = static(EnvDefault(tabular=2500, non_tabular=5000), low=1)
    episodes_per_iteration: int = static(512, low=1)
    features: FeatureSpec = static(EnvDefault(tabular=OneHot(), non_tabular=feat.Auto()), types=_FEATURE_SPECS,
                                   description="a feature spec (features.OneHot(), RadialBasis(...), TileCoding(...), "
                                               "Custom(...), Auto(...))")
    variant: str = static("improved", choices=VARIANTS)
    combine: str = static(EnvDefault(tabular="visits", non_tabular="mass"), choices=COMBINE_RULES)
    update_form: str = static("auto", choices=UPDATE_FORMS)
    eval_every: int = static(100, low=0)
    check_step_sizes: bool = static(True)
    critic_step: PowerSchedule = schedule(PowerSchedule(init=1.0, power=0.55, decay=100.0))
    actor_step: PowerSchedule = schedule(PowerSchedule(init=3.0, power=0.6, decay=100.0))
    multiplier_step: PowerSchedule = schedule(PowerSchedule(init=5e-3, power=0.8, decay=1000.0))
    theta_bound: float = numeric(4.0, low=0.0, low_open=True)
    multiplier_max: float = numeric(20.0, low=0.0, low_open=True)
    initial_multiplier: float = numeric(0.0, low=0.0, high="multiplier_max")
    trace: float = numeric(EnvDefault(tabular=0.5, non_tabular=1.0), low=0.0, high=1.0)
    multiplier_gain: float = numeric(0.25, low=0.0)
    policy_averaging: float = numeric(0.99, low=0.0, high=1.0, high_open=True)
    importance_floor: float = numeric(0.05, low=0.0, high=1.0, low_open=True)


@struct.dataclass
class TrainState(scaffold.StampedState):
    """Learner parameters (H stages, X features, A actions, M constraints).

    Attributes:
        theta: actor parameters theta_h, (H, X, A); mu_h(s, .) = softmax(phi_h(s)^T theta_h).
        critics: critic weights for stages 0..H, (H+1, X, 1+M): channel 0 is the Lagrangian
            critic v_h, channels 1..M the constraint critics w_h^(k) (see :attr:`v`, :attr:`w`).
        multipliers: penalties nu^(k) = -lambda^(k) >= 0 used in c^lambda, (M,).
        multiplier_state: the multiplier update's state (:mod:`fhc_jax.algos.core.multipliers`;
            its ``integral`` is nu_I of (algo7), equal to ``multipliers`` in the paper variant).
        step: number of updates done, n, int32 ().
        theta_average: Polyak average of theta (exponential, weight ``Config.policy_averaging``),
            (H, X, A): the learner's reported policy (:func:`policy_table`).
        features: the feature spec (static).
    """

    theta: Array
    critics: Array
    multipliers: Array
    multiplier_state: multipliers.MultiplierState
    step: Array
    theta_average: Array
    features: FeatureSpec = struct.field(pytree_node=False, default=OneHot())

    @property
    def v(self) -> Array:
        """Lagrangian critic weights v_h, (H+1, X)."""
        return self.critics[..., 0]

    @property
    def w(self) -> Array:
        """Constraint critic weights w_h^(k), (M, H+1, X)."""
        return jnp.moveaxis(self.critics[..., 1:], -1, -3)


@struct.dataclass
class Metrics:
    """Per-iteration training metrics (N iterations, M constraints); O(N) memory whatever K, H.

    Attributes:
        reward: mean total episode reward of the iteration's K episodes (terminal included), (N,).
        costs: mean total episode cost per constraint, (N, M).
        multipliers: penalties nu after the update (non-negative; = -lambda), (N, M).
        critic_costs: the constraint critics' estimate of the expected total cost,
            mean_k w_0^T phi_0(s_0) (+ alpha in the paper variant, whose critic includes
            -alpha), before the update, (N, M).
        evaluation: the reported policy's reward and costs every ``eval_every`` updates, exact on
            tabular exact models and Monte-Carlo estimates elsewhere (:class:`EvaluationMetrics`).
    """

    reward: Array
    costs: Array
    multipliers: Array
    critic_costs: Array
    evaluation: EvaluationMetrics


@dataclasses.dataclass(frozen=True)
class Setup:
    """Constants derived from the environment (built once by :func:`setup`).

    Attributes:
        features: phi_h(s) of every stage and state (:class:`FeatureTable`), or phi(o) of raw
            observations (:class:`~fhc_jax.algos.core.features.ObservationFeatures`) on
            environments without tabular states.
        env, params: the environment (the sampled path rolls out through ``fhc_jax.rollout``).
        model: the tabular rollout model (tabular path). thresholds: alpha^(k), (M,), in
        training units. violation_units: d^(k) of the relative violation (C - alpha) / d the
        multiplier moves with (:func:`~fhc_jax.algos.core.multipliers.violation_units`), (M,).
        num_states, num_actions, num_constraints, horizon: S (0 without tabular states), A, M, H.
        sampled: the path (:attr:`Config.path`). form: the update form, "table" or "samples".
    """

    features: Any
    env: Any
    params: Any
    model: TabularModel | None
    thresholds: Array | None
    violation_units: Array | None
    num_states: int
    num_actions: int
    num_constraints: int
    horizon: int
    sampled: bool
    form: str


def resolve_update_form(config: Config, num_states: int) -> str:
    """The update form "auto" picks for these sizes ("samples" iff 4 K <= S)."""
    if config.update_form != "auto":
        return config.update_form
    return "samples" if 4 * config.episodes_per_iteration <= num_states else "table"


def _features(spec: FeatureSpec, env, params) -> Any:
    if env.is_tabular:
        return feat.build(spec, env)
    by_stage = observation_sample_by_stage(env, params)  # (N, H+1, D); its box is observation_sample's
    sample = by_stage.reshape(-1, by_stage.shape[-1])
    return feat.observation_features(spec, sample.min(axis=0), sample.max(axis=0), feat.stage_determined(by_stage))


def _setup(env, params, spec: FeatureSpec, sampled: bool, model, thresholds, form: str) -> Setup:
    if sampled and len(env.observation_shape) != 1:
        raise ValueError(f"fh_constrained: features of observations need flat observations, but "
                         f"{env.name}'s have shape {env.observation_shape}")
    units = None if thresholds is None else multipliers.violation_units(thresholds, env.horizon)
    return Setup(features=_features(spec, env, params), env=env, params=params, model=model,
                 thresholds=thresholds, violation_units=units, num_states=env.num_states if env.is_tabular else 0,
                 num_actions=env.num_actions, num_constraints=env.num_constraints, horizon=env.horizon,
                 sampled=sampled, form=form)


def setup(env, params, config: Config) -> Setup:
    """Features, rollout model and thresholds of ``env`` (host-side).

    Raises:
        ValueError: features that do not fit the environment, or ``path="tabular"`` on an
            environment without a tabular exact model.
    """
    if config.path == "tabular" and not judged_exactly(env):
        raise ValueError(f"Config.path = 'tabular' needs a tabular exact model, which {env.name} does not declare")
    config = resolve_env_defaults(config, judged_exactly(env))  # make_learner did; direct calls
    sampled = config.path == "sampled" or not judged_exactly(env)
    return _setup(env, params, config.features, sampled, None if sampled else tabular_model(env, params),
                  jnp.asarray(env.thresholds(params), jnp.float32),
                  "samples" if sampled else resolve_update_form(config, env.num_states))


def policy_setup(env, params, train_state: TrainState) -> Setup:
    """What :func:`logits` and :func:`observation_logits` need, from the features recorded in
    the train state."""
    return _setup(env, params, train_state.features, not judged_exactly(env), None, None, "table")


def _multiplier_update(config: Config, n: Array) -> multipliers.MultiplierUpdate:
    """(algo7) with the improved variant's proportional term (gain 0 in the paper variant)."""
    gain = 0.0 if config.variant == "paper" else config.multiplier_gain
    return multipliers.projected_gradient(config.multiplier_step(n), config.multiplier_max, gain)


def init(key: Array, setup: Setup, config: Config) -> TrainState:
    """Initial parameters: theta = 0 (uniform policy), critics = 0, nu = initial_multiplier.
    ``key`` is unused (the initialisation is deterministic)."""
    del key
    h, a, m, x = setup.horizon, setup.num_actions, setup.num_constraints, setup.features.num_features
    nu = jnp.broadcast_to(jnp.asarray(config.initial_multiplier, jnp.float32), (m,))
    return TrainState(
        theta=jnp.zeros((h, x, a), jnp.float32),
        theta_average=jnp.zeros((h, x, a), jnp.float32),
        critics=jnp.zeros((h + 1, x, 1 + m), jnp.float32),
        multipliers=nu,
        multiplier_state=_multiplier_update(config, 0).init(m, nu),
        step=jnp.zeros((), jnp.int32),
        # the map used (Auto records the map it chose, so the state says what it trained on)
        features=getattr(setup.features, "spec", None) or resolve_env_defaults(config, judged_exactly(setup.env)).features,
    )


def _logits_table(theta: Array, feats: FeatureTable) -> Array:
    """phi_h(s)^T theta_h for all h < H and s, (H, S, A)."""
    return feats.values(theta)


def logits(train_state: TrainState, setup: Setup) -> Array:
    """Logits of the reported policy (the Polyak-averaged actor), (H, S, A)."""
    return _logits_table(train_state.theta_average, setup.features)


def _observation_logits(theta: Array, setup: Setup, observation: Array, h: Array) -> Array:
    """phi_h(o)^T theta_h at one raw observation of stage h, (A,)."""
    feats = setup.features
    if not setup.env.is_tabular:
        return feats(observation) @ theta[h]
    s = observation_to_index(setup.env)(observation)
    if feats.one_hot:
        return theta[h, s]
    return (feats.table[h, s] if feats.per_stage else feats.table[s]) @ theta[h]


def observation_logits(train_state: TrainState, setup: Setup, observation: Array, h: Array) -> Array:
    """Logits of the reported policy at one raw observation of stage h, (A,)."""
    return _observation_logits(train_state.theta_average, setup, observation, h)


def rollout(key: Array, train_state: TrainState, setup: Setup, config: Config) -> Batch:
    """K episodes under theta(n). The "table" form samples from the policy table (kept in
    ``Batch.behaviour`` for the update); "samples" applies the actor per visited state; the
    sampled path acts on each observation through ``fhc_jax.rollout``."""
    feats, k = setup.features, config.episodes_per_iteration
    if setup.sampled:
        act = observation_policy(lambda obs, h: _observation_logits(train_state.theta, setup, obs, h))
        return batch_from_trajectory(rollout_episodes(key, setup.env, setup.params, act, k))
    if setup.form == "table":
        mu = _softmax_actions(_logits_table(train_state.theta, feats))
        return rollout_policy_table(key, setup.model, mu, k).replace(behaviour=mu)
    if feats.one_hot:
        cdf = lambda theta_h, s: jnp.cumsum(jax.nn.softmax(theta_h[s], axis=-1), axis=-1)
        return rollout_tabular(key, setup.model, train_state.theta, cdf, k)
    phis = feats.all_stages(setup.horizon)[: setup.horizon]
    cdf = lambda xs, s: jnp.cumsum(jax.nn.softmax(xs[1][s] @ xs[0], axis=-1), axis=-1)
    return rollout_tabular(key, setup.model, (train_state.theta, phis), cdf, k)


def _feature_rows(feats: FeatureTable, states: Array) -> Array:
    """phi_h(s_hk) for a time-major (L, K) array of states at stages 0..L-1: (L, K, X)."""
    if feats.per_stage:
        return jnp.take_along_axis(feats.table[: states.shape[0]], states[..., None], axis=1)
    return feats.table[states]


def _advantage_increment_from_sums(count_sa: Array, total_sa: Array, features: FeatureTable, k: int, visits: bool,
                                   count_s: Array | None = None, total_s: Array | None = None,
                                   mass: bool = False) -> Array:
    """Actor increment of the improved variant, (H, X, A), from per-cell visit counts
    n_h(s, a) and sums of the actor's errors delta, both (H, S, A).

    The visit-averaged advantage A_hat_h(s, a) (:func:`fhc_jax.algos.core.returns.
    visit_averaged_advantages`) has, coordinate by coordinate, the sign of the paper's expected
    increment d_h(s) mu_h(s, a) A_h(s, a) (a positive diagonal rescaling, like a natural
    gradient for the softmax), so the box-projected stationary points are the paper's, but
    rarely chosen actions are no longer learned at a rate shrunk by mu_h(s, a). Per-state
    tables map to features as the critic's do: Phi^T (n_h(s) A_hat) divided by the feature's
    visit count ("visits") or by K ("mean"); with one-hot features and "visits" the increment
    is A_hat itself. ``count_s``, ``total_s``: the sums of both over the actions, (H, S),
    when the caller has them (else summed here)."""
    count_s = count_sa.sum(-1) if count_s is None else count_s  # (H, S)
    adv = visit_averaged_advantages(count_sa, total_sa, count_s, total_s, BASELINE_SAMPLES)
    active = features.project(count_s) if mass else features.project_active(count_s)
    return _combine(features.project(adv * count_s[..., None]), active, k, visits)


def _group_sums(keys: Array, values: Array) -> tuple[Array, Array]:
    """For each sample k of each stage h: the sum of ``values`` over the samples of stage h with
    the same key, and their number, both (H, K), in O(H K log K) time and O(H K) memory (a
    stable sort of each stage's keys, segment sums over the runs of equal keys, and the
    inverse permutation), instead of the O(H K^2) pairwise comparison.

    Args:
        keys: integer keys (H, K) (e.g. s_k, or s_k A + a_k).
        values: (H, K).
    """
    k = keys.shape[-1]
    order = jnp.argsort(keys, axis=-1, stable=True)
    sorted_keys = jnp.take_along_axis(keys, order, axis=-1)
    starts = jnp.concatenate([jnp.ones_like(sorted_keys[:, :1], bool), sorted_keys[:, 1:] != sorted_keys[:, :-1]], -1)
    segment = jnp.cumsum(starts, axis=-1) - 1  # (H, K): index of the run of equal keys
    sorted_values = jnp.take_along_axis(values, order, axis=-1)
    per_stage = jax.vmap(lambda v, seg: (jax.ops.segment_sum(v, seg, k), jax.ops.segment_sum(jnp.ones_like(v), seg, k)))
    sums, counts = per_stage(sorted_values, segment)
    inverse = jnp.argsort(order, axis=-1)
    back = lambda x: jnp.take_along_axis(jnp.take_along_axis(x, segment, axis=-1), inverse, axis=-1)
    return back(sums), back(counts)


def _advantage_weights(states: Array, actions: Array, delta: Array, num_actions: int) -> tuple[Array, Array]:
    """Per-sample form of :func:`_advantage_increment_from_sums` for small batches, from the
    groups of samples of each stage that share a state or a (state, action) cell
    (:func:`_group_sums`): O(H K log K) instead of the table form's O(H S A).

    Sample k of stage h carries w_hk = A_hat_h(s_k, a_k) n_h(s_k) / n_h(s_k, a_k), so summing the
    samples of a (h, s, a) cell gives n_h(s) A_hat_h(s, a), which the table form then maps to
    features and normalises. Returns (w (H, K), n_h(s_k) (H, K)).
    """
    s = states.astype(jnp.int32)
    sum_s, count_s = _group_sums(s, delta)
    sum_sa, count_sa = _group_sums(s * num_actions + actions.astype(jnp.int32), delta)  # counts >= 1
    adv = sum_sa / count_sa - state_baseline(count_s, sum_s, BASELINE_SAMPLES)
    return adv * count_s / count_sa, count_s


def _combine(increment: Array, active: Array, k: int, visits: bool) -> Array:
    """Turn a summed per-feature increment (L, X, ...) into one update (``Config.combine``):
    divide by the number of episodes that activated the feature, ``active`` (L, X)
    ("visits"), or by K ("mean")."""
    if not visits:
        return increment / k
    return increment / jnp.maximum(active, 1.0)[..., None]


def _along_actions(op: Callable[[Array, Array], Array], x: Array, axis: int) -> Array:
    """``op`` folded over the short action axis of ``x``, entry by entry in order (a sum with
    ``jnp.add``, a maximum with ``jnp.maximum``): the values of ``x.sum(axis)`` /
    ``x.max(axis)`` (bit for bit on this jax, tests/test_pinned_learners.py), without XLA:CPU's
    slow reduction kernels for an axis of a few entries (the (H, S, A) tables, every update)."""
    total = jnp.take(x, 0, axis=axis)
    for a in range(1, x.shape[axis]):
        total = op(total, jnp.take(x, a, axis=axis))
    return total


def _softmax_actions(logits: Array) -> Array:
    """``jax.nn.softmax(logits, axis=-1)`` of a (H, S, A) table, maximum and sum over the
    actions by :func:`_along_actions` (the rollout's policy table)."""
    top = jax.lax.stop_gradient(_along_actions(jnp.maximum, logits, -1))[..., None]
    unnormalized = jnp.exp(logits - top)
    return unnormalized / _along_actions(jnp.add, unnormalized, -1)[..., None]


def _table_statistics(batch: Batch, critics: Array, vals: Array | None, nu: Array, thresholds: Array, paper: bool,
                      trace: Array, num_states: int, num_actions: int) -> tuple[Array, Array, Array]:
    """The "table" form's per-cell sums of the critics' errors, in one backward scan over the
    stages: the arithmetic of computing the errors of all stages
    (:func:`~fhc_jax.algos.core.returns.lagrangian_targets`), then one scatter, stage by stage
    (tests/test_pinned_learners.py holds it to the same bits).

    Stage by stage, from h = H-1 down to 0: the critic values at s_h and s_{h+1} (read from
    the critic table with one-hot features, else from ``vals``), the target (paper: TD(0)
    c_h + V_{h+1}; improved: the lambda-return G_h = c_h + (1 - lambda) V_{h+1} + lambda
    G_{h+1}, :func:`~fhc_jax.algos.core.returns.lagrangian_targets`), the error, and its scatter
    into the stage's (S*A) cells. Each of the C channels is a contiguous (K,) vector and
    nothing of size (H, K, C) is materialised: one stage's K episodes stay in cache.

    Args:
        batch: time-major episodes with tabular states (H+1, K).
        critics: (H+1, X, C) critic weights (C = 1+M); read directly with one-hot features.
        vals: critic values at the visited states (H+1, K, C) for other features, else None.
        nu: penalties (M,). thresholds: alpha (M,). paper: the paper's TD(0) targets.
        trace: the lambda-return trace (improved variant).
    Returns:
        (stats (H, S*A, 2+M): per (stage, cell = s*A + a) the visit count and the summed
        errors of the C channels; terminal stats (S, 2+M) of stage H; the constraint critics'
        mean estimate at s_0, (M,)).
    """
    num_stages, k = batch.actions.shape
    s_all = batch.states
    dtype = critics.dtype
    channels = critics.shape[-1]
    if vals is None:  # channel-major critic tables, one flat (H+1)*X row per channel
        table = jnp.moveaxis(critics, -1, 0).reshape(channels, -1)
        width = critics.shape[1]
        value_at = lambda h, s: [table[c][h * width + s] for c in range(channels)]
    else:
        vals_t = jnp.moveaxis(vals, -1, 0)  # (C, H+1, K)
        value_at = lambda h, s: [vals_t[c, h] for c in range(channels)]
    # terminal targets (stage H): the terminal signal itself, as in lagrangian_targets
    term_cost = batch.terminal_costs - thresholds if paper else batch.terminal_costs
    terminal = jnp.concatenate([(batch.terminal_rewards - term_cost @ nu)[:, None], term_cost], axis=-1)  # (K, C)
    v_final = value_at(num_stages, s_all[-1])
    term_errors = [terminal[:, c] - v_final[c] for c in range(channels)]
    term_rows = jnp.stack([jnp.ones((k,), dtype), *term_errors], axis=-1)
    term_stats = jnp.zeros((num_states, channels + 1), dtype).at[s_all[-1]].add(term_rows)
    lam = jnp.asarray(trace, dtype)
    keep, carry = 1.0 * (1.0 - lam), 1.0 * lam  # lambda_returns' weights with gamma = 1, as computed there
    cells_shape = (num_states * num_actions,)

    def stage(g_next, xs):
        h, s, s_next, a, r, g = xs
        c_h = [r - g @ nu] + [g[:, m] for m in range(channels - 1)]  # C channels, (K,) each
        v_next, v_h = value_at(h + 1, s_next), value_at(h, s)
        if paper:
            target = [c_h[c] + v_next[c] for c in range(channels)]
        else:
            target = [c_h[c] + keep * v_next[c] + carry * g_next[c] for c in range(channels)]
        cells = s * num_actions + a
        sums = [jnp.zeros(cells_shape, dtype).at[cells].add(jnp.ones((k,), dtype))]
        sums += [jnp.zeros(cells_shape, dtype).at[cells].add(target[c] - v_h[c]) for c in range(channels)]
        return target, sums

    hs = jnp.arange(num_stages, dtype=jnp.int32)
    xs = (hs, s_all[:-1], s_all[1:], batch.actions, batch.rewards, batch.costs)
    _, sums = jax.lax.scan(stage, [terminal[:, c] for c in range(channels)], xs, reverse=True)
    stats = jnp.stack(sums, axis=-1)  # (H, S*A, 1+C)
    vals_0 = critics[0, s_all[0]] if vals is None else vals[0]  # (K, C)
    critic_estimate = jnp.mean(vals_0[:, 1:], axis=0)
    return stats, term_stats, critic_estimate


def update(
    train_state: TrainState, batch: Batch, key: Array | None, setup: Setup, config: Config
) -> tuple[TrainState, dict[str, Array]]:
    """One FH-Constrained update from K episodes, all H stages at once (module docstring).

    Args:
        train_state: parameters at iteration n.
        batch: K episodes generated under ``train_state``'s policy (:class:`Batch`, time-major;
            the "table" form reuses ``batch.behaviour``, the policy table, when present).
        key: unused (the update is deterministic given the batch).
        setup: :func:`setup` of the environment.
        config: :class:`Config` (its static fields select variant, combination rule, form).
    Returns:
        (parameters at n + 1, per-iteration metrics dict:
        multipliers (M,), critic_costs (M,)).
    """
    del key
    config = resolve_env_defaults(config, judged_exactly(setup.env))  # make_learner did; direct calls
    features, thresholds = setup.features, setup.thresholds
    num_stages, k = batch.actions.shape
    num_actions, num_states, m = setup.num_actions, setup.num_states, setup.num_constraints
    paper = config.variant == "paper"
    visits = config.combine in ("visits", "mass")
    mass = config.combine == "mass" and not features.one_hot  # one-hot: the same as "visits"
    n = train_state.step
    a_n, b_n = config.critic_step(n), config.actor_step(n)
    nu = train_state.multipliers
    critics, theta = train_state.critics, train_state.theta
    s_all = batch.states  # (H+1, K)
    hh = jnp.arange(num_stages + 1, dtype=jnp.int32)[:, None]  # (H+1, 1)

    # --- critic values at the visited states, (H+1, K, 1+M): v_h^T phi_h(s_h), w_h^T phi_h(s_h)
    #     (the "table" form with one-hot features reads them stage by stage, _table_statistics)
    if features.one_hot:
        vals = None if setup.form == "table" else critics[hh, s_all]
    else:
        phi_all = features(batch.observations) if s_all is None else _feature_rows(features, s_all)  # (H+1, K, X)
        vals = jnp.einsum("hkx,hxc->hkc", phi_all, critics)

    if setup.form == "table":
        stats, term_stats, critic_estimate = _table_statistics(
            batch, critics, vals, nu, thresholds, paper, config.trace, num_states, num_actions)
    else:
        # --- errors: paper TD(0) (delta_h, xi_h) or lambda-return errors (improved), (H+1, K, C)
        errors = lagrangian_targets(batch, vals, nu, thresholds, paper, config.trace) - vals
        delta = errors[:-1, :, 0]  # actor signal (H, K)
        critic_estimate = jnp.mean(vals[0, :, 1:], axis=0)  # mean_k w_0^T phi_0(s_0), (M,)
    s_h, a_h = (None if s_all is None else s_all[:-1]), batch.actions

    # --- critics (algo1, algo2, algo4, algo5) and actor: paper (algo3) or improved, per form
    if setup.form == "table":
        # [count, errors...] summed into (H, S, A) cells (_table_statistics); terminal stage into (S,)
        stats = stats.reshape(num_stages, num_states, num_actions, 2 + m)
        per_state = jnp.concatenate([_along_actions(jnp.add, stats, 2), term_stats[None]], axis=0)  # (H+1, S, 2+M)
        counts, crit_sums = per_state[..., 0], per_state[..., 1:]
        # episodes whose features are active, n_hj = sum_s counts_h(s) 1[phi_hj(s) != 0], or
        # ("mass") their summed activation sum_s counts_h(s) phi_hj(s)
        active = features.project(counts) if mass else features.project_active(counts)
        critics = critics + a_n * _combine(features.project(crit_sums), active, k, visits)
        if paper:
            mu = batch.behaviour if batch.behaviour is not None else jax.nn.softmax(_logits_table(theta, features), axis=-1)
            actor_tab = stats[..., 1] - mu * per_state[:-1, :, 1][..., None]  # sum_k delta (e_a - mu), (H, S, A)
            inc = _combine(features.project(actor_tab), active[:-1], k, visits)
        else:  # stats already hold n_h(s, a) and sum delta per cell
            inc = _advantage_increment_from_sums(stats[..., 0], stats[..., 1], features, k, visits,
                                                 per_state[:-1, :, 0], per_state[:-1, :, 1], mass)
        theta = jnp.clip(theta + b_n * inc, -config.theta_bound, config.theta_bound)
    elif features.one_hot:  # "samples": scatter straight into the visited rows
        if visits:
            counts = jnp.zeros((num_stages + 1, num_states), errors.dtype).at[hh, s_all].add(1.0)
            weight = 1.0 / counts[hh, s_all]  # (H+1, K)
        else:
            weight = jnp.full(s_all.shape, 1.0 / k, errors.dtype)
        critics = critics.at[hh, s_all].add(a_n * weight[..., None] * errors)
        if paper:
            mu_rows = jax.nn.softmax(theta[hh[:-1], s_h], axis=-1)  # (H, K, A)
            onehot_a = jax.nn.one_hot(a_h, num_actions, dtype=errors.dtype)
            grad = (weight[:-1] * delta)[..., None] * (onehot_a - mu_rows)
            theta = theta.at[hh[:-1], s_h].add(b_n * grad)
        else:
            adv_weight, count_s = _advantage_weights(s_h, a_h, delta, num_actions)
            theta = theta.at[hh[:-1], s_h, a_h].add(b_n * adv_weight / (count_s if visits else k))
        theta = theta.at[hh[:-1], s_h].set(jnp.clip(theta[hh[:-1], s_h], -config.theta_bound, config.theta_bound))
    else:  # "samples" with general features
        # samples activating each feature, or ("mass") their summed activation, (H+1, X)
        active = jnp.sum(phi_all if mass else (phi_all != 0), axis=1).astype(errors.dtype)
        critics = critics + a_n * _combine(jnp.einsum("hkx,hkc->hxc", phi_all, errors), active, k, visits)
        onehot_a = jax.nn.one_hot(a_h, num_actions, dtype=errors.dtype)
        if paper:
            mu_rows = jax.nn.softmax(jnp.einsum("hkx,hxa->hka", phi_all[:-1], theta), axis=-1)
            per_sample = delta[..., None] * (onehot_a - mu_rows)
        elif s_all is None:  # no tabular states: the sample's own advantage G - v^T phi(o),
            # importance-weighted, delta (e_a / mu_a - 1): unbiased for the advantage vector
            # whatever the critic's error (docs/algorithms/fh_constrained.md); mu_a >= the floor
            mu_rows = jax.nn.softmax(jnp.einsum("hkx,hxa->hka", phi_all[:-1], theta), axis=-1)
            mu_a = jnp.sum(mu_rows * onehot_a, axis=-1, keepdims=True)
            per_sample = delta[..., None] * (onehot_a / jnp.maximum(mu_a, config.importance_floor) - 1.0)
        else:
            per_sample = _advantage_weights(s_h, a_h, delta, num_actions)[0][..., None] * onehot_a
        inc = _combine(jnp.einsum("hkx,hka->hxa", phi_all[:-1], per_sample), active[:-1], k, visits)
        theta = jnp.clip(theta + b_n * inc, -config.theta_bound, config.theta_bound)

    # --- multipliers (algo7), penalties nu = -lambda
    episode_costs = batch.episode_costs  # (K, M)
    if paper:
        violation = critic_estimate / setup.violation_units
        critic_costs = critic_estimate + thresholds
    else:
        violation = multipliers.relative_violation(episode_costs, thresholds, setup.violation_units,
                                                   config.eval_episodes)
        critic_costs = critic_estimate
    new_nu, multiplier_state = _multiplier_update(config, n).update(train_state.multiplier_state, violation)

    beta = config.policy_averaging
    new_state = train_state.replace(
        theta=theta, critics=critics, multipliers=new_nu, multiplier_state=multiplier_state, step=n + 1,
        theta_average=beta * train_state.theta_average + (1.0 - beta) * theta,
    )
    return new_state, {"multipliers": new_nu, "critic_costs": critic_costs}


ALGORITHM = scaffold.Algorithm(
    name="fh_constrained", config_type=Config, metrics_type=Metrics, setup=setup, init=init,
    rollout=rollout, update=update, logits=logits, policy_setup=policy_setup,
    observation_logits=observation_logits,
)
make_learner, make_train, policy_table, policy = scaffold.interface(ALGORITHM)
