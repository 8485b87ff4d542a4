"""e-COP: the loss of the paper's eq. (8) and its damping term against plain loops over stages
and samples, the Jacobi gradient (stage t gets grad L~_t), the damping-factor rule, the
multiplier update (7), and a learning regression on a small grid judged exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.algos import ecop, ecop_losses, resolve_env_defaults
from fhc_jax.algos.core import multipliers
from fhc_jax.envs.wrappers import signal_scales


def _reference_losses(logp, logp_old, adv_r, adv_c, eps, excess, lam, beta):
    """L~_t of eq. (8) with loops over stages h >= t, samples k and constraints i."""
    h_total, k_total, m_total = adv_c.shape
    s_r, s_c = np.zeros(h_total), np.zeros((h_total, m_total))
    for h in range(h_total):
        for k in range(k_total):
            rho = np.exp(logp[h, k] - logp_old[h, k])
            clipped = min(max(rho, 1 - eps), 1 + eps)
            s_r[h] += min(rho * adv_r[h, k], clipped * adv_r[h, k]) / k_total
            for i in range(m_total):
                s_c[h, i] += max(rho * adv_c[h, k, i], clipped * adv_c[h, k, i]) / k_total
    losses = np.zeros(h_total)
    for t in range(h_total):
        loss = -sum(s_r[h] for h in range(t, h_total))
        for i in range(m_total):
            psi = sum(s_c[h, i] for h in range(t, h_total)) + excess[i]
            relu = lam[t, i] * max(0.0, psi)
            damping = beta / 2 * (max(0.0, psi + lam[t, i] / beta) ** 2 - lam[t, i] ** 2 / beta**2)
            loss += relu + damping
        losses[t] = loss
    return s_r, s_c, losses


def _random_inputs(seed, h=5, k=7, m=2):
    rng = np.random.default_rng(seed)
    logp_old = np.log(rng.uniform(0.05, 1.0, (h, k)))
    logp = logp_old + rng.normal(0.0, 0.4, (h, k))  # ratios on both sides of the clip range
    return {
        "logp": logp,
        "logp_old": logp_old,
        "adv_r": rng.normal(size=(h, k)),
        "adv_c": rng.normal(size=(h, k, m)),
        "eps": 0.2,
        "excess": rng.normal(0.0, 1.0, m),
        "lam": rng.uniform(0.0, 2.0, (h, m)),
        "beta": 0.7,
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_surrogates_and_loss_match_loop_reference(seed, x64):
    x = _random_inputs(seed)
    s_r, s_c, losses = _reference_losses(**x)
    got_r, got_c = ecop_losses.stage_surrogates(x["logp"], x["logp_old"], x["adv_r"], x["adv_c"], x["eps"])
    np.testing.assert_allclose(got_r, s_r, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_c, s_c, rtol=1e-12, atol=1e-12)
    got = ecop_losses.stage_losses(got_r, got_c, x["excess"], x["lam"], x["beta"])
    np.testing.assert_allclose(got, losses, rtol=1e-12, atol=1e-12)


def test_damping_term_by_hand():
    lam, beta = 0.6, 2.0
    # active side: Psi + lam/beta > 0 -> lam max(0, Psi) + beta/2 ((Psi + lam/beta)^2 - (lam/beta)^2)
    for psi in (0.5, -0.1):
        want = lam * max(0.0, psi) + beta / 2 * ((psi + lam / beta) ** 2 - (lam / beta) ** 2)
        assert float(ecop_losses.damped_penalty(psi, lam, beta)) == pytest.approx(want, rel=1e-6)
    # inactive side: Psi <= -lam/beta -> -lam^2 / (2 beta), constant
    assert float(ecop_losses.damped_penalty(-1.0, lam, beta)) == pytest.approx(-(lam**2) / (2 * beta), rel=1e-6)
    # its derivative is the penalty weight lambda 1[Psi > 0] + max(0, lambda + beta Psi)
    for psi in (0.5, -0.1, -1.0):
        grad = jax.grad(lambda p: ecop_losses.damped_penalty(p, lam, beta))(psi)
        assert float(grad) == pytest.approx(float(ecop_losses.penalty_weight(psi, lam, beta)), rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_jacobi_gradient_is_each_stages_own_loss_gradient(seed, x64):
    """Stage t's surrogates get d L~_t / d(s_r[t], s_c[t]) (finite differences of the loop
    reference), the tail h > t entering Psi_t as a constant."""
    x = _random_inputs(seed)
    s_r, s_c, _ = _reference_losses(**x)
    g_r, g_c = jax.grad(ecop_losses.jacobi_objective, argnums=(0, 1))(s_r, s_c, x["excess"], x["lam"], x["beta"])
    delta = 1e-6

    def loss_t(t, r, c):
        losses = np.zeros(len(r))
        for tt in range(len(r)):
            loss = -r[tt:].sum()
            for i in range(c.shape[1]):
                psi = c[tt:, i].sum() + x["excess"][i]
                loss += x["lam"][tt, i] * max(0.0, psi) + x["beta"] / 2 * (
                    max(0.0, psi + x["lam"][tt, i] / x["beta"]) ** 2 - (x["lam"][tt, i] / x["beta"]) ** 2
                )
            losses[tt] = loss
        return losses[t]

    for t in range(len(s_r)):
        r2 = s_r.copy()
        r2[t] += delta
        assert g_r[t] == pytest.approx((loss_t(t, r2, s_c) - loss_t(t, s_r, s_c)) / delta, abs=1e-5)
        for i in range(s_c.shape[1]):
            c2 = s_c.copy()
            c2[t, i] += delta
            assert g_c[t, i] == pytest.approx((loss_t(t, s_r, c2) - loss_t(t, s_r, s_c)) / delta, abs=1e-4)


def test_damping_factor_rule_by_hand():
    lam = jnp.array([[0.2], [0.5], [0.1]])  # H = 3, M = 1
    beta = 0.5
    # C = sum_t max(J - d, -lam_t / beta); c = sqrt(1) / beta * max lam = 1.0
    violated = ecop_losses.update_damping(beta, lam, jnp.array([0.5]), 2.0, 10.0)  # C = 1.5 >= 1.0
    assert float(violated) == pytest.approx(1.0)
    slack = ecop_losses.update_damping(beta, lam, jnp.array([-0.3]), 2.0, 10.0)  # C = -0.4 - 0.6 - 0.2 < 1.0
    assert float(slack) == pytest.approx(0.5)
    capped = ecop_losses.update_damping(beta, lam, jnp.array([0.5]), 2.0, 0.8)
    assert float(capped) == pytest.approx(0.8)


@pytest.mark.slow
def test_learning_regression_small_grid_judged_exactly():
    """Two seeds on a 5x5 grid (H = 12, alpha = 4, binding: the unconstrained optimum costs
    11.2), judged exactly, with the paper's law (``multiplier_method="paper"``): far better than
    the uniform policy, cost near alpha; the first multiplier update is eq. (7) on the relative
    violation, lambda = clip(lambda_0 + beta (J_C - d + m) / u) in training units (u = d = 4 the
    violation unit, m the safety margin)."""
    env = fhc.GridWorld(size=5, horizon=12, alpha=4.0)
    params = env.default_params
    cmdp = env.to_cmdp(params)
    cfg = ecop.Config(
        num_iterations=120,
        episodes_per_iteration=64,
        num_epochs=8,
        eval_every=60,
        damping=0.2,
        damping_max=0.2,
        multiplier_method="paper",
    )
    out = jax.jit(jax.vmap(ecop.make_train(env, params, cfg)))(jax.random.split(jax.random.key(3), 2))
    tables = ecop.policy_table(out.final_state, env, params)
    assert tables.shape == (2, 12, 25, 9)
    ev = jax.vmap(fhc.evaluate, in_axes=(None, 0))(cmdp, tables)
    uniform = fhc.evaluate(cmdp, jnp.full((12, 25, 9), 1.0 / 9))
    np.testing.assert_allclose(ev.reward, out.metrics.evaluation.reward[:, -1], rtol=1e-5)
    assert np.all(np.asarray(ev.reward) > 2.0 * float(uniform.reward)), (ev.reward, uniform.reward)
    assert np.all(np.asarray(ev.costs[:, 0]) <= 1.1 * 4.0), ev.costs
    s_r, s_c = signal_scales(env, params)  # the multipliers are reported in the environment's units
    to_env = s_r / float(s_c[0])
    cost = np.asarray(out.metrics.costs[:, 0, 0], np.float64)
    margin = 2 * 1.645 * (env.horizon / 2) / np.sqrt(cfg.eval_episodes)  # at most: episode costs lie in [0, H]
    low = 0.2 / 4.0 * (cost - 4.0) * to_env
    high = 0.2 / 4.0 * (cost - 4.0 + margin) * to_env
    first = np.asarray(out.metrics.multipliers[:, 0, 0])
    assert np.all(first >= low * (1 - 1e-5)) and np.all(first <= high * (1 + 1e-5)), (first, low, high)


def test_config_validation_and_unsupported_observation():
    with pytest.raises(ValueError, match="damping"):
        ecop.Config(damping=0.5, damping_max=0.1)
    with pytest.raises(ValueError, match="damping_growth"):
        ecop.Config(damping_growth=0.5)
    cmdp = fhc.TabularCMDP(
        transitions=np.full((2, 2, 2), 0.5),
        rewards=np.zeros((3, 2, 2)),
        costs=np.zeros((1, 3, 2, 2)),
        terminal_rewards=np.zeros(2),
        terminal_costs=np.zeros((1, 2)),
        thresholds=[1.0],
        initial_distribution=[1.0, 0.0],
    )
    with pytest.raises(ValueError, match="observation"):
        ecop.make_train(fhc.TabularEnv(cmdp), cmdp, ecop.Config(observation="xy"))


@pytest.mark.slow
def test_shared_stages_is_one_actor_and_one_critic_on_the_observation_and_the_stage():
    """shared_stages=True: the actor's and critic's parameters have no stage axis (h / H is an
    input), the sampled path trains and plays with them, and the policy played at stage h is the
    one the tabular path tabulates at h (the same network either way)."""
    from box_task import Reach

    env = Reach()
    cfg = resolve_env_defaults(ecop.Config(shared_stages=True, episodes_per_iteration=16, num_epochs=2), False)
    setup = ecop.setup(env, env.default_params, cfg)
    state = ecop.init(jax.random.key(0), setup, cfg)
    assert state.network.shared_stages
    d = env.observation_shape[0]
    assert state.actor["params"]["Dense_0"]["kernel"].shape == (d + 1, cfg.width)
    assert state.critic["params"]["Dense_0"]["kernel"].shape == (d + 1, cfg.width)

    @jax.jit
    def one_update(key, state):  # the sampled path's rollout and update (the scaffold's loop body)
        return ecop.update(state, ecop.rollout(key, state, setup, cfg), None, setup, cfg)

    new, metrics = one_update(jax.random.key(1), state)
    assert np.isfinite(float(metrics["value_loss"])) and float(metrics["approx_kl"]) > 0.0  # it moved
    action = ecop.policy(new, env, env.default_params)(jax.random.key(2), jnp.zeros((d,)), 1)
    assert action.shape == (1,)

    grid = fhc.GridWorld(size=3, horizon=4, alpha=2.0)
    grid_cfg = cfg.replace(observation="xy")
    state = ecop.init(jax.random.key(1), ecop.setup(grid, grid.default_params, grid_cfg), grid_cfg)
    table = np.asarray(ecop.policy_table(state, grid, grid.default_params))  # (H, S, A)
    setup = ecop.policy_setup(grid, grid.default_params, state)
    for h in (0, 3):
        logits = setup.actor.apply_stage(state.actor_average, setup.obs_table[h], h)  # (S, A)
        np.testing.assert_allclose(table[h], np.asarray(jax.nn.softmax(logits, -1)), rtol=1e-5, atol=1e-6)
    assert not np.allclose(table[0], table[3])  # the stage is an input


@pytest.mark.slow
def test_multiplier_law_and_the_geometric_law_is_the_shared_one():
    """Plain Config() takes the geometric law on either path (eq. (7) when asked for); the
    geometric update is one multiplier per constraint, broadcast to every stage, equal to
    ``multipliers.budget_geometric_step`` on the batch's relative violation (no K_p)."""
    from box_task import Reach

    grid = fhc.GridWorld(size=3, horizon=4, alpha=2.0)
    assert ecop.make_learner(grid, grid.default_params, ecop.Config()).config.multiplier_method == "geometric"
    env = Reach()
    assert ecop.make_learner(env, env.default_params, ecop.Config()).config.multiplier_method == "geometric"
    for where in (grid, env):
        chosen = ecop.make_learner(where, where.default_params, ecop.Config(multiplier_method="paper")).config
        assert chosen.multiplier_method == "paper"

    cfg = resolve_env_defaults(ecop.Config(episodes_per_iteration=32, num_epochs=1, multiplier_step=0.3), False)
    setup = ecop.setup(env, env.default_params, cfg)
    state = ecop.init(jax.random.key(0), setup, cfg)
    assert state.multiplier_state.integral.shape == (1,)  # M, not H x M
    batch = ecop.rollout(jax.random.key(1), state, setup, cfg)
    new, _ = jax.jit(lambda st, b: ecop.update(st, b, None, setup, cfg))(state, batch)
    units = multipliers.violation_units(setup.thresholds, env.horizon)
    violation = multipliers.relative_violation(
        batch.episode_costs, setup.thresholds, units, cfg.eval_episodes, cfg.eval_episodes * cfg.eval_chunks_max
    )
    nu, _ = multipliers.budget_geometric_step(
        state.multiplier_state, violation, batch.episode_costs, setup.thresholds, units, env.horizon,
        cfg.multiplier_step, cfg.multiplier_max, 0.0, cfg.multiplier_relative_gain,
    )  # fmt: skip
    assert float(nu[0]) > 0.0  # the initial Gaussian is over budget (cost 1.8 > alpha = 1): the law moved
    np.testing.assert_allclose(
        np.asarray(new.multipliers), np.broadcast_to(np.asarray(nu), (env.horizon, 1)), rtol=1e-5
    )


def test_kl_early_stopping_stops_the_actor_and_not_the_critics():
    """``target_kl``: the epochs after the one whose KL passed the target leave the actor (and
    its optimizer state) as they are, while the critics take every epoch: with a target no
    step stays under, the actor is that of two epochs (the KL is 0 before the first), the
    critics those of all ``num_epochs`` (the advantages come from the critics before the
    update, so the two families do not interact within it)."""
    grid = fhc.GridWorld(size=3, horizon=4, alpha=2.0)
    base = dict(episodes_per_iteration=32, num_iterations=2)
    cfgs = {
        "stopped": ecop.Config(**base, num_epochs=8, target_kl=1e-9),
        "two": ecop.Config(**base, num_epochs=2),
        "all": ecop.Config(**base, num_epochs=8),
    }
    new = {}
    for name, cfg in cfgs.items():
        cfg = resolve_env_defaults(cfg, True)
        setup = ecop.setup(grid, grid.default_params, cfg)
        state = ecop.init(jax.random.key(0), setup, cfg)
        batch = ecop.rollout(jax.random.key(1), state, setup, cfg)
        new[name], metrics = jax.jit(lambda st, b, s=setup, c=cfg: ecop.update(st, b, None, s, c))(state, batch)
        if name == "stopped":
            assert int(metrics["epochs"]) == 2
    same = lambda a, b: jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)
    same(new["stopped"].actor, new["two"].actor)
    same(new["stopped"].critic, new["all"].critic)
    moved = jax.tree.leaves(
        jax.tree.map(lambda x, y: float(jnp.max(jnp.abs(x - y))), new["two"].critic, new["all"].critic)
    )
    assert max(moved) > 0.0  # the critics of eight epochs are not those of two


@pytest.mark.slow
def test_mean_bound_and_budget_tightening_on_box_actions():
    """``mean_bound_coef`` pulls Gaussian means that lie beyond the action box back towards it
    (every sample of such a mean is clipped to the same action, so the surrogates cannot);
    ``budget_tightening`` steers the multiplier to a threshold that starts at the largest
    episode cost: the over-budget initial policy moves it only without the tightening."""
    from box_task import Reach

    env = Reach()
    params = env.default_params

    def one_update(shift: float, **changes):
        cfg = resolve_env_defaults(ecop.Config(episodes_per_iteration=64, num_epochs=4, **changes), False)
        setup = ecop.setup(env, params, cfg)
        state = ecop.init(jax.random.key(0), setup, cfg)
        if shift:  # every stage's Gaussian mean m moved beyond the box (m = 1 is its edge)
            last = max((k for k in state.actor["params"] if k.startswith("Dense_")), key=lambda k: int(k[6:]))
            bias = state.actor["params"][last]["bias"]
            d = env.action_space.shape[0]
            moved = bias.at[..., :d].add(shift)
            actor = {"params": {**state.actor["params"], last: {**state.actor["params"][last], "bias": moved}}}
            state = state.replace(actor=actor, actor_average=actor)
        batch = ecop.rollout(jax.random.key(1), state, setup, cfg)
        new, _ = jax.jit(lambda st, b: ecop.update(st, b, None, setup, cfg))(state, batch)
        obs = setup.normalize(batch.observations[:-1])
        excess = lambda st: float(jnp.mean(setup.head.mean_excess(setup.actor.apply(st.actor, obs))))
        return excess(state), excess(new), float(jnp.max(new.multipliers))

    before, free, _ = one_update(3.0)
    _, bounded, _ = one_update(3.0, mean_bound_coef=1.0)
    assert before > 1.0 and bounded < free - 0.05, (before, free, bounded)
    *_, nu_tight = one_update(0.0, budget_tightening=1.0)
    *_, nu_plain = one_update(0.0)
    assert nu_tight == 0.0 and nu_plain > 0.0, (nu_tight, nu_plain)
