"""The Saute state augmentation as environments (Sootla et al., "Saute RL: Almost Surely Safe
RL Using State Augmentation", ICML 2022): the state of an environment augmented with the budget
it has left, which Saute-Lagrangian (:mod:`fhc_jax.algos.saute`) trains on.

* :class:`SauteEnv` / :func:`augmented_cmdp`: the cost *count* c of a tabular environment whose
  stage costs are non-negative integer multiples of a unit (:func:`detect_cost_unit`), an exact
  finite lift (s, c) with its exact model, on which a budget-dependent policy is Markov;
* :class:`BudgetEnv`: any environment with the cost paid so far in its state and the remaining
  budget z = (alpha - cost so far) / alpha appended to its observation.

Rewards, costs and dynamics are the base environment's, unreshaped: the judge needs the true
task (the learner reshapes its training rewards itself).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.algos.core.tabular_rollout import tabular_model
from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.cmdp.transitions import SparseTransitions
from fhc_jax.envs.base import Environment
from fhc_jax.envs.encoders import Encoder, make_encoder

Array = jax.Array

#: the observations of the base state that :class:`BudgetEnv` appends z to: encoders of a
#: tabular environment, or the environment's own observation (with h / H appended: "env_t")
BASE_OBSERVATIONS = ("xy", "xyt", "one_hot", "env", "env_t")

#: :class:`BudgetEnv`'s base observation of the environment's own observation followed by the
#: stage one-hot, e_h of H + 1 entries (one input per stage: a network can then give every stage
#: its own action law, as the finite-horizon optimum may need)
STAGE_OBSERVATION = "env_stage"

#: the base observations :class:`BudgetEnv` takes: encoders of a tabular environment, its own
#: observation, and that with the stage one-hot
BUDGET_OBSERVATIONS = (*BASE_OBSERVATIONS, STAGE_OBSERVATION)


def stage_one_hot(h: Array, horizon: int) -> Array:
    """The one-hot stage e_h, (..., H + 1) float32 (stages 0..H; ``h`` int, any shape)."""
    return jax.nn.one_hot(jnp.asarray(h, jnp.int32), horizon + 1, dtype=jnp.float32)


#: :func:`detect_cost_unit` tries the units c_min / d for d = 1 .. this (c_min the least
#: positive stage cost)
MAX_UNIT_DIVISOR = 16

#: relative tolerance of "an integer multiple of the unit" (float32 models)
UNIT_TOLERANCE = 1e-5


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
    return bool(
        np.all(units > -UNIT_TOLERANCE)
        and np.all(np.abs(units - np.round(units)) <= UNIT_TOLERANCE * np.maximum(1.0, np.abs(units)))
    )


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
        raise ValueError(
            f"detect_cost_unit: {env.name} declares no tabular exact model (is_tabular and has_exact_model)"
        )
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

    def __init__(
        self,
        base: Environment,
        alpha: float | None = None,
        observation: str = "index",
        base_observation: str | None = None,
        cost_unit: float = 1.0,
    ):
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
            raise ValueError(
                "SauteEnv: the costs must be non-negative integer multiples of cost_unit "
                f"= {self.unit:g} for an exact budget state"
            )
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
            transitions=SparseTransitions(
                next_states=next_aug.reshape(shape).astype(np.int32),
                probabilities=np.broadcast_to(prob[:, :, None], new_c.shape).reshape(shape),
            ),
            rewards=rep(rewards, -2),
            costs=rep(costs, -2),
            terminal_rewards=rep(cmdp.terminal_rewards, 0),
            terminal_costs=rep(cmdp.terminal_costs, 1),
            thresholds=cmdp.thresholds,
            initial_distribution=init,
        )


def augmented_cmdp(env: Environment, params: Any = None, cost_unit: float = 1.0) -> TabularCMDP:
    """The exact model of ``env`` augmented with the cost count (:meth:`SauteEnv.to_cmdp`);
    ``cost_unit`` in ``env``'s units (:func:`detect_cost_unit` finds one)."""
    params = env.default_params if params is None else params
    alpha = float(np.asarray(env.to_cmdp(params).thresholds)[0])
    return SauteEnv(env, alpha, cost_unit=cost_unit).to_cmdp(params)


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
        observation: x: "env" (``env``'s own observation), "env_stage" (that followed by the
            stage one-hot e_h, H + 1 entries) or the name of an encoder ``env`` supports ("xy",
            "xyt", "one_hot").
    Raises:
        ValueError: a threshold that is not > 0, an unsupported or non-flat observation.
    """

    def __init__(self, env: Environment, alpha: Any = None, observation: str = "env"):
        m = env.num_constraints
        alpha = env.thresholds(env.default_params) if alpha is None else alpha
        alpha = np.asarray(alpha, np.float64).reshape(-1)
        if alpha.shape != (m,) or not np.all(np.isfinite(alpha) & (alpha > 0)):
            raise ValueError(
                f"saute: the budget needs thresholds alpha > 0 (M = {m} of them), found {alpha.tolist()} for {env.name}"
            )
        if observation in ("env", STAGE_OBSERVATION):
            encoder, shape = None, tuple(env.observation_shape)
        elif observation in env.supported_observations and observation in BASE_OBSERVATIONS:
            encoder = make_encoder(env.name, observation, env.supported_observations)
            shape = tuple(encoder.shape(env))
        else:
            valid = ", ".join(
                repr(o) for o in ("env", STAGE_OBSERVATION, *env.supported_observations) if o in BUDGET_OBSERVATIONS
            )
            raise ValueError(
                f"saute: the observation of the base state must be one of {valid} for {env.name}, found {observation!r}"
            )
        if len(shape) > 1:
            raise ValueError(
                f"saute: the networks take flat observations, but {env.name}'s have shape {shape}; "
                "flatten them in the environment"
            )
        self.env, self.alpha, self.base_observation = env, tuple(float(a) for a in alpha), observation
        self._stage_one_hot = observation == STAGE_OBSERVATION
        stage_dim = env.horizon + 1 if self._stage_one_hot else 0
        self._base_encoder, self._base_dim = encoder, int(np.prod(shape, dtype=int)) + stage_dim

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
        """x, the observation of a base state, (D,) float32 ("env_stage": the environment's own
        observation, then the one-hot stage e_h, H + 1 entries)."""
        x = self.env.observation(state, params) if self._base_encoder is None else self._base_encoder(self.env, state)
        x = jnp.asarray(x, jnp.float32).reshape(-1)
        if self._stage_one_hot:
            x = jnp.concatenate([x, stage_one_hot(state.time, self.env.horizon)])
        return x.reshape(self._base_dim)

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


def count_kernel(senv: SauteEnv, params) -> tuple[tuple, np.ndarray]:
    """The compact kernel of the marginalisation and the augmented initial distribution."""
    nxt, prob, inc = senv.count_increments(params)
    beta = np.zeros(senv.num_states)
    beta[:: senv.levels] = np.asarray(senv.base.to_cmdp(params).initial_distribution)
    return (jnp.asarray(nxt), jnp.asarray(prob, jnp.float32), jnp.asarray(inc)), beta


def markov_policy(table: Array, env, params: Any = None, cost_unit: float = 1.0) -> Array:
    """The occupancy-equivalent Markov policy on ``env``'s states of a policy ``table``
    (H, S B, A) over the augmented states of ``SauteEnv(env)`` (:func:`markov_equivalent`)."""
    params = env.default_params if params is None else params
    alpha = float(np.asarray(env.to_cmdp(params).thresholds)[0])
    senv = SauteEnv(env, alpha, cost_unit=cost_unit)
    kernel, beta = count_kernel(senv, params)
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
