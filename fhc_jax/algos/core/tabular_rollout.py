"""The learners' fast rollout for tabular environments (``env.is_tabular`` and
``env.has_exact_model``), and the time-major :class:`Batch` every learner's update reads.

``fhc_jax.rollout`` is the general door between policies and environments; learners whose
environment has an exact tabular model roll out from a :class:`TabularModel` instead: the
policy is tabulated once per iteration (one batched forward pass over all (h, s)) and each
step is an inverse-CDF draw of the action and a successor-table (or closed-form) draw of the
next state, with the same distribution as ``rollout`` and several times faster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.cmdp.transitions import SparseTransitions
from fhc_jax.envs.encoders import make_encoder
from fhc_jax.random_bits import fast_key, uniform_pairs
from fhc_jax.trajectory import index_dtype

Array = jax.Array


@struct.dataclass
class Batch:
    """K episodes in time-major layout (what every learner's update consumes).

    Attributes (H stages, K episodes, M constraints):
        states: tabular state indices s_0..s_H, int32 (H+1, K); None for environments without
            tabular states (the sampled path).
        actions: a_h, int32 (H, K); float32 (H, K, d) for box actions (the sampled path).
        rewards: r_h(s_h, a_h, s_{h+1}), (H, K).
        costs: g_h^(k)(s_h, a_h, s_{h+1}), (H, K, M).
        terminal_rewards: r_H(s_H), (K,).
        terminal_costs: g_H^(k)(s_H), (K, M).
        observations: the observations of s_0..s_H, (H+1, K, *obs_shape), recorded by the
            sampled path; None on the tabular path (learners read tabulated observations).
        behaviour: what the rollout tabulated that the learner's update may reuse (e.g. the
            behaviour policy table (H, S, A) or its logits), or None.
    """

    states: Array | None
    actions: Array
    rewards: Array
    costs: Array
    terminal_rewards: Array
    terminal_costs: Array
    observations: Array | None = None
    behaviour: Any = None

    @property
    def episode_rewards(self) -> Array:
        """Total reward of each episode, terminal included, (K,)."""
        return jnp.sum(self.rewards, axis=0) + self.terminal_rewards

    @property
    def episode_costs(self) -> Array:
        """Total cost of each episode and constraint, terminal included, (K, M)."""
        return jnp.sum(self.costs, axis=0) + self.terminal_costs


def _time_major_actions(actions: Array) -> Array:
    """Recorded actions (K, H) (indices) or (K, H, d) (box) -> int32 (H, K) or float32 (H, K, d)."""
    actions = jnp.swapaxes(jnp.asarray(actions), 0, 1)
    return actions.astype(jnp.float32 if jnp.issubdtype(actions.dtype, jnp.floating) else jnp.int32)


def batch_from_trajectory(trajectory) -> Batch:
    """Convert a :class:`fhc_jax.trajectory.Trajectory` ((K, H) leading axes) to a time-major
    :class:`Batch` with the observations of s_0..s_H (and tabular state indices when the
    trajectory has them)."""
    states = None
    if trajectory.states is not None:
        states = jnp.concatenate([trajectory.states.T, trajectory.final_states[None]], axis=0).astype(jnp.int32)
    observations = jnp.concatenate([jnp.swapaxes(trajectory.observations, 0, 1), trajectory.final_observations[None]])
    return Batch(
        states=states,
        actions=_time_major_actions(trajectory.actions),
        rewards=jnp.asarray(trajectory.rewards).T,
        costs=jnp.moveaxis(jnp.asarray(trajectory.costs), 0, 1),
        terminal_rewards=jnp.asarray(trajectory.terminal_rewards),
        terminal_costs=jnp.asarray(trajectory.terminal_costs),
        observations=observations,
    )


@struct.dataclass
class TabularModel:
    """Everything a tabular rollout needs, in sampling-friendly form.

    Attributes (S states, A actions, N successors per state-action, H stages, M constraints):
        next_states: successor indices, int32 (S, A, N) or (H, S, A, N).
        cdf: cumulative successor probabilities, same shape.
        last: index of the last successor with positive probability, int32 (S, A) or (H, S, A).
        rewards / costs: realised single-stage signals, indexed as set by ``signal``:
            "arrival": r[h, s'] (H, S) and g[k, h, s'] (M, H, S) (GridWorld: paid on arrival);
            "expected": r[h, s, a] (H, S, A) and (M, H, S, A);
            "full": r[h, s, a, s'] (H, S, A, S) and (M, H, S, A, S).
        terminal_rewards: r_H, (S,); terminal_costs: g_H, (M, S).
        initial_cdf: cumulative beta, (S,).
        signal: static, see above. time_varying: static.
        step_env: static; where set (environments with a closed-form step from one uniform,
            ``noise_from_uniform``, such as ``GridWorld``), rollouts draw successors and signals
            through ``step_env.transition`` instead of the N-way successor table: the same
            distribution, one table lookup instead of an N-way inverse-CDF search.
        step_params: the params ``step_env`` is stepped with (a pytree; None otherwise).
        tabulated_signals: static; whether ``rewards`` / ``costs`` are exactly what a step
            pays even where ``step_env`` steps (true for environments that declare
            ``pays_on_arrival``). Rollouts then read the signals from the tables after the
            loop instead of recording them in it (rollouts through the successor table always
            do). False for models whose tables are placeholders (Saute's augmented model).
    """

    next_states: Array
    cdf: Array
    last: Array
    rewards: Array
    costs: Array
    terminal_rewards: Array
    terminal_costs: Array
    initial_cdf: Array
    signal: str = struct.field(pytree_node=False, default="expected")
    time_varying: bool = struct.field(pytree_node=False, default=False)
    step_env: Any = struct.field(pytree_node=False, default=None)
    step_params: Any = None
    tabulated_signals: bool = struct.field(pytree_node=False, default=False)

    @property
    def num_constraints(self) -> int:
        return self.costs.shape[0]


def _successor_form(transitions, num_states: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(transitions, SparseTransitions):
        return np.asarray(transitions.next_states), np.asarray(transitions.probabilities, np.float64)
    dense = np.asarray(transitions, np.float64)
    nxt = np.broadcast_to(np.arange(num_states, dtype=np.int32), dense.shape)
    return nxt, dense


def tabular_model(env, params, dtype=jnp.float32) -> TabularModel:
    """Build the fast-rollout model of a tabular environment (host-side).

    Environments that declare ``pays_on_arrival`` keep the exact per-transition signals of
    ``env.step`` (``env.arrival_signals``); any other is read through ``env.to_cmdp(params)``,
    whose rewards are per next state (H, S, A, S) or expected (H, S, A), exactly what a tabular
    environment built from that model pays. Environments that also declare
    ``has_uniform_noise`` are stepped through their own closed-form transition.

    Raises:
        ValueError: an environment without ``is_tabular`` and ``has_exact_model``.
    """
    if not (env.is_tabular and env.has_exact_model):
        raise ValueError(
            f"{env.name} has no tabular exact model (is_tabular and has_exact_model): "
            "the tabular learner rollout cannot run on it"
        )
    cmdp: TabularCMDP = env.to_cmdp(params)
    nxt, prob = _successor_form(cmdp.transitions, cmdp.num_states)
    term_r, term_c, beta = cmdp.terminal_rewards, cmdp.terminal_costs, cmdp.initial_distribution
    time_varying = cmdp.time_varying
    if env.pays_on_arrival:
        signal = "arrival"
        rewards, costs = env.arrival_signals(params)
    else:
        signal = "full" if cmdp.rewards.ndim == 4 else "expected"
        rewards, costs = cmdp.rewards, cmdp.costs
        if signal == "expected" and cmdp.costs.ndim == 5:
            costs = cmdp.expected_costs()
        if signal == "full" and cmdp.costs.ndim == 4:
            costs = jnp.broadcast_to(cmdp.costs[..., None], cmdp.costs.shape + (cmdp.num_states,))
    steps_itself = env.has_uniform_noise
    cdf = np.cumsum(prob, axis=-1)
    n = prob.shape[-1]
    last = (n - 1 - np.argmax(prob[..., ::-1] > 0, axis=-1)).astype(np.int32)
    return TabularModel(
        next_states=jnp.asarray(nxt, jnp.int32),
        cdf=jnp.asarray(cdf, dtype),
        last=jnp.asarray(last),
        rewards=jnp.asarray(rewards, dtype),
        costs=jnp.asarray(costs, dtype),
        terminal_rewards=jnp.asarray(term_r, dtype),
        terminal_costs=jnp.asarray(term_c, dtype),
        initial_cdf=jnp.asarray(np.cumsum(np.asarray(beta, np.float64)), dtype),
        signal=signal,
        time_varying=time_varying,
        step_env=env if steps_itself else None,
        step_params=params if steps_itself else None,
        tabulated_signals=signal == "arrival",
    )


def _uniform(key: Array, shape: tuple[int, ...], dtype) -> Array:
    """``jax.random.uniform`` through the rollout module's unrolled threefry when it applies
    (bit-identical stream, several times faster on CPU)."""
    return jax.random.uniform(fast_key(key)[0], shape, dtype)


def inverse_cdf(cdf: Array, u: Array, last: Array | int) -> Array:
    """Index i with cdf[i-1] <= u * cdf[-1] < cdf[i] (one uniform per draw), int32.

    Args:
        cdf: (..., n) non-decreasing cumulative weights (need not end exactly at 1).
        u: (...) uniforms in [0, 1).
        last: (...) or scalar, the last index with positive weight (guards rounding).
    """
    target = u * cdf[..., -1]
    i = jnp.sum(cdf <= target[..., None], axis=-1).astype(jnp.int32)
    return jnp.minimum(i, last)


def cumulative_sum(x: Array) -> Array:
    """``jnp.cumsum(x, axis=-1)``, the same numbers (each entry the previous one plus the next
    term, in order), as elementwise additions when the last axis is short: XLA's CPU code for
    a cumulative sum (a reduce-window) is several times slower."""
    n = x.shape[-1]
    if n > 32:
        return jnp.cumsum(x, axis=-1)
    columns = [x[..., 0]]
    for j in range(1, n):
        columns.append(columns[-1] + x[..., j])
    return jnp.stack(columns, axis=-1)


def search_cdf(cdf: Array, u: Array, last: Array | int) -> Array:
    """:func:`inverse_cdf` for one long cumulative row shared by all draws: ``cdf`` (n,),
    ``u`` (...), by binary search (O(log n) per draw instead of O(n)); the same indices."""
    target = u * cdf[-1]
    i = jnp.searchsorted(cdf, target, side="right", method="scan").astype(jnp.int32)
    return jnp.minimum(i, last)


def rollout_tabular(
    key: Array,
    model: TabularModel,
    policy_xs: Any,
    action_cdf: Callable[[Any, Array], Array],
    num_episodes: int,
) -> Batch:
    """K episodes of a tabular model under a non-stationary policy, ``lax.scan`` over stages.

    Randomness: one uniform per episode for s_0 and two per (stage, episode) (action, then
    successor) from one threefry block (:func:`fhc_jax.random_bits.uniform_pairs`), drawn up front;
    each key is used once. The successor uniform goes to the environment's own step where the
    model has one (``TabularModel.step_env``), else to an inverse-CDF search of the successor
    table. The loop writes only successors and actions, in their narrowest integer dtypes
    (:func:`fhc_jax.trajectory.index_dtype`); rewards and costs are read from the model's tables
    after it (``TabularModel.tabulated_signals``), so inside a jitted training step they are
    gathered where the update consumes them instead of being written and read back. The
    :class:`Batch` holds int32 indices.

    Args:
        key: PRNG key.
        model: :class:`TabularModel`.
        policy_xs: per-stage policy data with a leading H axis (scanned over), e.g. the
            cumulative policy table (H, S, A) or per-stage logits parameters.
        action_cdf: ``action_cdf(xs_h, states (K,)) -> (K, A)`` cumulative action weights.
        num_episodes: K.
    Returns:
        :class:`Batch`.
    """
    k_init, k_steps = jax.random.split(key)
    horizon = model.rewards.shape[0]
    u0 = _uniform(k_init, (num_episodes,), model.cdf.dtype)
    u = uniform_pairs(k_steps, (horizon, num_episodes))  # complex64: (action, successor) uniforms
    s0 = search_cdf(model.initial_cdf, u0, model.initial_cdf.shape[0] - 1)
    hs = jnp.arange(horizon, dtype=jnp.int32)
    # the loop records only what cannot be recomputed: successors and actions in their narrowest
    # exact dtypes, and the signals only where a closed-form step pays what the tables do not
    tabulated = model.step_env is None or model.tabulated_signals
    state_dtype = index_dtype(model.initial_cdf.shape[0])

    def env_step(u, s, a, h):
        env, p = model.step_env, model.step_params
        _, state, r, g, _, _ = env.transition(env.noise_from_uniform(u, p), env.state_at(s, h), a, p)
        return env.state_index(state), r.astype(model.rewards.dtype), g.astype(model.costs.dtype)

    def step(s, xs):
        pol_h, u_h, h, kern_h = xs
        cdf_a = action_cdf(pol_h, s)
        a = inverse_cdf(cdf_a, u_h.real.astype(cdf_a.dtype), cdf_a.shape[-1] - 1)
        if model.step_env is not None:
            s2, r, g = jax.vmap(env_step, in_axes=(0, 0, 0, None))(u_h.imag, s, a, h)
        else:
            nxt, cdf, last = kern_h if model.time_varying else (model.next_states, model.cdf, model.last)
            j = inverse_cdf(cdf[s, a], u_h.imag.astype(cdf.dtype), last[s, a])
            s2, r, g = nxt[s, a, j], None, None
        out = (s2.astype(state_dtype), a.astype(index_dtype(cdf_a.shape[-1])))
        return s2, out if tabulated else (*out, r, g)

    kern_xs = (model.next_states, model.cdf, model.last) if model.time_varying else None
    s_final, outs = jax.lax.scan(step, s0, (policy_xs, u, hs, kern_xs))
    states = jnp.concatenate([s0[None], outs[0].astype(jnp.int32)], axis=0)  # (H+1, K)
    actions = outs[1].astype(jnp.int32)
    if tabulated:
        r, g = _tabulated_signals(model, states, actions)
    else:
        r, g = outs[2], outs[3]
    return Batch(
        states=states,
        actions=actions,
        rewards=r,
        costs=g,
        terminal_rewards=model.terminal_rewards[s_final],
        terminal_costs=model.terminal_costs[:, s_final].T,
    )


def _tabulated_signals(model: TabularModel, states: Array, actions: Array) -> tuple[Array, Array]:
    """Rewards (H, K) and costs (H, K, M) of time-major episodes (states (H+1, K), actions
    (H, K)) read from the model's tables: exactly what the rollout's steps pay."""
    horizon, num_states = actions.shape[0], model.initial_cdf.shape[0]
    hh = jnp.arange(horizon, dtype=jnp.int32)[:, None]
    s, s2 = states[:-1], states[1:]
    num_actions = model.rewards.shape[2] if model.signal != "arrival" else 0
    if model.signal == "arrival":  # one flat index per sample (no stacked index pairs)
        cell = hh * num_states + s2
    elif model.signal == "expected":
        cell = (hh * num_states + s) * num_actions + actions
    else:
        cell = ((hh * num_states + s) * num_actions + actions) * num_states + s2
    rewards = model.rewards.reshape(-1)[cell]
    costs = model.costs.reshape(model.num_constraints, -1)[:, cell]  # (M, H, K)
    return rewards, jnp.moveaxis(costs, 0, -1)


def rollout_policy_table(key: Array, model: TabularModel, table: Array, num_episodes: int) -> Batch:
    """K episodes under a tabulated non-stationary policy ``table`` (H, S, A) (rows sum to 1).

    The learners that act through networks tabulate their policy once per iteration (one
    batched forward pass over all (h, s)) and roll out from the table: same distribution as
    acting per sample, far cheaper for tabular environments.
    """
    return rollout_tabular(key, model, cumulative_sum(table), lambda cdf_h, s: cdf_h[s], num_episodes)


def observation_table(env, params, observation: str | None = None) -> Array:
    """The encoded observation of every state at every stage h = 0..H:
    ``table[h, s] = encoder(env, env.state_at(s, h))``, (H+1, S, *obs_shape), float32.

    Args:
        env, params: the environment.
        observation: encoder name ("xy", "xyt", "one_hot", "index"; see
            :mod:`fhc_jax.envs.encoders`), or None for the environment's own encoder. A learner
            whose config chooses its input (e.g. the baselines' "Env 1" / "Env 2") passes it here.
    Raises:
        ValueError: an encoder the environment does not support.

    Network learners gather their inputs from it (:func:`batch_observations`): the stage-H
    rows feed the terminal critics V_H, W_H.
    """
    if observation is None:
        encode = lambda state: env.observation(state, params)
    else:
        encoder = make_encoder(env.name, observation, env.supported_observations)
        encode = lambda state: encoder(env, state)
    hs = jnp.arange(env.horizon + 1, dtype=jnp.int32)
    ss = jnp.arange(env.num_states, dtype=jnp.int32)
    table = jax.vmap(lambda h: jax.vmap(lambda s: encode(env.state_at(s, h)))(ss))(hs)
    return jnp.asarray(table, jnp.float32)


def batch_observations(table: Array, states: Array) -> Array:
    """Observations of time-major states (L, K) at stages 0..L-1: ``table[h, states[h]]``,
    (L, K, *obs_shape)."""
    hs = jnp.arange(states.shape[0], dtype=jnp.int32)[:, None]
    return table[hs, states]


def value_scale(model: TabularModel) -> np.ndarray:
    """Fixed output scale of the critics per signal [r, g^(1..M)]: the return bound
    B = H max|u_h| + max|u_H| (1 where the signal is identically 0), so the critic networks
    regress targets of order one whatever the horizon. (1 + M,), float32 (host-side)."""
    horizon = model.rewards.shape[0]

    def bound(stage, terminal):
        b = horizon * float(np.max(np.abs(np.asarray(stage)), initial=0.0)) + float(
            np.max(np.abs(np.asarray(terminal)), initial=0.0)
        )
        return b if b > 0 else 1.0

    scales = [bound(model.rewards, model.terminal_rewards)]
    scales += [bound(model.costs[k], model.terminal_costs[k]) for k in range(model.num_constraints)]
    return np.asarray(scales, np.float32)
