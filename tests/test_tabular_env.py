"""TabularEnv: any TabularCMDP as an environment, judged against exact evaluation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import random_cmdp, random_policy

from fhc_jax.cmdp.evaluate import evaluate
from fhc_jax.envs import GridWorld, TabularEnv, TabularState
from fhc_jax.rollout import rollout


def _table_policy(table):
    return lambda key, obs, h: jax.random.categorical(key, jnp.log(table[h, obs]))


def _assert_mc_matches_exact(env, params, table, key, num_episodes=4000):
    exact = evaluate(env.to_cmdp(params), table)
    traj = jax.jit(rollout, static_argnums=(1, 3, 4))(key, env, params, _table_policy(table), num_episodes)
    samples = [(traj.episode_rewards, exact.reward)] + [
        (traj.episode_costs[:, k], exact.costs[k]) for k in range(env.num_constraints)
    ]
    for sample, mean in samples:
        se = float(np.std(sample)) / np.sqrt(num_episodes)
        assert abs(float(np.mean(sample)) - float(mean)) < 4 * se, (float(np.mean(sample)), float(mean), se)


def test_random_cmdp_monte_carlo_matches_evaluate(x64):
    cmdp = random_cmdp(0, num_states=5, num_actions=3, horizon=4, num_constraints=2)
    env = TabularEnv(cmdp, observation="index")
    table = jnp.asarray(random_policy(1, 4, 5, 3))
    _assert_mc_matches_exact(env, env.default_params, table, jax.random.key(0))


def test_per_next_state_rewards_and_sparse_kernel(x64):
    # (H, S, A, S) rewards/costs: the realised r_h(s, a, s') is paid
    base = random_cmdp(2, num_states=4, num_actions=2, horizon=3, time_varying=False)
    rng = np.random.default_rng(3)
    cmdp = base.replace(rewards=rng.uniform(0, 1, (3, 4, 2, 4)), costs=rng.uniform(0, 1, (1, 3, 4, 2, 4)))
    env = TabularEnv(cmdp, observation="index")
    state = TabularState(index=jnp.int32(1), time=jnp.int32(2))
    keys = jax.random.split(jax.random.key(4), 64)
    _, nxt, reward, costs, done, _ = jax.vmap(lambda k: env.step(k, state, jnp.int32(1), cmdp))(keys)
    np.testing.assert_allclose(reward, np.asarray(cmdp.rewards)[2, 1, 1, np.asarray(nxt.index)])
    np.testing.assert_allclose(costs[:, 0], np.asarray(cmdp.costs)[0, 2, 1, 1, np.asarray(nxt.index)])
    assert np.all(np.asarray(done))
    table = jnp.asarray(random_policy(5, 3, 4, 2))
    _assert_mc_matches_exact(env, cmdp, table, jax.random.key(5))
    # a sparse successor-list kernel (the gridworld's exact model)
    grid = GridWorld(size=3, horizon=3)
    sparse = grid.to_cmdp(grid.default_params)
    env = TabularEnv(sparse, observation="index")
    _assert_mc_matches_exact(env, sparse, jnp.full((3, 9, 9), 1 / 9), jax.random.key(6))


@pytest.mark.parametrize("s,a,h", [(0, 0, 0), (3, 2, 3)])
def test_step_frequencies_match_transitions(s, a, h):
    cmdp = random_cmdp(7, num_states=5, num_actions=3, horizon=4)
    env = TabularEnv(cmdp, observation="one_hot")
    n = 4000
    state = TabularState(index=jnp.int32(s), time=jnp.int32(h))
    step = jax.jit(jax.vmap(lambda k: env.step(k, state, jnp.int32(a), cmdp)))
    obs, nxt, reward, costs, done, _ = step(jax.random.split(jax.random.key(8), n))
    freq = np.bincount(np.asarray(nxt.index), minlength=5) / n
    p = np.asarray(cmdp.transitions)[h, s, a]
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n) + 1e-3)
    np.testing.assert_array_equal(np.asarray(obs).argmax(-1), np.asarray(nxt.index))
    np.testing.assert_allclose(reward, cmdp.rewards[h, s, a])
    assert np.all(np.asarray(nxt.time) == h + 1) and np.all(np.asarray(done) == (h + 1 == 4))


def test_basics_and_validation():
    cmdp = random_cmdp(9, num_states=4, num_actions=2, horizon=3, num_constraints=2)
    env = TabularEnv(cmdp)
    assert (env.horizon, env.num_states, env.num_actions, env.num_constraints) == (3, 4, 2, 2)
    assert env.to_cmdp(env.default_params) is cmdp
    assert env.observation_shape == (4,) and TabularEnv(cmdp, "index").observation_shape == ()
    assert env == TabularEnv(cmdp) and hash(env) == hash(TabularEnv(cmdp))
    assert env != TabularEnv(random_cmdp(9, num_states=4, num_actions=2, horizon=3, num_constraints=2))
    obs, state = env.reset(jax.random.key(0), cmdp)
    assert obs.shape == (4,) and int(state.time) == 0
    final = TabularState(index=jnp.int32(2), time=jnp.int32(3))
    np.testing.assert_allclose(env.terminal_reward(final, cmdp), cmdp.terminal_rewards[2])
    np.testing.assert_allclose(env.terminal_costs(final, cmdp), cmdp.terminal_costs[:, 2])
    with pytest.raises(ValueError, match="observation must be one of 'one_hot', 'index'.*'xy'"):
        TabularEnv(cmdp, observation="xy")
    with pytest.raises(ValueError, match="cmdp must be a TabularCMDP"):
        TabularEnv(np.zeros((3, 4, 2)))
