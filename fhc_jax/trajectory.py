"""What a rollout returns: :class:`Trajectory` (the recorded per-stage fields of K episodes, in
the narrowest exact index dtypes, :func:`index_dtype`) and :class:`Returns` (episode totals).
The episodes themselves are run by :mod:`fhc_jax.rollout`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

Array = jax.Array


#: the per-stage fields :func:`~fhc_jax.rollout.rollout` can record (its ``record`` argument); all by default
RECORDABLE = ("states", "observations", "actions", "rewards", "costs")


def index_dtype(n: int) -> np.dtype:
    """The narrowest signed integer dtype that holds 0..n-1: int8 (n <= 128), int16
    (n <= 32768), else int32. :func:`~fhc_jax.rollout.rollout` records state and action indices
    in it."""
    for dtype in (np.int8, np.int16):
        if n <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.int32)


@struct.dataclass
class Trajectory:
    """K episodes of H stages (leading axes (K, H)); M constraints.

    Index dtypes: state indices are :func:`index_dtype` (S) and actions :func:`index_dtype` (A)
    (int8 on the default gridworld: S = 100, A = 9), the narrowest exact signed integers, so
    that writing the trajectory costs as little as possible. They index arrays directly; cast
    with ``.astype(jnp.int32)`` before arithmetic that can leave their range (e.g.
    ``s * A + a``). Fields that ``rollout(..., record=...)`` did not record are None.

    Attributes:
        states: s_h, state indices, (K, H) (None unless ``env.is_tabular`` and recorded).
        observations: encoded s_h, (K, H, *obs_shape) (None unless recorded; on tabular
            environments :func:`~fhc_jax.rollout.trajectory_observations` recomputes them from
            the states).
        actions: a_h, (K, H) indices for discrete actions; (K, H, d) float32 for box actions
            (as the policy proposed them, before the environment clips them).
        rewards: r_h(s_h, a_h, s_{h+1}) as paid by the environment, (K, H).
        costs: g_h^(k), (K, H, M).
        final_states: X_H, the state index after the last stage, (K,) (None unless
            ``env.is_tabular``).
        final_observations: encoded X_H, (K, *obs_shape) (input of terminal critics V_H; None
            unless observations are recorded).
        terminal_rewards: r_H(X_H), (K,).
        terminal_costs: g_H^(k)(X_H), (K, M).
    """

    states: Array | None
    observations: Array | None
    actions: Array | None
    rewards: Array | None
    costs: Array | None
    final_states: Array | None
    final_observations: Array | None
    terminal_rewards: Array
    terminal_costs: Array

    @property
    def num_episodes(self) -> int:
        return self.terminal_rewards.shape[-1]

    @property
    def horizon(self) -> int:
        for x in (self.actions, self.states, self.rewards, self.costs, self.observations):
            if x is not None:
                return x.shape[self.terminal_rewards.ndim]
        raise ValueError("Trajectory.horizon: no per-stage field was recorded")

    @property
    def next_states(self) -> Array | None:
        """s_{h+1}, (K, H): the states shifted by one stage, ``next_states[:, -1]`` the final
        state X_H (computed on access; None without recorded states)."""
        if self.states is None or self.final_states is None:
            return None
        return jnp.concatenate([self.states[..., 1:], self.final_states[..., None]], axis=-1)

    def _recorded(self, name: str) -> Array:
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"Trajectory: {name} were not recorded (rollout's record= must include {name!r})")
        return value

    @property
    def episode_rewards(self) -> Array:
        """Total reward of each episode including r_H (paper eq. (1) sample), (K,)."""
        return jnp.sum(self._recorded("rewards"), axis=-1) + self.terminal_rewards

    @property
    def episode_costs(self) -> Array:
        """Total cost of each episode and constraint including g_H (paper eq. (2) sample), (K, M)."""
        return jnp.sum(self._recorded("costs"), axis=-2) + self.terminal_costs


@struct.dataclass
class Returns:
    """Total reward and costs of K episodes, terminal signals included (samples of the
    paper's eqs. (1)-(2)).

    Attributes:
        rewards: sum_h r_h + r_H of each episode, (K,).
        costs: sum_h g_h^(k) + g_H^(k) of each episode, (K, M).
    """

    rewards: Array
    costs: Array
