"""FH-Constrained: the paper's Algorithm 1 (actor-critic for finite-horizon constrained MDPs),
batched over episodes and compiled as one program per training run.

Paper (Section 3), per episode n with states s_h, actions a_h (h = 0..H-1), final state s_H,
and multipliers lambda^(k) in [P, 0]:

* Lagrangian rewards  c^lambda_h = r_h + sum_k lambda^(k) g_h^(k),
  c^lambda_H = r_H + sum_k lambda^(k) (g_H^(k) - alpha^(k)).
* TD error  delta_h = c^lambda_h + v_{h+1}^T phi_{h+1}(s_{h+1}) - v_h^T phi_h(s_h).
* (algo1) v_h <- v_h + a(n) delta_h phi_h(s_h);  (algo2) v_H <- v_H + a(n) [c^lambda_H - v_H^T phi_H(s_H)] phi_H(s_H).
* (algo3) theta_h <- Gamma[theta_h + b(n) psi_{theta_h}(s_h, a_h) delta_h], psi = grad log mu.
* xi_h^(k) = g_h^(k) + w_{h+1}^(k)T phi_{h+1}(s_{h+1}) - w_h^(k)T phi_h(s_h);
  (algo4) w_h^(k) <- w_h^(k) + a(n) xi_h^(k) phi_h(s_h);
  (algo5) w_H^(k) <- w_H^(k) + a(n) [g_H^(k) - alpha^(k) - w_H^(k)T phi_H(s_H)] phi_H(s_H).
* (algo7) lambda^(k) <- min(0, max(P, lambda^(k) - c(n) w_0^(k)T phi_0(s_0))).

All right-hand sides use the iteration-n parameters (the equations index everything by n), so
the H stages are updated in one vectorised operation. **Sign convention**: the public API and
the train state carry the non-negative *penalties* nu^(k) = -lambda^(k) in [0, -P]
(``Config.multiplier_max`` = -P); then c^lambda_h = r_h - nu . g_h and (algo7) reads
nu <- clip(nu + c(n) w_0^T phi_0(s_0), 0, -P). ``fhc_jax.solve`` reports the same nu.

**Policy**: Gibbs mu_{theta_h}(s, .) = softmax(phi_h(s)^T theta_h), theta of shape (H, X, A),
compatible features psi_{theta_h}(s, a) = phi_h(s) (e_a - mu_h(s, .))^T; Gamma clips theta to
the box [-theta_bound, theta_bound]. Features: :mod:`fhc_jax.algos.features`.

**Batches and the combination rule** (``Config.combine``). Each iteration rolls out K episodes
under theta(n) and applies ONE update built from the K per-episode increments of the paper:

* ``"visits"`` (default): each per-feature increment is the SUM over the K episodes divided by
  the number of episodes that activated that feature at that stage, max(n_hj, 1). With
  one-hot features this is the average over the episodes that visited (h, s): every visited
  (stage, state) moves as far as one paper update would, and unvisited ones do not move.
* ``"mean"``: the average over all K episodes (a minibatch estimate of the mean update).

Both reduce to the paper's update exactly when K = 1 (the test suite checks this against an
equation-by-equation reference), and both are unbiased estimates of a positive diagonal
rescaling of the paper's mean update field f_h (proof sketch: E[sum_k x_k] = K E[x];
n_hj / K -> P(phi_j(s_h) != 0) > 0), so the ODE equilibria of Theorems 2-4 (the TD fixed
points Lambda_h, Xi_h, the stationary set of the actor and the multiplier set F) are unchanged.
"visits" is the default because with tabular features a state reached with probability d_h(s)
would otherwise learn at the rate a(n) d_h(s); at K = 4096 a rare state gets the paper's full
step from a low-variance average instead of a d_h(s)-shrunken one.

The multiplier update uses the batch mean of w_0^T phi_0(s_0) (paper variant) or of the
episode costs (improved variant), and the multiplier schedule c(n) advances once per update.

**Variants** (``Config.variant``):

* ``"paper"``: exactly (algo1)-(algo7) as above.
* ``"improved"`` (default): removes the paper's delay. With TD(0), the terminal offset
  -alpha in (algo5) reaches w_0 only after H updates (one stage per update) while early-stage
  costs reach it at once, so w_0 over-estimates the violation for a long time and the
  multiplier over-penalises (the policy ends far below the threshold). The improved variant
  changes three things, keeping the timescales a(n) > b(n) > c(n) and the fixed points:
  (i) the multiplier moves with the batch's Monte-Carlo estimate of the constraint violation,
  nu <- clip(nu + c(n) (mean_k sum_h g_hk - alpha), 0, -P), an unbiased estimate of
  S(theta) - alpha, i.e. of the quantity W_0 = Xi_0^T phi_0 that (algo7) tracks when the
  critic is exact (so the multiplier ODE and its equilibrium set F are the paper's);
  (ii) all critics learn from lambda-returns with trace ``Config.trace`` (0 = the paper's
  TD(0) targets; 1 = Monte-Carlo returns), G_h = c_h + (1 - trace) V_{h+1}(s_{h+1}) +
  trace G_{h+1}, G_H = c_H: same fixed point for tabular features, no H-update delay;
  (iii) the actor uses the lambda-return advantage G_h - v_h^T phi_h(s_h) in place of
  delta_h (equal to delta_h at trace 0) and the Lagrangian terminal value omits the constant
  nu alpha (a state-independent offset that leaves the policy gradient unchanged). The
  constraint critics then estimate the expected cost-to-go (no -alpha) and are reported in
  ``metrics.critic_costs``;
  (iv) the actor increment for theta_h(s, a) is the visit-averaged advantage of a at (h, s)
  (see ``_advantage_increment``): a positive per-coordinate rescaling of the paper's
  d_h(s) mu_h(s, a) A_h(s, a), so the box-projected fixed points are unchanged, but actions the
  policy has made rare are re-learned at full rate (the paper's form learns them at a rate
  shrunk by mu_h(s, a), which left the policy stuck avoiding every congested cell long after
  the multiplier had fallen);
  (v) a proportional term damps the multiplier (PI control, as in PID-Lagrangian, Stooke et al.
  2020): the penalty used is nu = clip(nu_I + K_p (C_hat - alpha), 0, -P), where nu_I follows
  (i) and C_hat is the batch's mean episode cost. At a fixed point C = alpha the proportional
  term vanishes, so the equilibria are the paper's; without it the multiplier and the
  (slower-reacting) actor oscillated with a period of ~1000 updates and the final policy
  landed anywhere between cost 3 and 50 on the default gridworld.

**Reported policy** (``Config.policy_averaging``, both variants): the learner reports the
softmax policy of an exponential Polyak average of the actor iterates (Polyak & Juditsky 1992),
theta_bar(n+1) = beta theta_bar(n) + (1 - beta) theta(n+1), while its rollouts use theta(n). Near
nu* the Lagrangian is flat between cheaper and costlier policies, so the last iterate keeps
drifting by a few cost units around alpha; the average over the last ~1/(1 - beta) updates
does not (default gridworld, 5 seeds: final-iterate costs 21.0-31.4, averaged 22.7-25.1 with
beta = 0.99).

**Update forms** (``Config.update_form``, a speed choice with identical results up to float
rounding): ``"table"`` samples actions from a per-update policy table and factors the actor
gradient into one small scatter of the (H, K) TD errors into (H, S, A) statistics, followed by
dense O(H S A) work; ``"samples"`` works per visited (stage, state) row, O(H K A). ``"auto"``
picks "samples" when 4 K <= S (small batches or large grids), "table" otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.algos import common, features as feat
from fhc_jax.algos.common import Batch, ExactMetrics, PowerSchedule, hyperparameters
from fhc_jax.algos.features import FeatureSpec, FeatureTable, OneHot

Array = jax.Array

VARIANTS = ("paper", "improved")
COMBINE_RULES = ("visits", "mean")
UPDATE_FORMS = ("auto", "table", "samples")

_STATIC = (
    "num_iterations",
    "episodes_per_iteration",
    "features",
    "variant",
    "combine",
    "update_form",
    "eval_every",
    "check_step_sizes",
)


@hyperparameters(static=_STATIC)
class Config:
    """Hyperparameters of FH-Constrained. Defaults are tuned for the default ``GridWorld``
    (10x10, H = 100, alpha = 25) by vmapped grid searches (``fhc-jax sweep``, up to 480 runs
    per program, 10-20 seeds per setting; ``benchmarks/gpu/``), judged exactly; see
    ``benchmarks/fh_constrained.py`` for the quality they reach.

    Static fields (set shapes or code paths; part of the compilation cache key):
        num_iterations: updates per training run (N >= 1).
        episodes_per_iteration: K >= 1 episodes rolled out per update (K = 1: the paper).
        features: feature spec phi_h(s) (:mod:`fhc_jax.algos.features`), default one-hot.
        variant: "paper" (eqs. (algo1)-(algo7) verbatim) or "improved" (module docstring).
        combine: how K per-episode increments are combined: "visits" or "mean".
        update_form: "auto", "table" or "samples" (speed only, module docstring).
        eval_every: exact evaluation of the policy every this many updates (0: only the
            initial and final policies). Tabular environments only.
        check_step_sizes: validate the schedules against Assumption 3 (default True). Set
            False only to experiment with schedules outside the paper's theory (e.g.
            constant step sizes); positivity is always checked.

    Numeric fields (pytree leaves: ``jax.vmap`` over them without recompiling):
        critic_step: a(n), fastest schedule (critics v, w; eqs. (algo1), (algo2), (algo4), (algo5)).
        actor_step: b(n), middle schedule (actor theta; eq. (algo3)).
        multiplier_step: c(n), slowest schedule (multipliers; eq. (algo7)).
        theta_bound: Gamma projects every theta entry onto [-theta_bound, theta_bound] (> 0).
        multiplier_max: -P, the penalties nu live in [0, multiplier_max] (> 0).
        initial_multiplier: nu at n = 0, in [0, multiplier_max].
        trace: lambda-return trace of the improved variant, in [0, 1] (ignored by "paper").
        multiplier_gain: proportional gain K_p >= 0 of the improved variant's multiplier
            (ignored by "paper"): the penalty used is nu = clip(nu_I + K_p (C_hat - alpha)), where
            nu_I is the paper's integral update (algo7) and C_hat the batch's mean episode cost.
        policy_averaging: beta in [0, 1): the reported policy (:func:`policy_table`, the exact
            evaluations in the metrics, :func:`policy`) is softmax of the exponential Polyak
            average theta_bar <- beta theta_bar + (1 - beta) theta(n+1) (Polyak & Juditsky 1992);
            0 reports the last iterate. Rollouts during training always use theta(n).
    """

    num_iterations: int = 2500
    episodes_per_iteration: int = 512
    features: FeatureSpec = OneHot()
    variant: str = "improved"
    combine: str = "visits"
    update_form: str = "auto"
    eval_every: int = 100
    check_step_sizes: bool = True
    critic_step: PowerSchedule = PowerSchedule(init=1.0, power=0.55, decay=100.0)
    actor_step: PowerSchedule = PowerSchedule(init=3.0, power=0.6, decay=100.0)
    multiplier_step: PowerSchedule = PowerSchedule(init=2e-4, power=0.8, decay=1000.0)
    theta_bound: float = 4.0
    multiplier_max: float = 20.0
    initial_multiplier: float = 0.0
    trace: float = 0.5
    multiplier_gain: float = 0.01
    policy_averaging: float = 0.99

    def __post_init__(self):
        own = "Config"
        for name, low in (("num_iterations", 1), ("episodes_per_iteration", 1), ("eval_every", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{own}.{name} must be an integer >= {low}, found {v!r}")
        for name, allowed in (("variant", VARIANTS), ("combine", COMBINE_RULES), ("update_form", UPDATE_FORMS)):
            v = getattr(self, name)
            if v not in allowed:
                raise ValueError(f"{own}.{name} must be one of {', '.join(map(repr, allowed))}, found {v!r}")
        if not isinstance(self.features, (feat.OneHot, feat.RadialBasis, feat.TileCoding, feat.Custom)):
            raise ValueError(
                f"{own}.features must be a feature spec (features.OneHot(), RadialBasis(...), "
                f"TileCoding(...), Custom(...)), found {type(self.features).__name__}"
            )
        if not isinstance(self.check_step_sizes, bool):
            raise ValueError(f"{own}.check_step_sizes must be True or False, found {self.check_step_sizes!r}")
        schedules = {"critic_step": self.critic_step, "actor_step": self.actor_step, "multiplier_step": self.multiplier_step}
        common.check_schedules(own, schedules, self.check_step_sizes)
        common.check_positive(own, "theta_bound", self.theta_bound)
        common.check_positive(own, "multiplier_max", self.multiplier_max)
        common.check_positive(own, "initial_multiplier", self.initial_multiplier, allow_zero=True)
        mx = common._real(own, "multiplier_max", self.multiplier_max)
        init = common._real(own, "initial_multiplier", self.initial_multiplier)
        if mx is not None and init is not None and np.any(init > mx):
            raise ValueError(
                f"{own}.initial_multiplier must lie in [0, multiplier_max = {common._fmt(mx)}], found {common._fmt(init)}"
            )
        common.check_range(own, "trace", self.trace, 0.0, 1.0)
        common.check_positive(own, "multiplier_gain", self.multiplier_gain, allow_zero=True)
        common.check_averaging(own, "policy_averaging", self.policy_averaging)

    def replace(self, **changes) -> "Config":
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)


@struct.dataclass
class TrainState:
    """Learner parameters (H stages, X features, A actions, M constraints).

    Attributes:
        theta: actor parameters theta_h, (H, X, A); mu_h(s, .) = softmax(phi_h(s)^T theta_h).
        critics: critic weights for stages 0..H, (H+1, X, 1+M): channel 0 is the Lagrangian
            critic v_h, channels 1..M the constraint critics w_h^(k) (see :attr:`v`, :attr:`w`).
        multipliers: penalties nu^(k) = -lambda^(k) >= 0 used in c^lambda, (M,).
        multiplier_integral: the integral part nu_I of the multiplier update (algo7); equal to
            ``multipliers`` in the paper variant, (M,).
        step: number of updates done, n, int32 ().
        theta_average: Polyak average of theta (exponential, weight ``Config.policy_averaging``),
            (H, X, A): the learner's reported policy (:func:`policy_table`). None: report theta.
        features: the feature spec (static).
    """

    theta: Array
    critics: Array
    multipliers: Array
    multiplier_integral: Array
    step: Array
    theta_average: Array | None = None
    features: FeatureSpec = struct.field(pytree_node=False, default=OneHot())

    @property
    def v(self) -> Array:
        """Lagrangian critic weights v_h, (H+1, X)."""
        return self.critics[..., 0]

    @property
    def w(self) -> Array:
        """Constraint critic weights w_h^(k), (M, H+1, X)."""
        return jnp.moveaxis(self.critics[..., 1:], -1, -3)


@struct.dataclass
class Metrics:
    """Per-iteration training metrics (N iterations, M constraints); O(N) memory whatever K, H.

    Attributes:
        reward: mean total episode reward of the iteration's K episodes (terminal included), (N,).
        costs: mean total episode cost per constraint, (N, M).
        multipliers: penalties nu after the update (non-negative; = -lambda), (N, M).
        critic_costs: the constraint critics' estimate of the expected total cost,
            mean_k w_0^T phi_0(s_0) (+ alpha in the paper variant, whose critic includes
            -alpha), before the update, (N, M).
        exact: exact reward and costs of the current policy every ``eval_every`` updates
            (:class:`fhc_jax.algos.common.ExactMetrics`).
    """

    reward: Array
    costs: Array
    multipliers: Array
    critic_costs: Array
    exact: ExactMetrics


@struct.dataclass
class TrainResult:
    """What ``train(key)`` returns: the final :class:`TrainState` and the :class:`Metrics`."""

    state: TrainState
    metrics: Metrics


# ----------------------------------------------------------------------------- helpers


def resolve_update_form(config: Config, num_states: int) -> str:
    """The update form "auto" picks for these sizes ("samples" iff 4 K <= S)."""
    if config.update_form != "auto":
        return config.update_form
    return "samples" if 4 * config.episodes_per_iteration <= num_states else "table"


def _logits_table(theta: Array, feats: FeatureTable) -> Array:
    """phi_h(s)^T theta_h for all h < H and s, (H, S, A)."""
    return feats.values(theta)


def _feature_rows(feats: FeatureTable, states: Array) -> Array:
    """phi_h(s_hk) for a time-major (L, K) array of states at stages 0..L-1: (L, K, X)."""
    if feats.per_stage:
        return jnp.take_along_axis(feats.table[: states.shape[0]], states[..., None], axis=1)
    return feats.table[states]


# ----------------------------------------------------------------------------- public API


def init(key: Array, env, params, config: Config) -> TrainState:
    """Initial parameters: theta = 0 (uniform policy), critics = 0, nu = initial_multiplier.

    Args:
        key: PRNG key (unused: the initialisation is deterministic; kept for a uniform API).
        env: the environment (sizes H, S, A, M).
        params: env params (unused).
        config: :class:`Config`.
    """
    del key, params
    h, a, m = env.horizon, env.num_actions, env.num_constraints
    x = config.features.num_features(env)
    return TrainState(
        theta=jnp.zeros((h, x, a), jnp.float32),
        theta_average=jnp.zeros((h, x, a), jnp.float32),
        critics=jnp.zeros((h + 1, x, 1 + m), jnp.float32),
        multipliers=jnp.broadcast_to(jnp.asarray(config.initial_multiplier, jnp.float32), (m,)),
        multiplier_integral=jnp.broadcast_to(jnp.asarray(config.initial_multiplier, jnp.float32), (m,)),
        step=jnp.zeros((), jnp.int32),
        features=config.features,
    )


def _advantage_increment(
    states: Array, actions: Array, delta: Array, features: FeatureTable, num_states: int, num_actions: int, visits: bool
) -> Array:
    """Actor increment of the improved variant: visit-averaged advantages, (H, X, A).

    For every visited (h, s, a): A_hat_h(s, a) = mean of delta over the episodes that took a in
    s at stage h, minus the mean of delta over all visits of (h, s) (a per-state baseline);
    0 for actions not taken. The expected paper increment for theta_h(s, a) with one-hot
    features is d_h(s) mu_h(s, a) A_h(s, a); this one is P(a taken at (h, s)) A_h(s, a): the same
    sign coordinate by coordinate (a positive diagonal rescaling, like a natural gradient for
    the softmax), so the box-projected stationary points are the paper's, but rarely chosen
    actions are no longer learned at a rate shrunk by mu_h(s, a).
    Per-state tables are mapped to features as the critic's are: Phi^T (n_h(s) A_hat) divided by
    the feature's visit count ("visits") or by K ("mean"); with one-hot features and "visits"
    the increment is A_hat itself.

    Args:
        states, actions: s_h, a_h, (H, K) int32. delta: the actor's TD/return errors, (H, K).
    """
    num_stages, k = delta.shape
    hh = jnp.arange(num_stages, dtype=jnp.int32)[:, None]
    cells = states * num_actions + actions
    sums = jnp.zeros((num_stages, num_states * num_actions, 2), delta.dtype)
    sums = sums.at[hh, cells].add(jnp.stack([jnp.ones_like(delta), delta], axis=-1))
    sums = sums.reshape(num_stages, num_states, num_actions, 2)
    return _advantage_increment_from_sums(sums[..., 0], sums[..., 1], features, k, visits)


def _advantage_increment_from_sums(count_sa: Array, total_sa: Array, features: FeatureTable, k: int, visits: bool) -> Array:
    """:func:`_advantage_increment` from per-cell visit counts n_h(s, a) and delta sums, both
    (H, S, A) (the "table" update already has them from its one scatter)."""
    count_s = count_sa.sum(-1)  # (H, S)
    mean_s = total_sa.sum(-1) / jnp.maximum(count_s, 1.0)
    adv = jnp.where(count_sa > 0, total_sa / jnp.maximum(count_sa, 1.0) - mean_s[..., None], 0.0)
    return _combine(features.project(adv * count_s[..., None]), features.project_active(count_s), k, visits)


def _advantage_weights(states: Array, actions: Array, delta: Array) -> tuple[Array, Array]:
    """Per-sample form of :func:`_advantage_increment` for small batches, from pairwise
    comparisons of the K samples of each stage: O(H K^2) instead of O(H S A).

    Sample k of stage h carries w_hk = A_hat_h(s_k, a_k) n_h(s_k) / n_h(s_k, a_k), so summing the
    samples of a (h, s, a) cell gives n_h(s) A_hat_h(s, a), which the table form then maps to
    features and normalises. Returns (w (H, K), n_h(s_k) (H, K)).
    """
    same_s = (states[:, :, None] == states[:, None, :]).astype(delta.dtype)  # (H, K, K)
    same_sa = same_s * (actions[:, :, None] == actions[:, None, :]).astype(delta.dtype)
    count_s, count_sa = same_s.sum(-1), same_sa.sum(-1)  # (H, K), both >= 1
    adv = jnp.einsum("hkj,hj->hk", same_sa, delta) / count_sa - jnp.einsum("hkj,hj->hk", same_s, delta) / count_s
    return adv * count_s / count_sa, count_s


def _combine(increment: Array, active: Array, k: int, visits: bool) -> Array:
    """Turn a summed per-feature increment (L, X, ...) into one update (``Config.combine``):
    divide by the number of episodes that activated the feature, ``active`` (L, X)
    ("visits"), or by K ("mean")."""
    if not visits:
        return increment / k
    return increment / jnp.maximum(active, 1.0)[..., None]


def update(
    train_state: TrainState,
    batch: Batch,
    features: FeatureTable,
    thresholds: Array,
    config: Config,
    *,
    policy: Array | None = None,
) -> tuple[TrainState, dict[str, Array]]:
    """One FH-Constrained update from K episodes (all H stages at once).

    Args:
        train_state: parameters at iteration n.
        batch: K episodes generated under ``train_state``'s policy (:class:`Batch`, time-major).
        features: ``features.build(config.features, env)``.
        thresholds: alpha^(k), (M,).
        config: :class:`Config` (its static fields select variant, combination rule, form).
        policy: optional policy table mu (H, S, A) of ``train_state`` (the "table" form needs
            it and computes it when absent).
    Returns:
        (parameters at n + 1, per-iteration metrics dict: reward (), costs (M,),
        multipliers (M,), critic_costs (M,)).
    """
    num_stages, k = batch.actions.shape
    num_actions = train_state.theta.shape[-1]
    m = thresholds.shape[0]
    num_states = features.num_features if features.one_hot else features.table.shape[-2]
    form = resolve_update_form(config, num_states)
    paper = config.variant == "paper"
    visits = config.combine == "visits"
    n = train_state.step
    a_n, b_n, c_n = config.critic_step(n), config.actor_step(n), config.multiplier_step(n)
    nu = train_state.multipliers
    critics, theta = train_state.critics, train_state.theta
    s_all = batch.states  # (H+1, K)
    hh = jnp.arange(num_stages + 1, dtype=jnp.int32)[:, None]  # (H+1, 1)

    # --- critic values at the visited states, (H+1, K, 1+M): v_h^T phi_h(s_h), w_h^T phi_h(s_h)
    if features.one_hot:
        vals = critics[hh, s_all]
    else:
        phi_all = _feature_rows(features, s_all)  # (H+1, K, X)
        vals = jnp.einsum("hkx,hxc->hkc", phi_all, critics)

    # --- single-stage signals in Lagrangian/constraint channels
    stage = jnp.concatenate([(batch.rewards - batch.costs @ nu)[..., None], batch.costs], axis=-1)  # (H, K, C)
    term_cost = batch.terminal_costs - thresholds if paper else batch.terminal_costs  # (K, M)
    terminal = jnp.concatenate([(batch.terminal_rewards - term_cost @ nu)[:, None], term_cost], axis=-1)  # (K, C)

    # --- errors: paper TD(0) (delta_h, xi_h) or lambda-return errors (improved)
    if paper:
        targets = stage + vals[1:]
    else:
        targets = common.lambda_returns(stage, terminal, vals[1:], jnp.asarray(config.trace, jnp.float32))
    errors = jnp.concatenate([targets, terminal[None]], axis=0) - vals  # (H+1, K, C)
    delta = errors[:-1, :, 0]  # actor signal (H, K)

    if form == "table":
        mu = policy if policy is not None else jax.nn.softmax(_logits_table(theta, features), axis=-1)
        # one scatter of [count, errors...] into (H, S*A) cells; terminal stage into (S,)
        cells = s_all[:-1] * num_actions + batch.actions  # (H, K)
        vals_sc = jnp.concatenate([jnp.ones((num_stages, k, 1), errors.dtype), errors[:-1]], axis=-1)
        stats = jnp.zeros((num_stages, num_states * num_actions, 2 + m), errors.dtype)
        stats = stats.at[hh[:-1], cells].add(vals_sc).reshape(num_stages, num_states, num_actions, 2 + m)
        term_vals = jnp.concatenate([jnp.ones((k, 1), errors.dtype), errors[-1]], axis=-1)
        term_stats = jnp.zeros((num_states, 2 + m), errors.dtype).at[s_all[-1]].add(term_vals)
        per_state = jnp.concatenate([stats.sum(axis=2), term_stats[None]], axis=0)  # (H+1, S, 2+M)
        counts, crit_sums = per_state[..., 0], per_state[..., 1:]
        actor_tab = stats[..., 1] - mu * per_state[:-1, :, 1][..., None]  # sum_k delta (e_a - mu), (H, S, A)
        crit_inc = features.project(crit_sums)  # (H+1, X, C)
        actor_inc = features.project(actor_tab)  # (H, X, A)
        # episodes whose features are active: n_hj = sum_s counts_h(s) 1[phi_hj(s) != 0]
        active = features.project_active(counts)
        crit_inc, actor_inc = _combine(crit_inc, active, k, visits), _combine(actor_inc, active[:-1], k, visits)
        critics = critics + a_n * crit_inc
        theta = jnp.clip(theta + b_n * actor_inc, -config.theta_bound, config.theta_bound)
    else:  # "samples": per visited row
        onehot_a = jax.nn.one_hot(batch.actions, num_actions, dtype=errors.dtype)  # (H, K, A)
        if features.one_hot:
            if visits:
                counts = jnp.zeros((num_stages + 1, num_states), errors.dtype).at[hh, s_all].add(1.0)
                weight = 1.0 / counts[hh, s_all]  # (H+1, K)
            else:
                weight = jnp.full(s_all.shape, 1.0 / k, errors.dtype)
            critics = critics.at[hh, s_all].add(a_n * weight[..., None] * errors)
            rows = theta[hh[:-1], s_all[:-1]]  # (H, K, A)
            mu_rows = jax.nn.softmax(rows, axis=-1)
            grad = (weight[:-1] * delta)[..., None] * (onehot_a - mu_rows)
            theta = theta.at[hh[:-1], s_all[:-1]].add(b_n * grad)
            theta = theta.at[hh[:-1], s_all[:-1]].set(
                jnp.clip(theta[hh[:-1], s_all[:-1]], -config.theta_bound, config.theta_bound)
            )
        else:
            mu_rows = jax.nn.softmax(jnp.einsum("hkx,hxa->hka", phi_all[:-1], theta), axis=-1)
            crit_inc = jnp.einsum("hkx,hkc->hxc", phi_all, errors)
            actor_inc = jnp.einsum("hkx,hka->hxa", phi_all[:-1], delta[..., None] * (onehot_a - mu_rows))
            active = jnp.sum((phi_all != 0).astype(errors.dtype), axis=1)  # (H+1, X)
            crit_inc, actor_inc = _combine(crit_inc, active, k, visits), _combine(actor_inc, active[:-1], k, visits)
            critics = critics + a_n * crit_inc
            theta = jnp.clip(theta + b_n * actor_inc, -config.theta_bound, config.theta_bound)

    if not paper:  # the improved actor replaces the paper's (algo3) increment computed above
        s_h, a_h = s_all[:-1], batch.actions
        if form == "table":  # stats already hold n_h(s, a) and sum delta per cell
            inc = _advantage_increment_from_sums(stats[..., 0], stats[..., 1], features, k, visits)
            theta = jnp.clip(train_state.theta + b_n * inc, -config.theta_bound, config.theta_bound)
        elif features.one_hot:  # scatter straight into the visited rows
            weight, count_s = _advantage_weights(s_h, a_h, delta)
            theta = train_state.theta.at[hh[:-1], s_h, a_h].add(b_n * weight / (count_s if visits else k))
            theta = theta.at[hh[:-1], s_h].set(
                jnp.clip(theta[hh[:-1], s_h], -config.theta_bound, config.theta_bound)
            )
        else:
            weight, _ = _advantage_weights(s_h, a_h, delta)
            inc = jnp.einsum("hkx,hka->hxa", phi_all[:-1], weight[..., None] * jax.nn.one_hot(a_h, num_actions, dtype=weight.dtype))
            active = jnp.sum((phi_all[:-1] != 0).astype(weight.dtype), axis=1)  # (H, X)
            inc = _combine(inc, active, k, visits)
            theta = jnp.clip(train_state.theta + b_n * inc, -config.theta_bound, config.theta_bound)

    # --- multipliers (algo7), penalties nu = -lambda
    critic_estimate = jnp.mean(vals[0, :, 1:], axis=0)  # mean_k w_0^T phi_0(s_0), (M,)
    episode_costs = batch.episode_costs  # (K, M)
    if paper:
        violation = critic_estimate
        critic_costs = critic_estimate + thresholds
    else:
        violation = jnp.mean(episode_costs, axis=0) - thresholds
        critic_costs = critic_estimate
    gain = 0.0 if paper else config.multiplier_gain
    new_nu, integral = common.pi_multiplier_step(
        train_state.multiplier_integral, violation, c_n, config.multiplier_max, gain
    )

    new_state = train_state.replace(
        theta=theta, critics=critics, multipliers=new_nu, multiplier_integral=integral, step=n + 1,
        theta_average=None if train_state.theta_average is None else (
            config.policy_averaging * train_state.theta_average + (1.0 - config.policy_averaging) * theta
        ),
    )
    metrics = {
        "reward": jnp.mean(batch.episode_rewards),
        "costs": jnp.mean(episode_costs, axis=0),
        "multipliers": new_nu,
        "critic_costs": critic_costs,
    }
    return new_state, metrics


def policy_table(train_state: TrainState, env, params=None) -> Array:
    """The learner's non-stationary policy mu_h(s, a) for every stage and state, (H, S, A).

    Feed it to ``fhc_jax.evaluate(env.to_cmdp(params), table)`` for exact judgement. A batched
    state (leading seed axes on ``theta``) gives a batched table.
    """
    del params
    feats = feat.build(train_state.features, env)
    fn = lambda th: jax.nn.softmax(_logits_table(th, feats), axis=-1)
    for _ in range(train_state.theta.ndim - 3):
        fn = jax.vmap(fn)
    return fn(reported_theta(train_state))


def reported_theta(train_state: TrainState) -> Array:
    """The actor parameters of the learner's reported policy: the Polyak average when the state
    keeps one, else theta."""
    return train_state.theta if train_state.theta_average is None else train_state.theta_average


#: re-exported from :mod:`fhc_jax.algos.common` (where every learner's ``policy`` finds it)
observation_to_index = common.observation_to_index


def policy(train_state: TrainState, env, params=None) -> Callable[[Array, Array, Array], Array]:
    """The learner's policy as ``act(key, observation, h) -> action`` for
    :func:`fhc_jax.rollout` (samples mu_h(s, .) of :func:`policy_table`; one uniform per call).

    The returned function closes over the policy table: pass it to ``rollout`` un-jitted, or
    build it inside the jitted function that calls ``rollout``.
    """
    return common.table_policy(policy_table(train_state, env, params), env)


def make_learner(env, params, config: Config) -> common.Learner:
    """FH-Constrained bound to ``env`` as iteration-level functions (:class:`common.Learner`);
    :func:`make_train` scans them, :mod:`fhc_jax.experiment` runs them in chunks.

    Raises:
        ValueError: a config of another learner, or features that do not fit the environment.
    """
    if not isinstance(config, Config):
        raise ValueError(f"make_train: config must be a fh_constrained.Config, found {type(config).__name__}")
    feats = feat.build(config.features, env)
    model = common.tabular_model(env, params)
    cmdp = env.to_cmdp(params)
    thresholds = jnp.asarray(cmdp.thresholds, jnp.float32)
    evaluate_policy = common.exact_evaluator(cmdp)
    num_states = env.num_states
    form = resolve_update_form(config, num_states)
    k = config.episodes_per_iteration

    def sample_one_hot(theta_h, s):
        return jnp.cumsum(jax.nn.softmax(theta_h[s], axis=-1), axis=-1)

    def sample_features(xs, s):
        theta_h, phi_h = xs
        return jnp.cumsum(jax.nn.softmax(phi_h[s] @ theta_h, axis=-1), axis=-1)

    def init_fn(key: Array, cfg: Config) -> common.Carry:
        k_init, k_loop = jax.random.split(key)
        return common.Carry(state=init(k_init, env, params, cfg), key=k_loop)

    def step_fn(carry: common.Carry, cfg: Config) -> tuple[common.Carry, dict[str, Array]]:
        st = carry.state
        key, k_roll = jax.random.split(carry.key)
        mu = None
        if form == "table":
            mu = jax.nn.softmax(_logits_table(st.theta, feats), axis=-1)
            batch = common.rollout_policy_table(k_roll, model, mu, k)
        elif feats.one_hot:
            batch = common.rollout_tabular(k_roll, model, st.theta, sample_one_hot, k)
        else:
            phis = feats.all_stages(env.horizon)[: env.horizon]
            batch = common.rollout_tabular(k_roll, model, (st.theta, phis), sample_features, k)
        st, m = update(st, batch, feats, thresholds, cfg, policy=mu)
        return common.Carry(state=st, key=key), m

    def table_fn(st: TrainState) -> Array:
        return jax.nn.softmax(_logits_table(reported_theta(st), feats), axis=-1)

    return common.Learner(
        config=config,
        init=init_fn,
        step=step_fn,
        evaluate=lambda carry: evaluate_policy(table_fn(carry.state)),
        policy_table=table_fn,
    )


def make_train(env, params, config: Config) -> Callable[..., TrainResult]:
    """Build ``train(key, hparams=None) -> TrainResult``: rollouts and updates for
    ``config.num_iterations`` iterations in one ``lax.scan`` (one jit).

    ``jax.jit(jax.vmap(train))(keys)`` trains several seeds in one compiled call;
    ``jax.vmap(train, in_axes=(None, 0))(key, common.stack([cfg1, cfg2]))`` sweeps numeric
    hyperparameters without recompiling (static fields must equal ``config``'s).

    Args:
        env: a tabular environment (``GridWorld``, ``TabularEnv``): needs ``to_cmdp``.
        params: its params.
        config: :class:`Config`.
    Returns:
        ``train``; its result's ``metrics.exact`` holds the exact reward and costs
        (``fhc_jax.evaluate``) of the policy every ``config.eval_every`` updates.
    Raises:
        ValueError: features that do not fit the environment.
    """
    learner = make_learner(env, params, config)

    def train(key: Array, hparams: Config | None = None) -> TrainResult:
        state, metrics, exact = common.run(learner, key, hparams)
        return TrainResult(state=state, metrics=Metrics(exact=exact, **metrics))

    return train
