"""The baselines' (PPO-Lagrangian, CPO) sampled path: which path a config takes, the networks'
inputs of raw observations ("env": the environment's own observation; "env_t": the same with
the stage h / H appended, the analogue of the paper's "xyt"), and the critics' value scales
where no exact model bounds the returns.

On the sampled path the learners roll out through :func:`fhc_jax.rollout` and apply their
networks to the recorded observations (``Batch.observations``, (H+1, K, D)); the stage of each
sample is its position in the time-major batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.algos.core.evaluation import EVALUATION_KEY
from fhc_jax.algos.core.paths import ENV_OBSERVATIONS
from fhc_jax.algos.core.tabular_rollout import observation_table
from fhc_jax.rollout import random_policy, rollout

Array = jax.Array


def with_stage(x: Array, h: Array, horizon: int) -> Array:
    """Observations x (..., D) with the stage h / H appended, (..., D + 1) float32 (``h``
    broadcasts against ``x.shape[:-1]``)."""
    t = jnp.broadcast_to(jnp.asarray(h).astype(jnp.float32) / horizon, x.shape[:-1])
    return jnp.concatenate([x.astype(jnp.float32), t[..., None]], axis=-1)


def stage_inputs(observations: Array, horizon: int) -> Array:
    """Time-major observations (L, K, D) of stages 0..L-1 with h / H appended, (L, K, D + 1)."""
    return with_stage(observations, jnp.arange(observations.shape[0])[:, None], horizon)


def input_table(env, params, observation: str) -> Array:
    """The network input of every (stage, state) of a tabular environment, (H+1, S, D):
    a named encoder's table (:func:`~fhc_jax.algos.core.tabular_rollout.observation_table`), the
    environment's own observations ("env"), or those with h / H appended ("env_t")."""
    table = observation_table(env, params, None if observation in ENV_OBSERVATIONS else observation)
    return stage_inputs(table, env.horizon) if observation == "env_t" else table


def critic_value_scale(env, params, num_episodes: int = 64) -> np.ndarray:
    """The critics' output scale per signal [r, g^(1..M)], (1 + M,) float32 (host-side): the
    return bound B = H max|u_h| + max|u_H| of the signals that ``num_episodes`` episodes of the
    uniform policy meet (fixed key; 1 for a signal never seen nonzero), on any environment (the
    learner's own observations, never the exact model)."""
    traj = jax.jit(rollout, static_argnums=(1, 3, 4))(
        jax.random.key(EVALUATION_KEY), env, params, random_policy(env), num_episodes
    )
    stage = np.concatenate([np.asarray(traj.rewards)[..., None], np.asarray(traj.costs)], axis=-1)  # (N, H, 1+M)
    terminal = np.concatenate([np.asarray(traj.terminal_rewards)[:, None], np.asarray(traj.terminal_costs)], axis=-1)
    bound = env.horizon * np.max(np.abs(stage), axis=(0, 1)) + np.max(np.abs(terminal), axis=0)
    return np.where(bound > 0, bound, 1.0).astype(np.float32)


def observation_sample_by_stage(env, params, num_episodes: int = 64) -> np.ndarray:
    """Raw observations of s_0..s_H in ``num_episodes`` episodes of the uniform policy (fixed
    key), (N, H+1, D), stage by stage (host-side: computed at once even while a caller's
    ``jit`` traces, e.g. a learner's ``policy`` built inside the program that plays it, as long
    as ``params`` are concrete)."""
    with jax.ensure_compile_time_eval():
        traj = jax.jit(rollout, static_argnums=(1, 3, 4))(
            jax.random.key(EVALUATION_KEY), env, params, random_policy(env), num_episodes
        )
        return np.asarray(jnp.concatenate([traj.observations, traj.final_observations[:, None]], axis=1), np.float32)


def observation_sample(env, params, num_episodes: int = 64) -> Array:
    """Raw observations of s_0..s_H in ``num_episodes`` episodes of the uniform policy (fixed
    key), (N, D): the sample that input standardisation and feature boxes are fitted to on
    environments without tabular states (host-side). Rows: s_0..s_{H-1} of every episode, then
    every episode's s_H."""
    by_stage = observation_sample_by_stage(env, params, num_episodes)  # (N, H+1, D)
    d = by_stage.shape[-1]
    return jnp.concatenate([by_stage[:, :-1].reshape(-1, d), by_stage[:, -1]])
