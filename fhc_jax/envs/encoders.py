"""Observation encoders: what a learner sees of a state, chosen by name on the env constructor.

The same environment serves both input variants of the paper's experiments (Section 5):
"Env 1" feeds the 2-d grid coordinates ("xy"), "Env 2" the coordinates plus the time instant
("xyt"). Tabular learners use "one_hot" or "index".

======== ============ ========= ==========================================================
name     shape        dtype     value
======== ============ ========= ==========================================================
xy       (2,)         float32   (x, y) = (col, row) / (size - 1), in [0, 1]
xyt      (3,)         float32   (x, y, h / H), in [0, 1]
one_hot  (S,)         float32   e_s, the one-hot vector of the state index s
index    ()           int32     s
======== ============ ========= ==========================================================

Encoders are frozen (hashable) dataclasses, so environments holding them stay valid static
arguments of ``jax.jit``. They read the state through the environment's ``state_index``,
``coordinates`` and the state's ``time`` field.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Encoder:
    """Base encoder: ``encoder(env, state) -> observation`` (unbatched; ``vmap`` it)."""

    name: ClassVar[str] = ""
    dtype: ClassVar[Any] = jnp.float32

    def __call__(self, env, state) -> Array:
        raise NotImplementedError

    def shape(self, env) -> tuple[int, ...]:
        """Observation shape for ``env``."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class XYEncoder(Encoder):
    """Grid coordinates (x, y) = (col, row) / (size - 1) in [0, 1], shape (2,) (paper "Env 1")."""

    name: ClassVar[str] = "xy"

    def __call__(self, env, state) -> Array:
        return env.coordinates(state).astype(self.dtype)

    def shape(self, env) -> tuple[int, ...]:
        return (2,)


@dataclasses.dataclass(frozen=True)
class XYTEncoder(Encoder):
    """Coordinates plus normalised stage (x, y, h / H) in [0, 1], shape (3,) (paper "Env 2")."""

    name: ClassVar[str] = "xyt"

    def __call__(self, env, state) -> Array:
        t = (state.time.astype(self.dtype) / env.horizon)[None]
        return jnp.concatenate([env.coordinates(state).astype(self.dtype), t])

    def shape(self, env) -> tuple[int, ...]:
        return (3,)


@dataclasses.dataclass(frozen=True)
class OneHotEncoder(Encoder):
    """One-hot state index, shape (S,), float32."""

    name: ClassVar[str] = "one_hot"

    def __call__(self, env, state) -> Array:
        return jax.nn.one_hot(env.state_index(state), env.num_states, dtype=self.dtype)

    def shape(self, env) -> tuple[int, ...]:
        return (env.num_states,)


@dataclasses.dataclass(frozen=True)
class IndexEncoder(Encoder):
    """The state index s itself, int32 scalar."""

    name: ClassVar[str] = "index"
    dtype: ClassVar[Any] = jnp.int32

    def __call__(self, env, state) -> Array:
        return env.state_index(state).astype(self.dtype)

    def shape(self, env) -> tuple[int, ...]:
        return ()


@dataclasses.dataclass(frozen=True)
class OwnObservation(Encoder):
    """The stand-in encoder of an environment that computes its own observation (it overrides
    ``observation(state, params)`` and never calls ``_init_encoder``): shape and dtype are those
    of the observation its ``reset`` returns under ``default_params`` (read with
    ``jax.eval_shape``, nothing is computed). It cannot encode a state itself, and no state
    index is ever derived from such observations."""

    name: ClassVar[str] = "own"

    def __call__(self, env, state) -> Array:
        raise NotImplementedError(
            f"{env.name} has no observation encoder: override observation(state, params) "
            "or call self._init_encoder(name) in the constructor"
        )

    def _abstract(self, env):
        return jax.eval_shape(env.reset, jax.random.key(0), env.default_params)[0]

    def shape(self, env) -> tuple[int, ...]:
        return tuple(self._abstract(env).shape)

    def observation_dtype(self, env):
        """The dtype of the environment's own observations."""
        return self._abstract(env).dtype


ENCODERS: dict[str, type[Encoder]] = {cls.name: cls for cls in (XYEncoder, XYTEncoder, OneHotEncoder, IndexEncoder)}


def make_encoder(owner: str, observation: str, supported: tuple[str, ...] = tuple(ENCODERS)) -> Encoder:
    """The encoder named ``observation``; ``ValueError`` if unknown or unsupported by ``owner``."""
    if not isinstance(observation, str) or observation not in supported:
        valid = ", ".join(repr(n) for n in supported)
        raise ValueError(f"{owner}: observation must be one of {valid}, found {observation!r}")
    return ENCODERS[observation]()
