"""Saute-Lagrangian: PPO-Lagrangian on the Saute state augmentation (Sootla et al., "Saute RL:
Almost Surely Safe RL Using State Augmentation", ICML 2022, arXiv 2202.06558), compiled as one
program, on any environment (discrete actions, or box actions with a Gaussian policy).

The state is augmented with the remaining budget z_h = (alpha - cost so far) / alpha (z_0 = 1,
z_{h+1} = z_h - g_h / alpha, one budget per constraint) and the reward is reshaped as in the
authors' code, r~_h = r_h while every z_{h+1} > 0, except that once one is <= 0 the reward is
min(r_h, -``unsafe_reward``) rather than -``unsafe_reward``: exhausting the budget never
forgives a penalty (a negative reward or terminal reward). One stationary network sees the
base observation plus z, trained by :func:`fhc_jax.algos.ppo_lagrangian.update` (clipped
surrogate, GAE, PID or learned Lagrange multiplier on the TRUE cost) on batches whose rewards
are reshaped here. Like every learner it trains on
:class:`~fhc_jax.envs.wrappers.ScaledSignals` (z is unit-free; ``unsafe_reward`` is in
training units, i.e. relative to the reward scale).

**Two representations of the budget** (``Config.budget``, "auto" picks; docs/algorithms/saute.md):

* **Cost counts** ("count", exact): on an environment with a tabular exact model, one
  constraint, and stage costs that are non-negative integer multiples of a unit (declared as
  ``cost_unit`` in the environment's units, or detected from the exact model:
  :func:`detect_cost_unit`), the budget takes finitely many values. Tracking the count
  c in {0, ..., C}, C = ceil(alpha / unit) + 1, with all counts >= C lumped (the reshaping and
  the clipped input z cannot tell them apart), the pair (s, c) is an exact finite MDP,
  :class:`SauteEnv` / :func:`augmented_cmdp`, on which the budget-dependent policy is a Markov
  policy. :func:`policy_table` reports the occupancy-equivalent Markov policy on the base
  states, pi_h(a|s) = sum_c d_h(s, c) pi_h(a|s, c) / sum_c d_h(s, c) (d the exact occupancy of
  the augmented chain): the same stage-wise state-action marginals, hence exactly the same
  expected reward and costs. The counts are those of the environment's own units (the unit
  is kept as a fraction alpha / unit of the budget), so the scaled training signals count the
  same.
* **Continuous budget** ("continuous", as in the Saute paper): everywhere else. The
  environment is wrapped in :class:`BudgetEnv` (its state carries the cost paid so far, its
  observation appends z) and the learner trains on the sampled path (``fhc_jax.rollout``).
  On a tabular environment :func:`policy_table` reports the Markov policy with the same
  stage-wise state-action marginals, estimated from ``Config.eval_episodes`` episodes of the
  budget-tracking policy (a fixed key), and that table is what is judged (exactly where there
  is an exact model); without tabular states the learner judges its budget-tracking policy by
  Monte-Carlo in :class:`BudgetEnv`, where :func:`policy` plays it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from fhc_jax.algos import ppo_lagrangian as ppo
from fhc_jax.algos.core import evaluation, scaffold
from fhc_jax.algos.core.distributions import check_initial_log_std
from fhc_jax.algos.core.hyperparameters import hyperparameters, numeric, static
from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.algos.core.policies import table_policy
from fhc_jax.algos.core.tabular_rollout import Batch, rollout_policy_table
from fhc_jax.algos.saute_setup import (
    OBSERVATIONS,
    Setup,
    budget_env,
    budget_thresholds,
    check_box_actions,
    check_observation,
    network_observation,
    policy_setup,
    resolve_base_observation,
    setup,
)
from fhc_jax.envs.base import Environment
from fhc_jax.envs.saute import BudgetEnv, budget_levels, markov_equivalent

Array = jax.Array

#: ``Config.budget``: "auto" (counts where they are exact, else continuous), "count", "continuous"
BUDGETS = ("auto", "count", "continuous")


@hyperparameters
class Config(ppo.Config):
    """PPO-Lagrangian's :class:`~fhc_jax.algos.ppo_lagrangian.Config` (every field, same
    meaning; ``observation`` is the input of the base state, the budget z is appended), with
    its own defaults for K (256), N (300), ``pid_kp`` (0.25), ``pid_ki`` (0.075), ``eval_every`` (50),
    and on every environment ``normalize_advantages="separate"``, ``mean_bound_coef=0`` and
    ``budget_tightening=0`` (the budget in the state does the work PPO-Lagrangian's
    sampled-path defaults do); the
    batch setting ``episodes_per_iteration=1024, num_epochs=8, num_minibatches=8,
    num_iterations=400`` learns more and costs about 6x more (docs/algorithms/saute.md).
    ``log_std`` and ``initial_log_std`` set the Gaussian head on box action spaces (as in
    PPO-Lagrangian; the budget is then continuous and the policy is judged by Monte-Carlo in
    :class:`BudgetEnv`). ``eval_episodes`` also
    sets how many episodes estimate the reported Markov policy of a continuous budget. Plus:

    Static fields:
        budget: "count" (exact cost counts; needs a tabular exact model, one constraint and
            stage costs that are integer multiples of the unit), "continuous" (z as a real
            number, the sampled path; any environment) or "auto" (the default: "count" where
            it applies, else "continuous"). ``path`` = "tabular" / "sampled" ask for "count" /
            "continuous".
        cost_unit: the unit of the cost counts in the ENVIRONMENT's units, > 0, or 0 (the
            default): detected from the exact model (:func:`detect_cost_unit`). Declaring one
            asks for the count representation.
        observation: the input of the base state: "xy", "xyt", "one_hot" (encoders the
            environment supports), "env" (its own observation), "env_t" (with h / H),
            "env_stage" (with the stage one-hot e_h, H + 1 entries, and h / H), or "auto" (the
            default: the stage with the state on a tabular environment, "xyt" on a spatial
            one, else "env_stage"; "env" elsewhere: the finite-horizon optimum is
            non-stationary, and (s, z) alone gives one action law for every stage).
    Numeric fields:
        unsafe_reward: n >= 0, the reward once a budget is exhausted (z_{h+1} <= 0) is
            min(r, -n) (a penalty r < -n is kept), in training units (rewards divided by their
            typical magnitude, so n = 1 is about one typical step's reward whatever the
            environment's units).
    """

    num_iterations: int = static(300, low=1)
    episodes_per_iteration: int = static(256, low=1)
    observation: str = static("auto", choices=("auto", *OBSERVATIONS))
    eval_every: int = static(50, low=0)
    pid_kp: float = numeric(0.25, low=0.0)
    pid_ki: float = numeric(0.075, low=0.0)
    normalize_advantages: str = static("separate", choices=ppo.ADVANTAGE_NORMALIZATIONS)
    mean_bound_coef: float = numeric(0.0, low=0.0)
    budget_tightening: float = numeric(0.0, low=0.0, high=1.0)
    unsafe_reward: float = numeric(0.0, low=0.0)
    budget: str = static("auto", choices=BUDGETS)
    cost_unit: float = static(0.0, types=(float, int), description="a number >= 0 (0: detect the unit)")

    def __post_init__(self):
        check_initial_log_std(self)
        if isinstance(self.cost_unit, bool) or not (math.isfinite(self.cost_unit) and self.cost_unit >= 0):
            raise ValueError(
                f"Config.cost_unit must be a finite number >= 0 (0: detect the unit), found {self.cost_unit!r}"
            )


# ----------------------------------------------------------------------------- the reshaped reward


def reshape(batch: Batch, z_after: Array, alpha: Array, unsafe_reward: Array) -> tuple[Array, Array]:
    """Saute's reward on a batch: r~_h = r_h while every budget after the step z_{h+1} is > 0,
    else min(r_h, -``unsafe_reward``) (the authors' -``unsafe_reward``, but a penalty worse than
    it is kept: exhausting the budget must not forgive it); the terminal reward likewise with
    the terminal cost counted, z_H - g_H / alpha. ``z_after`` (H, K, M), ``alpha`` (M,) in the
    batch's units. Returns ((H, K), (K,))."""
    rewards = jnp.where(jnp.all(z_after > 0, axis=-1), batch.rewards, jnp.minimum(batch.rewards, -unsafe_reward))
    z_final = z_after[-1] - batch.terminal_costs / alpha
    return rewards, jnp.where(
        jnp.all(z_final > 0, axis=-1), batch.terminal_rewards, jnp.minimum(batch.terminal_rewards, -unsafe_reward)
    )


def reshaped_rewards(batch: Batch, levels: int, alpha: Array, unit: float, unsafe_reward: Array) -> tuple[Array, Array]:
    """:func:`reshape` on a batch over augmented states (index s B + c) of one constraint, the
    budget after the step z_{h+1} = (alpha - c_{h+1} unit) / alpha. Returns ((H, K), (K,))."""
    z = (alpha - (batch.states[1:] % levels).astype(jnp.float32) * unit) / alpha
    return reshape(batch, z[..., None], jnp.reshape(jnp.asarray(alpha, jnp.float32), (1,)), unsafe_reward)


# ----------------------------------------------------------------------------- the algorithm


@struct.dataclass
class TrainState(ppo.TrainState):
    """PPO-Lagrangian's train state over the augmented inputs, plus the budget's representation
    (static): ``network.observation`` is Saute's input of the base state (z appended), ``budget``
    "count" or "continuous", ``budget_units`` alpha / unit of the counts (the budget in cost
    units, unit-free; 0 for "continuous"), ``table_episodes`` the episodes of the estimated
    Markov policy ("continuous")."""

    budget: str = struct.field(pytree_node=False, default="count")
    budget_units: float = struct.field(pytree_node=False, default=0.0)
    table_episodes: int = struct.field(pytree_node=False, default=0)


def init(key: Array, setup: Setup, config: Config) -> TrainState:
    """PPO-Lagrangian's initial state on the augmented inputs."""
    st = ppo.init(key, setup.ppo, config)
    return TrainState(
        **{
            **{f.name: getattr(st, f.name) for f in dataclasses.fields(st)},
            "network": st.network.replace(observation=_saute_observation(setup)),
        },
        budget=setup.budget,
        budget_units=float(setup.budget_units),
        table_episodes=setup.table_episodes,
    )


def _saute_observation(setup: Setup) -> str:
    """The resolved Saute observation a setup was built for."""
    if setup.budget == "count":
        return setup.ppo.observation
    benv = budget_env(setup.env)
    return setup.ppo.observation if benv.base_observation == "env" else benv.base_observation


def augmented_logits(train_state: TrainState, setup: Setup) -> Array:
    """The network's logits over the augmented states of the count representation, (H, S B, A)."""
    return ppo.table_logits(train_state, setup.ppo)


def observation_outputs(train_state: TrainState, setup: Setup, observation: Array, h: Array) -> Array:
    """The network's logits at one observation (x, z) of :class:`BudgetEnv` at stage h, (A,)
    (the continuous representation)."""
    return ppo.observation_outputs(train_state, setup.ppo, observation, h)


def count_floor(budget_units: float) -> float:
    """The least budget the count representation's network sees, z(C) = 1 - C / q with
    q = alpha / unit = ``budget_units`` and C = :func:`budget_levels` - 1 (the capped count)."""
    return 1.0 - (budget_levels(budget_units, 1.0) - 1) / budget_units


def _capped_logits(train_state: TrainState, setup: Setup, floor: float, observation: Array, h: Array) -> Array:
    """:func:`observation_outputs` with the budget (the last entry of the observation) raised to
    ``floor``: a policy trained on capped counts played in :class:`BudgetEnv`."""
    return observation_outputs(train_state, setup, observation.at[-1].max(floor), h)


def table_key() -> Array:
    """The key of every estimate of a continuous budget's Markov policy (:func:`estimated_markov_policy`):
    the same episodes for every train state, independent of training, of the learner's
    selection and of :data:`fhc_jax.algos.core.evaluation.EVALUATION_KEY`'s judgements."""
    return jax.random.fold_in(jax.random.key(evaluation.EVALUATION_KEY), 2)


def estimated_markov_policy(train_state: TrainState, setup: Setup) -> Array:
    """The Markov policy on the base states with the stage-wise state-action marginals of the
    budget-tracking policy (continuous budget, tabular base), estimated from
    ``setup.table_episodes`` episodes of it in :class:`BudgetEnv` (key :func:`table_key`):
    pi_h(a|s) = sum_k [s_h^k = s] pi(a | x_h(s), z_h^k) / #{k : s_h^k = s}; where no episode
    visits (h, s), pi(a | x_h(s), mean_k z_h^k). (H, S, A)."""
    benv, params, h_max = budget_env(setup.env), setup.ppo.params, setup.env.horizon
    train_env, base = setup.env, benv.env
    s_count, m = base.num_states, base.num_constraints
    logits_of = lambda obs, h: observation_outputs(train_state, setup, obs, h)

    def episode(key):
        k_reset, k_steps = jax.random.split(key)
        obs, state = train_env.reset(k_reset, params)

        def body(carry, xs):
            obs, state = carry
            h, k = xs
            k_act, k_env = jax.random.split(k)
            p = jax.nn.softmax(logits_of(obs, h))
            u = jax.random.uniform(k_act)
            action = jnp.minimum(jnp.sum(jnp.cumsum(p) <= u), p.shape[0] - 1).astype(jnp.int32)
            index = base.state_index(state.base)
            nobs, nstate, *_ = train_env.transition(train_env.noise(k_env, params), state, action, params)
            return (nobs, nstate), (index, p, obs[-m:])

        stages = jnp.arange(h_max, dtype=jnp.int32)
        _, out = jax.lax.scan(body, (obs, state), (stages, jax.random.split(k_steps, h_max)))
        return out

    index, probs, z = jax.vmap(episode)(
        jax.random.split(table_key(), setup.table_episodes)
    )  # (K, H), (K, H, A), (K, H, M)
    hs = jnp.broadcast_to(jnp.arange(h_max)[None, :], index.shape)
    joint = jnp.zeros((h_max, s_count, probs.shape[-1]), jnp.float32).at[hs, index].add(probs)
    visits = jnp.zeros((h_max, s_count), jnp.float32).at[hs, index].add(1.0)
    z_mean = jnp.mean(z, axis=0)  # (H, M)
    fill_inputs = jnp.concatenate([setup.base_inputs, jnp.broadcast_to(z_mean[:, None], (h_max, s_count, m))], axis=-1)
    fill = jax.vmap(lambda x_h, h: jax.vmap(lambda x: jax.nn.softmax(logits_of(x, h)))(x_h))(
        fill_inputs, jnp.arange(h_max)
    )
    return jnp.where(visits[..., None] > 0, joint / jnp.maximum(visits, 1.0)[..., None], fill)


def table_logits(train_state: TrainState, setup: Setup) -> Array:
    """Logits (log-probabilities) of the reported Markov policy on the base states, (H, S, A):
    the exact occupancy-equivalent one (counts) or its estimate (continuous budget)."""
    if setup.budget == "count":
        table = jax.nn.softmax(augmented_logits(train_state, setup), axis=-1)
        pol = markov_equivalent(table, setup.kernel, setup.initial, setup.env.levels)
    else:
        pol = estimated_markov_policy(train_state, setup)
    return jnp.log(jnp.maximum(pol, 1e-30))


def rollout(key: Array, train_state: TrainState, setup: Setup, config: Config) -> Batch:
    """K episodes of the augmented environment under the network's policy, true rewards and
    costs (reshaped in :func:`update`): from the policy table over (s, c) (counts; the logits
    table rides in ``behaviour``) or through ``fhc_jax.rollout`` in :class:`BudgetEnv`."""
    if setup.budget == "continuous":
        return ppo.rollout(key, train_state, setup.ppo, config)
    table = augmented_logits(train_state, setup)
    batch = rollout_policy_table(key, setup.ppo.model, jax.nn.softmax(table, axis=-1), config.episodes_per_iteration)
    return batch.replace(behaviour=table)


def update(
    train_state: TrainState, batch: Batch, key: Array, setup: Setup, config: Config
) -> tuple[TrainState, dict[str, Array]]:
    """Reshape the batch's rewards (:func:`reshape`: z from the counts, or the recorded
    observations' last M entries), then one PPO-Lagrangian update (the multiplier reads the
    batch's TRUE costs)."""
    if setup.budget == "count":
        senv = setup.env
        r, r_term = reshaped_rewards(batch, senv.levels, senv.alpha, senv.unit, config.unsafe_reward)
    else:
        m = setup.ppo.thresholds.shape[0]
        r, r_term = reshape(batch, batch.observations[1:, :, -m:], setup.ppo.thresholds, config.unsafe_reward)
    return ppo.update(train_state, batch.replace(rewards=r, terminal_rewards=r_term), key, setup.ppo, config)


def play_env(train_state: TrainState, env: Environment, params: Any) -> tuple[Environment, Any]:
    """Where :func:`policy` plays a trained policy (``fhc_jax.algos.core.scaffold.play_environment``):
    ``env`` when it has tabular states (the reported Markov policy) or is a :class:`BudgetEnv`,
    else ``BudgetEnv(env)`` with the base observation the policy was trained on (the same
    rewards, costs and dynamics; the budget appended to the observation)."""
    if env.is_tabular or budget_env(env) is not None:
        return env, params
    base_obs = network_observation(train_state.network.observation)[0]
    return BudgetEnv(env, budget_thresholds(env, params), base_obs), params


ALGORITHM = scaffold.Algorithm(
    name="saute",
    config_type=Config,
    metrics_type=ppo.Metrics,
    setup=setup,
    init=init,
    rollout=rollout,
    update=update,
    table_logits=table_logits,
    policy_setup=policy_setup,
    observation_outputs=observation_outputs,
    update_keys=1,
    action_head=lambda setup: setup.ppo.action_head,
    play_env=play_env,
    small_budget_units=True,
)


# ----------------------------------------------------------------------------- the public interface


def training_env(env: Environment, params: Any, config: Config) -> Environment:
    """The environment the learner trains and judges itself on: ``env`` where it has tabular
    states with an exact model (the reported policy is a Markov policy of its states), else
    ``BudgetEnv(env)`` (the budget-tracking policy, softmax or Gaussian, is judged by
    Monte-Carlo where it tracks its budget). A :class:`BudgetEnv` and invalid configs pass
    unchanged (the scaffold refuses what it must).

    Raises:
        ValueError: box actions on an environment with tabular states (:func:`box_actions_refusal`).
    """
    check_box_actions(env)
    if not isinstance(config, Config) or judged_exactly(env) or budget_env(env) is not None:
        return env
    try:
        alpha = budget_thresholds(env, params)
    except NotImplementedError:
        return env
    observation = resolve_base_observation(env, config.observation)
    check_observation(env, observation)
    return BudgetEnv(env, alpha, network_observation(observation)[0])


def make_learner(env, params, config: Config) -> scaffold.Learner:
    """Saute-Lagrangian bound to ``env`` as iteration-level functions
    (:func:`fhc_jax.algos.core.scaffold.make_learner` on :func:`training_env`).

    Raises:
        ValueError: see :func:`setup` and :func:`fhc_jax.algos.core.scaffold.make_learner`.
    """
    return scaffold.make_learner(ALGORITHM, training_env(env, params, config), params, config)


def make_train(env, params, config: Config) -> Callable[..., scaffold.TrainResult]:
    """``train(key, hparams=None) -> TrainResult`` (:func:`fhc_jax.algos.core.scaffold.make_train` on
    :func:`training_env`): one compiled run; ``vmap`` it over keys and numeric
    hyperparameters.

    Raises:
        ValueError: see :func:`setup` and :func:`fhc_jax.algos.core.scaffold.make_learner`.
    """
    return scaffold.make_train(ALGORITHM, training_env(env, params, config), params, config)


def policy_table(train_state: TrainState, env, params: Any = None) -> Array:
    """The reported Markov policy on ``env``'s states, (H, S, A) (a batched state gives a
    batched table): the occupancy-equivalent policy of the budget-dependent one (exact with
    cost counts, estimated with a continuous budget; module docstring).

    Raises:
        ValueError: an environment without tabular states.
    """
    return scaffold.policy_table(ALGORITHM, train_state, env, params)


def policy(train_state: TrainState, env, params: Any = None) -> Callable[[Array, Array, Array], Array]:
    """The reported policy as ``act(key, observation, h) -> action`` for :func:`fhc_jax.rollout`:
    in a :class:`BudgetEnv` the budget-tracking policy of (x, z) itself, of either budget
    representation (it reads z from the observation, which carries the costs paid so far; a
    policy of cost counts sees z no lower than its capped count, :func:`count_floor`); on an
    environment with tabular states the reported Markov policy (:func:`policy_table`) played
    from the state index, which has the same expected reward and costs.

    Raises:
        ValueError: a batched (multi-seed) state; an environment without tabular states (its
            observations do not carry the budget: play the policy in ``BudgetEnv(env,
            observation=...)``, as the learner judges it).
    """
    scaffold.check_train_state(ALGORITHM, train_state, env, "policy")
    if jnp.ndim(train_state.step):
        raise ValueError("saute.policy: pass the state of one seed (index the leading axes first)")
    params = env.default_params if params is None else params
    if budget_env(env) is not None:
        setup_ = policy_setup(env, params, train_state)
        if train_state.budget == "count":  # z as the capped count saw it
            return evaluation.observation_policy(
                partial(_capped_logits, train_state, setup_, count_floor(train_state.budget_units))
            )
        return evaluation.observation_policy(partial(observation_outputs, train_state, setup_), setup_.ppo.action_head)
    if env.is_tabular:
        return table_policy(policy_table(train_state, env, params), env)
    base_obs = network_observation(train_state.network.observation)[0]
    raise ValueError(
        f"saute.policy: the Saute policy acts on the remaining budget, which {env.name}'s observations "
        "do not carry and its states are not tabular (no Markov policy to report); play it in "
        f"fhc_jax.envs.saute.BudgetEnv(env, observation={base_obs!r}) (the same rewards and costs, the "
        "budget appended to the observation), where the learner judges it"
    )


def augmented_policy_table(train_state: TrainState, env, params: Any = None) -> Array:
    """The learned policy over the augmented states (H, S B, A) of the count representation, for
    ``fhc_jax.evaluate`` on :func:`augmented_cmdp` or ``fhc_jax.rollout`` on
    ``SauteEnv(env, observation="index")``.

    Raises:
        ValueError: a train state of the continuous budget (no finite augmented states).
    """
    if train_state.budget != "count":
        raise ValueError(
            "saute.augmented_policy_table: this policy tracks a continuous budget (Config.budget = "
            "'continuous'), which has no finite augmented states; play it with saute.policy in BudgetEnv"
        )
    params = env.default_params if params is None else params
    st = policy_setup(env, params, train_state)
    fn = lambda x: jax.nn.softmax(augmented_logits(x, st), axis=-1)
    for _ in range(jnp.ndim(train_state.step)):
        fn = jax.vmap(fn)
    return fn(train_state)
