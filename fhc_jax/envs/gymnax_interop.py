"""gymnax interoperability, both ways (gymnax >= 1.0; install with ``pip install -e ".[gymnax]"``).

**gymnax -> fhc_jax.** :func:`from_gymnax` wraps a gymnax environment as a finite-horizon
constrained :class:`~fhc_jax.envs.base.Environment` (:class:`GymnaxEnv`):

* ``reset(key)`` is gymnax's ``reset_env(key)`` and ``step(key, ...)`` is gymnax's
  ``step_env(key, ...)`` with the SAME key: the transition without gymnax's auto-reset and
  time limit (gymnax's own ``step(k)`` runs ``step_env(split(k)[0])`` and then resets). The
  key is the step's noise (the default :meth:`~fhc_jax.envs.base.Environment.noise`), so
  ``fhc_jax.rollout`` draws all K x H step keys before its scan.
* Exactly ``horizon`` stages; gymnax's ``max_steps_in_episode`` is not used (the horizon
  replaces it; gymnax 1.0's ``step_env`` reports natural termination only).
* An episode that the gymnax environment terminates before the horizon stays in an absorbing
  state: for its remaining stages the gymnax state and the observation stay those of the
  terminal transition, and reward and costs are 0 (``state.terminated`` says so).
* The stage h is ``state.time`` (int32), whatever the gymnax observation is, so a
  non-stationary learner always has it.
* Costs (M,) float32 per stage come from ``cost_fn(state, action, next_state, env_params)``
  (gymnax states and params) or, without ``cost_fn``, from ``info[cost_key]`` of ``step_env``
  (the convention of JAX safe-RL suites). No terminal reward or costs.
* Discrete action spaces only (for now): a continuous (Box) action space is refused.
* The observation is the gymnax observation, stored in the state; its shape and dtype are
  those of gymnax's ``observation_space(env_params)`` (a ``Box`` or ``Discrete``).

**fhc_jax -> gymnax.** :func:`to_gymnax` exposes any fhc_jax environment as a subclass of
gymnax's ``environment.Environment``: ``reset_env``/``step_env`` (so gymnax's ``reset``/``step``
auto-reset), ``observation_space``/``action_space``, ``default_params`` (:class:`ViewParams`:
the fhc_jax params plus ``max_steps_in_episode = horizon``). gymnax 1.0's ``step`` returns
``(obs, state, reward, terminated, truncated, info)``. Per-stage costs (M,) are in
``info["cost"]``. **At the last stage** (h + 1 == H) the terminal reward r_H and terminal costs
g_H of the final state are ADDED to that step's reward and ``info["cost"]``, so the sum of an
episode's rewards (costs) is the paper's total, eq. (1) ((2)). The horizon's end is reported as
``terminated`` (nothing follows it: do not bootstrap), and gymnax also flags it ``truncated``
because ``max_steps_in_episode = horizon``.

**Registered tasks** (``fhc-jax train --env gymnax:<name>``; settings ``horizon``, ``alpha``,
``cost``); the reward is gymnax's, absorbing after termination:

==================  ==========================================================================
gymnax:CartPole-v1  reward 1 per stage while the pole is up (the pole's survival time, at most
                    H = 200). ``cost="position"`` (default): 1 per stage with |x| > 1.0 (cart
                    outside the middle of the track; gymnax terminates at 2.4), alpha = 10
                    stages; ``cost="angle"``: 1 per stage with |theta| > 6 degrees (half the
                    termination angle), alpha = 10.
gymnax:Acrobot-v1   reward -1 per stage until the tip swings above the bar. ``cost="energy"``:
                    1 per stage with a non-zero torque (actions 0 and 2), an energy budget;
                    H = 200, alpha = 100 (half the stages).
gymnax:MountainCar-v0  reward -1 per stage until the car reaches the flag. ``cost="energy"``:
                    1 per stage pushing (actions 0 and 2); H = 200, alpha = 60.
==================  ==========================================================================

Every task is feasible (the idle action costs nothing; CartPole starts within 0.05 of the centre).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, ClassVar, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.envs.base import Environment, check_int
from fhc_jax.envs.encoders import Encoder

Array = jax.Array

#: cost_fn(state, action, next_state, env_params) -> (M,) float costs, on gymnax states and params
CostFn = Callable[[Any, Array, Any, Any], Array]


@struct.dataclass
class GymnaxState:
    """State of a wrapped gymnax environment.

    Attributes:
        env_state: the gymnax state (frozen once terminated).
        obs: the gymnax observation of ``env_state`` (the last one once terminated).
        terminated: () bool, whether gymnax terminated the episode at an earlier stage.
        time: () int32, the stage h in [0, H].
    """

    env_state: Any
    obs: Any
    terminated: Array
    time: Array


@struct.dataclass
class GymnaxParams:
    """Params of a wrapped gymnax environment: ``env_params`` (gymnax's params pytree) and
    ``thresholds`` alpha^(k), (M,)."""

    env_params: Any
    thresholds: Array


@dataclasses.dataclass(frozen=True)
class NativeObservation(Encoder):
    """The wrapped environment's own observation (``state.obs``); shape and dtype from gymnax."""

    name: ClassVar[str] = "native"
    obs_shape: tuple[int, ...] = ()

    def __call__(self, env, state) -> Array:
        return state.obs

    def shape(self, env) -> tuple[int, ...]:
        return self.obs_shape


def _thresholds(owner: str, alpha: Any, m: int) -> np.ndarray:
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


def _space_kind(space: Any) -> str:
    # gymnax.environments.spaces classes, read by name so that this module imports without gymnax
    return type(space).__name__


class GymnaxEnv(Environment[GymnaxState, GymnaxParams]):
    """A gymnax environment as a finite-horizon constrained environment (module docstring).

    Build it with :func:`from_gymnax`, which validates the arguments.
    """

    supported_observations = ("native",)

    def __init__(self, env: Any, env_params: Any, horizon: int, cost_fn: CostFn | None, cost_key: str,
                 num_constraints: int, alpha: np.ndarray, num_actions: int, obs_shape: tuple[int, ...],
                 obs_dtype: Any):
        self._env, self._env_params = env, env_params
        self._horizon, self._cost_fn, self._cost_key = horizon, cost_fn, cost_key
        self._num_constraints, self._alpha = num_constraints, alpha
        self._num_actions, self._obs_dtype = num_actions, jnp.dtype(obs_dtype)
        self._encoder = NativeObservation(obs_shape=tuple(obs_shape))

    @property
    def gymnax_env(self) -> Any:
        """The wrapped gymnax environment."""
        return self._env

    @property
    def horizon(self) -> int:
        return self._horizon

    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def num_constraints(self) -> int:
        return self._num_constraints

    @property
    def observation_dtype(self):
        return self._obs_dtype

    @property
    def default_params(self) -> GymnaxParams:
        return GymnaxParams(env_params=self._env_params, thresholds=jnp.asarray(self._alpha, jnp.float32))

    def _static_config(self) -> tuple:
        return (self._env, id(self._env_params), self._horizon, self._cost_fn, self._cost_key,
                self._num_constraints, tuple(self._alpha.tolist()))

    def __repr__(self) -> str:
        return (f"from_gymnax({getattr(self._env, 'name', type(self._env).__name__)}, horizon={self._horizon}, "
                f"num_constraints={self._num_constraints})")

    def thresholds(self, params: GymnaxParams) -> Array:
        """alpha^(k), ``params.thresholds``, (M,)."""
        return params.thresholds

    def observation(self, state: GymnaxState, params: GymnaxParams) -> Array:
        """The stored gymnax observation, ``observation_shape``."""
        return state.obs

    def reset(self, key: Array, params: GymnaxParams) -> tuple[Array, GymnaxState]:
        """gymnax ``reset_env(key, env_params)``; stage 0, not terminated."""
        obs, env_state = self._env.reset_env(key, params.env_params)
        env_state = jax.tree.map(jnp.asarray, env_state)
        obs = jnp.asarray(obs, self._obs_dtype)
        state = GymnaxState(env_state=env_state, obs=obs, terminated=jnp.zeros((), bool),
                            time=jnp.zeros((), jnp.int32))
        return obs, state

    def _costs(self, state: Any, action: Array, next_state: Any, env_params: Any, info: dict) -> Array:
        if self._cost_fn is not None:
            costs = self._cost_fn(state, action, next_state, env_params)
        else:
            costs = info[self._cost_key]
        return jnp.asarray(costs, jnp.float32)

    def transition(self, noise: Array, state: GymnaxState, action: Array, params: GymnaxParams):
        """gymnax ``step_env(noise, ...)`` (``noise`` is the step key), absorbing once terminated.

        Returns:
            (obs, next state, reward () float32, costs (M,) float32, done () = (h + 1 == H),
            info: gymnax's info plus ``"terminated"`` (the episode has ended in gymnax)).
        """
        action = jnp.asarray(action, jnp.int32)
        obs, env_state, reward, terminated, info = self._env.step_env(noise, state.env_state, action, params.env_params)
        costs = self._costs(state.env_state, action, env_state, params.env_params, info)
        live = jnp.logical_not(state.terminated)
        keep = lambda new, old: jnp.where(live, jnp.asarray(new, old.dtype), old)
        env_state = jax.tree.map(keep, env_state, state.env_state)
        obs = keep(obs, state.obs)
        reward = jnp.where(live, jnp.asarray(reward, jnp.float32), 0.0)
        costs = jnp.where(live, costs, 0.0)
        ended = state.terminated | (live & jnp.asarray(terminated, bool))
        next_state = GymnaxState(env_state=env_state, obs=obs, terminated=ended, time=state.time + 1)
        done = next_state.time == self._horizon
        return obs, next_state, reward, costs, done, {**info, "terminated": ended}


def from_gymnax(
    env: Any,
    env_params: Any = None,
    *,
    horizon: int,
    cost_fn: CostFn | None = None,
    cost_key: str = "cost",
    num_constraints: int | None = None,
    alpha: float | Sequence[float] = 0.0,
) -> GymnaxEnv:
    """Wrap a gymnax environment as a finite-horizon constrained environment (module docstring).

    Args:
        env: a gymnax ``Environment`` (e.g. ``gymnax.make("CartPole-v1")[0]``) with a
            ``Discrete`` action space.
        env_params: its params; default ``env.default_params``.
        horizon: H >= 1, the number of stages of every episode.
        cost_fn: ``cost_fn(state, action, next_state, env_params) -> (M,)`` float costs of a
            stage (gymnax states); default: read ``info[cost_key]`` of ``step_env``.
        cost_key: the info key of the costs when ``cost_fn`` is None.
        num_constraints: M; default inferred from the cost's shape.
        alpha: thresholds alpha^(k) >= 0, scalar or (M,) (``params.thresholds``); default 0.
    Returns:
        :class:`GymnaxEnv`; ``default_params`` holds ``env_params`` and the thresholds.
    Raises:
        ValueError (before any JIT): horizon < 1, a continuous or unknown action space, an
            observation space that is neither Box nor Discrete, a missing cost (no ``cost_fn``
            and no ``cost_key`` in ``info``), a cost that is not a 1-d float array of shape
            (M,), or a bad ``num_constraints`` / ``alpha``.
    """
    own = "from_gymnax"
    horizon = check_int(own, "horizon", horizon, 1)
    if num_constraints is not None:
        num_constraints = check_int(own, "num_constraints", num_constraints, 1)
    if cost_fn is not None and not callable(cost_fn):
        raise ValueError(f"{own}: cost_fn must be callable (state, action, next_state, params) -> (M,), found {cost_fn!r}")
    if not isinstance(cost_key, str):
        raise ValueError(f"{own}: cost_key must be a string, found {cost_key!r}")
    if not (callable(getattr(env, "step_env", None)) and callable(getattr(env, "reset_env", None))):
        raise ValueError(f"{own}: env must be a gymnax Environment (with reset_env and step_env), found {type(env).__name__}")
    env_params = env.default_params if env_params is None else env_params
    action_space = env.action_space(env_params)
    if _space_kind(action_space) != "Discrete":
        raise ValueError(f"{own}: only discrete action spaces are supported for now (the learners choose among A "
                         f"actions); {getattr(env, 'name', type(env).__name__)} has a {_space_kind(action_space)} "
                         "action space")
    num_actions = check_int(own, "action_space.n", int(action_space.n), 1)
    obs_space = env.observation_space(env_params)
    if _space_kind(obs_space) not in ("Box", "Discrete"):
        raise ValueError(f"{own}: the observation space must be a Box or Discrete, found {_space_kind(obs_space)}")
    obs_dtype = jnp.dtype(obs_space.dtype)
    raw_shape = obs_space.shape
    obs_shape = (int(raw_shape),) if isinstance(raw_shape, (int, np.integer)) else tuple(int(d) for d in raw_shape)

    # one abstract reset and step (jax.eval_shape traces, compiles nothing) to check the cost
    key = jax.random.key(0)
    _, abstract_state = jax.eval_shape(env.reset_env, key, env_params)
    action = jnp.zeros((), jnp.int32)
    abstract_obs, _, _, _, abstract_info = jax.eval_shape(env.step_env, key, abstract_state, action, env_params)
    if tuple(abstract_obs.shape) != obs_shape:
        raise ValueError(f"{own}: step_env's observation has shape {tuple(abstract_obs.shape)}, but the observation "
                         f"space says {obs_shape}")
    if cost_fn is None:
        if not isinstance(abstract_info, dict) or cost_key not in abstract_info:
            keys = sorted(abstract_info) if isinstance(abstract_info, dict) else []
            raise ValueError(f"{own}: no cost: give cost_fn(state, action, next_state, params) -> (M,), or a gymnax "
                             f"environment whose step_env info has {cost_key!r} (its info keys: {keys})")
        cost = abstract_info[cost_key]
        source = f"info[{cost_key!r}]"
    else:
        cost = jax.eval_shape(lambda s, a, p: cost_fn(s, a, env.step_env(key, s, a, p)[1], p),
                              abstract_state, action, env_params)
        source = "cost_fn"
    shape, dtype = tuple(getattr(cost, "shape", ())), getattr(cost, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"{own}: {source} must be a float array of shape (M,), found dtype {dtype} "
                         "(cast it, e.g. (x > 1).astype(jnp.float32))")
    if len(shape) != 1 or shape[0] < 1 or (num_constraints is not None and shape[0] != num_constraints):
        want = "(M,) with M >= 1" if num_constraints is None else f"(M,) = ({num_constraints},)"
        raise ValueError(f"{own}: {source} must have shape {want}, found {shape} (for one constraint return "
                         "jnp.array([c]))")
    m = shape[0]
    return GymnaxEnv(env, env_params, horizon, cost_fn, cost_key, m, _thresholds(own, alpha, m), num_actions,
                     obs_shape, obs_dtype)


# ----------------------------------------------------------------------------- fhc_jax -> gymnax


@functools.cache
def _view_classes() -> tuple[type, type, type]:
    """(ViewParams, ViewState, GymnaxView), built on first use so that gymnax stays optional."""
    from gymnax.environments import environment as gx
    from gymnax.environments import spaces

    @struct.dataclass
    class ViewParams(gx.EnvParams):
        """gymnax params of an fhc_jax environment: ``env_params`` (its params pytree) and
        ``max_steps_in_episode`` (= the horizon H)."""

        env_params: Any = None

    @struct.dataclass
    class ViewState(gx.EnvState):
        """gymnax state of an fhc_jax environment: ``inner`` (its state) and ``time`` = h."""

        inner: Any = None

    class GymnaxView(gx.Environment):
        """An fhc_jax environment as a gymnax environment (see :func:`to_gymnax`)."""

        def __init__(self, env: Environment):
            super().__init__()
            self.env = env

        def __hash__(self) -> int:
            return hash(("to_gymnax", self.env))

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self) and other.env == self.env

        @property
        def default_params(self) -> ViewParams:
            return ViewParams(max_steps_in_episode=self.env.horizon, env_params=self.env.default_params)

        def reset_env(self, key: Array, params: ViewParams) -> tuple[Array, ViewState]:
            obs, inner = self.env.reset(key, params.env_params)
            return obs, ViewState(time=jnp.asarray(inner.time, jnp.int32), inner=inner)

        def step_env(self, key: Array, state: ViewState, action: Array, params: ViewParams):
            """One stage; at the last one the final state's terminal reward and costs are added.
            Returns (obs, state, reward (), terminated () = (h + 1 == H), info with "cost" (M,))."""
            env, p = self.env, params.env_params
            obs, inner, reward, costs, done, info = env.step(key, state.inner, jnp.asarray(action, jnp.int32), p)
            reward = reward + jnp.where(done, env.terminal_reward(inner, p), 0.0).astype(reward.dtype)
            costs = costs + jnp.where(done, env.terminal_costs(inner, p), 0.0).astype(costs.dtype)
            new = ViewState(time=jnp.asarray(inner.time, jnp.int32), inner=inner)
            return obs, new, reward, jnp.asarray(done, bool), {**info, "cost": costs}

        def is_terminated(self, state: ViewState, params: ViewParams) -> Array:
            return state.time >= self.env.horizon

        @property
        def name(self) -> str:
            return f"fhc_jax:{type(self.env).__name__}"

        @property
        def num_actions(self) -> int:
            return self.env.num_actions

        def action_space(self, params: ViewParams | None = None):
            return spaces.Discrete(self.env.num_actions)

        def observation_space(self, params: ViewParams | None = None):
            """Box of ``observation_shape``/``observation_dtype``: [0, 1] for the unit-interval
            encoders ("xy", "xyt", "one_hot"), the dtype's full range otherwise."""
            env = self.env
            dtype = jnp.dtype(env.observation_dtype)
            if jnp.issubdtype(dtype, jnp.integer):
                info = jnp.iinfo(dtype)
                low, high = info.min, info.max
            elif env.encoder.name in ("xy", "xyt", "one_hot"):
                low, high = 0.0, 1.0
            else:
                low, high = -jnp.inf, jnp.inf
            return spaces.Box(low, high, tuple(env.observation_shape), dtype)

    return ViewParams, ViewState, GymnaxView


def to_gymnax(env: Environment) -> Any:
    """Expose an fhc_jax environment as a gymnax environment (module docstring).

    ``gx = to_gymnax(env)``: ``gx.reset(key, gx.default_params) -> (obs, state)`` and
    ``gx.step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)``
    with auto-reset after H steps; ``info["cost"]`` holds the stage's costs (M,), and the last
    stage's reward and costs include the terminal reward and costs of the final state.

    Raises:
        ValueError: ``env`` is not an fhc_jax Environment.
    """
    if not isinstance(env, Environment):
        raise ValueError(f"to_gymnax: env must be an fhc_jax.envs.Environment, found {type(env).__name__}")
    return _view_classes()[2](env)


# ----------------------------------------------------------------------------- registered tasks


def _task(name: str, cost: str, costs: dict[str, CostFn], horizon: int, alpha: float) -> GymnaxEnv:
    if cost not in costs:
        raise ValueError(f"gymnax:{name}: cost must be one of {', '.join(map(repr, costs))}, found {cost!r}")
    import gymnax

    env, env_params = gymnax.make(name)
    return from_gymnax(env, env_params, horizon=horizon, cost_fn=costs[cost], alpha=alpha)


def _cartpole_position(state, action, next_state, params) -> Array:
    return (jnp.abs(next_state.x) > 1.0).astype(jnp.float32)[None]


def _cartpole_angle(state, action, next_state, params) -> Array:
    return (jnp.abs(next_state.theta) > 6 * jnp.pi / 180).astype(jnp.float32)[None]


def _push_energy(state, action, next_state, params) -> Array:
    return (action != 1).astype(jnp.float32)[None]


def cartpole(horizon: int = 200, alpha: float = 10.0, cost: str = "position") -> GymnaxEnv:
    """gymnax CartPole-v1 with a position (|x| > 1.0) or angle (|theta| > 6 deg) cost per stage."""
    return _task("CartPole-v1", cost, {"position": _cartpole_position, "angle": _cartpole_angle}, horizon, alpha)


def acrobot(horizon: int = 200, alpha: float = 100.0, cost: str = "energy") -> GymnaxEnv:
    """gymnax Acrobot-v1 with cost 1 per stage of non-zero torque (an energy budget)."""
    return _task("Acrobot-v1", cost, {"energy": _push_energy}, horizon, alpha)


def mountain_car(horizon: int = 200, alpha: float = 60.0, cost: str = "energy") -> GymnaxEnv:
    """gymnax MountainCar-v0 with cost 1 per stage of pushing (an energy budget)."""
    return _task("MountainCar-v0", cost, {"energy": _push_energy}, horizon, alpha)
