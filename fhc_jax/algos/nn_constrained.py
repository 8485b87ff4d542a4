"""NN-Constrained: the paper's deep variant of FH-Constrained (Section 5), with per-stage neural
actors and critics stacked on one leading stage axis and trained in one jit.

Each network family is ONE stacked module (:mod:`fhc_jax.algos.core.networks`): actors
mu_h(s, .) = softmax(f_{theta_h}(o_h(s))) for h < H, Lagrangian critics V_h and constraint
critics W_h^(k) for h <= H, on the observation o_h(s) ("xy", the paper's input, "xyt" or
"one_hot"; default 2 x 10 tanh MLPs). The losses CL, CCL and AL of the paper are sums over the
stages, so one gradient computation updates every stage by its own loss; three timescales
a(n) > b(n) > c(n) feed optax optimizers.

``Config.variant``: "paper" is the losses verbatim (checked against a per-stage loop reference
in the tests); "improved" (default) uses Monte-Carlo multiplier steps with a proportional
term, lambda-return critic targets and a mirror-descent actor step projected onto the network,
and reports the Polyak average of the actor. ``Config.update_form`` is a speed choice (per
sample or per (stage, state) cell). The losses and the derivation of every departure are in
docs/algorithms/nn_constrained.md.

**Box action spaces** (continuous actions; such environments have no tabular model, so they
take the sampled path): the per-stage actors are diagonal Gaussians
(:mod:`fhc_jax.algos.core.distributions`; the network outputs the mean, the log-std is a free
per-stage vector or a second output, ``Config.log_std``; the environment clips the actions).
The paper variant's AL is the same score-function loss with ``head.log_prob``. The improved
variant's actor step, a per-sample step in logit space for softmax policies, becomes a
per-sample natural-gradient step in the Gaussian's parameters (mean: mu + eta A (a - mu);
log-std: log sigma + eta A ((a - mu)^2 / sigma^2 - 1) / 2) onto which the network regresses
by squared error in its output units (:func:`~fhc_jax.algos.nn_losses.gaussian_sample_targets`):
a departure from the discrete form, documented in docs/algorithms/nn_constrained.md.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from fhc_jax.algos.core import multipliers, scaffold
from fhc_jax.algos.core.distributions import check_initial_log_std
from fhc_jax.algos.core.evaluation import EvaluationMetrics, observation_policy
from fhc_jax.algos.core.hyperparameters import (
    EnvDefault,
    PowerSchedule,
    hyperparameters,
    numeric,
    resolve_env_defaults,
    schedule,
    static,
)
from fhc_jax.algos.core.networks import ACTIVATIONS, NetworkConfig, NetworkSpec
from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.algos.core.policies import polyak_average
from fhc_jax.algos.core.tabular_rollout import (
    Batch,
    batch_from_trajectory,
    rollout_policy_table,
)
from fhc_jax.algos.nn_losses import (
    Networks,
    batch_targets,
    cell_stats,
    critic_predictions,
    critic_values,
    improved_regression,
    sample_losses,
    table_losses,
)
from fhc_jax.algos.nn_setup import Setup, policy_setup, setup
from fhc_jax.algos.nn_setup import resolve_update_form as resolve_update_form  # the learner's API
from fhc_jax.rollout import rollout as rollout_episodes

Array = jax.Array

VARIANTS = ("paper", "improved")
OPTIMIZERS = ("adam", "sgd")
UPDATE_FORMS = ("auto", "table", "samples")
OBSERVATIONS = ("env", "xy", "xyt", "one_hot")


@hyperparameters
class Config(NetworkConfig):
    """Hyperparameters of NN-Constrained. Training runs in units of the signals' magnitudes
    and the multiplier law acts on the relative violation, so the defaults serve tasks in any
    units (what each is for: docs/algorithms/nn_constrained.md, Defaults).

    Static fields:
        num_iterations: updates per training run (N >= 1).
        episodes_per_iteration: K >= 1 trajectories per update.
        observation: network input: "env" (the environment's own observation; on the paper's
            gridworld its default "xy", Env 1), or an encoder of a tabular environment: "xy",
            "xyt", "one_hot" (must be supported by it).
        width, depth, activation: the MLPs (paper: 10, 2, "tanh").
        normalize_inputs: standardise the inputs over all (stage, state) (:func:`input_table`).
        variant: "paper" or "improved" (module docstring).
        optimizer: "adam" or "sgd" (both with the schedules below as learning rates).
        update_form: "auto", "table" or "samples" (speed only, module docstring; the improved
            actor always uses the per-(h, s) table).
        actor_epochs: optimizer steps of the improved actor per update (>= 1).
        shared_stages: one actor, critic and cost-critic network for all stages, on the input
            with h / H appended (:class:`~fhc_jax.algos.core.networks.SharedAcrossStages`), in
            place of the paper's per-stage networks: for long horizons.
        critic_epochs: optimizer steps of the critics per update on the same targets (>= 1; on
            the sampled path only, the tabular path takes one). Default (``EnvDefault``): 1 on
            environments with a tabular exact model, 4 elsewhere.
        eval_every: exact evaluation every this many updates (0: initial and final only).
        eval_episodes: episodes of each Monte-Carlo evaluation on environments without a
            tabular exact model (:func:`fhc_jax.algos.core.evaluation.monte_carlo_evaluator`).
        path: "tabular" rolls out from the exact tabular model and tabulates the networks over
            every (stage, state); "sampled" rolls out through ``fhc_jax.rollout`` and applies
            the networks to the recorded observations (any environment); "auto" (default)
            takes "tabular" where the environment has a tabular exact model.
        check_step_sizes: validate the schedules against Assumption 3 (default True).
        log_std, initial_log_std: box action spaces only: the form of the Gaussian head's
            log-std and log(sigma / half range) of the initial policy
            (:class:`~fhc_jax.algos.core.networks.NetworkSpec`).

    Numeric fields (pytree leaves; ``vmap`` over them without recompiling):
        critic_lr: a(n), learning rate of V and W (fastest).
        actor_lr: b(n), learning rate of the actors (middle).
        multiplier_lr: c(n), multiplier step (slowest): the paper variant's on the relative
            violation (C - alpha) / d, the improved variant's geometric law's
            (:func:`fhc_jax.algos.core.multipliers.geometric`).
        multiplier_max: -P, penalties nu in [0, multiplier_max] (> 0): training units in the
            paper variant, budget units of H / d training units in the improved one
            (:func:`fhc_jax.algos.core.multipliers.budget_unit`).
        initial_multiplier: nu at n = 0, in the same units.
        trace: lambda-return trace of the improved variant, in [0, 1]. Default
            (``EnvDefault``): 0.6 on environments with a tabular exact model, 0.95 elsewhere
            (GAE's usual lambda: the critics of control tasks are too coarse early on for
            short traces).
        budget_tightening: f in [0, 1]: the multiplier steers to a threshold that tightens
            from the largest episode cost the signals allow to alpha over the first f N
            updates (:func:`fhc_jax.algos.core.multipliers.tightened_thresholds`), so a control
            task is learned before its budget binds. Default (``EnvDefault``): 0 (alpha from
            the start) on environments with a tabular exact model, 0.5 elsewhere.
        multiplier_gain: proportional gain K_p >= 0 of the improved variant's multiplier.
        multiplier_relative_gain: K_r in [0, 1], the improved variant's proportional term
            relative to the multiplier's size (:func:`fhc_jax.algos.core.multipliers.geometric`;
            FH-Constrained's ``Config`` says why).
        output_scale: initial scale of the actors' output layer (> 0; small = near-uniform
            initial policy).
        logit_step: eta > 0, the improved actor's step in logit space (module docstring); for
            Gaussian policies (box actions) the per-sample natural-gradient step
            (:func:`~fhc_jax.algos.nn_losses.gaussian_sample_targets`).
        policy_averaging: beta in [0, 1): the reported policy (:func:`policy_table`, the exact
            evaluations in the metrics) is the actor with the exponential Polyak average of its
            parameters, bar <- beta bar + (1 - beta) params(n+1); 0 reports the last iterate.
            Rollouts use the current actor. As in FH-Constrained: the last iterate drifts by a
            few cost units around alpha near nu*, the average does not.
        visit_weight_power: p in [0, 1], the weight n_h(s)^p of a visited (h, s) in the
            improved actor's regression on the tabular path (n_h(s): the batch's visits; 0:
            every visited (h, s) equally, FH-Constrained's "visits" combination; 1: in
            proportion to the visits, as the per-sample loss of the sampled path).
    """

    num_iterations: int = static(1500, low=1)
    episodes_per_iteration: int = static(512, low=1)
    observation: str = static("env", choices=OBSERVATIONS)
    width: int = static(10, low=1)
    depth: int = static(2, low=0)
    activation: str = static("tanh", choices=tuple(ACTIVATIONS))
    normalize_inputs: bool = static(True)
    variant: str = static("improved", choices=VARIANTS)
    optimizer: str = static("adam", choices=OPTIMIZERS)
    update_form: str = static("auto", choices=UPDATE_FORMS)
    actor_epochs: int = static(8, low=1)
    critic_epochs: int = static(EnvDefault(tabular=1, non_tabular=4), low=1)
    shared_stages: bool = static(False)
    eval_every: int = static(100, low=0)
    check_step_sizes: bool = static(True)
    critic_lr: PowerSchedule = schedule(PowerSchedule(init=0.05, power=0.55, decay=500.0))
    actor_lr: PowerSchedule = schedule(PowerSchedule(init=0.03, power=0.7, decay=500.0))
    multiplier_lr: PowerSchedule = schedule(PowerSchedule(init=0.025, power=0.8, decay=1000.0))
    multiplier_max: float = numeric(20.0, low=0.0, low_open=True)
    initial_multiplier: float = numeric(0.0, low=0.0, high="multiplier_max")
    trace: float = numeric(EnvDefault(tabular=0.6, non_tabular=0.95), low=0.0, high=1.0)
    budget_tightening: float = numeric(EnvDefault(tabular=0.0, non_tabular=0.5), low=0.0, high=1.0)
    multiplier_gain: float = numeric(1.25, low=0.0)
    multiplier_relative_gain: float = numeric(0.5, low=0.0, high=1.0)
    output_scale: float = numeric(0.1, low=0.0, low_open=True)
    logit_step: float = numeric(1.0, low=0.0, low_open=True)
    policy_averaging: float = numeric(0.99, low=0.0, high=1.0, high_open=True)
    visit_weight_power: float = numeric(0.0, low=0.0, high=1.0)

    def __post_init__(self):
        check_initial_log_std(self)


@struct.dataclass
class TrainState(scaffold.NetworkState):
    """Learner parameters (H stages, M constraints); every network leaf has a leading stage axis.

    Attributes:
        actor: actor params, leaves (H, ...).
        critic: Lagrangian critic params V_0..V_H, leaves (H+1, ...).
        cost_critic: constraint critic params W_0..W_H (M outputs), leaves (H+1, ...).
        actor_opt, critic_opt: optax states (the critic optimizer holds (critic, cost_critic)).
        multipliers: penalties nu = -lambda >= 0 used in c_h, (M,).
        multiplier_state: the multiplier update's state (:mod:`fhc_jax.algos.core.multipliers`).
        step: updates done, n, int32 ().
        actor_average: exponential Polyak average of the actor params (weight
            ``Config.policy_averaging``): the reported policy.
    """

    actor: Any
    critic: Any
    cost_critic: Any
    actor_opt: Any
    critic_opt: Any
    multipliers: Array
    multiplier_state: multipliers.MultiplierState
    step: Array
    actor_average: Any


@struct.dataclass
class Metrics:
    """Per-iteration metrics (N iterations, M constraints); O(N) memory whatever K, H.

    Attributes:
        reward: mean total episode reward (terminal included), (N,).
        costs: mean total episode cost per constraint, (N, M).
        multipliers: penalties nu after the update, (N, M).
        critic_costs: the constraint critics' estimate of the expected total cost,
            mean_i W_0(s_0^i) (+ alpha in the paper variant), before the update, (N, M).
        critic_loss: CL + CCL summed over stages (before the update), (N,).
        evaluation: the reported policy's reward and costs every ``eval_every`` updates, exact on
            tabular exact models and Monte-Carlo estimates elsewhere (:class:`EvaluationMetrics`).
    """

    reward: Array
    costs: Array
    multipliers: Array
    critic_costs: Array
    critic_loss: Array
    evaluation: EvaluationMetrics


def _optimizer(config: Config, schedule: PowerSchedule, steps_per_update: int = 1) -> optax.GradientTransformation:
    """The optimizer of one network family; its learning rate at optimizer step t is the
    schedule at update n = t // steps_per_update."""
    lr = schedule if steps_per_update == 1 else (lambda t: schedule(t // steps_per_update))
    if config.optimizer == "adam":
        return optax.adam(learning_rate=lr)
    return optax.sgd(learning_rate=lr)


def init(key: Array, setup: Setup, config: Config) -> TrainState:
    """Initial parameters: per-stage networks each from its own key, nu = initial_multiplier."""
    config = resolve_env_defaults(config, judged_exactly(setup.env))
    network = NetworkSpec.of(config)
    nets = Networks.build(setup.horizon, setup.head, setup.num_constraints, network, config.output_scale)
    obs = jnp.zeros(setup.shift.shape, jnp.float32)
    ka, kv, kw = jax.random.split(key, 3)
    actor = nets.actor.init(ka, obs)
    critic = nets.critic.init(kv, obs)
    cost_critic = nets.cost_critic.init(kw, obs)
    nu, law_state = multipliers.three_timescale_init(
        config.variant == "paper",
        setup.num_constraints,
        config.initial_multiplier,
        config.multiplier_max,
        setup.violation_units,
        setup.horizon,
    )
    return TrainState(
        actor=actor,
        actor_average=actor,
        critic=critic,
        cost_critic=cost_critic,
        actor_opt=_optimizer(config, config.actor_lr).init(actor),
        critic_opt=_optimizer(config, config.critic_lr, config.critic_epochs).init((critic, cost_critic)),
        multipliers=nu,
        multiplier_state=law_state,
        step=jnp.zeros((), jnp.int32),
        network=network,
    )


def _table(nets: Networks, actor: Any, obs_table: Array) -> Array:
    return jax.nn.softmax(nets.actor.apply(actor, obs_table[:-1]), axis=-1)


def table_logits(train_state: TrainState, setup: Setup) -> Array:
    """Logits of the reported policy (the Polyak-averaged actor) at every (h, s), (H, S, A)."""
    return setup.nets.actor.apply(train_state.actor_average, setup.obs_table[:-1])


def _stage_logits(nets: Networks, actor: Any, x: Array, h: Array) -> Array:
    """The stage-h actor's outputs at one standardised input x (D,): logits (A,), or a
    Gaussian head's [m, s] (2d,)."""
    return nets.actor.apply_stage(actor, x, h)


def observation_outputs(train_state: TrainState, setup: Setup, observation: Array, h: Array) -> Array:
    """The reported policy's outputs (``setup.head``: logits (A,), or a Gaussian's [m, s]
    (2d,)) at one raw observation of stage h."""
    return _stage_logits(setup.nets, train_state.actor_average, setup.normalize(observation), h)


def rollout(key: Array, train_state: TrainState, setup: Setup, config: Config) -> Batch:
    """K episodes under the current actor: tabulated once over all (stage, state) on the
    tabular path, applied to each observation through ``fhc_jax.rollout`` on the sampled one."""
    k = config.episodes_per_iteration
    if setup.sampled:
        act = observation_policy(
            lambda obs, h: _stage_logits(setup.nets, train_state.actor, setup.normalize(obs), h), setup.head
        )
        return batch_from_trajectory(rollout_episodes(key, setup.env, setup.params, act, k))
    table = _table(setup.nets, train_state.actor, setup.obs_table)
    return rollout_policy_table(key, setup.model, table, k)


def critic_step(
    train_state: TrainState,
    losses: Any,
    values: Array,
    fixed: Any,
    predictions_vjp: Any,
    config: Config,
    value_scale: Array | None = None,
    predict: Any = None,
) -> tuple[tuple[Any, Any], Any, Array]:
    """The critic step: one optimizer step of (V, W) at rate a(n) on CL + CCL, summed over the
    stages (``losses``: ``state -> (critic loss, actor loss)`` of the batch; on the sampled path
    the same loss, sum (targets - predictions)^2 / K, differentiated through
    ``predictions_vjp`` of :func:`~fhc_jax.algos.nn_losses.critic_values`).

    On the sampled path ``critic_epochs`` > 1 takes that many steps on the same fixed targets,
    ``predict`` the critics' predictions (H+1, K, C) as a function of their parameters.

    Returns:
        ((critic, cost_critic) params, the critics' optimizer state, the loss before the step ()).
    """
    crit = (train_state.critic, train_state.cost_critic)
    optimizer = _optimizer(config, config.critic_lr, config.critic_epochs)
    k = values.shape[1]
    scale = 1.0 if value_scale is None else value_scale
    if predictions_vjp is not None:
        residuals = (values - fixed.targets) / scale  # in the critics' output units
        critic_loss = jnp.sum(residuals**2) / k
        (critic_grads,) = predictions_vjp(2.0 * residuals / (scale * k))
    else:
        critic_loss, critic_grads = jax.value_and_grad(
            lambda c: losses(train_state.replace(critic=c[0], cost_critic=c[1]))[0]
        )(crit)
    updates, critic_opt = optimizer.update(critic_grads, train_state.critic_opt, crit)
    crit = optax.apply_updates(crit, updates)
    if config.critic_epochs > 1:  # more steps on the same fixed targets (the sampled path)

        def epoch(carry, _):
            c, opt_state = carry
            if predict is None:  # the tabular path's losses
                grads = jax.grad(lambda c: losses(train_state.replace(critic=c[0], cost_critic=c[1]))[0])(c)
            else:
                preds, vjp = jax.vjp(predict, c)
                (grads,) = vjp(2.0 * (preds - fixed.targets) / (scale * scale * k))
            upd, opt_state = optimizer.update(grads, opt_state, c)
            return (optax.apply_updates(c, upd), opt_state), None

        (crit, critic_opt), _ = jax.lax.scan(epoch, (crit, critic_opt), None, length=config.critic_epochs - 1)
    return crit, critic_opt, critic_loss


def actor_step(
    train_state: TrainState,
    batch: Batch,
    setup: Setup,
    observations: Array | None,
    fixed: Any,
    stats: Any,
    losses: Any,
    config: Config,
) -> tuple[Any, Any]:
    """The actor step at rate b(n): the paper's AL by one optimizer step (``losses`` as in
    :func:`critic_step`), or the improved variant's ``actor_epochs`` optimizer steps on the
    regression of :func:`~fhc_jax.algos.nn_losses.improved_regression`.

    Returns:
        (actor params, the actor's optimizer state).
    """
    paper = config.variant == "paper"
    act_opt = _optimizer(config, config.actor_lr, 1 if paper else config.actor_epochs)
    if paper:
        actor_grads = jax.grad(lambda actor: losses(train_state.replace(actor=actor))[1])(train_state.actor)
        actor_updates, actor_opt = act_opt.update(actor_grads, train_state.actor_opt, train_state.actor)
        return optax.apply_updates(train_state.actor, actor_updates), actor_opt
    regression = improved_regression(train_state, batch, setup, observations, fixed, stats, config)

    def epoch(carry, _):
        actor, opt_state = carry
        grads = jax.grad(regression)(actor)
        updates, opt_state = act_opt.update(grads, opt_state, actor)
        return (optax.apply_updates(actor, updates), opt_state), None

    (actor, actor_opt), _ = jax.lax.scan(
        epoch, (train_state.actor, train_state.actor_opt), None, length=config.actor_epochs
    )
    return actor, actor_opt


def multiplier_step(
    train_state: TrainState, batch: Batch, setup: Setup, values: Array, config: Config
) -> tuple[Array, multipliers.MultiplierState, Array]:
    """The multiplier step at rate c(n), (algo7) on the relative violation: of the constraint
    critics' estimate mean_i W_0(s_0^i) in the paper variant, of the batch's mean episode cost
    (with the safety margin) in the improved one, whose law adds the proportional term
    (:func:`fhc_jax.algos.core.multipliers.three_timescale_step`).

    Returns:
        (penalties nu (M,), the law's state, the critics' estimate of the expected total cost
        (+ alpha in the paper variant) (M,)).
    """
    critic_estimate = jnp.mean(values[0, :, 1:], axis=0)  # mean_i W_0(s_0^i), (M,)
    thresholds = setup.thresholds
    if setup.cost_bound is not None:  # the budget tightens from the cost bound to alpha
        thresholds = multipliers.tightened_thresholds(
            thresholds, setup.cost_bound, train_state.step, config.num_iterations, config.budget_tightening
        )
    return multipliers.three_timescale_step(
        train_state.multiplier_state,
        critic_estimate,
        batch.episode_costs,
        thresholds,
        setup.violation_units,
        config.variant == "paper",
        config.multiplier_lr(train_state.step),
        config.multiplier_max,
        config.multiplier_gain,
        config.eval_episodes,
        setup.horizon,
        config.multiplier_relative_gain,
        config.eval_episodes * config.eval_chunks_max,
    )


def update(
    train_state: TrainState, batch: Batch, key: Array | None, setup: Setup, config: Config
) -> tuple[TrainState, dict[str, Array]]:
    """One NN-Constrained update from K trajectories: the critic, actor and multiplier steps
    (:func:`critic_step`, :func:`actor_step`, :func:`multiplier_step`) from the same
    fixed targets.

    Args:
        train_state: parameters at iteration n (the batch was generated under its actor).
        batch: time-major :class:`Batch`: tabular state indices on the tabular path, recorded
            observations on the sampled path.
        key: unused (the update is deterministic given the batch).
        setup: :func:`setup` of the environment (networks, input table, thresholds).
        config: :class:`Config`.
    Returns:
        (parameters at n + 1, metrics: multipliers (M,),
        critic_costs (M,), critic_loss ()).
    """
    del key
    config = resolve_env_defaults(config, judged_exactly(setup.env))  # callers may pass a plain Config()
    nets, form, paper = setup.nets, setup.form, config.variant == "paper"
    k = batch.actions.shape[1]
    values, observations, predictions_vjp = critic_values(train_state, batch, setup)
    fixed = batch_targets(
        values,
        batch,
        train_state.multipliers,
        setup.thresholds,
        config.variant,
        config.trace,
        split=setup.value_scale is not None,
    )
    stats = None
    if form == "table" or not (paper or setup.sampled):
        stats = cell_stats(batch.states, batch.actions, fixed, setup.num_states, setup.num_actions, counts_sa=not paper)
    if form == "table":
        losses = lambda st: table_losses(nets, st, setup.obs_table, stats, k)
    else:
        head = setup.head if setup.sampled else None  # the tabular path is discrete: softmax
        losses = lambda st: sample_losses(nets, st, observations, batch.actions, fixed, head)

    predict = critic_predictions(nets, observations, setup.value_scale) if setup.sampled else None
    crit, critic_opt, critic_loss = critic_step(
        train_state, losses, values, fixed, predictions_vjp, config, setup.value_scale, predict
    )
    actor, actor_opt = actor_step(train_state, batch, setup, observations, fixed, stats, losses, config)
    nu, multiplier_state, critic_costs = multiplier_step(train_state, batch, setup, values, config)
    beta = config.policy_averaging
    new_state = train_state.replace(
        actor=actor,
        critic=crit[0],
        cost_critic=crit[1],
        actor_opt=actor_opt,
        critic_opt=critic_opt,
        multipliers=nu,
        multiplier_state=multiplier_state,
        step=train_state.step + 1,
        actor_average=polyak_average(train_state.actor_average, actor, beta),
    )
    metrics = {
        "multipliers": nu,
        "critic_costs": critic_costs,
        "critic_loss": critic_loss,
    }
    return new_state, metrics


ALGORITHM = scaffold.Algorithm(
    name="nn_constrained",
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
)
make_learner, make_train, policy_table, policy = scaffold.interface(ALGORITHM)
