"""PPO-Lagrangian's per-sample pieces, each tested by hand (tests/test_ppo_lagrangian.py): the
clipped surrogate and the three ways the reward and cost advantages are combined and normalised
(``Config.normalize_advantages``). Shared by Saute-Lagrangian, which runs PPO-Lagrangian's update.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def clipped_surrogate(logp: Array, logp_old: Array, advantages: Array, clip_eps: Array) -> Array:
    """PPO's per-sample clipped objective (to maximise), (B,):
    min(rho A, clip(rho, 1 - eps, 1 + eps) A) with rho = exp(logp - logp_old)."""
    ratio = jnp.exp(logp - logp_old)
    return jnp.minimum(ratio * advantages, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages)


def penalised_advantage(adv_r: Array, adv_c: Array, nu: Array) -> Array:
    """(A_r - sum_k nu_k A_c^(k)) / (1 + sum_k nu_k): adv_r (...), adv_c (..., M), nu (M,)."""
    return (adv_r - adv_c @ nu) / (1.0 + jnp.sum(nu))


def lagrangian_advantage(adv_r: Array, adv_c: Array, nu: Array) -> Array:
    """The Lagrangian's advantage A_r - sum_k nu_k A_c^(k), standardised over all samples
    (population std + 1e-8): adv_r (...), adv_c (..., M), nu (M,). The penalty weighs the
    advantages on the CMDP's (training-unit) scale, so nu is the CMDP's multiplier whatever the
    spread of A_r."""
    a = adv_r - adv_c @ nu
    return (a - jnp.mean(a)) / (jnp.std(a) + 1e-8)


def normalise_advantages(adv_r: Array, adv_c: Array) -> tuple[Array, Array]:
    """OmniSafe's normalisation over all samples: standardise A_r (population std + 1e-8),
    centre each A_c^(k). adv_r (...), adv_c (..., M)."""
    r = (adv_r - jnp.mean(adv_r)) / (jnp.std(adv_r) + 1e-8)
    c = adv_c - jnp.mean(adv_c.reshape(-1, adv_c.shape[-1]), axis=0)
    return r, c
