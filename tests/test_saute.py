"""Saute-Lagrangian: the augmented state and the reshaped reward against a hand-computed
episode, the exact augmented model against Monte-Carlo rollouts, the occupancy-equivalent
Markov policy against the augmented evaluation, and a learning regression judged exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.algos import saute
from fhc_jax.algos.policies import table_policy
from fhc_jax.algos.tabular_rollout import Batch


def _chain(horizon=4, alpha=2.0):
    """Two states; action a moves to state a deterministically; cost 1 for a = 1; reward
    (h + 1) for a = 1 and 0.1 (h + 1) for a = 0."""
    p = np.zeros((2, 2, 2))
    p[:, 0, 0] = p[:, 1, 1] = 1.0
    hh = np.arange(horizon)[:, None, None] + 1.0
    rewards = np.broadcast_to(hh * np.array([0.1, 1.0])[None, None, :], (horizon, 2, 2))
    costs = np.broadcast_to(np.array([0.0, 1.0]), (1, horizon, 2, 2))
    return fhc.TabularCMDP(transitions=p, rewards=rewards, costs=costs, terminal_rewards=np.zeros(2),
                           terminal_costs=np.zeros((1, 2)), thresholds=[alpha], initial_distribution=[1.0, 0.0])


def test_augmented_state_and_reshaped_reward_hand_computed_episode():
    cmdp = _chain()
    base = fhc.TabularEnv(cmdp)
    senv = saute.SauteEnv(base, observation="index")
    assert senv.levels == 4 and senv.num_states == 8  # counts 0..3 = ceil(alpha) + 1
    actions = [1, 1, 0, 1]
    # by hand: (s, c) 0:(0,0) -> (1,1) -> (1,2) -> (0,2) -> (1,3); z' = 0.5, 0, 0, -0.5
    want_index = [0, 5, 6, 2, 7]
    want_true = [1.0, 2.0, 0.3, 4.0]
    want_shaped = [1.0, -3.0, -3.0, -3.0]  # unsafe_reward n = 3 once z' <= 0
    obs, state = senv.reset(jax.random.key(0), cmdp)
    index, rewards, costs, budgets = [int(obs)], [], [], []
    for h, a in enumerate(actions):
        obs, state, r, g, done, _ = senv.step(jax.random.key(h + 1), state, jnp.int32(a), cmdp)
        index.append(int(obs))
        rewards.append(float(r))
        costs.append(float(g[0]))
        budgets.append(float(senv.budget(state.count)))
    assert index == want_index and bool(done)
    np.testing.assert_allclose(rewards, want_true, rtol=1e-6)
    np.testing.assert_allclose(costs, [1, 1, 0, 1])
    np.testing.assert_allclose(budgets, [0.5, 0.0, 0.0, -0.5])
    batch = Batch(states=jnp.asarray(index)[:, None], actions=jnp.asarray(actions)[:, None],
                  rewards=jnp.asarray(rewards)[:, None], costs=jnp.asarray(costs)[:, None, None],
                  terminal_rewards=jnp.zeros(1), terminal_costs=jnp.zeros((1, 1)))
    shaped, terminal = saute.reshaped_rewards(batch, senv.levels, 2.0, 1.0, 3.0)
    np.testing.assert_allclose(shaped[:, 0], want_shaped, rtol=1e-6)
    np.testing.assert_allclose(terminal, [-3.0])  # the final budget is exhausted too
    # the network input: the base encoding, then z
    xz = saute.SauteEnv(base, base_observation="one_hot")
    np.testing.assert_allclose(xz.observation(state, cmdp), [0.0, 1.0, -0.5])


def test_non_integer_costs_are_refused():
    cmdp = _chain().replace(costs=np.full((1, 4, 2, 2), 0.5))
    with pytest.raises(ValueError, match="integer multiples"):
        saute.augmented_cmdp(fhc.TabularEnv(cmdp), cmdp)
    saute.augmented_cmdp(fhc.TabularEnv(cmdp), cmdp, cost_unit=0.5)  # 0.5 = one unit: exact


def test_augmented_model_matches_monte_carlo_and_markov_equivalent():
    """A random budget-dependent policy on a 4x4 gridworld (0/1 costs on arrival): its exact
    evaluation on the augmented model equals (a) the Monte-Carlo mean of SauteEnv rollouts
    within 4 standard errors and (b) the exact evaluation of the occupancy-equivalent Markov
    policy on the base model (to float rounding)."""
    env = fhc.GridWorld(size=4, horizon=8, alpha=3.0)
    params = env.default_params
    aug = saute.augmented_cmdp(env, params)
    senv = saute.SauteEnv(env, 3.0, observation="index")
    assert aug.num_states == 16 * 5
    table = jnp.asarray(np.random.default_rng(0).dirichlet(np.ones(9), size=(8, aug.num_states)), jnp.float32)
    exact = fhc.evaluate(aug, table)
    markov = fhc.evaluate(env.to_cmdp(params), saute.markov_policy(table, env, params))
    np.testing.assert_allclose(markov.reward, exact.reward, rtol=1e-5)
    np.testing.assert_allclose(markov.costs, exact.costs, rtol=1e-5)
    k = 40_000
    mc = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
        jax.random.key(1), senv, params, table_policy(table, senv), k)
    for sample, want in ((mc.rewards, exact.reward), (mc.costs[:, 0], exact.costs[0])):
        se = float(np.std(sample)) / np.sqrt(k)
        assert abs(float(np.mean(sample)) - float(want)) < 4 * se, (np.mean(sample), want, se)


def test_learning_regression_small_grid_judged_exactly():
    """Stage-aware Saute-Lagrangian ("xyt" + z) on a 5x5 grid (H = 12, alpha = 4): the
    scaffold's exact metric is the exact value of the budget-dependent policy (it equals the
    augmented model's evaluation), which beats the uniform policy at a cost near alpha."""
    env = fhc.GridWorld(size=5, horizon=12, alpha=4.0)
    params = env.default_params
    cfg = saute.Config(num_iterations=120, episodes_per_iteration=64, num_epochs=4, num_minibatches=4, eval_every=60,
                       observation="xyt")
    out = jax.jit(saute.make_train(env, params, cfg))(jax.random.key(0))
    aug = fhc.evaluate(saute.augmented_cmdp(env, params), saute.augmented_policy_table(out.state, env, params))
    np.testing.assert_allclose(out.metrics.exact.reward[-1], aug.reward, rtol=1e-4)
    np.testing.assert_allclose(out.metrics.exact.costs[-1], aug.costs, rtol=1e-4)
    uniform = fhc.evaluate(env.to_cmdp(params), jnp.full((12, 25, 9), 1.0 / 9))
    assert float(aug.reward) > 1.3 * float(uniform.reward), (aug.reward, uniform.reward)
    assert float(aug.costs[0]) <= 1.1 * 4.0, aug.costs


def test_config_and_environment_validation():
    with pytest.raises(ValueError, match="unsafe_reward"):
        saute.Config(unsafe_reward=-1.0)
    with pytest.raises(ValueError, match="cost_unit"):
        saute.Config(cost_unit=0.0)
    two = fhc.GridWorld(size=4, horizon=4, num_constraints=2)
    with pytest.raises(ValueError, match="one constraint"):
        saute.make_train(two, two.default_params, saute.Config())
