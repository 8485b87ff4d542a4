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
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.algos.core import evaluation, scaffold
from fhc_jax.algos import ppo_lagrangian as ppo
from fhc_jax.algos.core.distributions import check_initial_log_std
from fhc_jax.algos.core.hyperparameters import hyperparameters, numeric, static
from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.algos.core.networks import NetworkSpec
from fhc_jax.algos.core.policies import table_policy
from fhc_jax.algos.core.paths import ENV_OBSERVATIONS
from fhc_jax.algos.core.sampled_inputs import input_table
from fhc_jax.algos.core.tabular_rollout import (
    Batch,
    TabularModel,
    observation_table,
    rollout_policy_table,
    tabular_model,
    value_scale,
)
from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.cmdp.transitions import SparseTransitions
from fhc_jax.envs.base import Environment
from fhc_jax.envs.encoders import Encoder, make_encoder
from fhc_jax.envs.wrappers import ScaledSignals

Array = jax.Array

#: ``Config.budget``: "auto" (counts where they are exact, else continuous), "count", "continuous"
BUDGETS = ("auto", "count", "continuous")

#: the network inputs of the base state (z is appended): encoders ("xy", "xyt", "one_hot") or
#: the environment's own observation ("env", "env_t": with h / H appended)
OBSERVATIONS = ppo.OBSERVATIONS

#: :func:`detect_cost_unit` tries the units c_min / d for d = 1 .. this (c_min the least
#: positive stage cost)
MAX_UNIT_DIVISOR = 16

#: the count representation only while the augmented policy table has at most this many
#: entries (H S B A; B budget levels); "auto" takes the continuous budget above it
MAX_COUNT_ENTRIES = 1 << 24

#: relative tolerance of "an integer multiple of the unit" (float32 models)
UNIT_TOLERANCE = 1e-5


@hyperparameters
class Config(ppo.Config):
    """PPO-Lagrangian's :class:`~fhc_jax.algos.ppo_lagrangian.Config` (every field, same
    meaning; ``observation`` is the input of the base state, the budget z is appended), with
    its own defaults for K (256), N (300), ``pid_kp`` (0.25), ``pid_ki`` (0.075) and ``eval_every`` (50); the
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
            environment supports), "env" (its own observation), "env_t" (with h / H), or
            "auto" (the default: "xy" on a spatial tabular environment, else "env").
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
    unsafe_reward: float = numeric(0.0, low=0.0)
    budget: str = static("auto", choices=BUDGETS)
    cost_unit: float = static(0.0, types=(float, int), description="a number >= 0 (0: detect the unit)")

    def __post_init__(self):
        check_initial_log_std(self)
        if isinstance(self.cost_unit, bool) or not (math.isfinite(self.cost_unit) and self.cost_unit >= 0):
            raise ValueError(f"Config.cost_unit must be a finite number >= 0 (0: detect the unit), "
                             f"found {self.cost_unit!r}")


# ----------------------------------------------------------------------------- cost counts


def budget_levels(alpha: float, cost_unit: float = 1.0) -> int:
    """Number of tracked cost counts, C + 1 with C = ceil(alpha / unit) + 1 (counts 0..C)."""
    if not alpha > 0:
        raise ValueError(f"saute: the threshold alpha must be > 0, found {alpha!r}")
    return math.ceil(alpha / cost_unit - 1e-9) + 2


def _transition_costs(env: Environment, params: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact model's kernel as successor lists and the stage cost of constraint 0 paid on
    every transition, host-side, float64: (next_states (S,A,N) or (H,S,A,N), probabilities
    (same), costs (H, S, A, N)), in the learners' rollout semantics (per arrival, per
    (h, s, a) or per (h, s, a, s'))."""
    cmdp = env.to_cmdp(params)
    model = tabular_model(env, params, dtype=jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    if isinstance(cmdp.transitions, SparseTransitions):
        nxt = np.asarray(cmdp.transitions.next_states)
        prob = np.asarray(cmdp.transitions.probabilities, np.float64)
    else:
        prob = np.asarray(cmdp.transitions, np.float64)
        nxt = np.broadcast_to(np.arange(cmdp.num_states, dtype=np.int32), prob.shape)
    h, s, a = cmdp.horizon, cmdp.num_states, cmdp.num_actions
    full = nxt if nxt.ndim == 4 else np.broadcast_to(nxt, (h,) + nxt.shape)
    costs = np.asarray(model.costs, np.float64)[0]
    hh = np.arange(h)[:, None, None, None]
    if model.signal == "arrival":
        g = costs[hh, full]
    elif model.signal == "expected":
        g = np.broadcast_to(costs[..., None], full.shape)
    else:
        g = costs[hh, np.arange(s)[None, :, None, None], np.arange(a)[None, None, :, None], full]
    return nxt, prob, g


def _multiples(values: np.ndarray, unit: float) -> bool:
    """Whether every value is a non-negative integer multiple of ``unit`` (relative tolerance)."""
    units = values / unit
    return bool(np.all(units > -UNIT_TOLERANCE)
                 and np.all(np.abs(units - np.round(units)) <= UNIT_TOLERANCE * np.maximum(1.0, np.abs(units))))


def detect_cost_unit(env: Environment, params: Any = None) -> float | None:
    """The unit of the cost counts of ``env``'s exact model: the largest u = c_min / d
    (c_min the least positive stage cost of constraint 0, d = 1 .. :data:`MAX_UNIT_DIVISOR`)
    of which every stage cost is a non-negative integer multiple (relative tolerance
    :data:`UNIT_TOLERANCE`); the threshold alpha when every stage cost is 0; None when there
    is no such unit (negative costs, or costs that are not multiples of one unit). In the
    environment's units, host-side. Terminal costs need not be multiples (they only enter the
    reshaping of the terminal reward).

    Raises:
        ValueError: an environment without a tabular exact model.
    """
    if not judged_exactly(env):
        raise ValueError(f"detect_cost_unit: {env.name} declares no tabular exact model (is_tabular and "
                         "has_exact_model)")
    params = env.default_params if params is None else params
    values = np.unique(_transition_costs(env, params)[2])
    if values.size == 0 or np.min(values) < -UNIT_TOLERANCE * max(1.0, float(np.max(np.abs(values)))):
        return None
    top = float(np.max(np.abs(values)))
    positive = values[values > UNIT_TOLERANCE * top] if top > 0 else values[:0]
    if positive.size == 0:
        return float(np.asarray(env.thresholds(params), np.float64).reshape(-1)[0])
    least = float(positive[0])
    for d in range(1, MAX_UNIT_DIVISOR + 1):
        if _multiples(values, least / d):
            return least / d
    return None


@struct.dataclass
class SauteState:
    """An augmented state: the base state and the (capped) cost count c."""

    base: Any
    count: Array

    @property
    def time(self) -> Array:
        return self.base.time


@dataclasses.dataclass(frozen=True)
class BudgetEncoder(Encoder):
    """The base environment's encoder of the base state, then the budget z, shape (D + 1,)."""

    base_encoder: Encoder = None
    alpha: float = 1.0
    unit: float = 1.0

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"{self.base_encoder.name}+z"

    def __call__(self, env, state) -> Array:
        x = jnp.atleast_1d(self.base_encoder(env.base, state.base).astype(jnp.float32))
        z = (self.alpha - state.count.astype(jnp.float32) * self.unit) / self.alpha
        return jnp.concatenate([x, z[None]])

    def shape(self, env) -> tuple[int, ...]:
        return (int(np.prod(self.base_encoder.shape(env.base), dtype=int)) + 1,)


class SauteEnv(Environment):
    """``base`` with the state augmented by the cost count c (budget z = (alpha - c unit) /
    alpha), an exact finite lift: the same rewards, costs and dynamics, tabular over
    (s, c) with index s B + c (B = :func:`budget_levels`). Rewards are NOT reshaped here (the
    judge needs the true task); :func:`reshaped_rewards` does it for training.

    Args:
        base: a tabular environment with an exact model and one constraint.
        alpha: the budget (default: the threshold of ``base.default_params``).
        observation: "index", "one_hot" (of the augmented index), or a base encoder name
            ("xy", "xyt", "one_hot" of the base state ... use ``base_observation``) plus z.
        cost_unit: costs must be non-negative integer multiples of it.
    """

    def __init__(self, base: Environment, alpha: float | None = None, observation: str = "index",
                 base_observation: str | None = None, cost_unit: float = 1.0):
        if not (base.is_tabular and base.has_exact_model):
            raise ValueError(f"SauteEnv: {type(base).__name__} declares no tabular exact model")
        if base.num_constraints != 1:
            raise ValueError(f"SauteEnv: one constraint is supported, found {base.num_constraints}")
        if alpha is None:
            alpha = float(np.asarray(base.to_cmdp(base.default_params).thresholds)[0])
        self.base, self.alpha, self.unit = base, float(alpha), float(cost_unit)
        self.levels = budget_levels(self.alpha, self.unit)
        if base_observation is None:
            self.supported_observations = ("index", "one_hot")
            self._init_encoder(observation)
        else:
            enc = make_encoder(type(base).__name__, base_observation, base.supported_observations)
            self._encoder = BudgetEncoder(enc, self.alpha, self.unit)

    horizon = property(lambda self: self.base.horizon)
    num_actions = property(lambda self: self.base.num_actions)
    num_constraints = property(lambda self: 1)
    num_states = property(lambda self: self.base.num_states * self.levels)
    default_params = property(lambda self: self.base.default_params)
    has_exact_model = property(lambda self: True)
    is_tabular = property(lambda self: True)
    has_uniform_noise = property(lambda self: self.base.has_uniform_noise)

    def _static_config(self) -> tuple:
        return (self.base, self.alpha, self.unit, self._encoder)

    def reset(self, key, params):
        _, state = self.base.reset(key, params)
        state = SauteState(state, jnp.zeros((), jnp.int32))
        return self.observation(state, params), state

    def noise(self, key, params):
        return self.base.noise(key, params)

    def noise_from_uniform(self, u, params):
        return self.base.noise_from_uniform(u, params)

    def transition(self, noise, state, action, params):
        _, nxt, r, g, done, info = self.base.transition(noise, state.base, action, params)
        count = jnp.minimum(state.count + jnp.round(g[0] / self.unit).astype(jnp.int32), self.levels - 1)
        new = SauteState(nxt, count)
        return self.observation(new, params), new, r, g, done, info

    def terminal_reward(self, state, params):
        return self.base.terminal_reward(state.base, params)

    def terminal_costs(self, state, params):
        return self.base.terminal_costs(state.base, params)

    def thresholds(self, params):
        return self.base.thresholds(params)

    def state_index(self, state) -> Array:
        return self.base.state_index(state.base) * self.levels + state.count

    def state_at(self, index, time):
        index = jnp.asarray(index, jnp.int32)
        return SauteState(self.base.state_at(index // self.levels, time), index % self.levels)

    def budget(self, count: Array) -> Array:
        """z of a cost count, (alpha - c unit) / alpha."""
        return (self.alpha - jnp.asarray(count, jnp.float32) * self.unit) / self.alpha

    def count_increments(self, params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The base kernel as successor lists and the count increment of every transition,
        host-side: (next_states (S,A,N) or (H,S,A,N), probabilities (same), increments
        (H, S, A, N) int32), increments = realised cost / unit (the learners' rollout
        semantics: per arrival, per (h, s, a) or per (h, s, a, s')).

        Raises:
            ValueError: costs that are not non-negative integer multiples of the unit.
        """
        nxt, prob, g = _transition_costs(self.base, params)
        if not _multiples(g, self.unit):
            raise ValueError("SauteEnv: the costs must be non-negative integer multiples of cost_unit "
                             f"= {self.unit:g} for an exact budget state")
        return nxt, prob, np.round(g / self.unit).astype(np.int32)

    def to_cmdp(self, params) -> TabularCMDP:
        """The exact augmented model (host-side): a time-varying sparse kernel over
        (s, c) -> (s', min(c + increment, C)), the base rewards and costs repeated over c, the
        initial mass at c = 0."""
        cmdp = self.base.to_cmdp(params)
        nxt, prob, inc = self.count_increments(params)
        b, h = self.levels, cmdp.horizon
        nxt = nxt if nxt.ndim == 4 else np.broadcast_to(nxt, (h,) + nxt.shape)
        prob = prob if prob.ndim == 4 else np.broadcast_to(prob, (h,) + prob.shape)
        c = np.arange(b)[None, None, :, None, None]
        new_c = np.minimum(c + inc[:, :, None], b - 1)  # (H, S, B, A, N)
        next_aug = nxt[:, :, None] * b + new_c
        shape = (h, cmdp.num_states * b, cmdp.num_actions, nxt.shape[-1])
        rep = lambda x, axis: np.repeat(np.asarray(x), b, axis=axis)
        init = np.zeros(cmdp.num_states * b)
        init[::b] = np.asarray(cmdp.initial_distribution)
        rewards = cmdp.expected_rewards() if cmdp.rewards.ndim == 4 else cmdp.rewards
        costs = cmdp.expected_costs() if cmdp.costs.ndim == 5 else cmdp.costs
        return TabularCMDP(
            transitions=SparseTransitions(next_states=next_aug.reshape(shape).astype(np.int32),
                                          probabilities=np.broadcast_to(prob[:, :, None], new_c.shape).reshape(shape)),
            rewards=rep(rewards, -2), costs=rep(costs, -2), terminal_rewards=rep(cmdp.terminal_rewards, 0),
            terminal_costs=rep(cmdp.terminal_costs, 1), thresholds=cmdp.thresholds, initial_distribution=init,
        )


def augmented_cmdp(env: Environment, params: Any = None, cost_unit: float = 1.0) -> TabularCMDP:
    """The exact model of ``env`` augmented with the cost count (:meth:`SauteEnv.to_cmdp`);
    ``cost_unit`` in ``env``'s units (:func:`detect_cost_unit` finds one)."""
    params = env.default_params if params is None else params
    alpha = float(np.asarray(env.to_cmdp(params).thresholds)[0])
    return SauteEnv(env, alpha, cost_unit=cost_unit).to_cmdp(params)


# ----------------------------------------------------------------------------- continuous budget


@struct.dataclass
class BudgetState:
    """A state of :class:`BudgetEnv`: the base state and the cost paid so far, (M,)."""

    base: Any
    spent: Array

    @property
    def time(self) -> Array:
        return self.base.time


class BudgetEnv(Environment):
    """``env`` with its state augmented by the cost paid so far and the remaining budget
    z^(k) = (alpha^(k) - cost so far) / alpha^(k) (Saute's safety state, discount 1, one per
    constraint) appended to its observation: (x, z), (D + M,) float32, x the base observation.
    Rewards, costs, terminal signals and dynamics are ``env``'s, unreshaped (the judge needs
    the true task). A policy of (x, z) that is played here tracks its budget from the costs
    it has paid; :func:`policy` plays Saute-Lagrangian's. Not tabular (z is a real number);
    the one-uniform noise of ``env`` is kept.

    Args:
        env: the environment (flat observations, or tabular with the encoder below).
        alpha: the budgets alpha^(k) > 0, (M,) (default: ``env.thresholds(env.default_params)``).
        observation: x: "env" (``env``'s own observation) or the name of an encoder ``env``
            supports ("xy", "xyt", "one_hot").
    Raises:
        ValueError: a threshold that is not > 0, an unsupported or non-flat observation.
    """

    def __init__(self, env: Environment, alpha: Any = None, observation: str = "env"):
        m = env.num_constraints
        alpha = env.thresholds(env.default_params) if alpha is None else alpha
        alpha = np.asarray(alpha, np.float64).reshape(-1)
        if alpha.shape != (m,) or not np.all(np.isfinite(alpha) & (alpha > 0)):
            raise ValueError(f"saute: the budget needs thresholds alpha > 0 (M = {m} of them), found "
                             f"{alpha.tolist()} for {env.name}")
        if observation == "env":
            encoder, shape = None, tuple(env.observation_shape)
        elif observation in env.supported_observations and observation in OBSERVATIONS:
            encoder = make_encoder(env.name, observation, env.supported_observations)
            shape = tuple(encoder.shape(env))
        else:
            valid = ", ".join(repr(o) for o in ("env", *env.supported_observations) if o in OBSERVATIONS)
            raise ValueError(f"saute: the observation of the base state must be one of {valid} for {env.name}, "
                             f"found {observation!r}")
        if len(shape) > 1:
            raise ValueError(f"saute: the networks take flat observations, but {env.name}'s have shape {shape}; "
                             "flatten them in the environment")
        self.env, self.alpha, self.base_observation = env, tuple(float(a) for a in alpha), observation
        self._base_encoder, self._base_dim = encoder, int(np.prod(shape, dtype=int))

    horizon = property(lambda self: self.env.horizon)
    num_actions = property(lambda self: self.env.num_actions)
    action_space = property(lambda self: self.env.action_space)
    num_constraints = property(lambda self: self.env.num_constraints)
    default_params = property(lambda self: self.env.default_params)
    name = property(lambda self: self.env.name)
    has_uniform_noise = property(lambda self: self.env.has_uniform_noise)
    observation_shape = property(lambda self: (self._base_dim + self.env.num_constraints,))
    observation_dtype = property(lambda self: jnp.float32)
    supported_observations = ("env",)

    def _static_config(self) -> tuple:
        return (self.env, self.alpha, self.base_observation)

    def __repr__(self) -> str:
        return f"BudgetEnv({self.env!r}, alpha={list(self.alpha)}, observation={self.base_observation!r})"

    def base_input(self, state: Any, params: Any) -> Array:
        """x, the observation of a base state, (D,) float32."""
        x = self.env.observation(state, params) if self._base_encoder is None else self._base_encoder(self.env, state)
        return jnp.asarray(x, jnp.float32).reshape(self._base_dim)

    def budget(self, state: BudgetState) -> Array:
        """z of a state, (alpha - cost so far) / alpha, (M,)."""
        alpha = jnp.asarray(self.alpha, jnp.float32)
        return (alpha - state.spent) / alpha

    def observation(self, state: BudgetState, params: Any) -> Array:
        return jnp.concatenate([self.base_input(state.base, params), self.budget(state)])

    def thresholds(self, params: Any) -> Array:
        return self.env.thresholds(params)

    def reset(self, key: Array, params: Any) -> tuple[Array, BudgetState]:
        _, base = self.env.reset(key, params)
        state = BudgetState(base, jnp.zeros((self.env.num_constraints,), jnp.float32))
        return self.observation(state, params), state

    def noise(self, key: Array, params: Any) -> Any:
        return self.env.noise(key, params)

    def noise_from_uniform(self, u: Array, params: Any) -> Any:
        return self.env.noise_from_uniform(u, params)

    def transition(self, noise: Any, state: BudgetState, action: Array, params: Any):
        _, nxt, r, g, done, info = self.env.transition(noise, state.base, action, params)
        new = BudgetState(nxt, state.spent + jnp.asarray(g, jnp.float32))
        return self.observation(new, params), new, r, g, done, info

    def terminal_reward(self, state: BudgetState, params: Any) -> Array:
        return self.env.terminal_reward(state.base, params)

    def terminal_costs(self, state: BudgetState, params: Any) -> Array:
        return self.env.terminal_costs(state.base, params)


def _inner(env: Environment) -> Environment:
    """``env`` without a :class:`~fhc_jax.envs.wrappers.ScaledSignals` around it."""
    return env.env if isinstance(env, ScaledSignals) else env


def _budget_env(env: Environment) -> BudgetEnv | None:
    """The :class:`BudgetEnv` that ``env`` is (inside a ScaledSignals or not), or None."""
    inner = _inner(env)
    return inner if isinstance(inner, BudgetEnv) else None


# ----------------------------------------------------------------------------- the reshaped reward


def reshape(batch: Batch, z_after: Array, alpha: Array, unsafe_reward: Array) -> tuple[Array, Array]:
    """Saute's reward on a batch: r~_h = r_h while every budget after the step z_{h+1} is > 0,
    else min(r_h, -``unsafe_reward``) (the authors' -``unsafe_reward``, but a penalty worse than
    it is kept: exhausting the budget must not forgive it); the terminal reward likewise with
    the terminal cost counted, z_H - g_H / alpha. ``z_after`` (H, K, M), ``alpha`` (M,) in the
    batch's units. Returns ((H, K), (K,))."""
    rewards = jnp.where(jnp.all(z_after > 0, axis=-1), batch.rewards, jnp.minimum(batch.rewards, -unsafe_reward))
    z_final = z_after[-1] - batch.terminal_costs / alpha
    return rewards, jnp.where(jnp.all(z_final > 0, axis=-1), batch.terminal_rewards,
                              jnp.minimum(batch.terminal_rewards, -unsafe_reward))


def reshaped_rewards(batch: Batch, levels: int, alpha: Array, unit: float, unsafe_reward: Array) -> tuple[Array, Array]:
    """:func:`reshape` on a batch over augmented states (index s B + c) of one constraint, the
    budget after the step z_{h+1} = (alpha - c_{h+1} unit) / alpha. Returns ((H, K), (K,))."""
    z = (alpha - (batch.states[1:] % levels).astype(jnp.float32) * unit) / alpha
    return reshape(batch, z[..., None], jnp.reshape(jnp.asarray(alpha, jnp.float32), (1,)), unsafe_reward)


# ----------------------------------------------------------------------------- setup


@dataclasses.dataclass(frozen=True)
class Setup:
    """The PPO-Lagrangian setup (``ppo``) and the budget's representation.

    Attributes:
        ppo: PPO-Lagrangian's setup over the augmented inputs (tabular rows over (s, c) for
            "count"; the sampled path over :class:`BudgetEnv` for "continuous").
        env: the augmented environment, :class:`SauteEnv` ("count") or :class:`BudgetEnv`.
        budget: "count" or "continuous".
        kernel, initial: "count": the compact kernel of the exact marginalisation
            (next_states, probabilities, increments) and the augmented initial distribution.
        base_inputs: "continuous" on tabular states: x_h(s) of every stage and state, (H, S, D)
            (the reported policy at states the estimate did not visit), else None.
        table_episodes: "continuous" on tabular states: episodes of the estimated Markov policy.
        budget_units: "count": q = alpha / unit, the budget in cost units.
    """

    ppo: ppo.Setup
    env: Environment
    budget: str
    budget_units: float = 0.0
    kernel: tuple | None = None
    initial: Array | None = None
    base_inputs: Array | None = None
    table_episodes: int = 0


def _resolve_observation(env: Environment, observation: str) -> str:
    """``Config.observation = "auto"``: "xy" on a tabular environment that supports it (a
    spatial one), else "env"; any other value unchanged."""
    if observation != "auto":
        return observation
    return "xy" if env.is_tabular and "xy" in env.supported_observations else "env"


def _check_observation(env: Environment, observation: str) -> None:
    """Whether ``observation`` can be the input of ``env``'s base state (ValueError if not)."""
    valid = [o for o in (*env.supported_observations, *ENV_OBSERVATIONS) if o in OBSERVATIONS]
    if observation not in valid:
        raise ValueError(f"saute: Config.observation must be one of {', '.join(map(repr, valid))} or 'auto' for "
                         f"{env.name}, found {observation!r}")
    if observation in ENV_OBSERVATIONS and len(env.observation_shape) != 1:
        raise ValueError(f"saute: Config.observation = {observation!r}: the networks take flat observations, but "
                         f"{env.name}'s have shape {tuple(env.observation_shape)}; flatten them in the environment")


def _thresholds(env: Environment, params: Any) -> np.ndarray:
    alpha = np.asarray(env.thresholds(params), np.float64).reshape(-1)
    if not np.all(alpha > 0):
        raise ValueError(f"saute: the remaining budget z = (alpha - cost so far) / alpha needs thresholds alpha > 0, "
                         f"found {alpha.tolist()} for {env.name}")
    return alpha


def resolve_budget(env: Environment, params: Any, config: Config) -> tuple[str, float]:
    """The representation of the budget on ``env`` (host-side): ("count", q) with q = alpha /
    unit (the budget in cost units, unit-free), or ("continuous", 0.0) (module docstring).
    ``env`` may be the learner's scaled copy (:class:`~fhc_jax.envs.wrappers.ScaledSignals`):
    the unit is found, or ``cost_unit`` read, in the environment's own units.

    Raises:
        ValueError: "count" asked for (``budget``, ``path="tabular"`` or ``cost_unit``) where
            it does not apply, with the reason; ``budget="count"`` with ``path="sampled"``.
    """
    want = config.budget
    if config.path == "sampled":
        if want == "count":
            raise ValueError("saute: Config.budget = 'count' needs the tabular path, but Config.path = 'sampled'")
        want = "continuous"
    if want == "continuous":
        if config.path == "tabular":
            raise ValueError("saute: Config.path = 'tabular' needs cost counts, but Config.budget = 'continuous' "
                             "(the continuous budget takes the sampled path)")
        return "continuous", 0.0
    asked = want == "count" or config.path == "tabular" or config.cost_unit > 0
    base = _inner(env)
    reason, q = None, 0.0
    if not judged_exactly(base):
        reason = f"{base.name} declares no tabular exact model"
    elif base.num_constraints != 1:
        reason = f"cost counts track one constraint, {base.name} has {base.num_constraints}"
    else:
        alpha = float(_thresholds(base, params)[0])
        unit = config.cost_unit if config.cost_unit > 0 else detect_cost_unit(base, params)
        if unit is None:
            reason = (f"the stage costs of {base.name} are not non-negative integer multiples of one unit "
                      "(declare Config.cost_unit if they are)")
        elif config.cost_unit > 0 and not _multiples(_transition_costs(base, params)[2], unit):
            reason = f"the stage costs of {base.name} are not non-negative integer multiples of Config.cost_unit = {unit:g}"
        else:
            levels = budget_levels(alpha, unit)
            entries = base.horizon * base.num_states * levels * base.num_actions
            if entries > MAX_COUNT_ENTRIES:
                reason = (f"{levels} budget levels (alpha / unit = {alpha / unit:.4g}) make an augmented table of "
                          f"{entries} entries, more than {MAX_COUNT_ENTRIES}")
            else:
                q = alpha / unit
    if reason is None:
        return "count", q
    if asked:
        what = "Config.budget = 'count'" if want == "count" else (
            "Config.path = 'tabular'" if config.path == "tabular" else f"Config.cost_unit = {config.cost_unit:g}")
        raise ValueError(f"saute: {what} asks for exact cost counts, but {reason}; use Config.budget = 'continuous' "
                         "(or 'auto')")
    return "continuous", 0.0


def _count_setup(env: Environment, params: Any, spec: NetworkSpec, units: float, config: Config | None) -> Setup:
    """The count representation's setup: PPO's tabular path of the networks ``spec`` (its
    ``observation`` Saute's) over the augmented states (s, c), rows = (x_h(s), z(c)), and the
    marginalisation kernel (host-side)."""
    alpha = float(_thresholds(env, params)[0])
    senv = SauteEnv(env, alpha, cost_unit=alpha / units)
    h, s, b = senv.horizon, env.num_states, senv.levels
    base_obs, net_obs = _network_observation(spec.observation)
    base = np.asarray(input_table(env, params, base_obs), np.float32)[:h].reshape(h, s, -1)  # (H, S, D)
    z = np.asarray(senv.budget(np.arange(b)), np.float32)
    parts = [np.broadcast_to(base[:, :, None], (h, s, b, base.shape[-1])), np.broadcast_to(z[None, None, :, None], (h, s, b, 1))]
    if net_obs == "env_t":  # (x, z, h / H): the input of the same network played in BudgetEnv
        parts.append(np.broadcast_to((np.arange(h, dtype=np.float32) / h)[:, None, None, None], (h, s, b, 1)))
    table = np.concatenate(parts, axis=-1).reshape(h, s * b, -1)
    per_stage = not np.array_equal(table, np.broadcast_to(table[:1], table.shape))
    rows = table.reshape(h * s * b, -1) if per_stage else table[0]
    critic_rows, critic_per_stage = rows, per_stage
    if config is not None and config.critic_time and not per_stage:
        t = np.broadcast_to((np.arange(h, dtype=np.float32) / h)[:, None, None], (h, s * b, 1))
        critic_rows, critic_per_stage = np.concatenate([table, t], axis=-1).reshape(h * s * b, -1), True
    kernel, beta = _kernel(senv, params)
    if config is not None:
        n = h * config.episodes_per_iteration
        if config.num_minibatches > n:
            raise ValueError(f"saute: Config.num_minibatches must be <= H K = {n}, found {config.num_minibatches}")
        pick = lambda u: config.update_form if config.update_form != "auto" else (
            "table" if config.num_minibatches * u <= n else "samples")
        base_model = tabular_model(env, params)
        kw = {"form": pick(rows.shape[0]), "critic_form": pick(critic_rows.shape[0]),
              "model": _rollout_model(senv, params, base_model, beta),
              "thresholds": jnp.asarray(env.thresholds(params), jnp.float32).reshape(-1),
              "value_scale": jnp.asarray(value_scale(base_model))}
    else:
        kw = {"form": "table", "critic_form": "table"}
    setup_ppo = ppo.Setup(modules=ppo._modules(env.num_actions, 1, spec),
                          rows=jnp.asarray(rows, jnp.float32), per_stage=per_stage,
                          critic_rows=jnp.asarray(critic_rows, jnp.float32), critic_per_stage=critic_per_stage,
                          horizon=h, num_states=s * b, num_actions=env.num_actions, observation=spec.observation, **kw)
    return Setup(ppo=setup_ppo, env=senv, budget="count", budget_units=units, kernel=kernel,
                 initial=jnp.asarray(beta, jnp.float32))


def _network_observation(observation: str) -> tuple[str, str]:
    """(the base observation of :class:`BudgetEnv`, PPO's input over it) of a Saute observation:
    "env_t" appends the stage after z; encoders encode the base state."""
    if observation in ENV_OBSERVATIONS:
        return "env", observation
    return observation, "env"


def _continuous_setup(env: Environment, params: Any, spec: NetworkSpec, table_episodes: int,
                      config: Config | None) -> Setup:
    """The continuous representation's setup: PPO's sampled path of the networks ``spec`` (its
    ``observation`` Saute's) over :class:`BudgetEnv`
    (``env`` itself when it already is one), and on tabular states the base inputs of the
    estimated Markov policy (host-side)."""
    base_obs, net_obs = _network_observation(spec.observation)
    benv = _budget_env(env)
    if benv is None:  # a tabular environment: the budget is tracked here
        benv = train_env = BudgetEnv(env, _thresholds(env, params), base_obs)
    elif benv.base_observation != base_obs:
        raise ValueError(f"saute: the policy reads the base observation {base_obs!r} (Config.observation = "
                         f"{spec.observation!r}), but this BudgetEnv gives {benv.base_observation!r}; build it as "
                         f"saute.BudgetEnv(env, observation={base_obs!r})")
    else:  # the environment the learner was handed already tracks it (in its ScaledSignals or not)
        train_env = env
    if config is not None and config.num_minibatches > env.horizon * config.episodes_per_iteration:
        raise ValueError(f"saute: Config.num_minibatches must be <= H K = {env.horizon * config.episodes_per_iteration}, "
                         f"found {config.num_minibatches}")
    setup_ppo = ppo._sampled_setup(train_env, params, spec.replace(observation=net_obs), config)
    base_inputs = None
    base = benv.env
    if base.is_tabular:
        name = None if base_obs == "env" else base_obs
        base_inputs = jnp.asarray(observation_table(base, params, name), jnp.float32)[: base.horizon]
        base_inputs = base_inputs.reshape(base.horizon, base.num_states, -1)
    return Setup(ppo=setup_ppo, env=train_env, budget="continuous", base_inputs=base_inputs,
                 table_episodes=table_episodes)


def _kernel(senv: SauteEnv, params) -> tuple[tuple, np.ndarray]:
    """The compact kernel of the marginalisation and the augmented initial distribution."""
    nxt, prob, inc = senv.count_increments(params)
    beta = np.zeros(senv.num_states)
    beta[::senv.levels] = np.asarray(senv.base.to_cmdp(params).initial_distribution)
    return (jnp.asarray(nxt), jnp.asarray(prob, jnp.float32), jnp.asarray(inc)), beta


def _rollout_model(senv: SauteEnv, params, base: TabularModel, beta: np.ndarray) -> TabularModel:
    """The augmented env's rollout model: environments with one-uniform noise are stepped
    through :meth:`SauteEnv.transition` (no augmented kernel is built); others get the full
    augmented successor table (fine for small CMDPs)."""
    if not senv.has_uniform_noise:
        return tabular_model(senv, params)
    b = senv.levels
    rep = lambda x, axis: jnp.repeat(jnp.asarray(x), b, axis=axis)
    dummy = jnp.zeros((1, 1, 1))
    return TabularModel(next_states=dummy.astype(jnp.int32), cdf=dummy, last=dummy[0].astype(jnp.int32),
                        rewards=jnp.zeros((senv.horizon, 1)), costs=jnp.zeros((1, senv.horizon, 1)),
                        terminal_rewards=rep(base.terminal_rewards, 0), terminal_costs=rep(base.terminal_costs, 1),
                        initial_cdf=jnp.asarray(np.cumsum(beta), jnp.float32), signal="arrival",
                        time_varying=False, step_env=senv, step_params=params)


def setup(env, params, config: Config) -> Setup:
    """The budget's representation (:func:`resolve_budget`), the augmented inputs, rollout
    model and (counts) marginalisation kernel (host-side).

    Raises:
        ValueError: box actions on an environment with tabular states (its reported Markov
            policy needs finitely many actions), an unsupported observation, thresholds that
            are not > 0, counts asked for where they do not apply (the reason), too many
            minibatches.
    """
    _check_box_actions(env)
    handed = _budget_env(env)  # a BudgetEnv the learner was handed (no tabular exact model), or None
    observation = _resolve_observation(_inner(env) if handed is None else handed.env, config.observation)
    config = config.replace(observation=observation)
    if handed is not None:
        if config.budget == "count" or config.path == "tabular" or config.cost_unit > 0:
            raise ValueError(f"saute: {env.name} has no tabular exact model: its budget is continuous; leave "
                             "Config.budget, path and cost_unit at their defaults")
        return _continuous_setup(env, params, NetworkSpec.of(config), config.eval_episodes, config)
    _check_observation(env, observation)
    _thresholds(env, params)
    budget, units = resolve_budget(env, params, config)
    if budget == "count":
        return _count_setup(env, params, NetworkSpec.of(config), units, config)
    return _continuous_setup(env, params, NetworkSpec.of(config), config.eval_episodes, config)


def _check_box_actions(env: Environment) -> None:
    """ValueError (:func:`box_actions_refusal`) for box actions on tabular states."""
    if env.has_box_actions and _inner(env).is_tabular:
        raise ValueError(box_actions_refusal(env))


def box_actions_refusal(env) -> str:
    """Why Saute-Lagrangian refuses ``env``, with tabular states and box actions (the message
    of its ValueError)."""
    return (f"saute: on an environment with tabular states Saute-Lagrangian reports a Markov policy table, which "
            f"needs finitely many actions, but {env.name} has continuous (box) actions; give it discrete actions, "
            f"or drop its tabular states (then the budget-tracking Gaussian policy is judged by Monte-Carlo in "
            f"saute.BudgetEnv)")


def policy_setup(env, params, train_state) -> Setup:
    """What :func:`logits` and :func:`observation_logits` need, rebuilt from the train state
    (budget representation, input and architecture) and ``params`` (the threshold fixes the
    budget levels)."""
    if train_state.budget == "count" and _budget_env(env) is None:
        return _count_setup(env, params, train_state.network, train_state.budget_units, None)
    return _continuous_setup(env, params, train_state.network, train_state.table_episodes, None)


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
    return TrainState(**{**{f.name: getattr(st, f.name) for f in dataclasses.fields(st)},
                         "network": st.network.replace(observation=_saute_observation(setup))},
                      budget=setup.budget, budget_units=float(setup.budget_units), table_episodes=setup.table_episodes)


def _saute_observation(setup: Setup) -> str:
    """The resolved Saute observation a setup was built for."""
    if setup.budget == "count":
        return setup.ppo.observation
    benv = _budget_env(setup.env)
    return setup.ppo.observation if benv.base_observation == "env" else benv.base_observation


def augmented_logits(train_state: TrainState, setup: Setup) -> Array:
    """The network's logits over the augmented states of the count representation, (H, S B, A)."""
    return ppo.logits(train_state, setup.ppo)


def observation_logits(train_state: TrainState, setup: Setup, observation: Array, h: Array) -> Array:
    """The network's logits at one observation (x, z) of :class:`BudgetEnv` at stage h, (A,)
    (the continuous representation)."""
    return ppo.observation_logits(train_state, setup.ppo, observation, h)


def count_floor(budget_units: float) -> float:
    """The least budget the count representation's network sees, z(C) = 1 - C / q with
    q = alpha / unit = ``budget_units`` and C = :func:`budget_levels` - 1 (the capped count)."""
    return 1.0 - (budget_levels(budget_units, 1.0) - 1) / budget_units


def _capped_logits(train_state: TrainState, setup: Setup, floor: float, observation: Array, h: Array) -> Array:
    """:func:`observation_logits` with the budget (the last entry of the observation) raised to
    ``floor``: a policy trained on capped counts played in :class:`BudgetEnv`."""
    return observation_logits(train_state, setup, observation.at[-1].max(floor), h)


def markov_policy(table: Array, env, params: Any = None, cost_unit: float = 1.0) -> Array:
    """The occupancy-equivalent Markov policy on ``env``'s states of a policy ``table``
    (H, S B, A) over the augmented states of ``SauteEnv(env)`` (:func:`markov_equivalent`)."""
    params = env.default_params if params is None else params
    alpha = float(np.asarray(env.to_cmdp(params).thresholds)[0])
    senv = SauteEnv(env, alpha, cost_unit=cost_unit)
    kernel, beta = _kernel(senv, params)
    return markov_equivalent(jnp.asarray(table, jnp.float32), kernel, jnp.asarray(beta, jnp.float32), senv.levels)


def markov_equivalent(table: Array, kernel: tuple, initial: Array, levels: int) -> Array:
    """The occupancy-equivalent Markov policy on the base states (module docstring), (H, S, A),
    by one exact forward pass of the augmented chain; unvisited (h, s) take the c = 0 row.
    ``kernel`` = (next_states, probabilities, increments) (:meth:`SauteEnv.count_increments`),
    ``initial`` the augmented initial distribution (S B,)."""
    nxt, prob, inc = kernel
    b = levels
    h, sb, a = table.shape
    s = sb // b
    pol = table.reshape(h, s, b, a)
    counts = jnp.arange(b, dtype=jnp.int32)[None, :, None, None]

    def forward(d, xs):
        pol_h, inc_h, nxt_h, p_h = xs
        mass = d[:, :, None] * pol_h  # (S, B, A)
        flow = mass[..., None] * p_h[:, None]  # (S, B, A, N)
        tgt_s = jnp.broadcast_to(nxt_h[:, None], flow.shape)
        tgt_c = jnp.minimum(counts + inc_h[:, None], b - 1)
        return jnp.zeros_like(d).at[tgt_s, tgt_c].add(flow), jnp.sum(mass, axis=1)

    stage = lambda x: x if x.ndim == 4 else jnp.broadcast_to(x, (h,) + x.shape)
    _, joint = jax.lax.scan(forward, initial.reshape(s, b), (pol, inc, stage(nxt), stage(prob)))
    total = jnp.sum(joint, axis=-1, keepdims=True)
    return jnp.where(total > 0, joint / jnp.where(total > 0, total, 1.0), pol[:, :, 0])


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
    benv, params, h_max = _budget_env(setup.env), setup.ppo.params, setup.env.horizon
    train_env, base = setup.env, benv.env
    s_count, m = base.num_states, base.num_constraints
    logits_of = lambda obs, h: observation_logits(train_state, setup, obs, h)

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

    index, probs, z = jax.vmap(episode)(jax.random.split(table_key(), setup.table_episodes))  # (K, H), (K, H, A), (K, H, M)
    hs = jnp.broadcast_to(jnp.arange(h_max)[None, :], index.shape)
    joint = jnp.zeros((h_max, s_count, probs.shape[-1]), jnp.float32).at[hs, index].add(probs)
    visits = jnp.zeros((h_max, s_count), jnp.float32).at[hs, index].add(1.0)
    z_mean = jnp.mean(z, axis=0)  # (H, M)
    fill_inputs = jnp.concatenate(
        [setup.base_inputs, jnp.broadcast_to(z_mean[:, None], (h_max, s_count, m))], axis=-1)
    fill = jax.vmap(lambda x_h, h: jax.vmap(lambda x: jax.nn.softmax(logits_of(x, h)))(x_h))(
        fill_inputs, jnp.arange(h_max))
    return jnp.where(visits[..., None] > 0, joint / jnp.maximum(visits, 1.0)[..., None], fill)


def logits(train_state: TrainState, setup: Setup) -> Array:
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


def update(train_state: TrainState, batch: Batch, key: Array, setup: Setup,
           config: Config) -> tuple[TrainState, dict[str, Array]]:
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
    if env.is_tabular or _budget_env(env) is not None:
        return env, params
    base_obs = _network_observation(train_state.network.observation)[0]
    return BudgetEnv(env, _thresholds(env, params), base_obs), params


ALGORITHM = scaffold.Algorithm(
    name="saute", config_type=Config, metrics_type=ppo.Metrics, setup=setup, init=init, rollout=rollout,
    update=update, logits=logits, policy_setup=policy_setup, observation_logits=observation_logits, update_keys=1,
    action_head=lambda setup: setup.ppo.action_head, play_env=play_env,
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
    _check_box_actions(env)
    if not isinstance(config, Config) or judged_exactly(env) or _budget_env(env) is not None:
        return env
    try:
        alpha = _thresholds(env, params)
    except NotImplementedError:
        return env
    observation = _resolve_observation(env, config.observation)
    _check_observation(env, observation)
    return BudgetEnv(env, alpha, _network_observation(observation)[0])


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
    if _budget_env(env) is not None:
        setup_ = policy_setup(env, params, train_state)
        if train_state.budget == "count":  # z as the capped count saw it
            return evaluation.observation_policy(partial(_capped_logits, train_state, setup_,
                                                      count_floor(train_state.budget_units)))
        return evaluation.observation_policy(partial(observation_logits, train_state, setup_), setup_.ppo.action_head)
    if env.is_tabular:
        return table_policy(policy_table(train_state, env, params), env)
    base_obs = _network_observation(train_state.network.observation)[0]
    raise ValueError(f"saute.policy: the Saute policy acts on the remaining budget, which {env.name}'s observations "
                     "do not carry and its states are not tabular (no Markov policy to report); play it in "
                     f"fhc_jax.algos.saute.BudgetEnv(env, observation={base_obs!r}) (the same rewards and costs, the "
                     "budget appended to the observation), where the learner judges it")


def augmented_policy_table(train_state: TrainState, env, params: Any = None) -> Array:
    """The learned policy over the augmented states (H, S B, A) of the count representation, for
    ``fhc_jax.evaluate`` on :func:`augmented_cmdp` or ``fhc_jax.rollout`` on
    ``SauteEnv(env, observation="index")``.

    Raises:
        ValueError: a train state of the continuous budget (no finite augmented states).
    """
    if train_state.budget != "count":
        raise ValueError("saute.augmented_policy_table: this policy tracks a continuous budget (Config.budget = "
                         "'continuous'), which has no finite augmented states; play it with saute.policy in BudgetEnv")
    params = env.default_params if params is None else params
    st = policy_setup(env, params, train_state)
    fn = lambda x: jax.nn.softmax(augmented_logits(x, st), axis=-1)
    for _ in range(jnp.ndim(train_state.step)):
        fn = jax.vmap(fn)
    return fn(train_state)
