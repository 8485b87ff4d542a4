"""Exact optima of finite-horizon CMDPs: dynamic programming, Lagrangian duality, and the
occupancy-measure linear program as a cross-check.

The constrained problem max_pi J(pi) s.t. S^(k)(pi) <= alpha^(k) (paper eqs. (1)-(2)) is a
linear program over occupancy measures, so strong duality holds:

    max_pi min_{nu >= 0} J(pi) - nu . (S(pi) - alpha) = min_{nu >= 0} D(nu),
    D(nu) = max_pi  E[ sum_h (r_h - nu . g_h) + (r_H - nu . g_H) ] + nu . alpha.

For fixed penalties nu the inner maximum is an unconstrained finite-horizon MDP, solved
exactly by backward induction (the *oracle*, jitted JAX). ``method="dual"`` minimises the
convex piecewise-linear D over nu with finitely many oracle calls and recovers an optimal
randomized policy by mixing the occupancy measures of at most M+1 deterministic oracle
policies. The paper's Lagrange multiplier lambda lives in [P, 0] and adds lambda * g to the
reward; our ``multipliers`` are the non-negative penalties nu = -lambda.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
import scipy.sparse as sp

from fhc_jax.cmdp import transitions as tr
from fhc_jax.cmdp.evaluate import (
    _FUSED_UNROLL,
    Evaluation,
    _evaluate,
    _kernel,
    _signal_rows,
    _signals,
    _stage_xs,
    require_cmdp,
)
from fhc_jax.cmdp.model import TabularCMDP

Array = jax.Array


class InfeasibleConstraintError(ValueError):
    """No policy satisfies all constraints. ``min_costs`` holds the minimum achievable
    expected total cost of each constraint on its own, (M,)."""

    def __init__(self, message: str, min_costs: np.ndarray):
        super().__init__(message)
        self.min_costs = min_costs


@dataclass(frozen=True)
class Solution:
    """An exact optimum.

    Attributes (H stages, S states, A actions, M constraints):
        policy: optimal non-stationary randomized policy mu_h(s, a), (H, S, A), float64.
            States unreachable at stage h under it get the uniform distribution.
        reward: its expected total reward J, ().
        costs: its expected total costs S^(k), (M,).
        multipliers: optimal non-negative penalty weights nu^(k) (the paper's lambda^(k)* is
            their negative); 0 for constraints that do not bind, (M,).
        status: "optimal".
        method: "dual", "lp" or "dp".
        oracle_calls: backward inductions used (dual), or 0.
        solve_time: wall time in seconds (compilation included on the first call).
        evaluation: exact :class:`Evaluation` of ``policy`` (values, occupancy, ...).
    """

    policy: np.ndarray
    reward: float
    costs: np.ndarray
    multipliers: np.ndarray
    status: str
    method: str
    oracle_calls: int = 0
    solve_time: float = 0.0
    evaluation: Evaluation | None = field(default=None, repr=False)


# ----------------------------------------------------------------------------- oracle


@jax.jit
def _greedy(cmdp: TabularCMDP, reward_weight: Array, penalties: Array):
    """Backward induction for the scalarised reward  rho * r - nu . g  (terminal included).

    Returns the deterministic optimal policy as action indices (H, S) and the exact expected
    reward J and costs S (M,) of that policy, tracked in the same backward pass: the
    scalarised Q-values need every action, O(S A N) per stage; the 1+M values of the chosen
    action only O((1+M) S N). Each stage's signals are read inside the scan (no stacked or
    scalarised (H, S, A) copies).
    """
    dtype = cmdp.initial_distribution.dtype
    rows, terminal = _signal_rows(cmdp, dtype)  # 1+M tables (H, S, A), (1+M, S)
    weights = jnp.concatenate([reward_weight[None], -penalties])  # (1+M,)

    def backward(carry, xs):
        v_scal, v_all = carry
        h, p_sliced = xs
        kernel = _kernel(cmdp, p_sliced)
        scal_h = weights[0] * rows[0][h]
        for k in range(1, len(rows)):
            scal_h = scal_h + weights[k] * rows[k][h]
        q = scal_h + tr.expect_next(kernel, v_scal, fused=True)  # (S, A)
        act = jnp.argmax(q, axis=-1)
        v_all_h = jnp.stack(
            [
                jnp.take_along_axis(sig[h], act[:, None], axis=-1)[:, 0] + tr.expect_next_action(kernel, v_all[k], act)
                for k, sig in enumerate(rows)
            ]
        )
        return (jnp.max(q, axis=-1), v_all_h), act

    (_, v0), actions = jax.lax.scan(
        backward,
        (weights @ terminal, terminal),
        (jnp.arange(cmdp.horizon), _stage_xs(cmdp)),
        reverse=True,
        unroll=_FUSED_UNROLL,
    )
    totals = v0 @ cmdp.initial_distribution
    return actions, totals[0], totals[1:]


@jax.jit
def _mixture_occupancy(cmdp: TabularCMDP, actions: Array, weights: Array) -> Array:
    """State-action occupancy of a mixture of deterministic policies (the mixture of their
    episodes, weight w_i for policy i): x_h(s, a) = sum_i w_i d_h^i(s) [a = actions_i[h, s]].

    Args:
        actions: (P, H, S) action indices of P deterministic policies.
        weights: (P,) mixture weights (padding entries with weight 0 add exact zeros).
    Returns:
        (H, S, A).
    """
    dtype = cmdp.initial_distribution.dtype

    def occupancy(acts):  # d_h(s) of one deterministic policy, O(S N) per stage
        def forward(d, xs):
            act_h, p_sliced = xs
            return tr.push_forward_action(_kernel(cmdp, p_sliced), d, act_h).astype(dtype), d

        return jax.lax.scan(forward, cmdp.initial_distribution, (acts, _stage_xs(cmdp)), unroll=_FUSED_UNROLL)[1]

    d = jax.vmap(occupancy)(actions)  # (P, H, S)
    one_hot = jax.nn.one_hot(actions, cmdp.num_actions, dtype=dtype)  # (P, H, S, A)
    x = weights[0] * (d[0, :, :, None] * one_hot[0])
    for i in range(1, actions.shape[0]):
        x = x + weights[i] * (d[i, :, :, None] * one_hot[i])
    return x


@jax.jit
def _policy_from_occupancy(x: Array) -> Array:
    """mu_h(s, a) = x_h(s, a) / sum_a x_h(s, a); uniform where (h, s) is unreachable."""
    mass = x.sum(axis=-1, keepdims=True)
    pol = jnp.where(mass > 1e-300, x / jnp.where(mass > 0, mass, 1.0), 1.0 / x.shape[-1])
    pol = jnp.clip(pol, 0.0, None)
    return pol / pol.sum(axis=-1, keepdims=True)


def _policy_and_evaluation(cmdp: TabularCMDP, x: Array) -> tuple[Array, Evaluation]:
    """The policy of an occupancy measure (H, S, A) and its exact evaluation (two compiled
    programs: one program for both took 1.5-3x longer to compile)."""
    policy = _policy_from_occupancy(x)
    return policy, _evaluate(cmdp, policy, fused=True)


def _mixture(cmdp: TabularCMDP, policies: list[tuple[Array, float]]) -> Array:
    """:func:`_mixture_occupancy` of ``(actions, weight)`` pairs, padded with weight-0 copies
    to max(2, M+1) policies (one compiled program for every solve of a model's shape)."""
    count = max(2, cmdp.num_constraints + 1, len(policies))
    padded = policies + [(policies[0][0], 0.0)] * (count - len(policies))
    actions = jnp.stack([acts for acts, _ in padded])
    weights = jnp.asarray([w for _, w in padded], dtype=cmdp.initial_distribution.dtype)
    return _mixture_occupancy(cmdp, actions, weights)


#: Relative tolerance of the exact solvers' feasibility and stopping tests (see :func:`solve`).
REL_TOL = 1e-9


@dataclass(frozen=True)
class _Units:
    """The magnitudes the exact solvers measure rewards and costs in (scale-free solving).

    Attributes:
        reward: c_r = H max|r_h| + max|r_H| (> 0; 1 where every reward is 0), ().
        costs: c_k = H max|g^(k)_h| + max|g^(k)_H| per constraint (> 0; |alpha^(k)| where
            every cost k is 0, or 1 where that is 0 too), (M,).
    """

    reward: float
    costs: np.ndarray


def _max_abs(x) -> float:
    x = np.asarray(x)
    return float(max(x.max(), -x.min())) if x.size else 0.0


def _units(cmdp: TabularCMDP) -> _Units:
    """:class:`_Units` of a model: a bound on |total reward| and on each |total cost| of an
    episode (host-side, one pass over each table, no stacked copy)."""
    h, m = cmdp.horizon, cmdp.num_constraints
    reward = h * _max_abs(cmdp.expected_rewards()) + _max_abs(cmdp.terminal_rewards)
    if m:
        stage = np.abs(np.asarray(cmdp.expected_costs(), dtype=np.float64).reshape(m, -1)).max(axis=1)
        final = np.abs(np.asarray(cmdp.terminal_costs, dtype=np.float64)).max(axis=1)
        costs = h * stage + final
    else:
        costs = np.zeros(0)
    alpha = np.abs(np.asarray(cmdp.thresholds, dtype=np.float64))
    costs = np.where(costs > 0, costs, np.where(alpha > 0, alpha, 1.0))
    return _Units(reward=reward if reward > 0 else 1.0, costs=costs)


class _Oracle:
    """Counts calls and keeps results in float64 numpy, in the units of ``units``: rewards
    divided by c_r, cost k by c_k (penalties nu are per unit of the divided costs and
    rewards). With ``units=None`` the model's own units."""

    def __init__(self, cmdp: TabularCMDP, units: _Units | None = None):
        self.cmdp = cmdp
        self.calls = 0
        m = cmdp.num_constraints
        self.dtype = cmdp.initial_distribution.dtype
        self.m = m
        self.reward_unit = 1.0 if units is None else float(units.reward)
        self.cost_units = np.ones(m) if units is None else np.asarray(units.costs, dtype=np.float64)

    def __call__(self, penalties: np.ndarray, reward_weight: float = 1.0):
        """Backward induction for (rho / c_r) r - sum_k (nu_k / c_k) g^(k). Returns the
        deterministic optimum's actions (H, S), its reward J / c_r and costs C / c (M,)."""
        self.calls += 1
        weights = np.asarray(penalties, dtype=np.float64) / self.cost_units
        # without penalties the argmax of the reward alone, in the model's own units: the policy
        # of solve_unconstrained, whatever ties rounding in other units would break otherwise
        rho = reward_weight if not weights.any() else reward_weight / self.reward_unit
        acts, j, c = _greedy(self.cmdp, jnp.asarray(rho, self.dtype), jnp.asarray(weights, self.dtype))
        return acts, float(j) / self.reward_unit, np.asarray(c, dtype=np.float64) / self.cost_units


# ----------------------------------------------------------------------------- public API


def solve_unconstrained(cmdp: TabularCMDP) -> Solution:
    """Optimal policy ignoring the constraints, by backward induction (deterministic).

    Args:
        cmdp: the model.
    Returns:
        :class:`Solution` with ``method="dp"`` and zero multipliers; ``costs`` are the costs
        the unconstrained optimum incurs.
    """
    require_cmdp("solve_unconstrained", cmdp)
    t0 = time.perf_counter()
    with jax.enable_x64(True):
        c64 = cmdp.astype(jnp.float64)
        oracle = _Oracle(c64)
        acts, _, _ = oracle(np.zeros(cmdp.num_constraints))
        return _finish(c64, _mixture(c64, [(acts, 1.0)]), np.zeros(cmdp.num_constraints), "dp", oracle.calls, t0)


def solve(cmdp: TabularCMDP, method: Literal["dual", "lp"] = "dual", *, max_iterations: int = 200) -> Solution:
    """Exact constrained optimum: optimal randomized non-stationary policy and multipliers.

    ``method="dual"`` (default): Lagrangian duality over a backward-induction oracle. For
    M = 1, an exact root search on the multiplier (intersection of the Lagrangian lines of
    the two bracketing deterministic policies, a finite Newton method on the piecewise-linear
    dual), then the mixture of their occupancy measures that meets the threshold with equality
    when the constraint binds. For M > 1, column generation (Dantzig-Wolfe, i.e. Kelley's
    cutting planes on the dual) with a feasibility phase; the final restricted LP mixes at
    most M+1 deterministic policies. Runs in float64 whatever ``jax_enable_x64`` says.

    ``method="lp"``: the occupancy-measure linear program solved with HiGHS (scipy): the
    cross-check, practical for small instances only.

    **Scale-free.** Both methods measure rewards in units of c_r = H max|r_h| + max|r_H| and
    each constraint's costs and threshold in units of its own c_k = H max|g^(k)_h| +
    max|g^(k)_H| (|alpha^(k)| if every cost k is 0, else 1), solve, and map the multipliers
    back (nu^(k) = nu'^(k) c_r / c_k). Rescaling the rewards by any c > 0 and each constraint's
    costs with its threshold by any c' > 0 gives the same policy, the reward and costs scaled,
    and the multipliers scaled by c / c' (to rounding), from costs of 1e-12 to 1e12 of the
    rewards. Tolerances are relative: a cost counts as meeting its threshold within
    ``REL_TOL`` (1e-9) x max(c_k, |alpha^(k)|) (the reported costs exceed alpha by at most that),
    and the multiplier search stops when the dual bound is within ``REL_TOL`` x c_r (1 +
    sum_k nu'^(k) (1 + |alpha^(k)| / c_k)) of the primal value.

    Args:
        cmdp: the model (M >= 1).
        method: "dual" or "lp".
        max_iterations: cap on oracle calls / column generation rounds (dual).
    Returns:
        :class:`Solution`.
    Raises:
        InfeasibleConstraintError: no policy satisfies all thresholds; the message lists the
            minimum achievable cost of each constraint.
        TypeError: ``cmdp`` is not a :class:`TabularCMDP`, or ``max_iterations`` not an integer.
        ValueError: unknown ``method``, ``max_iterations`` < 1.
    """
    require_cmdp("solve", cmdp)
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, (int, np.integer)):
        raise TypeError(f"solve: max_iterations must be an integer, found {type(max_iterations).__name__}")
    if max_iterations < 1:
        raise ValueError(f"solve: max_iterations must be >= 1, found {max_iterations}")
    if not isinstance(method, str) or method not in ("dual", "lp"):
        raise ValueError(f"solve: method must be 'dual' or 'lp', found {method!r}")
    t0 = time.perf_counter()
    with jax.enable_x64(True):
        c64 = cmdp.astype(jnp.float64)
        units = _units(c64)
        if method == "lp":
            return _solve_lp(c64, units, t0)
        oracle = _Oracle(c64, units)
        if cmdp.num_constraints == 0:
            acts, _, _ = oracle(np.zeros(0))
            return _finish(c64, _mixture(c64, [(acts, 1.0)]), np.zeros(0), "dual", oracle.calls, t0)
        if cmdp.num_constraints == 1:
            x, nu = _solve_single(c64, oracle, max_iterations)
        else:
            x, nu = _solve_column_generation(c64, oracle, max_iterations)
        return _finish(c64, x, nu * units.reward / units.costs, "dual", oracle.calls, t0)


def _finish(c64, x, nu, method, calls, t0) -> Solution:
    policy, ev = jax.device_get(_policy_and_evaluation(c64, jnp.asarray(x, dtype=jnp.float64)))
    return Solution(
        policy=np.asarray(policy, dtype=np.float64),
        reward=float(ev.reward),
        costs=np.asarray(ev.costs, dtype=np.float64),
        multipliers=np.maximum(np.asarray(nu, dtype=np.float64), 0.0),
        status="optimal",
        method=method,
        oracle_calls=calls,
        solve_time=time.perf_counter() - t0,
        evaluation=ev,
    )


def _infeasible(oracle: _Oracle, alpha: np.ndarray, joint: bool = False) -> InfeasibleConstraintError:
    """The error for thresholds ``alpha`` (M,) (the model's units) that no policy meets, with
    the least achievable cost of each constraint on its own (the model's units)."""
    m = oracle.m
    mins = np.array([oracle(np.eye(m)[k], reward_weight=0.0)[2][k] for k in range(m)]) * oracle.cost_units
    lines = ", ".join(f"constraint {k}: minimum {mins[k]:.6g} vs threshold {alpha[k]:.6g}" for k in range(m))
    what = "the thresholds cannot be met jointly" if joint else "a threshold is below the minimum achievable cost"
    return InfeasibleConstraintError(
        f"infeasible constraints ({what}); minimum achievable expected total costs: {lines}", mins
    )


def _cost_tolerance(alpha: np.ndarray) -> np.ndarray:
    """Feasibility tolerance of normalised costs (units c_k) against normalised thresholds
    ``alpha`` (M,): REL_TOL max(1, |alpha|), i.e. REL_TOL max(c_k, |alpha^(k)|) in the model's units."""
    return REL_TOL * np.maximum(1.0, np.abs(alpha))


def _dual_tolerance(nu: np.ndarray, alpha: np.ndarray) -> float:
    """Stopping tolerance of the dual bound against the primal value (normalised units):
    REL_TOL (1 + sum_k nu_k (1 + |alpha_k|)), the rounding scale of J - nu . (C - alpha)."""
    return REL_TOL * (1.0 + float(np.sum(np.asarray(nu) * (1.0 + np.abs(alpha)))))


def _bracket_step(oracle: _Oracle, lo, hi, alpha: float):
    """One step of the M = 1 multiplier search between the oracle results ``lo`` (cost above
    ``alpha``) and ``hi`` (cost at most ``alpha``), normalised units.

    The Lagrangian lines L_i(nu) = J_i - nu (C_i - alpha) of the two policies cross at
    nu_x = (J_lo - J_hi) / (C_lo - C_hi); the oracle at nu_x either certifies both optimal there
    (D(nu_x) equals the lines' value: nu_x is the optimal multiplier, ``done``) or returns a
    policy above the segment between them, which replaces ``lo`` or ``hi``.

    Returns:
        (lo, hi, nu_x, done).
    """
    (_, j_lo, c_lo), (_, j_hi, c_hi) = lo, hi
    nu = max(0.0, (j_lo - j_hi) / (c_lo[0] - c_hi[0]))
    cand = oracle(np.array([nu]))
    dual = cand[1] - nu * (cand[2][0] - alpha)
    line = j_lo - nu * (c_lo[0] - alpha)
    if dual <= line + _dual_tolerance(np.array([nu]), np.array([alpha])):
        return lo, hi, nu, True
    if cand[2][0] > alpha:
        return cand, hi, nu, False
    return lo, cand, nu, False


def _solve_single(cmdp: TabularCMDP, oracle: _Oracle, max_iterations: int):
    """M = 1: finite root search on the multiplier with exact two-policy mixing (normalised
    units: returns the occupancy (H, S, A) and nu' (1,) per unit of c_k / c_r)."""
    alpha = float(np.asarray(cmdp.thresholds)[0]) / oracle.cost_units[0]
    tol = float(_cost_tolerance(np.array([alpha]))[0])
    lo = oracle(np.zeros(1))  # nu = 0: best reward
    if lo[2][0] <= alpha + tol:
        return _mixture(cmdp, [(lo[0], 1.0)]), np.zeros(1)
    hi = oracle(np.ones(1), reward_weight=0.0)  # least cost
    if hi[2][0] > alpha + tol:
        raise _infeasible(oracle, np.asarray(cmdp.thresholds, dtype=np.float64))
    for _ in range(max_iterations):
        lo, hi, nu, done = _bracket_step(oracle, lo, hi, alpha)
        if done:
            break
    else:
        raise RuntimeError(f"solve: multiplier search did not converge in {max_iterations} oracle calls")
    c_lo, c_hi = lo[2][0], hi[2][0]
    q = float(np.clip((alpha - c_hi) / (c_lo - c_hi), 0.0, 1.0))  # weight of the costlier policy
    x = _mixture(cmdp, [(lo[0], q), (hi[0], 1.0 - q)])
    return x, np.array([nu])


#: HiGHS tolerances of the restricted master LP (data in normalised units, O(1)): its duals are
#: the multipliers, and the default 1e-7 left them inexact enough for Kelley's method to return
#: the same column forever
_MASTER_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def _restricted_master(rewards: np.ndarray, costs: np.ndarray, alpha: np.ndarray, phase1: bool):
    """LP over mixture weights of the generated policies (the restricted master problem).

    Phase 1: min sum_k s_k  s.t. sum_i w_i C_ik - s_k <= alpha_k, sum w = 1, w, s >= 0.
    Phase 2: max sum_i w_i J_i s.t. sum_i w_i C_ik <= alpha_k,  sum w = 1, w >= 0.
    Returns weights, objective (as a maximisation value), penalties nu >= 0 of the cost rows.
    """
    n, m = costs.shape
    if phase1:
        c = np.concatenate([np.zeros(n), np.ones(m)])
        a_ub = np.hstack([costs.T, -np.eye(m)])
        a_eq = np.concatenate([np.ones(n), np.zeros(m)])[None]
    else:
        c = -rewards
        a_ub = costs.T
        a_eq = np.ones((1, n))
    res = scipy.optimize.linprog(
        c, A_ub=a_ub, b_ub=alpha, A_eq=a_eq, b_eq=[1.0], bounds=(0, None), method="highs", options=_MASTER_OPTIONS
    )
    if res.status != 0:
        raise RuntimeError(f"solve: restricted master LP failed: {res.message}")
    nu = -np.asarray(res.ineqlin.marginals)
    return res.x[:n], -res.fun, np.maximum(nu, 0.0)


def _solve_column_generation(cmdp: TabularCMDP, oracle: _Oracle, max_iterations: int):
    """M >= 2: Dantzig-Wolfe column generation over deterministic oracle policies (normalised
    units: returns the occupancy (H, S, A) and nu' (M,) per unit of c_k / c_r)."""
    alpha = np.asarray(cmdp.thresholds, dtype=np.float64) / oracle.cost_units  # normalised units
    m = alpha.shape[0]
    tol = float(np.sum(_cost_tolerance(alpha)))
    cols = [oracle(np.zeros(m))] + [oracle(np.eye(m)[k], reward_weight=0.0) for k in range(m)]

    def master(phase1):
        return _restricted_master(np.array([c[1] for c in cols]), np.stack([c[2] for c in cols]), alpha, phase1)

    # Phase 1: find a feasible mixture (minimise total violation).
    for _ in range(max_iterations):
        w, value, nu = master(True)
        if -value <= tol:
            break
        cand = oracle(nu, reward_weight=0.0)
        # Pricing: a column improves phase 1 iff nu . C_new < nu . alpha - (phase-1 dual value).
        if nu @ cand[2] >= min(nu @ c[2] for c in cols) - tol:
            raise _infeasible(oracle, np.asarray(cmdp.thresholds, dtype=np.float64), joint=True)
        cols.append(cand)
    else:
        raise RuntimeError(f"solve: feasibility phase did not converge in {max_iterations} rounds")

    # Phase 2: maximise reward; the dual of the master is Kelley's cutting-plane model of D.
    for _ in range(max_iterations):
        w, value, nu = master(False)
        cand = oracle(nu)
        dual_value = cand[1] - nu @ (cand[2] - alpha)  # D(nu) >= optimum >= master value
        if dual_value <= value + _dual_tolerance(nu, alpha):
            break
        if any(cand[1] == c[1] and np.array_equal(cand[2], c[2]) for c in cols):
            break  # no new column prices out: the master's optimum is the optimum (to the LP's precision)
        cols.append(cand)
    else:
        raise RuntimeError(f"solve: column generation did not converge in {max_iterations} rounds")
    x = _mixture(cmdp, [(cols[i][0], float(wi)) for i, wi in enumerate(w) if wi > 1e-12])
    return x, nu


# ----------------------------------------------------------------------------- LP cross-check


def _solve_lp(cmdp: TabularCMDP, units: _Units, t0: float) -> Solution:
    """Occupancy-measure LP: variables x_h(s, a) >= 0 with flow conservation.

    max sum x_h(s,a) r_h(s,a)  s.t.  sum_a x_0(s,a) = beta(s),
    sum_a x_{h+1}(s',a) = sum_{s,a} p_h(s,a,s') x_h(s,a),  sum x g^(k) <= alpha^(k);
    terminal rewards/costs are folded into stage H-1 through p_{H-1}. The objective row is
    divided by c_r, each cost row and its threshold by c_k (``units``; HiGHS's tolerances are
    absolute), and the multipliers mapped back.
    """
    h_, s_, a_, m = cmdp.horizon, cmdp.num_states, cmdp.num_actions, cmdp.num_constraints
    n = h_ * s_ * a_
    stage, terminal = (np.array(z, dtype=np.float64) for z in _signals(cmdp))
    last = tr.stage(cmdp.transitions, h_ - 1)
    stage[:, -1] += np.asarray(tr.expect_next(last, jnp.asarray(terminal)))
    obj = stage.reshape(1 + m, n) / np.concatenate([[units.reward], units.costs])[:, None]
    alpha = np.asarray(cmdp.thresholds, np.float64) / units.costs

    # Flow rows: one per (h, s); row (h, s) = sum_a x_h(s, a) - inflow from stage h-1.
    rows, cols, vals = [], [], []
    idx = np.arange(n).reshape(h_, s_, a_)
    for h in range(h_):  # host-side LP assembly (not a hot path)
        rows.append(np.repeat(h * s_ + np.arange(s_), a_))
        cols.append(idx[h].reshape(-1))
        vals.append(np.ones(s_ * a_))
        if h > 0:
            r, c, v = tr.to_numpy_coo(cmdp.transitions, h - 1)
            rows.append(h * s_ + c)
            cols.append((h - 1) * s_ * a_ + r)
            vals.append(-v)
    a_eq = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(h_ * s_, n))
    b_eq = np.zeros(h_ * s_)
    b_eq[:s_] = np.asarray(cmdp.initial_distribution, dtype=np.float64)
    problem = {
        "c": -obj[0],
        "A_ub": sp.csr_matrix(obj[1:]) if m else None,
        "b_ub": alpha if m else None,
        "A_eq": a_eq,
        "b_eq": b_eq,
        "bounds": (0, None),
    }
    res = scipy.optimize.linprog(**problem, method="highs")
    if res.status not in (0, 2):
        # HiGHS's simplex may end without a verdict ("model status Unknown") on thresholds just
        # below the least achievable cost; its interior-point method (with crossover) decides them
        res = scipy.optimize.linprog(**problem, method="highs-ipm")
    if res.status == 2:
        raise _infeasible(_Oracle(cmdp, units), np.asarray(cmdp.thresholds, np.float64), joint=m > 1)
    if res.status != 0:
        raise RuntimeError(f"solve(method='lp'): HiGHS failed: {res.message}")
    nu = -np.asarray(res.ineqlin.marginals) * units.reward / units.costs if m else np.zeros(0)
    return _finish(cmdp, np.clip(res.x, 0.0, None).reshape(h_, s_, a_), nu, "lp", 0, t0)
