r"""CPO: Constrained Policy Optimization (Achiam, Held, Tamar, Abbeel, ICML 2017), the
trust-region baseline of the paper's comparison, compiled as one program per training run.

**Policy and inputs.** ONE stationary network for all stages: pi_theta(. | o) =
softmax(MLP_theta(o)) over the A actions (9 on the gridworld), where the observation o of state
s at stage h is chosen by ``Config.observation``: "xy" (paper "Env 1": grid coordinates), "xyt"
("Env 2": coordinates and h / H) or "one_hot" (tabular tests). Reward and cost critics V(o),
V_C(o) are networks of the same shape on the same observation. The default network is
32 x 32 tanh (``Config.width``, ``depth``, ``activation``).

**Single constraint.** CPO as published handles one constraint S(pi) = E[sum_h g_h + g_H] <=
alpha with one linearised constraint in its trust-region subproblem (multi-constraint CPO needs
a QP solver per update); :func:`make_learner` raises ``ValueError`` when the environment has
M > 1 constraints.

**One iteration** (K episodes, H stages; every quantity is a batch estimate):

1. Tabulate the policy over all (h, s) with one batched forward pass and roll out K episodes
   from the table (:func:`fhc_jax.algos.common.rollout_policy_table`).
2. Advantages by finite-horizon GAE (:func:`fhc_jax.algos.common.finite_horizon_gae`) for the
   reward (channel 0) and the cost (channel 1), with V_H = the exact terminal reward / cost of
   the final state (no bootstrapping past H; undiscounted by default, ``gamma = 1``).
3. Surrogates, with rho_hk(theta) = pi_theta(a_hk | o_hk) / pi_old(a_hk | o_hk):

       L_R(theta) = (1/K) sum_k sum_h rho_hk(theta) A_hk,
       L_C(theta) = (1/K) sum_k sum_h rho_hk(theta) A^C_hk,
       KLbar(theta) = 1/(H K) sum_{h,k} KL(pi_old(. | o_hk) || pi_theta(. | o_hk)).

   Summing over h (not averaging) makes L_C an estimate of S(pi_theta) - S(pi_old) to first
   order (the finite-horizon performance-difference lemma), i.e. in the same units as
   c = Shat - alpha (Shat: the batch's mean episode cost), so the linearised constraint
   c + b^T d <= 0 below is dimensionally consistent. (OmniSafe averages over samples and
   divides c by the episode length instead; the two agree up to that factor.)
4. g = grad L_R, b = grad L_C at theta_old (flattened with ``ravel_pytree``); the Fisher matrix
   F = Hessian of KLbar at theta_old plus ``damping`` I, applied by automatic differentiation
   (:func:`fisher_vector_product`); x = F^-1 g and y = F^-1 b by ``cg_iterations`` steps of
   conjugate gradient (:func:`conjugate_gradient`), both systems in one vmapped solve;
   q = g^T x, r = g^T y, s = b^T y.
5. The trust-region subproblem (Achiam et al. 2017, eq. (10) and Appendix 10.2)

       max_d g^T d   subject to   c + b^T d <= 0,   (1/2) d^T F d <= delta,

   solved in closed form through its dual (:func:`cpo_dual`, :func:`cpo_direction`):
   d* = (x - nu* y) / lambda*, or, when no point of the trust region satisfies the linearised
   constraint (c > 0 and c^2 / s > 2 delta), the infeasible-recovery step
   d = -sqrt(2 delta / s) y that decreases the cost fastest within the trust region.
6. Backtracking line search over theta_old + beta^j d*, j = 0 .. ``line_search_steps`` - 1
   (beta = ``backtrack_ratio``): accept the first candidate with KLbar <= delta,
   L_C(new) - L_C(old) <= max(-c, 0), and, when the current policy is feasible (cases 2-4),
   L_R(new) >= L_R(old) (OmniSafe's rule; the reference code of Achiam et al. checks the same
   quantities). If none is accepted the actor keeps its parameters.
7. Critics: ``critic_epochs`` epochs of ``critic_minibatches`` Adam steps on the squared error
   to the GAE lambda-returns.

**Batched statistics (a speed choice, same estimator).** The network sees only the U distinct
observations of the (h, s) pairs (U = S for "xy" and "one_hot", H S for "xyt"), so every
per-sample sum above is regrouped exactly into sums per (distinct observation, action): the
rollout's samples are scattered once into per-cell statistics (visit counts, advantage sums,
return sums), and the surrogates, KL, Fisher products and critic losses are evaluated on the
U-row tables. This is the same estimator as the per-sample form (sums are re-ordered, nothing
is dropped) and makes the update cost independent of K.

**Dual solution** (our sign convention: g and d ascend the reward). With
A = q - r^2 / s and B = 2 delta - c^2 / s:

* case 4: b = 0 and c < 0; case 3: c < 0 and B < 0 (the whole trust region is feasible):
  TRPO's step, lambda* = sqrt(q / (2 delta)), nu* = 0.
* cases 2 (c < 0, B >= 0) and 1 (c >= 0, B >= 0): maximise the dual
  D(lambda) = max(f_a(lambda) on Lambda_a, f_b(lambda) on Lambda_b), where
  f_a(lambda) = -(A / lambda + B lambda) / 2 + r c / s on Lambda_a = {lambda > 0 : lambda c + r > 0}
  (nu > 0, constraint active) and f_b(lambda) = -(q / lambda + 2 delta lambda) / 2 on
  Lambda_b = {lambda > 0 : lambda c + r <= 0} (nu = 0); each piece is concave, so its maximiser
  on the interval is the projection of sqrt(A / B), resp. sqrt(q / (2 delta)). Then
  nu* = max(0, lambda* c + r) / s.
* case 0: c >= 0 and B < 0: recovery, lambda* = 0, nu* = sqrt(2 delta / s) (reported as the
  multiplier), d = -nu* y.

Achiam et al. write the subproblem as a minimisation with g the gradient of the loss, which
flips the sign of r: their nu* = (lambda c - r)_+ / s and f_a's last term -r c / s are ours
with r -> -r. (OmniSafe ascends with +g but keeps their r-formulas.) The tests check the
closed form against a generic QCQP solver in every case.

**Reported multiplier.** ``metrics.multipliers`` is the dual variable nu* of the linearised cost
constraint (non-negative), the role a Lagrange multiplier plays in the other learners.

References:
    J. Achiam, D. Held, A. Tamar, P. Abbeel. Constrained Policy Optimization. ICML 2017.
    J. Schulman et al. Trust Region Policy Optimization. ICML 2015; High-dimensional continuous
    control using generalized advantage estimation. ICLR 2016.
    OmniSafe (PKU-Alignment), ``omnisafe/algorithms/on_policy/second_order/cpo.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from fhc_jax.algos import common
from fhc_jax.algos.common import ExactMetrics, hyperparameters
from fhc_jax.algos.networks import MLP, Stacked, check_architecture
from fhc_jax.envs.encoders import make_encoder

Array = jax.Array

OBSERVATIONS = ("xy", "xyt", "one_hot")
ACTOR_OUTPUT_SCALE = 0.01  # the actor starts near the uniform policy

_STATIC = (
    "num_iterations",
    "episodes_per_iteration",
    "observation",
    "width",
    "depth",
    "activation",
    "cg_iterations",
    "line_search_steps",
    "critic_epochs",
    "critic_minibatches",
    "fisher_samples",
    "eval_every",
)


@hyperparameters(static=_STATIC)
class Config:
    """Hyperparameters of CPO. Defaults are tuned for the default ``GridWorld`` (10x10, H = 100,
    alpha = 25) within a budget of about a minute for 5 vmapped seeds on a 2-core CPU; see
    ``benchmarks/cpo.py``. Choices made for that budget: 32 x 32 tanh networks (64 x 64 costs
    about 3.5x more per update with "xyt", whose 10,000 distinct inputs make the network the
    bottleneck), a subsampled Fisher matrix (``fisher_samples = 1024``), a larger trust region
    than TRPO's usual 0.01 (``max_kl = 0.05``; the batches of 512 episodes are large) and
    ``gae_lambda = 1`` (Monte-Carlo advantages with the critic as a baseline only: with "xy" the
    critic cannot see the stage, and on the default gridworld lambda = 0.95 left the policy
    well below the threshold, about 4 points less reward with "xyt").

    Static fields (set shapes or code paths; part of the compilation cache key):
        num_iterations: updates per training run (N >= 1).
        episodes_per_iteration: K >= 1 episodes rolled out per update.
        observation: the networks' input: "xy" (paper Env 1), "xyt" (Env 2) or "one_hot"
            (tabular environments); must be supported by the environment.
        width, depth, activation: the actor's and both critics' MLPs (``depth`` hidden layers
            of ``width`` units; activation from :data:`fhc_jax.algos.networks.ACTIVATIONS`).
        cg_iterations: conjugate-gradient iterations per linear system F x = g, F y = b (>= 1).
        line_search_steps: candidates theta_old + beta^j d, j < line_search_steps (>= 1).
        critic_epochs: passes over the batch's distinct observations per update (>= 0).
        critic_minibatches: Adam steps per epoch; each uses a random 1/critic_minibatches of
            the distinct observations (>= 1, at most their number).
        fisher_samples: 0: the Fisher matrix averages over all the batch's H K samples (exactly, through the distinct-observation statistics); n > 0:
            over n of the batch's samples drawn uniformly with replacement (an unbiased
            subsampled Fisher as in OmniSafe, which uses every 4th sample), used only when n is
            below the number of distinct observations. Cuts the cost of the conjugate-gradient
            solves when there are many distinct observations ("xyt").
        eval_every: exact evaluation every this many updates (0: initial and final only).

    Numeric fields (pytree leaves: ``jax.vmap`` over them without recompiling):
        max_kl: the trust-region radius delta on the mean KL divergence (> 0).
        damping: added to the Fisher matrix, F + damping I (>= 0).
        backtrack_ratio: line-search shrink factor beta, in (0, 1).
        gamma: discount in the advantages, in [0, 1] (1: the undiscounted finite-horizon
            objective of the paper).
        gae_lambda: GAE parameter, in [0, 1].
        critic_learning_rate: Adam step size of the critics (> 0).
    """

    num_iterations: int = 100
    episodes_per_iteration: int = 512
    observation: str = "xy"
    width: int = 32
    depth: int = 2
    activation: str = "tanh"
    cg_iterations: int = 10
    line_search_steps: int = 10
    critic_epochs: int = 4
    critic_minibatches: int = 2
    fisher_samples: int = 1024
    eval_every: int = 25
    max_kl: float = 0.05
    damping: float = 0.1
    backtrack_ratio: float = 0.8
    gamma: float = 1.0
    gae_lambda: float = 1.0
    critic_learning_rate: float = 3e-3

    def __post_init__(self):
        own = "Config"
        for name, low in (
            ("num_iterations", 1),
            ("episodes_per_iteration", 1),
            ("cg_iterations", 1),
            ("line_search_steps", 1),
            ("critic_epochs", 0),
            ("critic_minibatches", 1),
            ("fisher_samples", 0),
            ("eval_every", 0),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{own}.{name} must be an integer >= {low}, found {v!r}")
        if self.observation not in OBSERVATIONS:
            raise ValueError(
                f"{own}.observation must be one of {', '.join(map(repr, OBSERVATIONS))}, found {self.observation!r}"
            )
        check_architecture(own, self.width, self.depth, self.activation)
        common.check_positive(own, "max_kl", self.max_kl)
        common.check_positive(own, "damping", self.damping, allow_zero=True)
        ratio = common._real(own, "backtrack_ratio", self.backtrack_ratio)
        if ratio is not None and (np.any(ratio <= 0) or np.any(ratio >= 1)):
            raise ValueError(f"{own}.backtrack_ratio must lie in (0, 1), found {common._fmt(ratio)}")
        common.check_range(own, "gamma", self.gamma, 0.0, 1.0)
        common.check_range(own, "gae_lambda", self.gae_lambda, 0.0, 1.0)
        common.check_positive(own, "critic_learning_rate", self.critic_learning_rate)

    def replace(self, **changes) -> "Config":
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)


@struct.dataclass
class TrainState:
    """Learner parameters (M = 1 constraint).

    Attributes:
        actor: flax parameters of the policy MLP, o (D,) -> logits (A,).
        critics: flax parameters of the reward and cost critics, stacked on a leading axis of
            length 1 + M (:class:`fhc_jax.algos.networks.Stacked`); outputs are in units of
            :func:`value_scale`.
        critic_opt: the critics' Adam state.
        multipliers: nu*, the dual variable of the last update's linearised cost constraint, (M,).
        step: number of updates done, int32 ().
        observation, width, depth, activation: the network spec (static), so that
            :func:`policy_table` and :func:`policy` can rebuild the policy.
    """

    actor: Any
    critics: Any
    critic_opt: Any
    multipliers: Array
    step: Array
    observation: str = struct.field(pytree_node=False, default="xy")
    width: int = struct.field(pytree_node=False, default=64)
    depth: int = struct.field(pytree_node=False, default=2)
    activation: str = struct.field(pytree_node=False, default="tanh")


@struct.dataclass
class Metrics:
    """Per-iteration training metrics (N iterations, M = 1 constraint); O(N) memory.

    Attributes:
        reward: mean total episode reward of the iteration's K episodes (terminal included), (N,).
        costs: mean total episode cost, (N, M).
        multipliers: nu* of the update's trust-region subproblem (>= 0), (N, M).
        kl: mean KL divergence between the old and the new policy over the batch's states, (N,).
        step_fraction: accepted line-search fraction beta^j (0: all candidates rejected), (N,).
        optimisation_case: the subproblem's case 0-4 (module docstring), int32 (N,).
        entropy: mean policy entropy over the batch's states before the update, (N,).
        exact: exact reward and costs every ``eval_every`` updates
            (:class:`fhc_jax.algos.common.ExactMetrics`).
    """

    reward: Array
    costs: Array
    multipliers: Array
    kl: Array
    step_fraction: Array
    optimisation_case: Array
    entropy: Array
    exact: ExactMetrics


@struct.dataclass
class TrainResult:
    """What ``train(key)`` returns: the final :class:`TrainState` and the :class:`Metrics`."""

    state: TrainState
    metrics: Metrics


# ----------------------------------------------------------------------------- pure pieces


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


def cpo_dual(q: Array, r: Array, s: Array, c: Array, delta: Array, zero_cost_gradient: Array | bool = False):
    """Closed-form dual solution of max_d g^T d s.t. c + b^T d <= 0, d^T F d / 2 <= delta.

    Args (scalars): q = g^T F^-1 g, r = g^T F^-1 b, s = b^T F^-1 b, c = the constraint value
    (estimated cost minus threshold), delta = trust-region radius, zero_cost_gradient: b = 0.

    Returns:
        (lambda*, nu*, case): case 4 (b = 0, c < 0) and 3 (c < 0, B < 0) use TRPO's lambda* =
        sqrt(q / (2 delta)), nu* = 0; cases 2 (c < 0, B >= 0) and 1 (c >= 0, B >= 0) maximise the
        dual (module docstring), nu* = max(0, lambda* c + r) / s; case 0 (c >= 0, B < 0:
        infeasible) returns lambda* = 0 and nu* = sqrt(2 delta / s), the recovery step's scale.
        Here A = q - r^2 / s, B = 2 delta - c^2 / s.
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


# ----------------------------------------------------------------------------- networks and tables


def _modules(spec: TrainState | Config, num_actions: int, num_channels: int) -> tuple[MLP, Stacked]:
    actor = MLP(outputs=num_actions, width=spec.width, depth=spec.depth, activation=spec.activation,
                output_scale=ACTOR_OUTPUT_SCALE)
    critic = Stacked(MLP(outputs=1, width=spec.width, depth=spec.depth, activation=spec.activation), num_channels)
    return actor, critic


def distinct_inputs(env, params, observation: str) -> tuple[np.ndarray, np.ndarray]:
    """The distinct network inputs among the encoded (h, s), h < H (host-side).

    Returns:
        (inputs (U, D) float32, cell (H, S) int32) with ``inputs[cell[h, s]]`` the observation of
        state s at stage h. U = S for "xy" and "one_hot" (stage-free), H S for "xyt".
    """
    table = np.asarray(common.observation_table(env, params, observation))[: env.horizon]
    flat = table.reshape(-1, table.shape[-1])
    inputs, inverse = np.unique(flat, axis=0, return_inverse=True)
    return inputs.astype(np.float32), np.asarray(inverse, np.int32).reshape(env.horizon, env.num_states)


def value_scale(model: common.TabularModel) -> np.ndarray:
    """Fixed output scale of the critics, per channel (reward, cost): H max|r_h| + max|r_H| (and
    likewise for the cost), a bound on the value-to-go, so the critic networks regress targets of
    order one. (1 + M,), float32."""
    horizon = model.rewards.shape[0]

    def bound(stage, terminal):
        return horizon * float(np.max(np.abs(np.asarray(stage)), initial=0.0)) + float(
            np.max(np.abs(np.asarray(terminal)), initial=0.0))

    m = model.num_constraints
    scales = [bound(model.rewards, model.terminal_rewards)]
    scales += [bound(model.costs[k], model.terminal_costs[k]) for k in range(m)]
    return np.asarray([x if x > 0 else 1.0 for x in scales], np.float32)


def _policy_table_fn(spec: TrainState, env, params) -> Callable[[Any], Array]:
    actor, _ = _modules(spec, env.num_actions, 1 + env.num_constraints)
    inputs, cell = distinct_inputs(env, params, spec.observation)
    inputs, cell = jnp.asarray(inputs), jnp.asarray(cell)
    return lambda actor_params: jax.nn.softmax(actor.apply(actor_params, inputs), axis=-1)[cell]


# ----------------------------------------------------------------------------- public API


def init(key: Array, env, params, config: Config) -> TrainState:
    """Initial parameters: actor and critics initialised from ``key`` (the actor's output layer
    scaled by ``ACTOR_OUTPUT_SCALE``, a near-uniform policy), Adam state, nu = 0.

    Args:
        key: PRNG key.
        env: the environment (sizes A, M and the observation's dimension).
        params: env params (unused).
        config: :class:`Config`.
    """
    del params
    dim = make_encoder(type(env).__name__, config.observation, env.supported_observations).shape(env)
    actor, critic = _modules(config, env.num_actions, 1 + env.num_constraints)
    k_actor, k_critic = jax.random.split(key)
    sample = jnp.zeros(dim, jnp.float32)
    critics = critic.init(k_critic, sample)
    return TrainState(
        actor=actor.init(k_actor, sample),
        critics=critics,
        critic_opt=optax.adam(1.0).init(critics),
        multipliers=jnp.zeros((env.num_constraints,), jnp.float32),
        step=jnp.zeros((), jnp.int32),
        observation=config.observation,
        width=config.width,
        depth=config.depth,
        activation=config.activation,
    )


def policy_table(train_state: TrainState, env, params=None) -> Array:
    """The learner's policy as a table pi(a | o(h, s)) for every stage and state, (H, S, A).

    Feed it to ``fhc_jax.evaluate(env.to_cmdp(params), table)`` for exact judgement. A batched
    state (leading seed axes) gives a batched table.
    """
    params = env.default_params if params is None else params
    fn = _policy_table_fn(train_state, env, params)
    for _ in range(jnp.ndim(train_state.step)):
        fn = jax.vmap(fn)
    return fn(train_state.actor)


def policy(train_state: TrainState, env, params=None) -> Callable[[Array, Array, Array], Array]:
    """The learner's policy as ``act(key, observation, h) -> action`` for
    :func:`fhc_jax.rollout` (one uniform per call; implements ``action_from_uniform``).

    When the environment's own encoder is the learner's input (``env.encoder.name ==
    observation``) the network is applied to the observation; otherwise the state index is
    recovered from the observation (:func:`fhc_jax.algos.common.observation_to_index`)
    and the action drawn from :func:`policy_table`. Either way it samples the same policy.
    """
    if env.encoder.name != train_state.observation:
        return common.table_policy(policy_table(train_state, env, params), env)
    actor, _ = _modules(train_state, env.num_actions, 1 + env.num_constraints)
    actor_params = train_state.actor

    def cdf_of(observation: Array, h: Array) -> Array:
        del h  # stationary
        logits = actor.apply(actor_params, jnp.asarray(observation, jnp.float32))
        return jnp.cumsum(jax.nn.softmax(logits, axis=-1), axis=-1)

    return common.sampling_policy(cdf_of)


def make_learner(env, params, config: Config) -> common.Learner:
    """CPO bound to ``env`` as iteration-level functions (:class:`common.Learner`);
    :func:`make_train` scans them.

    Raises:
        ValueError: a config of another learner; an environment with more than one constraint
            (CPO's trust-region subproblem has a single linearised constraint); an observation
            the environment does not support; more critic minibatches than distinct inputs.
    """
    if not isinstance(config, Config):
        raise ValueError(f"make_train: config must be a cpo.Config, found {type(config).__name__}")
    m = env.num_constraints
    if m != 1:
        raise ValueError(
            f"cpo: CPO supports a single constraint, but {env!r} has num_constraints = {m}; use "
            "an environment with one constraint (or a Lagrangian learner for several)"
        )
    if config.observation not in env.supported_observations:
        raise ValueError(
            f"cpo: Config.observation = {config.observation!r} is not supported by {type(env).__name__}; "
            f"supported: {', '.join(map(repr, env.supported_observations))}"
        )
    model = common.tabular_model(env, params)
    cmdp = env.to_cmdp(params)
    threshold = jnp.asarray(cmdp.thresholds, jnp.float32)[0]
    evaluate_policy = common.exact_evaluator(cmdp)
    inputs_np, cell_np = distinct_inputs(env, params, config.observation)
    num_inputs = inputs_np.shape[0]
    if config.critic_minibatches > num_inputs:
        raise ValueError(
            f"cpo: Config.critic_minibatches must be at most the number of distinct observations "
            f"({num_inputs} for observation {config.observation!r}), found {config.critic_minibatches}"
        )
    inputs, cell = jnp.asarray(inputs_np), jnp.asarray(cell_np)
    scale = jnp.asarray(value_scale(model))
    horizon, num_actions, k = env.horizon, env.num_actions, config.episodes_per_iteration
    channels = 1 + m
    actor, critic = _modules(config, num_actions, channels)
    hs = jnp.arange(horizon, dtype=jnp.int32)[:, None]
    minibatch = num_inputs // config.critic_minibatches

    def critic_values(critic_params, x: Array) -> Array:
        """(B, D) -> values (B, 1 + M) in reward / cost units."""
        out = critic.apply(critic_params, jnp.broadcast_to(x, (channels,) + x.shape))  # (C, B, 1)
        return out[..., 0].T * scale

    def init_fn(key: Array, cfg: Config) -> common.Carry:
        k_init, k_loop = jax.random.split(key)
        return common.Carry(state=init(k_init, env, params, cfg), key=k_loop)

    def step_fn(carry: common.Carry, cfg: Config) -> tuple[common.Carry, dict[str, Array]]:
        st = carry.state
        key, k_roll, k_critic, k_fisher = jax.random.split(carry.key, 4)
        theta0, unravel = ravel_pytree(st.actor)
        logits_fn = lambda th: actor.apply(unravel(th), inputs)  # (P,) -> (U, A)
        logp_old = jax.nn.log_softmax(logits_fn(theta0), axis=-1)
        pi_old = jnp.exp(logp_old)

        # --- rollout from the tabulated policy
        batch = common.rollout_policy_table(k_roll, model, pi_old[cell], k)
        cells = cell[hs, batch.states[:-1]]  # (H, K) distinct-input ids

        # --- advantages (channel 0: reward, 1: cost), V_H = exact terminal signals
        values = critic_values(st.critics, inputs)  # (U, C)
        terminal = jnp.concatenate([batch.terminal_rewards[:, None], batch.terminal_costs], axis=-1)
        v_all = jnp.concatenate([values[cells], terminal[None]], axis=0)  # (H+1, K, C)
        signals = jnp.concatenate([batch.rewards[..., None], batch.costs], axis=-1)  # (H, K, C)
        adv, ret = common.finite_horizon_gae(signals, v_all, cfg.gamma, cfg.gae_lambda)

        # --- per-(input, action) statistics: [count, advantages (C), returns (C)]
        flat_idx = cells * num_actions + batch.actions
        vals = jnp.concatenate([jnp.ones_like(adv[..., :1]), adv, ret], axis=-1)
        stats = jnp.zeros((num_inputs * num_actions, 1 + 2 * channels), adv.dtype).at[flat_idx].add(vals)
        stats = stats.reshape(num_inputs, num_actions, 1 + 2 * channels)
        sa_counts = stats[..., 0]  # (U, A)
        adv_sums = stats[..., 1 : 1 + channels] / k  # (U, A, C): the surrogates' weights
        counts = jnp.sum(sa_counts, axis=-1)  # (U,)
        ret_sums = jnp.sum(stats[..., 1 + channels :], axis=1)  # (U, C)
        weights = counts / (horizon * k)  # visit frequencies of the distinct inputs
        seen = sa_counts > 0

        def surrogates(th: Array) -> Array:
            """(L_R, L_C) at th, (C,)."""
            return surrogates_and_kl(th)[0]

        def surrogates_and_kl(th: Array) -> tuple[Array, Array]:
            """((L_R, L_C) (C,), KLbar ()) at th, one forward pass."""
            logp = jax.nn.log_softmax(logits_fn(th), axis=-1)
            ratio = jnp.exp(jnp.where(seen, logp - logp_old, 0.0))
            kl = jnp.sum(weights * jnp.sum(pi_old * (logp_old - logp), axis=-1))
            return jnp.einsum("ua,uac->c", ratio, adv_sums), kl

        # --- gradients, Fisher solves, CPO direction
        sur_old, vjp_sur = jax.vjp(surrogates, theta0)
        g = vjp_sur(jnp.array([1.0, 0.0], sur_old.dtype))[0]
        b = vjp_sur(jnp.array([0.0, 1.0], sur_old.dtype))[0]
        if 0 < config.fisher_samples < num_inputs:  # subsampled Fisher over n batch samples
            pick = jax.random.randint(k_fisher, (config.fisher_samples,), 0, horizon * k)
            sub_inputs = inputs[cells.reshape(-1)[pick]]
            fisher_logits = lambda th: actor.apply(unravel(th), sub_inputs)
            fisher_weights = jnp.full((config.fisher_samples,), 1.0 / config.fisher_samples, theta0.dtype)
        else:
            fisher_logits, fisher_weights = logits_fn, weights
        fvp = fisher_vector_product(fisher_logits, theta0, fisher_weights, cfg.damping)
        xy = jax.vmap(lambda rhs: conjugate_gradient(fvp, rhs, config.cg_iterations))(jnp.stack([g, b]))
        episode_cost = jnp.mean(batch.episode_costs[:, 0])
        c = episode_cost - threshold
        d, _, nu, case = cpo_direction(g, b, xy[0], xy[1], c, cfg.max_kl)

        # --- backtracking line search (first accepted candidate)
        max_cost_change = jnp.maximum(-c, 0.0)

        def check(j):
            frac = cfg.backtrack_ratio ** j.astype(d.dtype)
            th = theta0 + frac * d
            sur, kl = surrogates_and_kl(th)
            ok = (
                jnp.all(jnp.isfinite(sur)) & jnp.isfinite(kl) & (kl <= cfg.max_kl)
                & ((sur[0] >= sur_old[0]) | (case < 2))
                & (sur[1] - sur_old[1] <= max_cost_change)
            )
            return ok, kl

        def cond(state):
            j, done, _ = state
            return (~done) & (j < config.line_search_steps)

        def body(state):
            j, _, _ = state
            ok, kl = check(j)
            return jnp.where(ok, j, j + 1), ok, kl

        j, accepted, kl = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), jnp.array(False), jnp.zeros((), d.dtype)))
        frac = jnp.where(accepted, cfg.backtrack_ratio ** j.astype(d.dtype), 0.0)
        new_actor = unravel(theta0 + frac * d)

        # --- critics: Adam on the weighted squared error to the mean return of each input
        targets = ret_sums / jnp.maximum(counts, 1.0)[:, None]  # (U, C)
        opt = optax.adam(cfg.critic_learning_rate)

        def critic_loss(cp, idx):
            err = (critic_values(cp, inputs[idx]) - targets[idx]) / scale
            w = counts[idx]
            return jnp.sum(w[:, None] * err**2) / jnp.maximum(jnp.sum(w), 1.0)

        def minibatch_step(state, idx):
            cp, os = state
            grads = jax.grad(critic_loss)(cp, idx)
            updates, os = opt.update(grads, os, cp)
            return (optax.apply_updates(cp, updates), os), None

        def epoch(state, ek):
            order = jax.random.permutation(ek, num_inputs)[: minibatch * config.critic_minibatches]
            return jax.lax.scan(minibatch_step, state, order.reshape(config.critic_minibatches, minibatch))[0], None

        critics, critic_opt = st.critics, st.critic_opt
        if config.critic_epochs > 0:
            (critics, critic_opt), _ = jax.lax.scan(
                epoch, (critics, critic_opt), jax.random.split(k_critic, config.critic_epochs)
            )

        entropy = -jnp.sum(weights * jnp.sum(pi_old * logp_old, axis=-1))
        multipliers = jnp.broadcast_to(nu, (m,)).astype(jnp.float32)
        new_state = st.replace(
            actor=new_actor, critics=critics, critic_opt=critic_opt, multipliers=multipliers, step=st.step + 1
        )
        metrics = {
            "reward": jnp.mean(batch.episode_rewards),
            "costs": jnp.mean(batch.episode_costs, axis=0),
            "multipliers": multipliers,
            "kl": jnp.where(accepted, kl, 0.0),
            "step_fraction": frac,
            "optimisation_case": case,
            "entropy": entropy,
        }
        return common.Carry(state=new_state, key=key), metrics

    def table_fn(st: TrainState) -> Array:
        return jax.nn.softmax(actor.apply(st.actor, inputs), axis=-1)[cell]

    return common.Learner(
        config=config,
        init=init_fn,
        step=step_fn,
        evaluate=lambda carry: evaluate_policy(table_fn(carry.state)),
        policy_table=table_fn,
    )


def make_train(env, params, config: Config) -> Callable[..., TrainResult]:
    """Build ``train(key, hparams=None) -> TrainResult``: rollouts and CPO updates for
    ``config.num_iterations`` iterations in one ``lax.scan`` (one jit).

    ``jax.jit(jax.vmap(train))(keys)`` trains several seeds in one compiled call;
    ``jax.vmap(train, in_axes=(None, 0))(key, common.stack([cfg1, cfg2]))`` sweeps numeric
    hyperparameters without recompiling (static fields must equal ``config``'s).

    Args:
        env: a tabular environment with one constraint (``GridWorld``, ``TabularEnv``).
        params: its params.
        config: :class:`Config`.
    Returns:
        ``train``; its result's ``metrics.exact`` holds the exact reward and costs
        (``fhc_jax.evaluate``) of the policy every ``config.eval_every`` updates.
    Raises:
        ValueError: see :func:`make_learner`.
    """
    learner = make_learner(env, params, config)

    def train(key: Array, hparams: Config | None = None) -> TrainResult:
        state, metrics, exact = common.run(learner, key, hparams)
        return TrainResult(state=state, metrics=Metrics(exact=exact, **metrics))

    return train
