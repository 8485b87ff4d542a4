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

from fhc_jax.algos.hyperparameters import resolve_env_defaults, resolve_hyperparameters
from fhc_jax.algos.policies import softmax_policy, table_policy
from fhc_jax.algos.tabular_rollout import Batch
from fhc_jax.cmdp.evaluate import evaluate
from fhc_jax.envs.wrappers import ScaledSignals, signal_scales
from fhc_jax.rollout import random_policy, rollout, rollout_returns

Array = jax.Array


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
    Returns:
        (final carry, stacked per-iteration metrics with leading axis N, :class:`ExactMetrics`).
    """
    marks = evaluation_iterations(num_iterations, eval_every)
    block = int(marks[1] - marks[0]) if len(marks) > 2 else num_iterations
    num_blocks = num_iterations // block
    rem = num_iterations - num_blocks * block

    r0, c0 = evaluate_fn(carry)

    def run_block(c, _):
        c, m = jax.lax.scan(step_fn, c, None, length=block)
        return c, (m, evaluate_fn(c))

    carry, (metrics, (rs, cs)) = jax.lax.scan(run_block, carry, None, length=num_blocks)
    metrics = jax.tree.map(lambda x: x.reshape((num_blocks * block,) + x.shape[2:]), metrics)
    rewards, costs = [r0[None], rs], [c0[None], cs]
    if rem:
        carry, m_rem = jax.lax.scan(step_fn, carry, None, length=rem)
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
class Carry:
    """The training loop's carry: the learner's train state and the PRNG key of the next
    iteration (everything a checkpoint must hold to resume bit-identically)."""

    state: Any
    key: Array


@dataclasses.dataclass(frozen=True)
class Learner:
    """A learner bound to one environment, as the iteration-level pure functions every training
    loop is built from: ``make_train``'s single ``lax.scan`` (:func:`run`) and the chunked,
    checkpointed runs of :mod:`fhc_jax.experiment`. All are traceable; ``vmap`` them over seeds
    (keys) and numeric hyperparameters.

    Attributes:
        config: the learner's frozen ``Config`` (static fields fixed here).
        init: ``(key, hparams) -> Carry``: initial train state and loop key.
        step: ``(carry, hparams) -> (carry, metrics)``: one rollout + update; ``metrics`` is a
            dict of small per-iteration arrays (independent of K and H).
        evaluate: ``carry -> (reward (), costs (M,))`` of the reported policy: exact on
            tabular exact models, else a Monte-Carlo estimate (``eval_episodes`` episodes).
        policy_table: ``train_state -> (H, S, A)``, the reported policy for exact evaluation;
            None on environments judged by Monte-Carlo (no tabular exact model).
    """

    config: Any
    init: Callable[[Array, Any], Carry]
    step: Callable[[Carry, Any], tuple[Carry, dict[str, Array]]]
    evaluate: Callable[[Carry], tuple[Array, Array]]
    policy_table: Callable[[Any], Array] | None


def run(learner: Learner, key: Array, hparams: Any | None = None) -> tuple[Any, dict[str, Array], ExactMetrics]:
    """A whole training run in one ``lax.scan`` (jit it, vmap it over keys/hyperparameters).

    Args:
        learner: :class:`Learner`.
        key: PRNG key of the run.
        hparams: optional hyperparameters (same static fields as ``learner.config``).
    Returns:
        (final train state, per-iteration metrics dict with leading axis ``num_iterations``,
        :class:`ExactMetrics` every ``config.eval_every`` updates).
    """
    cfg = resolve_hyperparameters(learner.config, hparams)
    carry = learner.init(key, cfg)
    carry, metrics, exact = scan_with_evaluation(
        lambda c, _: learner.step(c, cfg), carry, cfg.num_iterations, cfg.eval_every, learner.evaluate
    )
    return carry.state, metrics, exact


@struct.dataclass
class TrainResult:
    """What ``train(key)`` returns: the final train state and the learner's per-iteration
    ``Metrics`` (leading axis N = ``num_iterations``; ``metrics.exact`` every ``eval_every``)."""

    state: Any
    metrics: Any


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


#: the key of every Monte-Carlo evaluation (common random numbers across iterations and seeds;
#: independent of the training stream)
EVALUATION_KEY = 20_240_601


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
            "(nn_constrained, ecop, ppo_lagrangian, cpo) or a discrete version of the environment")
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


def observation_sample_by_stage(env, params, num_episodes: int = 64) -> Array:
    """Raw observations of s_0..s_H in ``num_episodes`` episodes of the uniform policy (fixed
    key), (N, H+1, D), stage by stage (host-side)."""
    traj = jax.jit(rollout, static_argnums=(1, 3, 4))(
        jax.random.key(EVALUATION_KEY), env, params, random_policy(env), num_episodes)
    return jnp.concatenate([traj.observations, traj.final_observations[:, None]], axis=1).astype(jnp.float32)


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

    On environments without a tabular exact model the learner trains on
    :class:`~fhc_jax.envs.wrappers.ScaledSignals` of ``env`` (rewards and costs divided by
    their typical magnitudes, :func:`~fhc_jax.envs.wrappers.signal_scales`), so that one set of
    defaults serves environments in any units; the metrics (reward, costs, multipliers, critic
    costs) and evaluations are reported in the environment's own units.

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
    scale_r, scale_c = 1.0, np.ones(env.num_constraints, np.float32)
    train_env = env
    if not judged_exactly(env):  # train in units of the signals' magnitudes (fhc_jax.envs.wrappers)
        scale_r, scale_c = signal_scales(env, params)
        train_env = ScaledSignals(env, scale_r, scale_c)
    setup = algo.setup(train_env, params, config)
    unscale = {"reward": scale_r, "costs": jnp.asarray(scale_c, jnp.float32), "critic_costs": jnp.asarray(scale_c, jnp.float32),
               "multipliers": jnp.asarray(scale_r / np.asarray(scale_c), jnp.float32)}

    def init_fn(key: Array, cfg: Any) -> Carry:
        cfg = resolve_hyperparameters(config, cfg)  # EnvDefault fields of hparams -> config's values
        k_init, k_loop = jax.random.split(key)
        return Carry(state=algo.init(k_init, setup, cfg), key=k_loop)

    def step_fn(carry: Carry, cfg: Any) -> tuple[Carry, dict[str, Array]]:
        cfg = resolve_hyperparameters(config, cfg)
        keys = jax.random.split(carry.key, 2 + algo.update_keys)
        batch = algo.rollout(keys[1], carry.state, setup, cfg)
        k_update = None if algo.update_keys == 0 else keys[2] if algo.update_keys == 1 else keys[2:]
        state, metrics = algo.update(carry.state, batch, k_update, setup, cfg)
        totals = {"reward": jnp.mean(batch.episode_rewards), "costs": jnp.mean(batch.episode_costs, axis=0)}
        metrics = {**totals, **metrics}
        if train_env is not env:  # report in the environment's units
            metrics = {k: v * unscale[k] if k in unscale else v for k, v in metrics.items()}
        return Carry(state=state, key=keys[0]), metrics

    def table_fn(state: Any) -> Array:
        return jax.nn.softmax(algo.logits(state, setup), axis=-1)

    if judged_exactly(env):
        cmdp = env.to_cmdp(params)

        def evaluate_fn(carry: Carry) -> tuple[Array, Array]:
            ev = evaluate(cmdp, table_fn(carry.state))
            return ev.reward, ev.costs
    else:
        head = None if algo.action_head is None else algo.action_head(setup)
        monte_carlo = monte_carlo_evaluator(env, params, config.eval_episodes, head)
        evaluate_fn = lambda carry: monte_carlo(partial(algo.observation_logits, carry.state, setup))
        table_fn = None

    return Learner(config=config, init=init_fn, step=step_fn, evaluate=evaluate_fn, policy_table=table_fn)


def make_train(algo: Algorithm, env, params, config: Any) -> Callable[..., TrainResult]:
    """Build ``train(key, hparams=None) -> TrainResult``: ``config.num_iterations`` rollouts and
    updates in one ``lax.scan`` (one jit).

    ``jax.jit(jax.vmap(train))(keys)`` trains several seeds in one compiled call;
    ``jax.vmap(train, in_axes=(None, 0))(key, fhc_jax.algos.stack([cfg1, cfg2]))`` sweeps
    numeric hyperparameters without recompiling (static fields must equal ``config``'s).

    Raises:
        ValueError: see :func:`make_learner`.
    """
    learner = make_learner(algo, env, params, config)

    def train(key: Array, hparams: Any | None = None) -> TrainResult:
        state, metrics, exact = run(learner, key, hparams)
        return TrainResult(state=state, metrics=algo.metrics_type(exact=exact, **metrics))

    return train


def policy_table(algo: Algorithm, train_state: Any, env, params: Any = None) -> Array:
    """The reported policy mu_h(s, a) at every stage and state, (H, S, A); a batched state
    (leading seed axes on ``train_state.step``) gives a batched table. Everything needed to
    rebuild the policy is in the train state (its static fields), so no config is passed."""
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
    if jnp.ndim(train_state.step):
        raise ValueError(f"{algo.name}.policy: pass the state of one seed (index the leading axes first)")
    if judged_exactly(env):
        return table_policy(policy_table(algo, train_state, env, params), env)
    params = env.default_params if params is None else params
    setup = algo.policy_setup(env, params, train_state)
    head = None if algo.action_head is None else algo.action_head(setup)
    return observation_policy(partial(algo.observation_logits, train_state, setup), head)


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
