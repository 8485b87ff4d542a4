"""Environment wrappers.

:class:`ScaledSignals` divides an environment's rewards by one scale and each constraint's
costs (and thresholds) by its own: the same decision problem in other units. Every learner
trains on it (:func:`fhc_jax.algos.core.scaffold.make_learner`, scales from :func:`signal_scales`,
statistics of episodes the learner observes itself), so that one set of default step sizes
and multiplier laws serves tasks whose rewards are euros per half-hour as well as the
gridworld's fares of order one, and rescaling an environment's rewards, or its costs together
with their thresholds, leaves the learned policy unchanged; everything the learners report is
converted back to the environment's units.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.envs.base import Environment

Array = jax.Array


def _finite_positive(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as a float64 array of ``shape`` with finite entries > 0, else a one-line ValueError."""
    if isinstance(value, (str, bytes, bool)):
        raise ValueError(f"ScaledSignals: {name} must be a number > 0, found {value!r}")
    try:
        arr = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"ScaledSignals: {name} must be a number > 0, found {value!r}") from None
    arr = arr.reshape(-1) if shape else arr
    if arr.shape != shape or not np.all(np.isfinite(arr) & (arr > 0)):
        what = "a finite number > 0" if not shape else f"{shape[0]} finite number(s) > 0 (one per constraint)"
        raise ValueError(f"ScaledSignals: {name} must be {what}, found {value!r}")
    return arr


class ScaledSignals(Environment):
    """``env`` with rewards r / ``reward_scale`` and costs g^(k) / ``cost_scales[k]`` (stage and
    terminal), thresholds alpha^(k) / ``cost_scales[k]``. Dynamics, observations and every
    declared capability are the wrapped environment's: tabular states, one-uniform noise,
    the spatial grid, signals paid on arrival (scaled) and the exact model (``to_cmdp`` gives
    the wrapped model with scaled rewards, costs and thresholds, so tabular learners roll out
    the scaled problem); tabular states only together with the exact model (a tabular
    environment without one is trained on as a non-tabular one); the reference policy stays on
    the unscaled environment.

    Args:
        env: the environment. reward_scale: > 0. cost_scales: (M,) > 0.
    """

    def __init__(self, env: Environment, reward_scale: float, cost_scales: Any):
        if not isinstance(env, Environment):
            raise ValueError(f"ScaledSignals: env must be an fhc_jax Environment, found {type(env).__name__}")
        reward = _finite_positive("reward_scale", reward_scale, ())
        costs = _finite_positive("cost_scales", cost_scales, (env.num_constraints,))
        self.env, self.reward_scale, self.cost_scales = env, float(reward), tuple(float(c) for c in costs)

    horizon = property(lambda self: self.env.horizon)
    num_actions = property(lambda self: self.env.num_actions)
    action_space = property(lambda self: self.env.action_space)
    num_constraints = property(lambda self: self.env.num_constraints)
    default_params = property(lambda self: self.env.default_params)
    observation_shape = property(lambda self: self.env.observation_shape)
    observation_dtype = property(lambda self: self.env.observation_dtype)
    supported_observations = property(lambda self: self.env.supported_observations)
    encoder = property(lambda self: self.env.encoder)
    observes_by_encoder = property(lambda self: self.env.observes_by_encoder)  # observation() passes through
    name = property(lambda self: self.env.name)
    # capabilities of the wrapped environment (fhc_jax.envs.base)
    has_uniform_noise = property(lambda self: self.env.has_uniform_noise)
    has_exact_model = property(lambda self: self.env.has_exact_model)
    # tabular states together with the exact model (the learners' tabular paths need both): a
    # tabular environment without one trains on the sampled path, as a non-tabular one
    is_tabular = property(lambda self: self.env.is_tabular and self.env.has_exact_model)
    pays_on_arrival = property(lambda self: self.env.pays_on_arrival)
    is_spatial = property(lambda self: self.env.is_spatial)
    num_states = property(lambda self: self.env.num_states)
    grid_shape = property(lambda self: self.env.grid_shape)

    def _static_config(self) -> tuple:
        return (self.env, self.reward_scale, self.cost_scales)

    def __repr__(self) -> str:
        return f"ScaledSignals({self.env!r}, reward_scale={self.reward_scale:g}, cost_scales={self.cost_scales})"

    def _costs(self, costs: Array, axis: int = -1) -> Array:
        scales = jnp.asarray(self.cost_scales, costs.dtype)
        return costs / scales.reshape((-1,) + (1,) * (costs.ndim - 1 - (axis % costs.ndim)))

    def observation(self, state: Any, params: Any) -> Array:
        return self.env.observation(state, params)

    def thresholds(self, params: Any) -> Array:
        return self._costs(jnp.asarray(self.env.thresholds(params), jnp.float32))

    def reset(self, key: Array, params: Any) -> tuple[Array, Any]:
        return self.env.reset(key, params)

    def noise(self, key: Array, params: Any) -> Any:
        return self.env.noise(key, params)

    def noise_from_uniform(self, u: Array, params: Any) -> Any:
        return self.env.noise_from_uniform(u, params)

    def transition(self, noise: Any, state: Any, action: Array, params: Any):
        obs, nxt, reward, costs, done, info = self.env.transition(noise, state, action, params)
        return obs, nxt, reward / self.reward_scale, self._costs(costs), done, info

    def terminal_reward(self, state: Any, params: Any) -> Array:
        return self.env.terminal_reward(state, params) / self.reward_scale

    def terminal_costs(self, state: Any, params: Any) -> Array:
        return self._costs(self.env.terminal_costs(state, params))

    def state_index(self, state: Any) -> Array:
        return self.env.state_index(state)

    def state_at(self, index: Array, time: Array) -> Any:
        return self.env.state_at(index, time)

    def coordinates(self, state: Any) -> Array:
        return self.env.coordinates(state)

    def arrival_signals(self, params: Any) -> tuple[Array, Array]:
        rewards, costs = self.env.arrival_signals(params)
        return rewards / self.reward_scale, self._costs(jnp.asarray(costs), axis=0)

    def to_cmdp(self, params: Any) -> TabularCMDP:
        """The wrapped environment's exact model in the scaled units (rewards / reward_scale,
        costs and thresholds / cost_scales)."""
        cmdp = self.env.to_cmdp(params)
        return TabularCMDP(
            cmdp.transitions,
            cmdp.rewards / self.reward_scale,
            self._costs(cmdp.costs, axis=0),
            cmdp.terminal_rewards / self.reward_scale,
            self._costs(cmdp.terminal_costs, axis=0),
            self._costs(cmdp.thresholds),
            cmdp.initial_distribution,
        )


def _uniform_episodes(env: Environment, params: Any, num_episodes: int, seed: int) -> Any:
    """``num_episodes`` episodes of the uniform policy with the key ``seed`` (a Trajectory)."""
    from fhc_jax.rollout import random_policy, rollout

    return jax.jit(rollout, static_argnums=(1, 3, 4))(
        jax.random.key(seed), env, params, random_policy(env), num_episodes
    )


def signal_scales(
    env: Environment, params: Any, num_episodes: int = 64, seed: int = 20_240_601
) -> tuple[float, np.ndarray]:
    """Robust magnitudes of a step's reward and of each constraint's cost: the 99th percentile
    of |r_h| and |g_h^(k)| (stage and terminal signals) over ``num_episodes`` episodes of the
    uniform policy (fixed key); 1 where a signal is identically 0. Host-side.

    Returns:
        (reward scale, cost scales (M,)).
    """
    traj = _uniform_episodes(env, params, num_episodes, seed)
    rewards = np.concatenate([np.abs(np.asarray(traj.rewards)).ravel(), np.abs(np.asarray(traj.terminal_rewards))])
    costs = np.concatenate(
        [np.abs(np.asarray(traj.costs)).reshape(-1, env.num_constraints), np.abs(np.asarray(traj.terminal_costs))]
    )

    def scale(x: np.ndarray) -> float:
        q = float(np.quantile(x, 0.99)) if x.size else 0.0
        q = q if q > 0 else float(np.max(x, initial=0.0))
        return q if q > 0 and np.isfinite(q) else 1.0

    return scale(rewards), np.asarray([scale(costs[:, k]) for k in range(env.num_constraints)])


#: a budget of fewer than H times this many training units counts as small: the cost unit then
#: shrinks until the budget is H / 100 units (:func:`training_scales`)
SMALL_BUDGET_PER_STAGE = 0.01

#: the cost unit shrinks by at most this factor (a budget of H / 10^4 step magnitudes or less)
MAX_BUDGET_SHRINK = 100.0


def training_scales(
    env: Environment, params: Any, small_budgets: bool = True, num_episodes: int = 64, seed: int = 20_240_601
) -> tuple[float, np.ndarray]:
    """The units a learner trains in: :func:`signal_scales`, with each cost's unit shrunk where
    its budget is small against the step magnitude (``small_budgets``; :func:`signal_scales`
    itself otherwise), (reward scale, cost scales (M,)).

    A budget alpha^(k) > 0 of fewer than H / 100 step magnitudes u^(k) (a rare-event budget: a
    breakdown costs 1 and a few percent of H / 100 of them are allowed) is counted in units of
    alpha^(k) / (H / 100) instead of u^(k), by at most :data:`MAX_BUDGET_SHRINK`, so that it is
    H / 100 training units: a multiplier law then moves as far per relative violation, and
    reaches the same penalty per budget, as on a task whose budget is many step magnitudes.
    Every other scale is :func:`signal_scales`' unchanged (a threshold of 0 keeps u^(k)). The
    units are invariant to rescaling the costs together with their thresholds. Host-side.
    """
    scale_r, scale_c = signal_scales(env, params, num_episodes, seed)
    if not small_budgets:
        return scale_r, scale_c
    scale_c = np.asarray(scale_c, np.float64)
    thresholds = np.abs(np.asarray(env.thresholds(params), np.float64).reshape(-1))
    floor = SMALL_BUDGET_PER_STAGE * env.horizon  # H / 100 training units
    budget = thresholds / scale_c  # alpha in units of the step magnitude
    shrink = np.where((budget > 0) & (budget < floor), np.maximum(budget / floor, 1.0 / MAX_BUDGET_SHRINK), 1.0)
    return scale_r, scale_c * shrink
