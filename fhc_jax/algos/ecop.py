"""e-COP: Episodic Constrained Optimization of Policies (Agnihotri, Jain, Ramachandran, Singla,
NeurIPS 2024, arXiv 2406.09563), for finite-horizon tabular CMDPs, compiled as one program.

Per-stage (non-stationary) policies as the paper intends: the actors pi_h = softmax(f_{theta_h})
and the critics [V_h, V_{C,h}] are two :class:`~fhc_jax.algos.core.networks.Stacked` MLP families
with a leading stage axis, on the observation o_h(s) (by default one-hot states on the
tabular path, standardised). Per iteration: roll out K episodes, finite-horizon GAE per
signal (exact terminal values, no bootstrapping past H), the per-stage multipliers lambda_t
by the paper's eq. (7), then ``num_epochs`` full-batch Adam steps on the paper's loss (8) for
every stage t at once:

    L~_t = -sum_{h>=t} S_h(theta_h) + sum_i [ lambda_{t,i} max(0, Psi_{t,i})
           + beta/2 (max(0, Psi_{t,i} + lambda_{t,i}/beta)^2 - lambda_{t,i}^2/beta^2) ],
    Psi_{t,i} = sum_{h>=t} S^C_{h,i}(theta_h) + J_Ci(pi_old) - d_i,

with S_h the PPO clipped reward surrogate of stage h and S^C_h the pessimistic clipped cost
surrogate; stage t's parameters take the gradient of L~_t (the tail h > t enters Psi_t as a
constant, the current iterate: a Jacobi form of Algorithm 2's backward sweep). The damping
factor beta grows by ``damping_growth`` while the paper's secondary cost C(pi_k) >= c_k.
Equations, the pieces tested against a loop reference, and every open choice (and where the
printed paper is inconsistent): docs/algorithms/ecop.md. The surrogates and the penalty are in
:mod:`fhc_jax.algos.ecop_losses`, the constants derived from the environment (``Setup``) in
:mod:`fhc_jax.algos.ecop_setup`.

**Two paths.** Environments with a tabular exact model take the tabular path (the policy
tabulated over every (h, s), the model's fast rollout); any other (or ``path="sampled"``)
rolls out through ``fhc_jax.rollout`` and applies the networks to the recorded observations
("env": the environment's own observation, standardised over the states that 64 episodes of
the uniform policy visit), judged by Monte-Carlo. On box action spaces (continuous actions,
always the sampled path) the actors are diagonal Gaussians (:mod:`fhc_jax.algos.core.distributions`:
the network computes the mean, the log-std is a free per-stage vector or a second output,
``Config.log_std``; the environment clips the actions): the ratios rho of both surrogates,
the entropy and the KL are the head's (``head.log_prob``, ``head.entropy``, ``head.kl``), the
rest of the algorithm is unchanged.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from fhc_jax.algos import ppo_lagrangian
from fhc_jax.algos.core import multipliers, scaffold
from fhc_jax.algos.core.distributions import check_initial_log_std
from fhc_jax.algos.core.evaluation import observation_policy
from fhc_jax.algos.core.hyperparameters import hyperparameters, numeric, static
from fhc_jax.algos.core.networks import ACTIVATIONS, NetworkConfig, NetworkSpec
from fhc_jax.algos.core.returns import advantages_and_targets
from fhc_jax.algos.core.tabular_rollout import Batch, batch_from_trajectory, rollout_policy_table
from fhc_jax.algos.ecop_losses import jacobi_objective, penalty_weight, stage_surrogates, tail_sums, update_damping
from fhc_jax.algos.ecop_setup import OBSERVATIONS, Setup, actor_critic_networks, policy_setup, setup
from fhc_jax.rollout import rollout as rollout_episodes

Array = jax.Array

MULTIPLIER_METHODS = ("paper", "geometric")


@hyperparameters
class Config(NetworkConfig):
    """Hyperparameters of e-COP (what each default is for: docs/algorithms/ecop.md).

    Static fields:
        num_iterations: N updates. episodes_per_iteration: K episodes per update.
        observation: network input, "xy", "xyt" or "one_hot" (encoders the environment must
            support; tabular path), "env" (the environment's own observation; the only input
            of the sampled path), or "auto" (the default: "one_hot" on the tabular path of an
            environment that supports it, else "env";
            :func:`~fhc_jax.algos.core.paths.resolve_observation`).
        width, depth, activation: the per-stage MLPs (actor and critic).
        shared_stages: one actor and one critic network for all stages, on the input with
            h / H appended (:class:`~fhc_jax.algos.core.networks.SharedAcrossStages`), in place of
            per-stage networks: every stage's samples train the same weights (stage t's surrogate
            still takes the gradient of L~_t).
        normalize_inputs: standardise the inputs over all (stage, state) (on environments
            without tabular states: over the observations of 64 episodes of the uniform policy).
        num_epochs: full-batch optimizer steps per update (fewer after KL early stopping).
        eval_every: exact evaluation every this many updates (0: initial and final only).
        eval_episodes: episodes of each Monte-Carlo evaluation on environments without a
            tabular exact model.
        path: "tabular" (the exact model's fast rollout and input tables), "sampled"
            (``fhc_jax.rollout`` and the recorded observations, any environment) or "auto"
            (default: "tabular" where the environment has a tabular exact model).
        log_std, initial_log_std: box action spaces only: the form of the Gaussian head's
            log-std and log(sigma / half range) of the initial policy
            (:class:`~fhc_jax.algos.core.networks.NetworkSpec`).
        multiplier_method: the multiplier law: "paper" (eq. (7), per-stage lambda_t with the
            step beta) or "geometric" (one lambda per constraint for every stage, the geometric
            law FH-Constrained and PPO-Lagrangian share:
            :func:`~fhc_jax.algos.core.multipliers.budget_geometric_step`, no proportional term
            on the violation itself: the damped penalty of eq. (8) is one). Default
            "geometric" on every path (docs/algorithms/ecop.md, Departures 11).

    Numeric fields (pytree leaves; ``vmap`` over them without recompiling):
        actor_lr, critic_lr: Adam step sizes. max_grad_norm: gradient clipping per family.
        clip_eps: the clip range epsilon of both surrogates. gae_lambda: GAE lambda.
        entropy_coef: entropy bonus per stage. target_kl: KL early stopping threshold per
            epoch (0 disables it).
        damping: the initial damping factor beta (> 0) in relative units: the step of the
            multiplier update (7) on the relative violation Psi / u (u the violation unit,
            :mod:`fhc_jax.algos.core.multipliers`, "Units"), beta / u in the loss (8). damping_growth: p >= 1, beta
            <- min(beta_max, p beta) when
            C(pi_k) >= c_k. damping_max: beta_max.
        initial_multiplier: lambda_t at n = 0. multiplier_max: lambda_t in [0, multiplier_max].
        multiplier_step, multiplier_relative_gain: c and K_r of the "geometric" law.
        mean_bound_coef: c_b >= 0, box action spaces only: the actor loss adds
            c_b sum_h mean_k sum_d max(|m_d| - 1, 0)^2, a penalty on the Gaussian means beyond the
            box (m in units of the half range, :mod:`fhc_jax.algos.core.distributions`), per stage
            as the stage's surrogates: beyond it every sample is clipped to the same action and
            the advantages cannot pull it back.
        budget_tightening: f in [0, 1]: the multiplier steers to a threshold that tightens
            from the largest episode cost the signals allow to alpha over the first f N
            updates (:func:`fhc_jax.algos.core.multipliers.tightened_thresholds`), so a control
            task is learned before its budget binds.
        output_scale: initial scale of the actors' output layer (small: near-uniform policy).
        policy_averaging: reported policy = actor with the Polyak average of its parameters
            (weight beta_avg; 0 reports the last iterate). Rollouts use the current actor.
    """

    num_iterations: int = static(200, low=1)
    episodes_per_iteration: int = static(1024, low=1)
    observation: str = static("auto", choices=("auto", *OBSERVATIONS))
    width: int = static(16, low=1)
    depth: int = static(2, low=0)
    activation: str = static("tanh", choices=tuple(ACTIVATIONS))
    shared_stages: bool = static(False)
    normalize_inputs: bool = static(True)
    num_epochs: int = static(16, low=1)
    actor_lr: float = numeric(1e-2, low=0.0, low_open=True)
    critic_lr: float = numeric(3e-3, low=0.0, low_open=True)
    max_grad_norm: float = numeric(10.0, low=0.0, low_open=True)
    clip_eps: float = numeric(0.2, low=0.0, high=1.0)
    gae_lambda: float = numeric(0.97, low=0.0, high=1.0)
    entropy_coef: float = numeric(0.0, low=0.0)
    target_kl: float = numeric(0.0, low=0.0)
    damping: float = numeric(0.25, low=0.0, low_open=True, high="damping_max")
    damping_growth: float = numeric(1.0, low=1.0)
    damping_max: float = numeric(0.25, low=0.0, low_open=True)
    initial_multiplier: float = numeric(0.0, low=0.0, high="multiplier_max")
    multiplier_max: float = numeric(100.0, low=0.0, low_open=True)
    multiplier_method: str = static("geometric", choices=MULTIPLIER_METHODS)
    multiplier_step: float = numeric(0.1, low=0.0, high=1.0)
    multiplier_relative_gain: float = numeric(0.5, low=0.0, high=1.0)
    budget_tightening: float = numeric(0.0, low=0.0, high=1.0)
    mean_bound_coef: float = numeric(0.0, low=0.0)
    output_scale: float = numeric(0.1, low=0.0, low_open=True)
    policy_averaging: float = numeric(0.0, low=0.0, high=1.0, high_open=True)

    def __post_init__(self):
        check_initial_log_std(self)


@struct.dataclass
class TrainState(scaffold.NetworkState):
    """Learner state (H stages, M constraints); network leaves carry a leading stage axis H.

    Attributes:
        actor, critic: per-stage actor params and critic params ([V_h, V_C,h], 1 + M outputs).
        opt_state: optax state of both families. actor_average: Polyak average of the actor.
        multipliers: lambda_{t,i} >= 0, (H, M). multiplier_state: its update's state.
        damping: beta, (). step: updates done, int32 ().
    """

    actor: Any
    critic: Any
    opt_state: Any
    actor_average: Any
    multipliers: Array
    multiplier_state: multipliers.MultiplierState
    damping: Array
    step: Array


@struct.dataclass
class Metrics(ppo_lagrangian.Metrics):
    """Per-iteration metrics (N iterations, M constraints): PPO-Lagrangian's
    (:class:`fhc_jax.algos.ppo_lagrangian.Metrics`: reward, costs, approx_kl, entropy,
    clip_fraction, value_loss, epochs, evaluation) and

    Attributes:
        multipliers: mean over stages of lambda_t after the update, (N, M).
        penalty_weight: mean over stages of the weight of stage t's cost surrogate in the
            gradient of L~_t, lambda_t 1[Psi_t > 0] + max(0, lambda_t + beta Psi_t), at the
            last epoch, (N, M) (the effective multiplier, comparable with nu*).
        damping: beta after the update, (N,).
    """

    penalty_weight: Array
    damping: Array


def _optimizer(cfg: Config) -> optax.GradientTransformation:
    def chain(lr):
        return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(lr))

    return optax.multi_transform(
        {"actor": chain(cfg.actor_lr), "critic": chain(cfg.critic_lr)}, {"actor": "actor", "critic": "critic"}
    )


def _multiplier_update(cfg: Config, beta: Array) -> multipliers.MultiplierUpdate:
    """Eq. (7), lambda_t <- max(0, lambda_t + beta Psi_t(pi_old, pi_old)), clipped at
    multiplier_max (the family's anti-windup rule); the H x M multipliers as one vector
    ("paper"); or the geometric law's M multipliers, one per constraint for every stage
    ("geometric": its floor and noise come with each batch, so this instance serves ``init``)."""
    if cfg.multiplier_method == "geometric":
        return multipliers.geometric(cfg.multiplier_step, cfg.multiplier_max, 0.0, 1.0)
    return multipliers.projected_gradient(beta, cfg.multiplier_max)


def init(key: Array, setup: Setup, config: Config) -> TrainState:
    """Per-stage networks each from its own key; lambda_t = initial_multiplier; beta = damping."""
    network = NetworkSpec.of(config, observation=setup.observation)
    actor_net, critic_net = actor_critic_networks(
        setup.horizon, setup.head, setup.thresholds.shape[0], network, config.output_scale
    )
    x = jnp.zeros(setup.shift.shape if setup.sampled else setup.obs_table.shape[-1:], jnp.float32)
    ka, kc = jax.random.split(key)
    actor, critic = actor_net.init(ka, x), critic_net.init(kc, x)
    h, m = setup.horizon, setup.thresholds.shape[0]
    lam = jnp.full((h, m), config.initial_multiplier, jnp.float32)
    return TrainState(
        actor=actor,
        critic=critic,
        opt_state=_optimizer(config).init({"actor": actor, "critic": critic}),
        actor_average=actor,
        multipliers=lam,
        multiplier_state=_multiplier_update(config, config.damping).init(
            m if config.multiplier_method == "geometric" else h * m, config.initial_multiplier
        ),
        damping=jnp.asarray(config.damping, jnp.float32),
        step=jnp.zeros((), jnp.int32),
        network=network,
    )


def table_logits(train_state: TrainState, setup: Setup) -> Array:
    """Logits of the reported policy (the Polyak-averaged actor) at every (h, s), (H, S, A)."""
    return setup.actor.apply(train_state.actor_average, setup.obs_table[:-1])


def observation_outputs(train_state: TrainState, setup: Setup, observation: Array, h: Array) -> Array:
    """The reported policy's outputs at one raw observation of stage h (sampled path):
    logits (A,), or a Gaussian head's [m, s] (2d,)."""
    return setup.actor.apply_stage(train_state.actor_average, setup.normalize(observation), h)


def rollout(key: Array, train_state: TrainState, setup: Setup, config: Config) -> Batch:
    """K episodes under the current actor: tabulated once on the tabular path (its logits ride
    in ``behaviour``), applied to each observation through ``fhc_jax.rollout`` on the sampled
    one."""
    if setup.sampled:

        def out_fn(obs, h):
            return setup.actor.apply_stage(train_state.actor, setup.normalize(obs), h)

        act = observation_policy(out_fn, setup.head)
        return batch_from_trajectory(rollout_episodes(key, setup.env, setup.params, act, config.episodes_per_iteration))
    table = setup.actor.apply(train_state.actor, setup.obs_table[:-1])
    batch = rollout_policy_table(key, setup.model, jax.nn.softmax(table, axis=-1), config.episodes_per_iteration)
    return batch.replace(behaviour=table)


def update(
    train_state: TrainState, batch: Batch, key: Array | None, setup: Setup, config: Config
) -> tuple[TrainState, dict[str, Array]]:
    """One e-COP update (module docstring) from K episodes of ``train_state``'s actor.
    Deterministic given the batch (``key`` unused; full-batch epochs)."""
    del key
    cfg, st = config, train_state
    num_stages = batch.actions.shape[0]
    head = setup.head
    if setup.sampled:  # the networks at the recorded observations, (H, K, D)
        obs = setup.normalize(batch.observations[:-1])
        at_samples = lambda out: out
        out_old = setup.actor.apply(st.actor, obs)  # (H, K, outputs): the behaviour policy
        logp_old = head.log_prob(out_old, batch.actions)
        entropy = jnp.mean(head.entropy(out_old))

        def policy_terms(actor):
            out = setup.actor.apply(actor, obs)
            # per stage, as the stage's surrogates: sum_h mean_k of the excess
            bound = jnp.sum(jnp.mean(head.mean_excess(out), axis=1)) if hasattr(head, "mean_excess") else 0.0
            return head.log_prob(out, batch.actions), head.entropy(out), bound

        def new_kl(actor):
            return jnp.mean(head.kl(out_old, setup.actor.apply(actor, obs)))
    else:  # tabulated over every (h, s), read at the visited states (discrete actions)
        hs = jnp.arange(num_stages, dtype=jnp.int32)[:, None]
        s_h = batch.states[:-1]
        obs = setup.obs_table[:-1]
        at_samples = lambda table: table[hs, s_h]
        logits_old = batch.behaviour if batch.behaviour is not None else setup.actor.apply(st.actor, obs)
        logp_rows = jax.nn.log_softmax(logits_old, axis=-1)[hs, s_h]  # (H, K, A)
        logp_old = jnp.take_along_axis(logp_rows, batch.actions[..., None], axis=-1)[..., 0]
        entropy = -jnp.mean(jnp.sum(jnp.exp(logp_rows) * logp_rows, axis=-1))

        def policy_terms(actor):
            lp_rows = jax.nn.log_softmax(setup.actor.apply(actor, obs), axis=-1)[hs, s_h]
            logp = jnp.take_along_axis(lp_rows, batch.actions[..., None], axis=-1)[..., 0]
            return logp, -jnp.sum(jnp.exp(lp_rows) * lp_rows, axis=-1), 0.0

        def new_kl(actor):
            new_logp = jax.nn.log_softmax(setup.actor.apply(actor, obs), axis=-1)[hs, s_h]
            return jnp.mean(jnp.sum(jnp.exp(logp_rows) * (logp_rows - new_logp), axis=-1))

    values = at_samples(setup.critic.apply(st.critic, obs)) * setup.value_scale  # (H, K, 1+M)
    adv, targets = advantages_and_targets(batch, values, 1.0, cfg.gae_lambda)
    adv = adv - jnp.mean(adv, axis=1, keepdims=True)  # centred per stage (E_pi_old[A_h] = 0)
    adv_r, adv_c = adv[..., 0], adv[..., 1:]
    targets = targets / setup.value_scale

    # eq. (7): Psi_t(pi_old, pi_old) = sum_{h>=t} mean_k A_C,h + J_C(pi_old) - d  (= J_C - d, centred),
    # J_C with the safety margin; the step beta counts relative violations (multipliers, "Units"):
    # lambda <- lambda + beta Psi / u with u the violation unit, i.e. beta / u in the loss (8)
    units = multipliers.violation_units(setup.thresholds, num_stages)  # (M,)
    thresholds = multipliers.tightened_thresholds(  # the budget tightens to alpha over f N updates
        setup.thresholds, setup.value_scale[1:], st.step, cfg.num_iterations, cfg.budget_tightening
    )
    violation = multipliers.relative_violation(
        batch.episode_costs, thresholds, units, cfg.eval_episodes, cfg.eval_episodes * cfg.eval_chunks_max
    )
    excess = units * violation
    psi_old = tail_sums(jnp.mean(adv_c, axis=1)) + excess
    m = excess.shape[0]
    if cfg.multiplier_method == "geometric":  # one multiplier per constraint, every stage's
        nu, mult_state = multipliers.budget_geometric_step(
            st.multiplier_state,
            violation,
            batch.episode_costs,
            thresholds,
            units,
            num_stages,
            cfg.multiplier_step,
            cfg.multiplier_max,
            0.0,
            cfg.multiplier_relative_gain,
        )
        nu = jnp.broadcast_to(nu, (num_stages, m))
    else:
        nu, mult_state = _multiplier_update(cfg, st.damping).update(st.multiplier_state, (psi_old / units).reshape(-1))
    lam, beta = nu.reshape(num_stages, m), st.damping / units

    def loss_fn(net):
        logp, ent, beyond = policy_terms(net["actor"])  # (H, K) each; the Gaussian means beyond the box
        s_r, s_c = stage_surrogates(logp, logp_old, adv_r, adv_c, cfg.clip_eps)
        actor_loss = jacobi_objective(s_r, s_c, excess, lam, beta) - cfg.entropy_coef * jnp.sum(jnp.mean(ent, 1))
        actor_loss = actor_loss + cfg.mean_bound_coef * beyond
        v = at_samples(setup.critic.apply(net["critic"], obs))
        value_loss = jnp.mean(jnp.sum((v - targets) ** 2, axis=-1))
        log_ratio = logp - logp_old
        psi = tail_sums(s_c) + excess
        aux = {
            "kl": jnp.mean(jnp.exp(log_ratio) - 1.0 - log_ratio),
            "clip_fraction": jnp.mean((jnp.abs(jnp.exp(log_ratio) - 1.0) > cfg.clip_eps).astype(jnp.float32)),
            "value_loss": value_loss,
            "weight": jnp.mean(penalty_weight(psi, lam, beta), axis=0),
        }
        return actor_loss + value_loss, aux

    tx = _optimizer(cfg)

    def epoch(carry, _):
        net, opt, active = carry
        grads, aux = jax.grad(loss_fn, has_aux=True)(net)
        updates, new_opt = tx.update(grads, opt, net)
        new_net = optax.apply_updates(net, updates)
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(active, a, b), new, old)
        stop = (cfg.target_kl > 0) & (aux["kl"] > cfg.target_kl)
        # KL early stopping stops the actor; the critics take every epoch
        new_net = {"actor": keep(new_net["actor"], net["actor"]), "critic": new_net["critic"]}
        inner = dict(new_opt.inner_states)
        inner["actor"] = keep(new_opt.inner_states["actor"], opt.inner_states["actor"])
        new_opt = new_opt._replace(inner_states=inner)
        return (new_net, new_opt, active & ~stop), {**aux, "done": active.astype(jnp.float32)}

    net0 = {"actor": st.actor, "critic": st.critic}
    (net, opt, _), ep = jax.lax.scan(epoch, (net0, st.opt_state, jnp.asarray(True)), None, length=cfg.num_epochs)
    epochs = jnp.sum(ep["done"])
    last = jnp.maximum(epochs.astype(jnp.int32) - 1, 0)
    per_epoch = lambda x: jnp.sum(x * ep["done"]) / jnp.maximum(epochs, 1.0)

    approx_kl = new_kl(net["actor"])
    new_beta = update_damping(st.damping, lam * units, excess / units, cfg.damping_growth, cfg.damping_max)
    avg = jax.tree.map(
        lambda a, b: cfg.policy_averaging * a + (1.0 - cfg.policy_averaging) * b, st.actor_average, net["actor"]
    )
    new_state = st.replace(
        actor=net["actor"],
        critic=net["critic"],
        opt_state=opt,
        actor_average=avg,
        multipliers=lam,
        multiplier_state=mult_state,
        damping=new_beta,
        step=st.step + 1,
    )
    metrics = {
        "multipliers": jnp.mean(lam, axis=0),
        "penalty_weight": ep["weight"][last],
        "damping": new_beta,
        "approx_kl": approx_kl,
        "entropy": entropy,
        "clip_fraction": per_epoch(ep["clip_fraction"]),
        "value_loss": per_epoch(ep["value_loss"]),
        "epochs": epochs,
    }
    return new_state, metrics


ALGORITHM = scaffold.Algorithm(
    name="ecop",
    config_type=Config,
    metrics_type=Metrics,
    setup=setup,
    init=init,
    rollout=rollout,
    update=update,
    table_logits=table_logits,
    policy_setup=policy_setup,
    observation_outputs=observation_outputs,
    action_head=lambda setup: setup.head,
    small_budget_units=True,
)
make_learner, make_train, policy_table, policy = scaffold.interface(ALGORITHM)
