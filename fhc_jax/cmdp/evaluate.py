"""Exact evaluation of a non-stationary randomized policy by backward induction (values) and
forward propagation (occupancy measures), paper Section 2."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.cmdp import transitions as tr
from fhc_jax.cmdp.model import CMDPTypeError, TabularCMDP, probability_tolerance

Array = jax.Array

# Unrolling the stage scans 4x halves evaluate's time on CPU (loop overhead dominates at S = 100).
_UNROLL = 4
# The exact solvers' fused scans are not unrolled: XLA would fuse one stage's elementwise
# values into the next stage's gathers (recomputing them once per successor), and unrolling
# bought nothing measurable on CPU with jax 0.10 while doubling compile time.
_FUSED_UNROLL = 1


@struct.dataclass
class Evaluation:
    """Exact performance of a policy.

    Attributes (H stages, S states, M constraints):
        reward: J(pi), expected total reward including the terminal reward (paper eq. (1)), ().
        costs: S^(k)(pi), expected total cost of each constraint including terminal costs
            (paper eq. (2)), (M,). Compare with ``cmdp.thresholds``.
        values: V_h(s), expected reward-to-go from state s at stage h, (H+1, S); values[H] = r_H.
        cost_values: expected cost-to-go of each constraint, (M, H+1, S). The paper's
            W_h^(k) equals ``cost_values[k] - alpha^(k)`` (it folds -alpha into the terminal stage).
        occupancy: d_h(s) = P(X_h = s), (H+1, S).
        stage_rewards: expected reward collected at each stage h (terminal at index H), (H+1,).
        stage_costs: expected cost collected at each stage, (M, H+1).
    """

    reward: Array
    costs: Array
    values: Array
    cost_values: Array
    occupancy: Array
    stage_rewards: Array
    stage_costs: Array


def _signals(cmdp: TabularCMDP) -> tuple[Array, Array]:
    """Stacked per-stage signals [r, g^(1..M)]: (1+M, H, S, A) and terminal (1+M, S)."""
    stage = jnp.concatenate([cmdp.expected_rewards()[None], cmdp.expected_costs()], axis=0)
    terminal = jnp.concatenate([cmdp.terminal_rewards[None], cmdp.terminal_costs], axis=0)
    return stage, terminal


def _stage_xs(cmdp: TabularCMDP):
    """What a scan over stages consumes: the time-varying kernel's per-stage slices, or None."""
    return cmdp.transitions if cmdp.time_varying else None


def _kernel(cmdp: TabularCMDP, sliced):
    return sliced if cmdp.time_varying else cmdp.transitions


def require_cmdp(function: str, cmdp: Any) -> None:
    """``TypeError`` (:class:`~fhc_jax.cmdp.model.CMDPTypeError`) naming ``function`` unless
    ``cmdp`` is a :class:`TabularCMDP`."""
    if not isinstance(cmdp, TabularCMDP):
        raise CMDPTypeError(f"{function}: expected a fhc_jax.TabularCMDP as cmdp, found {type(cmdp).__name__}")


def check_policy(cmdp: TabularCMDP, policy: Any, function: str = "evaluate") -> None:
    """Validate a concrete policy table against ``cmdp`` (skipped for traced values, i.e. inside
    ``jit``/``vmap``): shape (H, S, A), a real numeric dtype, finite, non-negative (within the tolerance), every row
    summing to 1 within :func:`~fhc_jax.cmdp.model.probability_tolerance` of its dtype.

    Raises:
        CMDPTypeError: not an array of real numbers. ValueError: the first bad entry, naming
            its stage h and state s (and action a).
    """
    if isinstance(policy, jax.core.Tracer):
        return
    try:
        arr = np.asarray(policy)
    except Exception as err:  # noqa: BLE001 (anything that is not array-like)
        raise CMDPTypeError(f"{function}: policy must be an (H, S, A) array, found {type(policy).__name__}") from err
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise CMDPTypeError(f"{function}: policy must be an array of real numbers, found dtype {arr.dtype}")
    want = (cmdp.horizon, cmdp.num_states, cmdp.num_actions)
    if arr.shape != want:
        hint = " (jax.vmap evaluate over a batch of policies)" if arr.shape[1:] == want else ""
        raise ValueError(f"{function}: policy must have shape (H, S, A) = {want}, found {arr.shape}{hint}")
    finite = np.isfinite(arr)
    if not finite.all():
        h, s, a = np.argwhere(~finite)[0]
        raise ValueError(f"{function}: policy[h={h}, s={s}, a={a}] = {arr[h, s, a]} is not finite")
    tol = probability_tolerance(arr.dtype, arr.shape[-1])
    if (arr < -tol).any():
        h, s, a = np.argwhere(arr < -tol)[0]
        raise ValueError(
            f"{function}: policy[h={h}, s={s}, a={a}] = {arr[h, s, a]:.6g} is negative; a policy gives probabilities"
        )
    sums = arr.sum(axis=-1, dtype=np.float64)
    off = np.abs(sums - 1.0)
    if off.size and off.max() > tol:
        h, s = np.unravel_index(int(np.argmax(off)), off.shape)
        raise ValueError(
            f"{function}: policy[h={h}, s={s}] sums to {sums[h, s]:.9g}, not 1 (tolerance {tol:g} "
            f"for {arr.dtype}): each stage and state needs a probability distribution over actions"
        )


def evaluate(cmdp: TabularCMDP, policy: Array) -> Evaluation:
    """Exact expected reward, costs, values and occupancies of a non-stationary policy.

    Values follow the paper's Bellman recursion V_h(s) = sum_a mu_h(s,a) sum_s' p_h(s,a,s')
    [r_h(s,a,s') + V_{h+1}(s')], V_H = r_H (Section 2), for the reward and for each constraint
    cost at once; the occupancy is d_h of paper eq. (dpi). O(H S A N) work (N successors per
    state-action, N = S for dense kernels). Jitted; ``jax.vmap`` it over a batch of policies.
    Uses the dtype of the inputs (float64 under ``jax_enable_x64`` with float64 data).

    Args:
        cmdp: the model.
        policy: mu_h(s, a), row-stochastic, (H, S, A).
    Returns:
        :class:`Evaluation`.
    Raises:
        TypeError: ``cmdp`` is not a :class:`TabularCMDP`, or ``policy`` is not a real array.
        ValueError: a concrete ``policy`` (not traced) of the wrong shape, with a non-finite
            or negative entry, or a row that does not sum to 1 (:func:`check_policy`, naming
            the stage and state).
    """
    require_cmdp("evaluate", cmdp)
    check_policy(cmdp, policy)
    return _evaluate(cmdp, policy)


def _signal_rows(cmdp: TabularCMDP, dtype) -> tuple[list[Array], Array]:
    """The 1+M signal tables [r, g^(1), ..., g^(M)], each (H, S, A), and the terminal
    signals (1+M, S), in ``dtype`` (kept apart: no stacked (1+M, H, S, A) copy)."""
    rewards, costs = cmdp.expected_rewards(), cmdp.expected_costs()
    rows = [rewards.astype(dtype)] + [costs[k].astype(dtype) for k in range(costs.shape[0])]
    terminal = jnp.concatenate([cmdp.terminal_rewards[None], cmdp.terminal_costs], axis=0).astype(dtype)
    return rows, terminal


@functools.partial(jax.jit, static_argnames="fused")
def _evaluate(cmdp: TabularCMDP, policy: Array, fused: bool = False) -> Evaluation:
    """:func:`evaluate` without validation (the compiled program).

    ``fused=True`` (the exact solvers): the same recursions arranged for XLA on CPU, equal to
    the default up to the last bit and faster on large sparse models: the reward and each cost
    are separate rows read stage by stage inside the scans (no stacked (1+M, H, S, A) copy),
    the backward pass averages over actions and successors at once with the shared weights
    pi(s, a) p(s, a, j) (``transitions.policy_weighted``), and each stage's expected signals
    are summed in the forward scan (no (H, S, A) state-action masses kept)."""
    if fused:
        return _evaluate_fused(cmdp, policy)
    stage, terminal = _signals(cmdp)
    dtype = jnp.result_type(stage.dtype, policy.dtype)
    stage, terminal, policy = stage.astype(dtype), terminal.astype(dtype), policy.astype(dtype)

    def backward(v_next, xs):
        sig_h, pi_h, p_sliced = xs
        q = sig_h + tr.expect_next(_kernel(cmdp, p_sliced), v_next)  # (1+M, S, A)
        v = jnp.sum(pi_h[None] * q, axis=-1)
        return v, v

    _, v_stages = jax.lax.scan(
        backward, terminal, (jnp.moveaxis(stage, 1, 0), policy, _stage_xs(cmdp)), reverse=True, unroll=_UNROLL
    )
    all_values = jnp.concatenate([v_stages, terminal[None]], axis=0)  # (H+1, 1+M, S)

    def forward(d, xs):
        pi_h, p_sliced = xs
        mass = d[:, None] * pi_h
        return tr.push_forward(_kernel(cmdp, p_sliced), mass).astype(dtype), (d, mass)

    d_final, (d_stages, masses) = jax.lax.scan(
        forward, cmdp.initial_distribution.astype(dtype), (policy, _stage_xs(cmdp)), unroll=_UNROLL
    )
    occupancy = jnp.concatenate([d_stages, d_final[None]], axis=0)  # (H+1, S)
    per_stage = jnp.einsum("hsa,khsa->kh", masses, stage)
    per_stage = jnp.concatenate([per_stage, (terminal @ d_final)[:, None]], axis=1)  # (1+M, H+1)

    return _assemble(all_values, occupancy, per_stage, cmdp.initial_distribution.astype(dtype))


def _evaluate_fused(cmdp: TabularCMDP, policy: Array) -> Evaluation:
    """:func:`_evaluate` with ``fused=True`` (traced inside its jit): the reward and each cost
    are propagated as separate rows (1-D gathers, no stacked signal tables)."""
    dtype = jnp.result_type(cmdp.rewards.dtype, policy.dtype)
    rows, terminal = _signal_rows(cmdp, dtype)
    policy = policy.astype(dtype)
    init = cmdp.initial_distribution.astype(dtype)
    stages = jnp.arange(cmdp.horizon)

    def backward(v_next, xs):
        h, pi_h, p_sliced = xs
        # V_h(s) = sum_a pi(s,a) sig(s,a) + sum_{a,j} pi(s,a) p(s,a,j) V_{h+1}(next(s,a,j)): the
        # weights pi p are shared by the reward and every cost; one (S, A N) gather per row.
        weights, successors = tr.policy_weighted(_kernel(cmdp, p_sliced), pi_h)  # (S, A N) each
        v = jnp.stack(
            [
                jnp.sum(pi_h * sig[h], axis=-1) + jnp.sum(weights * v_next[k][successors], axis=-1)
                for k, sig in enumerate(rows)
            ]
        )  # (1+M, S)
        return v, v

    _, v_stages = jax.lax.scan(
        backward, terminal, (stages, policy, _stage_xs(cmdp)), reverse=True, unroll=_FUSED_UNROLL
    )
    all_values = jnp.concatenate([v_stages, terminal[None]], axis=0)  # (H+1, 1+M, S)

    def forward(d, xs):
        h, pi_h, p_sliced = xs
        mass = d[:, None] * pi_h
        signal = jnp.stack([jnp.sum(mass * sig[h]) for sig in rows])  # (1+M,)
        return tr.push_forward(_kernel(cmdp, p_sliced), mass).astype(dtype), (d, signal)

    d_final, (d_stages, signals) = jax.lax.scan(forward, init, (stages, policy, _stage_xs(cmdp)), unroll=_FUSED_UNROLL)
    occupancy = jnp.concatenate([d_stages, d_final[None]], axis=0)  # (H+1, S)
    per_stage = jnp.concatenate([signals.T, (terminal @ d_final)[:, None]], axis=1)  # (1+M, H+1)
    return _assemble(all_values, occupancy, per_stage, init)


def _assemble(all_values: Array, occupancy: Array, per_stage: Array, init: Array) -> Evaluation:
    """The :class:`Evaluation` of values (H+1, 1+M, S), occupancy (H+1, S), per-stage expected
    signals (1+M, H+1) and the initial distribution (S,)."""
    totals = all_values[0] @ init  # (1+M,)
    return Evaluation(
        reward=totals[0],
        costs=totals[1:],
        values=all_values[:, 0],
        cost_values=jnp.moveaxis(all_values[:, 1:], 1, 0),
        occupancy=occupancy,
        stage_rewards=per_stage[0],
        stage_costs=per_stage[1:],
    )
