"""The cheapest stationary policy (fhc_jax.cmdp.stationary): by hand, against the cheapest policy
of all, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.cmdp.stationary import stationary_cost_floor
from fhc_jax.envs import suite


def _two_stage(costs_by_stage, alpha=0.5) -> fhc.TabularCMDP:
    """One state, two actions, H = 2; cost of action a at stage h = costs_by_stage[h][a]."""
    g = np.asarray(costs_by_stage, np.float32)[None, :, None, :]  # (M, H, S, A)
    return fhc.TabularCMDP(
        np.ones((2, 1, 2, 1), np.float32),
        np.zeros((2, 1, 2), np.float32),
        g,
        np.zeros(1, np.float32),
        np.zeros((1, 1), np.float32),
        np.asarray([alpha], np.float32),
        np.ones(1, np.float32),
    )


@pytest.mark.slow
def test_a_stage_swap_costs_every_stationary_policy_one():
    """Action 0 is free at stage 0 and costs 1 at stage 1, action 1 the reverse: the
    non-stationary policy (0 then 1) costs 0, every stationary one p + (1 - p) = 1."""
    cmdp = _two_stage([[0.0, 1.0], [1.0, 0.0]])
    found = stationary_cost_floor(cmdp, starts=3, steps=100)
    np.testing.assert_allclose(float(found.ratio), 2.0, rtol=1e-5)  # cost 1 against alpha = 0.5
    np.testing.assert_allclose(np.asarray(found.costs), [1.0], rtol=1e-5)
    least, _ = suite.cost_range(cmdp)
    np.testing.assert_allclose(least, [0.0], atol=1e-7)


def test_stage_invariant_costs_reach_the_least_cost():
    """With the same costs at every stage the cheapest policy is stationary: the search finds it."""
    cmdp = _two_stage([[0.2, 1.0], [0.2, 1.0]])
    found = stationary_cost_floor(cmdp, starts=2, steps=300)
    np.testing.assert_allclose(np.asarray(found.costs), [0.4], atol=2e-3)
    np.testing.assert_allclose(np.asarray(found.policy)[0, 0], 1.0, atol=5e-3)


@pytest.mark.slow
def test_between_the_cheapest_policy_and_the_uniform_one():
    cmdp = suite.garnet(8, 3, 6, 2, seed=5, fraction=0.3)
    found = stationary_cost_floor(cmdp, starts=4, steps=200)
    alpha = np.asarray(cmdp.thresholds, np.float64)
    least, _ = suite.cost_range(cmdp)
    uniform = fhc.evaluate(cmdp, np.full((cmdp.horizon, 8, 3), 1.0 / 3.0, np.float32))
    assert np.max(least / alpha) - 1e-5 <= float(found.ratio) <= np.max(np.asarray(uniform.costs) / alpha) + 1e-5
    exact = fhc.evaluate(cmdp, np.broadcast_to(np.asarray(found.policy), (cmdp.horizon, 8, 3)))
    np.testing.assert_allclose(np.asarray(exact.costs), np.asarray(found.costs), rtol=1e-5)
    assert np.asarray(found.start_ratios).shape == (4,) and float(found.ratio) == np.min(found.start_ratios)


@pytest.mark.parametrize(
    "kwargs, field",
    [(dict(starts=0), "starts"), (dict(steps=1.5), "steps"), (dict(learning_rate=-1.0), "learning_rate")],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        stationary_cost_floor(_two_stage([[0.0, 1.0], [1.0, 0.0]]), **kwargs)


def test_a_threshold_at_zero_is_refused():
    with pytest.raises(ValueError, match="thresholds"):
        stationary_cost_floor(_two_stage([[0.0, 1.0], [1.0, 0.0]], alpha=0.0))
