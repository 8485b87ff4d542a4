"""Shared learner pieces: schedules (Assumption 3), declarative config validation, the
multiplier family, lambda-returns and GAE, feature maps, the fast tabular rollout (checked
against exact evaluation), the evaluation loop."""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import random_cmdp

import fhc_jax as fhc
from fhc_jax.algos import PowerSchedule, stack
from fhc_jax.algos.core import evaluation, features, multipliers, returns, scaffold, tabular_rollout
from fhc_jax.algos.core import hyperparameters as hp
from fhc_jax.envs.gridworld import GridWorld


def test_power_schedule_values():
    s = PowerSchedule(init=2.0, power=0.75, decay=10.0)
    n = jnp.arange(3)
    np.testing.assert_allclose(s(n), 2.0 / (1 + np.arange(3) / 10.0) ** 0.75, rtol=1e-6)


def test_check_assumption3_accepts_ordered_powers_and_vmapped_values():
    hp.check_schedules("X", {"a": PowerSchedule(1.0, 0.55), "b": PowerSchedule(1.0, 0.7), "c": PowerSchedule(1.0, 1.0)})
    hp.check_schedules(
        "X", {"a": PowerSchedule(np.array([1.0, 2.0]), 0.6), "b": PowerSchedule(1.0, np.array([0.7, 0.8]))}
    )
    with pytest.raises(ValueError, match=r"X.b.power must be > X.a.power .*b\(n\) / a\(n\) -> 0"):
        hp.check_schedules("X", {"a": PowerSchedule(1.0, 0.6), "b": PowerSchedule(1.0, np.array([0.7, 0.6]))})
    with pytest.raises(ValueError, match=r"X.a.init must be > 0"):
        hp.check_schedules("X", {"a": PowerSchedule(np.array([1.0, -1.0]), 0.6)})


def test_projected_gradient_is_the_papers_step_with_a_proportional_term():
    """(algo7) for penalties: nu_I <- clip(nu_I + c violation, 0, bound); nu = clip(nu_I + K_p v)."""
    violation = jnp.array([-1.0, 2.0, 10.0])
    paper = multipliers.projected_gradient(0.5, 5.0)
    state = paper.init(3, jnp.array([0.0, 1.0, 4.9]))
    nu, state = paper.update(state, violation)
    np.testing.assert_allclose(nu, [0.0, 2.0, 5.0])
    np.testing.assert_allclose(state.integral, [0.0, 2.0, 5.0])
    pi = multipliers.projected_gradient(0.5, 5.0, gain=0.25)
    nu, state = pi.update(pi.init(3, jnp.array([1.0, 1.0, 1.0])), violation)
    np.testing.assert_allclose(state.integral, [0.5, 2.0, 5.0])
    np.testing.assert_allclose(nu, [0.25, 2.5, 5.0])


def test_geometric_law_travels_geometrically_and_moves_in_proportion_near_its_fixed_point():
    """I <- clip(I + c max(I, nu_0) clip(v / s, -1, 1), 0, bound), nu = clip(I + K_p v): a
    violation of s or more grows I by the factor (1 + c) per update above nu_0, a smaller one
    in proportion, a negative one shrinks it, and it stops at the bound."""
    c, floor, bound, s = 0.1, 0.5, 100.0, 0.2
    law = multipliers.geometric(c, bound, 0.0, floor, s)
    state = law.init(3, jnp.array([0.0, 2.0, 2.0]))
    nu, state = law.update(state, jnp.array([5.0, 5.0, 0.05]))
    np.testing.assert_allclose(nu, [c * floor, 2.0 * (1 + c), 2.0 * (1 + c * 0.05 / s)], rtol=1e-6)
    for _ in range(30):
        nu, state = law.update(state, jnp.array([1.0, 1.0, -1.0]))
    assert nu[1] == pytest.approx(2.0 * (1 + c) ** 31, rel=1e-4)  # geometric: 2.2 -> 38.4
    assert 0.0 <= nu[2] < 2.0 * (1 - c) ** 25  # shrinks just as fast
    for _ in range(40):
        nu, state = law.update(state, jnp.array([1.0, 1.0, -1.0]))
    assert nu[1] == bound  # the projection (anti-windup)
    gain = multipliers.geometric(c, bound, 0.25, floor, s)
    nu, _ = gain.update(gain.init(1, 1.0), jnp.array([0.1]))
    np.testing.assert_allclose(nu, [1.0 + c * 1.0 * 0.5 + 0.25 * 0.1], rtol=1e-6)
    with pytest.raises(ValueError, match=r"geometric.floor must be > 0"):
        multipliers.geometric(c, bound, 0.0, 0.0)
    with pytest.raises(ValueError, match=r"geometric.relative_gain must lie in \[0, 1\], found 1.5"):
        multipliers.geometric(c, bound, 0.0, floor, relative_gain=1.5)


def test_geometric_law_relative_term_scales_with_the_multiplier_and_ignores_batch_noise():
    """nu = I (1 + K_r clip(v / max(s, 3 sigma), -1, 1)): the same violation raises a
    multiplier 100x larger 100x as much; a violation within 3 standard errors of the batch's
    noise counts only in proportion to that noise."""
    c, floor, bound, s, kr = 0.1, 0.5, 1e6, 0.2, 0.5
    law = multipliers.geometric(c, bound, 0.0, floor, s, relative_gain=kr)
    state = law.init(2, jnp.array([2.0, 200.0]))
    nu, state = law.update(state, jnp.array([0.1, 0.1]))
    integral = np.array([2.0, 200.0]) * (1 + c * 0.1 / s)
    np.testing.assert_allclose(state.integral, integral, rtol=1e-6)
    np.testing.assert_allclose(nu, integral * (1 + kr * 0.1 / s), rtol=1e-6)
    noisy = multipliers.geometric(c, bound, 0.0, floor, s, relative_gain=kr, noise=jnp.array([0.0, 0.5]))
    nu, _ = noisy.update(noisy.init(2, jnp.array([2.0, 2.0])), jnp.array([0.3, 0.3]))
    grown = 2.0 * (1 + c)  # v / s = 1.5 saturates the integral's drive
    np.testing.assert_allclose(nu, [grown * (1 + kr), grown * (1 + kr * 0.3 / 1.5)], rtol=1e-6)


def test_geometric_law_floor_is_capped_by_the_level_that_first_met_the_budget():
    """Below the floor nu_0 the integral moves by c nu_0 per update until the violation first
    turns non-positive; from then on the floor is at most twice the integral it had then."""
    c, floor, bound, s = 0.1, 10.0, 1e3, 0.2
    law = multipliers.geometric(c, bound, 0.0, floor, s)
    state = law.init(1, jnp.array([0.0]))
    nu, state = law.update(state, jnp.array([1.0]))  # from 0: the floor's step
    np.testing.assert_allclose(nu, [c * floor], rtol=1e-6)
    assert float(state.anchor[0]) == 0.0
    nu, state = law.update(state, jnp.array([-1.0]))  # the budget is met at I = 1: the anchor
    np.testing.assert_allclose(state.anchor, [1.0], rtol=1e-6)
    np.testing.assert_allclose(nu, [0.0], atol=1e-6)  # 1 - c max(1, 10) = 0
    nu, state = law.update(state, jnp.array([1.0]))  # now the floor is 2 x 1, not 10
    np.testing.assert_allclose(nu, [c * 2.0], rtol=1e-6)
    np.testing.assert_allclose(state.anchor, [1.0], rtol=1e-6)  # set once


def test_tightened_thresholds_run_from_the_loosest_to_alpha_over_the_fraction():
    """alpha_n = alpha + (max(L, alpha) - alpha) (1 - n / (f N))_+^2: L at n = 0, a quarter of
    the way back at n = f N / 2, alpha from f N on, alpha itself when f = 0 or L < alpha."""
    alpha, loosest = jnp.array([10.0, -2.0, 5.0]), jnp.array([90.0, 6.0, 1.0])
    at = lambda n, f=0.5: np.asarray(multipliers.tightened_thresholds(alpha, loosest, n, 200, f))
    np.testing.assert_allclose(at(0), [90.0, 6.0, 5.0])
    np.testing.assert_allclose(at(50), [10.0 + 80.0 / 4, -2.0 + 8.0 / 4, 5.0])
    np.testing.assert_array_equal(at(100), alpha)
    np.testing.assert_array_equal(at(150), alpha)
    np.testing.assert_array_equal(at(0, 0.0), alpha)  # f = 0: exactly alpha (bit-for-bit)
    vmapped = jax.vmap(lambda f: multipliers.tightened_thresholds(alpha, loosest, 50, 200, f))(jnp.array([0.0, 0.5]))
    np.testing.assert_allclose(vmapped, [alpha, at(50)])


def test_pid_matches_a_hand_computed_sequence_and_never_winds_up():
    """PID-Lagrangian with EMAs and a delayed derivative, against a direct loop; the integral
    stays in [0, bound] however long the violation lasts (the one anti-windup rule)."""
    kp, ki, kd, a_p, a_d, d, bound = 0.5, 0.3, 0.2, 0.6, 0.7, 2, 4.0
    upd = multipliers.pid(bound, kp, ki, kd, p_ema=a_p, d_ema=a_d, delay=d)
    state = upd.init(1, 0.1)
    integral, p, dd, hist = 0.1, 0.0, 0.0, [0.0] * d
    for n, cost in enumerate([3.0, 5.0, 1.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 0.0]):
        alpha = 2.0
        nu, state = upd.update(state, jnp.array([cost - alpha]), jnp.array([cost]))
        integral = min(max(integral + ki * (cost - alpha), 0.0), bound)
        p = a_p * p + (1 - a_p) * (cost - alpha)
        dd = a_d * dd + (1 - a_d) * cost
        want = min(max(kp * p + integral + kd * max(0.0, dd - hist[n % d]), 0.0), bound)
        hist[n % d] = dd
        np.testing.assert_allclose(nu, [want], rtol=1e-5, atol=1e-6)
        assert 0.0 <= float(state.integral[0]) <= bound
    assert float(state.integral[0]) < bound  # it unwound at once when the violation flipped


def test_optimizer_ascent_is_projected_optimizer_step():
    upd = multipliers.optimizer_ascent(optax.sgd(0.1), 1.0)
    nu, state = upd.update(upd.init(2, 0.5), jnp.array([2.0, -10.0]))
    np.testing.assert_allclose(nu, [0.7, 0.0], rtol=1e-6)
    np.testing.assert_allclose(state.integral, nu)


def test_lambda_returns_and_gae_are_one_recursion():
    """G_h = c_h + gamma (1 - lam) V_{h+1} + gamma lam G_{h+1}; A_h = G_h - V_h equals the usual
    GAE sum of discounted TD errors (hand-computed loop)."""
    rng = np.random.default_rng(3)
    h, k = 6, 4
    rewards = rng.normal(size=(h, k)).astype(np.float32)
    values = rng.normal(size=(h + 1, k)).astype(np.float32)
    gamma, lam = 0.9, 0.7
    adv, ret = returns.finite_horizon_gae(jnp.asarray(rewards), jnp.asarray(values), gamma, lam)
    deltas = rewards + gamma * values[1:] - values[:-1]
    want = np.zeros((h, k))
    for t in range(h):
        want[t] = sum((gamma * lam) ** (j - t) * deltas[j] for j in range(t, h))
    np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, want + values[:-1], rtol=1e-5, atol=1e-5)
    mc = returns.lambda_returns(jnp.asarray(rewards), jnp.asarray(values[-1]), jnp.asarray(values[1:]), 1.0)
    np.testing.assert_allclose(mc, np.cumsum(rewards[::-1], axis=0)[::-1] + values[-1], rtol=1e-5, atol=1e-5)


@hp.hyperparameters
class _Toy:
    n: int = hp.static(3, low=1)
    mode: str = hp.static("a", choices=("a", "b"))
    flag: bool = hp.static(True)
    step: PowerSchedule = hp.schedule(PowerSchedule(1.0, 0.6))
    top: float = hp.numeric(2.0, low=0.0, low_open=True)
    start: float = hp.numeric(0.0, low=0.0, high="top")
    frac: float = hp.numeric(0.5, low=0.0, high=1.0, high_open=True)


@pytest.mark.parametrize(
    "changes,match",
    [
        (dict(n=0), r"Config.n must be an integer >= 1, found 0"),
        (dict(n=True), r"Config.n must be an integer >= 1, found True"),
        (dict(mode="c"), r"Config.mode must be one of 'a', 'b', found 'c'"),
        (dict(flag=1), r"Config.flag must be True or False, found 1"),
        (dict(top=0.0), r"Config.top must be > 0, found 0"),
        (dict(start=3.0), r"Config.start must lie in \[0, top = 2\], found 3"),
        (dict(frac=np.array([0.2, 1.0])), r"Config.frac must lie in \[0, 1\), found \[0.2, 1.0\]"),
        (dict(step=PowerSchedule(1.0, 0.4)), r"Config.step.power must lie in \(0.5, 1\]"),
        (dict(top="x"), r"Config.top must be a real number"),
    ],
)
def test_declarative_validation_names_field_range_and_value(changes, match):
    with pytest.raises(ValueError, match=match):
        _Toy(**changes)
    toy = _Toy()
    assert toy.replace(frac=0.25).frac == 0.25 and _Toy._static_fields == ("n", "mode", "flag")
    leaves = jax.tree.leaves(toy)
    assert len(leaves) == 6  # three schedule fields + top, start, frac


def test_inverse_cdf_skips_zero_probabilities():
    p = jnp.array([0.0, 0.5, 0.0, 0.5, 0.0])
    cdf = jnp.cumsum(p)
    u = jnp.array([0.0, 0.2, 0.49999, 0.5, 0.7, 0.9999999])
    i = tabular_rollout.inverse_cdf(jnp.broadcast_to(cdf, (6, 5)), u, 3)
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
    model = tabular_rollout.tabular_model(env, params)
    assert (model.step_env is env) == steps_itself  # which successor sampler is under test
    cdf = jnp.cumsum(jnp.asarray(policy, jnp.float32), -1)
    batch = jax.jit(tabular_rollout.rollout_tabular, static_argnums=(3, 4))(
        jax.random.key(0), model, cdf, _row, num_episodes
    )
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

    carry, metrics, exact = jax.jit(lambda c: evaluation.scan_with_evaluation(step, c, 7, 3, ev))(jnp.float32(0.0))
    assert float(carry) == 7.0
    np.testing.assert_array_equal(metrics["x"], np.arange(7))
    np.testing.assert_array_equal(exact.iteration, [0, 3, 6, 7])
    np.testing.assert_array_equal(exact.reward, [0, 30, 60, 70])
    _, _, exact0 = evaluation.scan_with_evaluation(step, jnp.float32(0.0), 5, 0, ev)
    np.testing.assert_array_equal(exact0.iteration, [0, 5])


def test_stack_rejects_static_differences():
    from fhc_jax.algos import fh_constrained as fc

    with pytest.raises(ValueError, match="static field"):
        stack([fc.Config(), fc.Config(variant="paper")])
    stacked = stack([fc.Config(), fc.Config(theta_bound=1.0)])
    assert stacked.theta_bound.shape == (2,)


@pytest.mark.slow
def test_env_defaults_resolve_per_environment_and_explicit_values_hold():
    """FH-Constrained's features default is an EnvDefault: make_learner (and the experiment
    layer, which knows the environment) resolve it to one-hot on GridWorld and to
    Auto() of the observations on BatteryStorage (which chooses TileCoding(6, 3) of the two
    components that vary within a stage); a value set explicitly holds (one-hot on an
    environment without tabular states is an error, not silently replaced)."""
    from fhc_jax.algos import fh_constrained as fc
    from fhc_jax.experiment.config import load_spec
    from fhc_jax.experiment.typed_settings import ConfigError, learner_settings

    cfg = fc.Config()
    assert isinstance(cfg.features, hp.EnvDefault) and hp.has_env_defaults(cfg)
    grid, battery = GridWorld(size=3, horizon=4), fhc.BatteryStorage()
    on_grid = fc.make_learner(grid, grid.default_params, cfg).config
    on_battery = fc.make_learner(battery, battery.default_params, cfg).config
    assert on_grid.features == features.OneHot() and on_battery.features == features.Auto()
    # the feature map's combination rule and the critics' trace follow it (docs/algorithms/fh_constrained.md)
    assert (on_grid.combine, on_grid.trace) == ("visits", 0.5) and (on_battery.combine, on_battery.trace) == (
        "mass",
        1.0,
    )
    assert (on_grid.num_iterations, on_battery.num_iterations) == (2500, 5000)
    assert not hp.has_env_defaults(on_grid) and on_grid.critic_lr == cfg.critic_lr
    # the answer follows the environment, not the path: GridWorld forced onto the sampled path
    assert fc.make_learner(grid, grid.default_params, cfg.replace(path="sampled")).config.features == features.OneHot()
    tiles = cfg.replace(features=features.TileCoding(2, 3))
    assert fc.make_learner(battery, battery.default_params, tiles).config.features == features.TileCoding(2, 3)
    with pytest.raises(ValueError, match="OneHot needs tabular states"):
        fc.make_learner(battery, battery.default_params, cfg.replace(features=features.OneHot()))
    # the train state records the features used (the map Auto chose), so the policy can be
    # rebuilt from it alone
    setup = fc.setup(battery, battery.default_params, cfg)
    assert fc.init(jax.random.key(0), setup, cfg).features == features.TileCoding(6, 3, stage_inputs=False)
    assert setup.features.num_features == 108
    with pytest.raises(ValueError, match="Auto\\(\\) chooses a map of raw observations; GridWorld has tabular states"):
        fc.make_train(grid, grid.default_params, cfg.replace(features=features.Auto()))
    # both values are validated; an error names the field and which default is wrong
    with pytest.raises(
        ValueError,
        match=r"Config.features must be a feature spec .*\(its default on environments "
        r"without a tabular exact model\)",
    ):
        fc.Config(features=hp.EnvDefault(features.OneHot(), "rbf"))
    with pytest.raises(ValueError, match=r"Config.trace must lie in \[0, 1\], found 2$"):
        fc.Config(trace=2.0)  # an explicit value's error does not mention the defaults
    # the experiment layer resolves for the environment it builds; config.json gets plain values
    assert load_spec("fh-constrained").learner.features == features.OneHot()
    spec = load_spec("fh-constrained", env="battery")
    assert spec.learner.features == features.Auto()
    assert learner_settings(spec.learner)["features.kind"] == "auto"
    assert load_spec(
        "fh-constrained", env="battery", overrides=["features.max_features=100"]
    ).learner.features == features.Auto(max_features=100)
    assert load_spec(
        "fh-constrained", env="battery", overrides=["features.kind=radial_basis", "features.num_centers=3"]
    ).learner.features == features.RadialBasis(3, stage_inputs=False)  # a switch of kind keeps stage_inputs
    with pytest.raises(ConfigError, match="num_iterations still holds its environment-dependent default"):
        learner_settings(cfg)
    # stacking configs that set a field beside configs that keep its default needs the environment
    from fhc_jax.algos import nn_constrained as nc

    same = [nc.Config(), nc.Config(multiplier_gain=0.1)]  # both keep NN-Constrained's EnvDefaults
    assert stack(same).multiplier_gain.shape == (2,)
    mixed = [nc.Config(), nc.Config(trace=0.1)]
    with pytest.raises(ValueError, match="stack.*env=env"):
        stack(mixed)
    assert stack(mixed, env=grid).trace.shape == (2,)
    with pytest.raises(ValueError, match="stack.*env=env"):
        stack([cfg, cfg.replace(features=features.OneHot())])
    assert stack([cfg, cfg.replace(features=features.OneHot())], env=grid).theta_bound.shape == (2,)


@pytest.mark.slow
def test_hparams_that_keep_an_env_default_take_the_trained_configs_value():
    """train(key, hparams): a field hparams leaves at its EnvDefault takes the value of the
    config make_train resolved (the environment's default, or the value set there)."""
    from fhc_jax.algos import fh_constrained as fc

    cfg = hp.resolve_env_defaults(fc.Config(), False).replace(features=features.TileCoding(2, 3))
    resolved = hp.resolve_hyperparameters(cfg, fc.Config(trace=0.9))
    assert resolved.features == features.TileCoding(2, 3) and resolved.trace == 0.9
    grid = GridWorld(size=3, horizon=3)
    short = fc.Config(num_iterations=2, episodes_per_iteration=4)
    train = fc.make_train(grid, grid.default_params, short)
    out = jax.jit(jax.vmap(train, in_axes=(None, 0)))(
        jax.random.key(0), stack([short, short.replace(trace=0.1)], env=grid)
    )
    assert out.metrics.multipliers.shape[:2] == (2, 2)


@pytest.mark.slow
def test_the_returned_policy_is_the_best_candidate_by_the_learners_own_estimates():
    """``TrainResult.state`` is the :class:`~fhc_jax.algos.core.selection.Selection`: the reported
    policy of one evaluation mark after the start, whose exact value is the in-training exact
    evaluation at that mark; it is feasible by its own upper bound whenever the status says the
    constraint is met; ``final_state`` is the last iterate (the last exact evaluation), and
    with ``eval_every = 0`` the two coincide."""
    fc = fhc.algos.fh_constrained
    env = fhc.GridWorld(size=4, horizon=6, alpha=1.5)
    params = env.default_params
    cmdp = env.to_cmdp(params)
    cfg = fc.Config(num_iterations=60, episodes_per_iteration=32, eval_every=10, eval_episodes=1024)
    out = jax.jit(jax.vmap(fc.make_train(env, params, cfg)))(jax.random.split(jax.random.key(3), 2))
    marks = np.asarray(out.metrics.evaluation.iteration[0])
    for seed in range(2):
        it = int(out.selection.iteration[seed])
        assert it in marks[1:].tolist()
        ev = fhc.evaluate(cmdp, fc.policy_table(jax.tree.map(lambda x: x[seed], out.state), env, params))
        j = int(np.flatnonzero(marks == it)[0])
        np.testing.assert_allclose(ev.reward, out.metrics.evaluation.reward[seed, j], rtol=1e-5)
        upper = np.asarray(out.selection.upper[seed])
        # the status checks the returned policy against the exact model (float32 rounding allowed)
        alpha = np.asarray(env.thresholds(params))
        assert bool(out.status.met[seed]) == bool(np.all(ev.costs <= alpha + 1e-5 * (alpha + 1.0)))
        np.testing.assert_allclose(out.status.costs[seed], ev.costs, rtol=1e-5)
        assert np.all(upper >= np.asarray(out.selection.costs[seed]))
        last = fhc.evaluate(cmdp, fc.policy_table(jax.tree.map(lambda x: x[seed], out.final_state), env, params))
        np.testing.assert_allclose(last.reward, out.metrics.evaluation.reward[seed, -1], rtol=1e-5)
    once = jax.jit(fc.make_train(env, params, cfg.replace(eval_every=0)))(jax.random.key(3))
    assert int(once.selection.iteration) == cfg.num_iterations
    np.testing.assert_array_equal(np.asarray(once.state.theta_average), np.asarray(once.final_state.theta_average))


@pytest.mark.slow
def test_train_states_are_checked_against_the_learner_and_the_environment():
    """Issue 33 item 5: ``policy`` and ``policy_table`` refuse a train state of another learner,
    a TrainResult, and a state trained on an environment of another H, S or action count
    (the state records ``trained_on``); the environment it was trained on still plays it."""
    from fhc_jax.algos import fh_constrained as fc
    from fhc_jax.algos import nn_constrained as nn
    from fhc_jax.algos import ppo_lagrangian as pl
    from fhc_jax.algos.core.scaffold import environment_signature
    from fhc_jax.envs.gridworld import GridWorld

    g3 = GridWorld(size=3, horizon=5)
    res = fc.make_train(g3, g3.default_params, fc.Config(num_iterations=2, episodes_per_iteration=4))(jax.random.key(0))
    assert res.state.trained_on == environment_signature(g3) == (5, 9, 9, 1)
    assert res.final_state.trained_on == res.state.trained_on
    assert fc.policy_table(res.state, g3).shape == (5, 9, 9)
    for other, what in (
        (GridWorld(size=4, horizon=5), "number of states S = 9, GridWorld has 16"),
        (GridWorld(size=3, horizon=6), "horizon H = 5, GridWorld has 6"),
    ):
        for fn in (fc.policy_table, fc.policy):
            with pytest.raises(ValueError, match=f"trained on an environment with {what}: pass the environment"):
                fn(res.state, other)
    with pytest.raises(
        ValueError,
        match=r"^nn_constrained.policy_table: the train state is a "
        r"fhc_jax.algos.fh_constrained.TrainState, not a fhc_jax.algos.nn_constrained"
        r".TrainState; use fhc_jax.algos.fh_constrained.policy_table$",
    ):
        nn.policy_table(res.state, g3)
    with pytest.raises(ValueError, match=r"^ppo_lagrangian.policy: the train state is a fhc_jax.algos.fh_constrained"):
        pl.policy(res.state, g3)
    with pytest.raises(ValueError, match=r"pass the train state \(result.state\), not the TrainResult"):
        fc.policy(res, g3)


@pytest.mark.slow
def test_neural_train_states_record_one_static_network_spec():
    """Issue 31 item 6: every neural learner's train state records its network shape as one
    static NetworkSpec (the Config's fields, ``observation`` resolved), part of the tree
    structure and never a leaf; the policy is rebuilt from it (another width does not fit
    the parameters)."""
    from fhc_jax.algos import cpo, ecop, saute
    from fhc_jax.algos import nn_constrained as nn
    from fhc_jax.algos import ppo_lagrangian as pl
    from fhc_jax.algos.core.networks import NetworkSpec

    grid = GridWorld(size=3, horizon=5, alpha=2.0)
    params = grid.default_params
    cases = (
        (nn, nn.Config(width=7, depth=1, normalize_inputs=False), "env", False),
        (ecop, ecop.Config(width=7, activation="relu"), "one_hot", True),
        (pl, pl.Config(width=7, initial_log_std=-1.0), "xy", False),
        (cpo, cpo.Config(width=7, observation="xyt"), "xyt", False),
        (saute, saute.Config(width=7), "xyt", False),
    )
    for module, cfg, observation, normalized in cases:
        state = module.init(jax.random.key(0), module.setup(grid, params, cfg), cfg)
        assert state.network == NetworkSpec.of(cfg, observation=observation), module.__name__
        assert state.network.normalize_inputs is normalized and hash(state.network) == hash(state.network)
        assert not any(isinstance(leaf, NetworkSpec) for leaf in jax.tree.leaves(state))
        wider = state.replace(network=state.network.replace(width=8))
        assert jax.tree.structure(wider) != jax.tree.structure(state)
        logits = module.ALGORITHM.table_logits(state, module.policy_setup(grid, params, state))
        assert logits.shape[0] == 5 and bool(jnp.all(jnp.isfinite(logits))), module.__name__
        with pytest.raises(flax.errors.ScopeParamShapeError):  # width-8 networks, width-7 parameters
            module.ALGORITHM.table_logits(state, module.policy_setup(grid, params, wider))


def test_hyperparameters_are_resolved_once_per_run_with_a_runs_axis():
    """``Learner.resolve`` gives ``init``/``step`` their hyperparameters once per run: an
    environment-dependent default kept by ``stack`` takes the learner's value, broadcast over the
    runs axis (the chunked runner resolves stacked hparams this way, not per iteration)."""
    from fhc_jax.algos import fh_constrained as fh
    from fhc_jax.algos.core.hyperparameters import EnvDefault

    env = fhc.envs.GridWorld(size=3, horizon=4)
    cfg = fh.Config(num_iterations=4, eval_every=2)
    lrn = scaffold.make_learner(fh.ALGORITHM, env, env.default_params, cfg)
    stacked = stack([cfg, cfg.replace(num_iterations=4)])
    assert isinstance(stacked.trace, EnvDefault)
    resolved = lrn.resolve(stacked, (2,))
    np.testing.assert_array_equal(resolved.trace, np.full((2,), lrn.config.trace, np.float32))
    assert lrn.resolve(None) is lrn.config
    with pytest.raises(ValueError, match="same static"):
        lrn.resolve(fh.Config(num_iterations=4, eval_every=2, episodes_per_iteration=8))  # a static field differs
