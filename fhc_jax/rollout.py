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
fast path of :func:`rollout`: one threefry block per step, both of its 32-bit words used
(:mod:`fhc_jax.random_bits`).
Write policies with :func:`fhc_jax.softmax_policy` (logits of an observation) or
:func:`fhc_jax.table_policy` (a probability table) rather than with
``jax.random.categorical``: they implement that protocol (one uniform per step, inverse CDF)
and sample the same distribution several times faster. Writing the trajectory costs more
than stepping a tabular environment: ``record=`` keeps only the fields a caller reads, in
the narrowest exact integer dtypes (:class:`~fhc_jax.trajectory.Trajectory`).

**Checks at the boundary** (every public path: :func:`rollout`, :func:`rollout_returns`,
:func:`episode`): arguments before anything is traced, shapes and dtypes while tracing, and at
run time out-of-range actions, invalid action distributions and non-finite rewards or costs
(:mod:`fhc_jax.rollout_checks` says what is refused where, and how it is reported).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.envs.base import Environment, check_int, check_static
from fhc_jax.envs.spaces import Box
from fhc_jax.envs.validation import action_range, check_action
from fhc_jax.random_bits import fast_key, restore_keys, threefry2x32, typed_key, uniform_from_bits
from fhc_jax.rollout_checks import (
    Plan,
    check_paid,
    check_signals,
    no_bad,
    poisoned,
    report_checks,
    terminal_signals,
    track_first_bad,
)
from fhc_jax.trajectory import RECORDABLE, Returns, Trajectory, index_dtype

Array = jax.Array

#: ``policy(key, observation, h) -> action``: unbatched observation, stage h (int32 scalar,
#: the same for all episodes), action an int32 scalar in [0, A) (discrete actions) or a float32
#: (d,) vector (box actions, recorded as proposed; the environment clips); a pure function of its
#: arguments. Keys reach it as ``fhc_jax.random_bits.UNROLLED_THREEFRY`` keys when the caller's
#: key is a threefry key: the same random streams as ``jax.random.key`` keys, faster on CPU.
#: Optional members (read by the rollouts, see :func:`rollout`):
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


@dataclasses.dataclass(frozen=True)
class UniformRandomPolicy:
    """mu_h(s, a) = 1 / A from one uniform draw (hashable, a valid static argument).

    Implements the fast protocol ``action_from_uniform`` (see :func:`rollout`)."""

    num_actions: int

    def check_actions(self, env: Environment, observation: Any, h: Array) -> None:
        """Its actions lie in [0, ``num_actions``): refuse an environment with another A."""
        if env.has_box_actions or self.num_actions != env.action_space.n:
            raise ValueError(
                f"uniform_random_policy({self.num_actions}) draws actions in [0, {self.num_actions}); "
                f"{env.name} takes {_space_text(env)}: use random_policy(env)"
            )

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
        return jax.random.uniform(
            key, (len(self.low),), jnp.float32, jnp.asarray(self.low, jnp.float32), jnp.asarray(self.high, jnp.float32)
        )


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
    """The dtype :func:`rollout` records actions in: :func:`~fhc_jax.trajectory.index_dtype`
    (A) for discrete actions, float32 for box actions."""
    space = env.action_space
    return np.dtype(np.float32) if isinstance(space, Box) else index_dtype(space.n)


# ----------------------------------------------------------------------------- rollout


def reads_state(policy: Any) -> bool:
    """Whether ``policy`` plays from the tabular state index rather than the observation
    (it declares ``reads_state = True`` and has ``action_from_state(u, index, h)``, e.g.
    :func:`fhc_jax.table_policy`): the rollouts pass ``env.state_index(state)`` to it."""
    return getattr(policy, "reads_state", False) is True


def uses_uniforms(env: Environment, policy: Any) -> bool:
    """Whether rollouts take the fast path: the environment declares ``has_uniform_noise``
    and the policy ``action_from_uniform`` or ``action_from_state`` (:func:`reads_state`)."""
    return (
        env.has_uniform_noise
        and not env.has_box_actions
        and (reads_state(policy) or callable(getattr(policy, "action_from_uniform", None)))
    )


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
    return (
        uses_uniforms(env, policy)
        and env.is_tabular
        and callable(getattr(policy, "on_states", None))
        and 2 * env.num_states <= num_episodes
        and env.horizon * env.num_states * env.num_actions <= MAX_TABLE_ENTRIES
    )


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
    return stage_keys[..., 0], restore_keys(noise, impl)


def _episode_inputs(key: Array, env: Environment, params: Any, policy: Policy, num_episodes: int) -> tuple[Array, Any]:
    """Reset keys (K,) and per-stage randomness (leading (H, K)) of the K episodes of ``key``:
    episode i uses ``split(key, K)[i]`` only, split again into (reset key, steps key)."""
    key, impl = fast_key(typed_key(key))
    keys = jax.random.split(key, num_episodes)
    reset_keys, steps_keys = jax.vmap(jax.random.split, out_axes=1)(keys)
    return restore_keys(reset_keys, impl), _stage_inputs(steps_keys, impl, env, params, policy)


def _plan(owner: str, env: Environment, params: Any, policy: Any, num_episodes: int | None) -> Plan:
    """Static checks of a rollout's arguments (:mod:`fhc_jax.rollout_checks`), then its
    :class:`~fhc_jax.rollout_checks.Plan`."""
    check_static(env, owner)
    if num_episodes is not None:
        check_int(owner, "num_episodes (K)", num_episodes, 1)
    if not (callable(policy) or reads_state(policy)):
        raise ValueError(
            f"{owner}: policy must be a function policy(key, observation, h) -> action, found {type(policy).__name__}"
        )
    env.check_params(params, owner)
    tabulated = num_episodes is not None and tabulates(env, policy, num_episodes)
    actor = policy.on_states(env, params) if tabulated else policy
    if reads_state(actor) and not env.is_tabular:
        raise ValueError(
            f"{owner}: {type(policy).__name__} plays from tabular state indices (reads_state); "
            f"{env.name} has none (is_tabular is False)"
        )
    if env.has_box_actions:
        per_step = ""
    elif callable(getattr(actor, "check_actions", None)):
        per_step = "no_action" if getattr(actor, "returns_no_action", False) else ""
    else:
        per_step = "range"
    table = actor.table_check() if callable(getattr(actor, "table_check", None)) else None
    return Plan(owner, actor, uses_uniforms(env, policy), per_step, table)


def _stage_step(x: Any, obs: Any, state: Any, h: Array, env: Environment, params: Any, plan: Plan):
    """One stage of one episode from its randomness ``x`` (an element of ``_stage_inputs``):
    the policy's action, then ``env.transition``. Returns (action, next_obs, next_state,
    reward, costs, ok): ``ok`` () bool whether the action was valid (None without a per-step
    check, :class:`~fhc_jax.rollout_checks.Plan`); with "no_action", reward and costs are NaN
    where it was not."""
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
            draw = lambda: check_action(
                env,
                actor.action_from_state(jax.random.uniform(key, (), jnp.float32), env.state_index(state), h),
                owner,
                source,
            )
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
    check_signals(env, owner, "transition", reward, costs)
    if plan.per_step == "no_action":
        reward = jnp.where(ok, reward, jnp.nan)
        costs = jnp.where(ok, costs, jnp.nan)
    return action, next_obs, next_state, reward, costs, ok


def check_record(record: Iterable[str]) -> frozenset[str]:
    """Validate ``rollout``'s ``record`` argument (before any compilation).

    Raises:
        ValueError: ``record`` is not a collection of names from
            :data:`~fhc_jax.trajectory.RECORDABLE`.
    """
    if isinstance(record, str) or not isinstance(record, Iterable):
        raise ValueError(f"rollout: record must be a tuple of field names from {RECORDABLE}, found {record!r}")
    names = tuple(record)
    unknown = [n for n in names if n not in RECORDABLE]
    if unknown:
        raise ValueError(f"rollout: record must name fields from {RECORDABLE}, found {unknown}")
    return frozenset(names)


def _scan(
    reset_key: Array,
    stage_xs: Any,
    env: Environment,
    params: Any,
    plan: Plan,
    record: frozenset[str] = frozenset(RECORDABLE),
):
    """One episode's loop given its reset key and per-stage randomness (``_stage_inputs``,
    leading H): (the recorded per-stage outputs, a dict of leading-H arrays, final state,
    (first invalid stage, its action) or None).

    Tabular environments record the state index in :func:`~fhc_jax.trajectory.index_dtype` (S)
    (observations are encoded from it after the loop); others record the state pytree when
    observations are recorded.
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
            bad = track_first_bad(ok, h, action, bad, env.horizon)
        return (next_obs, next_state, bad), out

    stages = jnp.arange(env.horizon, dtype=jnp.int32)
    bad = no_bad(env.horizon) if checked else None
    (_, final_state, bad), outs = jax.lax.scan(body, (obs, state, bad), (stages, stage_xs))
    return outs, final_state, bad


def _trajectory(
    outs: dict[str, Any],
    final_state: Any,
    env: Environment,
    params: Any,
    record: frozenset[str],
    owner: str = "rollout",
) -> Trajectory:
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
    terminal_reward, terminal_costs = terminal_signals(env, owner, final_state, params)
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


def _checked_trajectory(traj: Trajectory, plan: Plan, env: Environment, bad: Any) -> Trajectory:
    """The rollout's checks (:func:`~fhc_jax.rollout_checks.report_checks`, then, called
    eagerly, :func:`~fhc_jax.rollout_checks.check_paid`)
    applied to its trajectory."""
    poison = report_checks(plan, env, bad)
    if poison is not None:
        traj = traj.replace(
            rewards=poisoned(traj.rewards, poison),
            costs=poisoned(traj.costs, poison),
            terminal_rewards=poisoned(traj.terminal_rewards, poison),
            terminal_costs=poisoned(traj.terminal_costs, poison),
        )
    if traj.rewards is not None and traj.costs is not None:
        check_paid(plan.owner, env, traj.rewards, traj.costs, "stage")
    check_paid(plan.owner, env, traj.terminal_rewards, traj.terminal_costs, "terminal")
    return traj


def rollout(
    key: Array, env: Environment, params: Any, policy: Policy, num_episodes: int, *, record: Iterable[str] = RECORDABLE
) -> Trajectory:
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

    **What is recorded.** ``record`` names the per-stage fields to keep
    (:data:`~fhc_jax.trajectory.RECORDABLE`, all by default): e.g. ``record=("states",
    "actions", "rewards", "costs")`` skips the observations, which
    :func:`trajectory_observations` recomputes from the states on tabular environments. Writing
    the (K, H) arrays costs more than stepping a tabular environment, so record only what you
    read. State and action indices are stored in the narrowest exact signed integer dtype
    (:class:`~fhc_jax.trajectory.Trajectory`); final states, terminal rewards and terminal
    costs are always kept.

    Randomness: episode i uses ``key_i = split(key, K)[i]`` only (the same key gives the same
    trajectories for any K), ``reset_key, steps_key = split(key_i)``; s_0 comes from
    ``env.reset(reset_key, params)``. Stage h's randomness comes from ``steps_key``:

    * fast path (:func:`uses_uniforms`: the policy has ``action_from_uniform(u, obs, h)`` (or
      ``action_from_state(u, index, h)``) and the environment ``noise_from_uniform(u, params)``):
      ONE threefry block per stage, the block ``threefry2x32(steps_key, (0, h))`` (with jax's
      default partitionable threefry, the key data of ``jax.random.split(steps_key, H)[h]``);
      its first 32-bit word gives the policy's uniform u and its second the environment's,
      mapped to [0, 1) as ``jax.random.uniform`` maps bits
      (:func:`fhc_jax.random_bits.uniform_from_bits`). The action is
      ``policy.action_from_uniform(u, obs, h)`` and the step noise
      ``env.noise_from_uniform(u', params)``. A policy implementing the protocol
      must satisfy ``policy(key, obs, h) == action_from_uniform(uniform(key), obs, h)``
      (e.g. :class:`UniformRandomPolicy`, or inverse-CDF sampling of a probability table);
    * otherwise ``split(steps_key, (H, 2))[h]`` are the (policy, env) keys of stage h: the
      action is ``policy(key, obs, h)`` (a ``reads_state`` policy:
      ``action_from_state(uniform(key), index, h)``) and the noise ``env.noise(key, params)``.

    Either way the result is exactly that of calling the policy and ``env.transition`` stage
    by stage with this randomness (all random numbers are drawn before the scan), whatever is
    recorded. The recorded observations are ``env.observation(s_h, params)``, encoded after
    the scan (on tabular environments from ``env.state_at(s_h, h)``).

    **Checks** (:mod:`fhc_jax.rollout_checks`): the arguments before tracing, shapes and dtypes while
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
            :data:`~fhc_jax.trajectory.RECORDABLE`; the others are None.
    Returns:
        :class:`~fhc_jax.trajectory.Trajectory` with leading axes (K, H).
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
        raise ValueError(
            f"trajectory_observations: {env.name} has no tabular states (is_tabular) to recompute "
            "observations from; record them (rollout's record= with 'observations')"
        )
    if trajectory.states is None or trajectory.final_states is None:
        raise ValueError(
            "trajectory_observations: the trajectory has no states (rollout's record= must include 'states')"
        )
    stages = jnp.arange(trajectory.states.shape[-1], dtype=jnp.int32)
    per_episode = jax.vmap(lambda s, h: _observe_index(env, params, s, h))
    observations = jax.vmap(per_episode, in_axes=(0, None))(trajectory.states, stages)
    final = jax.vmap(lambda s: _observe_index(env, params, s, jnp.int32(env.horizon)))(trajectory.final_states)
    return observations, final


def rollout_returns(key: Array, env: Environment, params: Any, policy: Policy, num_episodes: int) -> Returns:
    """Episode totals of the same K episodes as :func:`rollout` (same key, same randomness,
    identical totals up to float summation order), without recording trajectories.

    For Monte-Carlo policy evaluation: the (K, H) trajectory arrays are never written, and the
    totals accumulate in the loop carry, so memory is O(K) and the loop is bound by the
    environment step and random-number generation alone. Jit with
    ``static_argnums=(1, 3, 4)``. The same checks as :func:`rollout`
    (:mod:`fhc_jax.rollout_checks`); called eagerly, a non-finite total is refused naming the
    episode.

    Returns:
        :class:`~fhc_jax.trajectory.Returns` with ``rewards`` (K,) and ``costs`` (K, M).
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
                bad = track_first_bad(ok, h, action, bad, env.horizon)
            return (next_obs, next_state, total_r + reward, total_c + costs, bad), None

        terminal_r, terminal_c = terminal_signals(env, plan.owner, state, params)
        init = (
            obs,
            state,
            jnp.zeros_like(terminal_r),
            jnp.zeros_like(terminal_c),
            no_bad(env.horizon) if checked else None,
        )
        stages = jnp.arange(env.horizon, dtype=jnp.int32)
        (_, final, total_r, total_c, bad), _ = jax.lax.scan(body, init, (stages, stage_xs))
        terminal_r, terminal_c = terminal_signals(env, plan.owner, final, params)
        return total_r + terminal_r, total_c + terminal_c, bad

    rewards, costs, bad = jax.vmap(one, in_axes=(0, 1))(*_episode_inputs(key, env, params, policy, num_episodes))
    poison = report_checks(plan, env, bad)
    rewards, costs = poisoned(rewards, poison), poisoned(costs, poison)
    check_paid(plan.owner, env, rewards, costs, "total")
    return Returns(rewards=rewards, costs=costs)


def episode(
    key: Array, env: Environment, params: Any, policy: Policy, *, record: Iterable[str] = RECORDABLE
) -> Trajectory:
    """One episode (no leading K axes) with episode key ``key``: the episode that
    :func:`rollout` runs for ``key = split(rollout_key, K)[i]``, with the same checks (the
    policy is never tabulated here)."""
    record = check_record(record)
    plan = _plan("episode", env, params, policy, None)
    key, impl = fast_key(typed_key(key))
    reset_key, steps_key = jax.random.split(key)
    stage_xs = jax.tree.map(lambda x: x[:, 0], _stage_inputs(steps_key[None], impl, env, params, policy))
    outs, final_state, bad = _scan(restore_keys(reset_key, impl), stage_xs, env, params, plan, record)
    traj = _trajectory(outs, final_state, env, params, record, plan.owner)
    return _checked_trajectory(traj, plan, env, bad)
