"""FH-Constrained's speed kernels: the same arithmetic as the paper's per-sample equations
(:func:`fhc_jax.algos.fh_constrained.paper_update` is the readable reference they are tested
against), arranged for speed on CPU and accelerators.

Two *update forms* (``Config.update_form``) compute one update from K episodes:

* "table": the critics' errors summed into (stage, state, action) cells in one backward scan
  over the stages (:func:`table_statistics`), then mapped to features; O(H S A) per update,
  independent of K;
* "samples": per-sample errors (:func:`fhc_jax.algos.core.returns.lagrangian_targets`)
  scattered into the visited rows (one-hot features) or projected on the sampled features;
  the improved actor's per-sample weights from group sums over a sort (:func:`group_sums`),
  O(H K log K).

:func:`critic_errors` computes what both steps of an update need, in the form's layout
(:class:`Errors`); :func:`combine` turns summed per-feature increments into one update
(``Config.combine``). Reductions over the few actions of a (H, S, A) table are written as
explicit folds (:func:`along_actions`): XLA:CPU's reduction kernels are slow for an axis of a
few entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from fhc_jax.algos.core.features import FeatureTable
from fhc_jax.algos.core.returns import (
    lagrangian_targets,
    lagrangian_terminal,
    lambda_return_step,
    state_baseline,
    trace_weights,
    visit_averaged_advantages,
)
from fhc_jax.algos.core.tabular_rollout import Batch

Array = jax.Array

#: a visited (stage, state) subtracts its samples' mean advantage from two samples on
#: (``returns.state_baseline``): one sample moves its action by its critic-baselined delta
BASELINE_SAMPLES = 2


@struct.dataclass
class Errors:
    """The critics' errors on one batch, in the layout of the update form (H stages, K
    episodes, S states, A actions, X features, C = 1 + M channels: the Lagrangian critic, then
    the M constraint critics).

    Attributes:
        critic_estimate: the constraint critics' mean estimate at s_0, mean_k w_0^T phi_0(s_0), (M,).
        cells: "table" form: per (stage, state, action) cell the visit count and the summed
            errors of the C channels, (H, S, A, 1 + C); else None.
        per_state: "table" form: the same summed over the actions, with the terminal stage H,
            (H+1, S, 1 + C); else None.
        errors: "samples" form: the error of every sample and channel, (H+1, K, C); else None.
        phi: "samples" form with features other than one-hot: phi_h(s_hk) (or phi(o_hk)),
            (H+1, K, X); else None.
        active: the episodes that activate each feature (or, "mass", their summed activation),
            (H+1, X); None in the "samples" form with one-hot features.
        weight: "samples" form with one-hot features: each sample's share of its row,
            1 / n_h(s_hk) ("visits") or 1 / K, (H+1, K); else None.
    """

    critic_estimate: Array
    cells: Array | None = None
    per_state: Array | None = None
    errors: Array | None = None
    phi: Array | None = None
    active: Array | None = None
    weight: Array | None = None


def critic_errors(
    critics: Array,
    batch: Batch,
    nu: Array,
    features: Any,
    thresholds: Array,
    form: str,
    paper: bool,
    trace: Array,
    combine_rule: str,
    num_states: int,
    num_actions: int,
) -> Errors:
    """The critics' errors at the batch's visited states: the paper's TD(0) errors delta_h, xi_h
    ((algo1), (algo2), (algo4), (algo5)) or the improved variant's lambda-return errors
    G_h - V_h (:func:`~fhc_jax.algos.core.returns.lagrangian_targets`), in ``form``'s layout.

    Args:
        critics: (H+1, X, C) critic weights. batch: time-major episodes. nu: penalties (M,).
        features: :class:`FeatureTable` (tabular states) or observation features.
        thresholds: alpha (M,). form: "table" or "samples". paper: the paper variant.
        trace: the lambda-return trace (improved). combine_rule: ``Config.combine``.
    """
    num_stages, k = batch.actions.shape
    s_all = batch.states  # (H+1, K), or None without tabular states
    hh = jnp.arange(num_stages + 1, dtype=jnp.int32)[:, None]  # (H+1, 1)
    mass = combine_rule == "mass" and not features.one_hot  # one-hot: the same as "visits"
    if features.one_hot:
        vals, phi = (None if form == "table" else critics[hh, s_all]), None
    else:
        phi = features(batch.observations) if s_all is None else feature_rows(features, s_all)  # (H+1, K, X)
        vals = jnp.einsum("hkx,hxc->hkc", phi, critics)
    if form == "table":
        stats, term_stats, critic_estimate = table_statistics(
            batch, critics, vals, nu, thresholds, paper, trace, num_states, num_actions
        )
        cells = stats.reshape(num_stages, num_states, num_actions, stats.shape[-1])
        per_state = jnp.concatenate([along_actions(jnp.add, cells, 2), term_stats[None]], axis=0)  # (H+1, S, 1+C)
        counts = per_state[..., 0]
        active = features.project(counts) if mass else features.project_active(counts)
        return Errors(critic_estimate=critic_estimate, cells=cells, per_state=per_state, active=active)
    errors = lagrangian_targets(batch, vals, nu, thresholds, paper, trace) - vals
    critic_estimate = jnp.mean(vals[0, :, 1:], axis=0)  # mean_k w_0^T phi_0(s_0), (M,)
    if features.one_hot:
        if combine_rule in ("visits", "mass"):
            counts = jnp.zeros((num_stages + 1, num_states), errors.dtype).at[hh, s_all].add(1.0)
            weight = 1.0 / counts[hh, s_all]  # (H+1, K)
        else:
            weight = jnp.full(s_all.shape, 1.0 / k, errors.dtype)
        return Errors(critic_estimate=critic_estimate, errors=errors, weight=weight)
    active = jnp.sum(phi if mass else (phi != 0), axis=1).astype(errors.dtype)  # (H+1, X)
    return Errors(critic_estimate=critic_estimate, errors=errors, phi=phi, active=active)


def combine(increment: Array, active: Array, k: int, visits: bool) -> Array:
    """Turn a summed per-feature increment (L, X, ...) into one update (``Config.combine``):
    divide by the number of episodes that activated the feature, ``active`` (L, X)
    ("visits"), or by K ("mean")."""
    if not visits:
        return increment / k
    return increment / jnp.maximum(active, 1.0)[..., None]


def feature_rows(feats: FeatureTable, states: Array) -> Array:
    """phi_h(s_hk) for a time-major (L, K) array of states at stages 0..L-1: (L, K, X)."""
    if feats.per_stage:
        return jnp.take_along_axis(feats.table[: states.shape[0]], states[..., None], axis=1)
    return feats.table[states]


def table_statistics(
    batch: Batch,
    critics: Array,
    vals: Array | None,
    nu: Array,
    thresholds: Array,
    paper: bool,
    trace: Array,
    num_states: int,
    num_actions: int,
) -> tuple[Array, Array, Array]:
    """The "table" form's per-cell sums of the critics' errors, in one backward scan over the
    stages: the arithmetic of computing the errors of all stages
    (:func:`~fhc_jax.algos.core.returns.lagrangian_targets`), then one scatter, stage by stage
    (tests/test_pinned_learners.py holds it to the same bits).

    Stage by stage, from h = H-1 down to 0: the critic values at s_h and s_{h+1} (read from
    the critic table with one-hot features, else from ``vals``), the target (paper: TD(0)
    c_h + V_{h+1}; improved: the lambda-return G_h = c_h + (1 - lambda) V_{h+1} + lambda
    G_{h+1}, :func:`~fhc_jax.algos.core.returns.lagrangian_targets`), the error, and its scatter
    into the stage's (S*A) cells. Each of the C channels is a contiguous (K,) vector and
    nothing of size (H, K, C) is materialised: one stage's K episodes stay in cache.

    Args:
        batch: time-major episodes with tabular states (H+1, K).
        critics: (H+1, X, C) critic weights (C = 1+M); read directly with one-hot features.
        vals: critic values at the visited states (H+1, K, C) for other features, else None.
        nu: penalties (M,). thresholds: alpha (M,). paper: the paper's TD(0) targets.
        trace: the lambda-return trace (improved variant).
    Returns:
        (stats (H, S*A, 2+M): per (stage, cell = s*A + a) the visit count and the summed
        errors of the C channels; terminal stats (S, 2+M) of stage H; the constraint critics'
        mean estimate at s_0, (M,)).
    """
    num_stages, k = batch.actions.shape
    s_all = batch.states
    dtype = critics.dtype
    channels = critics.shape[-1]
    if vals is None:  # channel-major critic tables, one flat (H+1)*X row per channel
        table = jnp.moveaxis(critics, -1, 0).reshape(channels, -1)
        width = critics.shape[1]
        value_at = lambda h, s: [table[c][h * width + s] for c in range(channels)]
    else:
        vals_t = jnp.moveaxis(vals, -1, 0)  # (C, H+1, K)
        value_at = lambda h, s: [vals_t[c, h] for c in range(channels)]
    terminal = lagrangian_terminal(batch, nu, thresholds, paper)  # stage H's targets: the terminal signals, (K, C)
    v_final = value_at(num_stages, s_all[-1])
    term_errors = [terminal[:, c] - v_final[c] for c in range(channels)]
    term_rows = jnp.stack([jnp.ones((k,), dtype), *term_errors], axis=-1)
    term_stats = jnp.zeros((num_states, channels + 1), dtype).at[s_all[-1]].add(term_rows)
    keep, carry = trace_weights(jnp.asarray(trace, dtype))  # lambda_returns' weights, gamma = 1
    cells_shape = (num_states * num_actions,)

    def stage(g_next, xs):
        h, s, s_next, a, r, g = xs
        c_h = [r - g @ nu] + [g[:, m] for m in range(channels - 1)]  # C channels, (K,) each
        v_next, v_h = value_at(h + 1, s_next), value_at(h, s)
        if paper:
            target = [c_h[c] + v_next[c] for c in range(channels)]
        else:
            target = [lambda_return_step(c_h[c], v_next[c], g_next[c], keep, carry) for c in range(channels)]
        cells = s * num_actions + a
        sums = [jnp.zeros(cells_shape, dtype).at[cells].add(jnp.ones((k,), dtype))]
        sums += [jnp.zeros(cells_shape, dtype).at[cells].add(target[c] - v_h[c]) for c in range(channels)]
        return target, sums

    hs = jnp.arange(num_stages, dtype=jnp.int32)
    xs = (hs, s_all[:-1], s_all[1:], batch.actions, batch.rewards, batch.costs)
    _, sums = jax.lax.scan(stage, [terminal[:, c] for c in range(channels)], xs, reverse=True)
    stats = jnp.stack(sums, axis=-1)  # (H, S*A, 1+C)
    vals_0 = critics[0, s_all[0]] if vals is None else vals[0]  # (K, C)
    critic_estimate = jnp.mean(vals_0[:, 1:], axis=0)
    return stats, term_stats, critic_estimate


def group_sums(keys: Array, values: Array) -> tuple[Array, Array]:
    """For each sample k of each stage h: the sum of ``values`` over the samples of stage h with
    the same key, and their number, both (H, K), in O(H K log K) time and O(H K) memory (a
    stable sort of each stage's keys, segment sums over the runs of equal keys, and the
    inverse permutation), instead of the O(H K^2) pairwise comparison.

    Args:
        keys: integer keys (H, K) (e.g. s_k, or s_k A + a_k).
        values: (H, K).
    """
    k = keys.shape[-1]
    order = jnp.argsort(keys, axis=-1, stable=True)
    sorted_keys = jnp.take_along_axis(keys, order, axis=-1)
    starts = jnp.concatenate([jnp.ones_like(sorted_keys[:, :1], bool), sorted_keys[:, 1:] != sorted_keys[:, :-1]], -1)
    segment = jnp.cumsum(starts, axis=-1) - 1  # (H, K): index of the run of equal keys
    sorted_values = jnp.take_along_axis(values, order, axis=-1)
    per_stage = jax.vmap(lambda v, seg: (jax.ops.segment_sum(v, seg, k), jax.ops.segment_sum(jnp.ones_like(v), seg, k)))
    sums, counts = per_stage(sorted_values, segment)
    inverse = jnp.argsort(order, axis=-1)
    back = lambda x: jnp.take_along_axis(jnp.take_along_axis(x, segment, axis=-1), inverse, axis=-1)
    return back(sums), back(counts)


def advantage_weights(states: Array, actions: Array, delta: Array, num_actions: int) -> tuple[Array, Array]:
    """Per-sample form of :func:`advantage_increment_from_sums` for small batches, from the
    groups of samples of each stage that share a state or a (state, action) cell
    (:func:`group_sums`): O(H K log K) instead of the table form's O(H S A).

    Sample k of stage h carries w_hk = A_hat_h(s_k, a_k) n_h(s_k) / n_h(s_k, a_k), so summing the
    samples of a (h, s, a) cell gives n_h(s) A_hat_h(s, a), which the table form then maps to
    features and normalises. Returns (w (H, K), n_h(s_k) (H, K)).
    """
    s = states.astype(jnp.int32)
    sum_s, count_s = group_sums(s, delta)
    sum_sa, count_sa = group_sums(s * num_actions + actions.astype(jnp.int32), delta)  # counts >= 1
    adv = sum_sa / count_sa - state_baseline(count_s, sum_s, BASELINE_SAMPLES)
    return adv * count_s / count_sa, count_s


def advantage_increment_from_sums(
    count_sa: Array,
    total_sa: Array,
    features: FeatureTable,
    k: int,
    visits: bool,
    count_s: Array | None = None,
    total_s: Array | None = None,
    mass: bool = False,
) -> Array:
    """Actor increment of the improved variant, (H, X, A), from per-cell visit counts
    n_h(s, a) and sums of the actor's errors delta, both (H, S, A).

    The visit-averaged advantage A_hat_h(s, a) (:func:`fhc_jax.algos.core.returns.
    visit_averaged_advantages`) has, coordinate by coordinate, the sign of the paper's expected
    increment d_h(s) mu_h(s, a) A_h(s, a) (a positive diagonal rescaling, like a natural
    gradient for the softmax), so the box-projected stationary points are the paper's, but
    rarely chosen actions are no longer learned at a rate shrunk by mu_h(s, a). Per-state
    tables map to features as the critic's do: Phi^T (n_h(s) A_hat) divided by the feature's
    visit count ("visits") or by K ("mean"); with one-hot features and "visits" the increment
    is A_hat itself. ``count_s``, ``total_s``: the sums of both over the actions, (H, S),
    when the caller has them (else summed here)."""
    count_s = count_sa.sum(-1) if count_s is None else count_s  # (H, S)
    adv = visit_averaged_advantages(count_sa, total_sa, count_s, total_s, BASELINE_SAMPLES)
    active = features.project(count_s) if mass else features.project_active(count_s)
    return combine(features.project(adv * count_s[..., None]), active, k, visits)


def along_actions(op: Callable[[Array, Array], Array], x: Array, axis: int) -> Array:
    """``op`` folded over the short action axis of ``x``, entry by entry in order (a sum with
    ``jnp.add``, a maximum with ``jnp.maximum``): the values of ``x.sum(axis)`` /
    ``x.max(axis)`` (bit for bit on this jax, tests/test_pinned_learners.py), without XLA:CPU's
    slow reduction kernels for an axis of a few entries (the (H, S, A) tables, every update)."""
    total = jnp.take(x, 0, axis=axis)
    for a in range(1, x.shape[axis]):
        total = op(total, jnp.take(x, a, axis=axis))
    return total


def softmax_actions(logits: Array) -> Array:
    """``jax.nn.softmax(logits, axis=-1)`` of a (H, S, A) table, maximum and sum over the
    actions by :func:`along_actions` (the rollout's policy table)."""
    top = jax.lax.stop_gradient(along_actions(jnp.maximum, logits, -1))[..., None]
    unnormalized = jnp.exp(logits - top)
    return unnormalized / along_actions(jnp.add, unnormalized, -1)[..., None]
