"""TabularEnv: any TabularCMDP as an environment, judged against exact evaluation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_cmdp, random_policy

import fhc_jax as fhc
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


@pytest.mark.slow
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


class OwnObservationEnv(TabularEnv):
    """A tabular environment with an observation of its own, (s / (S - 1), h / H), and no
    encoder: it never calls ``_init_encoder`` (issue 30: a user's own environment)."""

    def __init__(self, cmdp):
        self._cmdp = cmdp

    def observation(self, state, params):
        return jnp.stack([state.index / (self.num_states - 1), state.time / self.horizon]).astype(jnp.float32)


class MirroredObservationEnv(TabularEnv):
    """Declares the "one_hot" encoder but observes the mirrored state, one_hot(S - 1 - s): an
    observation that disagrees with the declared encoder."""

    def observation(self, state, params):
        return jax.nn.one_hot(self.num_states - 1 - state.index, self.num_states, dtype=jnp.float32)


@pytest.mark.slow
@pytest.mark.parametrize("make", [OwnObservationEnv, MirroredObservationEnv])
def test_policy_tables_play_from_the_state_index_whatever_the_observation(make, x64):
    """fhc.table_policy (and every learner's policy on a tabular exact model) plays its table
    at env.state_index(s_h), never at a state read off the observation: Monte-Carlo returns
    match fhc.evaluate of the table within 4 standard errors. Before, an environment without an
    encoder raised AttributeError ('_encoder'), and the mirrored one silently played the table
    at the mirrored state (its value is far outside the bounds: checked below)."""
    cmdp = random_cmdp(11, num_states=6, num_actions=3, horizon=5, num_constraints=2)
    env = make(cmdp)
    assert env.observation_shape == ((2,) if make is OwnObservationEnv else (6,))
    rng = np.random.default_rng(12)
    table = rng.dirichlet(np.full(3, 0.2), size=(5, 6))  # peaked rows: the state read matters
    exact = evaluate(cmdp, jnp.asarray(table))
    misread = evaluate(cmdp, jnp.asarray(table[:, ::-1]))  # the table played at the mirrored state
    n = 20_000
    ret = jax.jit(lambda k: fhc.rollout_returns(k, env, cmdp, fhc.table_policy(table, env), n))(jax.random.key(13))
    samples = [(np.asarray(ret.rewards), exact.reward, misread.reward)] + [
        (np.asarray(ret.costs)[:, k], exact.costs[k], misread.costs[k]) for k in range(2)
    ]
    for sample, want, _wrong in samples:
        se = float(np.std(sample)) / np.sqrt(n)
        assert abs(float(np.mean(sample)) - float(want)) < 4 * se, (float(np.mean(sample)), float(want), se)
    assert max(abs(float(want) - float(wrong)) / (float(np.std(s)) / np.sqrt(n)) for s, want, wrong in samples) > 20
    # the same through the key path (TabularEnv draws its noise from keys) and through rollout
    traj = fhc.rollout(jax.random.key(14), env, cmdp, fhc.table_policy(table, env), 64, record=("states", "actions"))
    assert traj.actions.shape == (64, 5)


@pytest.mark.slow
def test_learner_policy_and_monte_carlo_judging_on_an_own_observation():
    """A learner's policy() on an environment with its own observation is a table policy that
    plays from the state index, and the experiment layer's Monte-Carlo judge runs it."""
    from fhc_jax.algos import fh_constrained as fc
    from fhc_jax.experiment import judge

    cmdp = random_cmdp(15, num_states=4, num_actions=2, horizon=3)
    env = OwnObservationEnv(cmdp)
    out = jax.jit(fc.make_train(env, cmdp, fc.Config(num_iterations=3, episodes_per_iteration=8, eval_every=0)))(
        jax.random.key(0)
    )
    policy = fc.policy(out.state, env, cmdp)
    table = fc.policy_table(out.state, env, cmdp)
    values = judge.monte_carlo(env, cmdp, [policy], episodes=20_000)
    exact = evaluate(cmdp, table)
    assert abs(values["reward"][0] - float(exact.reward)) < 2 * values["reward_half_width"][0] + 1e-6
