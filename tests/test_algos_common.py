"""Shared learner pieces: schedules (Assumption 3), multiplier projection, feature maps, the
fast tabular rollout (checked against exact evaluation), the evaluation loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.algos import common, features
from fhc_jax.algos.common import PowerSchedule
from fhc_jax.envs.gridworld import GridWorld
from conftest import random_cmdp


def test_power_schedule_values():
    s = PowerSchedule(init=2.0, power=0.75, decay=10.0)
    n = jnp.arange(3)
    np.testing.assert_allclose(s(n), 2.0 / (1 + np.arange(3) / 10.0) ** 0.75, rtol=1e-6)


def test_check_assumption3_accepts_ordered_powers_and_vmapped_values():
    common.check_assumption3("X", {"a": PowerSchedule(1.0, 0.55), "b": PowerSchedule(1.0, 0.7), "c": PowerSchedule(1.0, 1.0)})
    common.check_assumption3("X", {"a": PowerSchedule(np.array([1.0, 2.0]), 0.6), "b": PowerSchedule(1.0, np.array([0.7, 0.8]))})
    with pytest.raises(ValueError, match=r"X.b.power must be > X.a.power .*b\(n\) / a\(n\) -> 0"):
        common.check_assumption3("X", {"a": PowerSchedule(1.0, 0.6), "b": PowerSchedule(1.0, np.array([0.7, 0.6]))})
    with pytest.raises(ValueError, match=r"X.a.init must be > 0"):
        common.check_assumption3("X", {"a": PowerSchedule(np.array([1.0, -1.0]), 0.6)})


def test_multiplier_step_projects_onto_box():
    nu = jnp.array([0.0, 1.0, 4.9])
    out = common.multiplier_step(nu, jnp.array([-1.0, 2.0, 10.0]), 0.5, 5.0)
    np.testing.assert_allclose(out, [0.0, 2.0, 5.0])


def test_inverse_cdf_skips_zero_probabilities():
    p = jnp.array([0.0, 0.5, 0.0, 0.5, 0.0])
    cdf = jnp.cumsum(p)
    u = jnp.array([0.0, 0.2, 0.49999, 0.5, 0.7, 0.9999999])
    i = common.inverse_cdf(jnp.broadcast_to(cdf, (6, 5)), u, 3)
    np.testing.assert_array_equal(i, [1, 1, 1, 3, 3, 3])


def test_feature_tables():
    env = GridWorld(size=5, horizon=3)
    rbf = features.build(features.RadialBasis(3, bias=True), env)
    assert rbf.table.shape == (25, 10) and rbf.num_features == 10
    np.testing.assert_allclose(rbf.table[:, :9].sum(axis=1), 1.0, rtol=1e-5)
    tiles = features.build(features.TileCoding(2, 3), env)
    assert tiles.table.shape == (25, 12)
    np.testing.assert_allclose(tiles.table.sum(axis=1), 1.0, rtol=1e-6)
    assert np.linalg.matrix_rank(np.asarray(tiles.table)) > 4
    custom = features.build(features.Custom(lambda h, s: jnp.stack([1.0, h * 1.0, s * 1.0]), 3), env)
    assert custom.table.shape == (4, 25, 3) and custom.per_stage
    np.testing.assert_allclose(custom.table[2, 7], [1.0, 2.0, 7.0])
    with pytest.raises(ValueError, match=r"shape \(dim,\) = \(2,\)"):
        features.build(features.Custom(lambda h, s: jnp.zeros(3), 2), env)
    with pytest.raises(ValueError, match="num_centers must be an integer >= 1"):
        features.RadialBasis(0)


def _mc_check(env, params, policy, num_episodes=4000, steps_itself=False):
    model = common.tabular_model(env, params)
    assert (model.step_env is env) == steps_itself  # which successor sampler is under test
    cdf = jnp.cumsum(jnp.asarray(policy, jnp.float32), -1)
    batch = jax.jit(common.rollout_tabular, static_argnums=(3, 4))(jax.random.key(0), model, cdf, _row, num_episodes)
    ev = fhc.evaluate(env.to_cmdp(params), jnp.asarray(policy, jnp.float32))
    for sample, exact in ((batch.episode_rewards, ev.reward), (batch.episode_costs[:, 0], ev.costs[0])):
        se = float(jnp.std(sample)) / np.sqrt(num_episodes)
        assert abs(float(jnp.mean(sample)) - float(exact)) < 4 * se + 1e-4, (float(jnp.mean(sample)), float(exact), se)
    return batch


def _row(cdf_h, s):
    return cdf_h[s]


def test_fast_rollout_matches_exact_evaluation_gridworld():
    env = GridWorld(size=4, horizon=6, slip=0.3)
    params = env.default_params
    policy = np.random.default_rng(0).dirichlet(np.ones(9), size=(6, 16))
    batch = _mc_check(env, params, policy, steps_itself=True)  # GridWorld's own closed-form step
    # realised arrival rewards: r_h = reward_map[h, s_{h+1}]
    np.testing.assert_allclose(batch.rewards, params.reward_map[jnp.arange(6)[:, None], batch.states[1:]])


@pytest.mark.parametrize("time_varying", [True, False])
def test_fast_rollout_matches_exact_evaluation_tabular_env(time_varying):
    cmdp = random_cmdp(1, num_states=5, num_actions=3, horizon=4, time_varying=time_varying)
    env = fhc.TabularEnv(cmdp)
    policy = np.random.default_rng(1).dirichlet(np.ones(3), size=(4, 5))
    _mc_check(env, env.default_params, policy)


def test_scan_with_evaluation_blocks_and_remainder():
    def step(c, _):
        return c + 1.0, {"x": c}

    def ev(c):
        return c * 10.0, jnp.stack([c])

    carry, metrics, exact = jax.jit(lambda c: common.scan_with_evaluation(step, c, 7, 3, ev))(jnp.float32(0.0))
    assert float(carry) == 7.0
    np.testing.assert_array_equal(metrics["x"], np.arange(7))
    np.testing.assert_array_equal(exact.iteration, [0, 3, 6, 7])
    np.testing.assert_array_equal(exact.reward, [0, 30, 60, 70])
    _, _, exact0 = common.scan_with_evaluation(step, jnp.float32(0.0), 5, 0, ev)
    np.testing.assert_array_equal(exact0.iteration, [0, 5])


def test_stack_rejects_static_differences():
    from fhc_jax.algos import fh_constrained as fc

    with pytest.raises(ValueError, match="static field"):
        common.stack([fc.Config(), fc.Config(variant="paper")])
    stacked = common.stack([fc.Config(), fc.Config(theta_bound=1.0)])
    assert stacked.theta_bound.shape == (2,)
