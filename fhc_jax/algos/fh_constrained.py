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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from fhc_jax.algos import fh_kernels
from fhc_jax.algos.core import features as feat
from fhc_jax.algos.core import multipliers, scaffold
from fhc_jax.algos.core.evaluation import EvaluationMetrics, observation_policy
from fhc_jax.algos.core.features import FeatureSpec, FeatureTable, OneHot
from fhc_jax.algos.core.hyperparameters import (
    EnvDefault,
    PowerSchedule,
    RunConfig,
    hyperparameters,
    numeric,
    schedule,
    static,
)
from fhc_jax.algos.core.paths import judged_exactly, takes_sampled_path
from fhc_jax.algos.core.policies import observation_to_index, polyak_average
from fhc_jax.algos.core.sampled_inputs import observation_sample_by_stage
from fhc_jax.algos.core.tabular_rollout import (
    Batch,
    TabularModel,
    batch_from_trajectory,
    rollout_policy_table,
    rollout_tabular,
    tabular_model,
)
from fhc_jax.rollout import rollout as rollout_episodes

Array = jax.Array

VARIANTS = ("paper", "improved")
COMBINE_RULES = ("visits", "mean", "mass")
UPDATE_FORMS = ("auto", "table", "samples")

_FEATURE_SPECS = (feat.OneHot, feat.RadialBasis, feat.TileCoding, feat.Custom, feat.Auto)


@hyperparameters
class Config(RunConfig):
    """Hyperparameters of FH-Constrained. The learner trains in units of the signals'
    magnitudes and its multiplier law acts on the relative violation, so the defaults serve
    tasks in any units (what each is for: docs/algorithms/fh_constrained.md, Defaults).

    Static fields (set shapes or code paths; part of the compilation cache key):
        num_iterations: updates per training run (N >= 1). Default (``EnvDefault``): 2500 on
            environments with a tabular exact model, 5000 on all others (a coarse map of the
            observations learns more slowly than one-hot features).
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
        critic_lr: a(n), fastest schedule (critics v, w; eqs. (algo1), (algo2), (algo4), (algo5)).
        actor_lr: b(n), middle schedule (actor theta; eq. (algo3)).
        multiplier_lr: c(n), slowest schedule (multipliers; eq. (algo7)): the paper variant's
            step on the relative violation (C - alpha) / d, the improved variant's geometric
            law's (:func:`fhc_jax.algos.core.multipliers.geometric`: a violation of 20% of the
            budget or more moves nu by c(n) of its own size).
        theta_bound: Gamma projects every theta entry onto [-theta_bound, theta_bound] (> 0).
        multiplier_max: -P, the penalties nu live in [0, multiplier_max] (> 0): in training
            units (normalised reward per normalised cost, ``fhc_jax.algos.core.scaffold``) in
            the paper variant, in budget units of H / d training units in the improved one
            (:func:`fhc_jax.algos.core.multipliers.budget_unit`).
        initial_multiplier: nu at n = 0, in [0, multiplier_max], in the same units.
        trace: lambda-return trace of the improved variant, in [0, 1] (ignored by "paper").
            Default (``EnvDefault``): 0.5 on environments with a tabular exact model, 1.0
            (Monte-Carlo targets) on all others, where the linear critics on a coarse map of
            the observation are biased and bootstrapping passes that bias on.
        multiplier_gain: proportional gain K_p >= 0 of the improved variant's multiplier
            (ignored by "paper"): the penalty used is nu = clip(nu_I + K_p (C_hat - alpha) / b),
            where nu_I is the geometric law's integral on the violation relative to the budget b and
            C_hat the batch's mean episode cost.
        multiplier_relative_gain: K_r in [0, 1] of the improved variant's multiplier (ignored
            by "paper"): the penalty the actor sees rises by the factor 1 + K_r clip(v / max(s,
            z sigma), -1, 1) with the batch's relative violation v
            (:func:`fhc_jax.algos.core.multipliers.geometric`). It damps the slow oscillation of
            the integral alone, whose multiplier trails a policy that keeps learning; 0 gives
            the integral and K_p only.
        policy_averaging: beta in [0, 1): the reported policy (:func:`policy_table`, the exact
            evaluations in the metrics, :func:`policy`) is softmax of the exponential Polyak
            average theta_bar <- beta theta_bar + (1 - beta) theta(n+1) (Polyak & Juditsky 1992);
            0 reports the last iterate. Rollouts during training always use theta(n).
        importance_floor: the floor of the behaviour probability mu_a in the improved actor's
            importance-weighted increment delta (e_a / max(mu_a, floor) - 1) on environments
            without tabular states, in (0, 1] (unused elsewhere). Below the floor an action's
            expected increment shrinks by mu_a / floor.
    """

    num_iterations: int = static(EnvDefault(tabular=2500, non_tabular=5000), low=1)
    episodes_per_iteration: int = static(512, low=1)
    features: FeatureSpec = static(
        EnvDefault(tabular=OneHot(), non_tabular=feat.Auto()),
        types=_FEATURE_SPECS,
        description="a feature spec (features.OneHot(), RadialBasis(...), TileCoding(...), Custom(...), Auto(...))",
    )
    variant: str = static("improved", choices=VARIANTS)
    combine: str = static(EnvDefault(tabular="visits", non_tabular="mass"), choices=COMBINE_RULES)
    update_form: str = static("auto", choices=UPDATE_FORMS)
    eval_every: int = static(100, low=0)
    check_step_sizes: bool = static(True)
    critic_lr: PowerSchedule = schedule(PowerSchedule(init=1.0, power=0.55, decay=100.0))
    actor_lr: PowerSchedule = schedule(PowerSchedule(init=3.0, power=0.6, decay=100.0))
    multiplier_lr: PowerSchedule = schedule(PowerSchedule(init=5e-3, power=0.8, decay=1000.0))
    theta_bound: float = numeric(4.0, low=0.0, low_open=True)
    multiplier_max: float = numeric(20.0, low=0.0, low_open=True)
    initial_multiplier: float = numeric(0.0, low=0.0, high="multiplier_max")
    trace: float = numeric(EnvDefault(tabular=0.5, non_tabular=1.0), low=0.0, high=1.0)
    multiplier_gain: float = numeric(0.25, low=0.0)
    multiplier_relative_gain: float = numeric(0.5, low=0.0, high=1.0)
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
        raise ValueError(
            f"fh_constrained: features of observations need flat observations, but "
            f"{env.name}'s have shape {env.observation_shape}"
        )
    units = None if thresholds is None else multipliers.violation_units(thresholds, env.horizon)
    return Setup(
        features=_features(spec, env, params),
        env=env,
        params=params,
        model=model,
        thresholds=thresholds,
        violation_units=units,
        num_states=env.num_states if env.is_tabular else 0,
        num_actions=env.num_actions,
        num_constraints=env.num_constraints,
        horizon=env.horizon,
        sampled=sampled,
        form=form,
    )


def setup(env, params, config: Config) -> Setup:
    """Features, rollout model and thresholds of ``env`` (host-side).

    Raises:
        ValueError: features that do not fit the environment, or ``path="tabular"`` on an
            environment without a tabular exact model.
    """
    sampled = takes_sampled_path("fh_constrained", env, config.path) or not judged_exactly(env)
    config = config.for_environment(env)  # make_learner did; direct calls
    return _setup(
        env,
        params,
        config.features,
        sampled,
        None if sampled else tabular_model(env, params),
        jnp.asarray(env.thresholds(params), jnp.float32),
        "samples" if sampled else resolve_update_form(config, env.num_states),
    )


def policy_setup(env, params, train_state: TrainState) -> Setup:
    """What :func:`table_logits` and :func:`observation_outputs` need, from the features recorded in
    the train state."""
    return _setup(env, params, train_state.features, not judged_exactly(env), None, None, "table")


def init(key: Array, setup: Setup, config: Config) -> TrainState:
    """Initial parameters: theta = 0 (uniform policy), critics = 0, nu = initial_multiplier.
    ``key`` is unused (the initialisation is deterministic)."""
    del key
    h, a, m, x = setup.horizon, setup.num_actions, setup.num_constraints, setup.features.num_features
    nu, law_state = multipliers.three_timescale_init(
        config.variant == "paper", m, config.initial_multiplier, config.multiplier_max, setup.violation_units, h
    )
    return TrainState(
        theta=jnp.zeros((h, x, a), jnp.float32),
        theta_average=jnp.zeros((h, x, a), jnp.float32),
        critics=jnp.zeros((h + 1, x, 1 + m), jnp.float32),
        multipliers=nu,
        multiplier_state=law_state,
        step=jnp.zeros((), jnp.int32),
        # the map used (Auto records the map it chose, so the state says what it trained on)
        features=getattr(setup.features, "spec", None) or config.for_environment(setup.env).features,
    )


def logits_table(theta: Array, feats: FeatureTable) -> Array:
    """phi_h(s)^T theta_h for all h < H and s, (H, S, A)."""
    return feats.values(theta)


def table_logits(train_state: TrainState, setup: Setup) -> Array:
    """Logits of the reported policy (the Polyak-averaged actor), (H, S, A)."""
    return logits_table(train_state.theta_average, setup.features)


def _observation_logits(theta: Array, setup: Setup, observation: Array, h: Array) -> Array:
    """phi_h(o)^T theta_h at one raw observation of stage h, (A,)."""
    feats = setup.features
    if not setup.env.is_tabular:
        return feats(observation) @ theta[h]
    s = observation_to_index(setup.env)(observation)
    if feats.one_hot:
        return theta[h, s]
    return (feats.table[h, s] if feats.per_stage else feats.table[s]) @ theta[h]


def observation_outputs(train_state: TrainState, setup: Setup, observation: Array, h: Array) -> Array:
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
        mu = fh_kernels.softmax_actions(logits_table(train_state.theta, feats))
        return rollout_policy_table(key, setup.model, mu, k).replace(behaviour=mu)
    if feats.one_hot:
        cdf = lambda theta_h, s: jnp.cumsum(jax.nn.softmax(theta_h[s], axis=-1), axis=-1)
        return rollout_tabular(key, setup.model, train_state.theta, cdf, k)
    phis = feats.all_stages(setup.horizon)[: setup.horizon]
    cdf = lambda xs, s: jnp.cumsum(jax.nn.softmax(xs[1][s] @ xs[0], axis=-1), axis=-1)
    return rollout_tabular(key, setup.model, (train_state.theta, phis), cdf, k)


def critic_step(
    critics: Array, errors: fh_kernels.Errors, batch: Batch, step_size: Array, setup: Setup, config: Config
) -> Array:
    """The critics' step at the fast rate a(n), every stage at once: (algo1) v_h += a(n) delta_h
    phi_h(s_h), (algo2) at the terminal stage, (algo4)-(algo5) w_h^(k) += a(n) xi_h^(k) phi_h(s_h);
    the K episodes' increments combined per feature by ``Config.combine``. (H+1, X, 1+M)."""
    feats, k = setup.features, config.episodes_per_iteration
    visits = config.combine in ("visits", "mass")
    if setup.form == "table":
        return critics + step_size * fh_kernels.combine(
            feats.project(errors.per_state[..., 1:]), errors.active, k, visits
        )
    if feats.one_hot:  # scatter straight into the visited rows
        return critics.at[_stages(setup.horizon + 1), batch.states].add(
            step_size * errors.weight[..., None] * errors.errors
        )
    increment = jnp.einsum("hkx,hkc->hxc", errors.phi, errors.errors)
    return critics + step_size * fh_kernels.combine(increment, errors.active, k, visits)


def actor_step(
    theta: Array, errors: fh_kernels.Errors, batch: Batch, step_size: Array, setup: Setup, config: Config
) -> Array:
    """The actors' step at the middle rate b(n), every stage at once, projected onto
    [-Gamma, Gamma] (Gamma = ``theta_bound``), (H, X, A).

    Paper (algo3): theta_h += b(n) delta_h grad log mu_h(a_h | s_h) = b(n) delta_h phi_h(s_h)
    (e_{a_h} - mu_h(s_h)). Improved: the visit-averaged advantage of each visited (stage,
    state, action) cell, A_hat_h(s, a) (docs/algorithms/fh_constrained.md), or without tabular
    states the sample's importance-weighted advantage delta (e_a / max(mu_a, floor) - 1)."""
    feats, k, paper = setup.features, config.episodes_per_iteration, config.variant == "paper"
    visits = config.combine in ("visits", "mass")
    mass = config.combine == "mass" and not feats.one_hot
    bound, num_actions = config.theta_bound, setup.num_actions
    if setup.form == "table":
        cells, per_state = errors.cells, errors.per_state
        if paper:  # sum_k delta (e_a - mu), (H, S, A)
            mu = batch.behaviour if batch.behaviour is not None else jax.nn.softmax(logits_table(theta, feats), axis=-1)
            actor_sums = cells[..., 1] - mu * per_state[:-1, :, 1][..., None]
            increment = fh_kernels.combine(feats.project(actor_sums), errors.active[:-1], k, visits)
        else:  # the cells hold n_h(s, a) and sum delta
            increment = fh_kernels.advantage_increment_from_sums(
                cells[..., 0], cells[..., 1], feats, k, visits, per_state[:-1, :, 0], per_state[:-1, :, 1], mass
            )
        return jnp.clip(theta + step_size * increment, -bound, bound)
    delta = errors.errors[:-1, :, 0]  # the actor's signal, (H, K)
    actions = batch.actions
    if feats.one_hot:  # scatter straight into the visited rows
        hh, s_h = _stages(setup.horizon), batch.states[:-1]
        if paper:
            mu_rows = jax.nn.softmax(theta[hh, s_h], axis=-1)  # (H, K, A)
            onehot_a = jax.nn.one_hot(actions, num_actions, dtype=delta.dtype)
            gradient = (errors.weight[:-1] * delta)[..., None] * (onehot_a - mu_rows)
            theta = theta.at[hh, s_h].add(step_size * gradient)
        else:
            adv_weight, count_s = fh_kernels.advantage_weights(s_h, actions, delta, num_actions)
            theta = theta.at[hh, s_h, actions].add(step_size * adv_weight / (count_s if visits else k))
        return theta.at[hh, s_h].set(jnp.clip(theta[hh, s_h], -bound, bound))
    phi = errors.phi[:-1]
    onehot_a = jax.nn.one_hot(actions, num_actions, dtype=delta.dtype)
    if paper:
        mu_rows = jax.nn.softmax(jnp.einsum("hkx,hxa->hka", phi, theta), axis=-1)
        per_sample = delta[..., None] * (onehot_a - mu_rows)
    elif batch.states is None:  # no tabular states: the sample's own advantage G - v^T phi(o),
        # importance-weighted, delta (e_a / mu_a - 1): unbiased for the advantage vector
        # whatever the critic's error (docs/algorithms/fh_constrained.md); mu_a >= the floor
        mu_rows = jax.nn.softmax(jnp.einsum("hkx,hxa->hka", phi, theta), axis=-1)
        mu_a = jnp.sum(mu_rows * onehot_a, axis=-1, keepdims=True)
        per_sample = delta[..., None] * (onehot_a / jnp.maximum(mu_a, config.importance_floor) - 1.0)
    else:
        per_sample = (
            fh_kernels.advantage_weights(batch.states[:-1], actions, delta, num_actions)[0][..., None] * onehot_a
        )
    increment = fh_kernels.combine(jnp.einsum("hkx,hka->hxa", phi, per_sample), errors.active[:-1], k, visits)
    return jnp.clip(theta + step_size * increment, -bound, bound)


def multiplier_step(
    train_state: TrainState, errors: fh_kernels.Errors, batch: Batch, setup: Setup, config: Config
) -> tuple[Array, multipliers.MultiplierState, Array]:
    """The penalties' step at the slow rate c(n), (algo7), on the relative violation (of the
    constraint critics' estimate in the paper variant, of the batch's mean episode cost in the
    improved one, whose law adds a proportional term): :func:`fhc_jax.algos.core.multipliers.
    three_timescale_step`. Returns (nu (M,), the law's state, the critics' cost estimate (M,))."""
    return multipliers.three_timescale_step(
        train_state.multiplier_state,
        errors.critic_estimate,
        batch.episode_costs,
        setup.thresholds,
        setup.violation_units,
        config.variant == "paper",
        config.multiplier_lr(train_state.step),
        config.multiplier_max,
        config.multiplier_gain,
        config.eval_episodes,
        setup.horizon,
        config.multiplier_relative_gain,
        config.eval_episodes * config.eval_chunks_max,
    )


def update(
    train_state: TrainState, batch: Batch, key: Array | None, setup: Setup, config: Config
) -> tuple[TrainState, dict[str, Array]]:
    """One FH-Constrained update from K episodes, all H stages at once: the critics' errors
    (:func:`fhc_jax.algos.fh_kernels.critic_errors`), then the critic, actor and multiplier
    steps at their three rates a(n) > b(n) > c(n), and the Polyak average of the actor (the
    reported policy). :func:`paper_update` is the same update written as the paper's equations.

    Args:
        train_state: parameters at iteration n.
        batch: K episodes generated under ``train_state``'s policy (:class:`Batch`, time-major;
            the "table" form reuses ``batch.behaviour``, the policy table, when present).
        key: unused (the update is deterministic given the batch).
        setup: :func:`setup` of the environment.
        config: :class:`Config` (its static fields select variant, combination rule, form).
    Returns:
        (parameters at n + 1, per-iteration metrics dict: multipliers (M,), critic_costs (M,)).
    """
    del key
    config = config.for_environment(setup.env)  # make_learner did; direct calls
    n = train_state.step
    errors = fh_kernels.critic_errors(
        train_state.critics,
        batch,
        train_state.multipliers,
        setup.features,
        setup.thresholds,
        setup.form,
        config.variant == "paper",
        config.trace,
        config.combine,
        setup.num_states,
        setup.num_actions,
    )
    critics = critic_step(train_state.critics, errors, batch, config.critic_lr(n), setup, config)
    theta = actor_step(train_state.theta, errors, batch, config.actor_lr(n), setup, config)
    nu, multiplier_state, critic_costs = multiplier_step(train_state, errors, batch, setup, config)
    new_state = train_state.replace(
        theta=theta,
        critics=critics,
        multipliers=nu,
        multiplier_state=multiplier_state,
        step=n + 1,
        theta_average=polyak_average(train_state.theta_average, theta, config.policy_averaging),
    )
    return new_state, {"multipliers": nu, "critic_costs": critic_costs}


class PaperStep(NamedTuple):
    """The parameters after one update of the paper's equations (:func:`paper_update`)."""

    theta: Array  # (H, X, A)
    critics: Array  # (H+1, X, 1+M): v, then w^(1..M)
    multipliers: Array  # nu = -lambda, (M,)


def paper_update(train_state: TrainState, batch: Batch, setup: Setup, config: Config) -> PaperStep:
    """The paper's update (algo1)-(algo7) from ONE episode (K = 1), as the equations read, every
    stage at once: the reference that :func:`update` is tested against (with K = 1 and
    ``variant="paper"`` each update form gives these numbers up to float rounding). Tabular
    states; paper signs: lambda = -nu in [P, 0], P = -``multiplier_max``; the terminal cost
    carries -alpha; c(n) acts on the violation in units d (:mod:`fhc_jax.algos.core.multipliers`).

    Args:
        train_state: parameters at iteration n. batch: one episode, time-major (H+1, 1).
        setup: :func:`setup` of the environment. config: :class:`Config`.
    """
    n, theta, bound = train_state.step, train_state.theta, config.theta_bound
    a_n, b_n, c_n = config.critic_lr(n), config.actor_lr(n), config.multiplier_lr(n)
    states, feats = batch.states[:, :1], setup.features
    phi = (jax.nn.one_hot(states, setup.num_states) if feats.one_hot else fh_kernels.feature_rows(feats, states))[:, 0]
    lam = -train_state.multipliers  # (M,); phi_h(s_h) above, (H+1, X)
    r, g, actions = batch.rewards[:, 0], batch.costs[:, 0], batch.actions[:, 0]  # (H,), (H, M), (H,)
    r_end, g_end = batch.terminal_rewards[0], batch.terminal_costs[0] - setup.thresholds  # (), (M,)
    v, w = train_state.v, train_state.w  # (H+1, X), (M, H+1, X)
    v_s, w_s = jnp.sum(v * phi, axis=-1), jnp.einsum("mhx,hx->mh", w, phi)  # v_h^T phi_h(s_h), (H+1,), (M, H+1)
    c_lam = r + g @ lam  # c^lambda_h, (H,)
    delta = jnp.append(c_lam + v_s[1:] - v_s[:-1], r_end + g_end @ lam - v_s[-1])  # TD errors of (algo1), (algo2)
    xi = jnp.concatenate([g.T + w_s[:, 1:] - w_s[:, :-1], (g_end - w_s[:, -1])[:, None]], axis=1)  # (algo4), (algo5)
    new_v = v + a_n * delta[:, None] * phi
    new_w = w + a_n * xi[..., None] * phi
    mu = jax.nn.softmax(jnp.einsum("hx,hxa->ha", phi[:-1], theta), axis=-1)  # mu_h(s_h, .), (H, A)
    grad_log_mu = phi[:-1, :, None] * (jax.nn.one_hot(actions, setup.num_actions) - mu)[:, None, :]  # (H, X, A)
    new_theta = jnp.clip(theta + b_n * delta[:-1, None, None] * grad_log_mu, -bound, bound)  # (algo3)
    new_lam = jnp.clip(lam - c_n * w_s[:, 0] / setup.violation_units, -config.multiplier_max, 0.0)  # (algo7)
    critics = jnp.concatenate([new_v[..., None], jnp.moveaxis(new_w, 0, -1)], axis=-1)
    return PaperStep(theta=new_theta, critics=critics, multipliers=-new_lam)


def _stages(length: int) -> Array:
    """Stage indices 0..length-1 as a column, (length, 1) int32 (row index of time-major arrays)."""
    return jnp.arange(length, dtype=jnp.int32)[:, None]


ALGORITHM = scaffold.Algorithm(
    name="fh_constrained",
    config_type=Config,
    metrics_type=Metrics,
    setup=setup,
    init=init,
    rollout=rollout,
    update=update,
    table_logits=table_logits,
    policy_setup=policy_setup,
    observation_outputs=observation_outputs,
)
make_learner, make_train, policy_table, policy = scaffold.interface(ALGORITHM)
