"""Policies for :func:`fhc_jax.rollout` built from per-stage action distributions: every
learner's ``policy(...)`` is one of these. They implement the rollout's fast protocol
(``action_from_uniform``: one uniform per step, inverse CDF), which is several times cheaper
than ``jax.random.categorical`` inside a scan.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from fhc_jax.algos.tabular_rollout import inverse_cdf

Array = jax.Array


def observation_to_index(env) -> Callable[[Array], Array]:
    """``obs -> tabular state index`` for the environment's observation encoder: "index"
    (itself), "one_hot" (argmax), "xy"/"xyt" on spatial environments (rounded coordinates on
    ``env.grid_shape``).

    Raises:
        ValueError: observations the state index cannot be recovered from.
    """
    name = env.encoder.name
    if name == "index":
        return lambda obs: jnp.asarray(obs, jnp.int32)
    if name == "one_hot":
        return lambda obs: jnp.argmax(obs).astype(jnp.int32)
    if name in ("xy", "xyt") and env.is_spatial:
        rows, cols = env.grid_shape

        def decode(obs):
            col = jnp.round(obs[0] * (cols - 1)).astype(jnp.int32)
            row = jnp.round(obs[1] * (rows - 1)).astype(jnp.int32)
            return row * cols + col

        return decode
    raise ValueError(f"policy: cannot recover the state index from {env.name} observations {name!r}")


def sampling_policy(cdf_of: Callable[[Array, Array], Array]) -> Callable[[Array, Array, Array], Array]:
    """A :data:`fhc_jax.rollout.Policy` ``act(key, observation, h) -> action`` that samples by
    inverse CDF from ``cdf_of(observation, h)`` (cumulative action weights, (A,)), with one
    uniform per call; it implements the fast protocol ``action_from_uniform`` of
    :func:`fhc_jax.rollout` (``act(key, ...) == action_from_uniform(uniform(key), ...)``)."""

    def action_from_uniform(u: Array, observation: Array, h: Array) -> Array:
        cdf = cdf_of(observation, h)
        return inverse_cdf(cdf, u, cdf.shape[-1] - 1)

    def act(key: Array, observation: Array, h: Array) -> Array:
        return action_from_uniform(jax.random.uniform(key, (), jnp.float32), observation, h)

    act.action_from_uniform = action_from_uniform
    return act


def table_policy(table: Array, env) -> Callable[[Array, Array, Array], Array]:
    """:func:`sampling_policy` of a policy table (H, S, A) in ``env``: recovers the state index
    from the environment's observation (:func:`observation_to_index`). The returned function
    closes over the table: pass it to ``rollout`` un-jitted, or build it inside the jitted
    function that calls ``rollout``."""
    cdf = jnp.cumsum(table, axis=-1)
    to_index = observation_to_index(env)
    return sampling_policy(lambda observation, h: cdf[h, to_index(observation)])
