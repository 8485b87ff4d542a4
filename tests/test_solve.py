"""Exact optima: the dual solver against the occupancy-measure LP and hand-computed answers."""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_cmdp, switch_cmdp

import fhc_jax as fhc


def test_hand_computed_constrained_optimum(x64):
    # Deterministic policies (cost, reward): (0, 0), (1, 11), (2, 11), (1, 2). With alpha = 0.5 the
    # optimum mixes "stay, stay" and "stay, switch" half-half: reward 5.5, multiplier 11.
    for method in ("dual", "lp"):
        sol = fhc.solve(switch_cmdp(0.5), method=method)
        assert sol.reward == pytest.approx(5.5)
        np.testing.assert_allclose(sol.costs, [0.5])
        np.testing.assert_allclose(sol.multipliers, [11.0])
        np.testing.assert_allclose(sol.policy[0, 0], [1.0, 0.0])
        np.testing.assert_allclose(sol.policy[1, 0], [0.5, 0.5])
        np.testing.assert_allclose(sol.policy[0, 1], [0.5, 0.5])  # unreachable: uniform
        np.testing.assert_allclose(sol.policy[1, 1], [0.5, 0.5])


def test_non_binding_constraint_gives_unconstrained_optimum(x64):
    sol = fhc.solve(switch_cmdp(5.0))
    assert sol.reward == pytest.approx(11.0)
    np.testing.assert_allclose(sol.multipliers, [0.0])
    un = fhc.solve_unconstrained(switch_cmdp(5.0))
    assert un.reward == pytest.approx(11.0) and un.method == "dp"


def _cost_minimiser(cmdp):
    """Deterministic policy minimising the sum of all constraint costs (by DP)."""
    total = cmdp.replace(
        rewards=-np.asarray(cmdp.costs).sum(0), terminal_rewards=-np.asarray(cmdp.terminal_costs).sum(0)
    )
    return fhc.solve_unconstrained(total).policy


def _thresholds(cmdp, binding):
    unconstrained = fhc.solve_unconstrained(cmdp)
    if not binding:
        return np.asarray(unconstrained.costs) + 0.1
    # Halfway between the unconstrained optimum's costs and those of the cost minimiser:
    # feasible (the half-half occupancy mixture meets them) and binding for some k.
    low = fhc.evaluate(cmdp, jnp.asarray(_cost_minimiser(cmdp))).costs
    return 0.5 * (np.asarray(unconstrained.costs) + np.asarray(low))


CASES = list(itertools.product([1, 2, 3], [0, 1, 2], [True, False]))


@pytest.mark.parametrize("m, seed, binding", CASES)
def test_dual_matches_lp(x64, m, seed, binding):
    base = random_cmdp(seed, num_states=6, num_actions=3, horizon=5, num_constraints=m)
    cmdp = base.replace(thresholds=_thresholds(base, binding))
    dual = fhc.solve(cmdp)
    lp = fhc.solve(cmdp, method="lp")
    assert dual.reward == pytest.approx(lp.reward, rel=1e-6)
    assert np.all(dual.costs <= np.asarray(cmdp.thresholds) + 1e-8)
    assert np.all(dual.multipliers >= 0.0)
    if binding:
        assert dual.reward < fhc.solve_unconstrained(cmdp).reward - 1e-6
        # Complementary slackness: a positive multiplier means the constraint is tight.
        tight = dual.multipliers > 1e-7
        assert tight.any()
        np.testing.assert_allclose(dual.costs[tight], np.asarray(cmdp.thresholds)[tight], atol=1e-8)
    else:
        np.testing.assert_allclose(dual.multipliers, 0.0, atol=1e-9)
    # Strong duality with the reported multipliers: D(nu) = J*.
    shifted = cmdp.replace(
        rewards=np.asarray(cmdp.rewards) - np.einsum("k,khsa->hsa", dual.multipliers, cmdp.costs),
        terminal_rewards=np.asarray(cmdp.terminal_rewards) - dual.multipliers @ np.asarray(cmdp.terminal_costs),
    )
    d_nu = fhc.solve_unconstrained(shifted).reward + dual.multipliers @ np.asarray(cmdp.thresholds)
    assert d_nu == pytest.approx(lp.reward, rel=1e-6)


@pytest.mark.parametrize("m", [1, 2])
def test_reported_numbers_are_the_policy_s_exact_values(x64, m):
    base = random_cmdp(7, num_constraints=m)
    cmdp = base.replace(thresholds=_thresholds(base, True))
    sol = fhc.solve(cmdp)
    ev = fhc.evaluate(cmdp, jnp.asarray(sol.policy))
    assert sol.reward == pytest.approx(float(ev.reward), rel=1e-12)
    np.testing.assert_allclose(sol.costs, ev.costs, rtol=1e-12)
    np.testing.assert_allclose(sol.policy.sum(-1), 1.0)
    assert sol.oracle_calls >= 2 and sol.status == "optimal"


def test_binding_single_constraint_holds_with_equality_by_randomising(x64):
    base = random_cmdp(11, num_states=6, horizon=5)
    cmdp = base.replace(thresholds=_thresholds(base, True))
    sol = fhc.solve(cmdp)
    np.testing.assert_allclose(sol.costs, cmdp.thresholds, rtol=1e-10)
    assert sol.multipliers[0] > 0
    randomised = (sol.policy.max(-1) < 1 - 1e-9) & (sol.evaluation.occupancy[:-1] > 0)
    assert randomised.any()


@pytest.mark.parametrize("m", [1, 2])
def test_infeasible_thresholds_raise_with_minimum_costs(x64, m):
    base = random_cmdp(3, num_constraints=m)
    mins = np.array(
        [
            -fhc.solve_unconstrained(
                base.replace(rewards=-np.asarray(base.costs[k]), terminal_rewards=-np.asarray(base.terminal_costs[k]))
            ).reward
            for k in range(m)
        ]
    )
    cmdp = base.replace(thresholds=mins - 0.05)
    for method in ("dual", "lp"):
        with pytest.raises(fhc.InfeasibleConstraintError, match="minimum achievable") as err:
            fhc.solve(cmdp, method=method)
        np.testing.assert_allclose(err.value.min_costs, mins, rtol=1e-9)
        assert f"{mins[0]:.6g}" in str(err.value)


@pytest.mark.slow
def test_sparse_and_time_invariant_models(x64):
    base = random_cmdp(9, time_varying=False, num_constraints=2)
    p = np.asarray(base.transitions)
    sparse = base.replace(transitions=fhc.SparseTransitions(np.broadcast_to(np.arange(5), p.shape).astype(np.int32), p))
    th = _thresholds(base, True)
    a = fhc.solve(base.replace(thresholds=th))
    b = fhc.solve(sparse.replace(thresholds=th))
    c = fhc.solve(sparse.replace(thresholds=th), method="lp")
    assert a.reward == pytest.approx(b.reward, rel=1e-9)
    assert b.reward == pytest.approx(c.reward, rel=1e-6)


def test_float32_model_is_solved_in_float64():
    cmdp = random_cmdp(2)  # float32 data outside x64 mode
    sol = fhc.solve(cmdp.replace(thresholds=np.array([2.0])))
    assert sol.policy.dtype == np.float64


def test_unknown_method():
    with pytest.raises(ValueError, match="method must be 'dual' or 'lp'"):
        fhc.solve(random_cmdp(0), method="simplex")
