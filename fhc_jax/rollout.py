"""Batched finite-horizon episodes: ``vmap`` over K episodes, ``lax.scan`` over the H stages.

The horizon is fixed, so there is no auto-reset inside an episode: each episode is one
``env.reset`` followed by exactly H ``env.step`` calls, and the terminal reward/costs of the
final state X_H are recorded separately (paper eqs. (1)-(2) count them in the totals).

Jitting::

    fast = jax.jit(rollout, static_argnums=(1, 3, 4))   # env, policy, num_episodes static
    traj = fast(key, env, params, policy, 4096)

``env`` and ``policy`` must be hashable (environments are; use a module-level function, a
frozen dataclass such as :class:`UniformRandomPolicy`, or ``functools.partial`` of hashable
pieces; put arrays a policy needs, e.g. per-stage parameters, in ``params``-like arguments
of an enclosing jitted function instead of in a static argument).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct
from jax.extend.random import define_prng_impl, threefry_prng_impl

from fhc_jax.envs.base import Environment

Array = jax.Array

#: ``policy(key, observation, h) -> action``: unbatched observation, stage h (int32 scalar,
#: the same for all episodes), action an int32 scalar in [0, A). Must be a pure function of
#: its arguments: the rollout calls it once more per episode (h = H-1, final observation) and
#: discards that action. Keys reach it as ``UNROLLED_THREEFRY`` keys when the caller's key is
#: a threefry key: the same random streams as ``jax.random.key`` keys, faster on CPU.
Policy = Callable[[Array, Array, Array], Array]


@struct.dataclass
class Trajectory:
    """K episodes of H stages (leading axes (K, H)); M constraints.

    Attributes:
        states: s_h, state indices, (K, H) int32.
        observations: encoded s_h, (K, H, *obs_shape).
        actions: a_h, (K, H) int32.
        rewards: r_h(s_h, a_h, s_{h+1}) as paid by the environment, (K, H).
        costs: g_h^(k), (K, H, M).
        next_states: s_{h+1}, (K, H) int32 (``next_states[:, -1]`` is the final state X_H).
        final_observations: encoded X_H, (K, *obs_shape) (input of terminal critics V_H).
        terminal_rewards: r_H(X_H), (K,).
        terminal_costs: g_H^(k)(X_H), (K, M).
    """

    states: Array
    observations: Array
    actions: Array
    rewards: Array
    costs: Array
    next_states: Array
    final_observations: Array
    terminal_rewards: Array
    terminal_costs: Array

    @property
    def num_episodes(self) -> int:
        return self.actions.shape[0]

    @property
    def horizon(self) -> int:
        return self.actions.shape[1]

    @property
    def episode_rewards(self) -> Array:
        """Total reward of each episode including r_H (paper eq. (1) sample), (K,)."""
        return jnp.sum(self.rewards, axis=1) + self.terminal_rewards

    @property
    def episode_costs(self) -> Array:
        """Total cost of each episode and constraint including g_H (paper eq. (2) sample), (K, M)."""
        return jnp.sum(self.costs, axis=1) + self.terminal_costs


@dataclasses.dataclass(frozen=True)
class UniformRandomPolicy:
    """mu_h(s, a) = 1 / A: one uniform draw per action (hashable, a valid static argument)."""

    num_actions: int

    def __call__(self, key: Array, observation: Any, h: Array) -> Array:
        u = jax.random.uniform(key, (), jnp.float32)
        return jnp.minimum(jnp.floor(u * self.num_actions), self.num_actions - 1).astype(jnp.int32)


def uniform_random_policy(num_actions: int) -> UniformRandomPolicy:
    """The uniformly random policy over ``num_actions`` actions."""
    return UniformRandomPolicy(int(num_actions))


# ----------------------------------------------------------------------------- fast keys
# jax.random's threefry2x32 is lowered on CPU as a rolled 5-iteration loop of small kernels,
# which dominates the cost of a rollout. Below is the SAME algorithm (jax's partitionable
# threefry: split, random_bits, fold_in) written as straight-line jnp code, registered as a
# PRNG implementation (no global registry). Wrapping a threefry key's data with it gives
# bit-identical random streams, computed as one fused kernel. The rollout uses it for the bulk
# key splits, the environment noise drawn before the scan and the policy's keys; keys that an
# environment's ``noise`` passes through are converted back to the caller's implementation
# (XLA would recompute an unrolled draw inside the scan once per consumer).

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _rotl(x: Array, d: int) -> Array:
    return jax.lax.shift_left(x, jnp.uint32(d)) | jax.lax.shift_right_logical(x, jnp.uint32(32 - d))


def threefry2x32(k1: Array, k2: Array, x1: Array, x2: Array) -> tuple[Array, Array]:
    """Threefry-2x32 block cipher (20 rounds, Salmon et al. 2011), unrolled; uint32 arrays."""
    ks = (k1, k2, k1 ^ k2 ^ jnp.uint32(0x1BD11BDA))
    x1, x2 = x1 + k1, x2 + k2
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = _rotl(x2, r) ^ x1
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x1, x2


def _counters(shape: tuple[int, ...]) -> tuple[Array, Array]:
    n = math.prod(shape)
    if n >= 2**32:
        raise NotImplementedError("more than 2**32 random values from one key")
    return jnp.zeros(shape, jnp.uint32), jax.lax.iota(jnp.uint32, n).reshape(shape)


def _split(key: Array, shape: tuple[int, ...]) -> Array:
    b1, b2 = threefry2x32(key[0], key[1], *_counters(shape))
    return jnp.stack([b1, b2], axis=-1)


def _random_bits(key: Array, bit_width: int, shape: tuple[int, ...]) -> Array:
    b1, b2 = threefry2x32(key[0], key[1], *_counters(shape))
    if bit_width == 64:
        return (b1.astype(jnp.uint64) << 32) | b2.astype(jnp.uint64)
    bits = b1 ^ b2
    return bits if bit_width == 32 else bits.astype({8: jnp.uint8, 16: jnp.uint16}[bit_width])


def _fold_in(key: Array, data: Array) -> Array:
    b1, b2 = threefry2x32(key[0], key[1], jnp.zeros((), jnp.uint32), jnp.asarray(data, jnp.uint32))
    return jnp.stack([b1, b2])


UNROLLED_THREEFRY = define_prng_impl(
    key_shape=(2,),
    seed=threefry_prng_impl.seed,
    split=_split,
    random_bits=_random_bits,
    fold_in=_fold_in,
    name="threefry2x32_unrolled",
    tag="fu",
)


def _rewrap(keys: Array, impl) -> Array:
    return jax.random.wrap_key_data(jax.random.key_data(keys), impl=impl)


def _fast(key: Array) -> tuple[Array, Any]:
    """(key with the unrolled implementation if that gives the same stream, caller's impl)."""
    impl = jax.random.key_impl(key)
    if impl == "threefry2x32" and jax.config.jax_threefry_partitionable:
        return _rewrap(key, UNROLLED_THREEFRY), impl
    return key, impl


def _typed(key: Array) -> Array:
    """A typed key (legacy raw uint32[2] keys are wrapped with the default implementation)."""
    return key if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else jax.random.wrap_key_data(key)


def _restore_keys(tree: Any, impl) -> Any:
    is_key = lambda x: jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
    return jax.tree.map(lambda x: _rewrap(x, impl) if is_key(x) else x, tree)


# ----------------------------------------------------------------------------- rollout


def episode(key: Array, env: Environment, params: Any, policy: Policy) -> Trajectory:
    """One episode (no leading K axis): reset, H steps, terminal reward and costs.

    Key use: ``reset_key, steps_key = split(key)``; ``split(steps_key, (H + 1, 2))[h]`` are the
    (policy, env) keys of stage h (row H: one discarded look-ahead policy call). The result is
    exactly that of calling ``policy`` and ``env.step`` with these keys stage by stage; for
    speed, all the environment's ``noise`` is drawn before the scan, and the policy's action
    for stage h+1 is computed at the end of iteration h and carried (a loop-carried value is
    stored once, so XLA cannot recompute the policy's random draw in each consumer).
    """
    key = _typed(key)
    horizon = env.horizon
    reset_key, steps_key = jax.random.split(key)
    fast_key, impl = _fast(steps_key)
    # split's counters make rows 0..H-1 identical to those of an (H, 2) split
    stage_keys = jax.random.split(fast_key, (horizon + 1, 2))
    noise = _restore_keys(jax.vmap(env.noise, in_axes=(0, None))(stage_keys[:-1, 1], params), impl)
    policy_keys = stage_keys[:, 0]
    act = lambda k, o, h: jnp.asarray(policy(k, o, h), jnp.int32)
    obs, state = env.reset(reset_key, params)

    def body(carry, xs):
        obs, state, action = carry
        h, next_key, step_noise = xs
        next_obs, next_state, reward, costs, _, _ = env.transition(step_noise, state, action, params)
        next_action = act(next_key, next_obs, jnp.minimum(h + 1, horizon - 1))  # discarded at h = H-1
        return (next_obs, next_state, next_action), (env.state_index(state), obs, action, reward, costs)

    first = act(policy_keys[0], obs, jnp.int32(0))
    stages = jnp.arange(horizon, dtype=jnp.int32)
    (final_obs, final_state, _), outs = jax.lax.scan(body, (obs, state, first), (stages, policy_keys[1:], noise))
    states, observations, actions, rewards, costs = outs
    next_states = jnp.concatenate([states[1:], env.state_index(final_state)[None]])
    return Trajectory(
        states=states,
        observations=observations,
        actions=actions,
        rewards=rewards,
        costs=costs,
        next_states=next_states,
        final_observations=final_obs,
        terminal_rewards=env.terminal_reward(final_state, params),
        terminal_costs=env.terminal_costs(final_state, params),
    )


def rollout(key: Array, env: Environment, params: Any, policy: Policy, num_episodes: int) -> Trajectory:
    """K = ``num_episodes`` independent episodes of ``policy`` in ``env`` with ``params``.

    ``jax.vmap`` over episodes (one key each, from ``jax.random.split(key, K)``) of a
    ``lax.scan`` over stages. Jit with ``static_argnums=(1, 3, 4)``. The same key gives the same
    trajectories for any K (episode i depends only on ``split(key, K)[i]``).

    Args:
        key: PRNG key.
        env: the environment (static).
        params: its params pytree (may be traced, e.g. vmapped over).
        policy: ``policy(key, obs, h) -> action`` (static).
        num_episodes: K (static).
    Returns:
        :class:`Trajectory` with leading axes (K, H).
    """
    keys = jax.random.split(_typed(key), num_episodes)
    return jax.vmap(lambda k: episode(k, env, params, policy))(keys)
