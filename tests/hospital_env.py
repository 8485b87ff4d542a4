"""A hospital-ward admission problem written as a user writes their own environment: its own
observation (occupancy / B, h / H), an exact model, and a cost the environment pays as it is
realised (a crowded day is 1 or 0) while the model holds its expectation.

Each day h = 0..H-1 of a ward of B beds with b occupied: each patient leaves with probability
``discharge``; then d ~ Binomial(``arrivals``, ``arrival_prob``) patients arrive and the action a
(an admission quota in 0..A-1) admits min(a, d, B - b') of them. Reward: one per admission.
Cost: one per day ending with more than ``crowded`` beds occupied; alpha crowded days per episode.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.envs.base import Environment, TabularState

Array = jax.Array


def _binomial(n: int, p: float) -> np.ndarray:
    return np.array([math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)])


@struct.dataclass
class HospitalParams:
    thresholds: Array


class HospitalWard(Environment):
    """The ward (module docstring): S = beds + 1 occupancy levels, A = max_quota + 1 actions."""

    def __init__(
        self,
        horizon: int = 28,
        beds: int = 14,
        max_quota: int = 4,
        alpha: float = 4.0,
        discharge: float = 0.25,
        arrivals: int = 4,
        arrival_prob: float = 0.7,
        crowded: int = 10,
    ):
        if not (horizon >= 1 and beds >= 1 and max_quota >= 1 and alpha > 0 and 0 < crowded < beds):
            raise ValueError("HospitalWard: horizon, beds, max_quota >= 1, alpha > 0, 0 < crowded < beds")
        self._config = (
            horizon,
            beds,
            max_quota,
            float(alpha),
            float(discharge),
            arrivals,
            float(arrival_prob),
            crowded,
        )
        self._horizon, self.beds, self.max_quota, self.alpha = horizon, beds, max_quota, float(alpha)
        self.discharge, self.arrivals, self.arrival_prob, self.crowded = discharge, arrivals, arrival_prob, crowded

    horizon = property(lambda self: self._horizon)
    num_actions = property(lambda self: self.max_quota + 1)
    num_constraints = property(lambda self: 1)
    num_states = property(lambda self: self.beds + 1)
    has_exact_model = property(lambda self: True)
    is_tabular = property(lambda self: True)
    observation_shape = property(lambda self: (2,))
    observation_dtype = property(lambda self: jnp.float32)
    default_params = property(lambda self: HospitalParams(thresholds=jnp.asarray([self.alpha], jnp.float32)))

    def _static_config(self) -> tuple:
        return self._config

    def observation(self, state: TabularState, params) -> Array:
        return jnp.stack([state.index / self.beds, state.time / self._horizon]).astype(jnp.float32)

    def state_index(self, state: TabularState) -> Array:
        return state.index

    def state_at(self, index: Array, time: Array) -> TabularState:
        return TabularState(index=jnp.asarray(index, jnp.int32), time=jnp.asarray(time, jnp.int32))

    def thresholds(self, params) -> Array:
        return params.thresholds

    def reset(self, key: Array, params):
        state = self.state_at(self.beds // 2, 0)
        return self.observation(state, params), state

    def transition(self, noise: Array, state: TabularState, action: Array, params):
        u_leave, u_arrive = jax.random.uniform(noise, (2, max(self.beds, self.arrivals)))
        stay = state.index - jnp.sum((u_leave[: self.beds] < self.discharge) & (jnp.arange(self.beds) < state.index))
        arrived = jnp.sum(u_arrive[: self.arrivals] < self.arrival_prob)
        admitted = jnp.minimum(jnp.minimum(action, arrived), self.beds - stay)
        nxt = self.state_at(stay + admitted, state.time + 1)
        cost = (nxt.index > self.crowded).astype(jnp.float32)[None]
        return self.observation(nxt, params), nxt, admitted.astype(jnp.float32), cost, nxt.time == self._horizon, {}

    def to_cmdp(self, params) -> TabularCMDP:
        """The same process, rewards as expected admissions and costs as expected crowding."""
        s_, a_, h = self.num_states, self.num_actions, self._horizon
        leave, arrive = _binomial(self.beds, self.discharge), _binomial(self.arrivals, self.arrival_prob)
        p = np.zeros((s_, a_, s_))
        reward = np.zeros((s_, a_))
        for b in range(s_):
            stays = [(b - k, _binomial(b, self.discharge)[k]) for k in range(b + 1)]
            for a in range(a_):
                for stay, p_stay in stays:
                    for d in range(self.arrivals + 1):
                        admitted = min(a, d, self.beds - stay)
                        w = p_stay * arrive[d]
                        p[b, a, stay + admitted] += w
                        reward[b, a] += w * admitted
        del leave
        cost = p @ (np.arange(s_) > self.crowded).astype(np.float64)
        initial = np.zeros(s_)
        initial[self.beds // 2] = 1.0
        return TabularCMDP(
            transitions=p,
            rewards=np.broadcast_to(reward, (h, s_, a_)),
            costs=np.broadcast_to(cost, (1, h, s_, a_)),
            terminal_rewards=np.zeros(s_),
            terminal_costs=np.zeros((1, s_)),
            thresholds=np.asarray(params.thresholds, np.float64),
            initial_distribution=initial,
        )
