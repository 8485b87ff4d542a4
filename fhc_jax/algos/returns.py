"""Finite-horizon lambda-returns and advantages: one backward recursion.

G_h = c_h + gamma (1 - lam) V_{h+1}(s_{h+1}) + gamma lam G_{h+1},   G_H = c_H (the terminal
reward or cost of the final state: no bootstrapping past the horizon).

lam = 0 gives the TD(0) targets of the paper's critics, lam = 1 Monte-Carlo returns. The
generalised advantage estimate (Schulman et al. 2016) is A_h = G_h - V_h: expanding the
recursion gives A_h = delta_h + gamma lam A_{h+1} with delta_h = c_h + gamma V_{h+1} - V_h,
the usual GAE form, with A_H = 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def lambda_returns(stage: Array, terminal: Array, next_values: Array, lam: Array, gamma: Array = 1.0) -> Array:
    """lambda-returns G_h for h = 0..H-1 (module docstring).

    Args:
        stage: c_h, time-major (H, K, ...). terminal: c_H, (K, ...).
        next_values: V_{h+1}(s_{h+1}) for h = 0..H-1, (H, K, ...).
        lam: trace in [0, 1]. gamma: discount in [0, 1] (1: the finite-horizon criterion).
    Returns:
        targets G_0..G_{H-1}, (H, K, ...).
    """
    keep, carry = gamma * (1.0 - lam), gamma * lam

    def back(g_next, xs):
        c_h, v_next = xs
        g = c_h + keep * v_next + carry * g_next
        return g, g

    _, g = jax.lax.scan(back, terminal, (stage, next_values), reverse=True)
    return g


def finite_horizon_gae(rewards: Array, values: Array, gamma: Array = 1.0, lam: Array = 1.0) -> tuple[Array, Array]:
    """Generalised advantage estimates over a fixed horizon: A_h = G_h - V_h with the
    lambda-returns G_h of :func:`lambda_returns`; ``values[H]`` is the value of the final state
    (e.g. the exact terminal reward r_H(s_H)), so nothing is bootstrapped past H.

    Args:
        rewards: r_h, time-major (H, K, ...).
        values: V_0..V_H at the visited states, (H+1, K, ...).
        gamma, lam: discount and GAE parameter in [0, 1] (scalars; vmappable).
    Returns:
        (advantages (H, K, ...), returns G (H, K, ...), the critic's targets).
    """
    gamma = jnp.asarray(gamma, rewards.dtype)
    lam = jnp.asarray(lam, rewards.dtype)
    returns = lambda_returns(rewards, values[-1], values[1:], lam, gamma)
    return returns - values[:-1], returns
