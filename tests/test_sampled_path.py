"""The learners' sampled path: training on any environment through ``fhc_jax.rollout``
(recorded observations, per-sample losses), judged by Monte-Carlo where there is no exact
model, and agreeing with the tabular fast path where there is one."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import DRIFT, Drift, monte_carlo

import fhc_jax as fhc
from fhc_jax.algos import nn_constrained as nc
from fhc_jax.algos.core import sampled_inputs, scaffold


@pytest.mark.slow  # end-to-end training: the slow tier (CI runs both tiers)
def test_nn_constrained_learns_a_continuous_task_judged_by_monte_carlo():
    # a short run: a faster multiplier than the defaults (tuned for thousands of updates), the
    # budget binding from the first update (the default tightening takes half the run) and a
    # shorter Polyak average (0.99^60 = 0.55 of the reported actor would be the initial one)
    cfg = nc.Config(
        budget_tightening=0.0,
        policy_averaging=0.8,
        num_iterations=60,
        episodes_per_iteration=128,
        eval_every=30,
        eval_episodes=512,
        actor_epochs=4,
        multiplier_lr=fhc.algos.PowerSchedule(0.2, 0.8, 1000.0),
        multiplier_gain=0.5,
    )
    train = nc.make_train(DRIFT, DRIFT.default_params, cfg)
    out = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 2))
    tabular_only = dataclasses.replace(fhc.algos.fh_constrained.ALGORITHM, observation_outputs=None)
    with pytest.raises(ValueError, match="declares no tabular exact model"):
        scaffold.make_learner(tabular_only, DRIFT, DRIFT.default_params, fhc.algos.fh_constrained.Config())
    assert out.metrics.evaluation.reward.shape == (2, 3)  # Monte-Carlo estimates at 0, 30, 60
    uniform = monte_carlo(DRIFT, fhc.uniform_random_policy(3))
    for seed in range(2):
        state = jax.tree.map(lambda x: x[seed], out.final_state)
        r, r_half, c, c_half = monte_carlo(DRIFT, nc.policy(state, DRIFT, DRIFT.default_params))
        # it learned to follow the moving target within the movement budget: the lower 95%
        # bound of its reward above the uniform policy's upper bound (which spends 5.3 moves),
        # the upper 95% bound of its cost within alpha = 2 (+15% after only 60 updates)
        assert r - r_half > uniform[0] + uniform[1], (r, uniform)
        assert c + c_half <= 2.0 * 1.15, c
        # the in-training Monte-Carlo evaluation estimates the same policy's value
        assert abs(float(out.metrics.evaluation.reward[seed, -1]) - r) < 0.25


@pytest.mark.slow
def test_sampled_and_tabular_paths_train_to_the_same_result_on_a_gridworld():
    """Forced onto the sampled path (fhc_jax.rollout, per-sample losses), NN-Constrained
    reaches the tabular path's exact reward and cost on a small gridworld (different random
    streams: statistically equal over seeds)."""
    env = fhc.GridWorld(size=3, horizon=6, alpha=2.0)
    params = env.default_params
    cmdp = env.to_cmdp(params)
    keys = jax.random.split(jax.random.key(3), 4)
    results = {}
    for path in ("tabular", "sampled"):
        cfg = nc.Config(
            num_iterations=80,
            episodes_per_iteration=64,
            eval_every=0,
            path=path,
            actor_epochs=4,
            variant="paper",
            update_form="samples",
        )
        out = jax.jit(jax.vmap(nc.make_train(env, params, cfg)))(keys)
        ev = jax.vmap(lambda t: fhc.evaluate(cmdp, t))(nc.policy_table(out.final_state, env, params))
        results[path] = (np.asarray(ev.reward), np.asarray(ev.costs)[:, 0])
        np.testing.assert_allclose(out.metrics.evaluation.reward[:, -1], ev.reward, rtol=1e-5)
    (r_t, c_t), (r_s, c_s) = results["tabular"], results["sampled"]
    spread = max(r_t.std(), r_s.std(), 0.05)
    assert abs(r_t.mean() - r_s.mean()) < 3 * spread, (r_t, r_s)
    assert abs(c_t.mean() - c_s.mean()) < 3 * max(c_t.std(), c_s.std(), 0.05), (c_t, c_s)


@pytest.mark.slow
def test_sampled_path_errors():
    with pytest.raises(ValueError, match="Drift has no tabular states to tabulate the policy over"):
        nc.policy_table(
            nc.init(jax.random.key(0), nc.setup(DRIFT, DRIFT.default_params, nc.Config()), nc.Config()),
            DRIFT,
            DRIFT.default_params,
        )
    with pytest.raises(ValueError, match="path = 'tabular' needs a tabular exact model"):
        nc.make_train(DRIFT, DRIFT.default_params, nc.Config(path="tabular"))
    with pytest.raises(ValueError, match="observation must be one of 'env' for Drift on the sampled path"):
        nc.make_train(DRIFT, DRIFT.default_params, nc.Config(observation="xy"))


@pytest.mark.slow
@pytest.mark.parametrize("spec", [fhc.algos.features.RadialBasis(5), fhc.algos.features.TileCoding(4, 2)])
def test_fh_constrained_with_features_of_continuous_observations(spec):
    """FH-Constrained's linear critics and Gibbs actors on a coarse map of the observation
    (paper Assumption 2), on the continuous task, judged by Monte-Carlo intervals."""
    fc = fhc.algos.fh_constrained
    cfg = fc.Config(
        num_iterations=150,
        episodes_per_iteration=128,
        eval_every=75,
        eval_episodes=512,
        features=spec,
        multiplier_lr=fhc.algos.PowerSchedule(0.1, 0.8, 1000.0),
        multiplier_gain=0.3,
    )
    out = jax.jit(jax.vmap(fc.make_train(DRIFT, DRIFT.default_params, cfg)))(jax.random.split(jax.random.key(0), 2))
    uniform = monte_carlo(DRIFT, fhc.uniform_random_policy(3))
    for seed in range(2):
        state = jax.tree.map(lambda x: x[seed], out.state)
        r, r_half, c, c_half = monte_carlo(DRIFT, fc.policy(state, DRIFT, DRIFT.default_params))
        assert r - r_half > uniform[0] + uniform[1] + 0.5, (r, uniform)
        assert c + c_half <= 2.0 * 1.1, c


@pytest.mark.slow
def test_stage_inputs_false_drops_the_components_that_only_tell_the_stage_and_auto_sizes_the_map():
    """``stage_inputs=False`` maps only the observation components that vary within a stage:
    on BatteryStorage, (soc, d / sd) of (soc, d / sd, h / H), which is exactly the map of the
    same environment observed without h / H; the learner trains on it and acts through it."""
    feat, fc = fhc.algos.features, fhc.algos.fh_constrained
    obs = np.zeros((3, 4, 4))
    obs[..., 0] = np.arange(12).reshape(3, 4)  # varies within stages
    obs[..., 1] = np.arange(4) / 4.0  # the stage
    obs[..., 2] = 7.0  # constant
    obs[1:, 3, 3] = 1.0  # varies within the last stage only
    assert feat.stage_determined(obs).tolist() == [False, True, True, False]

    env, flat = fhc.BatteryStorage(), fhc.BatteryStorage(observation="sd")
    params = env.default_params
    full = fc._features(feat.RadialBasis(5), env, params)
    for spec, x in ((feat.RadialBasis(5, stage_inputs=False), 25), (feat.TileCoding(6, 3, stage_inputs=False), 108)):
        dropped = fc._features(spec, env, params)
        assert dropped.num_features == x and dropped.components == (0, 1)
        o = sampled_inputs.observation_sample(env, params)
        reference = fc._features(dataclasses.replace(spec, stage_inputs=True), flat, params)
        np.testing.assert_array_equal(np.asarray(dropped(o)), np.asarray(reference(o[:, :2])))
    assert full.num_features == 125 and full.components is None
    # nothing to drop on an observation without a stage component
    assert fc._features(feat.RadialBasis(5, stage_inputs=False), DRIFT, DRIFT.default_params).components is None

    cfg = fc.Config(
        num_iterations=2,
        episodes_per_iteration=8,
        eval_every=0,
        eval_episodes=16,
        features=feat.RadialBasis(3, stage_inputs=False),
    )
    out = jax.jit(fc.make_train(env, params, cfg))(jax.random.key(0))
    assert out.state.theta.shape == (env.horizon, 9, env.num_actions)
    ret = fhc.rollout_returns(jax.random.key(1), env, params, fc.policy(out.state, env, params), 16)
    assert np.all(np.isfinite(np.asarray(ret.rewards)))
    # Auto(): the finest map of its ladder within max_features, for the components it reads
    tile, rbf = feat.TileCoding(6, 3, stage_inputs=False), lambda n: feat.RadialBasis(n, stage_inputs=False)
    assert [feat.Auto().choose(d) for d in range(1, 8)] == [tile, tile, tile, rbf(5), rbf(3), rbf(3), rbf(2)]
    assert feat.Auto(max_features=50, stage_inputs=True).choose(2) == feat.RadialBasis(5)
    chosen = fc._features(feat.Auto(), env, params)
    assert chosen.spec == tile and chosen.components == (0, 1) and chosen.num_features == 108
    with pytest.raises(ValueError, match="Auto.max_features must be an integer >= 1, found 0"):
        feat.Auto(max_features=0)
    with pytest.raises(ValueError, match="RadialBasis.stage_inputs must be True or False, found 1"):
        feat.RadialBasis(5, stage_inputs=1)
    with pytest.raises(ValueError, match="TileCoding.stage_inputs must be True or False, found 'no'"):
        feat.TileCoding(6, 3, stage_inputs="no")


@pytest.mark.slow
def test_fh_constrained_paths_agree_on_a_gridworld():
    """FH-Constrained forced onto the sampled path (fhc_jax.rollout with the policy acting on
    observations) reaches the tabular path's exact reward and cost (statistically, over seeds)."""
    fc = fhc.algos.fh_constrained
    env = fhc.GridWorld(size=3, horizon=6, alpha=2.0)
    params, keys = env.default_params, jax.random.split(jax.random.key(5), 4)
    cmdp = env.to_cmdp(params)
    results = {}
    for path in ("tabular", "sampled"):
        cfg = fc.Config(num_iterations=150, episodes_per_iteration=32, eval_every=0, path=path, update_form="samples")
        out = jax.jit(jax.vmap(fc.make_train(env, params, cfg)))(keys)
        ev = jax.vmap(lambda t: fhc.evaluate(cmdp, t))(fc.policy_table(out.state, env, params))
        results[path] = np.asarray(ev.reward), np.asarray(ev.costs)[:, 0]
    (r_t, c_t), (r_s, c_s) = results["tabular"], results["sampled"]
    assert abs(r_t.mean() - r_s.mean()) < 3 * max(r_t.std(), r_s.std(), 0.05), (r_t, r_s)
    assert abs(c_t.mean() - c_s.mean()) < 3 * max(c_t.std(), c_s.std(), 0.05), (c_t, c_s)


def test_judge_uses_the_upper_end_of_the_monte_carlo_cost_interval():
    from fhc_jax.experiment import judge

    j = judge.judge(
        [1.0, 2.0],
        [[0.99], [0.99]],
        [1.0],
        tolerance=0.0,
        episodes=1000,
        reward_half_width=[0.1, 0.1],
        cost_half_width=[[0.005], [0.02]],
    )
    assert j.feasible.tolist() == [True, False]  # 0.995 <= 1 < 1.01: the point estimate is not enough
    rows = j.rows()
    assert rows[1]["costs_ci95"] == [[pytest.approx(0.97), pytest.approx(1.01)]]
    assert rows[0]["judged_by"] == "monte-carlo (1000 episodes)" and j.summary()["judged_by"] == j.method


@pytest.mark.slow  # end-to-end training: the slow tier (CI runs both tiers)
def test_cli_trains_and_judges_an_environment_without_an_exact_model(tmp_path, monkeypatch):
    """``fhc-jax train --env module:Class`` on an environment with no exact model: trained on
    the sampled path, judged by Monte-Carlo with 95% intervals and a stated number of episodes."""
    import json

    from fhc_jax.cli import main

    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    out = tmp_path / "drift"
    assert (
        main(
            [
                "train",
                "--env",
                "helpers:Drift",
                "--algo",
                "nn-constrained",
                "--seeds",
                "2",
                "--set",
                "num_iterations=10",
                "--set",
                "episodes_per_iteration=32",
                "--set",
                "eval_episodes=64",
                "--set",
                "run.eval_episodes=500",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["aggregate"]["judged_by"] == "monte-carlo (500 episodes)"
    for row in summary["seeds"]:
        lo, hi = row["costs_ci95"][0]
        assert lo < row["exact_costs"][0] < hi and row["feasible"] == (hi <= 2.0 * 1.02 + 1e-9)
    assert summary["optimum"] is None  # Drift declares no reference policy


class DriftInCents(Drift):
    """Drift with rewards in other units (x 100): the same decision problem."""

    def transition(self, noise, state, action, params):
        obs, nxt, reward, costs, done, info = super().transition(noise, state, action, params)
        return obs, nxt, 100.0 * reward, costs, done, info


@pytest.mark.slow  # end-to-end training: the slow tier (CI runs both tiers)
def test_learners_train_in_the_signals_units_and_report_in_the_environments():
    """Without a tabular exact model the learners train on ScaledSignals (rewards and costs
    divided by their typical magnitudes): the same problem in other units gives the same first
    batch and the same policy, with the reported reward in the environment's units."""
    from fhc_jax.envs.wrappers import ScaledSignals, signal_scales

    cents = DriftInCents()
    s_r, s_c = signal_scales(cents, cents.default_params)
    s_r1, _ = signal_scales(DRIFT, DRIFT.default_params)
    assert s_r == pytest.approx(100.0 * s_r1, rel=1e-5) and s_c.tolist() == [1.0]
    scaled = ScaledSignals(cents, s_r, s_c)
    pol = fhc.uniform_random_policy(3)
    a = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(jax.random.key(2), scaled, cents.default_params, pol, 64)
    b = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(jax.random.key(2), cents, cents.default_params, pol, 64)
    np.testing.assert_allclose(a.rewards * s_r, b.rewards, rtol=1e-5)
    cfg = nc.Config(num_iterations=3, episodes_per_iteration=16, eval_every=0, eval_episodes=64, actor_epochs=2)
    outs = [jax.jit(nc.make_train(e, e.default_params, cfg))(jax.random.key(0)) for e in (DRIFT, cents)]
    np.testing.assert_allclose(outs[1].metrics.reward, 100.0 * outs[0].metrics.reward, rtol=1e-4)
    np.testing.assert_allclose(outs[1].metrics.evaluation.reward, 100.0 * outs[0].metrics.evaluation.reward, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("floor", [1e-4, 0.3])
def test_fh_importance_floor_in_the_sampled_actor_increment(floor):
    """Without tabular states the improved actor's increment is b(n) sum_k phi_hk (delta_hk
    (e_a / max(mu_a, floor) - 1)) / max(sum_k phi_hk, 1) (``combine="mass"``), against a numpy
    reference: critics at 0 and Monte-Carlo targets (trace 1), so delta_h is the Lagrangian
    return of stage h."""
    fc, feat = fhc.algos.fh_constrained, fhc.algos.features
    env, params = DRIFT, DRIFT.default_params
    cfg = fc.Config(features=feat.RadialBasis(3), importance_floor=floor, theta_bound=100.0)
    setup = fc.setup(env, params, cfg)
    # nu = 0.5 training units: initial_multiplier counts budget units of H / d training units
    unit = float(fhc.algos.core.multipliers.budget_unit(setup.violation_units, env.horizon)[0])
    cfg = cfg.replace(initial_multiplier=0.5 / unit)
    state = fc.init(jax.random.key(0), setup, cfg)
    np.testing.assert_allclose(state.multipliers, [0.5], rtol=1e-6)
    theta = jnp.asarray(np.random.default_rng(0).normal(0.0, 3.0, state.theta.shape), jnp.float32)
    state = state.replace(theta=theta, theta_average=theta)
    traj = fhc.rollout(jax.random.key(1), env, params, fc.policy(state, env, params), 64)
    batch = fhc.algos.core.tabular_rollout.batch_from_trajectory(traj)
    new = fc.update(state, batch, None, setup, cfg)[0]

    phi = np.asarray(setup.features(batch.observations), np.float64)  # (H+1, K, X)
    nu = 0.5
    lag = np.asarray(batch.rewards, np.float64) - nu * np.asarray(batch.costs, np.float64)[..., 0]  # (H, K)
    final = np.asarray(batch.terminal_rewards, np.float64) - nu * np.asarray(batch.terminal_costs, np.float64)[:, 0]
    delta = np.cumsum(lag[::-1], axis=0)[::-1] + final  # (H, K)
    logits = np.einsum("hkx,hxa->hka", phi[:-1], np.asarray(theta, np.float64))
    mu = np.exp(logits - logits.max(-1, keepdims=True))
    mu /= mu.sum(-1, keepdims=True)
    onehot = np.eye(env.num_actions)[np.asarray(batch.actions)]  # (H, K, A)
    mu_a = np.sum(mu * onehot, -1, keepdims=True)
    assert (mu_a < 0.3).mean() > 0.1  # the floors 1e-4 and 0.3 give different increments here
    per_sample = delta[..., None] * (onehot / np.maximum(mu_a, floor) - 1.0)
    inc = np.einsum("hkx,hka->hxa", phi[:-1], per_sample) / np.maximum(phi[:-1].sum(1), 1.0)[..., None]
    expected = np.asarray(theta, np.float64) + 3.0 * inc  # b(0) = actor_lr.init
    np.testing.assert_allclose(np.asarray(new.theta), expected, rtol=1e-4, atol=1e-3)
    assert fc.Config().importance_floor == 0.05  # the fixed floor of earlier versions
    with pytest.raises(ValueError, match=r"importance_floor must lie in \(0, 1\], found 0"):
        fc.Config(importance_floor=0.0)


@pytest.mark.slow
def test_fh_policy_built_inside_the_program_that_plays_it():
    """FH-Constrained's policy on an environment without a tabular model rebuilds its feature
    box from a fixed uniform-policy sample; built inside the caller's jit (the train state an
    argument, as the robustness benchmark judges seeds), the sample is still computed at once
    (it raised TracerArrayConversionError), and the program plays the same policy as outside."""
    fc = fhc.algos.fh_constrained
    env = fhc.BatteryStorage()
    params = env.default_params
    state = fc.make_train(env, params, fc.Config(num_iterations=2, episodes_per_iteration=8))(jax.random.key(0)).state
    key = jax.random.key(3)
    inside = jax.jit(lambda s: fhc.rollout_returns(key, env, params, fc.policy(s, env, params), 64))(state)
    outside = jax.jit(lambda: fhc.rollout_returns(key, env, params, fc.policy(state, env, params), 64))()
    np.testing.assert_allclose(np.asarray(inside.rewards), np.asarray(outside.rewards), rtol=1e-6)
