"""The scaffold every learner shares: an algorithm file declares its pieces in an
:class:`Algorithm` (``Config``, ``setup``, ``init``, ``rollout``, ``update``, the logits of its
reported policy) and this module binds them into the public interface:

* ``make_learner(env, params, config) -> Learner``: iteration-level pure functions (the
  chunked, checkpointed runs of :mod:`fhc_jax.experiment` are built from them);
* ``make_train(env, params, config) -> train(key, hparams=None) -> TrainResult``: a whole
  training run in one ``lax.scan`` (one jit; ``vmap`` it over seeds and numeric
  hyperparameters), with exact evaluation of the reported policy every ``eval_every`` updates;
* ``policy_table(train_state, env, params) -> (..., H, S, A)`` (for ``fhc_jax.evaluate``) and
  ``policy(train_state, env, params)`` (for ``fhc_jax.rollout``), the same for every learner.

One iteration is ``rollout`` (K episodes under the current policy) then ``update``; the loop
key is split once per iteration into the next loop key, the rollout key and the update's
``update_keys`` keys.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.algos import multipliers as multiplier_laws
from fhc_jax.algos.hyperparameters import resolve_env_defaults, resolve_hyperparameters
from fhc_jax.algos.networks import NetworkSpec
from fhc_jax.algos.policies import softmax_policy, table_policy
from fhc_jax.algos.tabular_rollout import Batch
from fhc_jax.cmdp.evaluate import evaluate
from fhc_jax.envs.spaces import Box
from fhc_jax.envs.wrappers import ScaledSignals, signal_scales
from fhc_jax.rollout import random_policy, rollout, rollout_returns

Array = jax.Array


@struct.dataclass
class StampedState:
    """Base of every learner's ``TrainState``: the environment it was trained on.

    Attributes:
        trained_on: (H, S or None, actions, M) of the environment (static;
            :func:`environment_signature`), stamped by :func:`make_learner` and checked by
            ``policy`` and ``policy_table``; None for a state built outside ``make_learner``.
    """

    trained_on: tuple | None = struct.field(pytree_node=False, default=None, kw_only=True)


@struct.dataclass
class NetworkState(StampedState):
    """Base of the train state of a learner with neural networks.

    Attributes:
        network: the networks' resolved input, architecture and Gaussian head form
            (:class:`~fhc_jax.algos.networks.NetworkSpec`, static), so the policy can be
            rebuilt from the state alone.
    """

    network: NetworkSpec = struct.field(pytree_node=False, kw_only=True)


@struct.dataclass
class ExactMetrics:
    """Evaluation of the learner's reported policy at a few iterations: exact
    (``fhc_jax.evaluate``) on environments with a tabular exact model, else the Monte-Carlo mean
    of ``eval_episodes`` episodes (:func:`monte_carlo_evaluator`).

    Attributes (E evaluations, M constraints):
        iteration: number of updates done when evaluated, int32 (E,) (0 = initial policy).
        reward: J(pi), (E,).
        costs: S^(k)(pi), (E, M).
    """

    iteration: Array
    reward: Array
    costs: Array


def evaluation_iterations(num_iterations: int, eval_every: int) -> np.ndarray:
    """Iterations (updates done) at which :func:`scan_with_evaluation` evaluates: 0, E, 2E,
    ..., and always the final one ``num_iterations``. ``eval_every = 0``: 0 and the final."""
    if eval_every <= 0 or eval_every >= num_iterations:
        return np.array([0, num_iterations], dtype=np.int32)
    marks = list(range(0, num_iterations + 1, eval_every))
    if marks[-1] != num_iterations:
        marks.append(num_iterations)
    return np.array(marks, dtype=np.int32)


def scan_with_evaluation(
    step_fn: Callable[[Any, Any], tuple[Any, Any]],
    carry: Any,
    num_iterations: int,
    eval_every: int,
    evaluate_fn: Callable[[Any], tuple[Array, Array]],
    mark_fn: Callable[[Any], Any] | None = None,
) -> tuple[Any, Any, ExactMetrics]:
    """Run ``step_fn`` ``num_iterations`` times with ``lax.scan``, evaluating exactly every
    ``eval_every`` iterations, without ``lax.cond`` (which ``vmap`` turns into evaluating
    every iteration): an outer scan over blocks of ``eval_every`` iterations, an inner scan
    inside each block, then a scan over the remainder.

    Args:
        step_fn: ``(carry, None) -> (carry, metrics)``; per-iteration metrics must be small
            (they are stacked: memory O(num_iterations), independent of K and H).
        carry: initial carry.
        num_iterations: static N >= 1.
        eval_every: static E; 0 evaluates only the initial and final carries.
        evaluate_fn: ``carry -> (reward (), costs (M,))``, e.g. exact evaluation of the policy.
        mark_fn: ``carry -> carry`` applied at every mark after the start, before
            ``evaluate_fn`` (e.g. :attr:`Learner.mark`, the selection of the returned policy).
    Returns:
        (final carry, stacked per-iteration metrics with leading axis N, :class:`ExactMetrics`).
    """
    marks = evaluation_iterations(num_iterations, eval_every)
    block = int(marks[1] - marks[0]) if len(marks) > 2 else num_iterations
    num_blocks = num_iterations // block
    rem = num_iterations - num_blocks * block

    r0, c0 = evaluate_fn(carry)
    mark_fn = (lambda c: c) if mark_fn is None else mark_fn

    def run_block(c, _):
        c, m = jax.lax.scan(step_fn, c, None, length=block)
        c = mark_fn(c)
        return c, (m, evaluate_fn(c))

    carry, (metrics, (rs, cs)) = jax.lax.scan(run_block, carry, None, length=num_blocks)
    metrics = jax.tree.map(lambda x: x.reshape((num_blocks * block,) + x.shape[2:]), metrics)
    rewards, costs = [r0[None], rs], [c0[None], cs]
    if rem:
        carry, m_rem = jax.lax.scan(step_fn, carry, None, length=rem)
        carry = mark_fn(carry)
        metrics = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), metrics, m_rem)
        r_f, c_f = evaluate_fn(carry)
        rewards.append(r_f[None])
        costs.append(c_f[None])
    exact = ExactMetrics(
        iteration=jnp.asarray(marks),
        reward=jnp.concatenate(rewards),
        costs=jnp.concatenate(costs),
    )
    return carry, metrics, exact


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


@struct.dataclass
class Carry:
    """The training loop's carry: the learner's train state, the PRNG key of the next
    iteration and the :class:`Selection` of the policy to return (everything a checkpoint
    must hold to resume bit-identically)."""

    state: Any
    key: Array
    selection: Selection


@dataclasses.dataclass(frozen=True)
class Learner:
    """A learner bound to one environment, as the iteration-level pure functions every training
    loop is built from: ``make_train``'s single ``lax.scan`` (:func:`run`) and the chunked,
    checkpointed runs of :mod:`fhc_jax.experiment`. All are traceable; ``vmap`` them over seeds
    (keys) and numeric hyperparameters.

    Attributes:
        config: the learner's frozen ``Config`` (static fields fixed here).
        init: ``(key, cfg) -> Carry``: initial train state and loop key; ``cfg`` is
            ``config`` (or None for it) or hyperparameters resolved once by :meth:`resolve`.
        step: ``(carry, cfg) -> (carry, metrics)``: one rollout + update (``cfg`` as for
            ``init``); ``metrics`` is a dict of small per-iteration arrays (independent of K
            and H).
        mark: ``carry -> carry`` at every evaluation mark after the start: the reported policy
            becomes a candidate of the :class:`Selection` (the policy the run returns).
        evaluate: ``carry -> (reward (), costs (M,))`` of the reported policy: exact on
            tabular exact models, else a Monte-Carlo estimate (``eval_episodes`` episodes).
        policy_table: ``train_state -> (H, S, A)``, the reported policy for exact evaluation;
            None on environments judged by Monte-Carlo (no tabular exact model).
        thresholds: alpha^(k) in the environment's units, (M,) numpy.
        violation_units: d^(k) in the environment's units (:func:`fhc_jax.algos.multipliers.
            violation_units` of the scaled thresholds, scaled back), (M,) numpy.
        multiplier_units: one training-unit multiplier in the environment's units,
            reward scale / cost scale^(k), (M,) numpy.
    """

    config: Any
    init: Callable[[Array, Any], Carry]
    step: Callable[[Carry, Any], tuple[Carry, dict[str, Array]]]
    mark: Callable[[Carry], Carry]
    evaluate: Callable[[Carry], tuple[Array, Array]]
    policy_table: Callable[[Any], Array] | None
    thresholds: np.ndarray
    violation_units: np.ndarray
    multiplier_units: np.ndarray

    def resolve(self, hparams: Any | None, batch_shape: tuple[int, ...] = ()) -> Any:
        """The hyperparameters ``init`` and ``step`` take: ``config`` when ``hparams`` is None,
        else ``hparams`` with its environment-dependent defaults set to ``config``'s values
        (broadcast to ``batch_shape`` for hparams stacked over runs). Called once per training
        run (:func:`run`, the chunked runner), never per iteration.

        Raises:
            ValueError: ``hparams`` whose static fields differ from ``config``'s.
        """
        return resolve_hyperparameters(self.config, hparams, batch_shape)


def run(learner: Learner, key: Array, hparams: Any | None = None) -> tuple[Carry, dict[str, Array], ExactMetrics]:
    """A whole training run in one ``lax.scan`` (jit it, vmap it over keys/hyperparameters).

    Args:
        learner: :class:`Learner`.
        key: PRNG key of the run.
        hparams: optional hyperparameters (same static fields as ``learner.config``).
    Returns:
        (final :class:`Carry`, per-iteration metrics dict with leading axis
        ``num_iterations``, :class:`ExactMetrics` every ``config.eval_every`` updates).
    """
    cfg = learner.resolve(hparams)
    carry = learner.init(key, cfg)
    return scan_with_evaluation(lambda c, _: learner.step(c, cfg), carry, cfg.num_iterations, cfg.eval_every,
                                learner.evaluate, learner.mark)


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


@struct.dataclass
class TrainResult:
    """What ``train(key)`` returns.

    Attributes:
        state: the train state of the returned policy, the :class:`Selection` (the best
            candidate by the learner's own Monte-Carlo estimates; with ``eval_every = 0`` the
            final iterate). ``policy_table`` / ``policy`` of it give the returned policy.
        final_state: the train state after the last update (to continue training from).
        metrics: the learner's per-iteration ``Metrics`` (leading axis N = ``num_iterations``;
            ``metrics.exact`` every ``eval_every`` updates: the reported policy of the
            iterate, for learning curves).
        selection: the :class:`Selection` (its ``state`` is ``state``).
        status: the :class:`Status` (``status.ok`` False: the constraint is not yet met;
            :func:`describe_status` says why in one line).
    """

    state: Any
    final_state: Any
    metrics: Any
    selection: Selection
    status: Status


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """A learner's pieces, declared once in its module (``ALGORITHM = Algorithm(...)``).

    Attributes:
        name: the module name, e.g. "fh_constrained" (error messages).
        config_type, metrics_type: the learner's ``Config`` and per-iteration ``Metrics``
            (``metrics_type(exact=ExactMetrics, **update_metrics)``).
        setup: ``(env, params, config) -> setup``: host-side constants derived from the
            environment (thresholds, tabular model, feature and observation tables, networks);
            validates that the environment fits the config (ValueError otherwise).
        init: ``(key, setup, config) -> train_state``.
        rollout: ``(key, train_state, setup, config) -> Batch``: K episodes under the current
            (behaviour) policy; ``Batch.behaviour`` may carry what the update can reuse.
        update: ``(train_state, batch, key, setup, config) -> (train_state, metrics dict)``:
            one update from the batch; ``key`` is None (``update_keys = 0``), one key (1) or
            an array of ``update_keys`` keys. ``metrics`` holds small arrays (independent of
            K and H): at least "multipliers" (M,); the scaffold adds the batch's mean episode
            "reward" () and "costs" (M,).
        logits: ``(train_state, setup) -> (H, S, A)``: the reported policy's logits at every
            stage and state (softmax gives the policy table).
        policy_setup: ``(env, params, train_state) -> setup``: what ``logits`` needs, rebuilt
            from the train state alone (its static fields record the architecture, inputs or
            features), for :func:`policy_table` and :func:`policy` after training.
        observation_logits: ``(train_state, setup, observation, h) -> (A,)``: the reported
            policy's logits at one observation of stage h, or None. Learners that have it train
            on any environment (the sampled path); the others need a tabular exact model.
        update_keys: how many PRNG keys ``update`` consumes per iteration (0, 1 or more).
        action_head: ``setup -> ActionHead`` (``fhc_jax.algos.distributions``): what the
            outputs of ``observation_logits`` mean (softmax logits, or a Gaussian's parameters
            on box action spaces); None for a learner of discrete actions only, whose outputs
            are softmax logits (it refuses box action spaces).
        play_env: ``(train_state, env, params) -> (env', params')``: the environment in which
            ``policy`` plays the learner's policy, with ``env``'s rewards, costs and dynamics
            (:func:`play_environment`); None: ``env`` itself.
    """

    name: str
    config_type: type
    metrics_type: type
    setup: Callable[..., Any]
    init: Callable[..., Any]
    rollout: Callable[..., Batch]
    update: Callable[..., tuple[Any, dict[str, Array]]]
    logits: Callable[[Any, Any], Array]
    policy_setup: Callable[..., Any]
    observation_logits: Callable[[Any, Any, Array, Array], Array] | None = None
    update_keys: int = 0
    action_head: Callable[[Any], Any] | None = None
    play_env: Callable[[Any, Any, Any], tuple[Any, Any]] | None = None


#: the key of every Monte-Carlo evaluation (common random numbers across iterations and seeds;
#: independent of the training stream)
EVALUATION_KEY = 20_240_601

#: z of the one-sided upper 95% confidence bound of a candidate's estimated costs
UPPER_BOUND_Z = 1.645


def selection_key() -> Array:
    """The key of the learner's own estimates of its candidates (:class:`Selection`): common
    random numbers across candidates and seeds, independent of training and of
    :data:`EVALUATION_KEY`."""
    return jax.random.fold_in(jax.random.key(EVALUATION_KEY), 1)


def judged_exactly(env) -> bool:
    """Whether a learner's policy on ``env`` is judged exactly (a tabular exact model: policy
    tables and ``fhc_jax.evaluate``) rather than by Monte-Carlo rollouts."""
    return env.is_tabular and env.has_exact_model


def _check(algo: Algorithm, env, params: Any, config: Any) -> None:
    if not isinstance(config, algo.config_type):
        raise ValueError(f"make_train: config must be a {algo.name}.Config, found {type(config).__name__}")
    try:
        env.thresholds(params)
    except NotImplementedError as err:
        raise ValueError(f"{algo.name}: {err}") from None
    if env.has_box_actions and algo.action_head is None:
        raise ValueError(
            f"{algo.name} takes discrete actions only (a softmax policy over a finite action set), but "
            f"{env.name} has continuous (box) actions; use a learner with Gaussian policies "
            "(nn_constrained, ecop, ppo_lagrangian, cpo, saute) or a discrete version of the environment")
    if not judged_exactly(env) and algo.observation_logits is None:
        raise ValueError(
            f"{algo.name}: {env.name} declares no tabular exact model (is_tabular and "
            f"has_exact_model), and {algo.name} trains only on such environments"
        )


def observation_policy(logits_of: Callable[[Array, Array], Array], head: Any = None) -> Callable[[Array, Array, Array], Array]:
    """``act(key, observation, h)`` sampling the distribution of ``logits_of(observation, h)``:
    ``head.policy`` (``fhc_jax.algos.distributions``), or without a head softmax(logits) with
    one uniform per call (:func:`fhc_jax.softmax_policy`, the fast protocol of
    :func:`fhc_jax.rollout`)."""
    return softmax_policy(logits_of) if head is None else head.policy(logits_of)


def observation_sample_by_stage(env, params, num_episodes: int = 64) -> np.ndarray:
    """Raw observations of s_0..s_H in ``num_episodes`` episodes of the uniform policy (fixed
    key), (N, H+1, D), stage by stage (host-side: computed at once even while a caller's
    ``jit`` traces, e.g. a learner's ``policy`` built inside the program that plays it, as long
    as ``params`` are concrete)."""
    with jax.ensure_compile_time_eval():
        traj = jax.jit(rollout, static_argnums=(1, 3, 4))(
            jax.random.key(EVALUATION_KEY), env, params, random_policy(env), num_episodes)
        return np.asarray(jnp.concatenate([traj.observations, traj.final_observations[:, None]], axis=1), np.float32)


def observation_sample(env, params, num_episodes: int = 64) -> Array:
    """Raw observations of s_0..s_H in ``num_episodes`` episodes of the uniform policy (fixed
    key), (N, D): the sample that input standardisation and feature boxes are fitted to on
    environments without tabular states (host-side). Rows: s_0..s_{H-1} of every episode, then
    every episode's s_H."""
    by_stage = observation_sample_by_stage(env, params, num_episodes)  # (N, H+1, D)
    d = by_stage.shape[-1]
    return jnp.concatenate([by_stage[:, :-1].reshape(-1, d), by_stage[:, -1]])


def monte_carlo_evaluator(env, params, num_episodes: int, head: Any = None) -> Callable[[Callable], tuple[Array, Array]]:
    """``logits_of -> (mean episode reward (), mean episode costs (M,))`` over ``num_episodes``
    episodes of :func:`fhc_jax.rollout_returns` with the fixed :data:`EVALUATION_KEY`
    (traceable; the estimate of what ``fhc_jax.evaluate`` gives exactly on tabular models);
    ``head`` as in :func:`observation_policy`."""

    def fn(logits_of: Callable[[Array, Array], Array]) -> tuple[Array, Array]:
        returns = rollout_returns(jax.random.key(EVALUATION_KEY), env, params, observation_policy(logits_of, head),
                                  num_episodes)
        return jnp.mean(returns.rewards), jnp.mean(returns.costs, axis=0)

    return fn


def make_learner(algo: Algorithm, env, params, config: Any) -> Learner:
    """``algo`` bound to ``env`` as iteration-level functions (:class:`Learner`).

    The learner trains on :class:`~fhc_jax.envs.wrappers.ScaledSignals` of ``env``: rewards
    and costs divided by their typical magnitudes in episodes of the uniform policy
    (:func:`~fhc_jax.envs.wrappers.signal_scales`, statistics the learner observes itself,
    never the exact model), so that one set of defaults serves environments in any units and
    rescaling the rewards, or the costs with their thresholds, leaves training unchanged up to
    rounding. The multipliers in the train state count penalties in these training units; the
    metrics (reward, costs, multipliers, critic costs) and evaluations are reported in the
    environment's own units.

    Fields of ``config`` left at an environment-dependent default
    (:class:`~fhc_jax.algos.hyperparameters.EnvDefault`) take their value for ``env`` (with or
    without a tabular exact model, :func:`judged_exactly`); ``Learner.config`` holds the result.

    Raises:
        ValueError: a config of another learner, an environment without a tabular exact
            model, or one that does not fit the config (from ``algo.setup``).
    """
    if isinstance(config, algo.config_type):
        config = resolve_env_defaults(config, judged_exactly(env))
    _check(algo, env, params, config)
    scale_r, scale_c = signal_scales(env, params)  # train in units of the signals' magnitudes
    train_env = ScaledSignals(env, scale_r, scale_c)
    signature = environment_signature(env)  # stamped on every train state (check_train_state)
    setup = algo.setup(train_env, params, config)
    scale_c = np.asarray(scale_c, np.float32)
    unscale = {"reward": scale_r, "costs": jnp.asarray(scale_c), "critic_costs": jnp.asarray(scale_c),
               "multipliers": jnp.asarray(scale_r / scale_c, jnp.float32)}
    thresholds = np.asarray(env.thresholds(params), np.float32).reshape(-1)
    units = np.asarray(multiplier_laws.violation_units(thresholds / scale_c, env.horizon)) * scale_c
    exact = judged_exactly(env)

    def table_fn(state: Any) -> Array:
        return jax.nn.softmax(algo.logits(state, setup), axis=-1)

    head = None if algo.action_head is None else algo.action_head(setup)

    def act_fn(state: Any) -> Callable:
        """The reported policy of ``state`` as ``act(key, observation, h)`` on ``env``."""
        if exact:
            return table_policy(table_fn(state), env)
        return observation_policy(partial(algo.observation_logits, state, setup), head)

    def init_fn(key: Array, cfg: Any) -> Carry:
        cfg = config if cfg is None else cfg
        k_init, k_loop = jax.random.split(key)
        state = algo.init(k_init, setup, cfg).replace(trained_on=signature)
        m = thresholds.shape[0]
        selection = Selection(state=state, iteration=jnp.asarray(-1, jnp.int32), reward=jnp.asarray(-jnp.inf),
                              costs=jnp.full((m,), jnp.inf), upper=jnp.full((m,), jnp.inf),
                              feasible=jnp.asarray(False))
        return Carry(state=state, key=k_loop, selection=selection)

    def step_fn(carry: Carry, cfg: Any) -> tuple[Carry, dict[str, Array]]:
        cfg = config if cfg is None else cfg
        keys = jax.random.split(carry.key, 2 + algo.update_keys)
        batch = algo.rollout(keys[1], carry.state, setup, cfg)
        k_update = None if algo.update_keys == 0 else keys[2] if algo.update_keys == 1 else keys[2:]
        state, metrics = algo.update(carry.state, batch, k_update, setup, cfg)
        state = state.replace(trained_on=signature)  # an update that builds a new state keeps the stamp
        totals = {"reward": jnp.mean(batch.episode_rewards), "costs": jnp.mean(batch.episode_costs, axis=0)}
        metrics = {**totals, **metrics}
        metrics = {k: v * unscale[k] if k in unscale else v for k, v in metrics.items()}  # environment's units
        return carry.replace(state=state, key=keys[0]), metrics

    def mark_fn(carry: Carry) -> Carry:
        returns = rollout_returns(selection_key(), env, params, act_fn(carry.state), config.eval_episodes)
        n = returns.rewards.shape[0]
        reward, costs = jnp.mean(returns.rewards), jnp.mean(returns.costs, axis=0)
        upper = costs + UPPER_BOUND_Z * jnp.std(returns.costs, axis=0) / np.sqrt(n)
        sel = carry.selection
        feasible = jnp.all(upper <= thresholds)
        excess = lambda u: jnp.max((u - thresholds) / units)
        better = jnp.where(feasible, ~sel.feasible | (reward > sel.reward), ~sel.feasible & (excess(upper) < excess(sel.upper)))
        candidate = Selection(state=carry.state, iteration=_updates_done(carry.state), reward=reward, costs=costs,
                              upper=upper, feasible=feasible)
        return carry.replace(selection=jax.tree.map(lambda a, b: jnp.where(better, a, b), candidate, sel))

    if exact:
        cmdp = env.to_cmdp(params)

        def evaluate_fn(carry: Carry) -> tuple[Array, Array]:
            ev = evaluate(cmdp, table_fn(carry.state))
            return ev.reward, ev.costs
    else:
        monte_carlo = monte_carlo_evaluator(env, params, config.eval_episodes, head)
        evaluate_fn = lambda carry: monte_carlo(partial(algo.observation_logits, carry.state, setup))

    return Learner(config=config, init=init_fn, step=step_fn, mark=mark_fn, evaluate=evaluate_fn,
                   policy_table=table_fn if exact else None, thresholds=thresholds, violation_units=units,
                   multiplier_units=np.asarray(scale_r / scale_c, np.float32))


def _updates_done(train_state: Any) -> Array:
    """The number of updates a train state has had (its ``step`` field), int32 ()."""
    return jnp.asarray(train_state.step, jnp.int32)


def run_status(learner: Learner, carry: Carry, metrics: dict[str, Array]) -> Status:
    """:func:`constraint_status` of a run from its final carry and per-iteration metrics."""
    return constraint_status(metrics["multipliers"], metrics["costs"], learner.thresholds, learner.violation_units,
                             learner.multiplier_units, carry.selection.feasible)


def make_train(algo: Algorithm, env, params, config: Any) -> Callable[..., TrainResult]:
    """Build ``train(key, hparams=None) -> TrainResult``: ``config.num_iterations`` rollouts and
    updates in one ``lax.scan`` (one jit), the :class:`Selection` of the returned policy at
    every evaluation mark, and the run's :class:`Status`.

    ``jax.jit(jax.vmap(train))(keys)`` trains several seeds in one compiled call;
    ``jax.vmap(train, in_axes=(None, 0))(key, fhc_jax.algos.stack([cfg1, cfg2]))`` sweeps
    numeric hyperparameters without recompiling (static fields must equal ``config``'s).

    Raises:
        ValueError: see :func:`make_learner`.
    """
    learner = make_learner(algo, env, params, config)

    def train(key: Array, hparams: Any | None = None) -> TrainResult:
        carry, metrics, exact = run(learner, key, hparams)
        return TrainResult(state=carry.selection.state, final_state=carry.state,
                           metrics=algo.metrics_type(exact=exact, **metrics), selection=carry.selection,
                           status=run_status(learner, carry, metrics))

    return train


def environment_signature(env) -> tuple:
    """What a train state must match to play on ``env``: (H, S or None where ``env`` has no
    tabular states, the action count or ("box", action shape), M). Recorded in every learner's
    ``TrainState.trained_on`` by :func:`make_learner`."""
    space = env.action_space
    actions = ("box", tuple(int(d) for d in space.shape)) if isinstance(space, Box) else int(env.num_actions)
    return (int(env.horizon), int(env.num_states) if env.is_tabular else None, actions, int(env.num_constraints))


_SIGNATURE_NAMES = ("horizon H", "number of states S", "actions", "number of constraints M")


def check_train_state(algo: Algorithm, train_state: Any, env, where: str) -> None:
    """Raise a one-line ``ValueError`` unless ``train_state`` is this learner's and was trained
    on an environment with ``env``'s H, S, actions and M (issue: a state of another learner or
    environment gave an AttributeError or a table of the wrong shape). ``where`` names the
    public function (e.g. "policy_table")."""
    owner = type(train_state).__module__
    mine = f"fhc_jax.algos.{algo.name}"
    if isinstance(train_state, TrainResult):
        raise ValueError(f"{algo.name}.{where}: pass the train state (result.state), not the TrainResult")
    if owner != mine:
        other = owner.rsplit(".", 1)[-1]
        hint = f"; use fhc_jax.algos.{other}.{where}" if owner.startswith("fhc_jax.algos.") else ""
        raise ValueError(f"{algo.name}.{where}: the train state is a {owner}.{type(train_state).__name__}, "
                         f"not a {mine}.TrainState{hint}")
    trained = getattr(train_state, "trained_on", None)
    if trained is None:  # a state built outside make_learner (e.g. by the learner's own init)
        return
    now = environment_signature(env)
    for name, was, is_ in zip(_SIGNATURE_NAMES, trained, now):
        if was is not None and is_ is not None and was != is_:
            raise ValueError(f"{algo.name}.{where}: the train state was trained on an environment with {name} = "
                             f"{was}, {env.name} has {is_}: pass the environment (and params) it was trained on")


def policy_table(algo: Algorithm, train_state: Any, env, params: Any = None) -> Array:
    """The reported policy mu_h(s, a) at every stage and state, (H, S, A); a batched state
    (leading seed axes on ``train_state.step``) gives a batched table. Everything needed to
    rebuild the policy is in the train state (its static fields), so no config is passed."""
    check_train_state(algo, train_state, env, "policy_table")
    if not env.is_tabular:
        raise ValueError(f"{algo.name}.policy_table: {env.name} has no tabular states to tabulate the policy over; "
                         f"use {algo.name}.policy(train_state, env, params) with fhc_jax.rollout_returns")
    params = env.default_params if params is None else params
    setup = algo.policy_setup(env, params, train_state)
    fn = lambda st: jax.nn.softmax(algo.logits(st, setup), axis=-1)
    for _ in range(jnp.ndim(train_state.step)):
        fn = jax.vmap(fn)
    return fn(train_state)


def policy(algo: Algorithm, train_state: Any, env, params: Any = None) -> Callable[[Array, Array, Array], Array]:
    """The reported policy as ``act(key, observation, h) -> action`` for
    :func:`fhc_jax.rollout` (samples :func:`policy_table` by inverse CDF, one uniform per call;
    the environment's observations must let the state index be recovered).

    Raises:
        ValueError: a batched (multi-seed) state: index the leading axes first.
    """
    check_train_state(algo, train_state, env, "policy")
    if jnp.ndim(train_state.step):
        raise ValueError(f"{algo.name}.policy: pass the state of one seed (index the leading axes first)")
    if judged_exactly(env):
        return table_policy(policy_table(algo, train_state, env, params), env)
    params = env.default_params if params is None else params
    setup = algo.policy_setup(env, params, train_state)
    head = None if algo.action_head is None else algo.action_head(setup)
    return observation_policy(partial(algo.observation_logits, train_state, setup), head)


def play_environment(module: Any, train_state: Any, env, params: Any = None) -> tuple[Any, Any]:
    """The environment in which ``module.policy(train_state, ...)`` plays a learner's policy
    and its params: ``env`` itself for every learner whose policy acts on ``env``'s
    observations; one whose policy needs more than they carry (Saute-Lagrangian's remaining
    budget) plays in a wrapper with the same rewards, costs and dynamics, so a Monte-Carlo
    judgement there is a judgement of the task. ``module``: a learner module (its
    ``ALGORITHM``)."""
    params = env.default_params if params is None else params
    algo = module.ALGORITHM
    return (env, params) if algo.play_env is None else algo.play_env(train_state, env, params)


def interface(algo: Algorithm) -> tuple[Callable, Callable, Callable, Callable]:
    """The public functions of a learner module, bound to its :class:`Algorithm`:
    ``make_learner, make_train, policy_table, policy = interface(ALGORITHM)``."""

    def bound(fn: Callable) -> Callable:
        def call(*args, **kwargs):
            return fn(algo, *args, **kwargs)

        call.__name__ = call.__qualname__ = fn.__name__
        call.__doc__ = fn.__doc__
        call.__module__ = f"fhc_jax.algos.{algo.name}"
        return call

    return bound(make_learner), bound(make_train), bound(policy_table), bound(policy)
