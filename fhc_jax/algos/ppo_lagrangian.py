"""PPO-Lagrangian: the safe-RL baseline of OmniSafe / Safe-Policy-Optimization, with a
learned Lagrange multiplier or a PID-Lagrangian controller, for finite-horizon tabular CMDPs,
compiled as one program per training run.

**Policy and inputs.** ONE stationary network for all stages: pi(a | x) = softmax(f_theta(x))
over the A actions, where x is the encoded observation chosen by ``Config.observation``:
"xy" (the grid coordinates, the paper's "Env 1"), "xyt" (coordinates and h / H, "Env 2") or
"one_hot" (tabular state index, for small test CMDPs). A stationary policy on "xy" cannot
follow a non-stationary optimum: that is the paper's point, not a defect of the baseline.

**Per iteration** (K episodes, H stages, M constraints; everything undiscounted by default):

1. Tabulate pi_h(s, .) = softmax(f_theta(x_h(s))) for all (h, s) (one batched forward pass)
   and roll out K episodes from the table (:func:`fhc_jax.algos.common.rollout_policy_table`).
2. Critics. Separate networks: a reward critic V_r(x) (1 output) and a cost critic V_c(x)
   (M outputs, one per constraint). With ``critic_time`` (default) their input is x plus h / H
   when x itself does not depend on h ("xy", "one_hot"): the finite-horizon value depends on
   the stage even for a stationary policy; the actor still sees only x. Finite horizon, no bootstrapping past H: the value of the
   final state is the exact terminal signal, V_H = r_H(s_H) and g_H^(k)(s_H).
3. GAE per signal u in {r, g^(1..M)} (Schulman et al. 2016), fixed horizon:
   delta_h = u_h + gamma V_{h+1} - V_h,  A_h = delta_h + gamma lam A_{h+1},  A_H = 0,
   critic targets R_h = A_h + V_h (:func:`fhc_jax.algos.common.finite_horizon_gae`).
4. Multipliers nu^(k) >= 0 from the batch's mean episode cost C^(k) (terminal cost included),
   BEFORE the policy update (as OmniSafe does), see below.
5. Advantage normalisation (``normalize_advantages``, OmniSafe's convention): A_r is
   standardised over the H K samples, (A_r - mean) / (std + 1e-8); each A_c^(k) is only centred.
   Penalised advantage (OmniSafe/SafePO form, summed over constraints):
       A_h = (A_r,h - sum_k nu^(k) A_c,h^(k)) / (1 + sum_k nu^(k)).
6. ``num_epochs`` passes over the H K samples, each shuffled into ``num_minibatches``
   minibatches (``lax.scan`` over both; the last (H K mod num_minibatches) samples of each
   shuffle are left out). On each minibatch, with rho = pi_theta(a|x) / pi_old(a|x), the loss
       L = -mean[min(rho A, clip(rho, 1 - eps, 1 + eps) A)] - c_ent mean[H(pi_theta(.|x))]
           + mean[(V_r(x)/B_r - R_r/B_r)^2] + mean[sum_k (V_c^(k)(x)/B_c^(k) - R_c^(k)/B_c^(k))^2]
   is minimised by one step of an optax chain clip_by_global_norm(max_grad_norm) + adam,
   separately for the actor, the reward critic and the cost critic (each network is clipped on
   its own, as in OmniSafe). The critics predict in units of the return bound
   B = H max|u_h| + max|u_H| of their signal (V(x) = B net(x)): a fixed rescaling of the
   targets so that they are O(1) whatever the horizon. Learning rates decay linearly to 0 over
   the run when ``anneal_lr``: lr_n = lr (1 - n / N) at iteration n.
   KL early stopping (``target_kl`` > 0): after each epoch, if the epoch's mean estimate
   KL(pi_old || pi_theta) ~ mean[(rho - 1) - log rho] (taken at each minibatch before its step)
   exceeds target_kl, the remaining epochs of the iteration are skipped (masked).

**Multipliers** (``multiplier_method``), with e^(k)_n = C^(k)_n - alpha^(k) at iteration n:

* ``"lagrangian"`` (Ray et al. 2019; OmniSafe ``Lagrange``): gradient descent on the loss
  -nu (C - alpha) with its own optax optimizer (``multiplier_optimizer``: "adam" or "sgd", step
  ``multiplier_lr``), then projection: nu <- clip(nu + optimizer_step(-(C - alpha)), 0, nu_max).
  With "sgd" this is nu <- clip(nu + lr (C - alpha), 0, nu_max).
* ``"pid"`` (PID-Lagrangian, Stooke et al. 2020, Algorithm 2, with OmniSafe's EMA and delay
  options; initial I_{-1} = initial_multiplier, P_{-1} = D_{-1} = 0):
      I_n = max(0, I_{n-1} + K_I e_n)                                (integral, clamped at 0)
      P_n = a_p P_{n-1} + (1 - a_p) e_n                              (proportional, EMA of e)
      D_n = a_d D_{n-1} + (1 - a_d) C_n                              (EMA of the cost)
      nu_n = clip(K_P P_n + I_n + K_D max(0, D_n - D_{n-d}), 0, nu_max),  D_m = 0 for m < 0,
  with d = ``pid_delay``. Stooke et al.'s exact form is a_p = a_d = 0, d = 1 (then the
  derivative term is (C_n - C_{n-1})^+).

**Sign convention.** As everywhere in fhc_jax, the multipliers are the non-negative penalties
nu^(k) (= -lambda^(k) of the paper). With ``normalize_advantages`` the penalty weighs the
standardised A_r against the centred A_c, so its value is about nu* / std(A_r), not the CMDP
multiplier nu* that ``fhc_jax.solve`` reports; with ``normalize_advantages=False`` it is on the
CMDP's scale.

**Speed** (``update_form``, identical results up to float rounding). The inputs take few
distinct values: S rows when the observation does not depend on h ("xy", "one_hot"), H S rows
otherwise (critics with ``critic_time``: H S rows; each network picks its own form).
``"table"`` applies the networks to those U distinct rows and gathers the
per-sample outputs (autodiff turns the gather into a scatter-add, the same gradient);
``"samples"`` applies them to each minibatch sample. ``"auto"`` picks "table" when
num_minibatches U <= H K.

References: Schulman et al. 2017 (PPO), Schulman et al. 2016 (GAE); Ray, Achiam & Amodei 2019
(PPO-Lagrangian, Safety Gym) and the OmniSafe / Safe-Policy-Optimization implementations;
Stooke, Achiam & Abbeel 2020 (PID-Lagrangian, "Responsive Safety in Reinforcement Learning by
PID Lagrangian Methods").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from fhc_jax.algos import common
from fhc_jax.algos.common import Batch, ExactMetrics, hyperparameters
from fhc_jax.algos.networks import MLP, check_architecture

Array = jax.Array

OBSERVATIONS = ("xy", "xyt", "one_hot")
MULTIPLIER_METHODS = ("lagrangian", "pid")
MULTIPLIER_OPTIMIZERS = ("adam", "sgd")
UPDATE_FORMS = ("auto", "table", "samples")

_STATIC = (
    "num_iterations",
    "episodes_per_iteration",
    "observation",
    "width",
    "depth",
    "activation",
    "num_epochs",
    "num_minibatches",
    "multiplier_method",
    "multiplier_optimizer",
    "pid_delay",
    "normalize_advantages",
    "anneal_lr",
    "update_form",
    "eval_every",
    "critic_time",
)

#: (field, low, high) of the numeric fields that live in a closed interval
_RANGES = (
    ("clip_eps", 0.0, 1.0),
    ("gamma", 0.0, 1.0),
    ("gae_lambda", 0.0, 1.0),
    ("pid_p_ema", 0.0, 1.0),
    ("pid_d_ema", 0.0, 1.0),
)


@hyperparameters(static=_STATIC)
class Config:
    """Hyperparameters of PPO-Lagrangian. Defaults are tuned for the default ``GridWorld``
    (10x10, H = 100, alpha = 25) within about a minute for 5 vmapped seeds on a 2-core CPU;
    see ``benchmarks/ppo_lagrangian.py``. Networks: 32 x 32 tanh MLPs (actor and each critic).
    Tuning notes (default gridworld, "xy"; sweeps over actor_lr, entropy_coef, gae_lambda,
    clip_eps/target_kl, K, and both multiplier methods):

    * Budget: 4 epochs x 4 minibatches per iteration (16 Adam steps on 1600 samples) at
      actor lr 1e-2 learns as fast as the former 8 x 16 steps at 1e-3 on 64 x 64 networks,
      for about 1/4 of the time; K = 256 with fewer iterations was not better.
    * ``critic_time`` (critics see h / H) makes bootstrapping from the critic unbiased in the
      stage, so gae_lambda = 0.95 is usable (it was 1, Monte-Carlo, with a stage-blind critic).
    * Multiplier: the learned ("lagrangian", Adam step 0.01) multiplier spiked early (the
      batch cost crosses alpha while the policy is still diffuse), then the policy collapsed
      into cost-free behaviour and the multiplier decayed to 0; the PI controller (K_P = 0.01,
      K_I = 0.001 on the violation in cost units, K_D = 0) reacts in proportion and does not
      wind up. With entropy_coef = 0.01 the policy keeps entropy ~1.3 nats instead of ~0.4.
    * Even with the multiplier at 0 (unconstrained PPO), the stationary "xy" policy settles
      in low-cost local optima (exact reward ~9-11 at cost ~4-9): rewards sit on isolated
      cells whose fares move every 20 stages, so the constraint is not what holds it back.

    Static fields (set shapes or code paths; part of the compilation cache key):
        num_iterations: N >= 1 iterations (rollout + update).
        episodes_per_iteration: K >= 1 episodes per iteration.
        observation: network input, "xy" (paper Env 1), "xyt" (Env 2) or "one_hot"; must be
            supported by the environment (checked by :func:`make_learner`).
        width, depth, activation: the MLPs (actor, reward critic, cost critic):
            ``depth`` >= 0 hidden layers of ``width`` >= 1 units, activation in
            ``networks.ACTIVATIONS``.
        num_epochs: >= 1 passes over the batch per iteration.
        num_minibatches: >= 1 minibatches per epoch (at most H K).
        multiplier_method: "lagrangian" (learned multiplier) or "pid" (PID-Lagrangian).
        multiplier_optimizer: "adam" or "sgd", the "lagrangian" method's optimizer.
        pid_delay: d >= 1, the derivative term compares the cost EMA with its value d
            iterations earlier.
        normalize_advantages: standardise A_r and centre A_c (OmniSafe); False uses raw GAE.
        anneal_lr: decay the actor and critic learning rates linearly to 0 over the run.
        update_form: "auto", "table" or "samples" (speed only; module docstring).
        eval_every: exact evaluation every this many iterations (0: initial and final only).
        critic_time: the critics also receive h / H when the actor's input does not depend
            on the stage ("xy", "one_hot"); no effect for "xyt". The value of a finite-horizon
            problem depends on the stage even under a stationary policy, so this is a standard,
            legitimate variance reduction for the advantages; the actor (the policy being
            compared) still sees only ``observation``.

    Numeric fields (pytree leaves: ``jax.vmap`` over them without recompiling):
        actor_lr, critic_lr: Adam step sizes (> 0).
        clip_eps: PPO clip range eps in [0, 1].
        gamma: discount in [0, 1] (default 1: the finite-horizon criterion; gamma < 1 changes
            the objective the advantages estimate).
        gae_lambda: GAE lambda in [0, 1].
        max_grad_norm: global-norm gradient clipping per network (> 0).
        entropy_coef: entropy bonus c_ent >= 0.
        target_kl: KL early stopping threshold per epoch (>= 0; 0 disables it).
        multiplier_lr: step size of the "lagrangian" multiplier optimizer (> 0).
        initial_multiplier: nu at n = 0 ("pid": the initial integral), in [0, multiplier_max].
        multiplier_max: nu_max > 0, penalties are projected onto [0, nu_max].
        pid_kp, pid_ki, pid_kd: PID gains (>= 0).
        pid_p_ema, pid_d_ema: EMA factors a_p, a_d in [0, 1] of the error and of the cost.
    """

    num_iterations: int = 250
    episodes_per_iteration: int = 64
    observation: str = "xy"
    width: int = 32
    depth: int = 2
    activation: str = "tanh"
    num_epochs: int = 4
    num_minibatches: int = 4
    multiplier_method: str = "pid"
    multiplier_optimizer: str = "adam"
    pid_delay: int = 10
    normalize_advantages: bool = True
    anneal_lr: bool = True
    update_form: str = "auto"
    eval_every: int = 25
    critic_time: bool = True
    actor_lr: float = 1e-2
    critic_lr: float = 1e-3
    clip_eps: float = 0.2
    gamma: float = 1.0
    gae_lambda: float = 0.95
    max_grad_norm: float = 0.5
    entropy_coef: float = 0.01
    target_kl: float = 0.02
    multiplier_lr: float = 0.01
    initial_multiplier: float = 0.0
    multiplier_max: float = 100.0
    pid_kp: float = 0.01
    pid_ki: float = 0.001
    pid_kd: float = 0.0
    pid_p_ema: float = 0.9
    pid_d_ema: float = 0.95

    def __post_init__(self):
        own = "Config"
        for name, low in (
            ("num_iterations", 1), ("episodes_per_iteration", 1), ("num_epochs", 1),
            ("num_minibatches", 1), ("pid_delay", 1), ("eval_every", 0),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{own}.{name} must be an integer >= {low}, found {v!r}")
        for name, allowed in (
            ("observation", OBSERVATIONS), ("multiplier_method", MULTIPLIER_METHODS),
            ("multiplier_optimizer", MULTIPLIER_OPTIMIZERS), ("update_form", UPDATE_FORMS),
        ):
            v = getattr(self, name)
            if v not in allowed:
                raise ValueError(f"{own}.{name} must be one of {', '.join(map(repr, allowed))}, found {v!r}")
        for name in ("normalize_advantages", "anneal_lr", "critic_time"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{own}.{name} must be True or False, found {getattr(self, name)!r}")
        check_architecture(own, self.width, self.depth, self.activation)
        for name in ("actor_lr", "critic_lr", "max_grad_norm", "multiplier_lr", "multiplier_max"):
            common.check_positive(own, name, getattr(self, name))
        for name in ("entropy_coef", "target_kl", "initial_multiplier", "pid_kp", "pid_ki", "pid_kd"):
            common.check_positive(own, name, getattr(self, name), allow_zero=True)
        for name, low, high in _RANGES:
            common.check_range(own, name, getattr(self, name), low, high)
        mx = common._real(own, "multiplier_max", self.multiplier_max)
        init = common._real(own, "initial_multiplier", self.initial_multiplier)
        if mx is not None and init is not None and np.any(init > mx):
            raise ValueError(
                f"{own}.initial_multiplier must lie in [0, multiplier_max = {common._fmt(mx)}], found {common._fmt(init)}"
            )

    def replace(self, **changes) -> "Config":
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)


@struct.dataclass
class PIDState:
    """State of the PID-Lagrangian controller (M constraints, d = ``pid_delay``).

    Attributes:
        integral: I_n, (M,).
        error_ema: P_n, EMA of the violation C - alpha, (M,).
        cost_ema: D_n, EMA of the mean episode cost, (M,).
        history: ring buffer of the last d values of D (slot n mod d holds D_{n-d} before
            iteration n writes D_n), zeros before they exist, (d, M).
    """

    integral: Array
    error_ema: Array
    cost_ema: Array
    history: Array


@struct.dataclass
class TrainState:
    """Learner state (M constraints); network parameters are flax parameter pytrees.

    Attributes:
        params: ``{"actor", "reward_critic", "cost_critic"}`` network parameters.
        opt_state: optax state of the three networks' optimizers (Adam moments, counts).
        multipliers: penalties nu^(k) >= 0 used in the latest update, (M,).
        multiplier_opt_state: optax state of the "lagrangian" multiplier optimizer.
        pid: :class:`PIDState` ("pid" method; unused otherwise).
        step: iterations done, n, int32 ().
        observation, width, depth, activation: the network spec (static), so that
            :func:`policy_table` and :func:`policy` can rebuild the actor.
    """

    params: dict[str, Any]
    opt_state: Any
    multipliers: Array
    multiplier_opt_state: Any
    pid: PIDState
    step: Array
    observation: str = struct.field(pytree_node=False, default="xy")
    width: int = struct.field(pytree_node=False, default=64)
    depth: int = struct.field(pytree_node=False, default=2)
    activation: str = struct.field(pytree_node=False, default="tanh")


@struct.dataclass
class Metrics:
    """Per-iteration training metrics (N iterations, M constraints); O(N) memory.

    Attributes:
        reward: mean total episode reward of the iteration's K episodes (terminal included), (N,).
        costs: mean total episode cost per constraint, (N, M).
        multipliers: penalties nu used by the iteration's update, (N, M).
        approx_kl: mean KL(pi_old || pi_new) over the batch's samples after the update, (N,).
        entropy: mean policy entropy over the batch's samples before the update, (N,).
        clip_fraction: fraction of samples with |rho - 1| > eps over the executed epochs, (N,).
        value_loss: mean critic loss (reward + cost, normalised units) over the executed
            epochs, (N,).
        epochs: epochs executed (fewer than ``num_epochs`` after KL early stopping), (N,).
        exact: exact reward and costs of the policy every ``eval_every`` iterations.
    """

    reward: Array
    costs: Array
    multipliers: Array
    approx_kl: Array
    entropy: Array
    clip_fraction: Array
    value_loss: Array
    epochs: Array
    exact: ExactMetrics


@struct.dataclass
class TrainResult:
    """What ``train(key)`` returns: the final :class:`TrainState` and the :class:`Metrics`."""

    state: TrainState
    metrics: Metrics


# ----------------------------------------------------------------------------- pieces (tested by hand)


def clipped_surrogate(logp: Array, logp_old: Array, advantages: Array, clip_eps: Array) -> Array:
    """PPO's per-sample clipped objective (to maximise), (B,):
    min(rho A, clip(rho, 1 - eps, 1 + eps) A) with rho = exp(logp - logp_old)."""
    ratio = jnp.exp(logp - logp_old)
    return jnp.minimum(ratio * advantages, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages)


def penalised_advantage(adv_r: Array, adv_c: Array, multipliers: Array) -> Array:
    """(A_r - sum_k nu_k A_c^(k)) / (1 + sum_k nu_k): adv_r (...), adv_c (..., M), nu (M,)."""
    return (adv_r - adv_c @ multipliers) / (1.0 + jnp.sum(multipliers))


def normalise_advantages(adv_r: Array, adv_c: Array) -> tuple[Array, Array]:
    """OmniSafe's normalisation over all samples: standardise A_r (population std + 1e-8),
    centre each A_c^(k). adv_r (...), adv_c (..., M)."""
    r = (adv_r - jnp.mean(adv_r)) / (jnp.std(adv_r) + 1e-8)
    c = adv_c - jnp.mean(adv_c.reshape(-1, adv_c.shape[-1]), axis=0)
    return r, c


def advantages_and_targets(batch: Batch, values: Array, gamma: Array, lam: Array) -> tuple[Array, Array]:
    """GAE for reward and costs over the fixed horizon, exact terminal signals as V_H.

    Args:
        batch: K episodes (:class:`fhc_jax.algos.common.Batch`).
        values: critic values at s_0..s_{H-1}, channels [V_r, V_c^(1..M)], (H, K, 1+M).
        gamma, lam: discount and GAE lambda.
    Returns:
        (advantages (H, K, 1+M), critic targets R_h = A_h + V_h (H, K, 1+M)).
    """
    signals = jnp.concatenate([batch.rewards[..., None], batch.costs], axis=-1)  # (H, K, 1+M)
    terminal = jnp.concatenate([batch.terminal_rewards[:, None], batch.terminal_costs], axis=-1)  # (K, 1+M)
    return common.finite_horizon_gae(signals, jnp.concatenate([values, terminal[None]], axis=0), gamma, lam)


def lagrangian_update(
    multipliers: Array, opt_state: Any, mean_costs: Array, thresholds: Array, cfg: Config
) -> tuple[Array, Any]:
    """One step of the learned multiplier: gradient -(C - alpha) of the loss -nu (C - alpha)
    through the multiplier optimizer, then projection onto [0, multiplier_max]. (M,) arrays."""
    tx = _multiplier_optimizer(cfg)
    updates, opt_state = tx.update(-(mean_costs - thresholds), opt_state, multipliers)
    return common.project_multipliers(multipliers + updates, cfg.multiplier_max), opt_state


def pid_update(pid: PIDState, mean_costs: Array, thresholds: Array, n: Array, cfg: Config) -> tuple[Array, PIDState]:
    """PID-Lagrangian at iteration n (module docstring equations): returns (nu_n (M,), state)."""
    error = mean_costs - thresholds
    integral = jnp.maximum(0.0, pid.integral + cfg.pid_ki * error)
    error_ema = cfg.pid_p_ema * pid.error_ema + (1.0 - cfg.pid_p_ema) * error
    cost_ema = cfg.pid_d_ema * pid.cost_ema + (1.0 - cfg.pid_d_ema) * mean_costs
    slot = jnp.mod(n, pid.history.shape[0])
    derivative = jnp.maximum(0.0, cost_ema - pid.history[slot])
    nu = common.project_multipliers(cfg.pid_kp * error_ema + integral + cfg.pid_kd * derivative, cfg.multiplier_max)
    return nu, PIDState(integral=integral, error_ema=error_ema, cost_ema=cost_ema, history=pid.history.at[slot].set(cost_ema))


# ----------------------------------------------------------------------------- networks and optimizers


def _modules(num_actions: int, num_constraints: int, spec) -> dict[str, MLP]:
    arch = dict(width=spec.width, depth=spec.depth, activation=spec.activation)
    return {
        "actor": MLP(outputs=num_actions, output_scale=0.01, **arch),  # near-uniform initial policy
        "reward_critic": MLP(outputs=1, **arch),
        "cost_critic": MLP(outputs=num_constraints, **arch),
    }


def _optimizer(cfg: Config, lr_scale: Array = 1.0) -> optax.GradientTransformation:
    """clip_by_global_norm + adam per network; learning rates times ``lr_scale``."""

    def chain(lr):
        return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(lr * lr_scale))

    return optax.multi_transform(
        {"actor": chain(cfg.actor_lr), "critic": chain(cfg.critic_lr), "cost": chain(cfg.critic_lr)},
        {"actor": "actor", "reward_critic": "critic", "cost_critic": "cost"},
    )


def _multiplier_optimizer(cfg: Config) -> optax.GradientTransformation:
    if cfg.multiplier_optimizer == "adam":
        return optax.adam(cfg.multiplier_lr)
    return optax.sgd(cfg.multiplier_lr)


def _check_observation(env, observation: str) -> None:
    supported = getattr(env, "supported_observations", ())
    if observation not in supported:
        valid = ", ".join(repr(o) for o in supported if o in OBSERVATIONS)
        raise ValueError(
            f"ppo_lagrangian: Config.observation must be one of {valid} for {type(env).__name__}, found {observation!r}"
        )


@dataclasses.dataclass(frozen=True)
class _Setup:
    """Environment-derived constants of one learner (host-side, built once). The actor and the
    critics may have different inputs (``critic_time``): each network has its own table of
    distinct input rows and its own update form."""

    modules: dict[str, MLP]
    rows: Array  # the U distinct actor inputs, (U, D)
    per_stage: bool  # actor inputs depend on h (U = H S) or not (U = S)
    critic_rows: Array  # the U_c distinct critic inputs, (U_c, D_c)
    critic_per_stage: bool  # critic inputs depend on h
    horizon: int
    num_states: int
    num_actions: int
    value_scale: Array  # B per signal [r, g^(1..M)], (1+M,)
    form: str  # actor: "table" or "samples"
    critic_form: str  # critics: "table" or "samples"

    def row_index(self, hs: Array, states: Array, critic: bool = False) -> Array:
        per_stage = self.critic_per_stage if critic else self.per_stage
        return hs * self.num_states + states if per_stage else states

    def logits_table(self, actor_params: Any) -> Array:
        """f_theta(x_h(s)) for all h < H and s, (H, S, A)."""
        out = self.modules["actor"].apply(actor_params, self.rows)
        if self.per_stage:
            return out.reshape(self.horizon, self.num_states, self.num_actions)
        return jnp.broadcast_to(out, (self.horizon,) + out.shape)

    def apply(self, name: str, params: Any, rows: Array, table: bool) -> Array:
        """Network ``name`` at the inputs with row indices ``rows`` (...,) -> (..., outputs)
        (row indices into ``self.rows`` for the actor, ``self.critic_rows`` for the critics)."""
        mod = self.modules[name]
        inputs = self.rows if name == "actor" else self.critic_rows
        if table:
            return mod.apply(params, inputs)[rows]
        return mod.apply(params, inputs[rows])


def _return_bound(stage: np.ndarray, terminal: np.ndarray, horizon: int) -> float:
    b = horizon * float(np.max(np.abs(stage), initial=0.0)) + float(np.max(np.abs(terminal), initial=0.0))
    return b if b > 0 else 1.0


def _setup(env, params, config: Config, model: common.TabularModel) -> _Setup:
    _check_observation(env, config.observation)
    h, s = env.horizon, env.num_states
    table = np.asarray(common.observation_table(env, params, config.observation))[:h]  # (H, S, D)
    per_stage = not np.array_equal(table, np.broadcast_to(table[:1], table.shape))
    rows = table.reshape(h * s, -1) if per_stage else table[0].reshape(s, -1)
    if config.critic_time and not per_stage:
        # the critics also see h / H (the actor's input does not depend on the stage)
        t = np.broadcast_to((np.arange(h, dtype=np.float32) / h)[:, None, None], (h, s, 1))
        critic_rows, critic_per_stage = np.concatenate([table, t], axis=-1).reshape(h * s, -1), True
    else:
        critic_rows, critic_per_stage = rows, per_stage
    n_samples = h * config.episodes_per_iteration
    if config.num_minibatches > n_samples:
        raise ValueError(
            f"ppo_lagrangian: Config.num_minibatches must be <= H K = {n_samples} samples per iteration, "
            f"found {config.num_minibatches}"
        )

    def pick(u: int) -> str:
        if config.update_form != "auto":
            return config.update_form
        return "table" if config.num_minibatches * u <= n_samples else "samples"

    m = env.num_constraints
    rewards, costs = np.asarray(model.rewards), np.asarray(model.costs)
    scale = [_return_bound(rewards, np.asarray(model.terminal_rewards), h)]
    scale += [_return_bound(costs[k], np.asarray(model.terminal_costs)[k], h) for k in range(m)]
    return _Setup(
        modules=_modules(env.num_actions, m, config),
        rows=jnp.asarray(rows, jnp.float32),
        per_stage=per_stage,
        critic_rows=jnp.asarray(critic_rows, jnp.float32),
        critic_per_stage=critic_per_stage,
        horizon=h,
        num_states=s,
        num_actions=env.num_actions,
        value_scale=jnp.asarray(scale, jnp.float32),
        form=pick(rows.shape[0]),
        critic_form=pick(critic_rows.shape[0]),
    )


# ----------------------------------------------------------------------------- init and update


def _init(key: Array, setup: _Setup, num_constraints: int, cfg: Config) -> TrainState:
    keys = jax.random.split(key, 3)
    inputs = {"actor": setup.rows[:1], "reward_critic": setup.critic_rows[:1], "cost_critic": setup.critic_rows[:1]}
    net_params = {name: setup.modules[name].init(k, inputs[name]) for name, k in zip(("actor", "reward_critic", "cost_critic"), keys)}
    nu = jnp.broadcast_to(jnp.asarray(cfg.initial_multiplier, jnp.float32), (num_constraints,))
    zeros = jnp.zeros((num_constraints,), jnp.float32)
    return TrainState(
        params=net_params,
        opt_state=_optimizer(cfg).init(net_params),
        multipliers=nu,
        multiplier_opt_state=_multiplier_optimizer(cfg).init(nu),
        pid=PIDState(integral=nu, error_ema=zeros, cost_ema=zeros,
                     history=jnp.zeros((cfg.pid_delay, num_constraints), jnp.float32)),
        step=jnp.zeros((), jnp.int32),
        observation=cfg.observation,
        width=cfg.width,
        depth=cfg.depth,
        activation=cfg.activation,
    )


def init(key: Array, env, params, config: Config) -> TrainState:
    """Initial state: LeCun-normal MLPs (actor head scaled by 0.01: near-uniform policy),
    fresh optimizer states, nu = initial_multiplier.

    Raises:
        ValueError: an observation the environment does not support.
    """
    setup = _setup(env, params, config, common.tabular_model(env, params))
    return _init(key, setup, env.num_constraints, config)


def _tree_where(flag: Array, new: Any, old: Any) -> Any:
    return jax.tree.map(lambda a, b: jnp.where(flag, a, b), new, old)


def update(
    train_state: TrainState, batch: Batch, key: Array, setup: _Setup, thresholds: Array, cfg: Config,
    logits: Array | None = None,
) -> tuple[TrainState, dict[str, Array]]:
    """One PPO-Lagrangian update from K episodes collected under ``train_state``'s policy.

    Args:
        train_state: state at iteration n.
        batch: K episodes (time-major :class:`Batch`, tabular state indices).
        key: PRNG key of the minibatch shuffles.
        setup: environment constants (built by :func:`make_learner`).
        thresholds: alpha^(k), (M,).
        cfg: :class:`Config` (numeric leaves may be traced).
        logits: the policy's logits table (H, S, A) if already computed (the rollout's).
    Returns:
        (state at n + 1, metrics dict: reward (), costs (M,), multipliers (M,), approx_kl (),
        entropy (), clip_fraction (), value_loss (), epochs ()).
    """
    num_stages, k = batch.actions.shape
    n_samples = num_stages * k
    m = thresholds.shape[0]
    st = train_state
    p = st.params
    if logits is None:
        logits = setup.logits_table(p["actor"])
    logp_table = jax.nn.log_softmax(logits, axis=-1)  # (H, S, A)
    hs = jnp.broadcast_to(jnp.arange(num_stages, dtype=jnp.int32)[:, None], (num_stages, k))
    s_h = batch.states[:-1]
    rows = setup.row_index(hs, s_h)  # actor input rows, (H, K)
    crows = setup.row_index(hs, s_h, critic=True)  # critic input rows, (H, K)
    logp_rows = logp_table[hs, s_h]  # (H, K, A)
    logp_old = jnp.take_along_axis(logp_rows, batch.actions[..., None], axis=-1)[..., 0]
    entropy = -jnp.mean(jnp.sum(jnp.exp(logp_rows) * logp_rows, axis=-1))

    # --- critics at the visited states (real units) and GAE with exact terminal values
    value_table = setup.critic_rows.shape[0] <= n_samples
    values = jnp.concatenate(
        [setup.apply("reward_critic", p["reward_critic"], crows, value_table),
         setup.apply("cost_critic", p["cost_critic"], crows, value_table)], axis=-1,
    ) * setup.value_scale  # (H, K, 1+M)
    adv, targets = advantages_and_targets(batch, values, cfg.gamma, cfg.gae_lambda)

    # --- multipliers from the batch's mean episode costs (before the policy update)
    mean_costs = jnp.mean(batch.episode_costs, axis=0)  # (M,)
    if cfg.multiplier_method == "lagrangian":
        nu, mult_opt = lagrangian_update(st.multipliers, st.multiplier_opt_state, mean_costs, thresholds, cfg)
        pid = st.pid
    else:
        nu, pid = pid_update(st.pid, mean_costs, thresholds, st.step, cfg)
        mult_opt = st.multiplier_opt_state

    adv_r, adv_c = adv[..., 0], adv[..., 1:]
    if cfg.normalize_advantages:
        adv_r, adv_c = normalise_advantages(adv_r, adv_c)
    data = {
        "rows": rows.reshape(-1),
        "crows": crows.reshape(-1),
        "actions": batch.actions.reshape(-1),
        "logp_old": logp_old.reshape(-1),
        "adv": penalised_advantage(adv_r, adv_c, nu).reshape(-1),
        "targets": (targets / setup.value_scale).reshape(n_samples, 1 + m),
    }

    frac = 1.0 - st.step.astype(jnp.float32) / cfg.num_iterations if cfg.anneal_lr else 1.0
    tx = _optimizer(cfg, frac)
    table, critic_table = setup.form == "table", setup.critic_form == "table"
    mb_size = n_samples // cfg.num_minibatches

    def loss_fn(net, mb):
        lg = jax.nn.log_softmax(setup.apply("actor", net["actor"], mb["rows"], table), axis=-1)
        logp = jnp.take_along_axis(lg, mb["actions"][:, None], axis=-1)[:, 0]
        surrogate = clipped_surrogate(logp, mb["logp_old"], mb["adv"], cfg.clip_eps)
        ent = -jnp.sum(jnp.exp(lg) * lg, axis=-1)
        actor_loss = -jnp.mean(surrogate) - cfg.entropy_coef * jnp.mean(ent)
        v_r = setup.apply("reward_critic", net["reward_critic"], mb["crows"], critic_table)
        v_c = setup.apply("cost_critic", net["cost_critic"], mb["crows"], critic_table)
        t = mb["targets"]
        value_loss = jnp.mean((v_r[:, 0] - t[:, 0]) ** 2) + jnp.mean(jnp.sum((v_c - t[:, 1:]) ** 2, axis=-1))
        log_ratio = logp - mb["logp_old"]
        ratio = jnp.exp(log_ratio)
        aux = {
            "kl": jnp.mean((ratio - 1.0) - log_ratio),
            "clip_fraction": jnp.mean((jnp.abs(ratio - 1.0) > cfg.clip_eps).astype(jnp.float32)),
            "value_loss": value_loss,
        }
        return actor_loss + value_loss, aux

    def minibatch(carry, idx):
        net, opt, active = carry
        mb = jax.tree.map(lambda x: x[idx], data)
        grads, aux = jax.grad(loss_fn, has_aux=True)(net, mb)
        updates, new_opt = tx.update(grads, opt, net)
        new_net = optax.apply_updates(net, updates)
        return (_tree_where(active, new_net, net), _tree_where(active, new_opt, opt), active), aux

    def epoch(carry, key_e):
        net, opt, active = carry
        perm = jax.random.permutation(key_e, n_samples)[: cfg.num_minibatches * mb_size]
        (net, opt, _), aux = jax.lax.scan(minibatch, (net, opt, active), perm.reshape(cfg.num_minibatches, mb_size))
        aux = jax.tree.map(jnp.mean, aux)
        stop = (cfg.target_kl > 0) & (aux["kl"] > cfg.target_kl)
        done = active.astype(jnp.float32)
        return (net, opt, active & ~stop), {**aux, "done": done}

    (net, opt, _), ep = jax.lax.scan(
        epoch, (p, st.opt_state, jnp.asarray(True)), jax.random.split(key, cfg.num_epochs)
    )
    epochs = jnp.sum(ep["done"])
    per_epoch = lambda x: jnp.sum(x * ep["done"]) / jnp.maximum(epochs, 1.0)

    new_logp = jax.nn.log_softmax(setup.logits_table(net["actor"]), axis=-1)[hs, s_h]  # (H, K, A)
    approx_kl = jnp.mean(jnp.sum(jnp.exp(logp_rows) * (logp_rows - new_logp), axis=-1))

    new_state = st.replace(params=net, opt_state=opt, multipliers=nu, multiplier_opt_state=mult_opt,
                           pid=pid, step=st.step + 1)
    metrics = {
        "reward": jnp.mean(batch.episode_rewards),
        "costs": mean_costs,
        "multipliers": nu,
        "approx_kl": approx_kl,
        "entropy": entropy,
        "clip_fraction": per_epoch(ep["clip_fraction"]),
        "value_loss": per_epoch(ep["value_loss"]),
        "epochs": epochs,
    }
    return new_state, metrics


# ----------------------------------------------------------------------------- public API


def _leading_axes(train_state: TrainState) -> int:
    return jnp.ndim(train_state.step)


def policy_table(train_state: TrainState, env, params=None) -> Array:
    """The stationary network's policy tabulated per stage and state, pi_h(s, a) =
    softmax(f_theta(x_h(s)))_a, (H, S, A) (rows of "xy"/"one_hot" inputs repeat over h).

    Feed it to ``fhc_jax.evaluate(env.to_cmdp(params), table)`` for exact judgement. A batched
    state (leading seed axes) gives a batched table.
    """
    params = env.default_params if params is None else params
    rows = common.observation_table(env, params, train_state.observation)[: env.horizon]  # (H, S, D)
    h, s = rows.shape[:2]
    actor = _modules(env.num_actions, env.num_constraints, train_state)["actor"]
    fn = lambda p: jax.nn.softmax(actor.apply(p, rows.reshape(h * s, -1)), axis=-1).reshape(h, s, -1)
    for _ in range(_leading_axes(train_state)):
        fn = jax.vmap(fn)
    return fn(train_state.params["actor"])


def policy(train_state: TrainState, env, params=None) -> Callable[[Array, Array, Array], Array]:
    """The learned policy as ``act(key, observation, h) -> action`` for :func:`fhc_jax.rollout`:
    the actor network applied to the environment's observation (one uniform per call; implements
    the fast protocol ``action_from_uniform``).

    Raises:
        ValueError: the environment's observation encoder differs from the one the network was
            trained on (``train_state.observation``), or a batched (multi-seed) state.
    """
    del params
    name = env.encoder.name
    if name != train_state.observation:
        raise ValueError(
            f"ppo_lagrangian.policy: the network was trained on observation={train_state.observation!r}, but "
            f"{type(env).__name__} emits {name!r}; construct the environment with observation={train_state.observation!r}"
        )
    if _leading_axes(train_state):
        raise ValueError("ppo_lagrangian.policy: pass the state of one seed (index the leading axes first)")
    actor = _modules(env.num_actions, env.num_constraints, train_state)["actor"]
    actor_params = train_state.params["actor"]

    def cdf_of(observation: Array, h: Array) -> Array:
        del h  # stationary
        x = jnp.asarray(observation, jnp.float32)
        return jnp.cumsum(jax.nn.softmax(actor.apply(actor_params, x), axis=-1), axis=-1)

    return common.sampling_policy(cdf_of)


def make_learner(env, params, config: Config) -> common.Learner:
    """PPO-Lagrangian bound to ``env`` as iteration-level functions (:class:`common.Learner`).

    Raises:
        ValueError: a config of another learner, an observation the environment does not
            support, or more minibatches than samples per iteration.
    """
    if not isinstance(config, Config):
        raise ValueError(f"make_train: config must be a ppo_lagrangian.Config, found {type(config).__name__}")
    model = common.tabular_model(env, params)
    setup = _setup(env, params, config, model)
    cmdp = env.to_cmdp(params)
    thresholds = jnp.asarray(cmdp.thresholds, jnp.float32)
    evaluate_policy = common.exact_evaluator(cmdp)
    m = env.num_constraints
    k = config.episodes_per_iteration

    def init_fn(key: Array, cfg: Config) -> common.Carry:
        k_init, k_loop = jax.random.split(key)
        return common.Carry(state=_init(k_init, setup, m, cfg), key=k_loop)

    def step_fn(carry: common.Carry, cfg: Config) -> tuple[common.Carry, dict[str, Array]]:
        key, k_roll, k_upd = jax.random.split(carry.key, 3)
        logits = setup.logits_table(carry.state.params["actor"])
        batch = common.rollout_policy_table(k_roll, model, jax.nn.softmax(logits, axis=-1), k)
        st, metrics = update(carry.state, batch, k_upd, setup, thresholds, cfg, logits=logits)
        return common.Carry(state=st, key=key), metrics

    def table_fn(st: TrainState) -> Array:
        return jax.nn.softmax(setup.logits_table(st.params["actor"]), axis=-1)

    return common.Learner(
        config=config,
        init=init_fn,
        step=step_fn,
        evaluate=lambda carry: evaluate_policy(table_fn(carry.state)),
        policy_table=table_fn,
    )


def make_train(env, params, config: Config) -> Callable[..., TrainResult]:
    """Build ``train(key, hparams=None) -> TrainResult``: ``config.num_iterations`` rollouts
    and PPO updates in one ``lax.scan`` (one jit).

    ``jax.jit(jax.vmap(train))(keys)`` trains several seeds in one compiled call;
    ``jax.vmap(train, in_axes=(None, 0))(key, common.stack([cfg1, cfg2]))`` sweeps numeric
    hyperparameters without recompiling (static fields must equal ``config``'s).

    Args:
        env: a tabular environment (``GridWorld``, ``TabularEnv``) supporting
            ``config.observation``.
        params: its params.
        config: :class:`Config`.
    Returns:
        ``train``; its result's ``metrics`` hold per-iteration mean episode reward and costs,
        the multipliers, and (``metrics.exact``) the exact reward and costs of the policy every
        ``config.eval_every`` iterations.
    """
    learner = make_learner(env, params, config)

    def train(key: Array, hparams: Config | None = None) -> TrainResult:
        state, metrics, exact = common.run(learner, key, hparams)
        return TrainResult(state=state, metrics=Metrics(exact=exact, **metrics))

    return train
