"""The scaffold every learner shares: an algorithm file declares its pieces in an
:class:`Algorithm` (``Config``, ``setup``, ``init``, ``rollout``, ``update``, the outputs of its
reported policy) and this module binds them into the public interface:

* ``make_learner(env, params, config) -> Learner``: iteration-level pure functions (the
  chunked, checkpointed runs of :mod:`fhc_jax.experiment` are built from them);
* ``make_train(env, params, config) -> train(key, hparams=None) -> TrainResult``: a whole
  training run in one ``lax.scan`` (one jit; ``vmap`` it over seeds and numeric
  hyperparameters), with an evaluation of the reported policy every ``eval_every`` updates;
* ``policy_table(train_state, env, params) -> (..., H, S, A)`` (for ``fhc_jax.evaluate``) and
  ``policy(train_state, env, params)`` (for ``fhc_jax.rollout``), the same for every learner.

One iteration is ``rollout`` (K episodes under the current policy) then ``update``; the loop
key is split once per iteration into the next loop key, the rollout key and the update's
``update_keys`` keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.algos.core import multipliers as multiplier_laws
from fhc_jax.algos.core.evaluation import (
    EvaluationMetrics,
    monte_carlo_evaluator,
    observation_policy,
    scan_with_evaluation,
)
from fhc_jax.algos.core.hyperparameters import resolve_env_defaults, resolve_hyperparameters
from fhc_jax.algos.core.networks import NetworkSpec
from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.algos.core.policies import table_policy
from fhc_jax.algos.core.selection import (
    Selection,
    Status,
    constraint_status,
    estimate,
    multiplier_settings,
    offer_estimate,
)
from fhc_jax.algos.core.tabular_rollout import Batch, rollout_policy_table, tabular_model
from fhc_jax.cmdp.evaluate import evaluate
from fhc_jax.envs.spaces import Box
from fhc_jax.envs.wrappers import ScaledSignals, training_scales
from fhc_jax.rollout import rollout_returns

Array = jax.Array

#: the exact check of the returned policy (:attr:`Learner.verify`) allows float32 rounding: a cost
#: may exceed alpha by this fraction of |alpha| plus the cost's typical step magnitude
VERIFY_RTOL = 1e-5


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
            (:class:`~fhc_jax.algos.core.networks.NetworkSpec`, static), so the policy can be
            rebuilt from the state alone.
    """

    network: NetworkSpec = struct.field(pytree_node=False, kw_only=True)


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
        verify: ``carry -> (met bool (), costs (M,))``: whether the returned policy (the
            :class:`Selection`) meets every constraint, with the costs that say so, in the
            environment's units: its exact costs on tabular exact models (the status checks
            itself against the referee), else the upper 95% bounds of its estimates.
        policy_table: ``train_state -> (H, S, A)``, the reported policy for exact evaluation;
            None on environments judged by Monte-Carlo (no tabular exact model).
        thresholds: alpha^(k) in the environment's units, (M,) numpy.
        violation_units: d^(k) in the environment's units (:func:`fhc_jax.algos.core.multipliers.
            violation_units` of the scaled thresholds, scaled back), (M,) numpy.
        multiplier_units: one training-unit multiplier in the environment's units,
            reward scale / cost scale^(k), (M,) numpy.
    """

    config: Any
    init: Callable[[Array, Any], Carry]
    step: Callable[[Carry, Any], tuple[Carry, dict[str, Array]]]
    mark: Callable[[Carry], Carry]
    evaluate: Callable[[Carry], tuple[Array, Array]]
    verify: Callable[[Carry], tuple[Array, Array]]
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


def run(learner: Learner, key: Array, hparams: Any | None = None) -> tuple[Carry, dict[str, Array], EvaluationMetrics]:
    """A whole training run in one ``lax.scan`` (jit it, vmap it over keys/hyperparameters).

    Args:
        learner: :class:`Learner`.
        key: PRNG key of the run.
        hparams: optional hyperparameters (same static fields as ``learner.config``).
    Returns:
        (final :class:`Carry`, per-iteration metrics dict with leading axis
        ``num_iterations``, :class:`EvaluationMetrics` every ``config.eval_every`` updates).
    """
    cfg = learner.resolve(hparams)
    carry = learner.init(key, cfg)
    return scan_with_evaluation(
        lambda c, _: learner.step(c, cfg), carry, cfg.num_iterations, cfg.eval_every, learner.evaluate, learner.mark
    )


@struct.dataclass
class TrainResult:
    """What ``train(key)`` returns.

    Attributes:
        state: the train state of the returned policy, the :class:`Selection` (the best
            candidate by the learner's own Monte-Carlo estimates; with ``eval_every = 0`` the
            final iterate). ``policy_table`` / ``policy`` of it give the returned policy.
        final_state: the train state after the last update (to continue training from).
        metrics: the learner's per-iteration ``Metrics`` (leading axis N = ``num_iterations``;
            ``metrics.evaluation`` every ``eval_every`` updates: the reported policy of the
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
            (``metrics_type(evaluation=EvaluationMetrics, **update_metrics)``).
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
        table_logits: ``(train_state, setup) -> (H, S, A)``: the reported policy's logits at every
            stage and state (softmax gives the policy table).
        policy_setup: ``(env, params, train_state) -> setup``: what ``table_logits`` needs, rebuilt
            from the train state alone (its static fields record the architecture, inputs or
            features), for :func:`policy_table` and :func:`policy` after training.
        observation_outputs: ``(train_state, setup, observation, h) -> (outputs,)``: the
            reported policy's actor outputs at one observation of stage h (what they mean:
            ``action_head``), or None. Learners that have it train on any environment (the
            sampled path); the others need a tabular exact model.
        update_keys: how many PRNG keys ``update`` consumes per iteration (0, 1 or more).
        action_head: ``setup -> ActionHead`` (``fhc_jax.algos.core.distributions``): what the
            outputs of ``observation_outputs`` mean (softmax logits, or a Gaussian's parameters
            on box action spaces); None for a learner of discrete actions only, whose outputs
            are softmax logits (it refuses box action spaces).
        play_env: ``(train_state, env, params) -> (env', params')``: the environment in which
            ``policy`` plays the learner's policy, with ``env``'s rewards, costs and dynamics
            (:func:`play_environment`); None: ``env`` itself.
        small_budget_units: train with a small budget's cost unit shrunk until the budget is
            H / 100 training units (:func:`~fhc_jax.envs.wrappers.training_scales`): for the
            learners whose multiplier laws count penalties and steps in training units, whose
            bounds and steps then reach the penalty a rare-event budget needs. FH- and
            NN-Constrained's improved law counts in budget units against the budget itself
            (:func:`~fhc_jax.algos.core.multipliers.budget_scale`) and trains in the signals'
            magnitudes (False).
    """

    name: str
    config_type: type
    metrics_type: type
    setup: Callable[..., Any]
    init: Callable[..., Any]
    rollout: Callable[..., Batch]
    update: Callable[..., tuple[Any, dict[str, Array]]]
    table_logits: Callable[[Any, Any], Array]
    policy_setup: Callable[..., Any]
    observation_outputs: Callable[[Any, Any, Array, Array], Array] | None = None
    update_keys: int = 0
    action_head: Callable[[Any], Any] | None = None
    play_env: Callable[[Any, Any, Any], tuple[Any, Any]] | None = None
    small_budget_units: bool = False


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
            "(nn_constrained, ecop, ppo_lagrangian, cpo, saute) or a discrete version of the environment"
        )
    if not judged_exactly(env) and algo.observation_outputs is None:
        raise ValueError(
            f"{algo.name}: {env.name} declares no tabular exact model (is_tabular and "
            f"has_exact_model), and {algo.name} trains only on such environments"
        )


def make_learner(algo: Algorithm, env, params, config: Any) -> Learner:
    """``algo`` bound to ``env`` as iteration-level functions (:class:`Learner`).

    The learner trains on :class:`~fhc_jax.envs.wrappers.ScaledSignals` of ``env``: rewards
    and costs divided by their typical magnitudes in episodes of the uniform policy
    (:func:`~fhc_jax.envs.wrappers.training_scales`, statistics the learner observes itself,
    never the exact model; for the learners that ask, ``Algorithm.small_budget_units``, a
    rare-event budget's cost unit shrunk so that the budget is H / 100 training units), so
    that one set of defaults serves environments in any units and
    rescaling the rewards, or the costs with their thresholds, leaves training unchanged up to
    rounding. The multipliers in the train state count penalties in these training units; the
    metrics (reward, costs, multipliers, critic costs) and evaluations are reported in the
    environment's own units.

    Fields of ``config`` left at an environment-dependent default
    (:class:`~fhc_jax.algos.core.hyperparameters.EnvDefault`) take their value for ``env`` (with or
    without a tabular exact model, :func:`judged_exactly`); ``Learner.config`` holds the result.

    Raises:
        ValueError: a config of another learner, an environment without a tabular exact
            model, or one that does not fit the config (from ``algo.setup``).
    """
    if isinstance(config, algo.config_type):
        config = resolve_env_defaults(config, judged_exactly(env))
    _check(algo, env, params, config)
    scale_r, scale_c = training_scales(env, params, small_budgets=algo.small_budget_units)  # training units
    train_env = ScaledSignals(env, scale_r, scale_c)
    signature = environment_signature(env)  # stamped on every train state (check_train_state)
    setup = algo.setup(train_env, params, config)
    scale_c = np.asarray(scale_c, np.float32)
    unscale = {
        "reward": scale_r,
        "costs": jnp.asarray(scale_c),
        "critic_costs": jnp.asarray(scale_c),
        "multipliers": jnp.asarray(scale_r / scale_c, jnp.float32),
    }
    thresholds = np.asarray(env.thresholds(params), np.float32).reshape(-1)
    train_thresholds = thresholds / scale_c  # alpha in training units, (M,)
    train_units = np.asarray(multiplier_laws.violation_units(train_thresholds, env.horizon))
    units = train_units * scale_c
    exact = judged_exactly(env)

    def table_fn(state: Any) -> Array:
        return jax.nn.softmax(algo.table_logits(state, setup), axis=-1)

    head = None if algo.action_head is None else algo.action_head(setup)

    def init_fn(key: Array, cfg: Any) -> Carry:
        cfg = config if cfg is None else cfg
        k_init, k_loop = jax.random.split(key)
        state = algo.init(k_init, setup, cfg).replace(trained_on=signature)
        m = thresholds.shape[0]
        selection = Selection(
            state=state,
            iteration=jnp.asarray(-1, jnp.int32),
            reward=jnp.asarray(-jnp.inf),
            costs=jnp.full((m,), jnp.inf),
            upper=jnp.full((m,), jnp.inf),
            feasible=jnp.asarray(False),
            episodes=jnp.zeros((), jnp.float32),
        )
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

    if exact:  # the candidates' episodes on the footing the learner trains on: its own rollout of the model
        model = tabular_model(train_env, params)

        def episodes(state: Any) -> Callable[[Array], tuple[Array, Array]]:
            table = table_fn(state)
            poison = jnp.where(jnp.all(jnp.isfinite(table)), 0.0, jnp.nan)  # a diverged table has no estimate

            def totals(key: Array) -> tuple[Array, Array]:
                batch = rollout_policy_table(key, model, table, config.eval_episodes)
                return batch.episode_rewards + poison, batch.episode_costs + poison

            return totals
    else:

        def episodes(state: Any) -> Callable[[Array], tuple[Array, Array]]:
            act = observation_policy(partial(algo.observation_outputs, state, setup), head)

            def totals(key: Array) -> tuple[Array, Array]:
                returns = rollout_returns(key, train_env, params, act, config.eval_episodes)
                return returns.rewards, returns.costs

            return totals

    def mark_fn(carry: Carry) -> Carry:
        est = estimate(episodes(carry.state), train_thresholds, config.eval_episodes, config.eval_chunks_max)
        return carry.replace(
            selection=offer_estimate(
                carry.selection, carry.state, _updates_done(carry.state), est, train_thresholds, train_units
            )
        )

    if exact:
        cmdp = env.to_cmdp(params)

        def evaluate_fn(carry: Carry) -> tuple[Array, Array]:
            ev = evaluate(cmdp, table_fn(carry.state))
            return ev.reward, ev.costs

        def verify_fn(carry: Carry) -> tuple[Array, Array]:
            costs = evaluate(cmdp, table_fn(carry.selection.state)).costs
            return jnp.all(costs <= thresholds + VERIFY_RTOL * (np.abs(thresholds) + scale_c)), costs
    else:
        monte_carlo = monte_carlo_evaluator(env, params, config.eval_episodes, head)
        evaluate_fn = lambda carry: monte_carlo(partial(algo.observation_outputs, carry.state, setup))
        verify_fn = lambda carry: (carry.selection.feasible, carry.selection.upper * scale_c)

    return Learner(
        config=config,
        init=init_fn,
        step=step_fn,
        mark=mark_fn,
        evaluate=evaluate_fn,
        verify=verify_fn,
        policy_table=table_fn if exact else None,
        thresholds=thresholds,
        violation_units=units,
        multiplier_units=np.asarray(scale_r / scale_c, np.float32),
    )


def _updates_done(train_state: Any) -> Array:
    """The number of updates a train state has had (its ``step`` field), int32 ()."""
    return jnp.asarray(train_state.step, jnp.int32)


def run_status(learner: Learner, carry: Carry, metrics: dict[str, Array]) -> Status:
    """:func:`constraint_status` of a run from its final carry and per-iteration metrics."""
    met, costs = learner.verify(carry)
    return constraint_status(
        metrics["multipliers"],
        metrics["costs"],
        learner.thresholds,
        learner.violation_units,
        learner.multiplier_units,
        met,
        costs,
        multiplier_settings(learner.config),
    )


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
        carry, metrics, evaluations = run(learner, key, hparams)
        return TrainResult(
            state=carry.selection.state,
            final_state=carry.state,
            metrics=algo.metrics_type(evaluation=evaluations, **metrics),
            selection=carry.selection,
            status=run_status(learner, carry, metrics),
        )

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
    on an environment with ``env``'s H, S, actions and M (rather than an AttributeError or a
    table of the wrong shape later). ``where`` names the public function (e.g. "policy_table")."""
    owner = type(train_state).__module__
    mine = f"fhc_jax.algos.{algo.name}"
    if isinstance(train_state, TrainResult):
        raise ValueError(f"{algo.name}.{where}: pass the train state (result.state), not the TrainResult")
    if owner != mine:
        other = owner.rsplit(".", 1)[-1]
        hint = f"; use fhc_jax.algos.{other}.{where}" if owner.startswith("fhc_jax.algos.") else ""
        raise ValueError(
            f"{algo.name}.{where}: the train state is a {owner}.{type(train_state).__name__}, "
            f"not a {mine}.TrainState{hint}"
        )
    trained = getattr(train_state, "trained_on", None)
    if trained is None:  # a state built outside make_learner (e.g. by the learner's own init)
        return
    now = environment_signature(env)
    for name, was, is_ in zip(_SIGNATURE_NAMES, trained, now):
        if was is not None and is_ is not None and was != is_:
            raise ValueError(
                f"{algo.name}.{where}: the train state was trained on an environment with {name} = "
                f"{was}, {env.name} has {is_}: pass the environment (and params) it was trained on"
            )


def policy_table(algo: Algorithm, train_state: Any, env, params: Any = None) -> Array:
    """The reported policy mu_h(s, a) at every stage and state, (H, S, A); a batched state
    (leading seed axes on ``train_state.step``) gives a batched table. Everything needed to
    rebuild the policy is in the train state (its static fields), so no config is passed."""
    check_train_state(algo, train_state, env, "policy_table")
    if not env.is_tabular:
        raise ValueError(
            f"{algo.name}.policy_table: {env.name} has no tabular states to tabulate the policy over; "
            f"use {algo.name}.policy(train_state, env, params) with fhc_jax.rollout_returns"
        )
    params = env.default_params if params is None else params
    setup = algo.policy_setup(env, params, train_state)
    fn = lambda st: jax.nn.softmax(algo.table_logits(st, setup), axis=-1)
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
    return observation_policy(partial(algo.observation_outputs, train_state, setup), head)


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
