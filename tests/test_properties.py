"""Property-based tests (hypothesis) of the exact layer on random small CMDPs (S <= 4, A <= 3,
H <= 4, M <= 2): the dual solver equals the LP, infeasibility is detected exactly (an
``InfeasibleConstraintError`` iff the LP is infeasible, iff a threshold is below the minimum
achievable cost), and ``evaluate`` equals Monte-Carlo within a Hoeffding bound."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fhc_jax as fhc

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SETTINGS = settings(
    max_examples=10, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)

dims = st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 4))  # S, A, H


def build(seed: int, s: int, a: int, h: int, m: int, fractions=None) -> fhc.TabularCMDP:
    """A random CMDP: Dirichlet transitions with some exact zeros, per-next-state or expected
    rewards and costs in [0, 1]; thresholds at ``fractions`` of the way from the minimum
    achievable cost to the unconstrained optimum's cost (negative: infeasible)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(s, 0.7), size=(h, s, a))
    p = np.where(p < 0.05, 0.0, p)
    p[..., 0] += 1.0 - p.sum(-1)  # keep rows stochastic after zeroing
    p = np.abs(p) / np.abs(p).sum(-1, keepdims=True)
    kwargs = dict(
        transitions=p,
        rewards=rng.uniform(0, 1, (h, s, a)),
        costs=rng.uniform(0, 1, (m, h, s, a)),
        terminal_rewards=rng.uniform(0, 1, s),
        terminal_costs=rng.uniform(0, 1, (m, s)),
        initial_distribution=rng.dirichlet(np.ones(s)),
    )
    cmdp = fhc.TabularCMDP(thresholds=np.full(m, 1e9), **kwargs)
    if fractions is None:
        return cmdp
    lo, hi = min_costs(cmdp), np.asarray(fhc.solve_unconstrained(cmdp).costs)
    alpha = lo + np.asarray(fractions[:m]) * np.maximum(hi - lo, 1e-3)
    return cmdp.replace(thresholds=alpha)


def min_costs(cmdp: fhc.TabularCMDP) -> np.ndarray:
    """Minimum achievable expected total cost of each constraint on its own (DP on -cost)."""
    out = []
    for k in range(cmdp.num_constraints):
        neg = fhc.TabularCMDP(
            cmdp.transitions,
            -np.asarray(cmdp.costs[k]),
            cmdp.costs,
            -np.asarray(cmdp.terminal_costs[k]),
            cmdp.terminal_costs,
            cmdp.thresholds,
            cmdp.initial_distribution,
        )
        out.append(-fhc.solve_unconstrained(neg).reward)
    return np.array(out)


fraction = st.floats(-0.5, 1.5).filter(lambda t: abs(t) > 1e-3)  # away from the exact boundary


@pytest.mark.slow
@SETTINGS
@given(dims, st.integers(1, 2), st.integers(0, 2**31 - 1), st.tuples(fraction, fraction))
def test_dual_equals_lp_and_infeasibility_is_exact(shape, m, seed, fractions):
    with jax.enable_x64(True):
        cmdp = build(seed, *shape, m, fractions)
        alpha = np.asarray(cmdp.thresholds)
        results = {}
        for method in ("dual", "lp"):
            try:
                results[method] = fhc.solve(cmdp, method=method)
            except fhc.InfeasibleConstraintError as err:
                results[method] = err
        dual, lp = results["dual"], results["lp"]
        assert isinstance(dual, fhc.InfeasibleConstraintError) == isinstance(lp, fhc.InfeasibleConstraintError)
        if m == 1:  # one constraint: feasible iff alpha >= the minimum achievable cost
            assert isinstance(dual, fhc.InfeasibleConstraintError) == (fractions[0] < 0)
        if isinstance(dual, fhc.InfeasibleConstraintError):
            np.testing.assert_allclose(dual.min_costs, min_costs(cmdp), rtol=1e-9, atol=1e-9)
            assert np.any(dual.min_costs > alpha) or m > 1  # jointly infeasible needs M > 1
            return
        scale = 1.0 + abs(lp.reward)
        assert abs(dual.reward - lp.reward) <= 1e-6 * scale
        assert np.all(dual.costs <= alpha + 1e-6 * (1 + np.abs(alpha)))
        ev = fhc.evaluate(cmdp, dual.policy)
        assert abs(float(ev.reward) - dual.reward) <= 1e-9 * scale


@pytest.mark.slow
@settings(SETTINGS, max_examples=8)
@given(dims, st.integers(1, 2), st.integers(0, 2**31 - 1))
def test_evaluate_equals_monte_carlo(shape, m, seed):
    s, a, h = shape
    cmdp = build(seed, s, a, h, m)
    rng = np.random.default_rng(seed + 1)
    policy = rng.dirichlet(np.full(a, 0.5), size=(h, s))
    with jax.enable_x64(True):
        ev = fhc.evaluate(cmdp, policy)
    # K episodes by inverse-CDF sampling in numpy
    k = 20_000
    p, r, c = (np.asarray(x, np.float64) for x in (cmdp.transitions, cmdp.rewards, cmdp.costs))
    state = (rng.uniform(size=k)[:, None] > np.cumsum(np.asarray(cmdp.initial_distribution))[None]).sum(1)
    state = np.minimum(state, s - 1)
    reward, cost = np.zeros(k), np.zeros((m, k))
    for t in range(h):
        act = np.minimum((rng.uniform(size=k)[:, None] > np.cumsum(policy[t, state], 1)).sum(1), a - 1)
        reward += r[t, state, act]
        cost += c[:, t, state, act]
        nxt = (rng.uniform(size=k)[:, None] > np.cumsum(p[t, state, act], 1)).sum(1)
        state = np.minimum(nxt, s - 1)
    reward += np.asarray(cmdp.terminal_rewards)[state]
    cost += np.asarray(cmdp.terminal_costs)[:, state]
    # every total lies in [0, H + 1]: Hoeffding, two-sided, failure probability 1e-9 per check
    bound = (h + 1) * np.sqrt(np.log(2 / 1e-9) / (2 * k))
    assert abs(reward.mean() - float(ev.reward)) <= bound
    assert np.all(np.abs(cost.mean(1) - np.asarray(ev.costs)) <= bound)
