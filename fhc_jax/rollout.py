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

**Checks at the boundary** (every public path: :func:`rollout`, :func:`rollout_returns`,
:func:`episode`). Before anything is traced: K a positive int, the environment's horizon,
number of constraints and (discrete) number of actions positive ints, ``params`` of the
environment's structure and shapes (values too when concrete:
:meth:`~fhc_jax.envs.base.Environment.check_params`). While tracing (static, free at run
time): a discrete action must be an integer scalar (a float action is refused, never
truncated), rewards () and costs (M,) of the declared shapes, a :func:`fhc_jax.softmax_policy`'s
logits of shape (A,), a policy table of shape (H, S, A). At run time, each at one reduction
per rollout, never a host transfer unless something is wrong:

* **actions of your own policy** outside [0, A): an :class:`~fhc_jax.envs.validation.
  InvalidActionError` naming the action, the stage, the episode and the valid range. Called
  eagerly it is raised directly; inside your ``jax.jit`` (e.g. ``jax.jit(lambda k:
  rollout(k, env, params, policy, 4096))``) it comes from a host callback that runs only when
  an action was out of range, and reaches you as ``jax.errors.JaxRuntimeError`` (a
  ``RuntimeError``) whose message contains the same line; under ``jax.vmap`` the batch is reduced first,
  one report per call (``fhc_jax.envs.validation``). The library's own policies
  (``softmax_policy``, ``table_policy``, ``uniform_random_policy``, the battery's reference)
  draw in range by construction and skip this check;
* **invalid action distributions**: NaN or all -inf logits of a ``softmax_policy`` (at the
  visited states; on the tabulated path at every state), or a traced policy table with a row
  without positive weight. Called eagerly: ``ValueError`` naming the stage (and state).
  Inside traced code the affected episodes' rewards and costs are NaN (all episodes' when a
  tabulated row is invalid): never a plausible number, and no host callback, so a learner whose
  parameters diverged keeps reporting the divergence through its own (non-finite) metrics;
* **non-finite rewards or costs paid by the environment**, called eagerly: ``ValueError``
  naming the environment and the stage (inside traced code they stay NaN).

Box actions are not checked: the environment clips them into its bounds.
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

from fhc_jax.envs.base import Environment, check_int, check_static
from fhc_jax.envs.spaces import Box
from fhc_jax.envs.validation import InvalidActionError, action_range, check_action, is_concrete, raise_if

Array = jax.Array

#: ``policy(key, observation, h) -> action``: unbatched observation, stage h (int32 scalar,
#: the same for all episodes), action an int32 scalar in [0, A) (discrete actions) or a float32
#: (d,) vector (box actions, recorded as proposed; the environment clips); a pure function of its
#: arguments. Keys reach it as ``UNROLLED_THREEFRY`` keys when the caller's key is a threefry
#: key: the same random streams as ``jax.random.key`` keys, faster on CPU. Optional members
#: (read by the rollouts, see :func:`rollout`):
#:
#: * ``action_from_uniform(u, observation, h)``: the fast protocol;
#: * ``reads_state = True`` with ``action_from_state(u, index, h)``: a policy of the tabular
#:   state (``fhc_jax.table_policy``): the rollouts pass ``env.state_index(state)``, never an
#:   observation, and draw u themselves (from the stage's block on the fast path, else
#:   ``jax.random.uniform(key)``);
#: * ``on_states(env, params)``: the policy tabulated over (stage, state), a ``reads_state``
#:   policy drawing the same actions (:func:`tabulates`);
#: * ``check_actions(env, observation, h)``: raises ``ValueError`` (while tracing) when the
#:   policy cannot act in ``env``, and declares that its actions lie in [0, A) by construction
#:   (or are :data:`NO_ACTION` when ``returns_no_action``), so the rollouts skip the
#:   per-step range check;
#: * ``table_check()``: ``(status, describe)`` of a table checked once per rollout, or None.
Policy = Callable[[Array, Array, Array], Array]

#: the action a library policy with ``returns_no_action`` returns where its action distribution
#: has no valid action (``softmax_policy``: NaN or all -inf logits); see :func:`rollout`
NO_ACTION = -1


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

    def check_actions(self, env: Environment, observation: Any, h: Array) -> None:
        """Its actions lie in [0, ``num_actions``): refuse an environment with another A."""
        if env.has_box_actions or self.num_actions != env.action_space.n:
            raise ValueError(f"uniform_random_policy({self.num_actions}) draws actions in [0, {self.num_actions}); "
                             f"{env.name} takes {_space_text(env)}: use random_policy(env)")

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


def _space_text(env: Environment) -> str:
    space = env.action_space
    return f"box actions in [{list(space.low)}, {list(space.high)}]" if isinstance(space, Box) else action_range(env)


def action_dtype(env: Environment) -> np.dtype:
    """The dtype :func:`rollout` records actions in: :func:`index_dtype` (A) for discrete
    actions, float32 for box actions."""
    space = env.action_space
    return np.dtype(np.float32) if isinstance(space, Box) else index_dtype(space.n)


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


def reads_state(policy: Any) -> bool:
    """Whether ``policy`` plays from the tabular state index rather than the observation
    (it declares ``reads_state = True`` and has ``action_from_state(u, index, h)``, e.g.
    :func:`fhc_jax.table_policy`): the rollouts pass ``env.state_index(state)`` to it."""
    return getattr(policy, "reads_state", False) is True


def uses_uniforms(env: Environment, policy: Any) -> bool:
    """Whether rollouts take the fast path: the environment declares ``has_uniform_noise``
    and the policy ``action_from_uniform`` or ``action_from_state`` (:func:`reads_state`)."""
    return (env.has_uniform_noise and not env.has_box_actions
            and (reads_state(policy) or callable(getattr(policy, "action_from_uniform", None))))


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


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How one rollout plays its policy, decided while tracing (:func:`_plan`).

    Attributes:
        owner: the public function, for messages.
        actor: what acts in the loop: the policy, or its table over states (:func:`tabulates`).
        fast: the one-uniform fast path (:func:`uses_uniforms`).
        per_step: the per-step check: "range" (a policy of yours: actions outside [0, A) are
            reported), "no_action" (:data:`NO_ACTION` marks an invalid distribution: rewards
            and costs of the step are NaN) or "" (none: in range by construction, or box actions).
        table: ``actor.table_check()``: (status (3,) int32, describe) or None.
    """

    owner: str
    actor: Any
    fast: bool
    per_step: str
    table: Any


def _plan(owner: str, env: Environment, params: Any, policy: Any, num_episodes: int | None) -> _Plan:
    """Static checks of a rollout's arguments (module docstring), then its :class:`_Plan`."""
    check_static(env, owner)
    if num_episodes is not None:
        check_int(owner, "num_episodes (K)", num_episodes, 1)
    if not (callable(policy) or reads_state(policy)):
        raise ValueError(f"{owner}: policy must be a function policy(key, observation, h) -> action, found "
                         f"{type(policy).__name__}")
    env.check_params(params, owner)
    tabulated = num_episodes is not None and tabulates(env, policy, num_episodes)
    actor = policy.on_states(env, params) if tabulated else policy
    if reads_state(actor) and not env.is_tabular:
        raise ValueError(f"{owner}: {type(policy).__name__} plays from tabular state indices (reads_state); "
                         f"{env.name} has none (is_tabular is False)")
    if env.has_box_actions:
        per_step = ""
    elif callable(getattr(actor, "check_actions", None)):
        per_step = "no_action" if getattr(actor, "returns_no_action", False) else ""
    else:
        per_step = "range"
    table = actor.table_check() if callable(getattr(actor, "table_check", None)) else None
    return _Plan(owner, actor, uses_uniforms(env, policy), per_step, table)


def _stage_step(x: Any, obs: Any, state: Any, h: Array, env: Environment, params: Any, plan: _Plan):
    """One stage of one episode from its randomness ``x`` (an element of ``_stage_inputs``):
    the policy's action, then ``env.transition``. Returns (action, next_obs, next_state,
    reward, costs, ok): ``ok`` () bool whether the action was valid (None without a per-step
    check, :class:`_Plan`); with "no_action", reward and costs are NaN where it was not."""
    actor, owner = plan.actor, plan.owner
    if callable(getattr(actor, "check_actions", None)):
        actor.check_actions(env, obs, h)
    source = "the policy's action"
    if plan.fast:
        u = jnp.real(x)
        if reads_state(actor):
            raw = actor.action_from_state(u, env.state_index(state), h)
        else:
            raw = actor.action_from_uniform(u, obs, h)
        action = check_action(env, raw, owner, source)
        step_noise = env.noise_from_uniform(jnp.imag(x), params)
    else:
        key, step_noise = x
        if reads_state(actor):
            draw = lambda: check_action(env, actor.action_from_state(jax.random.uniform(key, (), jnp.float32),
                                                                     env.state_index(state), h), owner, source)
        else:
            draw = lambda: check_action(env, actor(key, obs, h), owner, source)
        # h >= 0 always holds; XLA never fuses across a conditional, so the policy's draw is
        # computed once (else XLA would recompute the unrolled threefry in each consumer)
        action = jax.lax.cond(h >= 0, draw, lambda: jnp.zeros(env.action_space.shape, env.action_space.dtype))
    ok = None
    taken = action
    if plan.per_step == "range":
        ok = (action >= 0) & (action < env.action_space.n)
    elif plan.per_step == "no_action":
        ok = action != NO_ACTION
        taken = jnp.maximum(action, 0)
    next_obs, next_state, reward, costs, _, _ = env.transition(step_noise, state, taken, params)
    _check_signals(env, owner, "transition", reward, costs)
    if plan.per_step == "no_action":
        reward = jnp.where(ok, reward, jnp.nan)
        costs = jnp.where(ok, costs, jnp.nan)
    return action, next_obs, next_state, reward, costs, ok


def _check_signals(env: Environment, owner: str, method: str, reward: Any, costs: Any) -> None:
    """Static shapes of what an environment pays: a reward () and costs (M,)."""
    if jnp.shape(reward) != ():
        raise ValueError(f"{owner}: {env.name}.{method} returned a reward of shape {tuple(jnp.shape(reward))}; "
                         "expected () (one number per episode and stage)")
    m = env.num_constraints
    if jnp.shape(costs) != (m,):
        raise ValueError(f"{owner}: {env.name}.{method} returned costs of shape {tuple(jnp.shape(costs))}; expected "
                         f"(M,) = ({m},) (num_constraints = {m}; for one constraint return jnp.array([c]))")


def _terminal(env: Environment, owner: str, state: Any, params: Any) -> tuple[Array, Array]:
    """(r_H, g_H) of a final state, shapes checked."""
    reward, costs = env.terminal_reward(state, params), env.terminal_costs(state, params)
    _check_signals(env, owner, "terminal_reward/terminal_costs", reward, costs)
    return reward, costs


def _first_bad(ok: Array, h: Array, action: Array, carry: tuple[Array, Array], horizon: int) -> tuple[Array, Array]:
    """Update (first invalid stage, its action) of one episode (stage H: none so far)."""
    stage, bad_action = carry
    first = (stage == horizon) & jnp.logical_not(ok)
    return jnp.where(first, h, stage), jnp.where(first, action.astype(jnp.int32), bad_action)


def _no_bad(horizon: int) -> tuple[Array, Array]:
    return jnp.asarray(horizon, jnp.int32), jnp.zeros((), jnp.int32)


def _finish(plan: _Plan, env: Environment, first_bad: tuple[Array, Array] | None) -> Array | None:
    """Report what the rollout's checks found (module docstring): ``first_bad`` (first invalid
    stage, its action), each (K,) or () for one episode. Returns the "poison" flag (bool ()),
    True where the results must be made NaN (a traced invalid table), or None."""
    horizon, owner = env.horizon, plan.owner
    poison = None
    if plan.table is not None:
        status, describe = plan.table
        if is_concrete(status):
            raise_if(status, lambda v: f"{owner}: {describe(v)}", ValueError)
        else:
            poison = status[0] > 0
    if first_bad is None or not plan.per_step:
        return poison
    stage, action = (jnp.atleast_1d(x) for x in first_bad)
    i = jnp.argmin(stage)
    status = jnp.stack([(stage[i] < horizon).astype(jnp.int32), stage[i], action[i], i.astype(jnp.int32)])
    episode = (lambda s: f" (episode {s[3]})") if jnp.ndim(first_bad[0]) else (lambda s: "")
    if plan.per_step == "range":
        raise_if(status, lambda s: f"{owner}: the policy returned action {s[2]} at stage {s[1]}{episode(s)}; "
                                   f"{env.name} takes {action_range(env)} (Discrete({env.action_space.n}))")
    elif is_concrete(status):  # "no_action": traced results carry NaN instead
        raise_if(status, lambda s: f"{owner}: {_policy_name(plan.actor)} has no valid action at stage {s[1]}"
                                   f"{episode(s)}: its logits are NaN or all -inf", ValueError)
    return poison


def _policy_name(policy: Any) -> str:
    return {"SoftmaxPolicy": "softmax_policy", "TablePolicy": "table_policy"}.get(type(policy).__name__,
                                                                                 type(policy).__name__)


def _poisoned(x: Array | None, poison: Array | None) -> Array | None:
    if x is None or poison is None:
        return x
    return jnp.where(poison, jnp.nan, x)


def _check_paid(owner: str, env: Environment, rewards: Array, costs: Array, kind: str) -> None:
    """Called eagerly: refuse non-finite rewards or costs paid by the environment. ``kind``:
    "stage" (rewards (..., H), costs (..., H, M)), "terminal" (r_H (...), g_H (..., M)) or
    "total" (episode totals); the message names the stage and episode."""
    if not is_concrete((rewards, costs)):
        return
    r = np.asarray(rewards)
    c = np.asarray(costs).reshape(*r.shape, -1)
    bad_r, bad_c = ~np.isfinite(r), ~np.isfinite(c).all(-1)
    if not (bad_r | bad_c).any():
        return
    where = tuple(int(i) for i in np.argwhere(bad_r | bad_c)[0])
    what = "reward" if bad_r[where] else "cost"
    value = r[where] if bad_r[where] else c[where].tolist()
    episode = where[0] if (kind == "stage" and len(where) > 1) or (kind != "stage" and where) else None
    place = {"stage": f"at stage {where[-1] if where else 0}", "terminal": f"as its terminal {what} (stage H)",
             "total": "in an episode's total"}[kind]
    place += "" if episode is None else f" (episode {episode})"
    raise ValueError(f"{owner}: {env.name} paid a non-finite {what} {place}: {value}; the environment or its "
                     "params produce it (not the policy, nor a step size)")


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


def _scan(reset_key: Array, stage_xs: Any, env: Environment, params: Any, plan: _Plan,
          record: frozenset[str] = frozenset(RECORDABLE)):
    """One episode's loop given its reset key and per-stage randomness (``_stage_inputs``,
    leading H): (the recorded per-stage outputs, a dict of leading-H arrays, final state,
    (first invalid stage, its action) or None).

    Tabular environments record the state index in :func:`index_dtype` (S) (observations are
    encoded from it after the loop); others record the state pytree when observations are
    recorded.
    """
    obs, state = env.reset(reset_key, params)
    tabular = env.is_tabular
    keep_states = bool({"states", "observations"} & record)
    state_dtype = index_dtype(env.num_states) if tabular else None
    recorded_action = action_dtype(env)
    checked = bool(plan.per_step)

    def body(carry, xs):
        obs, state, bad = carry
        h, x = xs
        action, next_obs, next_state, reward, costs, ok = _stage_step(x, obs, state, h, env, params, plan)
        out = {}
        if keep_states:
            out["states"] = env.state_index(state).astype(state_dtype) if tabular else state
        if "actions" in record:
            out["actions"] = action.astype(recorded_action)
        if "rewards" in record:
            out["rewards"] = reward
        if "costs" in record:
            out["costs"] = costs
        if checked:
            bad = _first_bad(ok, h, action, bad, env.horizon)
        return (next_obs, next_state, bad), out

    stages = jnp.arange(env.horizon, dtype=jnp.int32)
    bad = _no_bad(env.horizon) if checked else None
    (_, final_state, bad), outs = jax.lax.scan(body, (obs, state, bad), (stages, stage_xs))
    return outs, final_state, bad


def _trajectory(outs: dict[str, Any], final_state: Any, env: Environment, params: Any,
                record: frozenset[str], owner: str = "rollout") -> Trajectory:
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
    terminal_reward, terminal_costs = _terminal(env, owner, final_state, params)
    return Trajectory(
        states=outs["states"] if tabular and "states" in record else None,
        observations=observations,
        actions=outs.get("actions"),
        rewards=outs.get("rewards"),
        costs=outs.get("costs"),
        final_states=env.state_index(final_state).astype(index_dtype(env.num_states)) if tabular else None,
        final_observations=final_observations,
        terminal_rewards=terminal_reward,
        terminal_costs=terminal_costs,
    )


def _observe_index(env: Environment, params: Any, index: Array, h: Array) -> Array:
    """The observation of tabular state ``index`` at stage ``h``."""
    return env.observation(env.state_at(jnp.asarray(index, jnp.int32), h), params)


def _checked_trajectory(traj: Trajectory, plan: _Plan, env: Environment, bad: Any) -> Trajectory:
    """The rollout's checks (:func:`_finish`, then, called eagerly, :func:`_check_paid`)
    applied to its trajectory."""
    poison = _finish(plan, env, bad)
    if poison is not None:
        traj = traj.replace(rewards=_poisoned(traj.rewards, poison), costs=_poisoned(traj.costs, poison),
                            terminal_rewards=_poisoned(traj.terminal_rewards, poison),
                            terminal_costs=_poisoned(traj.terminal_costs, poison))
    if traj.rewards is not None and traj.costs is not None:
        _check_paid(plan.owner, env, traj.rewards, traj.costs, "stage")
    _check_paid(plan.owner, env, traj.terminal_rewards, traj.terminal_costs, "terminal")
    return traj


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
    (:func:`tabulates`): the same actions, faster still. A ``table_policy`` (a policy that
    declares ``reads_state``) is played from the tabular state index ``env.state_index(s_h)``,
    never from the observation, whatever the environment observes.

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

    * fast path (:func:`uses_uniforms`: the policy has ``action_from_uniform(u, obs, h)`` (or
      ``action_from_state(u, index, h)``) and the environment ``noise_from_uniform(u, params)``):
      ONE threefry block per stage, the
      block ``threefry2x32(steps_key, (0, h))`` (with jax's default partitionable threefry, the
      key data of ``jax.random.split(steps_key, H)[h]``); its first 32-bit word gives the policy's uniform u and its second the
      environment's, mapped to [0, 1) as ``jax.random.uniform`` maps bits
      (:func:`uniform_from_bits`). The action is ``policy.action_from_uniform(u, obs, h)`` and
      the step noise ``env.noise_from_uniform(u', params)``. A policy implementing the protocol
      must satisfy ``policy(key, obs, h) == action_from_uniform(uniform(key), obs, h)``
      (e.g. :class:`UniformRandomPolicy`, or inverse-CDF sampling of a probability table);
    * otherwise ``split(steps_key, (H, 2))[h]`` are the (policy, env) keys of stage h: the
      action is ``policy(key, obs, h)`` (a ``reads_state`` policy:
      ``action_from_state(uniform(key), index, h)``) and the noise ``env.noise(key, params)``.

    Either way the result is exactly that of calling the policy and ``env.transition`` stage
    by stage with this randomness (all random numbers are drawn before the scan), whatever is
    recorded. The recorded observations are ``env.observation(s_h, params)``, encoded after
    the scan (on tabular environments from ``env.state_at(s_h, h)``).

    **Checks** (module docstring): the arguments before tracing, shapes and dtypes while
    tracing, and at run time your own policy's actions (an error naming the action, the stage
    and the valid range, also inside your ``jax.jit``) and a library policy's action
    distribution (called eagerly an error; traced, NaN rewards and costs).

    Args:
        key: PRNG key.
        env: the environment (static).
        params: its params pytree (may be traced, e.g. vmapped over; then only its structure
            and shapes are checked).
        policy: ``policy(key, obs, h) -> action`` in [0, A) (static), optionally with
            ``action_from_uniform``.
        num_episodes: K >= 1 (static).
        record: names of the per-stage fields to record (static), a subset of
            :data:`RECORDABLE`; the others are None.
    Returns:
        :class:`Trajectory` with leading axes (K, H).
    Raises:
        ValueError: ``record`` names an unknown field; K is not a positive int; the
            environment's horizon, number of constraints or actions is not a positive int;
            params of another structure, shape or range; a float or non-scalar discrete action,
            rewards or costs of the wrong shape, logits or a table of the wrong shape; called
            eagerly, an invalid action distribution or a non-finite reward or cost.
        InvalidActionError: an action of your policy outside [0, A) (inside your ``jax.jit``:
            ``jax.errors.JaxRuntimeError`` with the same message).
    """
    record = check_record(record)
    plan = _plan("rollout", env, params, policy, num_episodes)
    loops = jax.vmap(lambda k, xs: _scan(k, xs, env, params, plan, record), in_axes=(0, 1))
    outs, final_state, bad = loops(*_episode_inputs(key, env, params, policy, num_episodes))
    traj = jax.vmap(lambda o, f: _trajectory(o, f, env, params, record))(outs, final_state)
    return _checked_trajectory(traj, plan, env, bad)


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
    ``static_argnums=(1, 3, 4)``. The same checks as :func:`rollout` (module docstring);
    called eagerly, a non-finite total is refused naming the episode.

    Returns:
        :class:`Returns` with ``rewards`` (K,) and ``costs`` (K, M).
    Raises:
        ValueError, InvalidActionError: as :func:`rollout`.
    """
    plan = _plan("rollout_returns", env, params, policy, num_episodes)
    checked = bool(plan.per_step)

    def one(reset_key, stage_xs):
        obs, state = env.reset(reset_key, params)

        def body(carry, xs):
            obs, state, total_r, total_c, bad = carry
            h, x = xs
            action, next_obs, next_state, reward, costs, ok = _stage_step(x, obs, state, h, env, params, plan)
            if checked:
                bad = _first_bad(ok, h, action, bad, env.horizon)
            return (next_obs, next_state, total_r + reward, total_c + costs, bad), None

        terminal_r, terminal_c = _terminal(env, plan.owner, state, params)
        init = (obs, state, jnp.zeros_like(terminal_r), jnp.zeros_like(terminal_c),
                _no_bad(env.horizon) if checked else None)
        stages = jnp.arange(env.horizon, dtype=jnp.int32)
        (_, final, total_r, total_c, bad), _ = jax.lax.scan(body, init, (stages, stage_xs))
        terminal_r, terminal_c = _terminal(env, plan.owner, final, params)
        return total_r + terminal_r, total_c + terminal_c, bad

    rewards, costs, bad = jax.vmap(one, in_axes=(0, 1))(*_episode_inputs(key, env, params, policy, num_episodes))
    poison = _finish(plan, env, bad)
    rewards, costs = _poisoned(rewards, poison), _poisoned(costs, poison)
    _check_paid(plan.owner, env, rewards, costs, "total")
    return Returns(rewards=rewards, costs=costs)


def episode(key: Array, env: Environment, params: Any, policy: Policy, *,
            record: Iterable[str] = RECORDABLE) -> Trajectory:
    """One episode (no leading K axes) with episode key ``key``: the episode that
    :func:`rollout` runs for ``key = split(rollout_key, K)[i]``, with the same checks (the
    policy is never tabulated here)."""
    record = check_record(record)
    plan = _plan("episode", env, params, policy, None)
    key, impl = fast_key(_typed(key))
    reset_key, steps_key = jax.random.split(key)
    stage_xs = jax.tree.map(lambda x: x[:, 0], _stage_inputs(steps_key[None], impl, env, params, policy))
    outs, final_state, bad = _scan(_restore_keys(reset_key, impl), stage_xs, env, params, plan, record)
    traj = _trajectory(outs, final_state, env, params, record, plan.owner)
    return _checked_trajectory(traj, plan, env, bad)
