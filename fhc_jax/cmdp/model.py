"""The tabular finite-horizon constrained MDP (paper Section 2).

Stages h = 0..H-1 choose actions; the process ends at stage H with terminal reward r_H and
terminal costs g_H^(k). The objective is J(pi) = E[r_H(X_H) + sum_h r_h(X_h, Z_h, X_{h+1})]
(paper eq. (1)) subject to S^(k)(pi) = E[g_H^(k)(X_H) + sum_h g_h^(k)(...)] <= alpha^(k)
(paper eq. (2)): undiscounted totals over the whole episode, compared with the thresholds.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.cmdp import transitions as tr
from fhc_jax.cmdp.transitions import SparseTransitions, Transitions

Array = jax.Array

_PROB_TOL = 1e-6


class CMDPTypeError(TypeError, ValueError):
    """A value of the wrong type where a CMDP or one of its arrays is expected. Both a
    ``TypeError`` and a ``ValueError`` (constructor errors were ``ValueError`` before)."""


def probability_tolerance(dtype: Any, count: int = 1) -> float:
    """How far a sum of ``count`` probabilities stored in ``dtype`` may stray from 1:
    max(1e-6, count * eps(dtype)) (the rounding of each term adds up; 1e-6 is the floor, which is
    what float64 and float32 data of a few dozen entries get)."""
    try:
        eps = float(jnp.finfo(dtype).eps)
    except ValueError:  # integer data: exact
        eps = 0.0
    return max(_PROB_TOL, max(int(count), 1) * eps)


def _as_array(name: str, value: Any, dtype=None, signal: bool = False) -> Array:
    """``value`` as a real floating jax array (integers become the default float dtype);
    ``signal``: a reward, cost or threshold field, checked by :func:`_check_representable`."""
    if isinstance(value, (str, bytes, dict, set)) or value is None:
        raise CMDPTypeError(f"TabularCMDP.{name}: expected a numeric array, got {type(value).__name__}")
    try:
        with np.errstate(over="ignore", under="ignore"):  # what does not fit is named below
            arr = jnp.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as err:
        raise CMDPTypeError(f"TabularCMDP.{name}: expected a numeric array, got {type(value).__name__}") from err
    if arr.dtype == jnp.bool_ or not (
        jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.integer)
    ):
        raise CMDPTypeError(f"TabularCMDP.{name}: expected a real numeric array, found dtype {arr.dtype}")
    if dtype is None and not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.result_type(float))
    if signal:
        _check_representable(name, value, arr)
    return arr


_RESCALE_HINT = {
    "rewards": "multiply every reward (stage and terminal) by one constant factor",
    "terminal_rewards": "multiply every reward (stage and terminal) by one constant factor",
    "costs": "multiply that constraint's costs (stage and terminal) and its threshold by one constant factor",
    "terminal_costs": "multiply that constraint's costs (stage and terminal) and its threshold by one constant factor",
    "thresholds": "multiply that constraint's costs (stage and terminal) and its threshold by one constant factor",
}


def _check_representable(name: str, value: Any, arr) -> None:
    """Refuse a signal field whose values the stored dtype cannot hold: nonzero values below
    the smallest normal number of ``arr``'s dtype (subnormals, or values that underflowed to 0
    when stored: CPU arithmetic flushes subnormals to zero, so they would be lost without a
    word) and finite values beyond its largest. Skipped for traced values.

    Args:
        name: the field, for the message. value: what the caller passed. arr: it as stored.
    Raises:
        ValueError: naming the field, the first bad entry and the remedy (rescale).
    """
    if (
        isinstance(arr, jax.core.Tracer)
        or isinstance(value, jax.core.Tracer)
        or not jnp.issubdtype(arr.dtype, jnp.floating)
    ):
        return
    src = np.asarray(value)
    if not np.issubdtype(src.dtype, np.floating):
        return  # integers: normal numbers whatever the float dtype that stores them
    info = jnp.finfo(arr.dtype)
    tiny, big, dtype = float(info.tiny), float(info.max), str(arr.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        mag = np.abs(src.astype(np.float64))
    fix = (
        f"{_RESCALE_HINT[name]} (the optimal policy does not change; fhc_jax.envs.suite.rescale does it for a "
        f"TabularCMDP)"
    )
    over = np.isfinite(mag) & (mag > big)
    if over.any():
        idx = tuple(int(i) for i in np.argwhere(over)[0])
        raise ValueError(
            f"TabularCMDP.{name}: {int(over.sum())} values beyond the largest {dtype} number {big:.3g} "
            f"(e.g. {float(src[idx]):.3g} at index {idx}) would be stored as infinity: {fix}"
        )
    under = (mag > 0) & (mag < tiny)
    if under.any():
        idx = tuple(int(i) for i in np.argwhere(under)[0])
        x64 = " or store the model in float64 (jax.config.update('jax_enable_x64', True))" if dtype != "float64" else ""
        raise ValueError(
            f"TabularCMDP.{name}: {int(under.sum())} nonzero values below the smallest normal {dtype} "
            f"number {tiny:.3g} (e.g. {float(src[idx]):.3g} at index {idx}); {dtype} arithmetic "
            f"flushes them to zero, so the model would lose them without a word: {fix}{x64}"
        )


def _check_finite(name: str, arr) -> None:
    a = np.asarray(arr)
    if not np.all(np.isfinite(a)):
        bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
        raise ValueError(f"TabularCMDP.{name}: all values must be finite, found {bad} non-finite entries")


def _check_shape(name: str, arr, expected: tuple[tuple[int, ...], ...], names: str) -> None:
    if tuple(arr.shape) not in expected:
        want = " or ".join(str(e) for e in expected)
        raise ValueError(f"TabularCMDP.{name}: expected shape {want} {names}, found {tuple(arr.shape)}")


def _check_distribution(name: str, probs, axis: int = -1) -> None:
    dtype = np.asarray(probs).dtype
    p = np.asarray(probs, dtype=np.float64)
    tol = probability_tolerance(dtype, p.shape[axis] if p.ndim else 1)
    if np.any(p < -tol):
        raise ValueError(f"TabularCMDP.{name}: probabilities must be non-negative, found minimum {p.min():.3g}")
    sums = p.sum(axis=axis)
    worst = float(np.max(np.abs(sums - 1.0))) if sums.size else 0.0
    if worst > tol:
        where = np.unravel_index(int(np.argmax(np.abs(sums - 1.0))), sums.shape)
        raise ValueError(
            f"TabularCMDP.{name}: probabilities must sum to 1 (tolerance {tol:g} for {dtype} data), "
            f"found a row summing to {float(sums[where]):.9g} at index {tuple(int(i) for i in where)}"
        )


@jax.tree_util.register_pytree_node_class
class TabularCMDP:
    """A finite-horizon constrained MDP with finite states and actions.

    A pytree: pass it through ``jit``/``vmap`` freely. Constructing it validates the data
    (shapes, finiteness, stochasticity; rewards, costs and thresholds representable in the
    dtype that stores them: no nonzero value below its smallest normal number, which CPU
    arithmetic would flush to zero, none beyond its largest) and raises ``ValueError`` naming
    the bad field; pytree reconstruction inside JAX transformations skips validation.
    Probabilities below the smallest normal number are accepted (they change no expectation
    by more than that number).

    Attributes (S states, A actions, H stages, M constraints):
        transitions: p_h(s, a, s'): dense (S, A, S) or (H, S, A, S), or a
            :class:`SparseTransitions` with (S, A, N) or (H, S, A, N) successor lists.
        rewards: r_h as expected rewards (H, S, A), or per next state (H, S, A, S)
            (dense transitions only).
        costs: g_h^(k) as (M, H, S, A), or (M, H, S, A, S) (dense transitions only).
        terminal_rewards: r_H, (S,).
        terminal_costs: g_H^(k), (M, S).
        thresholds: alpha^(k), (M,).
        initial_distribution: beta, (S,).
    """

    _fields = (
        "transitions",
        "rewards",
        "costs",
        "terminal_rewards",
        "terminal_costs",
        "thresholds",
        "initial_distribution",
    )

    def __init__(
        self,
        transitions: Transitions | Any,
        rewards: Any,
        costs: Any,
        terminal_rewards: Any = None,
        terminal_costs: Any = None,
        thresholds: Any = None,
        initial_distribution: Any = None,
    ):
        if isinstance(transitions, SparseTransitions):
            nxt = jnp.asarray(transitions.next_states)
            if not jnp.issubdtype(nxt.dtype, jnp.integer):
                raise ValueError(f"TabularCMDP.transitions.next_states: expected integers, found {nxt.dtype}")
            probs = _as_array("transitions.probabilities", transitions.probabilities)
            if nxt.shape != probs.shape or nxt.ndim not in (3, 4):
                raise ValueError(
                    "TabularCMDP.transitions: next_states and probabilities must both have shape "
                    f"(S, A, N) or (H, S, A, N), found {tuple(nxt.shape)} and {tuple(probs.shape)}"
                )
            transitions = SparseTransitions(next_states=nxt.astype(jnp.int32), probabilities=probs)
            s, a = transitions.num_states, transitions.num_actions
        else:
            transitions = _as_array("transitions", transitions)
            if transitions.ndim not in (3, 4):
                raise ValueError(
                    "TabularCMDP.transitions: expected shape (S, A, S) or (H, S, A, S), "
                    f"found {tuple(transitions.shape)}"
                )
            s, a = transitions.shape[-3], transitions.shape[-2]
            if transitions.shape[-1] != s and s > 0:
                raise ValueError(
                    f"TabularCMDP.transitions: last axis must have S = {s} next states, "
                    f"found shape {tuple(transitions.shape)}"
                )
        if s < 1 or a < 1:
            raise ValueError(
                f"TabularCMDP.transitions: a CMDP needs at least one state and one action, "
                f"found S = {s} states and A = {a} actions"
            )
        rewards = _as_array("rewards", rewards, signal=True)
        if rewards.ndim not in (3, 4):
            raise ValueError(
                f"TabularCMDP.rewards: expected shape (H, S, A) or (H, S, A, S), found {tuple(rewards.shape)}"
            )
        h = rewards.shape[0]
        if h < 1:
            raise ValueError("TabularCMDP.rewards: the horizon H (first axis) must be >= 1, found 0")
        dense = not isinstance(transitions, SparseTransitions)
        allowed = ((h, s, a), (h, s, a, s)) if dense else ((h, s, a),)
        _check_shape(
            "rewards", rewards, allowed, "(H, S, A) or (H, S, A, S)" if dense else "(H, S, A) (sparse transitions)"
        )
        if tr.is_time_varying(transitions):
            lead = (transitions.next_states if not dense else transitions).shape[0]
            if lead != h:
                raise ValueError(
                    f"TabularCMDP.transitions: time-varying kernel must have H = {h} stages "
                    f"(from rewards), found {lead}"
                )
        costs = _as_array("costs", costs, signal=True)
        if costs.ndim not in (4, 5):
            raise ValueError(
                f"TabularCMDP.costs: expected shape (M, H, S, A) or (M, H, S, A, S), found {tuple(costs.shape)}"
            )
        m = costs.shape[0]
        c_allowed = ((m, h, s, a), (m, h, s, a, s)) if dense else ((m, h, s, a),)
        _check_shape("costs", costs, c_allowed, f"(M, H, S, A) with H = {h}, S = {s}, A = {a}")
        terminal_rewards = _as_array(
            "terminal_rewards", jnp.zeros(s) if terminal_rewards is None else terminal_rewards, signal=True
        )
        _check_shape("terminal_rewards", terminal_rewards, ((s,),), "(S,)")
        terminal_costs = _as_array(
            "terminal_costs", jnp.zeros((m, s)) if terminal_costs is None else terminal_costs, signal=True
        )
        _check_shape("terminal_costs", terminal_costs, ((m, s),), "(M, S)")
        if thresholds is None:
            raise ValueError(f"TabularCMDP.thresholds: required, expected shape ({m},)")
        thresholds = _as_array("thresholds", thresholds, signal=True)
        _check_shape("thresholds", thresholds, ((m,),), "(M,)")
        if initial_distribution is None:
            raise ValueError(f"TabularCMDP.initial_distribution: required, expected shape ({s},)")
        initial_distribution = _as_array("initial_distribution", initial_distribution)
        _check_shape("initial_distribution", initial_distribution, ((s,),), "(S,)")

        probs = transitions.probabilities if not dense else transitions
        leaves = jax.tree.leaves(
            (transitions, rewards, costs, terminal_rewards, terminal_costs, thresholds, initial_distribution)
        )
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            # built while tracing (e.g. an environment's default_params read inside jit): the
            # shapes are checked above; the values are checked wherever the model is concrete
            self._assign(
                transitions, rewards, costs, terminal_rewards, terminal_costs, thresholds, initial_distribution
            )
            return
        if not dense:
            nxt = np.asarray(transitions.next_states)
            if nxt.size and (nxt.min() < 0 or nxt.max() >= s):
                raise ValueError(
                    f"TabularCMDP.transitions.next_states: indices must lie in [0, {s - 1}], "
                    f"found range [{nxt.min()}, {nxt.max()}]"
                )
        for name, arr in (
            ("transitions", probs),
            ("rewards", rewards),
            ("costs", costs),
            ("terminal_rewards", terminal_rewards),
            ("terminal_costs", terminal_costs),
            ("thresholds", thresholds),
            ("initial_distribution", initial_distribution),
        ):
            _check_finite(name, arr)
        _check_distribution("transitions", probs)
        _check_distribution("initial_distribution", initial_distribution)
        self._assign(transitions, rewards, costs, terminal_rewards, terminal_costs, thresholds, initial_distribution)

    def _assign(self, *values) -> None:
        for f, v in zip(self._fields, values):
            setattr(self, f, v)

    # -- pytree protocol: reconstruction bypasses validation (leaves may be tracers) --
    def tree_flatten(self):
        return tuple(getattr(self, f) for f in self._fields), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        for f, c in zip(cls._fields, children):
            setattr(obj, f, c)
        return obj

    def replace(self, **changes) -> TabularCMDP:
        """A validated copy with some fields replaced."""
        kwargs = {f: getattr(self, f) for f in self._fields}
        kwargs.update(changes)
        return TabularCMDP(**kwargs)

    # -- sizes --
    @property
    def horizon(self) -> int:
        return self.rewards.shape[0]

    @property
    def num_states(self) -> int:
        return self.rewards.shape[1]

    @property
    def num_actions(self) -> int:
        return self.rewards.shape[2]

    @property
    def num_constraints(self) -> int:
        return self.costs.shape[0]

    @property
    def time_varying(self) -> bool:
        return tr.is_time_varying(self.transitions)

    def __repr__(self) -> str:
        kind = "sparse" if isinstance(self.transitions, SparseTransitions) else "dense"
        return (
            f"TabularCMDP(H={self.horizon}, S={self.num_states}, A={self.num_actions}, "
            f"M={self.num_constraints}, transitions={kind}{', time-varying' if self.time_varying else ''})"
        )

    # -- derived quantities --
    def expected_rewards(self) -> Array:
        """r_h(s, a) = sum_{s'} p_h(s, a, s') r_h(s, a, s'), shape (H, S, A)."""
        if self.rewards.ndim == 3:
            return self.rewards
        p = jnp.broadcast_to(self.transitions, self.rewards.shape)
        return jnp.sum(p * self.rewards, axis=-1)

    def expected_costs(self) -> Array:
        """g_h^(k)(s, a) expected over s', shape (M, H, S, A)."""
        if self.costs.ndim == 4:
            return self.costs
        p = jnp.broadcast_to(self.transitions, self.costs.shape[1:])
        return jnp.sum(p[None] * self.costs, axis=-1)

    def dense_transitions(self) -> Array:
        """Dense kernel (S, A, S) or (H, S, A, S)."""
        return tr.to_dense(self.transitions, self.num_states)

    def astype(self, dtype) -> TabularCMDP:
        """Copy with every floating field cast to ``dtype`` (e.g. float64 for exact solvers)."""
        return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, self)
