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

**The base class is the whole contract.** What every environment must provide is abstract
(``horizon``, ``num_actions``, ``num_constraints``, ``default_params``, ``reset``,
``transition``, ``_static_config``, an observation encoder, and ``thresholds(params)``,
which environments with an exact model inherit from ``to_cmdp``). Each optional capability is
declared by a boolean property of the base class (default ``False``) together with the methods
it promises; learners, rollouts and the experiment layer read the flags and never probe for
attributes:

=====================  ==========================================================================
flag                   promises
=====================  ==========================================================================
``has_exact_model``    ``to_cmdp(params)``: the exact tabular model (exact judgement, ``solve``)
``is_tabular``         ``num_states``, ``state_index(state)``, ``state_at(index, time)``: tabular
                       fast paths (policy tables, one-hot features, tabulated observations)
``has_uniform_noise``  ``noise_from_uniform(u, params)``: a step's noise from ONE float32
                       uniform (rollouts then spend a single 32-bit word per step)
``pays_on_arrival``    ``arrival_signals(params)``: rewards and costs that depend only on the
                       stage and the state arrived at (fast learner rollouts keep them exact)
``is_spatial``         ``grid_shape`` and ``coordinates(state)``: cells of a rows x cols grid
                       (the "xy"/"xyt" encoders, policy maps in plots)
``has_reference``      ``reference(params)``: a reference policy executable in the environment
                       (e.g. the optimum of a discretized exact model), the yardstick of the
                       Monte-Carlo judgement where there is no tabular exact model
=====================  ==========================================================================

**Params.** :meth:`Environment.check_params` validates a ``params`` pytree wherever one comes
in from outside (``rollout``, the public ``step``, the built-in environments' ``reset`` and
``to_cmdp``): its pytree structure and every leaf's shape must be those of ``default_params``
(checked also for traced params, shapes being static: params of another configuration, e.g. a
size-4 gridworld's in a size-3 one, are refused), and, when its values are concrete, each
environment's :meth:`Environment._check_param_values` checks their ranges. Traced params (a
``jax.vmap`` over params, arguments of the caller's ``jax.jit``) are checked for structure and
shapes only.

**Actions.** :attr:`Environment.action_space` declares them (``fhc_jax.envs.spaces``):
``Discrete(A)`` (the default, from ``num_actions``; actions are int32 indices) or ``Box(low,
high)`` (float32 vectors of shape (d,)). A box environment overrides ``action_space``, clips
the actions it receives into the bounds itself, and raises from ``num_actions`` (there is no
count of actions; :meth:`Environment.box_actions_error` words it). The public :meth:`Environment.step`
refuses a discrete action that is not an integer (at trace time) or lies outside [0, A) (see
``fhc_jax.envs.validation``: at once when concrete, through a host callback inside the
caller's ``jax.jit``); ``transition`` itself does not check.

**Observations.** An environment either calls :meth:`Environment._init_encoder` with one of
its ``supported_observations`` (``fhc_jax.envs.encoders``) or overrides :meth:`Environment.observation`
itself (its :attr:`Environment.encoder` is then :class:`~fhc_jax.envs.encoders.OwnObservation`,
shape and dtype read from ``reset``). Nothing in the library derives a tabular state from an
observation: policy tables are played from :meth:`Environment.state_index`.
"""

from __future__ import annotations

import abc
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.envs.encoders import Encoder, OwnObservation, make_encoder
from fhc_jax.envs.spaces import ActionSpace, Box, Discrete
from fhc_jax.envs.validation import check_action, check_action_value, is_concrete

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


def _positive_int(owner: str, what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        kind = type(value).__name__
        raise ValueError(f"{owner}: {what} must be a positive int, found {value!r} ({kind})")
    return int(value)


def check_static(env: Any, owner: str) -> None:
    """The static configuration every environment declares, checked where it is used: H and M
    positive ints, and A a positive int for discrete actions.

    Raises:
        ValueError: naming the property, e.g. ``horizon must be a positive int, found 4.0 (float)``.
    """
    if not isinstance(env, Environment):
        raise ValueError(f"{owner}: env must be an fhc_jax.envs.Environment, found {type(env).__name__}")
    _positive_int(owner, f"{env.name}.horizon", env.horizon)
    _positive_int(owner, f"{env.name}.num_constraints", env.num_constraints)
    if not env.has_box_actions:
        _positive_int(owner, f"{env.name}.num_actions", env.action_space.n)


class Environment(abc.ABC, Generic[State, Params]):
    """Base class of finite-horizon constrained environments (static config only).

    Subclasses set ``self._encoder`` (via :meth:`_init_encoder`) or override
    :meth:`observation`, implement the abstract members, and declare each optional capability they have by overriding
    its flag (module
    docstring) and the methods it promises. Equality and hashing use :meth:`_static_config`,
    so two environments with the same configuration share ``jax.jit`` caches when passed as
    static arguments.

    Shapes: H = ``horizon``, S = ``num_states``, A = ``num_actions``, M = ``num_constraints``.
    """

    #: observation encoders this environment supports (names, see ``fhc_jax.envs.encoders``)
    supported_observations: tuple[str, ...] = ("one_hot", "index")

    def _init_encoder(self, observation: str) -> None:
        self._encoder: Encoder = make_encoder(type(self).__name__, observation, self.supported_observations)

    # ------------------------------------------------------------------ required: static configuration
    @property
    @abc.abstractmethod
    def horizon(self) -> int:
        """H, the number of decision stages."""

    @property
    @abc.abstractmethod
    def num_actions(self) -> int:
        """A."""

    @property
    @abc.abstractmethod
    def num_constraints(self) -> int:
        """M."""

    @property
    def action_space(self) -> ActionSpace:
        """The actions this environment takes: ``Discrete(num_actions)`` by default; box
        environments override it with a :class:`~fhc_jax.envs.spaces.Box`."""
        return Discrete(self.num_actions)

    @property
    def has_box_actions(self) -> bool:
        """Whether the actions are real vectors (:class:`~fhc_jax.envs.spaces.Box`)."""
        return isinstance(self.action_space, Box)

    def box_actions_error(self, what: str = "num_actions") -> ValueError:
        """The error a box environment raises from ``num_actions`` (and learners that need a
        finite action set raise): it names the space and what to use instead."""
        space = self.action_space
        return ValueError(
            f"{self.name} has continuous (box) actions in [{list(space.low)}, {list(space.high)}], "
            f"not a finite number of them ({what}); use a learner or policy for box actions "
            "(a Gaussian policy) or a discrete version of the environment"
        )

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
    def name(self) -> str:
        """The environment's name in messages (its class name; wrappers report the wrapped one)."""
        return type(self).__name__

    def describe(self) -> str:
        """The environment in messages: its ``repr`` when the class defines one (the built-in
        environments show their configuration), else its name."""
        return repr(self) if type(self).__repr__ is not object.__repr__ else self.name

    @property
    def encoder(self) -> Encoder:
        """The observation encoder chosen at construction (:class:`~fhc_jax.envs.encoders.
        OwnObservation` for an environment that computes its own observation)."""
        encoder = getattr(self, "_encoder", None)
        return OwnObservation() if encoder is None else encoder

    @property
    def observes_by_encoder(self) -> bool:
        """Whether the observations are the encoder's (the environment does not override
        :meth:`observation`), so the state index can be read back from them; a wrapper that
        passes its inner environment's observations through says what the inner one says."""
        return type(self).observation is Environment.observation

    @property
    def observation_shape(self) -> tuple[int, ...]:
        return self.encoder.shape(self)

    @property
    def observation_dtype(self):
        encoder = self.encoder
        return encoder.observation_dtype(self) if isinstance(encoder, OwnObservation) else encoder.dtype

    # ------------------------------------------------------------------ required: dynamics
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
            action: int32 scalar in [0, A) (``Discrete``), or float32 (d,) (``Box``; the
                environment clips it into the bounds).
            params: the params pytree.
        Returns:
            (observation of X_{h+1}, next state with time h+1, reward r_h (), costs g_h (M,),
            done () bool = (h+1 == H), info dict).
        Raises:
            ValueError: params that do not fit this environment (:meth:`check_params`); a
                discrete action that is not an integer scalar (at trace time).
            InvalidActionError: a discrete action outside [0, A): at once when concrete; inside
                the caller's ``jax.jit`` from a host callback that runs only then, reaching the
                caller as ``jax.errors.JaxRuntimeError`` with the same message
                (``fhc_jax.envs.validation``).
        """
        owner = f"{self.name}.step"
        check_static(self, owner)
        self.check_params(params, owner)
        action = check_action(self, action, owner)
        check_action_value(self, action, owner)
        return self.transition(self.noise(key, params), state, action, params)

    def terminal_reward(self, state: State, params: Params) -> Array:
        """r_H(s) of a final state, (); default 0."""
        del state, params
        return jnp.zeros((), jnp.float32)

    def terminal_costs(self, state: State, params: Params) -> Array:
        """g_H^(k)(s) of a final state, (M,); default 0."""
        del state, params
        return jnp.zeros((self.num_constraints,), jnp.float32)

    def observation(self, state: State, params: Params) -> Array:
        """Encode ``state`` with the environment's encoder; shape ``observation_shape``.

        ``reset`` and ``transition`` return this encoding of the new state (rollouts rely on
        it: they record ``observation(s_h)`` computed after the loop). An environment with an
        observation of its own overrides this method."""
        del params
        return self.encoder(self, state)

    # ------------------------------------------------------------------ params validation
    def _param_spec(self) -> tuple[Any, tuple[tuple[str, tuple[int, ...]], ...]]:
        """(pytree structure, ((leaf path, shape), ...)) of ``default_params``, computed once."""
        cache = getattr(self, "__dict__", None)  # None: a class with __slots__ (computed each time)
        spec = None if cache is None else cache.get("_cached_param_spec")
        if spec is None:
            flat, treedef = jax.tree_util.tree_flatten_with_path(self.default_params)
            spec = (treedef, tuple((jax.tree_util.keystr(path), tuple(np.shape(x))) for path, x in flat))
            if cache is not None:
                cache["_cached_param_spec"] = spec
        return spec

    def check_params(self, params: Params, owner: str | None = None) -> None:
        """Validate a ``params`` pytree against this environment (module docstring, "Params").

        Always (also for traced params): the pytree structure and every leaf's shape must be
        those of :attr:`default_params`. When every leaf is concrete: the values' ranges
        (:meth:`_check_param_values`).

        Args:
            params: the params pytree.
            owner: who checks, for the message (default: the environment's name).
        Raises:
            ValueError: naming the field, the shape or range expected and what was found.
        """
        owner = owner or self.name
        treedef, shapes = self._param_spec()
        flat, found = jax.tree_util.tree_flatten_with_path(params)
        if found != treedef:
            default = type(jax.tree_util.tree_unflatten(treedef, [0] * treedef.num_leaves)).__name__
            raise ValueError(
                f"{owner}: params must be a {default} pytree with the fields of {self.describe()}'s "
                f"default_params, found a {type(params).__name__} of another structure"
            )
        for (path, leaf), (_, shape) in zip(flat, shapes):
            if tuple(np.shape(leaf)) != shape:
                raise ValueError(
                    f"{owner}: params{jax.tree_util.keystr(path)} has shape {tuple(np.shape(leaf))}; "
                    f"{self.describe()} expects {shape}: params of another configuration (build them with "
                    "this environment's default_params, or its own make_params)"
                )
        if is_concrete(params):
            self._check_param_values(params, owner)

    def _check_param_values(self, params: Params, owner: str) -> None:
        """Check the ranges of concrete ``params`` (whose structure and shapes are already
        checked); raise ``ValueError`` naming the field, its range and the value found.
        Default: nothing to check. Environments with constrained params override it."""
        del params, owner

    def thresholds(self, params: Params) -> Array:
        """alpha^(k), the constraint thresholds, (M,). Default: those of :meth:`to_cmdp`; an
        environment without an exact model must override it."""
        if not self.has_exact_model:
            raise NotImplementedError(f"{type(self).__name__} must define thresholds(params): it has no exact model")
        return jnp.asarray(self.to_cmdp(params).thresholds)

    # ------------------------------------------------------------------ capability: exact model
    @property
    def has_exact_model(self) -> bool:
        """Whether :meth:`to_cmdp` gives the exact tabular model (exact judgement)."""
        return False

    def to_cmdp(self, params: Params) -> TabularCMDP:
        """The exact tabular model with the same semantics (host-side, validates; not jittable).
        Requires ``has_exact_model``."""
        raise self._missing("has_exact_model", "an exact tabular model (to_cmdp)")

    # ------------------------------------------------------------------ capability: tabular states
    @property
    def is_tabular(self) -> bool:
        """Whether states have a tabular index: :attr:`num_states`, :meth:`state_index` and
        :meth:`state_at` (tabular fast paths of the learners)."""
        return False

    @property
    def num_states(self) -> int:
        """S (requires ``is_tabular``)."""
        raise self._missing("is_tabular", "tabular states (num_states)")

    def state_index(self, state: State) -> Array:
        """Tabular index s in [0, S) of ``state``, int32 scalar (matches ``to_cmdp``; requires
        ``is_tabular``)."""
        raise self._missing("is_tabular", "tabular states (state_index)")

    def state_at(self, index: Array, time: Array) -> State:
        """The state with tabular index ``index`` at stage ``time`` (inverse of
        :meth:`state_index`; requires ``is_tabular``)."""
        raise self._missing("is_tabular", "tabular states (state_at)")

    # ------------------------------------------------------------------ capability: one-uniform noise
    @property
    def has_uniform_noise(self) -> bool:
        """Whether a step's noise is a function of ONE float32 uniform
        (:meth:`noise_from_uniform`)."""
        return False

    def noise_from_uniform(self, u: Array, params: Params) -> Any:
        """``noise_from_uniform(u, params)`` with u a float32 uniform in [0, 1), such that
        ``noise(key, params) == noise_from_uniform(jax.random.uniform(key, (), jnp.float32),
        params)`` (requires ``has_uniform_noise``)."""
        raise self._missing("has_uniform_noise", "one-uniform noise (noise_from_uniform)")

    # ------------------------------------------------------------------ capability: signals paid on arrival
    @property
    def pays_on_arrival(self) -> bool:
        """Whether rewards and costs depend only on the stage and the state arrived at
        (:meth:`arrival_signals`); requires ``is_tabular`` and ``has_exact_model``."""
        return False

    def arrival_signals(self, params: Params) -> tuple[Array, Array]:
        """(rewards (H, S), costs (M, H, S)): r_h and g_h^(k) paid on arriving at s' at stage
        h + 1, so that ``to_cmdp``'s expected rewards are their expectation over successors
        (requires ``pays_on_arrival``)."""
        raise self._missing("pays_on_arrival", "signals paid on arrival (arrival_signals)")

    # ------------------------------------------------------------------ capability: spatial grid
    @property
    def is_spatial(self) -> bool:
        """Whether states are cells of a rows x cols grid (:attr:`grid_shape`,
        :meth:`coordinates`; tabular index = row * cols + col)."""
        return False

    @property
    def grid_shape(self) -> tuple[int, int]:
        """(rows, cols) of the grid (requires ``is_spatial``)."""
        raise self._missing("is_spatial", "a spatial grid (grid_shape)")

    def coordinates(self, state: State) -> Array:
        """(x, y) in [0, 1]^2 of the state's cell (the "xy"/"xyt" encoders; requires
        ``is_spatial``)."""
        raise self._missing("is_spatial", "a spatial grid (coordinates)")

    # ------------------------------------------------------------------ capability: reference policy
    @property
    def has_reference(self) -> bool:
        """Whether :meth:`reference` gives a reference policy to judge learners against."""
        return False

    def reference(self, params: Params) -> tuple[Any, Array]:
        """(``policy(key, observation, h)`` executable in this environment, its multipliers
        nu (M,)): the yardstick of learners judged by Monte-Carlo, e.g. the optimal policy of a
        discretized exact model executed in the continuous environment (requires
        ``has_reference``)."""
        raise self._missing("has_reference", "a reference policy (reference)")

    def _missing(self, flag: str, what: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} has no {what}: its {flag} is False")
