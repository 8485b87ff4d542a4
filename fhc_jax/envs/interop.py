"""What the adapters of other libraries' environments share (``from_gymnax``, ``from_brax``):
reading the number of constraints from a cost, where a scalar cost is one constraint, and
validating the thresholds."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np


def cost_count(owner: str, source: str, cost: Any, num_constraints: int | None = None) -> int:
    """M, the number of constraints, from the (abstract) cost of one stage: shape () is one
    constraint (the scalar-cost convention of Safety-Gym, OmniSafe and safenax), shape (M,)
    is M of them. Shared by the adapters of other libraries' environments.

    Args:
        owner: who checks (for the message), e.g. "from_gymnax".
        source: where the cost comes from (for the message), e.g. "info['cost']".
        cost: the cost, or its ``jax.ShapeDtypeStruct``; a float dtype is required.
        num_constraints: M declared by the caller, or None (inferred).
    Returns:
        M >= 1.
    Raises:
        ValueError: a cost that is not a float array of shape () or (M,) with M >= 1, or whose M
            differs from ``num_constraints``.
    """
    shape, dtype = tuple(getattr(cost, "shape", ())), getattr(cost, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            f"{owner}: {source} must be a float array of shape () or (M,), found dtype {dtype} "
            "(cast it, e.g. (x > 1).astype(jnp.float32))"
        )
    m = 1 if shape == () else shape[0] if len(shape) == 1 else 0
    if m < 1 or (num_constraints is not None and m != num_constraints):
        want = (
            "() (one constraint) or (M,) with M >= 1"
            if num_constraints is None
            else ("() or (1,)" if num_constraints == 1 else f"(M,) = ({num_constraints},)")
        )
        raise ValueError(f"{owner}: {source} must have shape {want}, found {shape}")
    return m


def thresholds(owner: str, alpha: Any, m: int) -> np.ndarray:
    """alpha^(k) as a float64 (M,) array from a scalar or (M,) ``alpha`` (each finite and >= 0).

    Raises:
        ValueError: another shape, or a value that is not a finite number >= 0.
    """
    arr = np.atleast_1d(np.asarray(alpha, dtype=object))
    if arr.ndim != 1 or arr.shape[0] not in (1, m):
        raise ValueError(f"{owner}: alpha must be a scalar or have shape (M,) = ({m},), found shape {arr.shape}")
    out = []
    for a in arr.tolist():
        try:
            x = float(a)
        except (TypeError, ValueError):
            x = float("nan")
        if not np.isfinite(x) or x < 0:
            raise ValueError(f"{owner}: alpha must be a finite number >= 0 (per constraint), found {a!r}")
        out.append(x)
    return np.broadcast_to(np.asarray(out), (m,)).copy()
