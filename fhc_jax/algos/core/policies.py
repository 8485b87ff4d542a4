"""Fast-sampling policies for :func:`fhc_jax.rollout` (public as ``fhc_jax.softmax_policy`` and
``fhc_jax.table_policy``); every learner's ``policy(...)`` is one of them.

Both sample with ONE uniform per step (the rollout's fast protocol), turned into an action by
inverse CDF, instead of the A Gumbel draws (A
threefry blocks, A logarithms) of ``jax.random.categorical``. They sample the same
distribution (tests/test_fast_policies.py checks it with chi-square tests) and cost several
times less in a rollout (``benchmarks/env_throughput.py``; docs/benchmarks.md). On tabular
environments the rollout plays a :func:`softmax_policy` from its table over (stage, state)
(:meth:`SoftmaxPolicy.on_states`, :func:`fhc_jax.rollout.tabulates`): the same actions, faster
still.

The contract of the protocol: ``policy(key, obs, h) == policy.action_from_uniform(
jax.random.uniform(key), obs, h)``, so the key path and the fast path of ``rollout`` sample
the same actions from the same uniforms.

**Two kinds of policy.** :func:`softmax_policy` acts on the observation
(``action_from_uniform(u, observation, h)``). :func:`table_policy` (and the tabulated softmax,
:class:`StateSoftmaxTable`) acts on the tabular state (``reads_state``,
``action_from_state(u, index, h)``): the rollouts pass ``env.state_index(state)``, so playing a
table never depends on what the environment observes (an environment's own observation, an
encoder it declares but does not use, none).

**Checks** (``fhc_jax.rollout``'s module docstring): the logits' shape (A,) and a table's shape
(H, S, A) against the environment while tracing; NaN or all -inf logits give
:data:`fhc_jax.rollout.NO_ACTION`, which the rollouts refuse (eagerly) or turn into NaN returns
(traced); a concrete table is checked when the policy is built, a traced one once per rollout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.algos.core.tabular_rollout import cumulative_sum, inverse_cdf
from fhc_jax.rollout import NO_ACTION, _observe_index

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
    finite (and none +inf or NaN): otherwise the count is meaningless, and
    :meth:`SoftmaxPolicy.action_from_uniform` returns :data:`fhc_jax.rollout.NO_ACTION`
    instead. float32 unless the logits are wider.

    Args:
        logits: (A,) unnormalised log-probabilities.
        u: () uniform in [0, 1).
    """
    return _softmax_draw(logits, u)[0]


def _softmax_draw(logits: Array, u: Array) -> tuple[Array, Array]:
    """(:func:`softmax_inverse_cdf`'s action, whether the logits define a distribution): the
    largest logit, which the draw computes anyway, is finite (it is NaN if a logit is, +inf if
    one is, -inf if all are). Nothing else of the draw is read: further consumers of its
    exponentials (the total weight) or a separate reduction over the short action axis make
    XLA split the per-step draw into more kernels."""
    dtype = jnp.promote_types(jnp.result_type(logits), jnp.float32)
    logits = jnp.asarray(logits, dtype)
    u = jnp.asarray(u, dtype)
    if logits.shape[-1] > _UNROLL_ACTIONS:
        cumulative, top = _cumulative_and_top(logits)
        return _draw(cumulative, u), jnp.isfinite(top)
    columns, top = _unrolled_cumulative_and_top(logits)
    return _count_below(columns, u), jnp.isfinite(top)


def _valid(top: Array, total: Array) -> Array:
    """Whether the rows of a table (computed once per rollout) define distributions, from
    their largest logits and total weights C_{A-1}: both finite (:func:`logits_valid`).
    Either test alone catches every invalid row (NaN, +inf or all -inf logits) in exact
    arithmetic; both are kept so that no compiler simplification of one (e.g. of
    exp(c - max(c)) when every c is the same) hides a row."""
    return jnp.isfinite(top) & jnp.isfinite(total)


def logits_valid(logits: Array) -> Array:
    """Whether logits (..., A) define a distribution, bool (...): their maximum is finite (the
    maximum propagates NaN; +inf or all -inf make it infinite). Read off the logits
    themselves, not off the exponentials, which the compiler may simplify."""
    return jnp.isfinite(jnp.max(logits, axis=-1))


def _unrolled_cumulative(logits: Array) -> list[Array]:
    """C_i = sum_{j <= i} exp(logits_j - max(logits)) as A arrays of the leading shape,
    unrolled into elementwise operations (A <= ``_UNROLL_ACTIONS``)."""
    return _unrolled_cumulative_and_top(logits)[0]


def _unrolled_cumulative_and_top(logits: Array) -> tuple[list[Array], Array]:
    """(:func:`_unrolled_cumulative`, the maximum logit it subtracts, of the leading shape)."""
    columns = [logits[..., i] for i in range(logits.shape[-1])]
    top = columns[0]
    for c in columns[1:]:
        top = jnp.maximum(top, c)
    cumulative = [jnp.exp(columns[0] - top)]
    for c in columns[1:]:
        cumulative.append(cumulative[-1] + jnp.exp(c - top))
    return cumulative, top


def _cumulative_and_top(logits: Array) -> tuple[Array, Array]:
    """(C (..., A) = cumsum(exp(logits - max)), the maximum (...)), for long rows."""
    top = jnp.max(logits, axis=-1, keepdims=True)
    return jnp.cumsum(jnp.exp(logits - top), axis=-1), top[..., 0]


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
    :func:`softmax_policy`). Hashable when ``logits_fn`` is (a valid static argument).

    Its actions lie in [0, A) by construction (A = the logits' length, checked against the
    environment by :meth:`check_actions`), or are :data:`fhc_jax.rollout.NO_ACTION` where the
    logits define no distribution (NaN, +inf or all -inf): ``returns_no_action``."""

    logits_fn: Callable[[Array, Array], Array]

    #: returns NO_ACTION where the logits define no distribution (fhc_jax.rollout.rollout)
    returns_no_action: ClassVar[bool] = True

    def logits_shape(self, observation: Any, h: Array) -> tuple[int, ...]:
        """The shape of ``logits_fn(observation, h)`` (traced abstractly, nothing computed).

        Raises:
            ValueError: logits that are not a vector (e.g. shape (A, 1)).
        """
        return tuple(self._abstract_logits(observation, h).shape)

    def _abstract_logits(self, observation: Any, h: Array) -> jax.ShapeDtypeStruct:
        abstract = jax.eval_shape(self.logits_fn, observation, h)
        if len(abstract.shape) != 1:
            raise ValueError(
                f"softmax_policy: logits_fn returns logits of shape {tuple(abstract.shape)}; expected "
                "(A,), one logit per action (flatten them, e.g. .reshape(-1))"
            )
        return abstract

    def check_actions(self, env, observation: Any, h: Array) -> None:
        """Refuse, while tracing, logits whose length is not ``env``'s A (or an environment
        with box actions)."""
        if env.has_box_actions:
            raise ValueError(
                f"softmax_policy draws discrete actions; {env.name} has box actions "
                f"{env.action_space}: use a Gaussian policy"
            )
        shape = self.logits_shape(observation, h)
        if shape != (env.action_space.n,):
            raise ValueError(
                f"softmax_policy: logits_fn returns logits of shape {shape}; {env.name} has "
                f"A = {env.action_space.n} actions: expected shape ({env.action_space.n},)"
            )

    def logits(self, observation: Any, h: Array) -> Array:
        """``logits_fn(observation, h)``, (A,), computed inside a ``lax.cond`` on ``h >= 0``
        (always true): XLA never fuses across a conditional, so the logits are computed once
        per step as their own kernels instead of being recomputed inside each consumer."""
        shape = self._abstract_logits(observation, h)
        return jax.lax.cond(
            jnp.asarray(h) >= 0,
            lambda: jnp.asarray(self.logits_fn(observation, h)),
            lambda: jnp.zeros(shape.shape, shape.dtype),
        )

    def action_from_uniform(self, u: Array, observation: Any, h: Array) -> Array:
        """The action for uniform ``u`` in [0, 1) (:func:`softmax_inverse_cdf`), int32; or
        :data:`fhc_jax.rollout.NO_ACTION` (-1) where the logits define no distribution.

        The draw is a second ``lax.cond`` (on ``h >= 0``, always true): its consumers (the
        environment's step, the recorded action) then read one computed action, where XLA
        would otherwise split the exponentials into separate kernels that each recompute
        the logits' maximum."""
        logits = self.logits(observation, h)

        def draw():
            action, valid = _softmax_draw(logits, u)
            return jnp.where(valid, action, NO_ACTION)

        return jax.lax.cond(jnp.asarray(h) >= 0, draw, lambda: jnp.zeros(jnp.shape(u), jnp.int32))

    def __call__(self, key: Array, observation: Any, h: Array) -> Array:
        return self.action_from_uniform(jax.random.uniform(key, (), jnp.float32), observation, h)

    def on_states(self, env, params: Any) -> StateSoftmaxTable:
        """This policy tabulated over every (stage, state) of a tabular environment: the
        logits of each state's observation at each stage, evaluated once (H S evaluations of
        ``logits_fn``), turned into the cumulative weights that :meth:`action_from_uniform`
        computes at each step. :func:`fhc_jax.rollout` uses it when S is small against K
        (:func:`fhc_jax.rollout.tabulates`): the same actions from the same uniforms, with a
        row lookup per step instead of A exponentials. The state's observation is
        ``env.observation(env.state_at(s, h), params)``, whatever the environment observes.

        Args:
            env: a tabular environment (``env.is_tabular``).
            params: its params.
        Returns:
            :class:`StateSoftmaxTable` with cumulative weights, action-major (H, A, S).
        Raises:
            ValueError: logits of another shape than (A,).
        """
        horizon, num_states = env.horizon, env.num_states
        stages = jnp.arange(horizon, dtype=jnp.int32)
        states = jnp.arange(num_states, dtype=jnp.int32)
        self.check_actions(env, _observe_index(env, params, jnp.int32(0), jnp.int32(0)), jnp.int32(0))

        def logits_at(h):
            observations = jax.vmap(lambda s: _observe_index(env, params, s, h))(states)
            return jax.vmap(lambda o: jnp.asarray(self.logits_fn(o, h)))(observations)

        logits = jax.vmap(logits_at)(stages)  # (H, S, A)
        dtype = jnp.promote_types(jnp.result_type(logits), jnp.float32)
        cumulative, valid = _softmax_cumulative_and_valid(jnp.asarray(logits, dtype))
        return StateSoftmaxTable(jnp.moveaxis(cumulative, -1, 1), valid)


def softmax_cumulative(logits: Array) -> Array:
    """The cumulative weights C (..., A) that :func:`softmax_inverse_cdf` draws from:
    C_i = sum_{j <= i} exp(logits_j - max(logits)), computed with the same operations."""
    return _softmax_cumulative_and_valid(logits)[0]


def _softmax_cumulative_and_valid(logits: Array) -> tuple[Array, Array]:
    """(:func:`softmax_cumulative`, :func:`logits_valid`) from one pass over the logits."""
    if logits.shape[-1] > _UNROLL_ACTIONS:
        cumulative, top = _cumulative_and_top(logits)
        return cumulative, _valid(top, cumulative[..., -1])
    columns, top = _unrolled_cumulative_and_top(logits)
    return jnp.stack(columns, axis=-1), _valid(top, columns[-1])


@dataclasses.dataclass(frozen=True, eq=False)
class StateSoftmaxTable:
    """A :class:`SoftmaxPolicy` tabulated on a tabular environment's states
    (:meth:`SoftmaxPolicy.on_states`); hashed by identity (it holds an array). A policy of
    the tabular state (``reads_state``): rollouts pass it ``env.state_index(state)``.

    Attributes:
        cumulative: (H, A, S) cumulative weights: ``cumulative[h, :, s]`` is the row C of
            (stage h, state s). Action-major, so that a step gathers each C_i of the K
            episodes' states from one contiguous (S,) row, which is faster than gathering a
            (K, A) block of an (H, S, A) table at each step.
        valid: (H, S) bool, whether the logits of (stage h, state s) define a distribution
            (:func:`logits_valid`); None: read it off the weights.
    """

    cumulative: Array
    valid: Array | None = None

    reads_state: ClassVar[bool] = True

    def check_actions(self, env, observation: Any, h: Array) -> None:
        """Refuse an environment of another (H, A, S) while tracing."""
        expected = (env.horizon, env.action_space.n, env.num_states)
        if tuple(self.cumulative.shape) != expected:
            raise ValueError(
                f"softmax_policy: tabulated for (H, A, S) = {tuple(self.cumulative.shape)}, {env.name} has {expected}"
            )

    def table_check(self) -> tuple[Array, Callable[[tuple[int, ...]], str]]:
        """(status [bad, h, s] int32, describe): whether some (stage, state) row's logits
        define no distribution (NaN, +inf or all -inf: ``valid``, else a row without positive
        total weight); one reduction over H S."""
        horizon, _, num_states = self.cumulative.shape
        valid = self.cumulative[:, -1, :] > 0 if self.valid is None else self.valid
        bad = jnp.logical_not(valid).reshape(-1)
        first = jnp.argmax(bad).astype(jnp.int32)
        status = jnp.stack([jnp.any(bad).astype(jnp.int32), first // num_states, first % num_states])
        return (
            status,
            lambda v: (
                f"softmax_policy has no valid action at stage {v[1]}, state {v[2]}: its logits are "
                "NaN or all -inf (checked at every state: the rollout plays the policy from its "
                "table over states)"
            ),
        )

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
        raise ValueError(
            f"softmax_policy: logits_fn must be a function (observation, h) -> (A,) logits, found {logits_fn!r}"
        )
    return SoftmaxPolicy(logits_fn)


def observation_to_index(env) -> Callable[[Array], Array]:
    """``obs -> tabular state index`` for the environment's observation encoder: "index"
    (itself), "one_hot" (argmax), "xy"/"xyt" on spatial environments (rounded coordinates on
    ``env.grid_shape``). Policy playback never uses it (:func:`table_policy` reads
    ``env.state_index``); it serves learners that act on observations of tabular states.

    Raises:
        ValueError: observations the state index cannot be recovered from: an encoder other
            than those, or an environment that computes its own observation (it overrides
            ``observation``, so its encoder does not describe what it observes).
    """
    name = env.encoder.name
    if not env.observes_by_encoder:
        raise ValueError(
            f"policy: cannot recover the state index from {env.name}'s observations: it computes its "
            f"own (it overrides observation()), so its encoder {name!r} does not describe them"
        )
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
    """A tabulated non-stationary policy of the tabular state (see :func:`table_policy`):
    ``reads_state``, so rollouts pass it ``env.state_index(state)``, never an observation.
    Hashed by identity (it holds an array).

    Attributes:
        cdf: (H, S, A) cumulative action weights of each (stage, state) row.
        checked: whether the table was checked when the policy was built (a concrete table);
            a traced one is checked once per rollout (:meth:`table_check`).
    """

    cdf: Array
    checked: bool = True

    reads_state: ClassVar[bool] = True

    def check_actions(self, env, observation: Any, h: Array) -> None:
        """Refuse, while tracing, an environment of another (H, S, A) than the table's."""
        expected = (env.horizon, env.num_states, env.action_space.n) if env.is_tabular else None
        if tuple(self.cdf.shape) != expected:
            have = f"(H, S, A) = {expected}" if expected else "no tabular states"
            raise ValueError(
                f"table_policy: the table has shape (H, S, A) = {tuple(self.cdf.shape)}; {env.name} has {have}"
            )

    def table_check(self) -> tuple[Array, Callable[[tuple[int, ...]], str]] | None:
        """None for a table checked at construction; else (status [bad, h, s] int32,
        describe): a row with NaN or negative weights or no positive total (one reduction)."""
        if self.checked:
            return None
        horizon, num_states, _ = self.cdf.shape
        cdf = self.cdf
        decreasing = jnp.any(jnp.diff(cdf, axis=-1) < 0, axis=-1) | (cdf[..., 0] < 0)
        bad = (decreasing | jnp.logical_not(cdf[..., -1] > 0) | jnp.any(jnp.isnan(cdf), axis=-1)).reshape(-1)
        first = jnp.argmax(bad).astype(jnp.int32)
        status = jnp.stack([jnp.any(bad).astype(jnp.int32), first // num_states, first % num_states])
        return (
            status,
            lambda v: f"table_policy: row table[{v[1]}, {v[2]}] has NaN or negative weights or no positive weight",
        )

    def action_from_state(self, u: Array, index: Array, h: Array) -> Array:
        """Inverse-CDF draw from row (h, ``index``) of the table for uniform ``u``, int32."""
        cdf = self.cdf[h, index]
        return inverse_cdf(cdf, jnp.asarray(u, cdf.dtype), cdf.shape[-1] - 1)

    def __call__(self, key: Array, index: Array, h: Array) -> Array:
        """The action at tabular state ``index`` (``env.state_index(state)``, NOT an
        observation) of stage ``h``: ``action_from_state(uniform(key), index, h)``.

        Raises:
            ValueError: ``index`` is not an integer scalar (e.g. an observation).
        """
        if not jnp.issubdtype(jnp.result_type(index), jnp.integer) or jnp.shape(index) != ():
            raise ValueError(
                f"table_policy plays from the tabular state index: call it with env.state_index(state) "
                f"(an integer scalar), not an observation (found {jnp.result_type(index)} of shape "
                f"{tuple(jnp.shape(index))}); fhc_jax.rollout passes the index itself"
            )
        return self.action_from_state(jax.random.uniform(key, (), jnp.float32), index, h)


def table_policy(table: Array, env) -> TablePolicy:
    """A policy for :func:`fhc_jax.rollout` that plays a probability table, mu_h(s, a) =
    ``table[h, s, a]``, on a tabular environment, sampling with ONE uniform per step (the fast
    protocol; inverse CDF of the row's cumulative sum, computed once here). The state is the
    environment's tabular index ``env.state_index(s_h)``, which the rollouts pass to the policy
    (``reads_state``): it is never derived from the observation, so the policy plays the same
    whatever the environment observes (its own observation, an encoder, none).

    Args:
        table: (H, S, A) non-negative action weights; each row is normalised by its sum
            (e.g. ``fhc_jax.solve(cmdp).policy`` or a learner's ``policy_table``). The policy
            closes over it: build it inside the jitted function that calls ``rollout``, or
            pass it to ``jax.jit(lambda key: rollout(key, env, params, policy, K))``. A traced
            table is checked once per rollout instead (:meth:`TablePolicy.table_check`).
        env: a tabular environment (``env.is_tabular``).
    Returns:
        :class:`TablePolicy`: ``policy.action_from_state(u, index, h)`` (int32), and
        ``policy(key, index, h)``.
    Raises:
        ValueError: an environment without tabular states, a table of another shape, or (for
            a concrete table) negative or non-finite weights or a row without positive weight.
    """
    if not env.is_tabular:
        raise ValueError(
            f"table_policy: {env.name} has no tabular states (is_tabular); "
            "use softmax_policy with logits of the observation"
        )
    expected = (env.horizon, env.num_states, env.action_space.n)
    if tuple(jnp.shape(table)) != expected:
        raise ValueError(f"table_policy: table must have shape (H, S, A) = {expected}, found {tuple(jnp.shape(table))}")
    concrete = not isinstance(table, jax.core.Tracer)
    if concrete:
        values = np.asarray(table, np.float64)
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError("table_policy: table must hold finite, non-negative action weights")
        if np.any(values.sum(-1) <= 0):
            raise ValueError("table_policy: every row table[h, s] needs a positive weight")
    table = jnp.asarray(table)
    dtype = jnp.promote_types(table.dtype, jnp.float32)
    return TablePolicy(cdf=cumulative_sum(table.astype(dtype)), checked=concrete)


def polyak_average(average: Any, new: Any, beta: Array) -> Any:
    """The exponential Polyak average of parameters (Polyak & Juditsky 1992), leaf by leaf:
    beta average + (1 - beta) new, beta in [0, 1) (0: the last iterate). The reported policy of
    FH- and NN-Constrained is their actor's average."""
    return jax.tree.map(lambda avg, x: beta * avg + (1.0 - beta) * x, average, new)
