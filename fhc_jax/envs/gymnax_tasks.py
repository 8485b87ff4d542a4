"""The registered gymnax tasks with a cost (``--env gymnax:CartPole-v1``, ``Acrobot-v1``,
``MountainCar-v0``, ``Pendulum-v1``): gymnax's environments through
:func:`~fhc_jax.envs.gymnax_interop.from_gymnax`, with a cost function each and a finite horizon.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fhc_jax.envs.gymnax_interop import CostFn, GymnaxEnv, from_gymnax

Array = jax.Array


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


def _pendulum_torque(state, action, next_state, params) -> Array:
    u = jnp.clip(jnp.asarray(action, jnp.float32), -params.max_torque, params.max_torque)
    return jnp.square(u).reshape(-1)[:1]


def pendulum(horizon: int = 200, alpha: float = 40.0, cost: str = "torque") -> GymnaxEnv:
    """gymnax Pendulum-v1 (box actions: a torque u in [-2, 2]) with cost u^2 per stage, the
    energy of the applied torque (u clipped to the bounds; at most 4 per stage), and a
    torque-energy budget ``alpha`` over the episode.

    Why alpha = 40 (H = 200; measured over 4096 episodes, +- 95% CI; the controller is
    ``energy_swing_up`` in ``tests/test_box_environments.py``: u = k_e (E* - E) theta_dot away
    from the top, E = theta_dot^2 / 2 + 15 cos theta and E* = 15 the upright energy, a PD law
    u = -10 theta - 2 theta_dot within 0.6 rad of the top, clipped to [-u_max, u_max]):

    ==============================================  ===============  ============
    policy                                          reward           cost sum u^2
    ==============================================  ===============  ============
    uniform random in [-2, 2]                       -1227.2 +- 8.8   266.9 +- 0.5
    zero torque (feasible, cost 0)                  -1212.6 +- 11.0  0.0
    swing-up, k_e = 0.5, u_max = 2 (unconstrained)  -148.9 +- 2.8    84.3 +- 1.6
    swing-up, k_e = 1.0, u_max = 2                  -148.9 +- 2.8    93.1 +- 1.7
    swing-up, k_e = 0.05, u_max = 2                 -179.5 +- 3.6    60.0 +- 1.2
    swing-up, k_e = 0.5, u_max = 1.0                -245.7 +- 5.1    41.0 +- 0.8
    swing-up, k_e = 0.5, u_max = 0.5                -463.9 +- 10.3   24.2 +- 0.4
    ==============================================  ===============  ============

    A good unconstrained swing-up-and-balance controller spends 84-93, so alpha = 40 (about
    0.45 of it, 0.15 of the random policy's 267) binds: meeting it costs a slower swing-up
    (about -246 with the torque capped at 1 instead of -149). The reward's own torque penalty
    (0.001 u^2) is far too small to make the unconstrained optimum frugal.
    """
    return _task("Pendulum-v1", cost, {"torque": _pendulum_torque}, horizon, alpha)
