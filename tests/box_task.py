"""A small continuous-action finite-horizon task for tests (seconds to learn).

``Reach``: a point on a line starts at x_0 ~ U(-0.1, 0.1) and must be near the target 1 at
every stage; H = 8 stages, action a in [-1, 1] (clipped by the environment), x_{h+1} = x_h +
0.5 a + 0.05 eps. Reward -(x_{h+1} - 1)^2 per stage; cost a^2 (the energy spent, M = 1) with
threshold ``alpha``. Observation (x, h / H).

Reference points: a = 1 at the first two stages reaches the target with cost 2 and reward
about -0.28; with alpha = 1 the budget binds (a = 1/sqrt(2) at the first two stages reaches
x = 0.71: reward about -1.0). Measured over 4096 episodes: the uniformly random policy earns
-11.3 and spends 2.66; the Gaussian head's initial policy (mean 0, sigma 0.5) -10.4 and 1.83.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from fhc_jax.envs.base import Environment
from fhc_jax.envs.encoders import Encoder
from fhc_jax.envs.spaces import Box


@struct.dataclass
class ReachState:
    x: jax.Array
    time: jax.Array


@struct.dataclass
class ReachParams:
    alpha: jax.Array


@dataclasses.dataclass(frozen=True)
class ReachObservation(Encoder):
    name: str = "xt"

    def __call__(self, env, state):
        return jnp.stack([state.x, state.time / env.horizon]).astype(jnp.float32)

    def shape(self, env):
        return (2,)


class Reach(Environment[ReachState, ReachParams]):
    supported_observations = ("xt",)

    def __init__(self, horizon: int = 8, alpha: float = 1.0):
        self._horizon, self._alpha = horizon, float(alpha)
        self._encoder = ReachObservation()

    horizon = property(lambda self: self._horizon)
    num_constraints = property(lambda self: 1)
    action_space = property(lambda self: Box((-1.0,), (1.0,)))

    @property
    def num_actions(self) -> int:
        raise self.box_actions_error()

    @property
    def default_params(self) -> ReachParams:
        return ReachParams(alpha=jnp.asarray([self._alpha], jnp.float32))

    def _static_config(self) -> tuple:
        return (self._horizon, self._alpha)

    def thresholds(self, params: ReachParams):
        return params.alpha

    def reset(self, key, params):
        state = ReachState(x=jax.random.uniform(key, (), jnp.float32, -0.1, 0.1), time=jnp.zeros((), jnp.int32))
        return self.observation(state, params), state

    def noise(self, key, params):
        return jax.random.normal(key, (), jnp.float32)

    def transition(self, noise, state, action, params):
        a = self.action_space.clip(action)[0]
        x = state.x + 0.5 * a + 0.05 * noise
        nxt = ReachState(x=x, time=state.time + 1)
        reward = -jnp.square(x - 1.0)
        costs = jnp.square(a)[None]
        return self.observation(nxt, params), nxt, reward, costs, nxt.time == self._horizon, {}
