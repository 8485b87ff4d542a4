"""Transition kernels p_h(s, a, s') in two storage forms, behind one set of operations.

* **dense**: an array of shape (S, A, S) (time-invariant) or (H, S, A, S) (time-varying);
* **sparse successor lists**: :class:`SparseTransitions` with ``next_states`` and
  ``probabilities`` of shape (S, A, N) or (H, S, A, N): state-action (s, a) moves to
  ``next_states[..., s, a, j]`` with probability ``probabilities[..., s, a, j]``.
  Repeated successors are allowed (their probabilities add up).

Local dynamics such as the gridworld's (at most 9 successors per state-action) need
O(S A N) memory and time per stage in sparse form instead of O(S^2 A), which is what lets
the exact solvers handle a 50x50 grid. Every exact algorithm is written against the three
operations below, so it never needs to know which form it got.
"""

from __future__ import annotations

from typing import Union

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


Transitions = Union[Array, SparseTransitions]


def is_time_varying(transitions: Transitions) -> bool:
    if isinstance(transitions, SparseTransitions):
        return transitions.time_varying
    return transitions.ndim == 4


def stage(transitions: Transitions, h) -> Transitions:
    """The kernel p_h of stage ``h`` (a traced integer is fine); identity if time-invariant."""
    if not is_time_varying(transitions):
        return transitions
    return jax.tree.map(lambda x: x[h], transitions)


def expect_next(kernel: Transitions, values: Array) -> Array:
    """sum_{s'} p(s, a, s') values[..., s'] for a single-stage kernel.

    Args:
        kernel: single-stage kernel, dense (S, A, S) or sparse (S, A, N).
        values: (..., S) values of the next state.
    Returns:
        (..., S, A).
    """
    if isinstance(kernel, SparseTransitions):
        # Gather along the LEADING axis: XLA's CPU gather is ~7x faster than along the last.
        successors = jnp.moveaxis(values, -1, 0)[kernel.next_states]  # (S, A, N, ...)
        return jnp.einsum("san,san...->...sa", kernel.probabilities, successors)
    return jnp.einsum("sat,...t->...sa", kernel, values)


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
