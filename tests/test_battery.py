"""BatteryStorage: the discretized exact model against Monte-Carlo rollouts of the continuous
environment, the binding throughput budget, jit/vmap structure and validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.envs.battery import BatteryStorage, physics
from fhc_jax.envs.battery_reference import gaussian_projection


def _mixed_rule(env, params, resolution):
    """A fixed (H, S, A) table that depends on the stage, the price deviation and (through
    the soc limits) the charge: 0.6 x a trading rule + 0.4 x uniform."""
    soc, dev = env.grids(params, resolution)
    sd = float(params.stationary_sd)
    h = np.arange(env.horizon)[:, None, None]
    schedule = np.where(
        (h < 12) | ((h >= 22) & (h < 30)), 4, np.where(((h >= 14) & (h < 20)) | (h >= 34) & (h < 44), 0, 2)
    )
    d = dev[None, None, :]
    rule = np.where(d > 0.5 * sd, 0, np.where(d < -0.5 * sd, 4, schedule))
    rule = np.broadcast_to(rule, (env.horizon, soc.size, dev.size)).reshape(env.horizon, -1)
    return 0.6 * np.eye(env.num_actions)[rule] + 0.4 / env.num_actions


@pytest.mark.slow
def test_fine_model_matches_monte_carlo_of_the_continuous_env():
    env = BatteryStorage(num_constraints=2)
    params, resolution = env.default_params, (41, 41)
    table = _mixed_rule(env, params, resolution)
    exact = fhc.evaluate(env.to_cmdp(params, resolution), jnp.asarray(table))
    policy = env.discretized_policy(table, params, resolution)
    out = jax.jit(lambda k: fhc.rollout_returns(k, env, params, policy, 20_000))(jax.random.key(0))
    samples = [np.asarray(out.rewards, np.float64)] + [np.asarray(out.costs[:, k], np.float64) for k in range(2)]
    for sample, want in zip(samples, [float(exact.reward), *np.asarray(exact.costs, np.float64)]):
        se = sample.std(ddof=1) / np.sqrt(sample.size)
        assert abs(sample.mean() - want) < 4 * se, (sample.mean(), want, se)
    # the check is sharp: a coarse deviation grid is off by many standard errors
    coarse = fhc.evaluate(env.to_cmdp(params, (41, 5)), jnp.asarray(_mixed_rule(env, params, (41, 5))))
    cycles = samples[1]
    assert abs(float(coarse.costs[0]) - cycles.mean()) > 10 * cycles.std() / np.sqrt(cycles.size)


@pytest.mark.slow
def test_throughput_budget_binds_and_reference_policy_meets_it():
    env = BatteryStorage()
    params, resolution = env.default_params, (21, 9)
    cmdp = env.to_cmdp(params, resolution)
    free = fhc.solve_unconstrained(cmdp)
    assert float(free.costs[0]) > 1.8 * float(params.thresholds[0])  # cycles about twice the budget
    table, best = env.reference_policy(params, resolution)
    assert float(best.multipliers[0]) > 0 and abs(float(best.costs[0]) - 1.0) < 1e-6
    assert float(best.reward) < 0.8 * float(free.reward)
    assert np.allclose(table.sum(-1), 1.0)
    # executed in the continuous environment, the reference keeps the budget (within 2%)
    policy = env.discretized_policy(table, params, resolution)
    out = jax.jit(lambda k: fhc.rollout_returns(k, env, params, policy, 20_000))(jax.random.key(1))
    assert float(np.mean(out.costs[:, 0])) < 1.02
    assert 0.9 * float(best.reward) < float(np.mean(out.rewards)) < float(best.reward)


def test_step_structure_jit_vmap_and_physics():
    env = BatteryStorage(num_constraints=2)
    p = env.default_params
    assert env.observation_shape == (3,) and BatteryStorage(observation="sd").observation_shape == (2,)
    keys = jax.random.split(jax.random.key(1), 8)

    @jax.jit
    def probe(p, keys):
        obs0, states = jax.vmap(env.reset, in_axes=(0, None))(keys, p)
        out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, states, jnp.arange(8) % 5, p)
        # vmap over params: without price noise the deviation follows its AR(1) mean
        batch = jax.vmap(lambda sd: p.replace(noise_sd=sd))(jnp.array([0.0, 8.0]))
        first = jax.tree.map(lambda x: x[0], states)
        dev = jax.vmap(lambda q: env.step(keys[0], first, 2, q)[1].deviation)(batch)
        noise = (env.noise(keys[2], p), env.noise_from_uniform(jax.random.uniform(keys[2], (), jnp.float32), p))
        phys = physics(jnp.array([1.0, 0.0, 0.5]), jnp.array([1.0, -1.0, 1.0]), p)
        idle = fhc.rollout_returns(keys[3], env, p, lambda k, o, h: jnp.int32(2), 16)
        low = env.terminal_reward(first.replace(soc=jnp.float32(0.3)), p)
        return obs0, states, out, dev, noise, phys, idle, low

    obs0, states, (obs, new, reward, costs, done, info), dev, noise, phys, idle, low = probe(p, keys)
    assert obs0.shape == (8, 3) and obs0.dtype == jnp.float32 and np.all(np.asarray(obs0[:, 0]) == 0.5)
    assert obs.shape == (8, 3) and costs.shape == (8, 2) and reward.shape == (8,) and not bool(done.any())
    np.testing.assert_array_equal(new.time, 1)
    assert float(dev[0]) == pytest.approx(0.9 * float(states.deviation[0]), rel=1e-6) and float(dev[1]) != float(dev[0])
    assert float(noise[0]) == float(noise[1])  # the noise contract of the one-uniform fast path
    # physics: a full battery cannot charge, an empty one cannot discharge, efficiency losses
    soc_next, imported, exported, cycles = phys
    np.testing.assert_allclose(np.asarray(soc_next), [1.0, 0.0, 0.5 + 0.25 * np.sqrt(0.85)], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(imported), [0.0, 0.0, 0.25], atol=1e-7)
    np.testing.assert_allclose(np.asarray(exported), 0.0, atol=1e-7)
    assert float(cycles[2]) == pytest.approx(0.125 * np.sqrt(0.85), rel=1e-6)
    # a day of idling earns and costs nothing; ending below the initial charge is penalised
    np.testing.assert_allclose(np.asarray(idle.rewards), 0.0, atol=1e-4)
    np.testing.assert_allclose(np.asarray(idle.costs), 0.0, atol=1e-7)
    assert float(low) == pytest.approx(-200.0 * 0.2, rel=1e-5)


def test_gaussian_projection_is_a_mean_preserving_law():
    grid = np.linspace(-3.0, 3.0, 13)
    mean = np.array([0.0, 1.3, -2.9, 5.0])
    w = gaussian_projection(mean, 0.7, grid)
    np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-12)
    clipped = np.clip(np.random.default_rng(0).normal(mean[:, None], 0.7, (4, 400_000)), -3, 3).mean(1)
    np.testing.assert_allclose(w @ grid, clipped, atol=5e-3)
    np.testing.assert_allclose(gaussian_projection(np.array([0.25]), 0.0, grid)[0] @ grid, 0.25)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_constraints": 3}, r"num_constraints must be an integer in \[1, 2\], found 3"),
        ({"observation": "xy"}, r"observation must be one of 'sdt', 'sd', found 'xy'"),
        ({"capacity_mwh": 0.0}, r"capacity_mwh must be a number in \(0, inf\), found 0.0"),
        ({"round_trip_efficiency": 1.2}, r"round_trip_efficiency must be a number in \(0, 1\], found 1.2"),
        ({"initial_soc": -0.1}, r"initial_soc must be a number in \[0, 1\], found -0.1"),
        ({"ar_coef": 1.0}, r"ar_coef must be a number in \[0, 1\), found 1.0"),
        ({"price_noise_sd": float("nan")}, r"price_noise_sd must be a number in \[0, inf\)"),
        ({"cycle_budget": -1}, r"cycle_budget must be a number in \[0, inf\), found -1"),
        ({"rates": (0.0, 2.0)}, r"rates must be a number in \[-1, 1\], found 2.0"),
        ({"rates": (0.5,)}, r"rates must be a sequence of >= 2 numbers"),
        ({"resolution": (1, 5)}, r"resolution\[0\] \(n_soc\) must be an integer >= 2, found 1"),
        ({"resolution": 9}, r"resolution must be \(n_soc >= 2, n_dev >= 1\), found 9"),
    ],
)
def test_bad_settings_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BatteryStorage(**kwargs)


def test_registry_and_policy_table_shape():
    from fhc_jax.experiment.config import make_env

    env, params = make_env("battery", {"num_constraints": 2, "cycle_budget": 1.5})
    assert isinstance(env, BatteryStorage) and np.allclose(params.thresholds, [1.5, 0.25])
    assert env.has_exact_model and not env.is_tabular
    np.testing.assert_allclose(env.thresholds(params), [1.5, 0.25])
    with pytest.raises(ValueError, match=r"table must have shape \(H, S, A\) = \(48, 6, 5\)"):
        env.discretized_policy(np.ones((48, 7, 5)), params, (3, 2))
    with pytest.raises(ValueError, match=r"resolution\[1\] \(n_dev\) must be an integer >= 1, found 0"):
        env.to_cmdp(params, (3, 0))


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("capacity", 0.0, r"params.capacity must be > 0 \(MWh\), found 0"),
        ("power", -1.0, r"params.power must be > 0 \(MW\), found -1"),
        ("eta", 1.2, r"params.eta must be in \(0, 1\] \(one-way efficiency"),
        ("eta", 0.0, r"params.eta must be in \(0, 1\]"),
        ("ar_coef", -1.0, r"params.ar_coef must be in \(-1, 1\)"),
        ("noise_sd", float("nan"), r"params.noise_sd must be >= 0 \(EUR/MWh\), found nan"),
        ("initial_soc", 1.5, r"params.initial_soc must be in \[0, 1\], found 1.5"),
        ("penalty", -1.0, r"params.penalty must be >= 0"),
        ("thresholds", np.array([-1.0]), r"params.thresholds \(alpha\) must be >= 0, found \[-1.0\]"),
        ("rates", np.array([-1.0, -0.5, 0.0, 0.5, 2.0]), r"params.rates must lie in \[-1, 1\]"),
    ],
)
def test_params_are_validated_where_they_are_used(field, value, match):
    """Issue 33 item 4: the constructor's ranges hold for params too, checked by reset (the
    public step and the rollouts), grids and to_cmdp, naming the field."""
    env = BatteryStorage()
    params = env.default_params.replace(**{field: jnp.asarray(value, jnp.float32)})
    with pytest.raises(ValueError, match="BatteryStorage.reset: " + match):
        env.reset(jax.random.key(0), params)
    with pytest.raises(ValueError, match="BatteryStorage.to_cmdp: " + match):
        env.to_cmdp(params, (3, 2))
    with pytest.raises(ValueError, match="BatteryStorage.grids: " + match):
        env.grids(params)
    # traced params: shapes only (documented); the same values go through jit unchecked
    obs, _ = jax.jit(env.reset)(jax.random.key(0), env.default_params)
    assert obs.shape == (3,)
    with pytest.raises(ValueError, match=r"params.rates has shape \(3,\); BatteryStorage\(.*\) expects \(5,\)"):
        jax.jit(env.reset)(jax.random.key(0), env.default_params.replace(rates=jnp.zeros(3)))
