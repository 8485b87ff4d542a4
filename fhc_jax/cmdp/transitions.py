"""Transition kernels p_h(s, a, s') in two storage forms, behind one set of operations.

* **dense**: an array of shape (S, A, S) (time-invariant) or (H, S, A, S) (time-varying);
* **sparse successor lists**: :class:`SparseTransitions` with ``next_states`` and
  ``probabilities`` of shape (S, A, N) or (H, S, A, N): state-action (s, a) moves to
  ``next_states[..., s, a, j]`` with probability ``probabilities[..., s, a, j]``.
  Repeated successors are allowed (their probabilities add up).

Local dynamics such as the gridworld's (at most 9 successors per state-action) need
O(S A N) memory and time per stage in sparse form instead of O(S^2 A), which is what lets
the exact solvers handle a 50x50 grid. Every exact algorithm is written against the
operations below (``expect_next``, ``push_forward``, ``sample_next``, their
deterministic-policy forms ``expect_next_action`` / ``push_forward_action``, and
``policy_weighted``), so it never needs to know which form it got.

``expect_next(..., fused=True)`` (and the deterministic-policy forms, always) sum a short
successor list (N <= ``UNROLL_SUCCESSORS``) term by term, sum_j p[..., j] * v[next[..., j]]:
XLA fuses the N gathers, products and sums into one loop, several times faster on CPU than a gather
followed by an (S*A)-batched dot product of length N. The exact solvers use it; the default
keeps the batched dot product, whose last-bit rounding the models built with ``expect_next``
(``GridWorld.to_cmdp``) and the pinned learner numbers were recorded with.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

Array = jax.Array


@struct.dataclass
class SparseTransitions:
    """Successor-list transition kernel.

    Attributes:
        next_states: int array (S, A, N) or (H, S, A, N), successor state indices.
        probabilities: float array of the same shape, p_h(s, a, next_states[..., j]).
    """

    next_states: Array
    probabilities: Array

    @property
    def time_varying(self) -> bool:
        return self.next_states.ndim == 4

    @property
    def num_states(self) -> int:
        return self.next_states.shape[-3]

    @property
    def num_actions(self) -> int:
        return self.next_states.shape[-2]

    def to_dense(self, num_states: int | None = None) -> Array:
        """Dense kernel of shape (S, A, S) or (H, S, A, S) (repeated successors summed)."""
        s = self.num_states if num_states is None else num_states
        one_hot = jax.nn.one_hot(self.next_states, s, dtype=self.probabilities.dtype)
        return jnp.einsum("...n,...ns->...s", self.probabilities, one_hot)


Transitions = Array | SparseTransitions


def is_time_varying(transitions: Transitions) -> bool:
    if isinstance(transitions, SparseTransitions):
        return transitions.time_varying
    return transitions.ndim == 4


def stage(transitions: Transitions, h) -> Transitions:
    """The kernel p_h of stage ``h`` (a traced integer is fine); identity if time-invariant."""
    if not is_time_varying(transitions):
        return transitions
    return jax.tree.map(lambda x: x[h], transitions)


#: successor lists up to this length are summed term by term (unrolled in the compiled program)
UNROLL_SUCCESSORS = 32


def _sum_successors(probabilities: Array, next_states: Array, values: Array) -> Array:
    """sum_j probabilities[..., j] * values[..., next_states[..., j]], j in order 0..N-1.

    Args:
        probabilities, next_states: (*B, N) with the same leading shape B (e.g. (S, A) or (S,)).
        values: (*V, S).
    Returns:
        (*V, *B).
    """
    total = probabilities[..., 0] * values[..., next_states[..., 0]]
    for j in range(1, next_states.shape[-1]):
        total = total + probabilities[..., j] * values[..., next_states[..., j]]
    return total


def expect_next(kernel: Transitions, values: Array, fused: bool = False) -> Array:
    """sum_{s'} p(s, a, s') values[..., s'] for a single-stage kernel.

    Args:
        kernel: single-stage kernel, dense (S, A, S) or sparse (S, A, N).
        values: (..., S) values of the next state.
        fused: sparse kernels with N <= ``UNROLL_SUCCESSORS``: sum the successors term by term
            in one fused loop (faster; rounds differently in the last bit from the default
            batched dot product). Ignored otherwise.
    Returns:
        (..., S, A).
    """
    if isinstance(kernel, SparseTransitions):
        if fused and kernel.next_states.shape[-1] <= UNROLL_SUCCESSORS:
            return _sum_successors(kernel.probabilities, kernel.next_states, values)
        # Gather along the LEADING axis: XLA's CPU gather is several times faster than along the last.
        successors = jnp.moveaxis(values, -1, 0)[kernel.next_states]  # (S, A, N, ...)
        return jnp.einsum("san,san...->...sa", kernel.probabilities, successors)
    return jnp.einsum("sat,...t->...sa", kernel, values)


def _chosen(table: Array, actions: Array) -> Array:
    """table[s, actions[s]] for a (S, A, ...) table and (S,) integer actions: (S, ...)
    (one row gather from the flattened table; out-of-range actions are clipped)."""
    s, a = table.shape[:2]
    rows = jnp.arange(s, dtype=actions.dtype) * a + jnp.clip(actions, 0, a - 1)
    return table.reshape((s * a,) + table.shape[2:]).at[rows].get(mode="clip")


def expect_next_action(kernel: Transitions, values: Array, actions: Array) -> Array:
    """sum_{s'} p(s, actions[s], s') values[..., s']: :func:`expect_next` restricted to one
    action per state (a deterministic policy), O(S N) instead of O(S A N).

    Args:
        kernel: single-stage kernel, dense (S, A, S) or sparse (S, A, N).
        values: (..., S) values of the next state.
        actions: (S,) integer action of each state.
    Returns:
        (..., S); equal to ``take_along_axis(expect_next(kernel, values), actions)``, summed
        in the same order for sparse kernels.
    """
    if isinstance(kernel, SparseTransitions):
        probs, nxt = _chosen(kernel.probabilities, actions), _chosen(kernel.next_states, actions)  # (S, N)
        if nxt.shape[-1] <= UNROLL_SUCCESSORS:
            return _sum_successors(probs, nxt, values)
        return jnp.einsum("sn,sn...->...s", probs, jnp.moveaxis(values, -1, 0)[nxt])
    return jnp.einsum("st,...t->...s", _chosen(kernel, actions), values)


def policy_weighted(kernel: Transitions, policy: Array) -> tuple[Array, Array]:
    """The successor list of each state under a randomized policy: weights pi(s, a) p(s, a, j)
    and successor states, so that the expected next value is ``sum(weights * v[successors], -1)``.

    Args:
        kernel: single-stage kernel, dense (S, A, S) or sparse (S, A, N).
        policy: pi(s, a), (S, A).
    Returns:
        weights (S, A N) and successors (S, A N) for sparse kernels; for dense kernels the
        policy-averaged kernel (S, S) and the indices 0..S-1 of every row (S, S).
    """
    s = policy.shape[0]
    if isinstance(kernel, SparseTransitions):
        weights = (policy[..., None] * kernel.probabilities).reshape(s, -1)
        return weights, kernel.next_states.reshape(s, -1)
    weights = jnp.einsum("sa,sat->st", policy, kernel)
    return weights, jnp.broadcast_to(jnp.arange(kernel.shape[-1]), weights.shape)


def push_forward(kernel: Transitions, mass: Array) -> Array:
    """Next-state distribution sum_{s,a} mass[s, a] p(s, a, s') for a single-stage kernel.

    Args:
        kernel: single-stage kernel, dense (S, A, S) or sparse (S, A, N).
        mass: (S, A) state-action occupancy.
    Returns:
        (S,).
    """
    if isinstance(kernel, SparseTransitions):
        flow = (mass[..., None] * kernel.probabilities).reshape(-1)
        return jnp.zeros(mass.shape[0], mass.dtype).at[kernel.next_states.reshape(-1)].add(flow)
    return jnp.einsum("sa,sat->t", mass, kernel)


def push_forward_action(kernel: Transitions, mass: Array, actions: Array) -> Array:
    """Next-state distribution sum_s mass[s] p(s, actions[s], s') of a deterministic policy:
    :func:`push_forward` with all of a state's mass on one action, O(S N) instead of O(S A N).

    Args:
        kernel: single-stage kernel, dense (S, A, S) or sparse (S, A, N).
        mass: (S,) state occupancy.
        actions: (S,) integer action of each state.
    Returns:
        (S,).
    """
    if isinstance(kernel, SparseTransitions):
        probs, nxt = _chosen(kernel.probabilities, actions), _chosen(kernel.next_states, actions)  # (S, N)
        flow = (mass[:, None] * probs).reshape(-1)
        return jnp.zeros(mass.shape[0], mass.dtype).at[nxt.reshape(-1)].add(flow)
    return jnp.einsum("s,st->t", mass, _chosen(kernel, actions))


def sample_next(key: Array, kernel: Transitions, state: Array, action: Array) -> Array:
    """Draw s' ~ p(state, action, .) for a single-stage kernel (scalar state and action)."""
    if isinstance(kernel, SparseTransitions):
        probs = kernel.probabilities[state, action]
        j = jax.random.categorical(key, jnp.log(probs))
        return kernel.next_states[state, action, j]
    return jax.random.categorical(key, jnp.log(kernel[state, action]))


def to_dense(transitions: Transitions, num_states: int) -> Array:
    """Dense kernel, whatever the storage form."""
    if isinstance(transitions, SparseTransitions):
        return transitions.to_dense(num_states)
    return transitions


def to_numpy_coo(transitions: Transitions, h: int):
    """(rows=(s, a) flat index, cols=s', data=p) triplets of stage ``h`` as numpy arrays."""
    kernel = stage(transitions, h)
    if isinstance(kernel, SparseTransitions):
        nxt = np.asarray(kernel.next_states)
        prob = np.asarray(kernel.probabilities, dtype=np.float64)
        s, a, n = nxt.shape
        rows = np.repeat(np.arange(s * a), n)
        return rows, nxt.reshape(-1), prob.reshape(-1)
    dense = np.asarray(kernel, dtype=np.float64)
    s, a, _ = dense.shape
    rows, cols = np.nonzero(dense.reshape(s * a, s))
    return rows, cols, dense.reshape(s * a, s)[rows, cols]
