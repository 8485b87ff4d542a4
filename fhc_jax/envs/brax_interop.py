"""Brax environments as finite-horizon constrained environments (``pip install 'fhc_jax[brax]'``).

:func:`from_brax` wraps any Brax ``Env`` (``reset(rng) -> State``, ``step(State, action) ->
State``, with ``State.obs``, ``reward``, ``done``, ``metrics`` and ``info``) as an fhc_jax
:class:`~fhc_jax.envs.base.Environment` (:class:`BraxEnv`), the way
:func:`~fhc_jax.envs.from_gymnax` wraps gymnax environments:

* ``reset(key)`` is Brax's ``env.reset(key)``; ``step`` is Brax's ``env.step(state, action)``.
  A Brax step draws no randomness of its own (an environment that needs some keeps a key in
  ``state.info``, e.g. ``info["rng"]``, and carries it from step to step), so the step key of
  the fhc_jax contract is not used and a rollout is exactly Brax's own loop from the same
  reset keys.
* Exactly ``horizon`` stages. An episode that Brax ends (``state.done`` non-zero) before the
  horizon stays in an absorbing state: for its remaining stages the Brax state and the
  observation stay those of the terminal transition, and reward and costs are 0
  (``state.terminated`` says so). The terminal transition's reward and cost are paid.
* The stage h is ``state.time`` (int32), whatever the Brax observation is.
* Actions: ``fhc_jax.envs.spaces.Box`` of shape (``env.action_size``,) with bounds [-1, 1],
  the range Brax environments take (each scales it to its actuators' ``ctrl_range``). The
  wrapper clips an action into the bounds before ``env.step``, so the Gaussian-policy
  learners (NN-Constrained, e-COP, PPO-Lagrangian, CPO, Saute-Lagrangian) train on it;
  FH-Constrained takes discrete actions only and refuses it.
* Costs (M,) float32 per stage come from ``cost_fn(state, action, next_state)`` (Brax States
  and the clipped action), or, without ``cost_fn``, from ``next_state.info[cost_key]`` (the
  convention of Brax safe-RL code, e.g. safenax's FragileAnt and EcoAnt) or, where ``info``
  has no such key, ``next_state.metrics[cost_key]``. A cost of shape () is one constraint
  (M = 1), paid as the (1,) vector ``[c]``; a cost of shape (M,) is M constraints. No terminal
  reward or costs.
* The observation is Brax's ``state.obs`` (one array; a dictionary of observations is refused).

What to pass: the bare environment, ``brax.envs.get_environment(name, ...)`` or an ``Env`` of
your own, not one wrapped by ``brax.envs.create`` or the training wrappers: an auto-reset
wrapper would start a new episode inside the horizon and a vmap wrapper batches the state
(both refused). An ``EpisodeWrapper`` is accepted (its ``action_repeat`` applies), but its
time limit ends episodes early when it is shorter than the horizon.

**Command line** (``fhc-jax train --env brax:NAME``, NAME one of Brax's registered
environments, e.g. ``brax:inverted_pendulum``): :func:`brax_task` with the settings
``env.horizon`` (default 100), ``env.alpha`` (1), ``env.cost`` ("control": the control effort |a|^2 of the
clipped action per stage, an energy budget, defined for every Brax environment; "info": Brax's
``info[cost_key]`` or ``metrics[cost_key]``), ``env.cost_key`` and ``env.backend`` (Brax's
physics pipeline: "generalized", "positional", "spring" or "mjx"; empty: the environment's
default).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.envs.base import Environment, check_int
from fhc_jax.envs.encoders import Encoder
from fhc_jax.envs.interop import cost_count, thresholds
from fhc_jax.envs.spaces import Box

Array = jax.Array

#: cost_fn(state, action, next_state) -> (M,) or () float costs, on Brax States and the
#: clipped action (float32 (d,))
BraxCostFn = Callable[[Any, Array, Any], Array]

#: the one line printed when brax is missing
INSTALL_HINT = "pip install 'fhc_jax[brax]'"

#: Brax wrappers that break the finite-horizon contract: auto-reset starts a new episode inside
#: the horizon, the vmap wrappers batch the state
_REFUSED_WRAPPERS = ("AutoResetWrapper", "VmapWrapper", "DomainRandomizationVmapWrapper", "EvalWrapper")


def import_brax() -> Any:
    """The ``brax`` module, or an ``ImportError`` whose one line says how to install it."""
    try:
        import brax
        import brax.envs
    except ImportError as err:
        raise ImportError(
            f"fhc_jax.envs.from_brax needs brax, which is not installed ({err}): {INSTALL_HINT} "
            "(docs/brax.md: a CPU install without the CUDA plugin)"
        ) from None
    return brax


def registered(brax: Any) -> list[str]:
    """The names of Brax's registered environments (``brax.envs``' registry), sorted."""
    return sorted(name for name in brax.envs._envs if isinstance(name, str))


@struct.dataclass
class BraxState:
    """State of a wrapped Brax environment.

    Attributes:
        brax_state: the Brax ``State`` (obs, reward, done, metrics, info, pipeline_state);
            frozen once terminated.
        terminated: () bool, whether Brax ended the episode at an earlier stage.
        time: () int32, the stage h in [0, H].
    """

    brax_state: Any
    terminated: Array
    time: Array


@struct.dataclass
class BraxParams:
    """Params of a wrapped Brax environment: ``thresholds`` alpha^(k), (M,). (A Brax
    environment keeps its physics in the environment object, not in params.)"""

    thresholds: Array


@dataclasses.dataclass(frozen=True)
class BraxObservation(Encoder):
    """The wrapped environment's own observation (``state.brax_state.obs``)."""

    name: ClassVar[str] = "native"
    obs_shape: tuple[int, ...] = ()

    def __call__(self, env, state) -> Array:
        return state.brax_state.obs

    def shape(self, env) -> tuple[int, ...]:
        return self.obs_shape


class BraxEnv(Environment[BraxState, BraxParams]):
    """A Brax environment as a finite-horizon constrained environment (module docstring).

    Build it with :func:`from_brax`, which validates the arguments.
    """

    supported_observations = ("native",)

    def __init__(
        self,
        env: Any,
        horizon: int,
        cost_fn: BraxCostFn | None,
        cost_key: str,
        cost_field: str,
        num_constraints: int,
        alpha: np.ndarray,
        action_size: int,
        obs_shape: tuple[int, ...],
        obs_dtype: Any,
    ):
        self._env, self._horizon = env, horizon
        self._cost_fn, self._cost_key, self._cost_field = cost_fn, cost_key, cost_field
        self._num_constraints, self._alpha = num_constraints, alpha
        self._action_space = Box((-1.0,) * action_size, (1.0,) * action_size)
        self._obs_dtype = jnp.dtype(obs_dtype)
        self._encoder = BraxObservation(obs_shape=tuple(obs_shape))

    @property
    def brax_env(self) -> Any:
        """The wrapped Brax environment."""
        return self._env

    @property
    def horizon(self) -> int:
        return self._horizon

    @property
    def action_space(self) -> Box:
        """``Box([-1] * d, [1] * d)``, d = the Brax environment's ``action_size``."""
        return self._action_space

    @property
    def num_actions(self) -> int:
        """Raises: Brax actions are real vectors (:attr:`action_space`)."""
        raise self.box_actions_error()

    @property
    def num_constraints(self) -> int:
        return self._num_constraints

    @property
    def observation_dtype(self):
        return self._obs_dtype

    @property
    def default_params(self) -> BraxParams:
        return BraxParams(thresholds=jnp.asarray(self._alpha, jnp.float32))

    def _static_config(self) -> tuple:
        return (
            self._env,
            self._horizon,
            self._cost_fn,
            self._cost_key,
            self._cost_field,
            self._num_constraints,
            tuple(self._alpha.tolist()),
            self._action_space,
        )

    def __repr__(self) -> str:
        return f"from_brax({_brax_name(self._env)}, horizon={self._horizon}, num_constraints={self._num_constraints})"

    def thresholds(self, params: BraxParams) -> Array:
        """alpha^(k), ``params.thresholds``, (M,)."""
        return params.thresholds

    def observation(self, state: BraxState, params: BraxParams) -> Array:
        """Brax's observation ``state.brax_state.obs``, ``observation_shape``."""
        return state.brax_state.obs

    def _check_param_values(self, params: BraxParams, owner: str) -> None:
        """Thresholds finite and >= 0."""
        alpha = np.asarray(params.thresholds, np.float64)
        if not np.all(np.isfinite(alpha)) or np.any(alpha < 0):
            raise ValueError(f"{owner}: params.thresholds (alpha) must be finite and >= 0, found {alpha.tolist()}")

    def reset(self, key: Array, params: BraxParams) -> tuple[Array, BraxState]:
        """Brax ``env.reset(key)``; stage 0, not terminated (``params`` checked:
        :meth:`check_params`). Returns (observation, state)."""
        self.check_params(params, "from_brax.reset")
        brax_state = jax.tree.map(jnp.asarray, self._env.reset(key))
        brax_state = brax_state.replace(obs=jnp.asarray(brax_state.obs, self._obs_dtype))
        state = BraxState(brax_state=brax_state, terminated=jnp.zeros((), bool), time=jnp.zeros((), jnp.int32))
        return brax_state.obs, state

    def costs(self, state: Any, action: Array, next_state: Any) -> Array:
        """The stage's costs (M,) float32 from Brax states: ``cost_fn(state, action,
        next_state)``, or ``next_state.info[cost_key]`` / ``next_state.metrics[cost_key]``; a
        scalar cost (shape ()) as the (1,) vector."""
        if self._cost_fn is not None:
            cost = self._cost_fn(state, action, next_state)
        else:
            cost = getattr(next_state, self._cost_field)[self._cost_key]
        return jnp.asarray(cost, jnp.float32).reshape(self._num_constraints)

    def transition(self, noise: Any, state: BraxState, action: Array, params: BraxParams):
        """Brax ``env.step(state, clip(action, -1, 1))``, absorbing once terminated (``noise``,
        the step key, is not used: a Brax step is a function of the state and the action).

        Args:
            noise: unused.
            state: :class:`BraxState` at stage h < H.
            action: float32 (d,), clipped into [-1, 1].
            params: :class:`BraxParams`.
        Returns:
            (obs, next state, reward () float32, costs (M,) float32, done () = (h + 1 == H),
            info: Brax's ``info`` plus ``"terminated"`` (the episode has ended in Brax)).
        """
        del noise
        action = self._action_space.clip(action)
        new = self._env.step(state.brax_state, action)
        costs = self.costs(state.brax_state, action, new)
        live = jnp.logical_not(state.terminated)
        keep = lambda n, o: jnp.where(live, jnp.asarray(n, o.dtype), o)
        brax_state = jax.tree.map(keep, new, state.brax_state)
        reward = jnp.where(live, jnp.asarray(new.reward, jnp.float32), 0.0)
        costs = jnp.where(live, costs, 0.0)
        ended = state.terminated | (live & (jnp.asarray(new.done) != 0))
        next_state = BraxState(brax_state=brax_state, terminated=ended, time=state.time + 1)
        done = next_state.time == self._horizon
        return brax_state.obs, next_state, reward, costs, done, {**brax_state.info, "terminated": ended}


def _brax_name(env: Any) -> str:
    inner = env
    while hasattr(inner, "env") and inner is not inner.env:
        inner = inner.env
    return type(inner).__name__


def _wrappers(env: Any) -> list[str]:
    """Class names along the ``.env`` chain of Brax wrappers, outermost first."""
    names, seen = [], set()
    while env is not None and id(env) not in seen:
        seen.add(id(env))
        names.append(type(env).__name__)
        env = getattr(env, "env", None) if hasattr(env, "unwrapped") else None
    return names


def from_brax(
    env: Any,
    *,
    horizon: int,
    cost_fn: BraxCostFn | None = None,
    cost_key: str = "cost",
    num_constraints: int | None = None,
    alpha: float | Sequence[float] = 0.0,
) -> BraxEnv:
    """Wrap a Brax environment as a finite-horizon constrained environment (module docstring).

    ``reset``/``step`` are Brax's; an episode that Brax ends is absorbing until the horizon
    (observation frozen, reward and costs 0); actions are ``Box([-1]*d, [1]*d)``, clipped.

    Args:
        env: a Brax ``Env`` (e.g. ``brax.envs.get_environment("inverted_pendulum",
            backend="spring")``), not wrapped for training (auto-reset, vmap).
        horizon: H >= 1, the number of stages of every episode.
        cost_fn: ``cost_fn(state, action, next_state) -> (M,)`` or ``()`` float costs of a stage,
            on Brax ``State``s and the clipped action (d,); default: read
            ``next_state.info[cost_key]`` (else ``next_state.metrics[cost_key]``). A cost of
            shape () is one constraint, paid as ``[c]``.
        cost_key: the ``info`` (or ``metrics``) key of the cost when ``cost_fn`` is None.
        num_constraints: M; default inferred from the cost's shape (() gives 1).
        alpha: thresholds alpha^(k) >= 0, scalar or (M,) (``params.thresholds``); default 0.
    Returns:
        :class:`BraxEnv`; ``default_params`` holds the thresholds.
    Raises:
        ValueError: before any JIT (one abstract reset and step are traced with
            ``jax.eval_shape``): horizon < 1; ``env`` without ``reset``/``step``/``action_size``
            or wrapped for training; an observation that is not one array; a ``step`` whose
            State differs in structure from ``reset``'s or whose reward is not a scalar; a
            missing cost (no ``cost_fn`` and no ``cost_key`` in ``info`` or ``metrics``); a cost
            that is not a float array of shape () or (M,); a bad ``num_constraints`` / ``alpha``.
    """
    own = "from_brax"
    horizon = check_int(own, "horizon", horizon, 1)
    if num_constraints is not None:
        num_constraints = check_int(own, "num_constraints", num_constraints, 1)
    if cost_fn is not None and not callable(cost_fn):
        raise ValueError(
            f"{own}: cost_fn must be callable (state, action, next_state) -> (M,) or (), found {cost_fn!r}"
        )
    if not isinstance(cost_key, str):
        raise ValueError(f"{own}: cost_key must be a string, found {cost_key!r}")  # noqa: TRY004
    if isinstance(env, Environment) or not (
        callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None)) and hasattr(env, "action_size")
    ):
        raise ValueError(
            f"{own}: env must be a Brax Env (with reset, step and action_size), found {type(env).__name__}"
        )
    refused = [w for w in _wrappers(env) if w in _REFUSED_WRAPPERS]
    if refused:
        raise ValueError(
            f"{own}: env is wrapped by {refused[0]}, which breaks finite-horizon episodes (auto-reset "
            "restarts them, vmap batches them); pass the bare environment, e.g. "
            "brax.envs.get_environment(name) instead of brax.envs.create(name)"
        )
    action_size = env.action_size
    if isinstance(action_size, bool) or not isinstance(action_size, (int, np.integer)) or action_size < 1:
        raise ValueError(f"{own}: env.action_size must be an integer >= 1, found {action_size!r}")
    action_size = int(action_size)

    # one abstract reset and step (jax.eval_shape traces, compiles nothing)
    key = jax.random.key(0)
    state = jax.eval_shape(env.reset, key)
    for field in ("obs", "reward", "done", "info", "metrics"):
        if not hasattr(state, field):
            raise ValueError(
                f"{own}: env.reset must return a Brax State (obs, reward, done, metrics, info), "
                f"found {type(state).__name__} without {field!r}"
            )
    if not hasattr(state.obs, "shape"):
        raise ValueError(
            f"{own}: the observation must be one array; {_brax_name(env)} returns a "
            f"{type(state.obs).__name__} (wrap it to return one array)"
        )
    action = jnp.zeros((action_size,), jnp.float32)
    new = jax.eval_shape(env.step, state, action)
    if jax.tree.structure(new) != jax.tree.structure(state):
        raise ValueError(
            f"{own}: env.step returns a State of another structure than env.reset's (info keys "
            f"{sorted(state.info)} -> {sorted(new.info)}, metrics keys {sorted(state.metrics)} -> "
            f"{sorted(new.metrics)}); an episode's state must keep its structure"
        )
    for field in ("reward", "done"):
        if tuple(jnp.shape(getattr(new, field))) != ():
            raise ValueError(
                f"{own}: env.step's {field} must be a scalar, found shape "
                f"{tuple(jnp.shape(getattr(new, field)))} (a batched environment? pass an unbatched one)"
            )
    if tuple(new.obs.shape) != tuple(state.obs.shape):
        raise ValueError(
            f"{own}: env.step's observation has shape {tuple(new.obs.shape)}, env.reset's {tuple(state.obs.shape)}"
        )

    field = ""
    if cost_fn is None:
        field = next((f for f in ("info", "metrics") if cost_key in getattr(new, f)), "")
        if not field:
            raise ValueError(
                f"{own}: no cost: give cost_fn(state, action, next_state) -> (M,) or (), or a Brax "
                f"environment whose state.info or state.metrics has {cost_key!r} (info keys: "
                f"{sorted(new.info)}, metrics keys: {sorted(new.metrics)})"
            )
        cost, source = getattr(new, field)[cost_key], f"state.{field}[{cost_key!r}]"
    else:
        cost = jax.eval_shape(lambda s, a: cost_fn(s, a, env.step(s, a)), state, action)
        source = "cost_fn"
    m = cost_count(own, source, cost, num_constraints)
    return BraxEnv(
        env,
        horizon,
        cost_fn,
        cost_key,
        field,
        m,
        thresholds(own, alpha, m),
        action_size,
        tuple(state.obs.shape),
        state.obs.dtype,
    )


# ----------------------------------------------------------------------------- the command line


def control_effort(state: Any, action: Array, next_state: Any) -> Array:
    """|a|^2, the control effort of the clipped action (d,) of a stage, shape (); at most d."""
    return jnp.sum(jnp.square(action))


COSTS: dict[str, BraxCostFn | None] = {"control": control_effort, "info": None}


def brax_task(
    name: str, horizon: int = 100, alpha: float = 1.0, cost: str = "control", cost_key: str = "cost", backend: str = ""
) -> BraxEnv:
    """Brax's registered environment ``name`` (``brax.envs.get_environment``) with a cost, as
    ``--env brax:NAME`` builds it.

    Args:
        name: a Brax environment name (``brax.envs._envs``: "inverted_pendulum", "reacher",
            "hopper", "ant", ...).
        horizon: H >= 1.
        alpha: the threshold of the cost over an episode, >= 0 (default 1: on
            ``inverted_pendulum`` with H = 100, PPO-Lagrangian's default run balances the pole
            within it, ``benchmarks/brax_interop.py``).
        cost: "control" (|a|^2 per stage, the control effort of the clipped action; at most d,
            the action size) or "info" (Brax's ``info[cost_key]`` or ``metrics[cost_key]``).
        cost_key: the key read by ``cost="info"``.
        backend: Brax's physics pipeline ("generalized", "positional", "spring", "mjx"); empty
            for the environment's default.
    Raises:
        ImportError: brax is not installed (the message says how to install it).
        ValueError: an unknown name, cost or backend, or :func:`from_brax`'s errors.
    """
    if cost not in COSTS:
        raise ValueError(f"brax:{name}: cost must be one of {', '.join(map(repr, COSTS))}, found {cost!r}")
    brax = import_brax()
    known = registered(brax)
    if name not in known:
        raise ValueError(f"brax:{name}: unknown Brax environment {name!r}; Brax registers: {', '.join(known)}")
    backends = ("generalized", "positional", "spring", "mjx")
    if backend and backend not in backends:
        raise ValueError(
            f"brax:{name}: backend must be one of {', '.join(map(repr, backends))} or '' (the "
            f"environment's default), found {backend!r}"
        )
    env = brax.envs.get_environment(name, **({"backend": backend} if backend else {}))
    return from_brax(env, horizon=horizon, cost_fn=COSTS[cost], cost_key=cost_key, alpha=alpha)


def task_constructor(name: str) -> Callable[..., BraxEnv]:
    """The constructor of ``--env brax:NAME``: :func:`brax_task` with ``name`` bound, its other
    keyword arguments the ``env.*`` settings (checked by the experiment layer).

    Raises:
        ImportError: brax is not installed (the message says how to install it).
        ValueError: ``name`` is not one of Brax's registered environments.
    """
    known = registered(import_brax())
    if name not in known:
        raise ValueError(f"unknown Brax environment {name!r}; Brax registers: {', '.join(known)}")

    def make(
        horizon: int = 100, alpha: float = 1.0, cost: str = "control", cost_key: str = "cost", backend: str = ""
    ) -> BraxEnv:
        return brax_task(name, horizon=horizon, alpha=alpha, cost=cost, cost_key=cost_key, backend=backend)

    make.__name__ = make.__qualname__ = f"brax_task_{name}"
    make.__doc__ = f"brax:{name} (fhc_jax.envs.brax_interop.brax_task)"
    return make
