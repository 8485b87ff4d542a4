"""The judge (fhc_jax.experiment.judge): one feasibility rule, per-seed rows, worst-seed summaries,
ranking; and the machine record written into every result file."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.experiment import judge, rundir
from fhc_jax.experiment.judgement import Optimum, relative_excess


def test_feasibility_rule_and_tolerance():
    # alpha + tolerance |alpha| + 1e-6 max(|alpha|, C): the rounding floor is relative, never absolute
    np.testing.assert_allclose(judge.cost_limits([25.0]), [25.5 + 25e-6], rtol=1e-12)
    np.testing.assert_allclose(judge.cost_limits([25.0], 0.0), [25.0 + 25e-6], rtol=1e-12)
    np.testing.assert_allclose(judge.cost_limits([25.0], 0.0, [100.0]), [25.0 + 1e-4], rtol=1e-12)
    # alpha = 0 admits only rounding of the cost scale whatever the tolerance (nothing without one);
    # a negative alpha is loosened by |alpha|
    np.testing.assert_allclose(judge.cost_limits([0.0, -10.0], 0.1), [0.0, -9.0 + 1e-5], rtol=1e-12)
    np.testing.assert_allclose(judge.cost_limits([0.0], 0.1, [3.0]), [3e-6], rtol=1e-12)
    with pytest.raises(ValueError, match="tolerance must be a finite number >= 0, found -0.1"):
        judge.cost_limits([1.0], -0.1)
    j = judge.judge([1.0, 2.0, 3.0], [[25.4], [25.6], [0.0]], [25.0])
    assert j.feasible.tolist() == [True, False, True] and j.feasible_seeds == 2
    assert judge.judge([1.0], [[25.4]], [25.0], tolerance=0.0).feasible.tolist() == [False]
    assert judge.judge([1.0, 1.0], [[0.0], [1e-6]], [0.0]).feasible.tolist() == [True, False]
    assert judge.judge([1.0, 1.0], [[1e-7], [1e-5]], [0.0], cost_scale=[1.0]).feasible.tolist() == [True, False]
    np.testing.assert_allclose(relative_excess([[30.0, 0.0, 1.0]], [25.0, 0.0, 0.0]), [[0.2, 0.0, np.inf]])


def test_rows_summary_and_ranking():
    opt = Optimum(
        reward=10.0,
        costs=np.array([5.0, 2.0]),
        multipliers=np.array([0.3, 0.0]),
        policy=np.zeros(1),
        stage_costs=np.zeros(1),
        stage_rewards=np.zeros(1),
        solve_time_s=0.1,
    )
    j = judge.judge(
        [9.0, 8.0, 11.0],
        [[5.0, 1.0], [4.0, 2.0], [6.0, 2.0]],
        [5.0, 2.0],
        optimum=opt,
        multipliers=[[0.2, 0.1], [0.3, 0.0], [0.1, 0.0]],
    )
    rows = j.rows()
    assert [r["feasible"] for r in rows] == [True, True, False]
    assert rows[2]["violation"] == pytest.approx([1.0, 0.0]) and rows[2]["slack"] == pytest.approx([-1.0, 0.0])
    assert rows[1]["reward_gap"] == pytest.approx(2.0) and rows[1]["fraction_of_optimum"] == pytest.approx(0.8)
    assert rows[0]["multipliers"] == [0.2, 0.1] and rows[0]["optimal_multipliers"] == [0.3, 0.0]
    s = j.summary()
    assert s["feasible_seeds"] == 2 and s["seeds"] == 3
    assert s["worst"]["costs"] == [6.0, 2.0]
    assert [s["worst"][k] for k in ("reward", "relative_excess", "fraction_of_optimum")] == pytest.approx(
        [8.0, 0.2, 0.8]
    )
    assert s["exact_reward"]["mean"] == pytest.approx(28 / 3)
    assert j.rank_key() == (2, 8.0)
    assert j.take(slice(0, 1)).rank_key() == (1, 9.0) and j.take([2]).feasible_seeds == 0
    with pytest.raises(ValueError, match="2 costs per seed but 1 thresholds"):
        judge.judge([1.0], [[1.0, 2.0]], [1.0])


def test_judge_policies_against_the_exact_optimum():
    env = fhc.GridWorld(3, 4, alpha=3.0)
    cmdp = env.to_cmdp(env.default_params)
    opt = judge.optimum(cmdp)
    uniform = np.full((2, 4, 9, 9), 1.0 / 9)
    tables = np.stack([opt.policy, uniform[0]])
    j, ev = judge.judge_policies(cmdp, tables, optimum=opt)
    assert j.reward[0] == pytest.approx(opt.reward, rel=1e-5) and j.gap[0] == pytest.approx(0.0, abs=1e-4)
    assert j.feasible[0] and ev["stage_costs"].shape == (2, 1, 5)
    assert j.reward[1] == pytest.approx(float(fhc.evaluate(cmdp, uniform[0]).reward), rel=1e-6)


def test_machine_info():
    info = rundir.machine_info()
    assert set(info) >= {"versions", "device", "cpu", "platform", "load_average", "timestamp"}
    assert info["versions"]["jax"] and info["device"]["count"] >= 1 and info["cpu"]["usable_cores"] >= 1


def test_fraction_of_a_negative_optimum_is_one_minus_the_relative_gap():
    """With J* < 0 (all-negative rewards) J / J* would grow as J gets worse: the fraction is
    1 - (J* - J) / |J*| instead (J / J* for J* > 0), increasing in J; none for J* = 0."""
    opt = Optimum(
        reward=-150.0,
        costs=np.array([180.0]),
        multipliers=np.zeros(1),
        policy=None,
        stage_costs=None,
        stage_rewards=None,
        solve_time_s=0.0,
    )
    j = judge.judge([-1200.0, -300.0, -150.0], [[30.0], [40.0], [40.0]], [40.0], optimum=opt)
    np.testing.assert_allclose(j.fraction_of_optimum, [-6.0, 0.0, 1.0])
    assert j.summary()["worst"]["fraction_of_optimum"] == pytest.approx(-6.0)
    rows = j.rows()
    assert rows[1]["fraction_of_optimum"] == pytest.approx(0.0)
    zero = judge.judge([1.0], [[0.0]], [40.0], optimum=dataclasses.replace(opt, reward=0.0))
    assert zero.fraction_of_optimum is None and zero.rows()[0]["fraction_of_optimum"] is None
    assert rows[0]["reward_gap"] == pytest.approx(1050.0) and rows[1]["relative_gap"] == pytest.approx(1.0)
