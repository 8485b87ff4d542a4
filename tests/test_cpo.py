"""CPO: conjugate gradient, the trust-region step (against a generic QCQP solver), the Fisher
product (against forward-over-reverse autodiff), the module-level update against a per-sample
computation of the same estimator, learning on a bandit-like CMDP judged by exact evaluation,
vmap / determinism, the rollout policy, validation."""

from __future__ import annotations

import functools

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_cmdp
from scipy.optimize import minimize

import fhc_jax as fhc
from fhc_jax.algos import cpo, trust_region
from fhc_jax.algos.core import multipliers, returns, tabular_rollout
from fhc_jax.algos.core.networks import MLP
from fhc_jax.envs.gridworld import GridWorld
from fhc_jax.envs.tabular import TabularEnv
from fhc_jax.rollout import uses_uniforms

# ----------------------------------------------------------------------------- pure pieces


def test_conjugate_gradient_solves_small_spd_system():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(6, 6))
    f = q @ q.T + 0.5 * np.eye(6)
    b = rng.normal(size=6)
    fj = jnp.asarray(f, jnp.float32)
    x = jax.jit(lambda rhs: trust_region.conjugate_gradient(lambda v: fj @ v, rhs, 12))(jnp.asarray(b, jnp.float32))
    np.testing.assert_allclose(x, np.linalg.solve(f, b), rtol=2e-3, atol=2e-3)
    # fewer iterations than the dimension: a worse (but finite) approximation
    x2 = trust_region.conjugate_gradient(lambda v: fj @ v, jnp.asarray(b, jnp.float32), 2)
    assert np.linalg.norm(f @ np.asarray(x2) - b) > np.linalg.norm(f @ np.asarray(x) - b)
    # vmap over right-hand sides (as the learner solves F x = g, F y = b together)
    rhs = np.stack([b, -2 * b])
    xs = jax.vmap(lambda r: trust_region.conjugate_gradient(lambda v: fj @ v, r, 12))(jnp.asarray(rhs, jnp.float32))
    np.testing.assert_allclose(xs[1], -2 * np.asarray(xs[0]), rtol=1e-4, atol=1e-4)
    # zero right-hand side: zero solution, no NaN
    np.testing.assert_array_equal(trust_region.conjugate_gradient(lambda v: fj @ v, jnp.zeros(6), 5), np.zeros(6))


def _quadratic_problem(seed: int, c: float, align: float = 0.0):
    rng = np.random.default_rng(seed)
    n = 5
    q = rng.normal(size=(n, n))
    f = q @ q.T + 0.5 * np.eye(n)
    g = rng.normal(size=n)
    b = align * g + rng.normal(size=n)
    return f, g, b, c


def _solve_direction(f, g, b, c, delta):
    x, y = np.linalg.solve(f, g), np.linalg.solve(f, b)
    with jax.enable_x64(True):
        d, lam, nu, case = trust_region.cpo_direction(
            *(jnp.asarray(v) for v in (g, b, x, y)), jnp.asarray(c), jnp.asarray(delta)
        )
        return np.asarray(d), float(lam), float(nu), int(case)


def _qcqp_best(f, g, b, c, delta, objective):
    """max objective^T d s.t. d^T F d / 2 <= delta (and c_k + b_k^T d <= 0 unless c is None; b (P,)
    or (M, P), c () or (M,)), SLSQP."""
    cons = [{"type": "ineq", "fun": lambda z: delta - 0.5 * z @ f @ z}]
    if c is not None:
        bs, cs = np.atleast_2d(b), np.atleast_1d(c)
        cons += [{"type": "ineq", "fun": (lambda z, k=k: -(cs[k] + bs[k] @ z))} for k in range(len(cs))]
    best = -np.inf
    for start in np.random.default_rng(1).normal(scale=0.01, size=(4, len(g))):
        res = minimize(
            lambda z: -objective @ z, start, constraints=cons, method="SLSQP", options={"ftol": 1e-12, "maxiter": 500}
        )
        if res.success:
            best = max(best, -res.fun)
    return best


@pytest.mark.parametrize(
    "seed,c,align,expected_case",
    [
        (0, -5.0, 0.0, 3),  # whole trust region feasible: TRPO step
        (1, -0.05, 1.0, 2),  # feasible, the constraint cuts the trust region
        (2, -0.02, -1.0, 2),
        (3, 0.05, 1.0, 1),  # infeasible now, but the trust region meets the constraint
        (4, 0.1, 0.5, 1),
    ],
)
def test_cpo_step_solves_the_trust_region_subproblem(seed, c, align, expected_case):
    """The closed-form step satisfies the trust region and the linearised constraint and attains
    the optimum of max g^T d s.t. c + b^T d <= 0, d^T F d / 2 <= delta (checked with SLSQP)."""
    delta = 0.05
    f, g, b, c = _quadratic_problem(seed, c, align)
    d, lam, nu, case = _solve_direction(f, g, b, c, delta)
    assert case == expected_case
    assert 0.5 * d @ f @ d <= delta * (1 + 1e-6)
    assert c + b @ d <= 1e-7
    assert nu >= 0 and lam > 0
    np.testing.assert_allclose(g @ d, _qcqp_best(f, g, b, c, delta, g), rtol=1e-4, atol=1e-6)
    # KKT: d = F^-1 (g - nu b) / lambda with complementary slackness
    np.testing.assert_allclose(lam * f @ d, g - nu * b, rtol=1e-6, atol=1e-8)
    if nu > 1e-9:
        assert abs(c + b @ d) < 1e-6
    if case == 3:
        assert nu == 0.0
        np.testing.assert_allclose(0.5 * d @ f @ d, delta, rtol=1e-6)


def test_cpo_step_infeasible_recovery():
    """c > 0 and no point of the trust region satisfies the linearised constraint: the step is
    -sqrt(2 delta / s) F^-1 b, on the trust-region boundary, and decreases b^T d as much as the
    trust region allows."""
    delta = 0.05
    f, g, b, c = _quadratic_problem(5, 10.0)
    d, lam, nu, case = _solve_direction(f, g, b, c, delta)
    assert case == 0 and lam == 0.0
    y = np.linalg.solve(f, b)
    s = b @ y
    np.testing.assert_allclose(nu, np.sqrt(2 * delta / s), rtol=1e-9)
    np.testing.assert_allclose(d, -np.sqrt(2 * delta / s) * y, rtol=1e-9)
    np.testing.assert_allclose(0.5 * d @ f @ d, delta, rtol=1e-9)
    np.testing.assert_allclose(-(b @ d), _qcqp_best(f, g, b, None, delta, -b), rtol=1e-4)
    assert c + b @ d > 0  # still infeasible, as the case analysis says


def test_cpo_dual_edge_cases():
    # zero cost gradient while feasible: case 4 (TRPO), nu = 0
    lam, nu, case = trust_region.cpo_dual(
        jnp.float32(2.0), jnp.float32(0.0), jnp.float32(0.0), jnp.float32(-1.0), 0.01, True
    )
    assert int(case) == 4 and float(nu) == 0.0
    np.testing.assert_allclose(float(lam), np.sqrt(2.0 / 0.02), rtol=1e-6)
    # all outputs finite at c = 0 (the boundary between cases)
    out = trust_region.cpo_dual(jnp.float32(2.0), jnp.float32(0.5), jnp.float32(1.0), jnp.float32(0.0), 0.01)
    assert all(np.isfinite(float(v)) for v in out) and int(out[2]) == 1


@pytest.mark.slow
def test_fisher_vector_product_is_the_hessian_of_the_mean_kl():
    """Gauss-Newton product via linearize/vjp == forward-over-reverse Hessian-vector product of
    KLbar(theta') = sum_u w_u KL(pi_theta(.|u) || pi_theta'(.|u)) at theta' = theta."""
    module = MLP(outputs=4, width=8, depth=2, activation="tanh")
    x = jax.random.normal(jax.random.key(0), (7, 3))
    params = module.init(jax.random.key(1), x[0])
    theta, unravel = jax.flatten_util.ravel_pytree(params)
    logits_fn = lambda th: module.apply(unravel(th), x)
    w = jax.random.uniform(jax.random.key(2), (7,))
    w = w / w.sum()
    logp0 = jax.nn.log_softmax(logits_fn(theta))

    def mean_kl(th):
        return jnp.sum(w * jnp.sum(jnp.exp(logp0) * (logp0 - jax.nn.log_softmax(logits_fn(th))), -1))

    v = jax.random.normal(jax.random.key(3), theta.shape)
    hvp = jax.jit(lambda t, u: jax.jvp(jax.grad(mean_kl), (t,), (u,))[1])(theta, v)
    fvp = jax.jit(lambda t, u, damp: trust_region.fisher_vector_product(logits_fn, t, w, damp)(u))
    np.testing.assert_allclose(fvp(theta, v, 0.0), hvp, rtol=2e-3, atol=1e-6)
    np.testing.assert_allclose(fvp(theta, v, 0.3), hvp + 0.3 * v, rtol=2e-3, atol=1e-6)


# ----------------------------------------------------------------------------- the update


def _per_sample_objectives(setup, state, batch, config):
    """The surrogates (L_R, L_C) and KLbar of the module docstring as functions of the flat
    actor parameters, computed per sample (H K network inputs) from the batch, independently
    of the update's per-(input, action) statistics; and c = Shat - alpha."""
    horizon, k = batch.actions.shape
    hs = jnp.arange(horizon)[:, None]
    x = setup.inputs[setup.cell[hs, batch.states[:-1]]]  # (H, K, D)
    critic_inputs, critic_cell = setup.critic_points
    xc = critic_inputs[critic_cell[hs, batch.states[:-1]]]  # (H, K, Dc)
    channels = setup.value_scale.shape[0]
    values = setup.critic.apply(state.critics, jnp.broadcast_to(xc, (channels,) + xc.shape))[..., 0]
    values = jnp.moveaxis(values, 0, -1) * setup.value_scale  # (H, K, C)
    signals = jnp.concatenate([batch.rewards[..., None], batch.costs], -1)
    terminal = jnp.concatenate([batch.terminal_rewards[:, None], batch.terminal_costs], -1)
    adv, _ = returns.finite_horizon_gae(
        signals, jnp.concatenate([values, terminal[None]]), config.gamma, config.gae_lambda
    )
    theta0, unravel = jax.flatten_util.ravel_pytree(state.actor)
    logp_all = lambda th: jax.nn.log_softmax(setup.actor.apply(unravel(th), x), -1)  # (H, K, A)
    logp0 = logp_all(theta0)
    taken = lambda lp: jnp.take_along_axis(lp, batch.actions[..., None], -1)[..., 0]

    def surrogates(th):
        ratio = jnp.exp(taken(logp_all(th)) - taken(logp0))
        return jnp.einsum("hk,hkc->c", ratio, adv) / k

    def mean_kl(th):
        return jnp.mean(jnp.sum(jnp.exp(logp0) * (logp0 - logp_all(th)), -1))

    # c = Shat - alpha + m, the safety margin of the learner's candidate estimates
    n = config.eval_episodes * multipliers.estimate_chunks(
        jnp.std(batch.episode_costs, 0),
        jnp.max(jnp.abs(batch.episode_costs), 0),
        setup.threshold,
        config.eval_chunks_max,
        config.eval_episodes,
    )
    margin = multipliers.spread_excess(
        jnp.std(batch.episode_costs[:, 0]), jnp.max(jnp.abs(batch.episode_costs[:, 0])), n, multipliers.SAFETY_MARGIN
    )
    c = jnp.mean(batch.episode_costs[:, 0]) - setup.threshold[0] + margin
    return theta0, unravel, surrogates, mean_kl, c


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_update_matches_a_per_sample_computation(seed):
    """cpo.update on a tiny CMDP (exact Fisher, enough conjugate-gradient steps to converge):
    the step is the closed-form CPO direction of the per-sample surrogates' gradients and of the
    dense Hessian of the per-sample mean KL, scaled by the reported line-search fraction; the
    accepted policy satisfies the line search's conditions (KL <= max_kl, the surrogates), and
    the metrics agree with the per-sample quantities."""
    env, params = BANDIT, BANDIT.default_params
    config = cpo.Config(
        episodes_per_iteration=128,
        observation="one_hot",
        width=4,
        depth=1,
        critic_minibatches=1,
        fisher_samples=0,
        cg_iterations=60,
        damping=0.1,
        max_kl=0.02,
    )
    setup = cpo.setup(env, params, config)
    state = cpo.init(jax.random.key(seed), setup, config)
    # a non-uniform policy and informative critics: take a few updates first
    step = jax.jit(lambda st, b, k: cpo.update(st, b, k, setup, config))
    roll = jax.jit(lambda k, st: cpo.rollout(k, st, setup, config))  # compiled once for the 4 batches
    for i in range(3):
        batch = roll(jax.random.key(100 + i), state)
        state, _ = step(state, batch, jax.random.split(jax.random.key(200 + i)))
    batch = roll(jax.random.key(seed + 7), state)
    new, metrics = step(state, batch, jax.random.split(jax.random.key(3)))

    theta0, unravel, surrogates, mean_kl, c = _per_sample_objectives(setup, state, batch, config)
    theta1 = jax.flatten_util.ravel_pytree(new.actor)[0]
    frac = float(metrics["step_fraction"])
    assert frac > 0 and int(new.step) == int(state.step) + 1
    # the batched statistics give the same surrogates as the per-sample estimator
    stats, _ = cpo.cell_statistics(batch, state.critics, setup, config)
    logp_u = jax.nn.log_softmax(setup.actor.apply(new.actor, setup.inputs), -1)
    logp_u0 = batch.behaviour
    ratio_u = jnp.exp(jnp.where(stats.seen, logp_u - logp_u0, 0.0))
    np.testing.assert_allclose(
        jnp.einsum("ua,uac->c", ratio_u, stats.adv_sums), surrogates(theta1), rtol=1e-4, atol=1e-6
    )
    # line search conditions and metrics
    kl = float(mean_kl(theta1))
    assert kl <= config.max_kl * (1 + 1e-4)
    np.testing.assert_allclose(float(metrics["kl"]), kl, rtol=1e-3, atol=1e-7)
    sur0, sur1 = np.asarray(surrogates(theta0)), np.asarray(surrogates(theta1))
    assert sur1[1] - sur0[1] <= max(-float(c), 0.0) + 1e-5
    if int(metrics["optimisation_case"]) >= 2:
        assert sur1[0] >= sur0[0] - 1e-6
    # the direction: closed form with the exact (dense) Fisher matrix, in float64
    jac = np.asarray(jax.jacobian(surrogates)(theta0), np.float64)  # (C, P)
    fisher = np.asarray(jax.hessian(mean_kl)(theta0), np.float64) + config.damping * np.eye(theta0.size)
    g, b = jac
    x, y = np.linalg.solve(fisher, g), np.linalg.solve(fisher, b)
    with jax.enable_x64(True):
        d, _, nu, case = trust_region.cpo_direction(
            *(jnp.asarray(v) for v in (g, b, x, y)),
            jnp.asarray(float(c), jnp.float64),
            jnp.asarray(config.max_kl, jnp.float64),
        )
    assert int(case) == int(metrics["optimisation_case"])
    np.testing.assert_allclose(float(metrics["multipliers"][0]), float(nu), rtol=2e-3, atol=1e-5)
    step_taken = (np.asarray(theta1, np.float64) - np.asarray(theta0, np.float64)) / frac
    np.testing.assert_allclose(step_taken, np.asarray(d), rtol=2e-2, atol=2e-2 * np.abs(np.asarray(d)).max())
    # the critics were updated and stay finite; all metrics are finite
    old_c, new_c = (jax.flatten_util.ravel_pytree(s.critics)[0] for s in (state, new))
    assert np.all(np.isfinite(np.asarray(new_c))) and not np.array_equal(np.asarray(old_c), np.asarray(new_c))
    assert all(np.all(np.isfinite(np.asarray(v))) for v in jax.tree.leaves(metrics))


# ----------------------------------------------------------------------------- learning


def bandit_cmdp() -> fhc.TabularCMDP:
    """H = 2, two states visited uniformly whatever the action (a contextual bandit), two
    actions: a "hot" one (reward 1, cost 1; action 0 in state 0, action 1 in state 1) and a
    "safe" one (reward 0.2, cost 0). alpha = 1.5 over the 2 stages binds: the uniform policy
    earns 1.2 at cost 1.0, the unconstrained optimum 2.0 at cost 2.0, the constrained optimum
    1.6 at cost 1.5."""
    rewards = np.array([[1.0, 0.2], [0.2, 1.0]])
    costs = np.array([[1.0, 0.0], [0.0, 1.0]])
    return fhc.TabularCMDP(
        transitions=np.full((2, 2, 2), 0.5),
        rewards=np.broadcast_to(rewards, (2, 2, 2)),
        costs=np.broadcast_to(costs, (1, 2, 2, 2)),
        terminal_rewards=np.zeros(2),
        terminal_costs=np.zeros((1, 2)),
        thresholds=np.array([1.5]),
        initial_distribution=np.array([0.5, 0.5]),
    )


BANDIT = TabularEnv(bandit_cmdp())
BANDIT_CONFIG = cpo.Config(
    num_iterations=40,
    episodes_per_iteration=256,
    observation="one_hot",
    width=16,
    depth=1,
    critic_epochs=2,
    critic_minibatches=1,
    eval_every=20,
    max_kl=0.05,
)


@functools.cache
def _bandit_train():
    return jax.jit(jax.vmap(cpo.make_train(BANDIT, BANDIT.default_params, BANDIT_CONFIG)))


@functools.cache
def _bandit_result():
    return _bandit_train()(jax.random.split(jax.random.key(0), 2))


@pytest.mark.slow
def test_learning_on_bandit_cmdp_moves_to_the_threshold():
    """Judged exactly: cost rises from 1.0 to the threshold 1.5 (within 0.1) and the reward gains
    at least 0.25 of the 0.4 available over the initial (uniform) policy."""
    cmdp = BANDIT.default_params
    best = fhc.solve(cmdp)
    np.testing.assert_allclose(best.reward, 1.6, atol=1e-6)
    out = _bandit_result()
    for seed in range(2):
        state = jax.tree.map(lambda x: x[seed], out.final_state)
        ev = fhc.evaluate(cmdp, cpo.policy_table(state, BANDIT, cmdp))
        initial_reward = float(out.metrics.evaluation.reward[seed, 0])
        initial_cost = float(out.metrics.evaluation.costs[seed, 0, 0])
        assert abs(initial_cost - 1.0) < 0.05 and abs(initial_reward - 1.2) < 0.05
        assert float(ev.costs[0]) <= 1.5 + 0.1, (seed, float(ev.costs[0]))
        assert float(ev.costs[0]) >= 1.3, (seed, float(ev.costs[0]))  # moved toward the threshold
        assert float(ev.reward) >= initial_reward + 0.25, (seed, float(ev.reward), initial_reward)
        np.testing.assert_allclose(out.metrics.evaluation.reward[seed, -1], ev.reward, rtol=1e-4)
        np.testing.assert_allclose(out.metrics.evaluation.costs[seed, -1], ev.costs, rtol=1e-4, atol=1e-5)
    m = out.metrics
    assert m.reward.shape == (2, 40) and m.costs.shape == (2, 40, 1) and m.multipliers.shape == (2, 40, 1)
    assert m.kl.shape == m.step_fraction.shape == m.optimisation_case.shape == m.entropy.shape == (2, 40)
    np.testing.assert_array_equal(m.evaluation.iteration[0], [0, 20, 40])
    assert np.all(np.asarray(m.multipliers) >= 0)
    assert np.all(np.asarray(m.kl) <= BANDIT_CONFIG.max_kl + 1e-6)
    assert np.all((np.asarray(m.optimisation_case) >= 0) & (np.asarray(m.optimisation_case) <= 4))
    assert np.mean(np.asarray(m.step_fraction) > 0) > 0.5  # most line searches accept a step
    # the constraint became active: cases 1/2 with a positive multiplier occurred
    assert np.any(np.asarray(m.multipliers) > 0)


@pytest.mark.slow
@pytest.mark.as_users_compile  # the line search turns last-bit rounding into other steps
def test_vmap_over_seeds_equals_separate_runs_and_is_deterministic():
    keys = jax.random.split(jax.random.key(0), 2)
    batched = _bandit_result()
    single = jax.jit(cpo.make_train(BANDIT, BANDIT.default_params, BANDIT_CONFIG))
    for i in range(2):
        one = single(keys[i])
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b[i], rtol=1e-4, atol=1e-4), one, batched)
    again = _bandit_train()(keys)
    jax.tree.map(np.testing.assert_array_equal, again, batched)


@pytest.mark.slow
def test_policy_for_rollout_matches_table():
    """``policy`` samples the table's distribution through fhc.rollout's fast path, both when the
    env's encoder is the network's input ("xyt") and when the state index is decoded ("xy"
    input, "one_hot" env observations)."""
    env = GridWorld(size=3, horizon=4, alpha=3.0, observation="xyt")
    params = env.default_params
    config = cpo.Config(observation="xyt", width=8, depth=1)
    state = cpo.init(jax.random.key(0), cpo.setup(env, params, config), config)
    state = state.replace(actor=jax.tree.map(lambda x: 300.0 * x, state.actor))  # far from uniform
    table = np.asarray(cpo.policy_table(state, env, params))
    assert table.shape == (4, 9, 9)
    np.testing.assert_allclose(table.sum(-1), 1.0, rtol=1e-5)
    assert not np.allclose(table[0], table[3])  # "xyt": the stationary network still sees h
    act = cpo.policy(state, env, params)
    assert uses_uniforms(env, act)
    traj = fhc.rollout(jax.random.key(5), env, params, act, 3000)
    s0, a0 = np.asarray(traj.states[:, 0]), np.asarray(traj.actions[:, 0])
    for s in range(2):
        freq = np.bincount(a0[s0 == s], minlength=9) / np.sum(s0 == s)
        np.testing.assert_allclose(freq, table[0, s], atol=0.08)
    exact = fhc.evaluate(env.to_cmdp(params), jnp.asarray(table))
    returns = np.asarray(traj.episode_rewards)
    assert abs(returns.mean() - float(exact.reward)) <= 4 * returns.std() / np.sqrt(returns.size) + 1e-6
    # "xy" input: stage-free policy; an env with another encoder goes through the table
    env_oh = GridWorld(size=3, horizon=4, alpha=3.0, observation="one_hot")
    config_xy = cpo.Config(observation="xy", width=8, depth=1)
    st_xy = cpo.init(jax.random.key(1), cpo.setup(env_oh, params, config_xy), config_xy)
    tab_xy = np.asarray(cpo.policy_table(st_xy, env_oh, params))
    np.testing.assert_allclose(tab_xy[0], tab_xy[3], rtol=1e-6)
    act_xy = cpo.policy(st_xy, env_oh, params)
    u = jnp.linspace(0.0, 0.999, 50)
    got = jax.vmap(lambda x: act_xy.action_from_state(x, jnp.int32(4), 2))(u)  # state 4, stage 2
    want = tabular_rollout.inverse_cdf(jnp.broadcast_to(jnp.cumsum(tab_xy[2, 4]), (50, 9)), u, 8)
    np.testing.assert_array_equal(got, want)
    # batched states give batched tables
    both = jax.tree.map(lambda a, b: jnp.stack([a, b]), state, state)
    assert cpo.policy_table(both, env, params).shape == (2, 4, 9, 9)


def test_distinct_inputs():
    env = GridWorld(size=3, horizon=4)
    params = env.default_params
    inputs, cell = cpo.distinct_inputs(env, params, "xy")
    assert inputs.shape == (9, 2) and cell.shape == (4, 9)
    np.testing.assert_array_equal(cell[0], cell[3])
    inputs_t, cell_t = cpo.distinct_inputs(env, params, "xyt")
    assert inputs_t.shape == (36, 3) and len(np.unique(cell_t)) == 36
    table = np.asarray(tabular_rollout.observation_table(env, params, "xyt"))[:4]
    np.testing.assert_array_equal(inputs_t[cell_t], table)
    # the critics' inputs under critic_time: the coordinates with h / H appended
    inputs_c, cell_c = cpo.distinct_inputs(env, params, "xy", stage=True)
    assert inputs_c.shape == (36, 3) and len(np.unique(cell_c)) == 36
    np.testing.assert_array_equal(inputs_c[cell_c][..., :2], inputs[cell])
    np.testing.assert_array_equal(inputs_c[cell_c][..., 2], np.broadcast_to(np.arange(4)[:, None] / 4, (4, 9)))


@pytest.mark.parametrize("critic_time", [True, False])
def test_critics_see_the_stage_under_a_stage_free_actor(critic_time):
    """``critic_time``: with a stage-free actor input the critics get h / H appended (their
    distinct inputs are the H S (stage, state) pairs); the actor's input is unchanged; an input
    that already holds the stage ("xyt") is left as it is."""
    env = GridWorld(size=3, horizon=4)
    params = env.default_params
    setup = cpo.setup(env, params, cpo.Config(observation="xy", critic_time=critic_time))
    assert setup.critic_stage is critic_time and setup.inputs.shape == (9, 2)
    critic_inputs, critic_cell = setup.critic_points
    assert critic_inputs.shape == ((36, 3) if critic_time else (9, 2)) and critic_cell.shape == (4, 9)
    setup_t = cpo.setup(env, params, cpo.Config(observation="xyt", critic_time=critic_time))
    assert not setup_t.critic_stage and setup_t.critic_points[0].shape == (36, 3)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"num_iterations": 0}, r"Config.num_iterations must be an integer >= 1"),
        ({"episodes_per_iteration": 2.5}, r"Config.episodes_per_iteration must be an integer >= 1"),
        ({"cg_iterations": 0}, r"Config.cg_iterations must be an integer >= 1"),
        ({"line_search_steps": 0}, r"Config.line_search_steps must be an integer >= 1"),
        ({"critic_minibatches": 0}, r"Config.critic_minibatches must be an integer >= 1"),
        ({"fisher_samples": -1}, r"Config.fisher_samples must be an integer >= 0"),
        ({"observation": "index"}, r"Config.observation must be one of 'xy', 'xyt', 'one_hot', 'env', 'env_t'"),
        ({"path": "exact"}, r"Config.path must be one of 'auto', 'tabular', 'sampled'"),
        ({"eval_episodes": 0}, r"Config.eval_episodes must be an integer >= 1"),
        ({"eval_chunks_max": 0}, r"Config.eval_chunks_max must be an integer >= 1"),
        ({"width": 0}, r"Config.width must be an integer >= 1"),
        ({"activation": "sigmoid"}, r"Config.activation must be one of"),
        ({"max_kl": 0.0}, r"Config.max_kl must be > 0"),
        ({"damping": -0.1}, r"Config.damping must be >= 0"),
        ({"backtrack_ratio": 1.0}, r"Config.backtrack_ratio must lie in \(0, 1\)"),
        ({"gamma": 1.5}, r"Config.gamma must lie in \[0, 1\]"),
        ({"gae_lambda": -0.1}, r"Config.gae_lambda must lie in \[0, 1\]"),
        ({"critic_lr": 0.0}, r"Config.critic_lr must be > 0"),
    ],
)
def test_config_validation(changes, match):
    with pytest.raises(ValueError, match=match):
        cpo.Config(**changes)


def test_several_constraints_train_and_too_many_are_rejected():
    """Two constraints: the multi-constraint subproblem trains (finite metrics, nu* per
    constraint); more than MAX_CONSTRAINTS are refused before compiling, naming the range."""
    env = GridWorld(size=3, horizon=4, num_constraints=2, alpha=[3.0, 3.0])
    cfg = cpo.Config(num_iterations=3, episodes_per_iteration=16, eval_every=0, observation="xyt")
    out = jax.jit(cpo.make_train(env, env.default_params, cfg))(jax.random.key(0))
    assert out.metrics.multipliers.shape == (3, 2) and np.all(np.isfinite(out.metrics.multipliers))
    assert np.all(np.isfinite(out.metrics.reward)) and np.all(out.metrics.multipliers >= 0)
    many = fhc.TabularEnv(random_cmdp(0, num_states=3, num_actions=2, horizon=2, num_constraints=7))
    with pytest.raises(ValueError, match=r"M must be in \[1, 6\].*num_constraints = 7"):
        cpo.make_train(many, many.default_params, cpo.Config())


def _multi_problem(seed: int, m: int, offsets):
    rng = np.random.default_rng(seed)
    n = 6
    q = rng.normal(size=(n, n))
    f = q @ q.T + 0.5 * np.eye(n)
    g = rng.normal(size=n)
    b = rng.normal(size=(m, n)) + 0.5 * g
    return f, g, b, np.asarray(offsets, np.float64)


@pytest.mark.parametrize(
    "seed,offsets",
    [
        (0, [-5.0, -5.0]),  # the whole trust region feasible: the TRPO step
        (1, [-0.05, -0.08]),  # feasible, one or both constraints cut the trust region
        (2, [0.05, -0.1]),  # one violated, the trust region meets both
        (3, [-0.02, -0.03, -0.04]),
        (4, [0.04, 0.02, -0.2]),
    ],
)
def test_multi_constraint_step_solves_the_subproblem(seed, offsets):
    """M constraints: the active-set dual's step satisfies the trust region and every
    linearised constraint and attains the optimum of max g^T d s.t. c_k + b_k^T d <= 0,
    d^T F d / 2 <= delta (SLSQP from several starts); KKT holds with nu >= 0."""
    delta = 0.05
    f, g, b, c = _multi_problem(seed, len(offsets), offsets)
    x, y = np.linalg.solve(f, g), np.linalg.solve(f, b.T).T
    with jax.enable_x64(True):
        d, lam, nu, case = (
            np.asarray(v)
            for v in trust_region.cpo_direction_multi(*(jnp.asarray(v) for v in (g, b, x, y, c)), jnp.asarray(delta))
        )
    assert int(case) in (1, 2, 3) and float(lam) > 0 and np.all(nu >= 0)
    assert 0.5 * d @ f @ d <= delta * (1 + 1e-6)
    assert np.all(c + b @ d <= 1e-7)
    best = _qcqp_best(f, g, b, c, delta, g)
    np.testing.assert_allclose(g @ d, best, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(float(lam) * f @ d, g - b.T @ nu, rtol=1e-6, atol=1e-8)
    active = nu > 1e-9
    np.testing.assert_allclose((c + b @ d)[active], 0.0, atol=1e-6)  # complementary slackness


def test_multi_constraint_step_agrees_with_the_closed_form_and_recovers():
    """One constraint through the active-set dual gives the closed form's step in every case;
    with M = 2 and no point of the trust region meeting a violated constraint, the step
    descends the violated constraint within the trust region (CPO's recovery)."""
    delta = 0.05
    for seed, c0, align in ((0, -5.0, 0.0), (1, -0.05, 1.0), (3, 0.05, 1.0), (5, 10.0, 0.0)):
        f, g, b, c = _quadratic_problem(seed, c0, align)
        x, y = np.linalg.solve(f, g), np.linalg.solve(f, b)
        with jax.enable_x64(True):
            one = trust_region.cpo_direction(*(jnp.asarray(v) for v in (g, b, x, y, c)), jnp.asarray(delta))
            multi = trust_region.cpo_direction_multi(
                *(jnp.asarray(v) for v in (g, b[None], x, y[None], np.array([c]))), jnp.asarray(delta)
            )
        assert int(multi[3]) == int(one[3]), (seed, int(multi[3]), int(one[3]))
        np.testing.assert_allclose(np.asarray(multi[0]), np.asarray(one[0]), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(np.asarray(multi[2])[0], float(one[2]), rtol=1e-6, atol=1e-9)
    f, g, b, c = _multi_problem(6, 2, [10.0, -1.0])
    x, y = np.linalg.solve(f, g), np.linalg.solve(f, b.T).T
    with jax.enable_x64(True):
        d, lam, nu, case = (
            np.asarray(v)
            for v in trust_region.cpo_direction_multi(*(jnp.asarray(v) for v in (g, b, x, y, c)), jnp.asarray(delta))
        )
    assert int(case) == 0 and float(lam) == 0.0 and nu[1] == 0.0
    np.testing.assert_allclose(d, -np.sqrt(2 * delta / (b[0] @ y[0])) * y[0], rtol=1e-9)
    np.testing.assert_allclose(0.5 * d @ f @ d, delta, rtol=1e-9)


def test_unsupported_observation_and_other_errors():
    with pytest.raises(ValueError, match=r"observation = 'xy' is not supported by TabularEnv"):
        cpo.make_train(BANDIT, BANDIT.default_params, cpo.Config(observation="xy"))
    with pytest.raises(ValueError, match=r"critic_minibatches must be at most the number of distinct observations \(2"):
        cpo.make_train(BANDIT, BANDIT.default_params, cpo.Config(observation="one_hot", critic_minibatches=4))
    with pytest.raises(ValueError, match="config must be a cpo.Config"):
        cpo.make_train(BANDIT, BANDIT.default_params, object())
    train = cpo.make_train(BANDIT, BANDIT.default_params, BANDIT_CONFIG)
    with pytest.raises(ValueError, match="static fields"):
        train(jax.random.key(0), BANDIT_CONFIG.replace(width=8))
