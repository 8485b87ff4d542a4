"""The trust-region subproblem of CPO (Achiam et al. 2017): conjugate gradient on Fisher-vector
products computed by autodiff, and the closed-form dual of

    max_d g^T d  s.t.  1/2 d^T F d <= delta,  c + b^T d <= 0

with its infeasible-recovery case (the derivation is in :mod:`fhc_jax.algos.cpo`), and the
step that uses them on the batch's surrogate statistics, in two forms:

* tabular path: per-(distinct input, action) sums of a softmax policy (:class:`CellStatistics`,
  :func:`trust_region_step`, the softmax Fisher of :func:`fisher_vector_product`);
* sampled path (any action space): per-sample advantages and the action head's log-probability
  and KL (:class:`SampleStatistics`, :func:`sampled_trust_region_step`; the Fisher is the
  Hessian of the head's mean KL, :func:`head_fisher_vector_product`). Box action spaces (a
  Gaussian head) take this form only.

``setup.actor`` is the policy network, ``config`` CPO's. All functions are jittable and
vmappable, with a fixed number of iterations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

Array = jax.Array


def conjugate_gradient(matvec: Callable[[Array], Array], b: Array, iterations: int) -> Array:
    """Approximately solve F x = b for symmetric positive-definite F by ``iterations`` steps
    of conjugate gradient from x_0 = 0 (Hestenes-Stiefel; jittable, vmappable, fixed cost).

    r_0 = p_0 = b;  alpha_i = r_i^T r_i / p_i^T F p_i;  x_{i+1} = x_i + alpha_i p_i;
    r_{i+1} = r_i - alpha_i F p_i;  p_{i+1} = r_{i+1} + (r_{i+1}^T r_{i+1} / r_i^T r_i) p_i.
    Exact after n steps in exact arithmetic (n = dim b); steps after convergence are no-ops.

    Args:
        matvec: v (P,) -> F v (P,).
        b: right-hand side, (P,).
        iterations: number of steps (static).
    Returns:
        x, (P,).
    """
    tiny = jnp.finfo(b.dtype).tiny

    def body(_, carry):
        x, r, p, rr = carry
        fp = matvec(p)
        pfp = jnp.vdot(p, fp)
        alpha = jnp.where(pfp > tiny, rr / jnp.where(pfp > tiny, pfp, 1.0), 0.0)
        x = x + alpha * p
        r = r - alpha * fp
        rr_new = jnp.vdot(r, r)
        beta = jnp.where(rr > tiny, rr_new / jnp.where(rr > tiny, rr, 1.0), 0.0)
        return x, r, r + beta * p, rr_new

    init = (jnp.zeros_like(b), b, b, jnp.vdot(b, b))
    return jax.lax.fori_loop(0, iterations, body, init)[0]


def fisher_vector_product(
    logits_fn: Callable[[Array], Array], theta: Array, weights: Array, damping: Array | float = 0.0
) -> Callable[[Array], Array]:
    """``v -> (F + damping I) v`` where F is the Hessian at ``theta`` of the weighted mean KL
    KLbar(theta') = sum_u w_u KL(softmax z_u(theta) || softmax z_u(theta')).

    At theta' = theta the KL's gradient in the logits vanishes, so its Hessian is exactly the
    Gauss-Newton form F = J^T M J with J = dz/dtheta (U A x P) and M = blockdiag_u w_u
    (diag pi_u - pi_u pi_u^T) (the softmax Fisher). We apply it by automatic differentiation,
    ``jax.linearize`` (J v, forward mode) then ``jax.vjp`` (J^T m, reverse mode), linearised
    once so each product costs one tangent and one cotangent pass without recomputing the
    primal (a test checks it against forward-over-reverse differentiation of KLbar).

    Args:
        logits_fn: theta (P,) -> logits (U, A).
        theta: flat parameters, (P,).
        weights: w_u >= 0, (U,) (e.g. visit frequencies summing to 1).
        damping: added multiple of the identity.
    """
    z, jvp_fn = jax.linearize(logits_fn, theta)
    _, vjp_fn = jax.vjp(logits_fn, theta)
    pi = jax.nn.softmax(z, axis=-1)

    def fvp(v: Array) -> Array:
        jv = jvp_fn(v)
        m = weights[:, None] * pi * (jv - jnp.sum(pi * jv, axis=-1, keepdims=True))
        return vjp_fn(m)[0] + damping * v

    return fvp


def head_fisher_vector_product(
    out_fn: Callable[[Array], Array],
    theta: Array,
    weights: Array,
    kl: Callable[[Array, Array], Array],
    damping: Array | float = 0.0,
) -> Callable[[Array], Array]:
    """``v -> (F + damping I) v`` where F is the Hessian at ``theta`` of the weighted mean KL of an
    action head, KLbar(theta') = sum_u w_u KL(pi(. | z_u(theta)) || pi(. | z_u(theta'))), with
    z = ``out_fn`` the actor's outputs (e.g. a Gaussian's [m, s]) and ``kl`` the head's KL
    (``fhc_jax.algos.core.distributions``).

    As in :func:`fisher_vector_product`, the KL's gradient in the outputs vanishes at theta' =
    theta, so F = J^T M J exactly, J = dz/dtheta and M = blockdiag_u w_u H_u with H_u the Hessian
    of z' -> KL(pi(z_u) || pi(z')) at z' = z_u: the Fisher information of the head in its output
    parametrisation (softmax: diag pi - pi pi^T; diagonal Gaussian with mu = c + h m, log sigma =
    log h + l0 + s: diag(h^2 / sigma^2, 2) per dimension). M (J v) is a forward-over-reverse
    Hessian-vector product of the head's KL in the O outputs per input (cheap); J v and J^T m
    are one ``jax.linearize`` tangent and one ``jax.vjp`` cotangent pass.

    Args:
        out_fn: theta (P,) -> outputs (U, O).
        theta: flat parameters, (P,).
        weights: w_u >= 0, (U,) (e.g. 1 / U for the mean over the samples).
        kl: ``(out_p (U, O), out_q (U, O)) -> (U,)``, KL(pi_p || pi_q).
        damping: added multiple of the identity.
    """
    z, jvp_fn = jax.linearize(out_fn, theta)
    _, vjp_fn = jax.vjp(out_fn, theta)
    z_old = jax.lax.stop_gradient(z)
    grad_kl = jax.grad(lambda zz: jnp.sum(weights * kl(z_old, zz)))

    def fvp(v: Array) -> Array:
        m = jax.jvp(grad_kl, (z,), (jvp_fn(v),))[1]
        return vjp_fn(m)[0] + damping * v

    return fvp


def cpo_dual(q: Array, r: Array, s: Array, c: Array, delta: Array, zero_cost_gradient: Array | bool = False):
    """Closed-form dual solution of max_d g^T d s.t. c + b^T d <= 0, d^T F d / 2 <= delta.

    Args (scalars): q = g^T F^-1 g, r = g^T F^-1 b, s = b^T F^-1 b, c = the constraint value
    (estimated cost minus threshold), delta = trust-region radius, zero_cost_gradient: b = 0.

    Returns:
        (lambda*, nu*, case) as in the module docstring ("Dual solution"); case 0 returns
        lambda* = 0 and nu* = sqrt(2 delta / s), the recovery step's scale.
    """
    eps = 1e-8
    big = 1e8
    s_ = jnp.maximum(s, 1e-12)
    q_ = jnp.maximum(q, 1e-12)
    a = jnp.maximum(q_ - r**2 / s_, 0.0)  # >= 0 by Cauchy-Schwarz; clip rounding
    bb = 2.0 * delta - c**2 / s_
    neg = c < 0
    case = jnp.where(
        zero_cost_gradient & neg, 4, jnp.where(neg & (bb < 0), 3, jnp.where(neg, 2, jnp.where(bb >= 0, 1, 0)))
    ).astype(jnp.int32)

    lam_trpo = jnp.sqrt(q_ / (2.0 * delta))
    # boundary lambda where lambda c + r = 0 (nu switches on); c = 0 treated as a tiny +-eps
    c_safe = jnp.where(neg, jnp.minimum(c, -eps), jnp.maximum(c, eps))
    edge = -r / c_safe
    # c < 0: Lambda_a = (0, edge), Lambda_b = [edge, inf); c >= 0: Lambda_a = (edge, inf), Lambda_b = (0, edge]
    lo_a = jnp.where(neg, 0.0, jnp.maximum(edge, 0.0))
    hi_a = jnp.where(neg, edge, big)
    lo_b = jnp.where(neg, jnp.maximum(edge, 0.0), 0.0)
    hi_b = jnp.where(neg, big, edge)
    empty_a = hi_a <= lo_a
    empty_b = hi_b <= lo_b
    lam_a = jnp.clip(jnp.sqrt(a / jnp.maximum(bb, 1e-12)), jnp.maximum(lo_a, eps), jnp.maximum(hi_a, eps))
    lam_b = jnp.clip(lam_trpo, jnp.maximum(lo_b, eps), jnp.maximum(hi_b, eps))
    f_a = -0.5 * (a / lam_a + bb * lam_a) + r * c / s_
    f_b = -0.5 * (q_ / lam_b + 2.0 * delta * lam_b)
    f_a = jnp.where(empty_a, -jnp.inf, f_a)
    f_b = jnp.where(empty_b, -jnp.inf, f_b)
    lam_mixed = jnp.where(f_a >= f_b, lam_a, lam_b)
    nu_mixed = jnp.maximum(lam_mixed * c + r, 0.0) / s_

    lam = jnp.where(case >= 3, lam_trpo, jnp.where(case >= 1, lam_mixed, 0.0))
    nu = jnp.where(case >= 3, 0.0, jnp.where(case >= 1, nu_mixed, jnp.sqrt(2.0 * delta / s_)))
    return lam, nu, case


def cpo_direction(g: Array, b: Array, x: Array, y: Array, c: Array, delta: Array):
    """The CPO step d* of the trust-region subproblem (module docstring, :func:`cpo_dual`).

    Args:
        g: reward-surrogate gradient, (P,). b: cost-surrogate gradient, (P,).
        x: F^-1 g, (P,). y: F^-1 b, (P,) (e.g. from :func:`conjugate_gradient`).
        c: constraint value Shat - alpha, (). delta: trust-region radius, ().
    Returns:
        (d (P,), lambda* (), nu* (), case int32 ()):
        d = (x - nu* y) / lambda* in cases 1-4, d = -sqrt(2 delta / s) y in case 0 (recovery).
    """
    q, r, s = jnp.vdot(g, x), jnp.vdot(g, y), jnp.vdot(b, y)
    zero_b = jnp.vdot(b, b) <= 1e-8
    lam, nu, case = cpo_dual(q, r, s, c, delta, zero_b)
    d = jnp.where(case > 0, (x - nu * y) / jnp.maximum(lam, 1e-8), -nu * y)
    return d, lam, nu, case


#: the most constraints the multi-constraint subproblem takes: its dual enumerates the 2^M sets
#: of active constraints (64 small M x M solves at M = 6)
MAX_CONSTRAINTS = 6


def cpo_dual_multi(q: Array, r: Array, s: Array, c: Array, delta: Array):
    """The dual of max_d g^T d s.t. c_k + b_k^T d <= 0 (k = 1..M), d^T F d / 2 <= delta, for
    M >= 1 constraints, by its active sets (:func:`cpo_dual` is the closed form for M = 1).

    With q = g^T F^-1 g, r = B^T F^-1 g (M,), S = B^T F^-1 B (M, M), the dual
    D(lambda, nu) = (q - 2 r^T nu + nu^T S nu) / (2 lambda) + lambda delta - nu^T c is minimised
    over lambda > 0, nu >= 0. For a set A of active constraints, stationarity gives
    nu_A = S_AA^-1 (r_A + lambda c_A) and
    lambda = sqrt((q - r_A^T S_AA^-1 r_A) / (2 delta - c_A^T S_AA^-1 c_A)) (A empty: the TRPO
    step, lambda = sqrt(q / (2 delta))); A is the solution when nu_A >= 0, the denominator is
    positive and the inactive constraints hold at d = F^-1 (g - B nu) / lambda. Every set is
    tried (2^M of them, vmapped); among the valid ones the least D is taken (they agree up to
    rounding). No valid set: the linearised constraints do not meet the trust region (case 0).

    Args:
        q: (). r: (M,). s: (M, M). c: (M,) constraint values. delta: trust-region radius.
    Returns:
        (lambda* (), nu* (M,), case int32 ()): case 3 every c_k < 0 and nu = 0 (the TRPO step), 2
        every c_k < 0 and some constraint active, 1 some c_k >= 0 and the trust region meets
        the linearised constraints, 0 none of the sets is valid (lambda* = 0, nu* undefined:
        :func:`cpo_direction_multi` recovers).
    """
    m = c.shape[0]
    dtype = c.dtype
    subsets = jnp.asarray(
        [[(i >> k) & 1 for k in range(m)] for i in range(1 << m)], dtype
    )  # (2^M, M), the empty set first
    q_ = jnp.maximum(q, 1e-12)
    diag = jnp.maximum(jnp.diagonal(s), 1e-12)
    ridge = 1e-9 * jnp.mean(diag)
    size = jnp.sqrt(2.0 * delta * diag) + jnp.abs(c)  # the magnitude of c_k + b_k^T d in the trust region

    def one(a):
        act = a > 0
        s_a = jnp.where(act[:, None] & act[None, :], s, 0.0) + jnp.diag(jnp.where(act, ridge, 1.0))
        r_a, c_a = r * a, c * a
        sr, sc = jnp.linalg.solve(s_a, r_a) * a, jnp.linalg.solve(s_a, c_a) * a
        top = jnp.maximum(q_ - r_a @ sr, 0.0)
        bottom = 2.0 * delta - c_a @ sc
        lam = jnp.where(jnp.any(act), jnp.sqrt(top / jnp.maximum(bottom, 1e-12)), jnp.sqrt(q_ / (2.0 * delta)))
        lam = jnp.maximum(lam, 1e-8)
        nu = sr + lam * sc
        predicted = c + (r - s @ nu) / lam  # c_k + b_k^T d at d = F^-1 (g - B nu) / lambda
        tol = 1e-5 * size
        valid = (
            (~jnp.any(act) | (bottom > 0.0))
            & jnp.all(nu >= -tol)
            & jnp.all(jnp.where(act, True, predicted <= tol))
            & jnp.all(jnp.isfinite(nu))
            & jnp.isfinite(lam)
        )
        nu = jnp.maximum(nu, 0.0)
        dual = (q_ - 2.0 * r @ nu + nu @ s @ nu) / (2.0 * lam) + lam * delta - nu @ c
        return lam, nu, valid, jnp.where(valid, dual, jnp.inf)

    lams, nus, valid, duals = jax.vmap(one)(subsets)
    best = jnp.argmin(duals)
    found = jnp.any(valid)
    lam, nu = lams[best], nus[best]
    feasible_now = jnp.all(c < 0)
    case = jnp.where(~found, 0, jnp.where(feasible_now, jnp.where(jnp.all(nu <= 0.0), 3, 2), 1)).astype(jnp.int32)
    return jnp.where(found, lam, 0.0), jnp.where(found, nu, 0.0), case


def cpo_direction_multi(g: Array, b: Array, x: Array, y: Array, c: Array, delta: Array):
    """The CPO step d* for M >= 1 constraints (:func:`cpo_dual_multi`).

    Args:
        g: reward-surrogate gradient, (P,). b: cost-surrogate gradients, (M, P).
        x: F^-1 g, (P,). y: F^-1 b_k, (M, P). c: constraint values, (M,). delta: radius.
    Returns:
        (d (P,), lambda* (), nu* (M,), case int32 ()): d = (x - y^T nu*) / lambda* in cases
        1-3; case 0 (recovery): d = -sqrt(2 delta / s_w) y^T w, the steepest descent within the
        trust region of the violated constraints' sum sum_k w_k (c_k + b_k^T d), each weighted
        by w_k = 1 / sqrt(S_kk) (one constraint: CPO's recovery step), with nu* = that scale
        times w.
    """
    q, r, s = jnp.vdot(g, x), b @ x, b @ y.T
    lam, nu, case = cpo_dual_multi(q, r, s, c, delta)
    diag = jnp.maximum(jnp.diagonal(s), 1e-12)
    w = jnp.where(c >= 0.0, 1.0 / jnp.sqrt(diag), 0.0)
    s_w = jnp.maximum(w @ s @ w, 1e-12)
    scale = jnp.sqrt(2.0 * delta / s_w)
    recovery = -scale * (w @ y)
    d = jnp.where(case > 0, (x - nu @ y) / jnp.maximum(lam, 1e-8), recovery)
    nu = jnp.where(case > 0, nu, scale * w)
    return d, lam, nu, case


class CellStatistics(NamedTuple):
    """CPO's batch regrouped per distinct input u and action a (:mod:`fhc_jax.algos.cpo`;
    on its sampled path each of the H K samples is its own u); C = 1 + M channels (reward, cost).

    Attributes:
        cells: distinct-input index of every sample, (H, K).
        adv_sums: sum of the advantages of the samples in (u, a), divided by K, (U, A, C):
            the surrogates' weights.
        seen: (u, a) has at least one sample, (U, A).
        counts: samples per distinct input, (U,). weights: counts / (H K), (U,).
    """

    cells: Array
    adv_sums: Array
    seen: Array
    counts: Array
    weights: Array


class SampleStatistics(NamedTuple):
    """CPO's batch per sample (the sampled path, any action space): N = H K samples, C = 1 + M
    channels (reward, cost).

    Attributes:
        cells: each sample's index, (H, K) (``arange(N)``).
        actions: the actions taken (as the rollout recorded them: indices (N,), or unclipped
            box actions (N, d)).
        adv_sums: each sample's advantages divided by K, (N, C): the surrogates' weights.
        counts: ones, (N,). weights: 1 / N, (N,).
    """

    cells: Array
    actions: Array
    adv_sums: Array
    counts: Array
    weights: Array


def trust_region_step(
    actor_params: Any,
    logp_old: Array,
    stats: CellStatistics,
    c: Array,
    key: Array,
    setup: Any,
    config: Any,
    inputs: Array | None = None,
) -> tuple[Any, dict[str, Array]]:
    """Steps 3-6 of CPO's update (:mod:`fhc_jax.algos.cpo`) on the tabular path's
    per-(distinct input, action) statistics of a softmax policy: the CPO direction from the
    surrogates' gradients and the Fisher solves, then the backtracking line search (the
    sampled path: :func:`sampled_trust_region_step`).

    Args:
        actor_params: theta_old. logp_old: log pi_old on the distinct inputs, (U, A).
        stats: :func:`cell_statistics` of the batch. c: Shat - alpha, ().
        key: draws the subsampled Fisher's samples (``Config.fisher_samples``).
        inputs: the points of ``stats`` (default ``setup.inputs``; the samples on the sampled path).
    Returns:
        (new actor parameters, {"multiplier": nu*, "case", "kl", "step_fraction"}).
    """
    cfg = config
    inputs = setup.inputs if inputs is None else inputs
    theta0, unravel = ravel_pytree(actor_params)
    logits_fn = lambda th: setup.actor.apply(unravel(th), inputs)  # (P,) -> (U, A)
    pi_old = jnp.exp(logp_old)

    def surrogates_and_kl(th: Array) -> tuple[Array, Array]:
        """((L_R, L_C) (C,), KLbar ()) at th, one forward pass."""
        logp = jax.nn.log_softmax(logits_fn(th), axis=-1)
        ratio = jnp.exp(jnp.where(stats.seen, logp - logp_old, 0.0))
        kl = jnp.sum(stats.weights * jnp.sum(pi_old * (logp_old - logp), axis=-1))
        return jnp.einsum("ua,uac->c", ratio, stats.adv_sums), kl

    def fisher(theta: Array) -> Callable[[Array], Array]:
        if 0 < cfg.fisher_samples < inputs.shape[0]:  # subsampled Fisher over n batch samples
            pick = jax.random.randint(key, (cfg.fisher_samples,), 0, stats.cells.size)
            sub_inputs = inputs[stats.cells.reshape(-1)[pick]]
            fisher_logits = lambda th: setup.actor.apply(unravel(th), sub_inputs)
            fisher_weights = jnp.full((cfg.fisher_samples,), 1.0 / cfg.fisher_samples, theta.dtype)
        else:
            fisher_logits, fisher_weights = logits_fn, stats.weights
        return fisher_vector_product(fisher_logits, theta, fisher_weights, cfg.damping)

    return _step(theta0, unravel, surrogates_and_kl, fisher, c, cfg)


def sampled_trust_region_step(
    actor_params: Any,
    out_old: Array,
    stats: SampleStatistics,
    c: Array,
    key: Array,
    setup: Any,
    config: Any,
    inputs: Array,
    head: Any,
) -> tuple[Any, dict[str, Array]]:
    """:func:`trust_region_step` on the sampled path, for any action head (softmax or the
    Gaussian of box actions): per-sample surrogates L = sum_i rho_i A_i / K with rho_i =
    pi(a_i | z_i(theta)) / pi_old(a_i | z_i) from ``head.log_prob``, the mean KL
    (1/N) sum_i ``head.kl``(z_i(theta_old), z_i(theta)) in the line search, and the Fisher as
    the Hessian of that mean KL (:func:`head_fisher_vector_product`; over ``fisher_samples``
    samples drawn uniformly with replacement when 0 < fisher_samples < N).

    Args:
        actor_params: theta_old. out_old: the actor's outputs at the samples under theta_old, (N, O).
        stats: :class:`SampleStatistics` of the batch. c: Shat - alpha, ().
        key: draws the subsampled Fisher's samples. inputs: the samples' network inputs, (N, D).
        head: the action head (``fhc_jax.algos.core.distributions``).
    Returns:
        (new actor parameters, {"multiplier": nu*, "case", "kl", "step_fraction"}).
    """
    cfg = config
    theta0, unravel = ravel_pytree(actor_params)
    out_fn = lambda th: setup.actor.apply(unravel(th), inputs)  # (P,) -> (N, O)
    logp_old = head.log_prob(out_old, stats.actions)  # (N,)

    def surrogates_and_kl(th: Array) -> tuple[Array, Array]:
        """((L_R, L_C) (C,), KLbar ()) at th, one forward pass."""
        out = out_fn(th)
        ratio = jnp.exp(head.log_prob(out, stats.actions) - logp_old)
        kl = jnp.sum(stats.weights * head.kl(out_old, out))
        return ratio @ stats.adv_sums, kl

    def fisher(theta: Array) -> Callable[[Array], Array]:
        n = inputs.shape[0]
        if 0 < cfg.fisher_samples < n:  # subsampled Fisher over n batch samples
            sub_inputs = inputs[jax.random.randint(key, (cfg.fisher_samples,), 0, n)]
            fisher_out = lambda th: setup.actor.apply(unravel(th), sub_inputs)
            fisher_weights = jnp.full((cfg.fisher_samples,), 1.0 / cfg.fisher_samples, theta.dtype)
        else:
            fisher_out, fisher_weights = out_fn, stats.weights
        return head_fisher_vector_product(fisher_out, theta, fisher_weights, head.kl, cfg.damping)

    return _step(theta0, unravel, surrogates_and_kl, fisher, c, cfg)


def _step(
    theta0: Array,
    unravel: Callable[[Array], Any],
    surrogates_and_kl: Callable[[Array], tuple[Array, Array]],
    fisher: Callable[[Array], Callable[[Array], Array]],
    c: Array,
    cfg: Any,
) -> tuple[Any, dict[str, Array]]:
    """The CPO direction from the surrogates' gradients and the Fisher solves, then the
    backtracking line search (first accepted candidate) on the surrogates and the mean KL."""
    # --- gradients, Fisher solves, CPO direction
    sur_old, vjp_sur = jax.vjp(lambda th: surrogates_and_kl(th)[0], theta0)
    fvp = fisher(theta0)
    if sur_old.shape[0] == 2:  # one constraint: the closed-form dual (c is a scalar)
        g = vjp_sur(jnp.array([1.0, 0.0], sur_old.dtype))[0]
        b = vjp_sur(jnp.array([0.0, 1.0], sur_old.dtype))[0]
        xy = jax.vmap(lambda rhs: conjugate_gradient(fvp, rhs, cfg.cg_iterations))(jnp.stack([g, b]))
        d, _, nu, case = cpo_direction(g, b, xy[0], xy[1], c, cfg.max_kl)
    else:  # M constraints (c is (M,)): the dual over the active sets
        grads = jax.vmap(lambda e: vjp_sur(e)[0])(jnp.eye(sur_old.shape[0], dtype=sur_old.dtype))  # (1 + M, P)
        xy = jax.vmap(lambda rhs: conjugate_gradient(fvp, rhs, cfg.cg_iterations))(grads)
        d, _, nu, case = cpo_direction_multi(grads[0], grads[1:], xy[0], xy[1:], c, cfg.max_kl)

    # --- backtracking line search (first accepted candidate)
    max_cost_change = jnp.maximum(-c, 0.0)

    def check(j):
        th = theta0 + cfg.backtrack_ratio ** j.astype(d.dtype) * d
        sur, kl = surrogates_and_kl(th)
        ok = (
            jnp.all(jnp.isfinite(sur))
            & jnp.isfinite(kl)
            & (kl <= cfg.max_kl)
            & ((sur[0] >= sur_old[0]) | (case < 2))
            & jnp.all(sur[1:] - sur_old[1:] <= max_cost_change)
        )
        return ok, kl

    def body(state):
        j, _, _ = state
        ok, kl = check(j)
        return jnp.where(ok, j, j + 1), ok, kl

    cond = lambda state: (~state[1]) & (state[0] < cfg.line_search_steps)
    j, accepted, kl = jax.lax.while_loop(
        cond, body, (jnp.zeros((), jnp.int32), jnp.array(False), jnp.zeros((), d.dtype))
    )
    frac = jnp.where(accepted, cfg.backtrack_ratio ** j.astype(d.dtype), 0.0)
    info = {"multiplier": nu, "case": case, "kl": jnp.where(accepted, kl, 0.0), "step_fraction": frac}
    return unravel(theta0 + frac * d), info
