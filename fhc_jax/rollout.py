"""Batched finite-horizon episodes: ``vmap`` over K episodes, ``lax.scan`` over the H stages.

The horizon is fixed, so there is no auto-reset inside an episode: each episode is one
``env.reset`` followed by exactly H ``env.step`` calls, and the terminal reward/costs of the
final state X_H are recorded separately (paper eqs. (1)-(2) count them in the totals).

Jitting::

    traj = jax.jit(lambda key: rollout(key, env, params, policy, 4096))(key)   # closes over all
    fast = jax.jit(rollout, static_argnums=(1, 3, 4), static_argnames="record")
    traj = fast(key, env, params, policy, 4096, record=("states", "actions"))

As static arguments ``env`` and ``policy`` must be hashable (environments are; use a
module-level function, a frozen dataclass such as :class:`UniformRandomPolicy`,
:func:`fhc_jax.softmax_policy` of a hashable function, or ``functools.partial`` of hashable
pieces; put arrays a policy needs, e.g. per-stage parameters, in ``params``-like arguments
of an enclosing jitted function, or close over them as in the first line).

Speed: random-number generation dominates a tabular step on CPU. A policy with
``action_from_uniform`` in an environment with ``noise_from_uniform`` (``GridWorld``) takes the
fast path of :func:`rollout`: one threefry block per step, both of its 32-bit words used.
Write policies with :func:`fhc_jax.softmax_policy` (logits of an observation) or
:func:`fhc_jax.table_policy` (a probability table) rather than with
``jax.random.categorical``: they implement that protocol (one uniform per step, inverse CDF)
and sample the same distribution several times faster. Writing the trajectory costs more
than stepping a tabular environment: ``record=`` keeps only the fields a caller reads, in
the narrowest exact integer dtypes (:class:`Trajectory`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.extend.random import define_prng_impl, threefry_prng_impl

from fhc_jax.envs.base import Environment
from fhc_jax.envs.spaces import Box

Array = jax.Array

#: ``policy(key, observation, h) -> action``: unbatched observation, stage h (int32 scalar,
#: the same for all episodes), action an int32 scalar in [0, A) (discrete actions) or a float32
#: (d,) vector (box actions, recorded as proposed; the environment clips); a pure function of its
#: arguments. Keys reach it as ``UNROLLED_THREEFRY`` keys when the caller's key is a threefry
#: key: the same random streams as ``jax.random.key`` keys, faster on CPU. Optionally also
#: ``policy.action_from_uniform(u, observation, h)`` (the fast protocol, see :func:`rollout`).
Policy = Callable[[Array, Array, Array], Array]


#: the per-stage fields :func:`rollout` can record (its ``record`` argument); all by default
RECORDABLE = ("states", "observations", "actions", "rewards", "costs")


def index_dtype(n: int) -> np.dtype:
    """The narrowest signed integer dtype that holds 0..n-1: int8 (n <= 128), int16
    (n <= 32768), else int32. :func:`rollout` records state and action indices in it."""
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
            environments :func:`trajectory_observations` recomputes them from the states).
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


@dataclasses.dataclass(frozen=True)
class UniformRandomPolicy:
    """mu_h(s, a) = 1 / A from one uniform draw (hashable, a valid static argument).

    Implements the fast protocol ``action_from_uniform`` (see :func:`rollout`)."""

    num_actions: int

    def action_from_uniform(self, u: Array, observation: Any, h: Array) -> Array:
        return jnp.minimum(jnp.floor(u * self.num_actions), self.num_actions - 1).astype(jnp.int32)

    def __call__(self, key: Array, observation: Any, h: Array) -> Array:
        return self.action_from_uniform(jax.random.uniform(key, (), jnp.float32), observation, h)


def uniform_random_policy(num_actions: int) -> UniformRandomPolicy:
    """The uniformly random policy over ``num_actions`` actions."""
    return UniformRandomPolicy(int(num_actions))


@dataclasses.dataclass(frozen=True)
class UniformBoxPolicy:
    """Actions drawn uniformly from the box [low, high] (float32 (d,); hashable)."""

    low: tuple[float, ...]
    high: tuple[float, ...]

    def __call__(self, key: Array, observation: Any, h: Array) -> Array:
        return jax.random.uniform(key, (len(self.low),), jnp.float32, jnp.asarray(self.low, jnp.float32),
                                  jnp.asarray(self.high, jnp.float32))


def random_policy(env: Environment) -> UniformRandomPolicy | UniformBoxPolicy:
    """The uniformly random policy of ``env``'s action space: uniform over the A actions of a
    ``Discrete`` space, uniform in the bounds of a ``Box``."""
    space = env.action_space
    if isinstance(space, Box):
        return UniformBoxPolicy(space.low, space.high)
    return UniformRandomPolicy(space.n)


def action_dtype(env: Environment) -> np.dtype:
    """The dtype :func:`rollout` records actions in: :func:`index_dtype` (A) for discrete
    actions, float32 for box actions."""
    space = env.action_space
    return np.dtype(np.float32) if isinstance(space, Box) else index_dtype(space.n)


def _action(env: Environment, action: Any) -> Array:
    """A policy's action as the environment takes it: int32 () or float32 (d,)."""
    space = env.action_space
    if isinstance(space, Box):
        return jnp.asarray(action, jnp.float32).reshape(space.shape)
    return jnp.asarray(action, jnp.int32)


# ----------------------------------------------------------------------------- random words

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _rotl(x: Array, d: int) -> Array:
    return jax.lax.shift_left(x, jnp.uint32(d)) | jax.lax.shift_right_logical(x, jnp.uint32(32 - d))


def threefry2x32(k1: Array, k2: Array, x1: Array, x2: Array) -> tuple[Array, Array]:
    """Threefry-2x32 block cipher (20 rounds, Salmon et al. 2011) as straight-line jnp code.

    The same function as jax's ``threefry2x32`` primitive, which XLA's CPU backend runs as a
    rolled loop of small kernels; unrolled, a bulk draw is one fused kernel. uint32 arrays
    (broadcast together); returns the block's two output words.
    """
    ks = (k1, k2, k1 ^ k2 ^ jnp.uint32(0x1BD11BDA))
    x1, x2 = x1 + k1, x2 + k2
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = _rotl(x2, r) ^ x1
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x1, x2


def uniform_from_bits(bits: Array) -> Array:
    """float32 uniforms in [0, 1) from uint32 words, exactly as ``jax.random.uniform`` maps its
    random bits (top 23 bits as the mantissa): ``uniform(key) == uniform_from_bits(bits(key))``."""
    mantissa = jax.lax.shift_right_logical(bits, jnp.uint32(9)) | jnp.uint32(0x3F800000)
    return jax.lax.bitcast_convert_type(mantissa, jnp.float32) - 1.0


def uniform_pairs(key: Array, shape: tuple[int, ...]) -> Array:
    """Two independent float32 uniforms in [0, 1) per element from ONE threefry block (its two
    32-bit output words), packed as complex64 ``u1 + 1j * u2`` of ``shape``.

    Read ``.real`` and ``.imag`` where they are consumed (e.g. inside a ``lax.scan`` body): XLA's
    CPU backend evaluates a fused elementwise computation once per output array, so returning
    two separate arrays would compute every block twice. Half the blocks of two
    ``jax.random.uniform`` calls (whose 32-bit draws XOR the two words of a block).
    """
    key, impl = fast_key(_typed(key))
    if impl == "threefry2x32":
        data = jax.random.key_data(key)
        ctr_hi, ctr_lo = _counters(tuple(shape))
        words = threefry2x32(data[0], data[1], ctr_hi, ctr_lo)
    else:
        words = jax.random.bits(key, (2, *shape), jnp.uint32)
    return jax.lax.complex(*(uniform_from_bits(w) for w in words))


def _typed(key: Array) -> Array:
    """A typed key (legacy raw uint32[2] keys are wrapped with the default implementation)."""
    return key if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else jax.random.wrap_key_data(key)


# ----------------------------------------------------------------------------- fast keys
# For policies without the fast protocol, which draw from a key inside the scan: the same
# threefry algorithm registered as a PRNG implementation (jax's partitionable split,
# random_bits and fold_in), so wrapping a threefry key's data with it gives bit-identical
# random streams computed as one fused kernel instead of a rolled loop of small ones.


def _counters(shape: tuple[int, ...]) -> tuple[Array, Array]:
    n = math.prod(shape)
    if n >= 2**32:
        raise NotImplementedError("more than 2**32 random values from one key")
    return jnp.zeros(shape, jnp.uint32), jax.lax.iota(jnp.uint32, n).reshape(shape)


def _split(key: Array, shape: tuple[int, ...]) -> Array:
    return jnp.stack(threefry2x32(key[0], key[1], *_counters(shape)), axis=-1)


def _random_bits(key: Array, bit_width: int, shape: tuple[int, ...]) -> Array:
    b1, b2 = threefry2x32(key[0], key[1], *_counters(shape))
    if bit_width == 64:
        return (b1.astype(jnp.uint64) << 32) | b2.astype(jnp.uint64)
    bits = b1 ^ b2
    return bits if bit_width == 32 else bits.astype({8: jnp.uint8, 16: jnp.uint16}[bit_width])


def _fold_in(key: Array, data: Array) -> Array:
    return jnp.stack(threefry2x32(key[0], key[1], jnp.zeros((), jnp.uint32), jnp.asarray(data, jnp.uint32)))


UNROLLED_THREEFRY = define_prng_impl(
    key_shape=(2,), seed=threefry_prng_impl.seed, split=_split, random_bits=_random_bits,
    fold_in=_fold_in, name="threefry2x32_unrolled", tag="fu",
)


def _rewrap(keys: Array, impl) -> Array:
    return jax.random.wrap_key_data(jax.random.key_data(keys), impl=impl)


def fast_key(key: Array) -> tuple[Array, Any]:
    """(key with the unrolled implementation if that gives the same stream, caller's impl)."""
    impl = jax.random.key_impl(key)
    if impl == "threefry2x32" and jax.config.jax_threefry_partitionable:
        return _rewrap(key, UNROLLED_THREEFRY), impl
    return key, impl


def _restore_keys(tree: Any, impl) -> Any:
    is_key = lambda x: jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
    return jax.tree.map(lambda x: _rewrap(x, impl) if is_key(x) else x, tree)


# ----------------------------------------------------------------------------- rollout


def uses_uniforms(env: Environment, policy: Any) -> bool:
    """Whether rollouts take the fast path: the environment declares ``has_uniform_noise``
    and the policy ``action_from_uniform``."""
    return (env.has_uniform_noise and not env.has_box_actions
            and callable(getattr(policy, "action_from_uniform", None)))


#: :func:`tabulates` only while the policy's table has at most this many entries (H S A; 64 MiB
#: of float32)
MAX_TABLE_ENTRIES = 1 << 24


def tabulates(env: Environment, policy: Any, num_episodes: int) -> bool:
    """Whether a rollout of K = ``num_episodes`` episodes plays ``policy`` from its table over
    (stage, state) (``policy.on_states(env, params)``, e.g. :meth:`fhc_jax.softmax_policy`'s)
    instead of calling it at every step: on the fast path (:func:`uses_uniforms`) of a tabular
    environment, when tabulating costs at most half of what it saves (2 S <= K: H S policy
    evaluations instead of H K) and the table has at most :data:`MAX_TABLE_ENTRIES` entries.
    The actions are the same as the per-step calls' (same uniforms, same arithmetic)."""
    return (uses_uniforms(env, policy) and env.is_tabular
            and callable(getattr(policy, "on_states", None))
            and 2 * env.num_states <= num_episodes
            and env.horizon * env.num_states * env.num_actions <= MAX_TABLE_ENTRIES)


def _stage_inputs(steps_keys: Array, impl: Any, env: Environment, params: Any, policy: Policy) -> Any:
    """Per-stage randomness of episodes with keys ``steps_keys`` (K,), leading axes (H, K);
    ``impl`` is the caller's key implementation (``steps_keys`` may be ``fast_key`` keys).

    Fast path: complex64 ``u_policy + 1j * u_env``. The pair of float32 uniforms is packed in one
    complex number on purpose: XLA's CPU backend evaluates a fused elementwise computation once
    per output array, so two separate outputs would compute every threefry block twice.
    Otherwise: (policy keys, env noise).
    """
    horizon = env.horizon
    if uses_uniforms(env, policy):
        if impl == "threefry2x32":
            data = jax.random.key_data(steps_keys)  # (K, 2)
            counters = jax.lax.iota(jnp.uint32, horizon)[:, None]
            words = threefry2x32(data[None, :, 0], data[None, :, 1], jnp.zeros_like(counters), counters)
        else:
            words = jax.vmap(lambda k: jax.random.bits(k, (2, horizon), jnp.uint32), out_axes=2)(steps_keys)
        return jax.lax.complex(*(uniform_from_bits(w) for w in words))
    stage_keys = jax.vmap(lambda k: jax.random.split(k, (horizon, 2)), out_axes=1)(steps_keys)  # (H, K, 2)
    noise = jax.vmap(jax.vmap(env.noise, in_axes=(0, None)), in_axes=(0, None))(stage_keys[..., 1], params)
    return stage_keys[..., 0], _restore_keys(noise, impl)


def _episode_inputs(key: Array, env: Environment, params: Any, policy: Policy, num_episodes: int) -> tuple[Array, Any]:
    """Reset keys (K,) and per-stage randomness (leading (H, K)) of the K episodes of ``key``:
    episode i uses ``split(key, K)[i]`` only, split again into (reset key, steps key)."""
    key, impl = fast_key(_typed(key))
    keys = jax.random.split(key, num_episodes)
    reset_keys, steps_keys = jax.vmap(jax.random.split, out_axes=1)(keys)
    return _restore_keys(reset_keys, impl), _stage_inputs(steps_keys, impl, env, params, policy)


def _stage_step(x: Any, obs: Any, state: Any, h: Array, env: Environment, params: Any, policy: Policy,
                on_states: Any = None):
    """One stage of one episode from its randomness ``x`` (an element of ``_stage_inputs``):
    the policy's action, then ``env.transition``. ``on_states``: the policy tabulated over
    states (:func:`tabulates`), or None. Returns (action, next_obs, next_state, reward,
    costs)."""
    if uses_uniforms(env, policy):
        if on_states is not None:
            action = on_states.action_from_state(jnp.real(x), env.state_index(state), h)
        else:
            action = jnp.asarray(policy.action_from_uniform(jnp.real(x), obs, h), jnp.int32)
        step_noise = env.noise_from_uniform(jnp.imag(x), params)
    else:
        key, step_noise = x
        draw = lambda: _action(env, policy(key, obs, h))
        # h >= 0 always holds; XLA never fuses across a conditional, so the policy's draw is
        # computed once (else XLA would recompute the unrolled threefry in each consumer)
        action = jax.lax.cond(h >= 0, draw, lambda: jnp.zeros(env.action_space.shape, env.action_space.dtype))
    next_obs, next_state, reward, costs, _, _ = env.transition(step_noise, state, action, params)
    return action, next_obs, next_state, reward, costs


def check_record(record: Iterable[str]) -> frozenset[str]:
    """Validate ``rollout``'s ``record`` argument (before any compilation).

    Raises:
        ValueError: ``record`` is not a collection of names from :data:`RECORDABLE`.
    """
    if isinstance(record, str) or not isinstance(record, Iterable):
        raise ValueError(f"rollout: record must be a tuple of field names from {RECORDABLE}, found {record!r}")
    names = tuple(record)
    unknown = [n for n in names if n not in RECORDABLE]
    if unknown:
        raise ValueError(f"rollout: record must name fields from {RECORDABLE}, found {unknown}")
    return frozenset(names)


def _scan(reset_key: Array, stage_xs: Any, env: Environment, params: Any, policy: Policy,
          record: frozenset[str] = frozenset(RECORDABLE), on_states: Any = None):
    """One episode's loop given its reset key and per-stage randomness (``_stage_inputs``,
    leading H): (the recorded per-stage outputs, a dict of leading-H arrays, final state).

    Tabular environments record the state index in :func:`index_dtype` (S) (observations are
    encoded from it after the loop); others record the state pytree when observations are
    recorded.
    """
    obs, state = env.reset(reset_key, params)
    tabular = env.is_tabular
    keep_states = bool({"states", "observations"} & record)
    state_dtype = index_dtype(env.num_states) if tabular else None
    recorded_action = action_dtype(env)

    def body(carry, xs):
        obs, state = carry
        h, x = xs
        action, next_obs, next_state, reward, costs = _stage_step(x, obs, state, h, env, params, policy,
                                                                  on_states)
        out = {}
        if keep_states:
            out["states"] = env.state_index(state).astype(state_dtype) if tabular else state
        if "actions" in record:
            out["actions"] = action.astype(recorded_action)
        if "rewards" in record:
            out["rewards"] = reward
        if "costs" in record:
            out["costs"] = costs
        return (next_obs, next_state), out

    stages = jnp.arange(env.horizon, dtype=jnp.int32)
    (_, final_state), outs = jax.lax.scan(body, (obs, state), (stages, stage_xs))
    return outs, final_state


def _trajectory(outs: dict[str, Any], final_state: Any, env: Environment, params: Any,
                record: frozenset[str]) -> Trajectory:
    """Assemble one episode's record; observations are encoded here, outside the loop."""
    tabular = env.is_tabular
    observations = final_observations = None
    if "observations" in record:
        if tabular:
            stages = jnp.arange(env.horizon, dtype=jnp.int32)
            observations = jax.vmap(lambda s, h: _observe_index(env, params, s, h))(outs["states"], stages)
        else:
            observations = jax.vmap(lambda s: env.observation(s, params))(outs["states"])
        final_observations = env.observation(final_state, params)
    return Trajectory(
        states=outs["states"] if tabular and "states" in record else None,
        observations=observations,
        actions=outs.get("actions"),
        rewards=outs.get("rewards"),
        costs=outs.get("costs"),
        final_states=env.state_index(final_state).astype(index_dtype(env.num_states)) if tabular else None,
        final_observations=final_observations,
        terminal_rewards=env.terminal_reward(final_state, params),
        terminal_costs=env.terminal_costs(final_state, params),
    )


def _observe_index(env: Environment, params: Any, index: Array, h: Array) -> Array:
    """The observation of tabular state ``index`` at stage ``h``."""
    return env.observation(env.state_at(jnp.asarray(index, jnp.int32), h), params)


def rollout(key: Array, env: Environment, params: Any, policy: Policy, num_episodes: int, *,
            record: Iterable[str] = RECORDABLE) -> Trajectory:
    """K = ``num_episodes`` independent episodes of ``policy`` in ``env`` with ``params``.

    ``jax.vmap`` over episodes of a ``lax.scan`` over stages. Jit it with the environment,
    the policy and K static, e.g. ``jax.jit(lambda k: rollout(k, env, params, policy, K))`` or
    ``jax.jit(rollout, static_argnums=(1, 3, 4), static_argnames="record")``.

    **Policies.** Build them with :func:`fhc_jax.softmax_policy` (``logits_fn(observation, h)
    -> (A,)`` logits) or :func:`fhc_jax.table_policy` (an (H, S, A) probability table), or
    give your own policy an ``action_from_uniform`` (below). A policy that draws its action
    with ``jax.random.categorical`` samples the same distribution but costs several times
    more (``benchmarks/env_throughput.py``; docs/benchmarks.md). On a tabular environment
    with 2 S <= K a ``softmax_policy`` is played from its table over (stage, state)
    (:func:`tabulates`): the same actions, faster still.

    **What is recorded.** ``record`` names the per-stage fields to keep (:data:`RECORDABLE`,
    all by default): e.g. ``record=("states", "actions", "rewards", "costs")`` skips the
    observations, which :func:`trajectory_observations` recomputes from the states on
    tabular environments. Writing the (K, H) arrays costs more than stepping a tabular
    environment, so record only what you read. State and action indices are stored in the
    narrowest exact signed integer dtype (:class:`Trajectory`); final states, terminal
    rewards and terminal costs are always kept.

    Randomness: episode i uses ``key_i = split(key, K)[i]`` only (the same key gives the same
    trajectories for any K), ``reset_key, steps_key = split(key_i)``; s_0 comes from
    ``env.reset(reset_key, params)``. Stage h's randomness comes from ``steps_key``:

    * fast path (:func:`uses_uniforms`: the policy has ``action_from_uniform(u, obs, h)`` and
      the environment ``noise_from_uniform(u, params)``): ONE threefry block per stage, the
      block ``threefry2x32(steps_key, (0, h))`` (with jax's default partitionable threefry, the
      key data of ``jax.random.split(steps_key, H)[h]``); its first 32-bit word gives the policy's uniform u and its second the
      environment's, mapped to [0, 1) as ``jax.random.uniform`` maps bits
      (:func:`uniform_from_bits`). The action is ``policy.action_from_uniform(u, obs, h)`` and
      the step noise ``env.noise_from_uniform(u', params)``. A policy implementing the protocol
      must satisfy ``policy(key, obs, h) == action_from_uniform(uniform(key), obs, h)``
      (e.g. :class:`UniformRandomPolicy`, or inverse-CDF sampling of a probability table);
    * otherwise ``split(steps_key, (H, 2))[h]`` are the (policy, env) keys of stage h: the
      action is ``policy(key, obs, h)`` and the noise ``env.noise(key, params)``.

    Either way the result is exactly that of calling the policy and ``env.transition`` stage
    by stage with this randomness (all random numbers are drawn before the scan), whatever is
    recorded. The recorded observations are ``env.observation(s_h, params)``, encoded after
    the scan (on tabular environments from ``env.state_at(s_h, h)``).

    Args:
        key: PRNG key.
        env: the environment (static).
        params: its params pytree (may be traced, e.g. vmapped over).
        policy: ``policy(key, obs, h) -> action`` in [0, A) (static), optionally with
            ``action_from_uniform``.
        num_episodes: K (static).
        record: names of the per-stage fields to record (static), a subset of
            :data:`RECORDABLE`; the others are None.
    Returns:
        :class:`Trajectory` with leading axes (K, H).
    Raises:
        ValueError: ``record`` names an unknown field.
    """
    record = check_record(record)
    on_states = policy.on_states(env, params) if tabulates(env, policy, num_episodes) else None
    loops = jax.vmap(lambda k, xs: _scan(k, xs, env, params, policy, record, on_states), in_axes=(0, 1))
    outs, final_state = loops(*_episode_inputs(key, env, params, policy, num_episodes))
    return jax.vmap(lambda o, f: _trajectory(o, f, env, params, record))(outs, final_state)


def trajectory_observations(trajectory: Trajectory, env: Environment, params: Any) -> tuple[Array, Array]:
    """The observations of a trajectory recorded without them, recomputed from its states:
    ``env.observation(env.state_at(s_h, h), params)`` (tabular environments; exactly what
    ``rollout`` records with ``"observations"``).

    Returns:
        (observations of s_0..s_{H-1} (K, H, *obs_shape), of the final states (K, *obs_shape)).
    Raises:
        ValueError: an environment without tabular states, or a trajectory without states.
    """
    if not env.is_tabular:
        raise ValueError(f"trajectory_observations: {env.name} has no tabular states (is_tabular) to recompute "
                         "observations from; record them (rollout's record= with 'observations')")
    if trajectory.states is None or trajectory.final_states is None:
        raise ValueError("trajectory_observations: the trajectory has no states (rollout's record= must include 'states')")
    stages = jnp.arange(trajectory.states.shape[-1], dtype=jnp.int32)
    per_episode = jax.vmap(lambda s, h: _observe_index(env, params, s, h))
    observations = jax.vmap(per_episode, in_axes=(0, None))(trajectory.states, stages)
    final = jax.vmap(lambda s: _observe_index(env, params, s, jnp.int32(env.horizon)))(trajectory.final_states)
    return observations, final


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


def rollout_returns(key: Array, env: Environment, params: Any, policy: Policy, num_episodes: int) -> Returns:
    """Episode totals of the same K episodes as :func:`rollout` (same key, same randomness,
    identical totals up to float summation order), without recording trajectories.

    For Monte-Carlo policy evaluation: the (K, H) trajectory arrays are never written, and the
    totals accumulate in the loop carry, so memory is O(K) and the loop is bound by the
    environment step and random-number generation alone. Jit with
    ``static_argnums=(1, 3, 4)``.

    Returns:
        :class:`Returns` with ``rewards`` (K,) and ``costs`` (K, M).
    """

    on_states = policy.on_states(env, params) if tabulates(env, policy, num_episodes) else None

    def one(reset_key, stage_xs):
        obs, state = env.reset(reset_key, params)

        def body(carry, xs):
            obs, state, total_r, total_c = carry
            h, x = xs
            _, next_obs, next_state, reward, costs = _stage_step(x, obs, state, h, env, params, policy,
                                                                 on_states)
            return (next_obs, next_state, total_r + reward, total_c + costs), None

        init = (obs, state, jnp.zeros_like(env.terminal_reward(state, params)),
                jnp.zeros_like(env.terminal_costs(state, params)))
        stages = jnp.arange(env.horizon, dtype=jnp.int32)
        (_, final, total_r, total_c), _ = jax.lax.scan(body, init, (stages, stage_xs))
        return total_r + env.terminal_reward(final, params), total_c + env.terminal_costs(final, params)

    rewards, costs = jax.vmap(one, in_axes=(0, 1))(*_episode_inputs(key, env, params, policy, num_episodes))
    return Returns(rewards=rewards, costs=costs)


def episode(key: Array, env: Environment, params: Any, policy: Policy, *,
            record: Iterable[str] = RECORDABLE) -> Trajectory:
    """One episode (no leading K axes) with episode key ``key``: the episode that
    :func:`rollout` runs for ``key = split(rollout_key, K)[i]``."""
    record = check_record(record)
    key, impl = fast_key(_typed(key))
    reset_key, steps_key = jax.random.split(key)
    stage_xs = jax.tree.map(lambda x: x[:, 0], _stage_inputs(steps_key[None], impl, env, params, policy))
    outs, final_state = _scan(_restore_keys(reset_key, impl), stage_xs, env, params, policy, record)
    return _trajectory(outs, final_state, env, params, record)
