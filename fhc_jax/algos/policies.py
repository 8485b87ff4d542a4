"""Fast-sampling policies for :func:`fhc_jax.rollout` (public as ``fhc_jax.softmax_policy`` and
``fhc_jax.table_policy``); every learner's ``policy(...)`` is one of them.

Both implement the rollout's fast protocol ``action_from_uniform(u, observation, h)``: ONE
uniform per step, turned into an action by inverse CDF, instead of the A Gumbel draws (A
threefry blocks, A logarithms) of ``jax.random.categorical``. They sample the same
distribution (tests/test_fast_policies.py checks it with chi-square tests) and cost several
times less in a rollout (``benchmarks/env_throughput.py``; docs/benchmarks.md). On tabular
environments the rollout plays a :func:`softmax_policy` from its table over (stage, state)
(:meth:`SoftmaxPolicy.on_states`, :func:`fhc_jax.rollout.tabulates`): the same actions, faster
still.

The contract of the protocol: ``policy(key, obs, h) == policy.action_from_uniform(
jax.random.uniform(key), obs, h)``, so the key path and the fast path of ``rollout`` sample
the same actions from the same uniforms.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.algos.tabular_rollout import cumulative_sum, inverse_cdf
from fhc_jax.rollout import _observe_index

Array = jax.Array

#: up to this many actions the softmax's cumulative sum is unrolled into elementwise
#: operations over the episodes (XLA's CPU code for reductions over a short minor axis is
#: several times slower); beyond it ``jnp.cumsum``
_UNROLL_ACTIONS = 32


def softmax_inverse_cdf(logits: Array, u: Array) -> Array:
    """The action i with C_{i-1} <= u * C_{A-1} < C_i, where C is the cumulative sum of
    exp(logits - max(logits)), for one uniform u in [0, 1): a draw from softmax(logits)
    without normalising (no division), int32 in [0, A).

    Actions with logit -inf (probability 0) are never drawn; at least one logit must be
    finite (and none +inf or NaN). float32 unless the logits are wider.

    Args:
        logits: (A,) unnormalised log-probabilities.
        u: () uniform in [0, 1).
    """
    dtype = jnp.promote_types(jnp.result_type(logits), jnp.float32)
    logits = jnp.asarray(logits, dtype)
    u = jnp.asarray(u, dtype)
    if logits.shape[-1] > _UNROLL_ACTIONS:
        return _draw(softmax_cumulative(logits), u)
    return _count_below(_unrolled_cumulative(logits), u)


def _unrolled_cumulative(logits: Array) -> list[Array]:
    """C_i = sum_{j <= i} exp(logits_j - max(logits)) as A arrays of the leading shape,
    unrolled into elementwise operations (A <= ``_UNROLL_ACTIONS``)."""
    columns = [logits[..., i] for i in range(logits.shape[-1])]
    top = columns[0]
    for c in columns[1:]:
        top = jnp.maximum(top, c)
    cumulative = [jnp.exp(columns[0] - top)]
    for c in columns[1:]:
        cumulative.append(cumulative[-1] + jnp.exp(c - top))
    return cumulative


def _draw(cumulative: Array, u: Array) -> Array:
    """The inverse-CDF draw for uniform u from cumulative weights (..., A) as one comparison
    against the whole row (the form for A > ``_UNROLL_ACTIONS``; shorter rows go through
    :func:`_count_below` of their columns), int32 in [0, A)."""
    count = jnp.sum(cumulative <= (u * cumulative[..., -1])[..., None], axis=-1)
    return jnp.minimum(count, cumulative.shape[-1] - 1).astype(jnp.int32)


def _count_below(cumulative: list[Array], u: Array) -> Array:
    """#{i < A-1 : C_i <= u * C_{A-1}}, int32: the inverse-CDF draw for uniform u."""
    target = u * cumulative[-1]  # < cumulative[-1] for u < 1: the count stays below A
    count = jnp.zeros(jnp.shape(target), jnp.int32)
    for c in cumulative[:-1]:
        count = count + (c <= target).astype(jnp.int32)
    return count


@dataclasses.dataclass(frozen=True)
class SoftmaxPolicy:
    """pi_h(a | o) = softmax(``logits_fn(o, h)``)_a with the fast protocol (see
    :func:`softmax_policy`). Hashable when ``logits_fn`` is (a valid static argument)."""

    logits_fn: Callable[[Array, Array], Array]

    def logits(self, observation: Any, h: Array) -> Array:
        """``logits_fn(observation, h)``, (A,), computed inside a ``lax.cond`` on ``h >= 0``
        (always true): XLA never fuses across a conditional, so the logits are computed once
        per step as their own kernels instead of being recomputed inside each consumer."""
        shape = jax.eval_shape(self.logits_fn, observation, h)
        return jax.lax.cond(jnp.asarray(h) >= 0, lambda: jnp.asarray(self.logits_fn(observation, h)),
                            lambda: jnp.zeros(shape.shape, shape.dtype))

    def action_from_uniform(self, u: Array, observation: Any, h: Array) -> Array:
        """The action for uniform ``u`` in [0, 1) (:func:`softmax_inverse_cdf`), int32.

        The draw is a second ``lax.cond`` (on ``h >= 0``, always true): its consumers (the
        environment's step, the recorded action) then read one computed action, where XLA
        would otherwise split the exponentials into separate kernels that each recompute
        the logits' maximum."""
        logits = self.logits(observation, h)
        return jax.lax.cond(jnp.asarray(h) >= 0, lambda: softmax_inverse_cdf(logits, u),
                            lambda: jnp.zeros(jnp.shape(u), jnp.int32))

    def __call__(self, key: Array, observation: Any, h: Array) -> Array:
        return self.action_from_uniform(jax.random.uniform(key, (), jnp.float32), observation, h)

    def on_states(self, env, params: Any) -> StateSoftmaxTable:
        """This policy tabulated over every (stage, state) of a tabular environment: the
        logits of each state's observation at each stage, evaluated once (H S evaluations of
        ``logits_fn``), turned into the cumulative weights that :meth:`action_from_uniform`
        computes at each step. :func:`fhc_jax.rollout` uses it when S is small against K
        (:func:`fhc_jax.rollout.tabulates`): the same actions from the same uniforms, with a
        row lookup per step instead of A exponentials.

        Args:
            env: a tabular environment (``env.is_tabular``).
            params: its params.
        Returns:
            :class:`StateSoftmaxTable` with cumulative weights, action-major (H, A, S).
        """
        horizon, num_states = env.horizon, env.num_states
        stages = jnp.arange(horizon, dtype=jnp.int32)
        states = jnp.arange(num_states, dtype=jnp.int32)

        def logits_at(h):
            observations = jax.vmap(lambda s: _observe_index(env, params, s, h))(states)
            return jax.vmap(lambda o: jnp.asarray(self.logits_fn(o, h)))(observations)

        logits = jax.vmap(logits_at)(stages)  # (H, S, A)
        dtype = jnp.promote_types(jnp.result_type(logits), jnp.float32)
        return StateSoftmaxTable(jnp.moveaxis(softmax_cumulative(jnp.asarray(logits, dtype)), -1, 1))


def softmax_cumulative(logits: Array) -> Array:
    """The cumulative weights C (..., A) that :func:`softmax_inverse_cdf` draws from:
    C_i = sum_{j <= i} exp(logits_j - max(logits)), computed with the same operations."""
    if logits.shape[-1] > _UNROLL_ACTIONS:
        return jnp.cumsum(jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True)), axis=-1)
    return jnp.stack(_unrolled_cumulative(logits), axis=-1)


@dataclasses.dataclass(frozen=True, eq=False)
class StateSoftmaxTable:
    """A :class:`SoftmaxPolicy` tabulated on a tabular environment's states
    (:meth:`SoftmaxPolicy.on_states`); hashed by identity (it holds an array).

    Attributes:
        cumulative: (H, A, S) cumulative weights: ``cumulative[h, :, s]`` is the row C of
            (stage h, state s). Action-major, so that a step gathers each C_i of the K
            episodes' states from one contiguous (S,) row, which is faster than gathering a
            (K, A) block of an (H, S, A) table at each step.
    """

    cumulative: Array

    def action_from_state(self, u: Array, index: Array, h: Array) -> Array:
        """The action for uniform ``u`` at state index ``index`` of stage ``h``: the
        inverse-CDF draw of :func:`softmax_inverse_cdf` from the tabulated row, int32."""
        table = self.cumulative
        u = jnp.asarray(u, table.dtype)
        num_actions = table.shape[1]
        if num_actions > _UNROLL_ACTIONS:
            return _draw(table[h, :, index], u)
        return _count_below([table[h, i, index] for i in range(num_actions)], u)


def softmax_policy(logits_fn: Callable[[Array, Array], Array]) -> SoftmaxPolicy:
    """A policy for :func:`fhc_jax.rollout` that samples softmax(``logits_fn(observation, h)``)
    with ONE uniform per step (the rollout's fast protocol, ``action_from_uniform``), rather
    than the A Gumbel draws of ``jax.random.categorical``: the same distribution, several
    times cheaper (module docstring for measurements).

    Args:
        logits_fn: ``logits_fn(observation, h) -> (A,)`` logits of the action distribution at
            one (unbatched) observation of stage h (int32 scalar); -inf masks an action. A pure
            function of its arguments: close over arrays (e.g. network parameters) and build
            the policy inside the jitted function that calls ``rollout``, or pass it to
            ``jax.jit(lambda key: rollout(key, env, params, policy, K))``.
    Returns:
        :class:`SoftmaxPolicy`: ``policy(key, observation, h) -> action`` (int32), with
        ``policy.action_from_uniform(u, observation, h)``.
    Raises:
        ValueError: ``logits_fn`` is not callable.

    Example::

        policy = fhc.softmax_policy(lambda obs, h: obs @ weights[h] + biases[h])
        traj = jax.jit(lambda k: fhc.rollout(k, env, params, policy, 4096))(key)
    """
    if not callable(logits_fn):
        raise ValueError(f"softmax_policy: logits_fn must be a function (observation, h) -> (A,) logits, found {logits_fn!r}")
    return SoftmaxPolicy(logits_fn)


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


@dataclasses.dataclass(frozen=True, eq=False)
class TablePolicy:
    """A tabulated non-stationary policy with the fast protocol (see :func:`table_policy`);
    hashed by identity (it holds an array)."""

    cdf: Array
    to_index: Callable[[Array], Array]

    def action_from_uniform(self, u: Array, observation: Any, h: Array) -> Array:
        """Inverse-CDF draw from row (h, s(observation)) of the table, int32."""
        cdf = self.cdf[h, self.to_index(observation)]
        return inverse_cdf(cdf, jnp.asarray(u, cdf.dtype), cdf.shape[-1] - 1)

    def __call__(self, key: Array, observation: Any, h: Array) -> Array:
        return self.action_from_uniform(jax.random.uniform(key, (), jnp.float32), observation, h)


def table_policy(table: Array, env) -> TablePolicy:
    """A policy for :func:`fhc_jax.rollout` that plays a probability table, mu_h(s, a) =
    ``table[h, s, a]``, on a tabular environment, sampling with ONE uniform per step (the fast
    protocol; inverse CDF of the row's cumulative sum, computed once here). The state index
    is recovered from the environment's observation (encoders "index", "one_hot", and
    "xy"/"xyt" on spatial environments).

    Args:
        table: (H, S, A) non-negative action weights; each row is normalised by its sum
            (e.g. ``fhc_jax.solve(cmdp).policy`` or a learner's ``policy_table``). The policy
            closes over it: build it inside the jitted function that calls ``rollout``, or
            pass it to ``jax.jit(lambda key: rollout(key, env, params, policy, K))``.
        env: a tabular environment (``env.is_tabular``).
    Returns:
        :class:`TablePolicy`: ``policy(key, observation, h) -> action`` (int32), with
        ``policy.action_from_uniform(u, observation, h)``.
    Raises:
        ValueError: an environment without tabular states, observations the state index
            cannot be recovered from, a table of another shape, or (for a concrete table)
            negative or non-finite weights or a row without positive weight.
    """
    if not env.is_tabular:
        raise ValueError(f"table_policy: {env.name} has no tabular states (is_tabular); "
                         "use softmax_policy with logits of the observation")
    expected = (env.horizon, env.num_states, env.num_actions)
    if tuple(jnp.shape(table)) != expected:
        raise ValueError(f"table_policy: table must have shape (H, S, A) = {expected}, found {tuple(jnp.shape(table))}")
    to_index = observation_to_index(env)
    if not isinstance(table, jax.core.Tracer):
        values = np.asarray(table, np.float64)
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError("table_policy: table must hold finite, non-negative action weights")
        if np.any(values.sum(-1) <= 0):
            raise ValueError("table_policy: every row table[h, s] needs a positive weight")
    table = jnp.asarray(table)
    dtype = jnp.promote_types(table.dtype, jnp.float32)
    return TablePolicy(cdf=cumulative_sum(table.astype(dtype)), to_index=to_index)
