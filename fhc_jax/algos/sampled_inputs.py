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

from fhc_jax.algos.learner import EVALUATION_KEY, judged_exactly
from fhc_jax.algos.tabular_rollout import observation_table
from fhc_jax.rollout import random_policy, rollout

Array = jax.Array

ENV_OBSERVATIONS = ("env", "env_t")


def resolve_observation(env, path: str, observation: str, tabular: str = "xy") -> str:
    """``Config.observation = "auto"`` resolved on ``env``: ``tabular`` (a learner's choice of
    encoder: "xy", the paper's Env 1, by default) on the tabular path of an environment that
    supports it, the environment's own observation "env" everywhere else (the sampled path, box
    actions, environments without that encoder); any other value is returned unchanged (and
    validated by the learner)."""
    if observation != "auto":
        return observation
    on_table = path != "sampled" and judged_exactly(env)
    return tabular if on_table and tabular in env.supported_observations else "env"


def resolve_path(name: str, env, path: str, observation: str) -> bool:
    """Whether a learner ``name`` with ``Config.path`` and ``Config.observation`` takes the
    sampled path on ``env`` ("auto": where ``env`` has no tabular exact model).

    Raises:
        ValueError: ``path="tabular"`` without a tabular exact model; on the sampled path an
            observation other than "env" / "env_t"; non-flat environment observations.
    """
    if path == "tabular" and not judged_exactly(env):
        raise ValueError(f"{name}: Config.path = 'tabular' needs a tabular exact model, which "
                         f"{env.name} does not declare (use path = 'auto' or 'sampled')")
    sampled = path == "sampled" or (path == "auto" and not judged_exactly(env))
    if sampled and observation not in ENV_OBSERVATIONS:
        raise ValueError(f"{name}: Config.observation must be one of 'env', 'env_t' for {env.name} "
                         f"on the sampled path, found {observation!r}")
    if (sampled or observation in ENV_OBSERVATIONS) and len(env.observation_shape) != 1:
        raise ValueError(f"{name}: Config.observation = {observation!r}: the networks take flat observations, but "
                         f"{env.name}'s have shape {tuple(env.observation_shape)}; flatten them in the "
                         "environment")
    return sampled


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
    a named encoder's table (:func:`~fhc_jax.algos.tabular_rollout.observation_table`), the
    environment's own observations ("env"), or those with h / H appended ("env_t")."""
    table = observation_table(env, params, None if observation in ENV_OBSERVATIONS else observation)
    return stage_inputs(table, env.horizon) if observation == "env_t" else table


def critic_value_scale(env, params, num_episodes: int = 64) -> np.ndarray:
    """The critics' output scale per signal [r, g^(1..M)], (1 + M,) float32 (host-side): the
    return bound B = H max|u_h| + max|u_H| of the signals that ``num_episodes`` episodes of the
    uniform policy meet (fixed key; 1 for a signal never seen nonzero), on any environment (the
    learner's own observations, never the exact model)."""
    traj = jax.jit(rollout, static_argnums=(1, 3, 4))(
        jax.random.key(EVALUATION_KEY), env, params, random_policy(env), num_episodes)
    stage = np.concatenate([np.asarray(traj.rewards)[..., None], np.asarray(traj.costs)], axis=-1)  # (N, H, 1+M)
    terminal = np.concatenate([np.asarray(traj.terminal_rewards)[:, None], np.asarray(traj.terminal_costs)], axis=-1)
    bound = env.horizon * np.max(np.abs(stage), axis=(0, 1)) + np.max(np.abs(terminal), axis=0)
    return np.where(bound > 0, bound, 1.0).astype(np.float32)
