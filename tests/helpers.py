"""Shared test helpers (imported as ``from helpers import ...``; pytest puts tests/ on the path):
seeded random CMDPs and policies, a hand-computable two-state CMDP, a continuous-state
environment without an exact model, a Monte-Carlo estimate with 95% half-widths, and an
environment whose cost is a rare event (``RareCost``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import fhc_jax as fhc
from fhc_jax.envs.base import Environment

#: the actions of :func:`switch_cmdp`
STAY, SWITCH = 0, 1


def random_cmdp(
    seed: int,
    num_states: int = 5,
    num_actions: int = 3,
    horizon: int = 4,
    num_constraints: int = 1,
    time_varying: bool = True,
    thresholds=None,
) -> fhc.TabularCMDP:
    """A seeded random CMDP with sparse-ish Dirichlet transitions and terminal terms."""
    rng = np.random.default_rng(seed)
    s, a, h, m = num_states, num_actions, horizon, num_constraints
    shape = (h, s, a) if time_varying else (s, a)
    p = rng.dirichlet(np.full(s, 0.5), size=shape)
    return fhc.TabularCMDP(
        transitions=p,
        rewards=rng.uniform(0.0, 1.0, (h, s, a)),
        costs=rng.uniform(0.0, 1.0, (m, h, s, a)),
        terminal_rewards=rng.uniform(0.0, 1.0, s),
        terminal_costs=rng.uniform(0.0, 1.0, (m, s)),
        thresholds=np.full(m, 1e9) if thresholds is None else thresholds,
        initial_distribution=rng.dirichlet(np.ones(s)),
    )


def random_policy(seed: int, horizon: int, num_states: int, num_actions: int) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(num_actions), size=(horizon, num_states))


def switch_cmdp(alpha: float = 0.5) -> fhc.TabularCMDP:
    """Two states, H = 2. Action 0 stays, action 1 switches state (deterministic).
    Switching pays reward 1; arriving in state 1 costs 1 (per next state); r_H(s) = 10 s;
    start in state 0."""
    p = np.zeros((2, 2, 2))
    p[:, STAY] = np.eye(2)
    p[:, SWITCH] = np.eye(2)[::-1]
    rewards = np.zeros((2, 2, 2))
    rewards[:, :, SWITCH] = 1.0
    costs = np.broadcast_to(np.array([0.0, 1.0]), (1, 2, 2, 2, 2))  # g_h(s, a, s') = s'
    return fhc.TabularCMDP(
        transitions=p,
        rewards=rewards,
        costs=costs,
        terminal_rewards=[0.0, 10.0],
        terminal_costs=[[0.0, 0.0]],
        thresholds=[alpha],
        initial_distribution=[1.0, 0.0],
    )


@struct.dataclass
class DriftState:
    x: jax.Array
    time: jax.Array


@struct.dataclass
class DriftParams:
    alpha: jax.Array
    noise: jax.Array


class Drift(Environment):
    """A continuous-state task with a moving target: position x in [0, 1]; actions stay, up
    (+0.25) or down (-0.25) plus Gaussian noise; reward 1 - |x - target_h| with the target at
    0.85 in the first half of the episode and 0.15 in the second (a stationary policy cannot
    follow it); every move costs 1, at most alpha moves per episode in expectation."""

    def __init__(self, horizon: int = 8):
        self._horizon = horizon

    horizon = property(lambda self: self._horizon)
    num_actions = property(lambda self: 3)
    num_constraints = property(lambda self: 1)
    observation_shape = property(lambda self: (1,))
    observation_dtype = property(lambda self: jnp.float32)
    default_params = property(lambda self: DriftParams(alpha=jnp.asarray([2.0]), noise=jnp.asarray(0.05)))

    def _static_config(self):
        return (self._horizon,)

    def observation(self, state, params):
        return state.x[None]

    def thresholds(self, params):
        return params.alpha

    def reset(self, key, params):
        state = DriftState(x=jnp.asarray(0.5, jnp.float32), time=jnp.zeros((), jnp.int32))
        return self.observation(state, params), state

    def noise(self, key, params):
        return jax.random.normal(key, (), jnp.float32)

    def transition(self, noise, state, action, params):
        move = jnp.asarray([0.0, 0.25, -0.25], jnp.float32)[action]
        x = jnp.clip(state.x + move + params.noise * noise, 0.0, 1.0)
        target = jnp.where(state.time < self._horizon // 2, 0.85, 0.15)
        reward = 1.0 - jnp.abs(x - target)
        costs = jnp.asarray([1.0], jnp.float32) * (action != 0)
        nxt = DriftState(x=x, time=state.time + 1)
        return self.observation(nxt, params), nxt, reward, costs, nxt.time == self._horizon, {}


DRIFT = Drift()


def monte_carlo(env, policy, n=5000, key=1):
    """(mean reward, its 95% half-width, mean cost of constraint 0, its half-width) over n episodes of
    ``policy`` in ``env`` (default params)."""
    ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
        jax.random.key(key), env, env.default_params, policy, n
    )
    r, c = np.asarray(ret.rewards), np.asarray(ret.costs)[:, 0]
    half = lambda x: 1.96 * x.std() / np.sqrt(x.size)
    return r.mean(), half(r), c.mean(), half(c)


@struct.dataclass
class RareState:
    time: jax.Array


class RareCost(Environment):
    """One stage, one action: an episode costs ``size`` with probability ``p`` (true expected cost
    p * size), nothing otherwise; no exact model (judged by Monte-Carlo)."""

    def __init__(self, p: float = 0.027, size: float = 10.0, alpha: float = 0.255):
        self._p, self._size, self._alpha = p, size, alpha

    horizon = property(lambda self: 1)
    num_actions = property(lambda self: 1)
    num_constraints = property(lambda self: 1)
    observation_shape = property(lambda self: (1,))
    observation_dtype = property(lambda self: jnp.float32)
    default_params = property(lambda self: jnp.asarray([self._alpha], jnp.float32))

    def _static_config(self):
        return (self._p, self._size, self._alpha)

    def observation(self, state, params):
        return jnp.zeros((1,), jnp.float32)

    def thresholds(self, params):
        return params

    def reset(self, key, params):
        state = RareState(time=jnp.zeros((), jnp.int32))
        return self.observation(state, params), state

    def noise(self, key, params):
        return jax.random.uniform(key)

    def transition(self, noise, state, action, params):
        cost = jnp.where(noise < self._p, self._size, 0.0).astype(jnp.float32)[None]
        nxt = RareState(time=state.time + 1)
        return self.observation(nxt, params), nxt, jnp.float32(1.0), cost, nxt.time == 1, {}


#: the command line settings of a tiny gridworld run (3x3, H = 4, 20 updates of 8 episodes in
#: chunks of 5): the CLI, tracking, evaluation, distributed and reliability tests train it
TINY_RUN = [
    "--set",
    "env.size=3",
    "--set",
    "env.horizon=4",
    "--set",
    "num_iterations=20",
    "--set",
    "episodes_per_iteration=8",
    "--set",
    "run.chunk_size=5",
    "--set",
    "env.alpha=3.0",
]
