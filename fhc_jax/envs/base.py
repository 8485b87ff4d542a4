"""gymnax-style functional environments for finite-horizon constrained MDPs (paper Section 2).

An :class:`Environment` object holds only *static* configuration (sizes, the observation
encoder): it is hashable and can be a static argument of ``jax.jit``. Everything numeric that
may vary (reward and cost maps, thresholds, slip probability, ...) lives in a ``params``
pytree, so ``jax.vmap`` works over params as well as over keys and states. The state is a
pytree that carries the stage index ``time`` (h = 0..H).

Finite horizon, no auto-reset: an episode is ``reset`` followed by exactly H ``step`` calls;
``done`` is ``time == horizon`` after the step. The terminal reward r_H and terminal costs
g_H^(k) of the final state are *not* paid by ``step``; read them with
:meth:`Environment.terminal_reward` and :meth:`Environment.terminal_costs` (the rollout does).
Stepping past the horizon is undefined.

``step(key, ...)`` is ``transition(noise(key, params), ...)``: ``noise`` draws all of a step's
randomness (independent of state and action), ``transition`` is deterministic. Rollouts use
the split to draw the noise of all K x H steps in one vectorised call before the scan.
Environments whose noise is a function of ONE float32 uniform number also define
``noise_from_uniform`` (see :class:`Environment`), which lets rollouts spend a single 32-bit
random word per step on them.
"""

from __future__ import annotations

import abc
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.envs.encoders import Encoder, make_encoder

Array = jax.Array

State = TypeVar("State")
Params = TypeVar("Params")


@struct.dataclass
class TabularState:
    """State of a tabular environment: state index s and stage h, both int32 scalars."""

    index: Array
    time: Array


def sample_index(key: Array, probabilities: Array) -> Array:
    """Draw i ~ probabilities with ONE uniform number (inverse CDF), as an int32 scalar.

    Zero-probability entries are never drawn (also under floating-point rounding). O(n) work
    and a single random number, whereas ``jax.random.categorical`` draws n Gumbel numbers.

    Args:
        key: PRNG key.
        probabilities: (n,) non-negative weights (need not be normalised exactly).
    """
    cdf = jnp.cumsum(probabilities)
    u = jax.random.uniform(key, (), dtype=cdf.dtype) * cdf[-1]
    i = jnp.sum(cdf <= u).astype(jnp.int32)
    last = (probabilities.shape[0] - 1 - jnp.argmax(probabilities[::-1] > 0)).astype(jnp.int32)
    return jnp.minimum(i, last)


def check_int(owner: str, name: str, value: Any, low: int, high: int | None = None) -> int:
    """Validate an integer argument at an API boundary; returns it as ``int``."""
    valid = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{owner}: {name} must be {valid}, found {value!r}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{owner}: {name} must be {valid}, found {int(value)}")
    return int(value)


class Environment(abc.ABC, Generic[State, Params]):
    """Base class of finite-horizon constrained environments (static config only).

    Subclasses set ``self._encoder`` (via :meth:`_init_encoder`) and implement the abstract
    methods. Equality and hashing use :meth:`_static_config`, so two environments with the same
    configuration share ``jax.jit`` caches when passed as static arguments.

    Shapes: H = ``horizon``, S = ``num_states``, A = ``num_actions``, M = ``num_constraints``.
    """

    #: observation encoders this environment supports (names, see ``fhc_jax.envs.encoders``)
    supported_observations: tuple[str, ...] = ("one_hot", "index")

    def _init_encoder(self, observation: str) -> None:
        self._encoder: Encoder = make_encoder(type(self).__name__, observation, self.supported_observations)

    # ------------------------------------------------------------------ static configuration
    @property
    @abc.abstractmethod
    def horizon(self) -> int:
        """H, the number of decision stages."""

    @property
    @abc.abstractmethod
    def num_states(self) -> int:
        """S."""

    @property
    @abc.abstractmethod
    def num_actions(self) -> int:
        """A."""

    @property
    @abc.abstractmethod
    def num_constraints(self) -> int:
        """M."""

    @property
    @abc.abstractmethod
    def default_params(self) -> Params:
        """The default ``params`` pytree."""

    @abc.abstractmethod
    def _static_config(self) -> tuple:
        """Hashable tuple of everything static (used for ``==`` and ``hash``)."""

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._static_config() == other._static_config()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._static_config()))

    @property
    def encoder(self) -> Encoder:
        """The observation encoder chosen at construction."""
        return self._encoder

    @property
    def observation_shape(self) -> tuple[int, ...]:
        return self._encoder.shape(self)

    @property
    def observation_dtype(self):
        return self._encoder.dtype

    # ------------------------------------------------------------------ dynamics
    @abc.abstractmethod
    def reset(self, key: Array, params: Params) -> tuple[Array, State]:
        """Draw X_0 ~ beta; returns (observation, state) with ``state.time == 0``."""

    def noise(self, key: Array, params: Params) -> Any:
        """All randomness one ``step`` needs, drawn from ``key`` (a pytree; default: the key).

        Independent of state and action, so a rollout can draw it for all K x H steps in one
        vectorised call before the scan over stages (much faster on CPU than drawing inside
        it). ``step(key, ...) == transition(noise(key, params), ...)`` exactly.
        """
        del params
        return key

    #: Optional fast-noise protocol: ``noise_from_uniform(u, params) -> noise`` with u a float32
    #: uniform in [0, 1), such that ``noise(key, params) == noise_from_uniform(
    #: jax.random.uniform(key, (), jnp.float32), params)``. ``None`` where the noise needs more
    #: than one uniform (then rollouts pass ``noise`` a key per step).
    noise_from_uniform = None

    @abc.abstractmethod
    def transition(
        self, noise: Any, state: State, action: Array, params: Params
    ) -> tuple[Array, State, Array, Array, Array, dict]:
        """Deterministic part of ``step`` given the step's ``noise`` (same returns as ``step``)."""

    def step(
        self, key: Array, state: State, action: Array, params: Params
    ) -> tuple[Array, State, Array, Array, Array, dict]:
        """One transition at stage h = ``state.time``.

        Args:
            key: PRNG key (consumed by :meth:`noise`).
            state: current state (stage h < H).
            action: int32 scalar in [0, A).
            params: the params pytree.
        Returns:
            (observation of X_{h+1}, next state with time h+1, reward r_h (), costs g_h (M,),
            done () bool = (h+1 == H), info dict).
        """
        return self.transition(self.noise(key, params), state, action, params)

    def state_at(self, index: Array, time: Array) -> State:
        """The state with tabular index ``index`` at stage ``time`` (inverse of
        :meth:`state_index`; learners use it to tabulate observations of every state)."""
        raise NotImplementedError(f"{type(self).__name__} cannot build a state from its index")

    @abc.abstractmethod
    def state_index(self, state: State) -> Array:
        """Tabular index s in [0, S) of ``state``, int32 scalar (matches ``to_cmdp``)."""

    @abc.abstractmethod
    def terminal_reward(self, state: State, params: Params) -> Array:
        """r_H(s) of a final state, ()."""

    @abc.abstractmethod
    def terminal_costs(self, state: State, params: Params) -> Array:
        """g_H^(k)(s) of a final state, (M,)."""

    @abc.abstractmethod
    def to_cmdp(self, params: Params) -> TabularCMDP:
        """The exact tabular model with the same semantics (host-side, validates; not jittable)."""

    def observation(self, state: State, params: Params) -> Array:
        """Encode ``state`` with the environment's encoder; shape ``observation_shape``.

        ``reset`` and ``transition`` return this encoding of the new state (rollouts rely on
        it: they record ``observation(s_h)`` computed after the loop)."""
        del params
        return self._encoder(self, state)

    def coordinates(self, state: State) -> Array:
        """(x, y) in [0, 1]^2 for spatial environments (used by the "xy"/"xyt" encoders)."""
        raise NotImplementedError(f"{type(self).__name__} has no spatial coordinates")
