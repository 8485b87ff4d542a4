"""CPO: Constrained Policy Optimization (Achiam, Held, Tamar, Abbeel, ICML 2017), the
trust-region baseline of the paper's comparison, compiled as one program per training run.

ONE stationary network for all stages, pi_theta(. | o) = softmax(MLP_theta(o)) on the
observation o ("xy": Env 1, "xyt": Env 2, "one_hot", "env": the environment's own, "env_t":
with h / H appended), with reward and cost critics of the same shape; M <= ``MAX_CONSTRAINTS``
constraints (one: the published closed-form dual; several: the dual over the sets of active
constraints, :func:`~fhc_jax.algos.trust_region.cpo_dual_multi`). Per iteration: roll out K
episodes, finite-horizon GAE with the exact terminal values as V_H, surrogates summed over stages (the finite-horizon
performance-difference lemma, so L_C is in the units of c = S_hat - alpha + m, m the safety
margin of the learner's own estimates), conjugate gradient
on autodiff Fisher products, the closed-form dual of the trust-region subproblem with
infeasible recovery (:mod:`fhc_jax.algos.trust_region`), a backtracking line search, then
critic regression. Per-sample sums are regrouped exactly into per-(distinct observation,
action) statistics, so the update cost does not grow with K. On the sampled path (environments
without a tabular exact model, or ``path="sampled"``: ``fhc_jax.rollout``, recorded
observations) every sample is its own "distinct input": the same sums over the H K samples,
O(H K) per update, with the action head's log-probabilities and KL
(:func:`~fhc_jax.algos.trust_region.sampled_trust_region_step`). On box action spaces (sampled
path only: no tabular model) the policy is a diagonal Gaussian (:mod:`fhc_jax.algos.core.distributions`;
the environment clips the actions) and the trust region, its Fisher matrix and the line search
use the Gaussian's KL. ``metrics.multipliers`` reports
the dual variable nu* of the linearised cost constraint. The equations, the dual case analysis
and the differences from the reference implementations are in docs/algorithms/cpo.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from fhc_jax.algos.core import multipliers, scaffold
from fhc_jax.algos.core.distributions import ActionHead, check_initial_log_std, config_head
from fhc_jax.algos.core.evaluation import EvaluationMetrics, observation_policy
from fhc_jax.algos.core.hyperparameters import hyperparameters, numeric, static
from fhc_jax.algos.core.networks import ACTIVATIONS, MLP, NetworkConfig, NetworkSpec, Stacked
from fhc_jax.algos.core.paths import ENV_OBSERVATIONS, judged_exactly, resolve_path
from fhc_jax.algos.core.returns import advantages_and_targets
from fhc_jax.algos.core.sampled_inputs import critic_value_scale, input_table, stage_inputs, with_stage
from fhc_jax.algos.core.tabular_rollout import (
    Batch,
    TabularModel,
    batch_from_trajectory,
    rollout_policy_table,
    tabular_model,
)
from fhc_jax.algos.trust_region import (  # noqa: F401 (public here)
    MAX_CONSTRAINTS,
    CellStatistics,
    SampleStatistics,
    sampled_trust_region_step,
    trust_region_step,
)
from fhc_jax.rollout import rollout as rollout_episodes

Array = jax.Array

OBSERVATIONS = ("xy", "xyt", "one_hot", *ENV_OBSERVATIONS)
ACTOR_OUTPUT_SCALE = 0.01  # the actor starts near the uniform policy


@hyperparameters
class Config(NetworkConfig):
    """Hyperparameters of CPO, for a short run (CPO's multiplier is the dual of each update's
    subproblem, so it needs no unit-dependent gain): 32 x 32 tanh networks, a subsampled Fisher
    matrix (``fisher_samples = 1024``), a larger trust region than TRPO's usual 0.01
    (``max_kl = 0.05``: the batches of 512 episodes are large) and ``gae_lambda = 1``
    (Monte-Carlo advantages with the critic as a baseline only: a stationary critic on "xy"
    cannot see the stage). docs/algorithms/cpo.md says what each default is for.

    Static fields (set shapes or code paths; part of the compilation cache key):
        num_iterations: updates per training run (N). episodes_per_iteration: K.
        observation: the networks' input, "env" (the environment's own observation; on the
            paper's gridworld its default "xy", Env 1), "env_t" (with h / H appended), or an
            encoder the environment supports, "xy", "xyt" (Env 2), "one_hot" (tabular path
            only). width, depth, activation: all three MLPs.
        cg_iterations: conjugate-gradient iterations per linear system F x = g, F y = b.
        line_search_steps: candidates theta_old + beta^j d, j < line_search_steps.
        critic_epochs, critic_minibatches: passes over the distinct observations per update,
            Adam steps per pass (each on a random 1/critic_minibatches of them).
        fisher_samples: 0: the Fisher matrix averages over all H K samples (exactly, through
            the distinct-observation statistics); n > 0: over n samples drawn uniformly with
            replacement (unbiased, as OmniSafe's every 4th sample), used only when n is below
            the number of distinct observations ("xyt": cheaper conjugate-gradient solves), or
            below H K on the sampled path.
        eval_every: exact evaluation every this many updates (0: initial and final only).
        eval_episodes: episodes of each Monte-Carlo evaluation where there is no tabular exact model.
        path: "tabular" (exact model, distinct-input statistics), "sampled" (``fhc_jax.rollout``,
            per-sample statistics; any environment) or "auto" (tabular where possible).
        log_std, initial_log_std: box action spaces only: the form of the Gaussian head's
            log-std and log(sigma / half range) of the initial policy
            (:class:`~fhc_jax.algos.core.networks.NetworkSpec`).
        critic_time: the critics also receive h / H when the actor's input does not depend on
            the stage (the finite-horizon value depends on the stage even under a stationary
            policy, so a stage-blind baseline leaves a stage term in every advantage); the
            actor still sees ``observation``.

    Numeric fields (pytree leaves: ``jax.vmap`` over them without recompiling):
        max_kl: trust-region radius delta on the mean KL. damping: F + damping I.
        backtrack_ratio: line-search shrink factor beta. gamma: discount (1: the paper's
        undiscounted objective). gae_lambda: GAE parameter. critic_lr: Adam step.
    """

    num_iterations: int = static(100, low=1)
    episodes_per_iteration: int = static(512, low=1)
    observation: str = static("env", choices=OBSERVATIONS)
    width: int = static(32, low=1)
    depth: int = static(2, low=0)
    activation: str = static("tanh", choices=ACTIVATIONS)
    cg_iterations: int = static(10, low=1)
    line_search_steps: int = static(10, low=1)
    critic_epochs: int = static(4, low=0)
    critic_minibatches: int = static(2, low=1)
    fisher_samples: int = static(1024, low=0)
    critic_time: bool = static(True)
    max_kl: float = numeric(0.05, low=0.0, low_open=True)
    damping: float = numeric(0.1, low=0.0)
    backtrack_ratio: float = numeric(0.8, low=0.0, high=1.0, low_open=True, high_open=True)
    gamma: float = numeric(1.0, low=0.0, high=1.0)
    gae_lambda: float = numeric(1.0, low=0.0, high=1.0)
    critic_lr: float = numeric(3e-3, low=0.0, low_open=True)

    def __post_init__(self):
        check_initial_log_std(self)


@struct.dataclass
class TrainState(scaffold.NetworkState):
    """Learner parameters (M constraints).

    Attributes:
        actor: flax parameters of the policy MLP, o (D,) -> logits (A,) (box action spaces: the
            Gaussian's [m, s], ``fhc_jax.algos.core.distributions``).
        critics: flax parameters of the reward and cost critics, stacked on a leading axis of
            length 1 + M (:class:`fhc_jax.algos.core.networks.Stacked`); outputs are in units of
            :func:`~fhc_jax.algos.ppo_lagrangian.value_scale`.
        critic_opt: the critics' Adam state.
        multipliers: nu*, the dual variable of the last update's linearised cost constraint, (M,).
        step: number of updates done, int32 ().
    """

    actor: Any
    critics: Any
    critic_opt: Any
    multipliers: Array
    step: Array


@struct.dataclass
class Metrics:
    """Per-iteration training metrics (N iterations, M constraints).

    Attributes:
        reward: mean total episode reward of the iteration's K episodes (terminal included), (N,).
        costs: mean total episode cost, (N, M).
        multipliers: nu* of the update's trust-region subproblem (>= 0), (N, M).
        kl: mean KL divergence between the old and the new policy over the batch's states, (N,).
        step_fraction: accepted line-search fraction beta^j (0: all candidates rejected), (N,).
        optimisation_case: the subproblem's case 0-4 (module docstring), int32 (N,).
        entropy: mean policy entropy over the batch's states before the update (the
            differential entropy of the Gaussian on box action spaces: it may be negative), (N,).
        evaluation: the reported policy's reward and costs every ``eval_every`` updates, exact on
            tabular exact models and Monte-Carlo estimates elsewhere (:class:`EvaluationMetrics`).
    """

    reward: Array
    costs: Array
    multipliers: Array
    kl: Array
    step_fraction: Array
    optimisation_case: Array
    entropy: Array
    evaluation: EvaluationMetrics


def _modules(spec: NetworkSpec, head: ActionHead, num_channels: int) -> tuple[MLP, Stacked]:
    """(actor, critics) of the ``spec``'s architecture: the actor has ``head``'s outputs, the
    ``num_channels`` critics (reward, then costs) one output each, stacked."""
    computed, free = head.network_outputs  # (A, 0) for a softmax policy
    actor = spec.mlp(computed, free_outputs=free, output_scale=ACTOR_OUTPUT_SCALE)
    critic = Stacked(spec.mlp(1), num_channels)
    return actor, critic


def distinct_inputs(env, params, observation: str, stage: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The distinct network inputs among the encoded (h, s), h < H (host-side); ``stage``:
    with h / H appended (the critics' inputs under ``Config.critic_time``).

    Returns:
        (inputs (U, D) float32, cell (H, S) int32) with ``inputs[cell[h, s]]`` the observation of
        state s at stage h. U = S for "xy" and "one_hot" (stage-free), H S for "xyt" or ``stage``.
    """
    table = np.asarray(input_table(env, params, observation))[: env.horizon]
    if stage:
        t = np.arange(env.horizon, dtype=np.float32) / env.horizon
        t = np.broadcast_to(t[:, None, None], table.shape[:2] + (1,))
        table = np.concatenate([table.astype(np.float32), t], axis=-1)
    flat = table.reshape(-1, table.shape[-1])
    inputs, inverse = np.unique(flat, axis=0, return_inverse=True)
    return inputs.astype(np.float32), np.asarray(inverse, np.int32).reshape(env.horizon, env.num_states)


@dataclasses.dataclass(frozen=True)
class Setup:
    """Constants derived from the environment (host-side, built once by :func:`setup`).

    Attributes:
        actor, critic: the policy MLP and the stacked reward / cost critics.
        inputs: the U distinct observations, (U, D); cell: their index per (h, s), (H, S).
        critic_inputs, critic_cell: the same for the critics (with h / H appended where
            ``critic_stage``); None: ``inputs`` and ``cell``.
        model: the rollout model. threshold: alpha, (M,). value_scale: the critics' output
            scale per channel (reward, cost), (1 + M,).
        sampled: the sampled path (inputs and cell only for :func:`table_logits`, None without
            tabular states); env, params: what it rolls out; observation: "env" or "env_t";
            horizon: H. critic_stage: the critics' inputs have h / H appended (``critic_time``).
        head: the action distribution of the actor's outputs (``fhc_jax.algos.core.distributions``:
            ``Categorical(A)``, or a ``DiagonalGaussian`` on box action spaces).
    """

    actor: MLP
    critic: Stacked
    inputs: Array
    cell: Array
    model: TabularModel | None = None
    threshold: Array | None = None
    value_scale: Array | None = None
    sampled: bool = False
    env: Any = None
    params: Any = None
    observation: str = "env"
    horizon: int = 0
    head: ActionHead | None = None
    critic_inputs: Array | None = None
    critic_cell: Array | None = None
    critic_stage: bool = False

    @property
    def critic_points(self) -> tuple[Array, Array]:
        """The critics' distinct inputs and their index per (h, s): (critic_inputs, critic_cell)."""
        if self.critic_inputs is None:
            return self.inputs, self.cell
        return self.critic_inputs, self.critic_cell

    def actor_input(self, observation: Array, h: Array) -> Array:
        """The actor's input at one raw observation (D,) of stage h (sampled path)."""
        return (
            with_stage(observation, h, self.horizon) if self.observation == "env_t" else observation.astype(jnp.float32)
        )

    def sample_inputs(self, batch: Batch) -> tuple[Array, Array]:
        """The (actor, critic) inputs at the batch's recorded observations of stages 0..H-1,
        ((H K, D), (H K, D or D + 1))."""
        x = batch.observations[:-1].astype(jnp.float32)
        xt = stage_inputs(x, self.horizon) if self.observation == "env_t" or self.critic_stage else x
        x = xt if self.observation == "env_t" else x
        return x.reshape(-1, x.shape[-1]), xt.reshape(-1, xt.shape[-1])


def _sampled_setup(env, params, spec: NetworkSpec, config: Config | None) -> Setup:
    """The sampled path's setup of the networks ``spec`` (``config`` None: only what :func:`table_logits` and
    :func:`observation_outputs` need); distinct inputs only where there are tabular states."""
    head = config_head(env, spec)
    actor, critic = _modules(spec, head, 1 + env.num_constraints)
    inputs = cell = None
    if env.is_tabular:
        inputs, cell = (jnp.asarray(a) for a in distinct_inputs(env, params, spec.observation))
    kw = (
        {}
        if config is None
        else dict(
            threshold=jnp.asarray(env.thresholds(params), jnp.float32).reshape(-1),
            value_scale=jnp.asarray(critic_value_scale(env, params)),
            critic_stage=config.critic_time and spec.observation == "env",
        )
    )
    return Setup(
        actor=actor,
        critic=critic,
        inputs=inputs,
        cell=cell,
        sampled=True,
        env=env,
        params=params,
        observation=spec.observation,
        horizon=env.horizon,
        head=head,
        **kw,
    )


def setup(env, params, config: Config) -> Setup:
    """Networks, distinct inputs, rollout model, threshold and value scales of ``env``.

    Raises:
        ValueError: an environment with more than ``MAX_CONSTRAINTS`` constraints (the
            subproblem's dual enumerates the sets of active constraints); an observation the environment
            does not support; more critic minibatches than distinct inputs (H K samples on the
            sampled path); ``path="tabular"`` without a tabular exact model, or non-flat
            observations (:func:`~fhc_jax.algos.core.paths.resolve_path`).
    """
    m = env.num_constraints
    if m > MAX_CONSTRAINTS:
        raise ValueError(
            f"cpo: the trust-region subproblem's dual enumerates the 2^M sets of active constraints, "
            f"so M must be in [1, {MAX_CONSTRAINTS}], but {env.name} has num_constraints = {m}; use "
            "a Lagrangian learner (ppo_lagrangian, ecop, fh_constrained) for more"
        )
    if resolve_path("cpo", env, config.path, config.observation):
        n = env.horizon * config.episodes_per_iteration
        if config.critic_minibatches > n:
            raise ValueError(
                f"cpo: Config.critic_minibatches must be at most H K = {n} samples per iteration on "
                f"the sampled path, found {config.critic_minibatches}"
            )
        return _sampled_setup(env, params, NetworkSpec.of(config), config)
    if config.observation not in (*env.supported_observations, *ENV_OBSERVATIONS):
        raise ValueError(
            f"cpo: Config.observation = {config.observation!r} is not supported by {env.name}; "
            f"supported: {', '.join(map(repr, (*env.supported_observations, *ENV_OBSERVATIONS)))}"
        )
    model = tabular_model(env, params)
    inputs, cell = distinct_inputs(env, params, config.observation)
    if config.critic_minibatches > inputs.shape[0]:
        raise ValueError(
            f"cpo: Config.critic_minibatches must be at most the number of distinct observations "
            f"({inputs.shape[0]} for observation {config.observation!r}), found {config.critic_minibatches}"
        )
    spec = NetworkSpec.of(config)
    head = config_head(env, spec)  # Categorical(A): box environments have no tabular path
    actor, critic = _modules(spec, head, 1 + m)
    critic_stage = config.critic_time and bool(np.all(cell == cell[:1]))  # the actor's input is stage-free
    critic_inputs = critic_cell = None
    if critic_stage:
        critic_inputs, critic_cell = distinct_inputs(env, params, config.observation, stage=True)
    return Setup(
        actor=actor,
        critic=critic,
        inputs=jnp.asarray(inputs),
        cell=jnp.asarray(cell),
        model=model,
        threshold=jnp.asarray(env.thresholds(params), jnp.float32).reshape(-1),
        value_scale=jnp.asarray(critic_value_scale(env, params)),
        head=head,
        critic_inputs=None if critic_inputs is None else jnp.asarray(critic_inputs),
        critic_cell=None if critic_cell is None else jnp.asarray(critic_cell),
        critic_stage=critic_stage,
    )


def policy_setup(env, params, train_state: TrainState) -> Setup:
    """What :func:`table_logits` needs (the actor and its distinct inputs), or :func:`observation_outputs`
    where there is no tabular exact model, from the train state's
    :class:`~fhc_jax.algos.core.networks.NetworkSpec`."""
    spec = train_state.network
    if not judged_exactly(env):
        return _sampled_setup(env, params, spec, None)
    head = config_head(env, spec)
    actor, critic = _modules(spec, head, 1 + env.num_constraints)
    inputs, cell = distinct_inputs(env, params, spec.observation)
    return Setup(actor=actor, critic=critic, inputs=jnp.asarray(inputs), cell=jnp.asarray(cell), head=head)


# ----------------------------------------------------------------------------- the algorithm


def init(key: Array, setup: Setup, config: Config) -> TrainState:
    """Initial parameters: actor and critics initialised from ``key`` (the actor's output layer
    scaled by ``ACTOR_OUTPUT_SCALE``, a near-uniform policy), Adam state, nu = 0."""
    k_actor, k_critic = jax.random.split(key)
    if setup.sampled:
        sample = jnp.zeros((setup.env.observation_shape[0] + (setup.observation == "env_t"),), jnp.float32)
        stage = setup.critic_stage and setup.observation != "env_t"
        critic_sample = jnp.zeros((sample.shape[0] + stage,), jnp.float32)
    else:
        sample = jnp.zeros(setup.inputs.shape[1:], jnp.float32)
        critic_sample = jnp.zeros(setup.critic_points[0].shape[1:], jnp.float32)
    critics = setup.critic.init(k_critic, critic_sample)
    return TrainState(
        actor=setup.actor.init(k_actor, sample),
        critics=critics,
        critic_opt=optax.adam(1.0).init(critics),
        multipliers=jnp.zeros((setup.critic.num_stages - 1,), jnp.float32),
        step=jnp.zeros((), jnp.int32),
        network=NetworkSpec.of(config),
    )


def table_logits(train_state: TrainState, setup: Setup) -> Array:
    """The stationary network's logits at every stage and state, (H, S, A)."""
    return setup.actor.apply(train_state.actor, setup.inputs)[setup.cell]


def observation_outputs(train_state: TrainState, setup: Setup, observation: Array, h: Array) -> Array:
    """The actor's outputs at one raw observation (D,) of stage h, (``head.num_outputs``,):
    the reported policy's logits (A,), or the Gaussian's [m, s] (2d,) on box action spaces."""
    return setup.actor.apply(train_state.actor, setup.actor_input(observation, h))


def rollout(key: Array, train_state: TrainState, setup: Setup, config: Config) -> Batch:
    """K episodes from the tabulated policy; ``Batch.behaviour`` keeps log pi_old on the
    distinct inputs, (U, A), for the update. On the sampled path: ``fhc_jax.rollout`` with the
    actor applied to each observation (the update recomputes pi_old at the samples)."""
    if setup.sampled:
        act = observation_policy(lambda obs, h: observation_outputs(train_state, setup, obs, h), setup.head)
        return batch_from_trajectory(rollout_episodes(key, setup.env, setup.params, act, config.episodes_per_iteration))
    logp = jax.nn.log_softmax(setup.actor.apply(train_state.actor, setup.inputs), axis=-1)
    batch = rollout_policy_table(key, setup.model, jnp.exp(logp)[setup.cell], config.episodes_per_iteration)
    return batch.replace(behaviour=logp)


def _critic_values(setup: Setup, critic_params: Any, x: Array) -> Array:
    """(B, D) -> values (B, 1 + M) in reward / cost units."""
    channels = setup.value_scale.shape[0]
    out = setup.critic.apply(critic_params, jnp.broadcast_to(x, (channels,) + x.shape))  # (C, B, 1)
    return out[..., 0].T * setup.value_scale


def cell_statistics(batch: Batch, critics: Any, setup: Setup, config: Config) -> tuple[CellStatistics, CriticTargets]:
    """GAE advantages and lambda-returns of the batch (critics at the visited inputs, the exact
    terminal signals as V_H), scattered once into per-(distinct input, action) sums for the
    actor's step and per-distinct-critic-input mean returns for the critics' fit."""
    horizon, k = batch.actions.shape
    num_inputs, num_actions = setup.inputs.shape[0], setup.actor.outputs
    channels = setup.value_scale.shape[0]
    hs = jnp.arange(horizon, dtype=jnp.int32)[:, None]
    cells = setup.cell[hs, batch.states[:-1]]  # (H, K)
    critic_inputs, critic_cell = setup.critic_points
    critic_cells = critic_cell[hs, batch.states[:-1]]  # (H, K)
    values = _critic_values(setup, critics, critic_inputs)  # (Uc, C)
    adv, ret = advantages_and_targets(batch, values[critic_cells], config.gamma, config.gae_lambda)
    # per-(input, action) statistics: [count, advantages (C)]
    flat_idx = cells * num_actions + batch.actions
    vals = jnp.concatenate([jnp.ones_like(adv[..., :1]), adv], axis=-1)
    stats = jnp.zeros((num_inputs * num_actions, 1 + channels), adv.dtype).at[flat_idx].add(vals)
    stats = stats.reshape(num_inputs, num_actions, 1 + channels)
    sa_counts = stats[..., 0]  # (U, A)
    counts = jnp.sum(sa_counts, axis=-1)  # (U,)
    # per-critic-input statistics: [count, returns (C)]
    cvals = jnp.concatenate([jnp.ones_like(ret[..., :1]), ret], axis=-1)
    cstats = jnp.zeros((critic_inputs.shape[0], 1 + channels), ret.dtype).at[critic_cells].add(cvals)
    actor_stats = CellStatistics(
        cells=cells,
        adv_sums=stats[..., 1:] / k,
        seen=sa_counts > 0,
        counts=counts,
        weights=counts / (horizon * k),  # visit frequencies of the distinct inputs
    )
    return actor_stats, CriticTargets(inputs=critic_inputs, ret_sums=cstats[:, 1:], counts=cstats[:, 0])


def sample_statistics(
    batch: Batch, critics: Any, critic_inputs: Array, setup: Setup, config: Config
) -> tuple[SampleStatistics, CriticTargets]:
    """The sampled path's statistics (:class:`~fhc_jax.algos.trust_region.SampleStatistics`):
    every sample is its own point (the critics' inputs ``critic_inputs`` (H K, Dc),
    :meth:`Setup.sample_inputs`), with its action, advantages / K and lambda-returns; counts
    are 1 (O(H K) time and memory, any action space)."""
    horizon, k = batch.actions.shape[:2]
    values = _critic_values(setup, critics, critic_inputs).reshape(horizon, k, -1)
    adv, ret = advantages_and_targets(batch, values, config.gamma, config.gae_lambda)
    n = horizon * k
    counts = jnp.ones((n,), adv.dtype)
    stats = SampleStatistics(
        cells=jnp.arange(n, dtype=jnp.int32).reshape(horizon, k),
        actions=batch.actions.reshape((n,) + batch.actions.shape[2:]),
        adv_sums=adv.reshape(n, -1) / k,
        counts=counts,
        weights=jnp.full((n,), 1.0 / n, adv.dtype),
    )
    return stats, CriticTargets(inputs=critic_inputs, ret_sums=ret.reshape(n, -1), counts=counts)


@struct.dataclass
class CriticTargets:
    """What the critics regress on: their U' distinct inputs (every sample on the sampled
    path) ``inputs`` (U', Dc), the sums of the lambda-returns there ``ret_sums`` (U', C) and
    the visit counts ``counts`` (U',)."""

    inputs: Array
    ret_sums: Array
    counts: Array


def fit_critics(
    critics: Any,
    critic_opt: Any,
    stats: CriticTargets,
    key: Array,
    setup: Setup,
    config: Config,
) -> tuple[Any, Any]:
    """Step 7: ``critic_epochs`` epochs of ``critic_minibatches`` Adam steps on the
    visit-weighted squared error (in value-scale units) to the mean lambda-return of each
    distinct critic input (of each sample on the sampled path)."""
    inputs = stats.inputs
    num_inputs = inputs.shape[0]
    minibatch = num_inputs // config.critic_minibatches
    targets = stats.ret_sums / jnp.maximum(stats.counts, 1.0)[:, None]  # (U, C)
    opt = optax.adam(config.critic_lr)

    def critic_loss(cp, idx):
        err = (_critic_values(setup, cp, inputs[idx]) - targets[idx]) / setup.value_scale
        w = stats.counts[idx]
        return jnp.sum(w[:, None] * err**2) / jnp.maximum(jnp.sum(w), 1.0)

    def minibatch_step(state, idx):
        cp, os = state
        grads = jax.grad(critic_loss)(cp, idx)
        updates, os = opt.update(grads, os, cp)
        return (optax.apply_updates(cp, updates), os), None

    def epoch(state, ek):
        order = jax.random.permutation(ek, num_inputs)[: minibatch * config.critic_minibatches]
        return jax.lax.scan(minibatch_step, state, order.reshape(config.critic_minibatches, minibatch))[0], None

    if config.critic_epochs > 0:
        (critics, critic_opt), _ = jax.lax.scan(
            epoch, (critics, critic_opt), jax.random.split(key, config.critic_epochs)
        )
    return critics, critic_opt


def update(
    train_state: TrainState, batch: Batch, key: Array, setup: Setup, config: Config
) -> tuple[TrainState, dict[str, Array]]:
    """One CPO update (module docstring, steps 2-7) from K episodes collected under
    ``train_state``'s policy (``batch.behaviour``, when present, is log pi_old on the distinct
    inputs). ``key`` holds two keys: the critics' minibatch shuffles and the Fisher's samples.
    Returns (state at n + 1, metrics dict: multipliers (M,), kl (),
    step_fraction (), optimisation_case (), entropy ())."""
    k_critic, k_fisher = key
    st = train_state
    # c = J_C_hat - alpha + m: the step asks the linearised cost for the safety margin m below
    # alpha that every learner's multiplier aims at (multipliers.relative_violation), so the
    # returned policy's upper cost bound, not only its mean, comes within alpha
    m = setup.threshold.shape[0]
    c = multipliers.relative_violation(
        batch.episode_costs[:, :m],
        setup.threshold,
        jnp.ones((m,), jnp.float32),
        config.eval_episodes,
        config.eval_episodes * config.eval_chunks_max,
    )
    c = c[0] if m == 1 else c  # one constraint: the closed-form dual's scalar
    if setup.sampled:  # per-sample statistics and the action head's log-probabilities and KL
        inputs, critic_inputs = setup.sample_inputs(batch)  # (H K, D), (H K, Dc): the points of stats
        out_old = setup.actor.apply(st.actor, inputs)  # (H K, O)
        stats, critic_targets = sample_statistics(batch, st.critics, critic_inputs, setup, config)
        actor, info = sampled_trust_region_step(
            st.actor, out_old, stats, c, k_fisher, setup, config, inputs, setup.head
        )
        entropy = jnp.mean(setup.head.entropy(out_old))
    else:
        inputs = setup.inputs  # (U, D): the points of stats
        if batch.behaviour is not None:
            logp_old = batch.behaviour
        else:
            logp_old = jax.nn.log_softmax(setup.actor.apply(st.actor, inputs), axis=-1)
        stats, critic_targets = cell_statistics(batch, st.critics, setup, config)
        actor, info = trust_region_step(st.actor, logp_old, stats, c, k_fisher, setup, config, inputs)
        entropy = -jnp.sum(stats.weights * jnp.sum(jnp.exp(logp_old) * logp_old, axis=-1))
    critics, critic_opt = fit_critics(st.critics, st.critic_opt, critic_targets, k_critic, setup, config)
    nu = jnp.broadcast_to(info["multiplier"], st.multipliers.shape).astype(jnp.float32)
    new_state = st.replace(actor=actor, critics=critics, critic_opt=critic_opt, multipliers=nu, step=st.step + 1)
    metrics = {
        "multipliers": nu,
        "kl": info["kl"],
        "step_fraction": info["step_fraction"],
        "optimisation_case": info["case"],
        "entropy": entropy,
    }
    return new_state, metrics


ALGORITHM = scaffold.Algorithm(
    name="cpo",
    config_type=Config,
    metrics_type=Metrics,
    setup=setup,
    init=init,
    rollout=rollout,
    update=update,
    table_logits=table_logits,
    policy_setup=policy_setup,
    observation_outputs=observation_outputs,
    update_keys=2,
    action_head=lambda setup: setup.head,
    small_budget_units=True,
)
make_learner, make_train, policy_table, policy = scaffold.interface(ALGORITHM)
