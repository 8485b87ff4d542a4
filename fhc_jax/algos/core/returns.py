"""Finite-horizon lambda-returns and advantages: one backward recursion.

G_h = c_h + gamma (1 - lam) V_{h+1}(s_{h+1}) + gamma lam G_{h+1},   G_H = c_H (the terminal
reward or cost of the final state: no bootstrapping past the horizon).

lam = 0 gives the TD(0) targets of the paper's critics, lam = 1 Monte-Carlo returns. The
generalised advantage estimate (Schulman et al. 2016) is A_h = G_h - V_h: expanding the
recursion gives A_h = delta_h + gamma lam A_{h+1} with delta_h = c_h + gamma V_{h+1} - V_h,
the usual GAE form, with A_H = 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from fhc_jax.algos.core.tabular_rollout import Batch

Array = jax.Array


def trace_weights(lam: Array, gamma: Array = 1.0) -> tuple[Array, Array]:
    """The weights of V_{h+1} and G_{h+1} in one step of the recursion: (gamma (1 - lam), gamma lam)."""
    return gamma * (1.0 - lam), gamma * lam


def lambda_return_step(c_h: Array, v_next: Array, g_next: Array, keep: Array, carry: Array) -> Array:
    """One step of the recursion, G_h = c_h + keep V_{h+1} + carry G_{h+1} (``keep``, ``carry``:
    :func:`trace_weights`); any shapes that broadcast."""
    return c_h + keep * v_next + carry * g_next


def lambda_returns(stage: Array, terminal: Array, next_values: Array, lam: Array, gamma: Array = 1.0) -> Array:
    """lambda-returns G_h for h = 0..H-1 (module docstring).

    Args:
        stage: c_h, time-major (H, K, ...). terminal: c_H, (K, ...).
        next_values: V_{h+1}(s_{h+1}) for h = 0..H-1, (H, K, ...).
        lam: trace in [0, 1]. gamma: discount in [0, 1] (1: the finite-horizon criterion).
    Returns:
        targets G_0..G_{H-1}, (H, K, ...).
    """
    keep, carry = trace_weights(lam, gamma)

    def back(g_next, xs):
        c_h, v_next = xs
        g = lambda_return_step(c_h, v_next, g_next, keep, carry)
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


def advantages_and_targets(batch: Batch, values: Array, gamma: Array, lam: Array) -> tuple[Array, Array]:
    """GAE for reward and costs over the fixed horizon, the exact terminal signals as V_H:
    ``values`` (H, K, 1+M) are V at s_0..s_{H-1}, channels [V_r, V_c^(1..M)]; returns
    (advantages, critic targets R_h = A_h + V_h), both (H, K, 1+M)."""
    signals = jnp.concatenate([batch.rewards[..., None], batch.costs], axis=-1)  # (H, K, 1+M)
    terminal = jnp.concatenate([batch.terminal_rewards[:, None], batch.terminal_costs], axis=-1)  # (K, 1+M)
    return finite_horizon_gae(signals, jnp.concatenate([values, terminal[None]], axis=0), gamma, lam)


def visit_averaged_advantages(
    count_sa: Array,
    total_sa: Array,
    count_s: Array | None = None,
    total_s: Array | None = None,
    baseline_samples: int = 1,
) -> Array:
    """Per-cell advantage estimates from a batch scattered into (stage, state, action) cells:
    A_hat_h(s, a) = (mean of the samples' advantage signals that took a in s at stage h) -
    (mean over all samples in (h, s), :func:`state_baseline`); 0 for actions not taken and
    unvisited states.

    Args:
        count_sa: visits n_h(s, a), (H, S, A). total_sa: sum of the signals per cell, (H, S, A).
        count_s, total_s: their sums over the actions, (H, S), when the caller has them
            (else summed here).
        baseline_samples: the samples a state needs for its empirical baseline
            (:func:`state_baseline`; 1: always subtracted).
    Returns:
        A_hat, (H, S, A).
    """
    count_s = count_sa.sum(-1, keepdims=True) if count_s is None else count_s[..., None]
    total_s = total_sa.sum(-1, keepdims=True) if total_s is None else total_s[..., None]
    baseline = state_baseline(count_s, total_s, baseline_samples)
    return jnp.where(count_sa > 0, total_sa / jnp.maximum(count_sa, 1.0) - baseline, 0.0)


def state_baseline(count_s: Array, total_s: Array, min_samples: int = 1) -> Array:
    """The empirical baseline of a visited (stage, state): the mean of its samples' advantage
    signals where it has at least ``min_samples`` of them, else 0. FH-Constrained asks for two:
    a state sampled once then moves its sampled action by the critic-baselined delta
    = G - v(s) itself, where subtracting its own mean would leave nothing (one episode per
    update, K = 1, would never learn). count_s, total_s: (...)."""
    return jnp.where(count_s >= min_samples, total_s / jnp.maximum(count_s, 1.0), 0.0)


def lagrangian_targets(
    batch: Batch, values: Array, multipliers: Array, thresholds: Array, paper: bool, trace: Array
) -> Array:
    """Critic targets of the constrained actor-critics (FH- and NN-Constrained) in C = 1 + M
    channels: the Lagrangian channel c_h = r_h - nu . g_h, c_H = r_H - nu . g~_H, and the
    constraint channels g_h^(k), g~_H^(k), where g~_H = g_H - alpha in the paper's form (its
    critics carry the -alpha offset of (algo5)) and g_H otherwise.

    Args:
        batch: time-major episodes. values: critic values at s_0..s_H, (H+1, K, C).
        multipliers: nu, (M,). thresholds: alpha, (M,).
        paper: TD(0) bootstrap targets c_h + V_{h+1}(s_{h+1}) (paper), else lambda-returns.
        trace: the lambda-return trace (ignored by the paper's form).
    Returns:
        targets for stages 0..H (stage H: the terminal signal itself), (H+1, K, C).
    """
    stage = jnp.concatenate([(batch.rewards - batch.costs @ multipliers)[..., None], batch.costs], axis=-1)
    terminal = lagrangian_terminal(batch, multipliers, thresholds, paper)
    if paper:
        targets = stage + values[1:]
    else:
        targets = lambda_returns(stage, terminal, values[1:], jnp.asarray(trace, values.dtype))
    return jnp.concatenate([targets, terminal[None]], axis=0)


def lagrangian_terminal(batch: Batch, multipliers: Array, thresholds: Array, paper: bool) -> Array:
    """The terminal signals of :func:`lagrangian_targets`' C = 1 + M channels, (K, C):
    r_H - nu . g~_H, then g~_H^(k) (g~_H = g_H - alpha in the paper's form, else g_H)."""
    term_cost = batch.terminal_costs - thresholds if paper else batch.terminal_costs
    return jnp.concatenate([(batch.terminal_rewards - term_cost @ multipliers)[:, None], term_cost], axis=-1)
