"""Action spaces of the environment contract: :class:`Discrete` (A actions, int32 indices in
[0, A)) or :class:`Box` (real vectors within per-dimension bounds).

An environment declares its action space by :attr:`fhc_jax.envs.Environment.action_space`
(default ``Discrete(num_actions)``). A box environment receives float32 actions of shape
``Box.shape`` and clips them into ``[low, high]`` itself (``Box.clip``): a Gaussian policy may
propose any real vector, and the trajectory records the proposed (unclipped) action, whose
log-probability the learners need (``fhc_jax.algos.core.distributions``).

Both spaces are frozen dataclasses of Python scalars and tuples: hashable, so an environment's
static configuration can include them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Discrete:
    """A actions, indexed 0..A-1 (int32 scalars)."""

    n: int

    def __post_init__(self):
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or self.n < 1:
            raise ValueError(f"Discrete: n must be an integer >= 1, found {self.n!r}")
        object.__setattr__(self, "n", int(self.n))

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.int32)

    def contains(self, action: Any) -> Array:
        a = jnp.asarray(action)
        return jnp.logical_and(a >= 0, a < self.n)


@dataclasses.dataclass(frozen=True)
class Box:
    """Real action vectors a with ``low <= a <= high`` elementwise, shape (d,).

    Attributes:
        low, high: per-dimension bounds, tuples of d finite floats with low < high.
    """

    low: tuple[float, ...]
    high: tuple[float, ...]

    def __post_init__(self):
        low = np.atleast_1d(np.asarray(self.low, np.float64))
        high = np.atleast_1d(np.asarray(self.high, np.float64))
        if low.ndim != 1 or low.shape != high.shape or low.size < 1:
            raise ValueError(
                f"Box: low and high must be vectors of one length d >= 1, found shapes "
                f"{np.shape(self.low)} and {np.shape(self.high)}"
            )
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(f"Box: low and high must be finite, found low={low.tolist()}, high={high.tolist()}")
        if np.any(low >= high):
            raise ValueError(f"Box: every low must be < high, found low={low.tolist()}, high={high.tolist()}")
        object.__setattr__(self, "low", tuple(float(x) for x in low))
        object.__setattr__(self, "high", tuple(float(x) for x in high))

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.low),)

    @property
    def dim(self) -> int:
        """d, the number of action dimensions."""
        return len(self.low)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)

    @property
    def center(self) -> np.ndarray:
        """(low + high) / 2, float32 (d,)."""
        return ((np.asarray(self.low) + np.asarray(self.high)) / 2).astype(np.float32)

    @property
    def half_range(self) -> np.ndarray:
        """(high - low) / 2, float32 (d,)."""
        return ((np.asarray(self.high) - np.asarray(self.low)) / 2).astype(np.float32)

    def clip(self, action: Array) -> Array:
        """``action`` clipped into the bounds, float32 (d,)."""
        a = jnp.asarray(action, jnp.float32).reshape(self.shape)
        return jnp.clip(a, jnp.asarray(self.low, jnp.float32), jnp.asarray(self.high, jnp.float32))

    def contains(self, action: Any) -> Array:
        a = jnp.asarray(action)
        return jnp.all((a >= jnp.asarray(self.low)) & (a <= jnp.asarray(self.high)))


ActionSpace = Discrete | Box
