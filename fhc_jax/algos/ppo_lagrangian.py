"""PPO-Lagrangian: the safe-RL baseline of OmniSafe / Safe-Policy-Optimization with a learned
Lagrange multiplier or a PID-Lagrangian controller, for finite-horizon CMDPs, compiled as one
program per training run.

ONE stationary network for all stages, pi(a | x) = softmax(f_theta(x)) on the encoded
observation x ("xy": the paper's Env 1, "xyt": Env 2, "one_hot", "env": the environment's own,
"env_t": with h / H appended); a stationary policy on "xy" cannot follow a non-stationary
optimum, which is the paper's point. On box action spaces the actor is a diagonal Gaussian
(:mod:`fhc_jax.algos.core.distributions`: the network computes the mean, the log-std is a free
vector or a second output, ``Config.log_std``; the environment clips the actions), trained on
the sampled path (box environments have no tabular model) with the same clipped surrogate:
log-probabilities, entropies and KLs are the head's. Environments with a tabular exact model take the tabular
fast path (the networks tabulated over the distinct inputs); any other (or ``path="sampled"``)
rolls out through ``fhc_jax.rollout`` and applies the networks to the recorded observations
(:mod:`fhc_jax.algos.core.sampled_inputs`), O(H K) per update either way. Per iteration: roll out K
episodes, finite-horizon GAE per signal with the exact terminal values as V_H (no
bootstrapping past H), the multipliers from the batch's mean episode cost
(:mod:`fhc_jax.algos.core.multipliers`: ``optimizer_ascent``, ``pid`` or, the default with a
tabular model, ``geometric`` on the violation relative to the budget, whose integral moves by a
fraction of its own size; each integral is clipped to [0, multiplier_max], the anti-windup rule
of every fhc_jax learner; OmniSafe clips it only at 0, and the two agree while the integral
stays below the bound), then ``num_epochs`` x
``num_minibatches`` clipped-surrogate steps with KL early stopping. The per-iteration
equations, the multiplier laws and the tuning notes are in docs/algorithms/ppo_lagrangian.md.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from fhc_jax.algos.core import multipliers, scaffold
from fhc_jax.algos.core.distributions import DiagonalGaussian, check_initial_log_std, config_head
from fhc_jax.algos.core.evaluation import EvaluationMetrics, observation_policy
from fhc_jax.algos.core.hyperparameters import EnvDefault, hyperparameters, numeric, resolve_env_defaults, static
from fhc_jax.algos.core.networks import ACTIVATIONS, NetworkConfig, NetworkSpec
from fhc_jax.algos.core.paths import judged_exactly, resolve_observation, resolve_path
from fhc_jax.algos.core.returns import advantages_and_targets
from fhc_jax.algos.core.sampled_inputs import critic_value_scale, with_stage
from fhc_jax.algos.core.tabular_rollout import (
    Batch,
    batch_from_trajectory,
    rollout_policy_table,
    tabular_model,
)
from fhc_jax.algos.ppo_losses import (  # noqa: F401 (public here)
    clipped_surrogate,
    lagrangian_advantage,
    normalise_advantages,
    penalised_advantage,
)
from fhc_jax.algos.ppo_networks import OBSERVATIONS, Setup, _actor_rows, _modules, _optimizer  # noqa: F401 (public here)
from fhc_jax.algos.ppo_networks import sampled_setup as _sampled_setup
from fhc_jax.rollout import rollout as rollout_episodes

Array = jax.Array

MULTIPLIER_METHODS = ("lagrangian", "pid", "geometric")
MULTIPLIER_OPTIMIZERS = ("adam", "sgd")
UPDATE_FORMS = ("auto", "table", "samples")
ADVANTAGE_NORMALIZATIONS = ("separate", "lagrangian", "none")


@hyperparameters
class Config(NetworkConfig):
    """Hyperparameters of PPO-Lagrangian, for a short run: 32 x 32 tanh MLPs (actor and each
    critic), 4 epochs x 4 minibatches at actor lr 1e-2, a critic that sees the stage
    (``critic_time``: bootstrapping is then unbiased in the stage, so ``gae_lambda = 0.95``
    works) and a multiplier law on the relative violation
    (``fhc_jax.algos.core.multipliers.relative_violation``), so it serves any units: the
    geometric law on tabular tasks (steps of its own size: it reaches a steep trade-off's
    penalty within the run) and PID-Lagrangian on the sampled path. docs/algorithms/
    ppo_lagrangian.md says what each default is for.

    Static fields (set shapes or code paths; part of the compilation cache key):
        num_iterations: N iterations (rollout + update). episodes_per_iteration: K.
        observation: network input, "xy" (paper Env 1), "xyt" (Env 2), "one_hot" (encoders the
            environment must support, tabular path only), "env" (the environment's own
            observation), "env_t" (with h / H appended), or "auto" (the default: "xy" on the
            tabular path of a spatial environment, else "env";
            :func:`~fhc_jax.algos.core.paths.resolve_observation`).
        width, depth, activation: the MLPs (actor, reward critic, cost critic).
        num_epochs, num_minibatches: passes over the batch per iteration, minibatches per
            epoch (at most H K).
        multiplier_method: "lagrangian" (learned multiplier), "pid" (PID-Lagrangian) or
            "geometric" (:func:`multiplier_step`); multiplier_optimizer: "adam" or "sgd"
            ("lagrangian"); pid_delay: d ("pid"). Default (``EnvDefault``): "geometric" on
            environments with a tabular exact model, "pid" elsewhere.
        normalize_advantages: "separate" (OmniSafe: standardise A_r, centre A_c, then
            penalise: :func:`penalised_advantage`), "lagrangian" (standardise the Lagrangian's
            advantage A_r - nu . A_c: :func:`lagrangian_advantage`, so nu weighs advantages on
            the CMDP's scale) or "none" (raw GAE, penalised). Default (``EnvDefault``):
            "separate" on environments with a tabular exact model, "lagrangian" elsewhere.
        anneal_lr: decay the actor and critic learning rates linearly to 0 over the run.
        update_form: "auto", "table" or "samples" (speed only; module docstring).
        eval_every: exact evaluation every this many iterations (0: initial and final only).
        eval_episodes: episodes of each Monte-Carlo evaluation where there is no tabular exact model.
        path: "tabular" (the exact model's fast rollout and input tables), "sampled"
            (``fhc_jax.rollout``, recorded observations; any environment) or "auto" (tabular
            where the environment has a tabular exact model).
        critic_time: the critics also receive h / H when the actor's input does not depend
            on the stage (a standard variance reduction: the finite-horizon value depends on
            the stage even under a stationary policy); the actor still sees ``observation``.
        log_std, initial_log_std: box action spaces only: the form of the Gaussian head's
            log-std and log(sigma / half range) of the initial policy
            (:class:`~fhc_jax.algos.core.networks.NetworkSpec`).

    Numeric fields (pytree leaves: ``jax.vmap`` over them without recompiling):
        actor_lr, critic_lr: Adam step sizes. max_grad_norm: clipping per network.
        clip_eps: PPO clip range. entropy_coef: c_ent. target_kl: KL early stopping threshold
            per epoch (0 disables it).
        gamma: discount (1: the finite-horizon criterion). gae_lambda: GAE lambda.
        multiplier_lr: step size of the "lagrangian" multiplier optimizer.
        initial_multiplier: nu at n = 0 ("pid": the initial integral), in training units.
        multiplier_max: nu_max, penalties (and the PID integral) lie in [0, nu_max].
        pid_kp, pid_ki, pid_kd: PID gains on the relative violation (C - alpha) / d and the
            relative cost C / d (:mod:`fhc_jax.algos.core.multipliers`, "Units").
        pid_p_ema, pid_d_ema: EMA factors a_p, a_d.
        multiplier_step, multiplier_relative_gain: c and K_r of the "geometric" law
            (:func:`fhc_jax.algos.core.multipliers.budget_geometric_step`, with K_p = pid_kp).
        mean_bound_coef: c_b >= 0, box action spaces only: the actor loss adds
            c_b mean(sum_d max(|m_d| - 1, 0)^2), a penalty on the Gaussian mean beyond the box
            (m in units of the half range, :mod:`fhc_jax.algos.core.distributions`): beyond it
            every sample is clipped to the same action and the advantages cannot pull it back.
        budget_tightening: f in [0, 1]: the multiplier steers to a threshold that tightens
            from the largest episode cost the signals allow to alpha over the first f N
            iterations (:func:`fhc_jax.algos.core.multipliers.tightened_thresholds`), so a
            control task is learned before its budget binds. Default (``EnvDefault``): 0
            (alpha from the start) on environments with a tabular exact model, 0.5 elsewhere.
    """

    num_iterations: int = static(250, low=1)
    episodes_per_iteration: int = static(64, low=1)
    observation: str = static("auto", choices=("auto", *OBSERVATIONS))
    width: int = static(32, low=1)
    depth: int = static(2, low=0)
    activation: str = static("tanh", choices=ACTIVATIONS)
    num_epochs: int = static(4, low=1)
    num_minibatches: int = static(4, low=1)
    multiplier_method: str = static(EnvDefault(tabular="geometric", non_tabular="pid"), choices=MULTIPLIER_METHODS)
    multiplier_optimizer: str = static("adam", choices=MULTIPLIER_OPTIMIZERS)
    pid_delay: int = static(10, low=1)
    normalize_advantages: str = static(
        EnvDefault(tabular="separate", non_tabular="lagrangian"), choices=ADVANTAGE_NORMALIZATIONS
    )
    anneal_lr: bool = static(True)
    update_form: str = static("auto", choices=UPDATE_FORMS)
    critic_time: bool = static(True)
    actor_lr: float = numeric(1e-2, low=0.0, low_open=True)
    critic_lr: float = numeric(1e-3, low=0.0, low_open=True)
    clip_eps: float = numeric(0.2, low=0.0, high=1.0)
    gamma: float = numeric(1.0, low=0.0, high=1.0)
    gae_lambda: float = numeric(0.95, low=0.0, high=1.0)
    max_grad_norm: float = numeric(0.5, low=0.0, low_open=True)
    entropy_coef: float = numeric(0.01, low=0.0)
    target_kl: float = numeric(0.02, low=0.0)
    multiplier_lr: float = numeric(0.01, low=0.0, low_open=True)
    initial_multiplier: float = numeric(0.0, low=0.0, high="multiplier_max")
    multiplier_max: float = numeric(100.0, low=0.0, low_open=True)
    pid_kp: float = numeric(1.0, low=0.0)
    pid_ki: float = numeric(0.25, low=0.0)
    pid_kd: float = numeric(0.0, low=0.0)
    pid_p_ema: float = numeric(0.9, low=0.0, high=1.0)
    pid_d_ema: float = numeric(0.95, low=0.0, high=1.0)
    multiplier_step: float = numeric(0.1, low=0.0, high=1.0)
    multiplier_relative_gain: float = numeric(0.5, low=0.0, high=1.0)
    mean_bound_coef: float = numeric(1.0, low=0.0)
    budget_tightening: float = numeric(EnvDefault(tabular=0.0, non_tabular=0.5), low=0.0, high=1.0)

    def __post_init__(self):
        check_initial_log_std(self)


@struct.dataclass
class TrainState(scaffold.NetworkState):
    """Learner state (M constraints).

    Attributes:
        params: ``{"actor", "reward_critic", "cost_critic"}`` flax network parameters.
        opt_state: optax state of the three networks' optimizers.
        multipliers: penalties nu^(k) >= 0 used in the latest update, (M,).
        multiplier_state: state of :func:`multiplier_update` (PID terms or optimizer state).
        step: iterations done, n, int32 ().
    """

    params: dict[str, Any]
    opt_state: Any
    multipliers: Array
    multiplier_state: multipliers.MultiplierState
    step: Array


@struct.dataclass
class Metrics:
    """Per-iteration training metrics (N iterations, M constraints).

    Attributes:
        reward, costs: mean total episode reward (N,) and costs (N, M) of the K episodes.
        multipliers: penalties nu used by the iteration's update, (N, M).
        approx_kl: mean KL(pi_old || pi_new) over the batch's samples after the update, (N,).
        entropy: mean policy entropy over the batch's samples before the update (the
            differential entropy of the Gaussian on box action spaces: it may be negative), (N,).
        clip_fraction, value_loss: fraction of samples with |rho - 1| > eps and mean critic
            loss (normalised units), over the executed epochs, (N,).
        epochs: epochs executed (fewer than ``num_epochs`` after KL early stopping), (N,).
        evaluation: the reported policy's reward and costs every ``eval_every`` updates, exact on
            tabular exact models and Monte-Carlo estimates elsewhere (:class:`EvaluationMetrics`).
    """

    reward: Array
    costs: Array
    multipliers: Array
    approx_kl: Array
    entropy: Array
    clip_fraction: Array
    value_loss: Array
    epochs: Array
    evaluation: EvaluationMetrics


# ----------------------------------------------------------------------------- the multiplier law


def multiplier_update(config: Config) -> multipliers.MultiplierUpdate:
    """The config's multiplier update (module docstring): ``optimizer_ascent`` with Adam or
    SGD ("lagrangian"), ``pid`` with the config's gains, EMAs and delay ("pid"), or the
    ``geometric`` law ("geometric"; its floor and noise come with each batch:
    :func:`multiplier_step`, so this instance serves ``init`` only)."""
    if config.multiplier_method == "geometric":
        return multipliers.geometric(config.multiplier_step, config.multiplier_max, config.pid_kp, 1.0)
    if config.multiplier_method == "lagrangian":
        optimizer = optax.adam if config.multiplier_optimizer == "adam" else optax.sgd
        return multipliers.optimizer_ascent(optimizer(config.multiplier_lr), config.multiplier_max)
    return multipliers.pid(
        config.multiplier_max,
        config.pid_kp,
        config.pid_ki,
        config.pid_kd,
        p_ema=config.pid_p_ema,
        d_ema=config.pid_d_ema,
        delay=config.pid_delay,
    )


def multiplier_step(
    config: Config,
    state: multipliers.MultiplierState,
    violation: Array,
    episode_costs: Array,
    thresholds: Array,
    units: Array,
    horizon: int,
) -> tuple[Array, multipliers.MultiplierState]:
    """One multiplier update from a batch: violation (M,) relative to d (units, (M,)), the
    batch's episode costs (K, M), the thresholds it steers to (M,); (nu (M,), new state)."""
    if config.multiplier_method == "geometric":
        return multipliers.budget_geometric_step(
            state,
            violation,
            episode_costs,
            thresholds,
            units,
            horizon,
            config.multiplier_step,
            config.multiplier_max,
            config.pid_kp,
            config.multiplier_relative_gain,
        )
    return multiplier_update(config).update(state, violation, jnp.mean(episode_costs, axis=0) / units)


# ----------------------------------------------------------------------------- networks and setup


def setup(env, params, config: Config) -> Setup:
    """Input tables, networks, rollout model, thresholds and value scales of ``env``.

    Raises:
        ValueError: an observation the environment does not support, more minibatches than
            samples per iteration (H K), ``path="tabular"`` without a tabular exact model, or
            non-flat observations (:func:`~fhc_jax.algos.core.paths.resolve_path`).
    """
    config = config.replace(observation=resolve_observation(env, config.path, config.observation))
    sampled = resolve_path("ppo_lagrangian", env, config.path, config.observation)
    spec = NetworkSpec.of(config)
    h = env.horizon
    if config.num_minibatches > h * config.episodes_per_iteration:
        raise ValueError(
            f"ppo_lagrangian: Config.num_minibatches must be <= H K = {h * config.episodes_per_iteration} samples "
            f"per iteration, found {config.num_minibatches}"
        )
    if sampled:
        return _sampled_setup(env, params, spec, config)
    table, rows, per_stage = _actor_rows(env, params, config.observation)
    s = env.num_states
    if config.critic_time and not per_stage:
        # the critics also see h / H (the actor's input does not depend on the stage)
        t = np.broadcast_to((np.arange(h, dtype=np.float32) / h)[:, None, None], (h, s, 1))
        critic_rows, critic_per_stage = np.concatenate([table, t], axis=-1).reshape(h * s, -1), True
    else:
        critic_rows, critic_per_stage = rows, per_stage
    n_samples = h * config.episodes_per_iteration

    def pick(u: int) -> str:
        if config.update_form != "auto":
            return config.update_form
        return "table" if config.num_minibatches * u <= n_samples else "samples"

    model = tabular_model(env, params)
    head = config_head(env, spec)  # Categorical(A): box environments have no tabular path
    return Setup(
        modules=_modules(head, env.num_constraints, spec),
        rows=jnp.asarray(rows, jnp.float32),
        per_stage=per_stage,
        critic_rows=jnp.asarray(critic_rows, jnp.float32),
        critic_per_stage=critic_per_stage,
        horizon=h,
        num_states=s,
        num_actions=env.num_actions,
        form=pick(rows.shape[0]),
        critic_form=pick(critic_rows.shape[0]),
        model=model,
        thresholds=jnp.asarray(env.thresholds(params), jnp.float32),
        value_scale=jnp.asarray(critic_value_scale(env, params)),
        observation=config.observation,
        head=head,
    )


def policy_setup(env, params, train_state: TrainState) -> Setup:
    """What :func:`table_logits` (and :func:`observation_outputs` where there is no tabular exact
    model) needs: the actor and its inputs, from the train state's observation and architecture
    (its :class:`~fhc_jax.algos.core.networks.NetworkSpec`)."""
    spec = train_state.network
    if resolve_path("ppo_lagrangian", env, "auto", spec.observation):
        return _sampled_setup(env, params, spec, None)
    _, rows, per_stage = _actor_rows(env, params, spec.observation)
    rows = jnp.asarray(rows, jnp.float32)
    head = config_head(env, spec)
    return Setup(
        _modules(head, env.num_constraints, spec),
        rows,
        per_stage,
        rows,
        per_stage,
        env.horizon,
        env.num_states,
        env.num_actions,
        form="table",
        critic_form="table",
        head=head,
    )


# ----------------------------------------------------------------------------- the algorithm


def init(key: Array, setup: Setup, config: Config) -> TrainState:
    """Initial state: LeCun-normal MLPs (actor head scaled by 0.01: near-uniform policy),
    fresh optimizer states, nu = initial_multiplier."""
    keys = jax.random.split(key, 3)
    if setup.sampled:
        x, xc = jnp.zeros((1, setup.dims[0]), jnp.float32), jnp.zeros((1, setup.dims[1]), jnp.float32)
    else:
        x, xc = setup.rows[:1], setup.critic_rows[:1]
    inputs = {"actor": x, "reward_critic": xc, "cost_critic": xc}
    net_params = {
        name: setup.modules[name].init(k, inputs[name])
        for name, k in zip(("actor", "reward_critic", "cost_critic"), keys)
    }
    m = setup.thresholds.shape[0]
    nu = jnp.broadcast_to(jnp.asarray(config.initial_multiplier, jnp.float32), (m,))
    return TrainState(
        params=net_params,
        opt_state=_optimizer(config).init(net_params),
        multipliers=nu,
        multiplier_state=multiplier_update(config).init(m, config.initial_multiplier),
        step=jnp.zeros((), jnp.int32),
        network=NetworkSpec.of(config, observation=setup.observation),
    )


def table_logits(train_state: TrainState, setup: Setup) -> Array:
    """The stationary network's logits per stage and state, f_theta(x_h(s)), (H, S, A)."""
    return setup.logits_table(train_state.params["actor"])


def observation_outputs(train_state: TrainState, setup: Setup, observation: Array, h: Array) -> Array:
    """The actor's outputs at one raw observation (D,) of stage h, (``head.num_outputs``,):
    the reported policy's logits (A,), or the Gaussian's [m, s] (2d,) on box action spaces."""
    x = with_stage(observation, h, setup.horizon) if setup.observation == "env_t" else observation.astype(jnp.float32)
    return setup.modules["actor"].apply(train_state.params["actor"], x)


def rollout(key: Array, train_state: TrainState, setup: Setup, config: Config) -> Batch:
    """K episodes from the tabulated policy; the logits table is kept in ``Batch.behaviour``
    (the update's pi_old). On the sampled path: ``fhc_jax.rollout`` with the actor applied to
    each observation (the update recomputes pi_old at the recorded observations)."""
    if setup.sampled:
        act = observation_policy(lambda obs, h: observation_outputs(train_state, setup, obs, h), setup.action_head)
        return batch_from_trajectory(rollout_episodes(key, setup.env, setup.params, act, config.episodes_per_iteration))
    table = table_logits(train_state, setup)
    batch = rollout_policy_table(key, setup.model, jax.nn.softmax(table, axis=-1), config.episodes_per_iteration)
    return batch.replace(behaviour=table)


def _tree_where(flag: Array, new: Any, old: Any) -> Any:
    return jax.tree.map(lambda a, b: jnp.where(flag, a, b), new, old)


def update(
    train_state: TrainState, batch: Batch, key: Array, setup: Setup, config: Config
) -> tuple[TrainState, dict[str, Array]]:
    """One PPO-Lagrangian update (module docstring) from K episodes collected under
    ``train_state``'s policy (``batch.behaviour``, when present, is its logits table);
    ``key`` draws the minibatch shuffles. On the sampled path the log-probabilities, entropies
    and KL are the action head's (``setup.action_head``: softmax, or the Gaussian of box
    actions); the tabular path's softmax arithmetic is unchanged. Returns (state at n + 1, metrics dict:
    multipliers (M,), approx_kl (), entropy (), clip_fraction (), value_loss (),
    epochs ())."""
    cfg = resolve_env_defaults(config, not setup.sampled or judged_exactly(setup.env))
    st, p, thresholds = train_state, train_state.params, setup.thresholds
    head = setup.action_head
    num_stages, k = batch.actions.shape[:2]
    n_samples, m = num_stages * k, thresholds.shape[0]
    if setup.sampled:  # the inputs themselves, (H, K, D); the head's log-probabilities (any action space)
        rows, crows = setup.sample_inputs(batch.observations[:-1])
        out_old = setup.apply("actor", p["actor"], rows, False)  # (H, K, O)
        logp_old = head.log_prob(out_old, batch.actions)
        entropy = jnp.mean(head.entropy(out_old))
    else:
        logits_old = batch.behaviour if batch.behaviour is not None else setup.logits_table(p["actor"])
        logp_table = jax.nn.log_softmax(logits_old, axis=-1)  # (H, S, A)
        hs = jnp.broadcast_to(jnp.arange(num_stages, dtype=jnp.int32)[:, None], (num_stages, k))
        s_h = batch.states[:-1]
        rows = setup.row_index(hs, s_h)  # actor input rows, (H, K)
        crows = setup.row_index(hs, s_h, critic=True)  # critic input rows, (H, K)
        logp_rows = logp_table[hs, s_h]  # (H, K, A)
        logp_old = jnp.take_along_axis(logp_rows, batch.actions[..., None], axis=-1)[..., 0]
        entropy = -jnp.mean(jnp.sum(jnp.exp(logp_rows) * logp_rows, axis=-1))

    # --- critics at the visited states (real units) and GAE with exact terminal values
    value_table = not setup.sampled and setup.critic_rows.shape[0] <= n_samples
    values = (
        jnp.concatenate(
            [
                setup.apply("reward_critic", p["reward_critic"], crows, value_table),
                setup.apply("cost_critic", p["cost_critic"], crows, value_table),
            ],
            axis=-1,
        )
        * setup.value_scale
    )  # (H, K, 1+M)
    adv, targets = advantages_and_targets(batch, values, cfg.gamma, cfg.gae_lambda)

    # --- multipliers from the batch's mean episode costs (before the policy update)
    units = multipliers.violation_units(thresholds, setup.horizon)  # relative violation (multipliers, "Units")
    thresholds = multipliers.tightened_thresholds(  # the budget tightens to alpha over f N iterations
        thresholds, setup.value_scale[1:], st.step, cfg.num_iterations, cfg.budget_tightening
    )
    violation = multipliers.relative_violation(
        batch.episode_costs, thresholds, units, cfg.eval_episodes, cfg.eval_episodes * cfg.eval_chunks_max
    )
    nu, multiplier_state = multiplier_step(
        cfg, st.multiplier_state, violation, batch.episode_costs, thresholds, units, setup.horizon
    )

    adv_r, adv_c = adv[..., 0], adv[..., 1:]
    if cfg.normalize_advantages == "lagrangian":
        adv_pi = lagrangian_advantage(adv_r, adv_c, nu)
    else:
        if cfg.normalize_advantages == "separate":
            adv_r, adv_c = normalise_advantages(adv_r, adv_c)
        adv_pi = penalised_advantage(adv_r, adv_c, nu)
    data = {
        "rows": rows.reshape((n_samples,) + rows.shape[2:]),
        "crows": crows.reshape((n_samples,) + crows.shape[2:]),
        "actions": batch.actions.reshape((n_samples,) + batch.actions.shape[2:]),
        "logp_old": logp_old.reshape(-1),
        "adv": adv_pi.reshape(-1),
        "targets": (targets / setup.value_scale).reshape(n_samples, 1 + m),
    }

    frac = 1.0 - st.step.astype(jnp.float32) / cfg.num_iterations if cfg.anneal_lr else 1.0
    tx = _optimizer(cfg, frac)
    table, critic_table = setup.form == "table", setup.critic_form == "table"
    mb_size = n_samples // cfg.num_minibatches

    def loss_fn(net, mb):
        out = setup.apply("actor", net["actor"], mb["rows"], table)
        if setup.sampled:  # the head's distribution (softmax, or the Gaussian of box actions)
            logp, ent = head.log_prob(out, mb["actions"]), head.entropy(out)
        else:
            lg = jax.nn.log_softmax(out, axis=-1)
            logp = jnp.take_along_axis(lg, mb["actions"][:, None], axis=-1)[:, 0]
            ent = -jnp.sum(jnp.exp(lg) * lg, axis=-1)
        surrogate = clipped_surrogate(logp, mb["logp_old"], mb["adv"], cfg.clip_eps)
        actor_loss = -jnp.mean(surrogate) - cfg.entropy_coef * jnp.mean(ent)
        if isinstance(head, DiagonalGaussian):  # box actions: the mean stays in the box
            actor_loss = actor_loss + cfg.mean_bound_coef * jnp.mean(head.mean_excess(out))
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

    (net, opt, _), ep = jax.lax.scan(epoch, (p, st.opt_state, jnp.asarray(True)), jax.random.split(key, cfg.num_epochs))
    epochs = jnp.sum(ep["done"])
    per_epoch = lambda x: jnp.sum(x * ep["done"]) / jnp.maximum(epochs, 1.0)

    if setup.sampled:
        approx_kl = jnp.mean(head.kl(out_old, setup.apply("actor", net["actor"], rows, False)))
    else:
        new_logp = jax.nn.log_softmax(setup.logits_table(net["actor"]), axis=-1)[hs, s_h]  # (H, K, A)
        approx_kl = jnp.mean(jnp.sum(jnp.exp(logp_rows) * (logp_rows - new_logp), axis=-1))

    new_state = st.replace(
        params=net, opt_state=opt, multipliers=nu, multiplier_state=multiplier_state, step=st.step + 1
    )
    metrics = {
        "multipliers": nu,
        "approx_kl": approx_kl,
        "entropy": entropy,
        "clip_fraction": per_epoch(ep["clip_fraction"]),
        "value_loss": per_epoch(ep["value_loss"]),
        "epochs": epochs,
    }
    return new_state, metrics


ALGORITHM = scaffold.Algorithm(
    name="ppo_lagrangian",
    config_type=Config,
    metrics_type=Metrics,
    setup=setup,
    init=init,
    rollout=rollout,
    update=update,
    table_logits=table_logits,
    policy_setup=policy_setup,
    observation_outputs=observation_outputs,
    update_keys=1,
    action_head=lambda setup: setup.action_head,
    small_budget_units=True,
)
make_learner, make_train, policy_table, policy = scaffold.interface(ALGORITHM)
