"""NN-Constrained's networks (:class:`Networks`: the per-stage actor, critic and cost critic
stacked on the stage axis) and its losses (paper Section 5) for a batch of K trajectories, in
two forms with identical values and gradients up to float rounding:

* per sample (:func:`sample_losses`, the reference form): CL(v_h), CCL(w_h^(k)) and AL(theta_h)
  as written in the paper, summed over the stages;
* per (stage, state) cell (:func:`table_losses`): the same sums regrouped by the per-cell
  statistics of the batch (:func:`cell_stats`), so each network is applied once per (h, s),
  independent of K.

and the improved variant's actor step (:func:`advantage_targets`, :func:`improved_actor_loss`;
on the sampled path :func:`sample_advantage_targets` for softmax policies and
:func:`gaussian_sample_targets` / :func:`gaussian_actor_loss` for the Gaussian policies of box
action spaces). Derivations: docs/algorithms/nn_constrained.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from fhc_jax.algos.core.distributions import LOG_STD_MAX, LOG_STD_MIN, ActionHead, Categorical
from fhc_jax.algos.core.networks import NetworkSpec, SharedAcrossStages, Stacked
from fhc_jax.algos.core.returns import lagrangian_targets, visit_averaged_advantages
from fhc_jax.algos.core.tabular_rollout import Batch, batch_observations

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Networks:
    """The three stacked network families (H stages, M constraints; the actor has the action
    head's ``num_outputs``: A logits, or [m, s] of a Gaussian)."""

    actor: Stacked
    critic: Stacked
    cost_critic: Stacked

    @classmethod
    def build(
        cls,
        horizon: int,
        head: ActionHead | int,
        num_constraints: int,
        spec: NetworkSpec,
        output_scale: Any = 1.0,
        feature_major: bool = False,
    ) -> Networks:
        """From the ``spec``'s width, depth and activation; ``head`` the action head (an int A:
        ``Categorical(A)``); ``output_scale`` only sets the actors' initialisation; ``feature_major``
        the layout of the stacked networks (:class:`~fhc_jax.algos.core.networks.Stacked`: the
        sampled path's per-sample batches)."""
        head = Categorical(head) if isinstance(head, int) else head
        outputs, free = head.network_outputs
        actor = spec.mlp(outputs, free_outputs=free, output_scale=output_scale)
        if spec.shared_stages:  # one network for every stage, on (observation, h / H)
            return cls(
                actor=SharedAcrossStages(actor, horizon, horizon),
                critic=SharedAcrossStages(spec.mlp(1), horizon + 1, horizon),
                cost_critic=SharedAcrossStages(spec.mlp(num_constraints), horizon + 1, horizon),
            )
        return cls(
            actor=Stacked(actor, horizon, feature_major),
            critic=Stacked(spec.mlp(1), horizon + 1, feature_major),
            cost_critic=Stacked(spec.mlp(num_constraints), horizon + 1, feature_major),
        )


@struct.dataclass
class Targets:
    """Fixed (stop-gradient) regression targets and actor advantages of one batch.

    Attributes (time-major; C = 1 + M channels: Lagrangian, then constraints):
        targets: y_h for stages 0..H (stage H: the terminal signal), (H+1, K, C).
        advantages: the actor's weights (TD error or lambda-return advantage), (H, K).
        values: critic outputs at the visited states before the update, (H+1, K, C).
    """

    targets: Array
    advantages: Array
    values: Array


def batch_targets(
    values: Array,
    batch: Batch,
    multipliers: Array,
    thresholds: Array,
    variant: str,
    trace: Array,
    split: bool = False,
) -> Targets:
    """The paper's bootstrap targets (or the improved variant's lambda-returns).

    Args:
        values: [V_h(s_h), W_h(s_h)] at the visited states s_0..s_H, (H+1, K, 1+M).
        batch: the trajectories (time-major :class:`Batch`).
        multipliers: nu, (M,). thresholds: alpha, (M,).
        variant: "paper" or "improved". trace: lambda-return trace (improved).
        split: the first critic learns the reward alone (V = V_r) and the actor's Lagrangian
            advantage is assembled as A_r - nu . A_g (the lambda-returns are linear in the
            signals and the values, so this is the advantage of a Lagrangian critic
            V_r - nu . W): the critics' targets then do not change scale with nu (the
            sampled path of the improved variant).
    """
    nu = jnp.zeros_like(multipliers) if split else multipliers
    targets = jax.lax.stop_gradient(lagrangian_targets(batch, values, nu, thresholds, variant == "paper", trace))
    residuals = targets[:-1] - values[:-1]  # (H, K, 1+M)
    advantages = residuals[..., 0] - residuals[..., 1:] @ multipliers if split else residuals[..., 0]
    return Targets(targets=targets, advantages=jax.lax.stop_gradient(advantages), values=values)


def sample_losses(
    nets: Networks, state: Any, observations: Array, actions: Array, fixed: Targets, head: Any = None
) -> tuple[Array, Array]:
    """The paper's losses as sums over samples (the reference form).

    Args:
        nets: :class:`Networks`. state: current parameters.
        observations: o_h(s_h) for stages 0..H, (H+1, K, D). actions: a_h, int (H, K), or
            float (H, K, d) for box actions.
        fixed: :class:`Targets`.
        head: the actor's action head (``fhc_jax.algos.core.distributions``): log mu_h(s, a) is
            ``head.log_prob`` of the actor's outputs (the score function of a Gaussian on box
            actions); None: a softmax over the outputs (the discrete form).
    Returns:
        (critic loss = sum_h CL(v_h) + sum_{h,k} CCL(w_h^(k)) over stages 0..H,
         actor loss = -sum_h AL(theta_h)), both ().
    """
    k = actions.shape[1]
    v = nets.critic.apply(state.critic, observations)  # (H+1, K, 1)
    w = nets.cost_critic.apply(state.cost_critic, observations)  # (H+1, K, M)
    pred = jnp.concatenate([v, w], axis=-1)
    critic_loss = jnp.sum((fixed.targets - pred) ** 2) / k
    logits = nets.actor.apply(state.actor, observations[:-1])  # (H, K, A) (or the head's outputs)
    if head is None:
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), actions[..., None], axis=-1)[..., 0]
    else:
        logp = head.log_prob(logits, actions)
    actor_loss = -jnp.sum(logp * fixed.advantages) / k
    return critic_loss, actor_loss


@struct.dataclass
class CellStats:
    """Per-(stage, state) statistics of a batch: the table form of the sample losses.

    Attributes (S states, A actions, C = 1 + M):
        counts: visits n_h(s), (H+1, S).
        target_sums: sum of targets over the visits of (h, s), (H+1, S, C).
        target_squares: sum of squared targets, (H+1, S, C).
        advantage_sums: sum of actor advantages over the samples in (h, s, a), (H, S, A).
    """

    counts: Array
    target_sums: Array
    target_squares: Array
    advantage_sums: Array
    advantage_counts: Array | None = None


def cell_stats(
    states: Array, actions: Array, fixed: Targets, num_states: int, num_actions: int, counts_sa: bool = False
) -> CellStats:
    """Scatter the batch into :class:`CellStats` (one scatter per quantity, O(H K))."""
    h1, k = states.shape
    hh = jnp.arange(h1, dtype=jnp.int32)[:, None]
    y = fixed.targets
    vals = jnp.concatenate([jnp.ones((h1, k, 1), y.dtype), y, y * y], axis=-1)
    per_state = jnp.zeros((h1, num_states, vals.shape[-1]), y.dtype).at[hh, states].add(vals)
    c = y.shape[-1]
    adv = jnp.zeros((h1 - 1, num_states * num_actions, 2), y.dtype)
    adv = adv.at[hh[:-1], states[:-1] * num_actions + actions].add(
        jnp.stack([fixed.advantages, jnp.ones_like(fixed.advantages)], -1)
    )
    return CellStats(
        advantage_counts=adv[..., 1].reshape(h1 - 1, num_states, num_actions) if counts_sa else None,
        counts=per_state[..., 0],
        target_sums=per_state[..., 1 : 1 + c],
        target_squares=per_state[..., 1 + c :],
        advantage_sums=adv[..., 0].reshape(h1 - 1, num_states, num_actions),
    )


def table_losses(nets: Networks, state: Any, obs_table: Array, stats: CellStats, k: int) -> tuple[Array, Array]:
    """The same losses as :func:`sample_losses`, from per-cell statistics:
    sum_i (y_i - f(s_i))^2 = sum_s [n_s f(s)^2 - 2 f(s) sum y + sum y^2] and
    sum_i log mu(s_i, a_i) A_i = sum_{s,a} log mu(s, a) (sum of A over (s, a)).

    Args:
        obs_table: observations of every state at stages 0..H, (H+1, S, D).
        stats: :class:`CellStats`. k: K.
    """
    v = nets.critic.apply(state.critic, obs_table)
    w = nets.cost_critic.apply(state.cost_critic, obs_table)
    f = jnp.concatenate([v, w], axis=-1)  # (H+1, S, C)
    sq = stats.counts[..., None] * f * f - 2.0 * f * stats.target_sums + stats.target_squares
    critic_loss = jnp.sum(sq) / k
    logits = nets.actor.apply(state.actor, obs_table[:-1])  # (H, S, A)
    actor_loss = -jnp.sum(jax.nn.log_softmax(logits, axis=-1) * stats.advantage_sums) / k
    return critic_loss, actor_loss


def advantage_targets(logits: Array, stats: CellStats, logit_step: Array) -> Array:
    """Target policies of the improved actor: the tabular improved FH-Constrained step taken in
    logit space, q_h(s, .) = softmax(z_h(s, .) + eta A_hat_h(s, .)), at every (h, s) (the
    regression weighs them by :func:`visit_weights`).

    A_hat_h(s, a) is the visit-averaged advantage of a at (h, s) (mean advantage of the samples
    that took a, minus the mean over all samples in (h, s); 0 for actions not taken), as in
    FH-Constrained's improved actor.

    Args:
        logits: z = the actor's logits at every (h, s), (H, S, A).
        stats: :class:`CellStats` with ``advantage_counts``.
        logit_step: eta.
    Returns:
        q, (H, S, A) (stop-gradient).
    """
    adv = visit_averaged_advantages(stats.advantage_counts, stats.advantage_sums)
    return jax.lax.stop_gradient(jax.nn.softmax(logits + logit_step * adv, axis=-1))


def visit_weights(stats: CellStats, power: Array) -> Array:
    """The weight n_h(s)^p of each (h, s) in the improved actor's regression
    (:func:`improved_actor_loss`), 0 where the batch has no visit; n_h(s) the visits,
    :class:`CellStats` with ``advantage_counts``. (H, S)."""
    visits = stats.advantage_counts.sum(-1)
    return jnp.where(visits > 0, visits**power, 0.0)


def standardized_per_stage(advantages: Array) -> Array:
    """Advantages (H, K) centred and divided by their standard deviation over the K samples of
    each stage: the sampled path's actor steps are then free of the advantages' scale, which the
    multiplier and the episode length multiply (unstandardised, a task with returns of hundreds
    moves every logit by hundreds per update and the policy turns deterministic at once)."""
    adv = advantages - jnp.mean(advantages, axis=-1, keepdims=True)
    return adv / (jnp.std(advantages, axis=-1, keepdims=True) + 1e-8)


def bounded_by_spread(advantages: Array) -> Array:
    """Advantages (H, K) divided by their standard deviation over the K samples of each stage
    where it exceeds 1 (one typical step reward in training units), unchanged elsewhere: the
    discrete sampled path's logit step eta A then moves a logit by at most about eta per
    standard deviation. Unbounded, a task whose returns are hundreds of training units
    (CartPole) moves each logit by hundreds per update and the policy turns deterministic at
    once; fully standardised (:func:`standardized_per_stage`), stages whose advantages are only
    noise weigh as much as decisive ones (the discrete battery loses 11 points)."""
    return advantages / jnp.maximum(jnp.std(advantages, axis=-1, keepdims=True), 1.0)


def sample_advantage_targets(logits: Array, onehot_actions: Array, advantages: Array, logit_step: Array) -> Array:
    """Target policies of the improved actor on the sampled path (no tabular states to average
    over): each sample's advantage moves the logit of the action it took,
    q_hk = softmax(z_h(o_hk) + eta A_hk e_{a_hk}). Averaged over the samples of a (stage,
    state) this is NOT :func:`advantage_targets`' step: to first order in eta it moves logit b
    by eta (mu_b A_b - sum_a mu_a^2 A_a) instead of eta A_hat_b, so rare actions learn in
    proportion to mu, and a constant offset c of the advantages (a critic bias) moves logit b
    by eta c (mu_b - sum_a mu_a^2), towards the likely actions when c > 0. Dividing the
    sample's step by mu(a_hk) restores the tabular step to first order.

    Args:
        logits: z at the visited observations, (H, K, A). onehot_actions: e_{a_hk}, (H, K, A).
        advantages: the actor's lambda-return advantages A_hk = G_hk - V_h(o_hk), (H, K).
        logit_step: eta.
    Returns:
        q, (H, K, A) (stop-gradient).
    """
    return jax.lax.stop_gradient(jax.nn.softmax(logits + logit_step * advantages[..., None] * onehot_actions, axis=-1))


def improved_actor_loss(nets: Networks, actor: Any, obs_table: Array, q: Array, weights: Array) -> Array:
    """Cross-entropy of the actor to the targets q over the (h, s), each weighted by
    ``weights`` (H, S) (:func:`visit_weights`; power 0 weighs every visited (h, s) equally, the
    "visits" combination of FH-Constrained): sum_{h,s} w CE(q, mu) / max(sum w, 1). The sampled
    path's form (every sample weighted 1, samples as columns) is :func:`sample_cross_entropy`."""
    logp = jax.nn.log_softmax(nets.actor.apply(actor, obs_table[:-1]), axis=-1)
    return -jnp.sum(weights[..., None] * q * logp) / jnp.maximum(jnp.sum(weights), 1.0)


def sample_cross_entropy(nets: Networks, actor: Any, inputs_t: Array, q_t: Array) -> Array:
    """:func:`improved_actor_loss` on the sampled path (every sample weighted 1: the mean
    cross-entropy over the H K samples), with the samples as columns
    (``Stacked.apply_columns``, a feature-major stack): inputs_t (H, D, K), q_t (H, A, K)."""
    logp = jax.nn.log_softmax(nets.actor.apply_columns(actor, inputs_t), axis=1)
    return -jnp.sum(q_t * logp) / max(q_t.shape[0] * q_t.shape[2], 1)


def gaussian_sample_targets(head: Any, outputs: Array, actions: Array, advantages: Array, logit_step: Array) -> Array:
    """Target outputs of the improved actor for a Gaussian policy (box actions, the sampled
    path): the counterpart of :func:`sample_advantage_targets`. Each sample takes a natural-
    gradient step of size eta A_hk on log N(a_hk; mu, sigma^2) in the distribution's own
    parameters, and the actor then regresses its outputs onto the result
    (:func:`gaussian_actor_loss`):

    * mean: d log N / d mu = (a - mu) / sigma^2, Fisher 1 / sigma^2, so the natural gradient is
      (a - mu) and mu' = mu + eta A (a - mu); in the network's units (mu = center + half m,
      ``fhc_jax.algos.core.distributions``) m' = m + eta A (a - mu) / half, kept in the box,
      m' in [-1, 1]: a mean beyond the bounds has every sample clipped to the same action by
      the environment, so neither reward nor cost tells it to come back (under a binding
      torque budget the policy would stay saturated whatever the multiplier);
    * log-std: d log N / d log sigma = z^2 - 1 (z = (a - mu) / sigma), Fisher 2, so
      log sigma' = log sigma + eta A (z^2 - 1) / 2, i.e. s' = s + eta A (z^2 - 1) / 2 with s
      the (clipped) log-std output, then clipped into the head's bounds
      [LOG_STD_MIN - initial_log_std, LOG_STD_MAX - initial_log_std].

    A_hk is standardised over the K samples of stage h (centred, divided by the standard
    deviation) so that the step does not grow with the advantages' scale, which the Lagrangian
    multiplier multiplies (unnormalised, the means overshoot to the box's bounds once nu is
    large).
    Averaged over the samples of a stage (what the squared-error regression fits) the step is
    eta times the natural gradient of the advantage-weighted log-likelihood, E[A grad log pi]
    preconditioned by the inverse Fisher: a natural policy gradient step, the Gaussian analogue
    of the discrete form's mirror-descent step in logit space. With a state-independent log-std
    the s half of the output is the free per-stage parameter, so the regression moves it to
    the mean of its targets.

    Args:
        head: a ``DiagonalGaussian`` head of d dimensions.
        outputs: the actor's outputs [m, s] at the visited observations, (H, K, 2d).
        actions: the sampled (unclipped) actions, (H, K, d).
        advantages: the actor's lambda-return advantages A_hk (as in the discrete form), (H, K);
            standardised per stage here.
        logit_step: eta.
    Returns:
        target outputs [m', s'], (H, K, 2d) (stop-gradient).
    """
    d = head.dim
    low, high = LOG_STD_MIN - head.initial_log_std, LOG_STD_MAX - head.initial_log_std
    mean, log_std = head.mean_log_std(outputs)
    _, half = head._affine()
    diff = jnp.asarray(actions, mean.dtype) - mean
    z2 = jnp.square(diff * jnp.exp(-log_std))
    # per-stage standardised advantages: the step is scale-free (the Lagrangian advantage
    # grows with the multiplier; unnormalised, eta A (a - mu) overshoots to the bounds)
    step = logit_step * standardized_per_stage(advantages)[..., None]
    # the mean stays in the box: beyond it every sample is clipped to the same action, whose
    # cost and reward then carry no gradient towards a smaller action (a trap once nu binds)
    m_target = jnp.clip(outputs[..., :d] + step * diff / half, -1.0, 1.0)
    s_now = jnp.clip(outputs[..., d:], low, high)  # the s the head uses
    s_target = jnp.clip(s_now + step * (z2 - 1.0) / 2.0, low, high)
    return jax.lax.stop_gradient(jnp.concatenate([m_target, s_target], axis=-1))


def gaussian_actor_loss(nets: Networks, actor: Any, inputs_t: Array, targets_t: Array) -> Array:
    """Squared error of the actor's outputs to the targets of :func:`gaussian_sample_targets`,
    averaged over the H K samples: sum_hk ||f(o_hk) - y_hk||^2 / (2 H K), with the samples as
    columns (``Stacked.apply_columns``, a feature-major stack): inputs_t (H, D, K),
    targets_t (H, 2d, K)."""
    sq = jnp.sum(jnp.square(nets.actor.apply_columns(actor, inputs_t) - targets_t), axis=1)
    return 0.5 * jnp.sum(sq) / max(sq.size, 1)


def values_at(nets: Networks, state: Any, obs_table: Array, states: Array, form: str, observations: Array | None):
    """[V_h(s_h), W_h(s_h)] at the visited states, (H+1, K, 1+M)."""
    if form == "table":
        hh = jnp.arange(states.shape[0], dtype=jnp.int32)[:, None]
        v = nets.critic.apply(state.critic, obs_table)
        w = nets.cost_critic.apply(state.cost_critic, obs_table)
        return jnp.concatenate([v, w], axis=-1)[hh, states]
    v = nets.critic.apply(state.critic, observations)
    w = nets.cost_critic.apply(state.cost_critic, observations)
    return jnp.concatenate([v, w], axis=-1)


def critic_predictions(nets: Networks, observations: Array, value_scale: Array | None) -> Any:
    """The sampled path's critic predictions as a function of the critics' parameters,
    (critic, cost_critic) -> [V_h, W_h] at ``observations`` (H+1, K, D), (H+1, K, 1+M), in
    value units (the networks' outputs times ``value_scale``, 1 when None)."""
    scale = 1.0 if value_scale is None else value_scale
    return lambda c: (
        scale
        * jnp.concatenate([nets.critic.apply(c[0], observations), nets.cost_critic.apply(c[1], observations)], axis=-1)
    )


def critic_values(train_state: Any, batch: Batch, setup: Any) -> tuple[Array, Array | None, Any]:
    """The critics before the update at the batch's visited states, [V_h(s_h), W_h(s_h)]
    (H+1, K, 1+M); the networks' inputs at the samples (standardised recorded observations on
    the sampled path, rows of the input table in the "samples" form; None in the "table"
    form), (H+1, K, D); and on the sampled path the VJP of the critics' predictions (the
    critic step's gradient, :func:`critic_step`), else None."""
    nets, obs_table = setup.nets, setup.obs_table
    if setup.sampled:  # the critics' predictions at the samples, once, with their VJP
        observations = setup.normalize(batch.observations.astype(jnp.float32))
        values, predictions_vjp = jax.vjp(
            critic_predictions(nets, observations, setup.value_scale), (train_state.critic, train_state.cost_critic)
        )
        return values, observations, predictions_vjp
    observations = None if setup.form == "table" else batch_observations(obs_table, batch.states)
    return values_at(nets, train_state, obs_table, batch.states, setup.form, observations), observations, None


def improved_regression(
    train_state: Any,
    batch: Batch,
    setup: Any,
    observations: Array | None,
    fixed: Any,
    stats: Any,
    config: Any,
) -> Any:
    """The improved actor's regression loss ``actor -> ()``: the targets of a mirror-descent
    step of size eta in logit space (the sampled path: per sample; box actions: the Gaussian's
    natural-gradient step) onto which the actor regresses (module docstring)."""
    nets = setup.nets
    if setup.sampled:  # per-sample targets; the samples as columns (Stacked.apply_columns)
        inputs_t = jnp.swapaxes(observations[:-1], 1, 2)  # (H, D, K)
        out = jnp.swapaxes(nets.actor.apply_columns(train_state.actor, inputs_t), 1, 2)  # (H, K, outputs)
        if isinstance(setup.head, Categorical):  # each sample's advantage moves the logit of its action
            onehot = jax.nn.one_hot(batch.actions, setup.num_actions, dtype=fixed.advantages.dtype)
            adv = bounded_by_spread(fixed.advantages)  # at most about eta per standard deviation
            q = sample_advantage_targets(out, onehot, adv, config.logit_step)
            loss = sample_cross_entropy
        else:  # a natural-gradient step in the Gaussian's parameters, regressed by squared error
            q = gaussian_sample_targets(setup.head, out, batch.actions, fixed.advantages, config.logit_step)
            loss = gaussian_actor_loss
        q_t = jnp.swapaxes(q, 1, 2)
        return lambda actor: loss(nets, actor, inputs_t, q_t)
    obs_table = setup.obs_table
    q = advantage_targets(nets.actor.apply(train_state.actor, obs_table[:-1]), stats, config.logit_step)
    weights = visit_weights(stats, config.visit_weight_power).astype(q.dtype)
    return lambda actor: improved_actor_loss(nets, actor, obs_table, q, weights)
