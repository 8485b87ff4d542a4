"""Checks at the API boundary: actions and errors raised from traced code (an environment's
declared sizes are checked by :func:`fhc_jax.envs.base.check_static`).

Everything static (shapes, dtypes, the environment's sizes) is checked in Python while JAX
traces, so a wrong shape or a float action is a ``ValueError`` before anything compiles. Values
are checked where they are known:

* **concrete values** (an eager call, or arrays closed over by a jitted function, which JAX
  keeps concrete while tracing) are checked with numpy and raise ``ValueError`` at once;
* **traced values** (arguments of the caller's ``jax.jit``, ``jax.vmap``, ``lax.scan``):
  :func:`raise_if` reduces the condition to one small int32 status vector in the graph and
  reports it through a host callback that runs only when the status is bad (a ``lax.cond`` on
  one scalar: nothing crosses to the host otherwise). JAX hands the callback's
  :class:`InvalidActionError` back to the caller as a ``jax.errors.JaxRuntimeError`` (a
  ``RuntimeError``) whose message contains the same line (its last line on CPU); the computation's result is not
  returned. Under ``jax.vmap`` the batched status is first reduced over the batch (a custom
  batching rule), so a vmapped call makes at most one callback, naming one offending element.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching

from fhc_jax.envs.spaces import Box

Array = jax.Array


class InvalidActionError(ValueError):
    """An action outside the environment's action space (or of the wrong type)."""


class _QuietCallbackFailure(logging.Filter):
    """JAX logs every exception of a debug callback with its traceback before re-raising it;
    ours are user errors reported by the exception itself, so their log record is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, InvalidActionError)


logging.getLogger("jax._src.debugging").addFilter(_QuietCallbackFailure())


def is_concrete(tree: Any) -> bool:
    """Whether no leaf of ``tree`` is a JAX tracer (its values can be read with numpy)."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


def action_range(env: Any) -> str:
    """``integers in [0, A)`` of a discrete environment, for messages."""
    return f"integers in [0, {env.action_space.n})"


def check_action(env: Any, action: Any, owner: str, source: str = "the action") -> Array:
    """A discrete action's static checks (integer dtype, shape ()), at trace time; returns it
    as int32. Box actions are returned as float32 of the space's shape (the environment clips
    them into the bounds).

    Raises:
        InvalidActionError: a float (or other non-integer) or non-scalar discrete action.
    """
    space = env.action_space
    if isinstance(space, Box):
        return jnp.asarray(action, jnp.float32).reshape(space.shape)
    dtype = jnp.result_type(action)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise InvalidActionError(
            f"{owner}: {source} has dtype {dtype}{_value_text(action)}; {env.name} takes discrete actions, "
            f"{action_range(env)}: return an integer index (e.g. jnp.argmax(...), or round and .astype(jnp.int32))"
        )
    if jnp.shape(action) != ():
        raise InvalidActionError(
            f"{owner}: {source} has shape {tuple(jnp.shape(action))}; {env.name} takes one "
            f"integer action of shape (), {action_range(env)}"
        )
    return jnp.asarray(action, jnp.int32)


def _value_text(x: Any) -> str:
    """`` (found 2.7)`` for a concrete scalar, else ``""`` (for messages)."""
    if is_concrete(x) and np.size(x) == 1:
        return f" (found {np.asarray(x).item()!r})"
    return ""


def raise_if(
    status: Array, describe: Callable[[tuple[int, ...]], str], error: type[Exception] = InvalidActionError
) -> None:
    """Raise ``error(describe(status))`` when ``status[0] > 0``.

    ``status`` is a small int32 vector (code, details...) computed in the graph. Concrete: read
    at once (numpy) and raised here. Traced: a host callback that runs only when the code is
    non-zero (module docstring); under ``jax.vmap`` the batch is reduced to its first bad
    element before the callback, so a vmapped call reports once.
    """
    status = jnp.asarray(status, jnp.int32)
    if is_concrete(status):
        values = tuple(int(v) for v in np.asarray(status))
        if values[0] > 0:
            raise error(describe(values))
        return

    def host(s: np.ndarray) -> None:
        values = tuple(int(v) for v in np.asarray(s))
        if values[0] > 0:
            raise error(describe(values))

    @custom_batching.custom_vmap
    def report(s: Array) -> Array:
        jax.lax.cond(s[0] > 0, lambda: jax.debug.callback(host, s), lambda: None)
        return s

    @report.def_vmap
    def _batched(axis_size: int, in_batched: list[bool], s: Array):
        (batched,) = in_batched
        report(s[jnp.argmax(s[:, 0] > 0)] if batched else s)
        return s, batched

    report(jax.lax.stop_gradient(status))


def check_action_value(env: Any, action: Array, owner: str) -> None:
    """Refuse a discrete action outside [0, A) (concrete: at once; traced: :func:`raise_if`)."""
    if env.has_box_actions:
        return
    n = env.action_space.n
    a = jnp.asarray(action, jnp.int32)
    status = jnp.stack([((a < 0) | (a >= n)).astype(jnp.int32), a])
    raise_if(
        status,
        lambda s: (
            f"{owner}: action {s[1]} is outside the action space of {env.name}: {action_range(env)} (Discrete({n}))"
        ),
    )
