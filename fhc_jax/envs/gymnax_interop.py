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
  (the convention of JAX safe-RL suites). A cost of shape () is one constraint (M = 1), the
  convention of Safety-Gym, OmniSafe, safenax and most safe-RL code: the wrapper pays it as
  the (1,) vector ``[c]``, so ``safenax.FrozenLakeV2()`` goes in unwrapped. No terminal
  reward or costs.
* Actions: a gymnax ``Discrete(n)`` space becomes ``fhc_jax.envs.spaces.Discrete(n)`` (int32
  indices); a bounded gymnax ``Box`` becomes ``fhc_jax.envs.spaces.Box`` with the gymnax bounds
  (read once, from the ``env_params`` given to :func:`from_gymnax`), flattened to shape (d,),
  d = the number of entries of the gymnax shape (a scalar shape () gives (1,)). The wrapper
  clips a box action into the bounds and reshapes it to the gymnax shape and dtype before
  ``step_env`` (and ``cost_fn`` gets that clipped gymnax action). A box with an infinite
  bound, and any other space (``Tuple``, ``Dict``), is refused. Whether a learner takes box
  actions is the learner's business (FH-Constrained refuses them; the Gaussian-policy learners
  take them).
* The observation is the gymnax observation, stored in the state; its shape and dtype are
  those of gymnax's ``observation_space(env_params)`` (a ``Box`` or ``Discrete``), except that
  a scalar observation (shape (), e.g. the cell index of a ``Discrete`` space) is given the
  shape (1,): the learners' networks take flat observations.

**fhc_jax -> gymnax.** :func:`to_gymnax` exposes any fhc_jax environment as a subclass of
gymnax's ``environment.Environment``: ``reset_env``/``step_env`` (so gymnax's ``reset``/``step``
auto-reset), ``observation_space``/``action_space``, ``default_params`` (:class:`ViewParams`:
the fhc_jax params plus ``max_steps_in_episode = horizon``). gymnax 1.0's ``step`` returns
``(obs, state, reward, terminated, truncated, info)``. Per-stage costs (M,) are in
``info["cost"]`` (a scalar () with ``to_gymnax(env, scalar_cost=True)`` when M = 1, the
convention of Safety-Gym-style code). **At the last stage** (h + 1 == H) the terminal reward
r_H and terminal costs g_H of the final state are ADDED to that step's reward and
``info["cost"]``, so the sum of an episode's rewards (costs) is the paper's total, eq. (1)
((2)). The horizon's end is reported as ``terminated`` (nothing follows it: do not bootstrap),
and gymnax also flags it ``truncated`` because ``max_steps_in_episode = horizon``.

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
gymnax:Pendulum-v1  box actions: a torque u in [-2, 2] (float32 (1,), clipped). Reward gymnax's
                    -(theta^2 + 0.1 theta_dot^2 + 0.001 u^2) (never terminates).
                    ``cost="torque"``: the energy of the applied torque u^2 per stage (u clipped
                    to [-2, 2], at most 4), a torque-energy budget over the episode; H = 200,
                    alpha = 40 (see :func:`fhc_jax.envs.gymnax_tasks.pendulum` for what controllers spend).
==================  ==========================================================================

Every task is feasible (the idle action costs nothing; CartPole starts within 0.05 of the centre).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.envs.base import Environment, check_int, check_static
from fhc_jax.envs.encoders import Encoder
from fhc_jax.envs.interop import cost_count
from fhc_jax.envs.interop import thresholds as _thresholds
from fhc_jax.envs.spaces import ActionSpace, Box, Discrete

Array = jax.Array

#: cost_fn(state, action, next_state, env_params) -> (M,) or () float costs, on gymnax states and params
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


def _space_kind(space: Any) -> str:
    # gymnax.environments.spaces classes, read by name so that this module imports without gymnax
    return type(space).__name__


def _shape(raw: Any) -> tuple[int, ...]:
    return (int(raw),) if isinstance(raw, (int, np.integer)) else tuple(int(d) for d in raw)


def _action_space(owner: str, name: str, space: Any) -> tuple[ActionSpace, tuple[int, ...], Any]:
    """(fhc_jax action space, the gymnax action shape, the gymnax action dtype) of a gymnax
    ``Discrete`` or bounded ``Box`` action space (host-side; the bounds must be concrete)."""
    kind = _space_kind(space)
    if kind == "Discrete":
        return Discrete(check_int(owner, "action_space.n", int(space.n), 1)), (), jnp.int32
    if kind != "Box":
        raise ValueError(
            f"{owner}: the action space must be a gymnax Discrete or a bounded Box; {name} has a {kind} action space"
        )
    shape = _shape(space.shape)
    d = int(np.prod(shape, dtype=np.int64))
    if d < 1:
        raise ValueError(f"{owner}: the Box action space of {name} must have at least one entry, found shape {shape}")
    bounds = {}
    for field in ("low", "high"):
        try:
            value = np.broadcast_to(np.asarray(getattr(space, field), np.float64), shape).reshape(d)
        except Exception as err:  # noqa: BLE001 - any unreadable bound is reported the same way
            raise ValueError(
                f"{owner}: action_space.{field} of {name} must be concrete numbers broadcastable to "
                f"the shape {shape}, found {getattr(space, field)!r} ({err})"
            ) from None
        if not np.all(np.isfinite(value)):
            raise ValueError(
                f"{owner}: action_space.{field} of {name} must be finite (a bounded Box: box actions "
                f"are clipped into the bounds), found {value.tolist()}"
            )
        bounds[field] = value
    if np.any(bounds["low"] >= bounds["high"]):
        raise ValueError(
            f"{owner}: the Box action space of {name} must have action_space.low < action_space.high, "
            f"found low={bounds['low'].tolist()}, high={bounds['high'].tolist()}"
        )
    dtype = jnp.dtype(getattr(space, "dtype", jnp.float32))
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"{owner}: the Box action space of {name} must have a float dtype, found {dtype}")
    return Box(tuple(bounds["low"].tolist()), tuple(bounds["high"].tolist())), shape, dtype


class GymnaxEnv(Environment[GymnaxState, GymnaxParams]):
    """A gymnax environment as a finite-horizon constrained environment (module docstring).

    Build it with :func:`from_gymnax`, which validates the arguments.
    """

    supported_observations = ("native",)

    def __init__(
        self,
        env: Any,
        env_params: Any,
        horizon: int,
        cost_fn: CostFn | None,
        cost_key: str,
        num_constraints: int,
        alpha: np.ndarray,
        action_space: ActionSpace,
        obs_shape: tuple[int, ...],
        obs_dtype: Any,
        gymnax_action_shape: tuple[int, ...] = (),
        gymnax_action_dtype: Any = jnp.int32,
    ):
        self._env, self._env_params = env, env_params
        self._horizon, self._cost_fn, self._cost_key = horizon, cost_fn, cost_key
        self._num_constraints, self._alpha = num_constraints, alpha
        self._action_space, self._obs_dtype = action_space, jnp.dtype(obs_dtype)
        self._gx_action_shape, self._gx_action_dtype = tuple(gymnax_action_shape), jnp.dtype(gymnax_action_dtype)
        self._encoder = NativeObservation(obs_shape=tuple(obs_shape))

    @property
    def gymnax_env(self) -> Any:
        """The wrapped gymnax environment."""
        return self._env

    @property
    def horizon(self) -> int:
        return self._horizon

    @property
    def action_space(self) -> ActionSpace:
        """``Discrete(n)`` or ``Box(low, high)`` (shape (d,)) from the gymnax action space."""
        return self._action_space

    @property
    def num_actions(self) -> int:
        """A (discrete actions); raises for box actions."""
        if isinstance(self._action_space, Box):
            raise self.box_actions_error()
        return self._action_space.n

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
        return (
            self._env,
            id(self._env_params),
            self._horizon,
            self._cost_fn,
            self._cost_key,
            self._num_constraints,
            tuple(self._alpha.tolist()),
            self._action_space,
            self._gx_action_shape,
            self._gx_action_dtype,
        )

    def __repr__(self) -> str:
        return (
            f"from_gymnax({getattr(self._env, 'name', type(self._env).__name__)}, horizon={self._horizon}, "
            f"num_constraints={self._num_constraints})"
        )

    def thresholds(self, params: GymnaxParams) -> Array:
        """alpha^(k), ``params.thresholds``, (M,)."""
        return params.thresholds

    def observation(self, state: GymnaxState, params: GymnaxParams) -> Array:
        """The stored gymnax observation, ``observation_shape``."""
        return state.obs

    def _check_param_values(self, params: GymnaxParams, owner: str) -> None:
        """Thresholds finite and >= 0 (gymnax's own params are gymnax's business)."""
        alpha = np.asarray(params.thresholds, np.float64)
        if not np.all(np.isfinite(alpha)) or np.any(alpha < 0):
            raise ValueError(f"{owner}: params.thresholds (alpha) must be finite and >= 0, found {alpha.tolist()}")

    def reset(self, key: Array, params: GymnaxParams) -> tuple[Array, GymnaxState]:
        """gymnax ``reset_env(key, env_params)``; stage 0, not terminated (``params`` checked:
        :meth:`check_params`)."""
        self.check_params(params, "from_gymnax.reset")
        obs, env_state = self._env.reset_env(key, params.env_params)
        env_state = jax.tree.map(jnp.asarray, env_state)
        obs = jnp.asarray(obs, self._obs_dtype).reshape(self.observation_shape)
        state = GymnaxState(env_state=env_state, obs=obs, terminated=jnp.zeros((), bool), time=jnp.zeros((), jnp.int32))
        return obs, state

    def _costs(self, state: Any, action: Array, next_state: Any, env_params: Any, info: dict) -> Array:
        """The stage's costs (M,) float32: ``cost_fn``'s or ``info[cost_key]``, a scalar cost
        (shape ()) as the (1,) vector."""
        if self._cost_fn is not None:
            costs = self._cost_fn(state, action, next_state, env_params)
        else:
            costs = info[self._cost_key]
        return jnp.asarray(costs, jnp.float32).reshape(self._num_constraints)

    def gymnax_action(self, action: Array) -> Array:
        """The action as the gymnax environment takes it: an int32 index, or a box action
        (float32 (d,)) clipped into the bounds and reshaped to the gymnax shape and dtype."""
        if isinstance(self._action_space, Box):
            return self._action_space.clip(action).reshape(self._gx_action_shape).astype(self._gx_action_dtype)
        return jnp.asarray(action, jnp.int32)

    def transition(self, noise: Array, state: GymnaxState, action: Array, params: GymnaxParams):
        """gymnax ``step_env(noise, ...)`` (``noise`` is the step key), absorbing once terminated.

        ``action``: int32 index (``Discrete``) or float32 (d,) (``Box``; clipped into the bounds,
        :meth:`gymnax_action`).

        Returns:
            (obs, next state, reward () float32, costs (M,) float32, done () = (h + 1 == H),
            info: gymnax's info plus ``"terminated"`` (the episode has ended in gymnax)).
        """
        action = self.gymnax_action(action)
        obs, env_state, reward, terminated, info = self._env.step_env(noise, state.env_state, action, params.env_params)
        costs = self._costs(state.env_state, action, env_state, params.env_params, info)
        live = jnp.logical_not(state.terminated)
        keep = lambda new, old: jnp.where(live, jnp.asarray(new, old.dtype), old)
        env_state = jax.tree.map(keep, env_state, state.env_state)
        obs = keep(jnp.reshape(obs, self.observation_shape), state.obs)
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
            ``Discrete`` or bounded ``Box`` action space (module docstring).
        env_params: its params; default ``env.default_params``.
        horizon: H >= 1, the number of stages of every episode.
        cost_fn: ``cost_fn(state, action, next_state, env_params) -> (M,)`` or ``()`` float
            costs of a stage (gymnax states); default: read ``info[cost_key]`` of ``step_env``.
            A cost of shape () is one constraint, paid as ``[c]``.
        cost_key: the info key of the costs when ``cost_fn`` is None (a scalar or (M,)).
        num_constraints: M; default inferred from the cost's shape (() gives 1).
        alpha: thresholds alpha^(k) >= 0, scalar or (M,) (``params.thresholds``); default 0.
    Returns:
        :class:`GymnaxEnv`; ``default_params`` holds ``env_params`` and the thresholds.
    Raises:
        ValueError (before any JIT): horizon < 1, an action space that is neither Discrete nor
            a bounded Box (an infinite ``action_space.low``/``high`` is named), an observation space that is neither
            Box nor Discrete, a missing cost (no ``cost_fn``
            and no ``cost_key`` in ``info``), a cost that is not a float array of shape () or
            (M,), or a bad ``num_constraints`` / ``alpha``.
    """
    own = "from_gymnax"
    horizon = check_int(own, "horizon", horizon, 1)
    if num_constraints is not None:
        num_constraints = check_int(own, "num_constraints", num_constraints, 1)
    if cost_fn is not None and not callable(cost_fn):
        raise ValueError(
            f"{own}: cost_fn must be callable (state, action, next_state, params) -> (M,), found {cost_fn!r}"
        )
    if not isinstance(cost_key, str):
        raise ValueError(f"{own}: cost_key must be a string, found {cost_key!r}")
    if not (callable(getattr(env, "step_env", None)) and callable(getattr(env, "reset_env", None))):
        raise ValueError(
            f"{own}: env must be a gymnax Environment (with reset_env and step_env), found {type(env).__name__}"
        )
    env_params = env.default_params if env_params is None else env_params
    space, gx_action_shape, gx_action_dtype = _action_space(
        own, getattr(env, "name", type(env).__name__), env.action_space(env_params)
    )
    obs_space = env.observation_space(env_params)
    if _space_kind(obs_space) not in ("Box", "Discrete"):
        raise ValueError(f"{own}: the observation space must be a Box or Discrete, found {_space_kind(obs_space)}")
    obs_dtype = jnp.dtype(obs_space.dtype)
    obs_shape = _shape(obs_space.shape)

    # one abstract reset and step (jax.eval_shape traces, compiles nothing) to check the cost
    key = jax.random.key(0)
    _, abstract_state = jax.eval_shape(env.reset_env, key, env_params)
    action = jnp.zeros(gx_action_shape, gx_action_dtype)
    abstract_obs, _, _, _, abstract_info = jax.eval_shape(env.step_env, key, abstract_state, action, env_params)
    if tuple(abstract_obs.shape) != obs_shape:
        raise ValueError(
            f"{own}: step_env's observation has shape {tuple(abstract_obs.shape)}, but the observation "
            f"space says {obs_shape}"
        )
    if cost_fn is None:
        if not isinstance(abstract_info, dict) or cost_key not in abstract_info:
            keys = sorted(abstract_info) if isinstance(abstract_info, dict) else []
            raise ValueError(
                f"{own}: no cost: give cost_fn(state, action, next_state, params) -> (M,) or (), or a "
                f"gymnax environment whose step_env info has {cost_key!r} (its info keys: {keys})"
            )
        cost = abstract_info[cost_key]
        source = f"info[{cost_key!r}]"
    else:
        cost = jax.eval_shape(
            lambda s, a, p: cost_fn(s, a, env.step_env(key, s, a, p)[1], p), abstract_state, action, env_params
        )
        source = "cost_fn"
    m = cost_count(own, source, cost, num_constraints)
    return GymnaxEnv(
        env,
        env_params,
        horizon,
        cost_fn,
        cost_key,
        m,
        _thresholds(own, alpha, m),
        space,
        obs_shape or (1,),
        obs_dtype,
        gx_action_shape,
        gx_action_dtype,
    )


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

        def __init__(self, env: Environment, scalar_cost: bool = False):
            super().__init__()
            self.env = env
            self.scalar_cost = scalar_cost

        def __hash__(self) -> int:
            return hash(("to_gymnax", self.env, self.scalar_cost))

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self) and other.env == self.env and other.scalar_cost == self.scalar_cost

        @property
        def default_params(self) -> ViewParams:
            return ViewParams(max_steps_in_episode=self.env.horizon, env_params=self.env.default_params)

        def reset_env(self, key: Array, params: ViewParams) -> tuple[Array, ViewState]:
            self.env.check_params(params.env_params, f"to_gymnax({self.env.name}).reset")
            obs, inner = self.env.reset(key, params.env_params)
            return obs, ViewState(time=jnp.asarray(inner.time, jnp.int32), inner=inner)

        def step_env(self, key: Array, state: ViewState, action: Array, params: ViewParams):
            """One stage; at the last one the final state's terminal reward and costs are added.
            Returns (obs, state, reward (), terminated () = (h + 1 == H), info with "cost" (M,),
            or () with ``scalar_cost``)."""
            env, p = self.env, params.env_params
            obs, inner, reward, costs, done, info = env.step(key, state.inner, self._action(action), p)
            reward = reward + jnp.where(done, env.terminal_reward(inner, p), 0.0).astype(reward.dtype)
            costs = costs + jnp.where(done, env.terminal_costs(inner, p), 0.0).astype(costs.dtype)
            new = ViewState(time=jnp.asarray(inner.time, jnp.int32), inner=inner)
            costs = costs[0] if self.scalar_cost else costs
            return obs, new, reward, jnp.asarray(done, bool), {**info, "cost": costs}

        def is_terminated(self, state: ViewState, params: ViewParams) -> Array:
            return state.time >= self.env.horizon

        @property
        def name(self) -> str:
            return f"fhc_jax:{type(self.env).__name__}"

        def _action(self, action: Array) -> Array:
            """Box actions as float32 (d,) (the environment clips them); discrete ones as they
            come: ``env.step`` refuses a non-integer or out-of-range action."""
            space = self.env.action_space
            if isinstance(space, Box):
                return jnp.asarray(action, jnp.float32).reshape(space.shape)
            return action

        @property
        def num_actions(self) -> int:
            """A for discrete actions; d, the action dimension, for box actions (as gymnax's
            continuous environments report it)."""
            space = self.env.action_space
            return space.dim if isinstance(space, Box) else space.n

        def action_space(self, params: ViewParams | None = None):
            """gymnax ``Discrete(A)``, or ``Box(low, high, (d,), float32)`` for box actions."""
            space = self.env.action_space
            if isinstance(space, Box):
                return spaces.Box(
                    jnp.asarray(space.low, jnp.float32), jnp.asarray(space.high, jnp.float32), space.shape, jnp.float32
                )
            return spaces.Discrete(space.n)

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


def to_gymnax(env: Environment, *, scalar_cost: bool = False) -> Any:
    """Expose an fhc_jax environment as a gymnax environment (module docstring).

    ``gx = to_gymnax(env)``: ``gx.reset(key, gx.default_params) -> (obs, state)`` and
    ``gx.step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)``
    with auto-reset after H steps; ``info["cost"]`` holds the stage's costs (M,), and the last
    stage's reward and costs include the terminal reward and costs of the final state. With
    ``scalar_cost=True`` (one constraint only) ``info["cost"]`` is a scalar, shape (), as
    code written for Safety-Gym, OmniSafe or safenax reads it. A box
    environment's ``gx.action_space(params)`` is ``gymnax.environments.spaces.Box(low, high,
    (d,), float32)``; its actions (any shape with d entries) are clipped by the environment.

    Its ``step`` is the environment's public ``step``: a discrete action that is not an integer,
    or lies outside [0, A), is refused (``fhc_jax.envs.validation``; inside gymnax's jitted
    ``step`` through a host callback that runs only then, as ``jax.errors.JaxRuntimeError``),
    and params that do not fit the environment are refused (``Environment.check_params``).

    Args:
        env: an fhc_jax environment.
        scalar_cost: report the cost of an environment with M = 1 as a scalar () rather than
            the (1,) vector.
    Raises:
        ValueError: ``env`` is not an fhc_jax Environment, or declares a horizon, number of
            constraints or number of actions that is not a positive int; ``scalar_cost`` with
            M != 1 (or not a bool).
    """
    check_static(env, "to_gymnax")
    if not isinstance(scalar_cost, bool):
        raise ValueError(f"to_gymnax: scalar_cost must be True or False, found {scalar_cost!r}")
    if scalar_cost and env.num_constraints != 1:
        raise ValueError(
            f"to_gymnax: scalar_cost=True needs one constraint (M = 1); {env.name} has "
            f"M = {env.num_constraints}: use the default (M,) costs"
        )
    return _view_classes()[2](env, scalar_cost)
