"""The exact referee is scale-free (issue 43, items A and C): ``solve`` and ``evaluate`` on a task
and on copies in other units (rewards x c_r, costs and thresholds x c_c, each from 1e-12 to 1e12
independently) give a policy that is optimal in the original units, the reward scaled by c_r,
the costs by c_c and the multipliers by c_r / c_c, with both methods; infeasibility is found at
every scale; values a float dtype would flush to zero are refused by name."""

from __future__ import annotations

import functools
import itertools

import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.envs import suite

SCALES = (1e-12, 1.0, 1e12)
TASKS = ("garnet_s20", "gridworld5_tight")
REL = 1e-5  # the rescaled float32 model rounds each entry (relative 6e-8); what solving adds is ~1e-8


@functools.cache
def _reference(name: str, method: str):
    cmdp = suite.task(name).cmdp()
    return cmdp, fhc.solve(cmdp, method=method)


@pytest.mark.slow
@pytest.mark.parametrize("name, method", list(itertools.product(TASKS, ("dual", "lp"))))
def test_solve_and_evaluate_are_unit_invariant(name, method):
    base, ref = _reference(name, method)
    assert ref.multipliers[0] > 0  # the threshold binds: the units matter
    for c_r, c_c in itertools.product(SCALES, SCALES):
        cmdp = suite.rescale(base, c_r, c_c)
        sol = fhc.solve(cmdp, method=method)
        where = f"{name}, {method}, c_r = {c_r:g}, c_c = {c_c:g}"
        assert sol.reward == pytest.approx(ref.reward * c_r, rel=REL), where
        np.testing.assert_allclose(sol.costs, ref.costs * c_c, rtol=REL, err_msg=where)
        assert sol.costs[0] <= float(cmdp.thresholds[0]) * (1 + 1e-6), where  # within the budget at every scale
        np.testing.assert_allclose(sol.multipliers, ref.multipliers * c_r / c_c, rtol=1e-4, err_msg=where)
        # the policy: optimal in the original units (the gridworld has ties: another optimal
        # policy may be picked), equal to the reference where the optimum is unique (Garnet)
        back = fhc.evaluate(base, jnp.asarray(sol.policy, jnp.float32))
        assert float(back.reward) == pytest.approx(ref.reward, rel=REL), where
        np.testing.assert_allclose(back.costs, ref.costs, rtol=REL, err_msg=where)
        if name.startswith("garnet"):
            reached = sol.evaluation.occupancy[:-1, :, None] > 0
            np.testing.assert_allclose(
                np.where(reached, sol.policy, 0), np.where(reached, ref.policy, 0), atol=1e-5, err_msg=where
            )
        # evaluate in other units: the same numbers, scaled
        ev = fhc.evaluate(cmdp, jnp.asarray(ref.policy, jnp.float32))
        assert float(ev.reward) == pytest.approx(ref.reward * c_r, rel=REL), where
        np.testing.assert_allclose(ev.costs, ref.costs * c_c, rtol=REL, err_msg=where)
        np.testing.assert_allclose(
            ev.values[0] / c_r,
            np.asarray(fhc.evaluate(base, jnp.asarray(ref.policy, jnp.float32)).values[0]),
            rtol=REL,
            atol=1e-6 * abs(ref.reward),
            err_msg=where,
        )


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_infeasibility_is_found_at_every_scale(name):
    base = suite.task(name).cmdp()
    least, free = suite.cost_range(base)
    alpha = least - 1e-3 * (free - least)  # just below the cheapest policy's cost
    for c_r, c_c in itertools.product(SCALES, SCALES):
        cmdp = suite.rescale(base.replace(thresholds=alpha), c_r, c_c)
        for method in ("dual", "lp"):
            with pytest.raises(fhc.InfeasibleConstraintError, match="minimum achievable") as err:
                fhc.solve(cmdp, method=method)
            np.testing.assert_allclose(
                err.value.min_costs, least * c_c, rtol=1e-5, err_msg=f"{name}, {method}, c_r = {c_r:g}, c_c = {c_c:g}"
            )


def test_costs_far_below_the_rewards_are_not_ignored():
    """The probe of issue 43: a reward of 1,000 against a cost of 1e-8 and alpha = 5e-9. The
    old absolute tolerance (1e-9 of the reward scale) took cost 1e-8 for feasible."""
    cmdp = fhc.TabularCMDP(
        np.ones((1, 2, 1)),
        np.array([[[1e3, 0.0]]]),
        np.array([[[[1e-8, 0.0]]]]),
        thresholds=np.array([5e-9]),
        initial_distribution=np.ones(1),
    )
    for method in ("dual", "lp"):
        sol = fhc.solve(cmdp, method=method)
        np.testing.assert_allclose(sol.costs, [5e-9], rtol=1e-6)
        assert sol.reward == pytest.approx(500.0, rel=1e-6)
        np.testing.assert_allclose(sol.policy[0, 0], [0.5, 0.5], rtol=1e-6)
        np.testing.assert_allclose(sol.multipliers, [1e11], rtol=1e-6)  # 1,000 reward per 1e-8 cost
    with pytest.raises(fhc.InfeasibleConstraintError):
        fhc.solve(cmdp.replace(thresholds=np.array([-1e-12])))  # below the cheapest cost 0, at this scale


def test_inventory_in_other_units_meets_its_budget():
    """The suite's inventory with rewards x 1e6 and costs x 1e-6 (was 67% over alpha)."""
    base, ref = _reference_inventory()
    cmdp = suite.rescale(base, 1e6, 1e-6)
    for method in ("dual", "lp"):
        sol = fhc.solve(cmdp, method=method)
        assert sol.costs[0] <= float(cmdp.thresholds[0]) * (1 + 1e-6)
        assert sol.reward == pytest.approx(ref.reward * 1e6, rel=REL)
        np.testing.assert_allclose(sol.multipliers, ref.multipliers * 1e12, rtol=1e-4)


@functools.cache
def _reference_inventory():
    cmdp = suite.task("inventory").cmdp()
    return cmdp, fhc.solve(cmdp)


@pytest.mark.parametrize("field", ["rewards", "costs", "terminal_rewards", "terminal_costs", "thresholds"])
def test_values_the_dtype_would_flush_to_zero_are_refused(field):
    kw = {
        "transitions": np.ones((1, 2, 1)),
        "rewards": np.ones((2, 1, 2)),
        "costs": np.ones((1, 2, 1, 2)),
        "terminal_rewards": np.ones(1),
        "terminal_costs": np.ones((1, 1)),
        "thresholds": np.ones(1),
        "initial_distribution": np.ones(1),
    }
    tiny = np.array(kw[field], np.float64)
    tiny.reshape(-1)[0] = 1e-40  # a float32 subnormal (numpy keeps it; XLA's arithmetic flushes it to 0)
    with pytest.raises(
        ValueError,
        match=rf"TabularCMDP\.{field}: 1 nonzero values below the smallest normal "
        r"float32 number 1\.18e-38 \(e\.g\. 1e-40 at index .*rescale",
    ):
        fhc.TabularCMDP(**{**kw, field: tiny})
    tiny.reshape(-1)[0] = 1e-50  # underflows to 0 when stored as float32
    with pytest.raises(ValueError, match=rf"TabularCMDP\.{field}: 1 nonzero values below"):
        fhc.TabularCMDP(**{**kw, field: tiny})
    tiny.reshape(-1)[0] = 1e39  # overflows float32
    with pytest.raises(ValueError, match=rf"TabularCMDP\.{field}: 1 values beyond the largest float32 number"):
        fhc.TabularCMDP(**{**kw, field: tiny})
    tiny.reshape(-1)[0] = np.nan
    with pytest.raises(ValueError, match=rf"TabularCMDP\.{field}: all values must be finite"):
        fhc.TabularCMDP(**{**kw, field: tiny})


def test_float64_models_keep_values_float32_cannot_hold(x64):
    kw = {
        "transitions": np.ones((1, 2, 1)),
        "rewards": np.full((2, 1, 2), 1e-40),
        "costs": np.full((1, 2, 1, 2), 1e-300),
        "thresholds": np.full(1, 1e-300),
        "initial_distribution": np.ones(1),
    }
    cmdp = fhc.TabularCMDP(**kw)  # normal float64 numbers
    assert cmdp.rewards.dtype == jnp.float64 and float(cmdp.rewards[0, 0, 0]) == 1e-40
    with pytest.raises(ValueError, match=r"TabularCMDP\.costs: 4 nonzero values below the smallest normal float64"):
        fhc.TabularCMDP(**{**kw, "costs": np.full((1, 2, 1, 2), 1e-310)})


def test_rescale_refuses_a_factor_that_flushes_the_rewards():
    cmdp = suite.task("garnet_s20").cmdp()
    with pytest.raises(ValueError, match=r"TabularCMDP\.rewards: \d+ nonzero values below the smallest normal float32"):
        suite.rescale(cmdp, 1e-40, 1.0)
    with pytest.raises(ValueError, match=r"TabularCMDP\.costs: \d+ nonzero values below"):
        suite.rescale(cmdp, 1.0, 1e-40)
    with pytest.raises(ValueError, match=r"TabularCMDP\.rewards: \d+ values beyond the largest float32"):
        suite.rescale(cmdp, 1e40, 1.0)


def test_subnormal_probabilities_are_accepted():
    """Probabilities have no units: a subnormal one changes no expectation by more than 1e-38
    (the battery's Gaussian tails have some)."""
    p = np.array([[[1.0 - 1e-40, 1e-40], [0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]]])
    cmdp = fhc.TabularCMDP(
        p, np.ones((2, 2, 2)), np.ones((1, 2, 2, 2)), thresholds=[3.0], initial_distribution=np.array([1.0, 0.0])
    )
    assert fhc.solve(cmdp).reward == pytest.approx(2.0)
