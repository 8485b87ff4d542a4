"""Any :class:`~fhc_jax.cmdp.model.TabularCMDP` as a functional environment.

The params pytree IS the CMDP, so ``to_cmdp(params)`` returns it unchanged and learners run on
the environment can be judged exactly by ``fhc_jax.evaluate`` / ``fhc_jax.solve``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fhc_jax.cmdp import transitions as tr
from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.envs.base import Environment, TabularState, sample_index

Array = jax.Array


class TabularEnv(Environment[TabularState, TabularCMDP]):
    """Environment view of a tabular CMDP (dense or sparse, time-invariant or time-varying).

    Step at stage h from state s with action a: s' ~ p_h(s, a, .) (``transitions.sample_next``);
    the reward is r_h(s, a, s') when the CMDP stores per-next-state rewards (H, S, A, S), else
    the expected reward r_h(s, a) (H, S, A); costs likewise. Both choices have the same
    expectation, so ``evaluate(cmdp, policy)`` is the exact mean of Monte-Carlo returns.

    Static configuration (sizes, storage layout) is read from ``cmdp`` at construction; any
    CMDP with the same shapes may be passed as ``params``. Equality and hashing are by
    identity of the default CMDP (its arrays are constants if ``default_params`` is traced).

    Args:
        cmdp: the model; also ``default_params``.
        observation: "one_hot" ((S,) float32) or "index" (int32 scalar).
    """

    supported_observations = ("one_hot", "index")

    def __init__(self, cmdp: TabularCMDP, observation: str = "one_hot"):
        if not isinstance(cmdp, TabularCMDP):
            raise ValueError(f"TabularEnv: cmdp must be a TabularCMDP, found {type(cmdp).__name__}")
        self._init_encoder(observation)
        self._cmdp = cmdp

    @property
    def horizon(self) -> int:
        return self._cmdp.horizon

    @property
    def num_states(self) -> int:
        return self._cmdp.num_states

    @property
    def num_actions(self) -> int:
        return self._cmdp.num_actions

    @property
    def num_constraints(self) -> int:
        return self._cmdp.num_constraints

    @property
    def default_params(self) -> TabularCMDP:
        return self._cmdp

    # declared capabilities (see fhc_jax.envs.base)
    has_exact_model = property(lambda self: True)
    is_tabular = property(lambda self: True)

    def _static_config(self) -> tuple:
        return (id(self._cmdp), self.encoder.name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._cmdp!r}, observation={self.encoder.name!r})"

    def _check_param_values(self, params: TabularCMDP, owner: str) -> None:
        """A :class:`TabularCMDP` (its constructor and ``replace`` validate the values)."""
        if not isinstance(params, TabularCMDP):
            raise ValueError(f"{owner}: params must be a TabularCMDP, found {type(params).__name__}")

    def reset(self, key: Array, params: TabularCMDP) -> tuple[Array, TabularState]:
        """X_0 ~ ``params.initial_distribution`` (``params`` checked: :meth:`check_params`)."""
        self.check_params(params, "TabularEnv.reset")
        state = TabularState(index=sample_index(key, params.initial_distribution), time=jnp.zeros((), jnp.int32))
        return self.observation(state, params), state

    def transition(self, noise: Array, state: TabularState, action: Array, params: TabularCMDP):
        """One stage: s' ~ p_h(s, a, .) drawn with the key ``noise`` (the default
        :meth:`noise` is the step key itself); returns (obs, state', reward (), costs (M,), done, {})."""
        h, s = state.time, state.index
        action = jnp.asarray(action, jnp.int32)
        s_next = tr.sample_next(noise, tr.stage(params.transitions, h), s, action).astype(jnp.int32)
        reward = params.rewards[h, s, action]
        costs = params.costs[:, h, s, action]
        if params.rewards.ndim == 4:
            reward = reward[s_next]
        if params.costs.ndim == 5:
            costs = costs[:, s_next]
        next_state = TabularState(index=s_next, time=h + 1)
        done = next_state.time == self.horizon
        return self.observation(next_state, params), next_state, reward, costs, done, {}

    def state_at(self, index: Array, time: Array) -> TabularState:
        return TabularState(index=jnp.asarray(index, jnp.int32), time=jnp.asarray(time, jnp.int32))

    def state_index(self, state: TabularState) -> Array:
        return state.index

    def terminal_reward(self, state: TabularState, params: TabularCMDP) -> Array:
        return params.terminal_rewards[state.index]

    def terminal_costs(self, state: TabularState, params: TabularCMDP) -> Array:
        return params.terminal_costs[:, state.index]

    def to_cmdp(self, params: TabularCMDP) -> TabularCMDP:
        """``params`` itself, once checked against this environment's shapes (:meth:`check_params`)."""
        self.check_params(params, "TabularEnv.to_cmdp")
        return params
