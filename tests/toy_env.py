"""A toy environment written outside fhc_jax, trained from the CLI by tests/test_environments.py:
``fhc-jax train --env toy_env:ToyEnv --set env.horizon=4 --set env.alpha=1.5 ...``.

Two lanes; action a moves the agent to lane a. The safe lane (0) pays 0.5, the fast lane (1)
pays 1 and costs 1. The constructor's keyword arguments are the ``env.*`` settings; its
``ValueError`` is the range check. The exact optimum is 0.5 H + 0.5 min(alpha, H).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from fhc_jax import TabularCMDP
from fhc_jax.envs.base import Environment, TabularState


class ToyEnv(Environment[TabularState, TabularCMDP]):
    def __init__(self, horizon: int = 3, alpha: float = 1.0):
        if horizon < 1 or alpha < 0:
            raise ValueError(f"ToyEnv: horizon must be >= 1 and alpha >= 0, found {horizon}, {alpha}")
        self._horizon, self._alpha = horizon, alpha
        self._init_encoder("one_hot")

    horizon = property(lambda self: self._horizon)
    num_actions = property(lambda self: 2)
    num_constraints = property(lambda self: 1)
    num_states = property(lambda self: 2)
    has_exact_model = property(lambda self: True)
    is_tabular = property(lambda self: True)

    def _static_config(self) -> tuple:
        return (self._horizon, self._alpha)

    @property
    def default_params(self) -> TabularCMDP:
        h = self._horizon
        return TabularCMDP(
            transitions=np.repeat(np.eye(2)[None], 2, axis=0),  # (S, A, S'): s' = a
            rewards=np.broadcast_to([0.5, 1.0], (h, 2, 2)),
            costs=np.broadcast_to([0.0, 1.0], (1, h, 2, 2)),
            terminal_rewards=np.zeros(2),
            terminal_costs=np.zeros((1, 2)),
            thresholds=np.array([self._alpha]),
            initial_distribution=np.array([1.0, 0.0]),
        )

    def to_cmdp(self, params: TabularCMDP) -> TabularCMDP:
        return params

    def reset(self, key, params):
        state = self.state_at(0, 0)
        return self.observation(state, params), state

    def transition(self, noise, state, action, params):
        a = jnp.asarray(action, jnp.int32)
        nxt = self.state_at(a, state.time + 1)
        reward, costs = params.rewards[state.time, state.index, a], params.costs[:, state.time, state.index, a]
        return self.observation(nxt, params), nxt, reward, costs, nxt.time == self._horizon, {}

    def state_index(self, state: TabularState):
        return state.index

    def state_at(self, index, time) -> TabularState:
        return TabularState(index=jnp.asarray(index, jnp.int32), time=jnp.asarray(time, jnp.int32))
