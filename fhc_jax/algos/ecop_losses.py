"""e-COP's per-stage objective (Agnihotri et al., NeurIPS 2024): the clipped reward and cost
surrogates of each stage, the tail sums that make stage t's cost the rest of the episode's, the
damped penalty of the cost excess and its weight, the per-stage losses and the damping's growth.
Pure functions of arrays; :mod:`fhc_jax.algos.ecop` reads its update top to bottom from them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def stage_surrogates(logp: Array, logp_old: Array, adv_r: Array, adv_c: Array, clip_eps: Array) -> tuple[Array, Array]:
    """Per-stage clipped surrogates, sample means over the K episodes of each stage:
    S_h = mean_k min(rho A_r, clip(rho, 1-eps, 1+eps) A_r), (H,), and the pessimistic cost
    surrogate S^C_h = mean_k max(rho A_C, clip(rho, 1-eps, 1+eps) A_C), (H, M), with
    rho = exp(logp - logp_old). logp, logp_old, adv_r (H, K); adv_c (H, K, M)."""
    ratio = jnp.exp(logp - logp_old)
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    s_r = jnp.mean(jnp.minimum(ratio * adv_r, clipped * adv_r), axis=1)
    s_c = jnp.mean(jnp.maximum(ratio[..., None] * adv_c, clipped[..., None] * adv_c), axis=1)
    return s_r, s_c


def tail_sums(x: Array) -> Array:
    """sum_{h >= t} x_h for every t, along the leading axis."""
    return jnp.flip(jnp.cumsum(jnp.flip(x, 0), axis=0), 0)


def damped_penalty(psi: Array, lam: Array, beta: Array) -> Array:
    """The constraint terms of the paper's eq. (8) per stage and constraint:
    lambda max(0, Psi) + beta/2 (max(0, Psi + lambda/beta)^2 - lambda^2/beta^2)."""
    relu = lam * jnp.maximum(0.0, psi)
    damping = 0.5 * beta * (jnp.maximum(0.0, psi + lam / beta) ** 2 - (lam / beta) ** 2)
    return relu + damping


def penalty_weight(psi: Array, lam: Array, beta: Array) -> Array:
    """d/dPsi of :func:`damped_penalty`: lambda 1[Psi > 0] + max(0, lambda + beta Psi)."""
    return lam * (psi > 0) + jnp.maximum(0.0, lam + beta * psi)


def stage_losses(s_r: Array, s_c: Array, excess: Array, lam: Array, beta: Array) -> Array:
    """The paper's eq. (8), L~_t for every stage t, (H,): s_r (H,), s_c (H, M), excess
    J_C(pi_old) - d (M,), lam (H, M), beta ()."""
    psi = tail_sums(s_c) + excess
    return -tail_sums(s_r) + jnp.sum(damped_penalty(psi, lam, beta), axis=-1)


def jacobi_objective(s_r: Array, s_c: Array, excess: Array, lam: Array, beta: Array) -> Array:
    """An objective whose gradient with respect to stage t's surrogates (s_r[t], s_c[t]) is
    that of L~_t (the tail h > t held at the current iterate): stage t's parameters get
    grad L~_t, as in Algorithm 2 line 6, all stages in one backward pass."""
    tail = jax.lax.stop_gradient(tail_sums(s_c) - s_c)
    psi = s_c + tail + excess
    return jnp.sum(-s_r) + jnp.sum(damped_penalty(psi, lam, beta))


def update_damping(beta: Array, lam: Array, excess: Array, growth: Array, beta_max: Array) -> Array:
    """Algorithm 2 lines 8-10: beta <- min(beta_max, p beta) when
    C = sum_t sum_i max(J_Ci - d_i, -lambda_{t,i}/beta) >= c = sqrt(M)/beta max_t ||lambda_t||_inf."""
    secondary = jnp.sum(jnp.maximum(excess[None, :], -lam / beta))
    threshold = jnp.sqrt(float(lam.shape[-1])) / beta * jnp.max(lam)
    return jnp.where(secondary >= threshold, jnp.minimum(beta_max, growth * beta), beta)
