"""FH-Constrained (paper Algorithm 1): equation-by-equation equivalence at K = 1, batched
forms, learning regression judged by exact evaluation, validation, determinism."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_cmdp

import fhc_jax as fhc
from fhc_jax.algos import PowerSchedule, fh_kernels, stack
from fhc_jax.algos import fh_constrained as fc
from fhc_jax.algos.core import features, multipliers
from fhc_jax.algos.core import tabular_rollout as common
from fhc_jax.envs.gridworld import GridWorld
from fhc_jax.envs.tabular import TabularEnv
from fhc_jax.rollout import uses_uniforms

# ----------------------------------------------------------------------------- reference


def reference_update(theta, v, w, lam, batch, phi, alpha, a_n, b_n, c_n, bound, P):
    """The paper's per-episode update, written with plain loops over h and k.

    Paper sign convention: lambda in [P, 0]. ``phi[h][s]`` is the feature vector of state s at
    stage h (h = 0..H). theta[h] has shape (X, A); v[h], w[k][h] shape (X,). Everything on
    the right-hand side uses the iteration-n values, as the equations are written. The one
    departure of fhc_jax's paper variant: (algo7)'s step c(n) applies to the violation in units
    of d^(k) = max(|alpha^(k)|, H / 100) (fhc_jax.algos.core.multipliers, "Units").
    """
    H = len(theta)
    M = len(lam)
    s = [int(x) for x in batch["states"]]
    acts = [int(x) for x in batch["actions"]]
    r, g = batch["rewards"], batch["costs"]  # (H,), (H, M)
    rH, gH = float(batch["terminal_reward"]), batch["terminal_costs"]  # (), (M,)
    new_theta = [t.copy() for t in theta]
    new_v = [x.copy() for x in v]
    new_w = [[x.copy() for x in wk] for wk in w]
    for h in range(H):
        c_lam = r[h] + sum(lam[k] * g[h][k] for k in range(M))
        delta = c_lam + v[h + 1] @ phi[h + 1][s[h + 1]] - v[h] @ phi[h][s[h]]
        new_v[h] = v[h] + a_n * delta * phi[h][s[h]]  # (algo1)
        logits = phi[h][s[h]] @ theta[h]
        mu = np.exp(logits - logits.max())
        mu /= mu.sum()
        psi = np.outer(phi[h][s[h]], np.eye(len(mu))[acts[h]] - mu)  # grad log mu
        new_theta[h] = np.clip(theta[h] + b_n * psi * delta, -bound, bound)  # (algo3)
    c_lam_H = rH + sum(lam[k] * (gH[k] - alpha[k]) for k in range(M))
    new_v[H] = v[H] + a_n * (c_lam_H - v[H] @ phi[H][s[H]]) * phi[H][s[H]]  # (algo2)
    new_lam = []
    for k in range(M):
        for h in range(H):
            xi = g[h][k] + w[k][h + 1] @ phi[h + 1][s[h + 1]] - w[k][h] @ phi[h][s[h]]
            new_w[k][h] = w[k][h] + a_n * xi * phi[h][s[h]]  # (algo4)
        new_w[k][H] = w[k][H] + a_n * (gH[k] - alpha[k] - w[k][H] @ phi[H][s[H]]) * phi[H][s[H]]  # (algo5)
        d = max(abs(alpha[k]), H / 100.0)
        new_lam.append(min(0.0, max(P, lam[k] - c_n * (w[k][0] @ phi[0][s[0]]) / d)))  # (algo7)
    return new_theta, new_v, new_w, new_lam


SMALL = GridWorld(size=3, horizon=5, num_constraints=2, observation="index", alpha=[1.5, 2.0])


def _random_state(rng, env, x, nu):
    h, a, m = env.horizon, env.num_actions, env.num_constraints
    theta = jnp.asarray(np.clip(rng.normal(0.0, 1.0, (h, x, a)), -1.7, 1.7), jnp.float32)  # inside Gamma's box
    return fc.TrainState(
        theta=theta,
        theta_average=theta,
        critics=jnp.asarray(rng.normal(0.0, 1.0, (h + 1, x, 1 + m)), jnp.float32),
        multipliers=jnp.asarray(nu, jnp.float32),
        multiplier_state=multipliers.projected_gradient(0.0, 20.0).init(m, jnp.asarray(nu, jnp.float32)),
        step=jnp.asarray(3, jnp.int32),
    )


@pytest.mark.parametrize(
    "spec,form,combine",
    [
        (features.OneHot(), "samples", "visits"),
        (features.OneHot(), "table", "mean"),
        (features.RadialBasis(2, bias=True), "samples", "mean"),
        (features.RadialBasis(2, bias=True), "table", "visits"),
        (features.RadialBasis(2, bias=True), "samples", "mass"),
        (
            features.Custom(lambda h, s: jnp.stack([1.0, s / 8.0, h / 5.0, (s % 3) * (h + 1) / 10.0]), 4),
            "table",
            "visits",
        ),
    ],
)
@pytest.mark.slow
def test_k1_equals_paper_equations(spec, form, combine):
    env, params = SMALL, SMALL.default_params
    cfg = fc.Config(
        num_iterations=1,
        episodes_per_iteration=1,
        features=spec,
        variant="paper",
        combine=combine,
        update_form=form,
        theta_bound=1.7,
        multiplier_max=5.0,
        critic_lr=PowerSchedule(0.3, 0.55, 2.0),
        actor_lr=PowerSchedule(0.2, 0.7, 2.0),
        multiplier_lr=PowerSchedule(0.1, 0.9, 2.0),
    )
    table = features.build(spec, env)
    rng = np.random.default_rng(0)
    nu = np.array([0.4, 1.3])
    state = _random_state(rng, env, table.num_features, nu).replace(features=spec)
    model = common.tabular_model(env, params)
    logits = jax.nn.softmax(fc.logits_table(state.theta, table), axis=-1)
    batch = common.rollout_tabular(jax.random.key(1), model, jnp.cumsum(logits, -1), lambda c, s: c[s], 1)
    new, _ = fc.update(state, batch, None, fc.setup(env, params, cfg), cfg)

    phi_tab = np.eye(env.num_states) if table.one_hot else np.asarray(table.all_stages(env.horizon), np.float64)
    phi = [phi_tab if table.one_hot else phi_tab[h] for h in range(env.horizon + 1)]
    n = 3
    a_n, b_n, c_n = (
        float(s.init / (1 + n / s.decay) ** s.power) for s in (cfg.critic_lr, cfg.actor_lr, cfg.multiplier_lr)
    )
    crit = np.asarray(state.critics, np.float64)
    ref = reference_update(
        [np.asarray(t, np.float64) for t in state.theta],
        [crit[h, :, 0] for h in range(env.horizon + 1)],
        [[crit[h, :, 1 + k] for h in range(env.horizon + 1)] for k in range(2)],
        list(-nu),
        {
            "states": np.asarray(batch.states[:, 0]),
            "actions": np.asarray(batch.actions[:, 0]),
            "rewards": np.asarray(batch.rewards[:, 0], np.float64),
            "costs": np.asarray(batch.costs[:, 0], np.float64),
            "terminal_reward": np.asarray(batch.terminal_rewards[0]),
            "terminal_costs": np.asarray(batch.terminal_costs[0], np.float64),
        },
        phi,
        np.asarray(params.thresholds, np.float64),
        a_n,
        b_n,
        c_n,
        1.7,
        -5.0,
    )
    th, v, w, lam = ref
    np.testing.assert_allclose(np.asarray(new.theta), np.stack(th), atol=1e-5)
    np.testing.assert_allclose(np.asarray(new.v), np.stack(v), atol=1e-5)
    np.testing.assert_allclose(np.asarray(new.w), np.array([np.stack(wk) for wk in w]), atol=1e-5)
    np.testing.assert_allclose(np.asarray(new.multipliers), -np.array(lam), atol=1e-5)
    assert int(new.step) == 4
    # the library's readable form of the equations agrees with the loops and with the fast forms
    paper = fc.paper_update(state, batch, fc.setup(env, params, cfg), cfg)
    np.testing.assert_allclose(np.asarray(paper.theta), np.stack(th), atol=1e-5)
    np.testing.assert_allclose(np.asarray(paper.critics[..., 0]), np.stack(v), atol=1e-5)
    np.testing.assert_allclose(
        np.moveaxis(np.asarray(paper.critics[..., 1:]), -1, 0), np.array([np.stack(wk) for wk in w]), atol=1e-5
    )
    np.testing.assert_allclose(np.asarray(paper.multipliers), -np.array(lam), atol=1e-5)
    np.testing.assert_allclose(np.asarray(new.theta), np.asarray(paper.theta), atol=1e-5)
    np.testing.assert_allclose(np.asarray(new.critics), np.asarray(paper.critics), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("spec", [features.OneHot(), features.TileCoding(2, 2)])
@pytest.mark.parametrize("combine", ["visits", "mean", "mass"])
@pytest.mark.parametrize("variant", ["paper", "improved"])
def test_update_forms_agree(spec, combine, variant):
    """The "table" and "samples" forms compute the same update (K > 1, repeated visits)."""
    env, params = SMALL, SMALL.default_params
    table = features.build(spec, env)
    rng = np.random.default_rng(1)
    state = _random_state(rng, env, table.num_features, [0.4, 1.3]).replace(features=spec)
    model = common.tabular_model(env, params)
    mu = jax.nn.softmax(fc.logits_table(state.theta, table), axis=-1)
    batch = common.rollout_tabular(jax.random.key(2), model, jnp.cumsum(mu, -1), lambda c, s: c[s], 16)
    out = []
    for form in ("table", "samples"):
        cfg = fc.Config(
            num_iterations=1,
            episodes_per_iteration=16,
            features=spec,
            variant=variant,
            combine=combine,
            update_form=form,
            theta_bound=1.7,
        )
        new, metrics = fc.update(state, batch, None, fc.setup(env, params, cfg), cfg)
        out.append((new, metrics))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5), out[0], out[1])


@pytest.mark.slow
def test_mass_combine_divides_by_the_summed_activations():
    """``combine="mass"`` divides each feature's summed increment by the batch's summed
    activation of that feature, sum_k phi_j(s_hk) (floored at 1), where "visits" divides by the
    number of samples that activate it at all; with one-hot features the two are one rule."""
    env, params = SMALL, SMALL.default_params
    spec = features.RadialBasis(2, bias=True)
    table = features.build(spec, env)
    state = _random_state(np.random.default_rng(3), env, table.num_features, [0.4, 1.3]).replace(features=spec)
    model = common.tabular_model(env, params)
    mu = jax.nn.softmax(fc.logits_table(state.theta, table), axis=-1)
    k = 64
    batch = common.rollout_tabular(jax.random.key(4), model, jnp.cumsum(mu, -1), lambda c, s: c[s], k)
    new = {}
    for combine in ("visits", "mass"):
        cfg = fc.Config(
            num_iterations=1,
            episodes_per_iteration=k,
            features=spec,
            combine=combine,
            update_form="table",
            theta_bound=100.0,
        )
        new[combine] = fc.update(state, batch, None, fc.setup(env, params, cfg), cfg)[0]
    phi = np.asarray(table.table, np.float64)  # (S, X), time-invariant
    counts = np.zeros((env.horizon + 1, env.num_states))
    for h in range(env.horizon + 1):
        np.add.at(counts[h], np.asarray(batch.states[h]), 1.0)
    mass = np.maximum(counts @ phi, 1.0)[..., None]  # (H+1, X, 1)
    active = np.maximum(counts @ (phi != 0), 1.0)[..., None]
    assert not np.allclose(mass, active)  # a real difference to test
    old = np.asarray(state.critics, np.float64)
    np.testing.assert_allclose(
        (np.asarray(new["mass"].critics) - old) * mass,
        (np.asarray(new["visits"].critics) - old) * active,
        rtol=2e-4,
        atol=2e-5,
    )
    old_theta = np.asarray(state.theta, np.float64)
    np.testing.assert_allclose(
        (np.asarray(new["mass"].theta) - old_theta) * mass[:-1],
        (np.asarray(new["visits"].theta) - old_theta) * active[:-1],
        rtol=2e-4,
        atol=2e-5,
    )
    one_hot = {}
    for combine in ("visits", "mass"):
        cfg = fc.Config(num_iterations=1, episodes_per_iteration=k, combine=combine, update_form="table")
        st = _random_state(np.random.default_rng(3), env, env.num_states, [0.4, 1.3])
        one_hot[combine] = fc.update(st, batch, None, fc.setup(env, params, cfg), cfg)[0]
    jax.tree.map(np.testing.assert_array_equal, one_hot["visits"], one_hot["mass"])


# ----------------------------------------------------------------------------- learning

TINY = GridWorld(size=4, horizon=8, alpha=1.0, num_hotspots=1, num_quiet=2, num_phases=2)
TINY_CONFIG = fc.Config(
    num_iterations=300,
    episodes_per_iteration=64,
    eval_every=100,
    multiplier_lr=PowerSchedule(0.02, 0.8, 100.0),
    theta_bound=3.0,
    trace=0.5,
)


@functools.cache
def _tiny_train():
    return jax.jit(jax.vmap(fc.make_train(TINY, TINY.default_params, TINY_CONFIG)))


@functools.cache
def _tiny_result():
    return _tiny_train()(jax.random.split(jax.random.key(0), 2))


@pytest.mark.slow
def test_learning_regression_small_grid():
    """On a 4x4 grid with H = 8 the trained policy, judged exactly, meets the threshold and
    gains at least 1.5 (about 80% of the constrained optimum's gain) over the initial policy."""
    params = TINY.default_params
    cmdp = TINY.to_cmdp(params)
    best = fhc.solve(cmdp)
    out = _tiny_result()
    for seed in range(2):
        state = jax.tree.map(lambda x: x[seed], out.final_state)
        ev = fhc.evaluate(cmdp, fc.policy_table(state, TINY, params))
        initial = float(out.metrics.evaluation.reward[seed, 0])
        assert float(ev.costs[0]) <= 1.0 * 1.02, (seed, float(ev.costs[0]))
        assert float(ev.reward) >= initial + 1.5, (seed, float(ev.reward), initial)
        assert float(ev.reward) >= 0.8 * best.reward, (seed, float(ev.reward), best.reward)
        # the in-jit exact evaluation agrees with evaluating the returned policy
        np.testing.assert_allclose(out.metrics.evaluation.reward[seed, -1], ev.reward, rtol=1e-4)
        np.testing.assert_allclose(out.metrics.evaluation.costs[seed, -1], ev.costs, rtol=1e-4, atol=1e-5)
    assert out.metrics.reward.shape == (2, 300)
    assert out.metrics.costs.shape == (2, 300, 1)
    assert out.metrics.multipliers.shape == (2, 300, 1)
    np.testing.assert_array_equal(out.metrics.evaluation.iteration[0], [0, 100, 200, 300])
    assert np.all(np.asarray(out.metrics.multipliers) >= 0)


@pytest.mark.slow
def test_vmap_over_seeds_equals_separate_runs_and_is_deterministic():
    keys = jax.random.split(jax.random.key(0), 2)
    batched = _tiny_result()
    single = jax.jit(fc.make_train(TINY, TINY.default_params, TINY_CONFIG))
    for i in range(2):
        one = single(keys[i])
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b[i], rtol=1e-4, atol=1e-4), one, batched)
    again = _tiny_train()(keys)
    jax.tree.map(np.testing.assert_array_equal, again, batched)


@pytest.mark.slow
def test_vmap_over_hyperparameters():
    """Numeric hyperparameters are pytree leaves: one compiled call sweeps them."""
    cfg = TINY_CONFIG.replace(num_iterations=20, eval_every=0)
    train = fc.make_train(TINY, TINY.default_params, cfg)
    sweep = stack([cfg, cfg.replace(theta_bound=1.0, trace=0.0)])
    out = jax.jit(jax.vmap(train, in_axes=(None, 0)))(jax.random.key(3), sweep)
    second = jax.jit(train)(jax.random.key(3), cfg.replace(theta_bound=1.0, trace=0.0))
    np.testing.assert_allclose(out.state.theta[1], second.state.theta, atol=1e-5)
    assert float(jnp.max(jnp.abs(out.state.theta[1]))) <= 1.0 + 1e-6
    with pytest.raises(ValueError, match="static fields"):
        train(jax.random.key(0), cfg.replace(variant="paper"))


@pytest.mark.slow
def test_policy_for_rollout_matches_table():
    params = TINY.default_params
    state = jax.tree.map(lambda x: x[0], _tiny_result().state)
    act = fc.policy(state, TINY, params)
    traj = fhc.rollout(jax.random.key(5), TINY, params, act, 2000)
    table = np.asarray(fc.policy_table(state, TINY, params))
    s0, a0 = np.asarray(traj.states[:, 0]), np.asarray(traj.actions[:, 0])
    # empirical first-stage action frequencies in the most visited start state
    s = np.bincount(s0).argmax()
    freq = np.bincount(a0[s0 == s], minlength=TINY.num_actions) / np.sum(s0 == s)
    np.testing.assert_allclose(freq, table[0, s], atol=0.15)
    assert uses_uniforms(TINY, act)  # fhc.rollout takes the one-block-per-step path
    # Monte-Carlo returns of the sampled policy agree with the exact value of its table.
    exact = fhc.evaluate(TINY.to_cmdp(params), jnp.asarray(table))
    returns = np.asarray(traj.episode_rewards)
    assert abs(returns.mean() - float(exact.reward)) <= 4 * returns.std() / np.sqrt(returns.size)
    batch = common.batch_from_trajectory(traj)
    assert batch.states.shape == (TINY.horizon + 1, 2000)
    np.testing.assert_allclose(batch.episode_rewards, traj.episode_rewards, rtol=1e-6)


@pytest.mark.slow
def test_works_with_tabular_env_and_two_constraints():
    from helpers import random_cmdp

    cmdp = random_cmdp(3, num_states=6, num_actions=3, horizon=4, num_constraints=2, thresholds=np.array([1.5, 1.5]))
    env = fhc.TabularEnv(cmdp)
    cfg = fc.Config(num_iterations=30, episodes_per_iteration=32, eval_every=10)
    out = jax.jit(fc.make_train(env, env.default_params, cfg))(jax.random.key(0))
    assert out.metrics.multipliers.shape == (30, 2)
    assert out.metrics.evaluation.costs.shape == (4, 2)
    ev = fhc.evaluate(cmdp, fc.policy_table(out.final_state, env))
    np.testing.assert_allclose(ev.costs, out.metrics.evaluation.costs[-1], rtol=1e-4)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "changes,match",
    [
        (dict(critic_lr=PowerSchedule(1.0, 0.5)), r"critic_lr.power must lie in \(0.5, 1\].*squared"),
        (dict(multiplier_lr=PowerSchedule(1.0, 1.2)), r"multiplier_lr.power must lie in \(0.5, 1\].*diverge"),
        (dict(actor_lr=PowerSchedule(1.0, 0.55)), r"actor_lr.power must be > Config.critic_lr.power"),
        (dict(multiplier_lr=PowerSchedule(1.0, 0.6)), r"multiplier_lr.power must be > Config.actor_lr.power"),
        (dict(actor_lr=PowerSchedule(0.0, 0.6)), r"actor_lr.init must be > 0"),
        (dict(critic_lr=PowerSchedule(1.0, 0.55, -1.0)), r"critic_lr.decay must be > 0"),
        (dict(theta_bound=0.0), r"theta_bound must be > 0"),
        (dict(trace=1.5), r"trace must lie in \[0, 1\]"),
        (dict(policy_averaging=1.0), r"policy_averaging must lie in \[0, 1\)"),
        (dict(initial_multiplier=30.0), r"initial_multiplier must lie in \[0, multiplier_max"),
        (dict(episodes_per_iteration=0), r"episodes_per_iteration must be an integer >= 1"),
        (dict(variant="fast"), r"variant must be one of 'paper', 'improved'"),
        (dict(combine="sum"), r"combine must be one of"),
    ],
)
def test_config_validation(changes, match):
    with pytest.raises(ValueError, match=match):
        fc.Config(**changes)


def test_constant_step_sizes_need_opt_out():
    const = dict(
        critic_lr=PowerSchedule(0.5, 0.0), actor_lr=PowerSchedule(0.1, 0.0), multiplier_lr=PowerSchedule(0.01, 0.0)
    )
    with pytest.raises(ValueError, match="Assumption 3"):
        fc.Config(**const)
    fc.Config(**const, check_step_sizes=False)


def test_coarse_features_need_a_grid():
    from helpers import random_cmdp

    env = fhc.TabularEnv(random_cmdp(0))
    with pytest.raises(ValueError, match="spatial environment"):
        fc.make_train(env, env.default_params, fc.Config(features=features.RadialBasis(2)))


def test_advantage_increment_matches_direct_loop():
    """Improved actor: per (h, s, a) the mean error of the episodes that took a, minus the
    mean over all visits of (h, s); zero for actions not taken and unvisited states."""
    rng = np.random.default_rng(0)
    h_, k, s_, a_ = 3, 40, 4, 3
    states = rng.integers(0, s_, (h_, k))
    actions = rng.integers(0, a_, (h_, k))
    delta = rng.normal(size=(h_, k))
    table = features.build(features.OneHot(), TabularEnv(random_cmdp(0, num_states=s_, num_actions=a_, horizon=h_)))
    count_sa, total_sa = np.zeros((h_, s_, a_)), np.zeros((h_, s_, a_))
    for h in range(h_):
        np.add.at(count_sa[h], (states[h], actions[h]), 1.0)
        np.add.at(total_sa[h], (states[h], actions[h]), delta[h])
    got = np.asarray(
        fh_kernels.advantage_increment_from_sums(
            jnp.asarray(count_sa, jnp.float32), jnp.asarray(total_sa, jnp.float32), table, k, True
        )
    )
    # the per-sample form (small batches) sums to the same per-cell increment
    weight, count_s = fh_kernels.advantage_weights(
        jnp.asarray(states), jnp.asarray(actions), jnp.asarray(delta, jnp.float32), a_
    )
    per_sample = np.zeros((h_, s_, a_))
    for h in range(h_):
        np.add.at(per_sample[h], (states[h], actions[h]), np.asarray(weight[h] / count_s[h]))
    np.testing.assert_allclose(per_sample, got, rtol=1e-5, atol=1e-6)
    want = np.zeros((h_, s_, a_))
    for h in range(h_):
        for s in range(s_):
            at_s = states[h] == s
            for a in range(a_):
                took = at_s & (actions[h] == a)
                if took.any():
                    want[h, s, a] = delta[h, took].mean() - delta[h, at_s].mean()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_improved_multiplier_is_the_geometric_law():
    """nu = clip(nu_I (1 + K_r clip(v / max(s, 3 se), -1, 1)) + K_p v),
    nu_I <- clip(nu_I + c(n) max(nu_I, nu_0) clip(v / s, -1, 1)), v the violation relative to
    the budget b = max(|alpha|, d / 100): (mean episode cost - alpha + margin) / b, with the
    margin 2 z sigma_C / sqrt(n) + ln(20) max(c_max, 1) / n (n the fewest multiples of
    eval_episodes, up to eval_chunks_max, that bring it within 5% of |alpha|), se the batch
    mean's standard error / b, d = max(|alpha|, H / 100), s = 0.2, nu_0 = 0.2 H / d and the
    bound multiplier_max H / d (budget units; fhc_jax.algos.core.multipliers)."""
    env = SMALL
    params = env.default_params
    cfg = fc.Config(num_iterations=1, episodes_per_iteration=8, multiplier_gain=0.3)
    state = fc.init(jax.random.key(0), fc.setup(env, params, cfg), cfg)
    features.build(state.features, env)  # the spec the learner resolved builds for env
    batch = common.rollout_tabular(
        jax.random.key(1),
        common.tabular_model(env, params),
        jnp.cumsum(fc.policy_table(state, env, params), -1),
        lambda cdf_h, s: cdf_h[s],
        8,
    )
    new, metrics = fc.update(state, batch, None, fc.setup(env, params, cfg), cfg)
    costs = np.asarray(batch.episode_costs, np.float64)
    alpha = np.asarray(params.thresholds, np.float64)
    zs, rl, t = 2 * 1.645 * costs.std(0), np.log(20.0) * np.maximum(np.abs(costs).max(0), 1.0), 0.05 * np.abs(alpha)
    x = 2 * t / (zs + np.sqrt(zs**2 + 4 * rl * t))  # margin zs x + rl x^2 = t at x = 1 / sqrt(n)
    n = cfg.eval_episodes * np.clip(np.ceil(1 / x**2 / cfg.eval_episodes), 1, cfg.eval_chunks_max).max()
    margin = zs / np.sqrt(n) + rl / n  # the bound's normal and rule-of-three terms (multipliers.upper_bound_excess)
    d = np.maximum(np.abs(alpha), env.horizon / 100)
    violation = (costs.mean(0) - alpha + margin) / np.maximum(np.abs(alpha), d / 100)
    unit, bound = env.horizon / d, cfg.multiplier_max * env.horizon / d
    integral = np.clip(cfg.multiplier_lr(0) * 0.2 * unit * np.clip(violation / 0.2, -1, 1), 0.0, bound)
    assert np.all(integral > 0)  # the first step moves it
    np.testing.assert_allclose(new.multiplier_state.integral, integral, rtol=1e-5)
    b = np.maximum(np.abs(alpha), d / 100)
    se = costs.std(0) / np.sqrt(costs.shape[0]) / b
    relative = 1 + cfg.multiplier_relative_gain * np.clip(violation / np.maximum(0.2, 3 * se), -1, 1)
    assert cfg.multiplier_relative_gain == 0.5
    np.testing.assert_allclose(new.multipliers, np.clip(integral * relative + 0.3 * violation, 0.0, bound), rtol=1e-5)


@pytest.mark.slow
def test_reported_policy_is_the_polyak_average():
    """theta_bar(n+1) = beta theta_bar(n) + (1 - beta) theta(n+1), theta_bar(0) = theta(0) = 0;
    policy_table reports softmax of theta_bar (of theta itself when beta = 0)."""
    cfg = TINY_CONFIG.replace(num_iterations=6, eval_every=0, policy_averaging=0.6)
    learner = fc.make_learner(TINY, TINY.default_params, cfg)
    step = jax.jit(lambda c: learner.step(c, cfg))
    carry = learner.init(jax.random.key(4), cfg)
    expected = np.zeros_like(np.asarray(carry.state.theta))
    for _ in range(6):
        carry, _ = step(carry)
        expected = 0.6 * expected + 0.4 * np.asarray(carry.state.theta)
    np.testing.assert_allclose(carry.state.theta_average, expected, rtol=1e-5, atol=1e-6)
    table = fc.policy_table(carry.state, TINY, TINY.default_params)
    feats = features.build(learner.config.features, TINY)  # the resolved spec
    np.testing.assert_allclose(table, jax.nn.softmax(fc.logits_table(jnp.asarray(expected), feats), -1), atol=1e-6)
    last = fc.policy_table(carry.state.replace(theta_average=carry.state.theta), TINY, TINY.default_params)
    np.testing.assert_allclose(last, jax.nn.softmax(fc.logits_table(carry.state.theta, feats), -1), atol=1e-6)
    assert not np.allclose(table, last)


@pytest.mark.parametrize("seed", [0, 1])
def test_advantage_weights_match_the_pairwise_form(seed):
    """The sort-based per-sample weights (O(H K log K)) equal the pairwise definition written
    here: w_hk = (mean of delta over the stage's samples in cell (s_k, a_k) - mean over the
    samples in state s_k) n_h(s_k) / n_h(s_k, a_k), where the state's mean is subtracted only
    from a state with at least BASELINE_SAMPLES samples (a lone sample keeps its delta)."""
    rng = np.random.default_rng(seed)
    h, k, s, a = 5, 64, 40, 3  # S large enough that some states have one sample
    states = rng.integers(0, s, (h, k)).astype(np.int8)
    actions = rng.integers(0, a, (h, k)).astype(np.int8)
    delta = rng.normal(size=(h, k)).astype(np.float32)
    same_s = states[:, :, None] == states[:, None, :]
    same_sa = same_s & (actions[:, :, None] == actions[:, None, :])
    n_s, n_sa = same_s.sum(-1), same_sa.sum(-1)
    mean_s = (same_s * delta[:, None, :]).sum(-1) / n_s
    mean_s = np.where(n_s >= fh_kernels.BASELINE_SAMPLES, mean_s, 0.0)
    assert np.any(n_s < fh_kernels.BASELINE_SAMPLES)  # both branches are exercised
    mean_sa = (same_sa * delta[:, None, :]).sum(-1) / n_sa
    w, count = fh_kernels.advantage_weights(jnp.asarray(states), jnp.asarray(actions), jnp.asarray(delta), a)
    np.testing.assert_allclose(count, n_s)
    np.testing.assert_allclose(w, (mean_sa - mean_s) * n_s / n_sa, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_one_episode_per_update_learns():
    """K = 1 (the paper's setting): with one episode every visited (stage, state) has one
    sampled action, so a visit-averaged advantage that subtracts the state's own mean would be
    0 and the actor would never move; the state's empirical baseline needs two samples
    (``fhc_jax.algos.core.returns.state_baseline``), below that the critic-baselined delta itself
    moves the sampled action. The default improved variant then learns from one episode per
    update (the uniform policy earns 29% of the optimum here)."""
    env = GridWorld(size=3, horizon=4)
    params = env.default_params
    cmdp = env.to_cmdp(params)
    cfg = fc.Config(num_iterations=1500, episodes_per_iteration=1, eval_every=0, eval_episodes=256)
    out = jax.jit(fc.make_train(env, params, cfg))(jax.random.key(0))
    ev = fhc.evaluate(cmdp, fc.policy_table(out.state, env, params))
    uniform = fhc.evaluate(cmdp, jnp.full((4, 9, 9), 1.0 / 9))
    best = fhc.solve(cmdp)
    assert float(uniform.reward) < 0.35 * float(best.reward)
    assert float(ev.reward) >= 0.85 * float(best.reward), (float(ev.reward), float(best.reward))
