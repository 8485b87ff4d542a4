"""rollout: shapes, equivalence with step-by-step loops (key and fast paths), keys, jit/vmap,
random policy, exact transition frequencies."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.envs import GridWorld, next_state_table
from fhc_jax.random_bits import UNROLLED_THREEFRY, uniform_from_bits
from fhc_jax.rollout import (
    episode,
    rollout,
    rollout_returns,
    trajectory_observations,
    uniform_random_policy,
    uses_uniforms,
)
from fhc_jax.trajectory import RECORDABLE, Trajectory, index_dtype

H = 5
fast_rollout = jax.jit(rollout, static_argnums=(1, 3, 4))


@pytest.fixture(scope="module")
def env() -> GridWorld:
    return GridWorld(size=3, horizon=H, num_constraints=2, observation="xyt")


@pytest.fixture(scope="module")
def params(env):
    rng = np.random.default_rng(0)
    return env.params_from_maps(
        reward_map=rng.uniform(0, 1, (H, 9)),
        cost_map=rng.uniform(0, 1, (2, H, 9)),
        thresholds=[1.0, 2.0],
        terminal_rewards=rng.uniform(0, 1, 9),
        terminal_costs=rng.uniform(0, 1, (2, 9)),
        slip=0.3,
    )


def _reference(key, env, params, policy, num_episodes, fast=False) -> Trajectory:
    """Plain Python loop over episodes and stages calling env.reset / env.step (key path) or
    policy.action_from_uniform / env.transition with the documented uniforms (fast path)."""
    fields = {
        f: []
        for f in (
            "states",
            "observations",
            "actions",
            "rewards",
            "costs",
            "final_states",
            "final_observations",
            "terminal_rewards",
            "terminal_costs",
        )
    }
    for episode_key in jax.random.split(key, num_episodes):
        reset_key, steps_key = jax.random.split(episode_key)
        stage_keys = jax.random.split(steps_key, (env.horizon, 2))
        # fast path: the two 32-bit words of block h = the key data of split(steps_key, H)[h]
        words = jax.random.key_data(jax.random.split(steps_key, env.horizon))
        obs, state = env.reset(reset_key, params)
        rows = {f: [] for f in ("states", "observations", "actions", "rewards", "costs")}
        for h in range(env.horizon):
            if fast:
                u_policy, u_env = uniform_from_bits(words[h])
                action = policy.action_from_uniform(u_policy, obs, jnp.int32(h))
            else:
                action = policy(stage_keys[h, 0], obs, jnp.int32(h))
            rows["states"].append(env.state_index(state))
            rows["observations"].append(obs)
            if fast:
                obs, state, reward, costs, _, _ = env.transition(
                    env.noise_from_uniform(u_env, params), state, action, params
                )
            else:
                obs, state, reward, costs, _, _ = env.step(stage_keys[h, 1], state, action, params)
            for f, v in (("actions", action), ("rewards", reward), ("costs", costs)):
                rows[f].append(v)
        for f, v in rows.items():
            fields[f].append(jnp.stack(v))
        fields["final_states"].append(env.state_index(state))
        fields["final_observations"].append(obs)
        fields["terminal_rewards"].append(env.terminal_reward(state, params))
        fields["terminal_costs"].append(env.terminal_costs(state, params))
    return Trajectory(**{f: jnp.stack(v) for f, v in fields.items()})


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_shapes_and_dtypes(env, params):
    traj = fast_rollout(jax.random.key(0), env, params, uniform_random_policy(9), 7)
    assert traj.num_episodes == 7 and traj.horizon == H
    for name, shape, dtype in (
        ("states", (7, H), jnp.int8),
        ("observations", (7, H, 3), jnp.float32),
        ("actions", (7, H), jnp.int8),
        ("rewards", (7, H), jnp.float32),
        ("costs", (7, H, 2), jnp.float32),
        ("next_states", (7, H), jnp.int8),
        ("final_states", (7,), jnp.int8),
        ("final_observations", (7, 3), jnp.float32),
        ("terminal_rewards", (7,), jnp.float32),
        ("terminal_costs", (7, 2), jnp.float32),
    ):
        value = getattr(traj, name)
        assert value.shape == shape and value.dtype == dtype, name
    np.testing.assert_array_equal(traj.states[:, 1:], traj.next_states[:, :-1])
    np.testing.assert_array_equal(traj.next_states[:, -1], traj.final_states)
    np.testing.assert_allclose(traj.observations[:, :, 2], np.tile(np.arange(H) / H, (7, 1)), rtol=1e-6)
    np.testing.assert_allclose(traj.episode_rewards, traj.rewards.sum(1) + traj.terminal_rewards, rtol=1e-6)
    np.testing.assert_allclose(traj.episode_costs, traj.costs.sum(1) + traj.terminal_costs, rtol=1e-6)


@pytest.mark.slow
def test_matches_step_by_step_reference(env, params):
    """Key path (a policy without ``action_from_uniform``): bulk noise, unrolled threefry and
    the conditional around the policy give exactly what env.step with the same keys gives."""
    logits = jnp.linspace(-1.0, 1.0, 9)
    policy = lambda key, obs, h: jax.random.categorical(key, logits * obs[0] + h)
    assert not uses_uniforms(env, policy)
    key = jax.random.key(1)
    traj = rollout(key, env, params, policy, 2)  # also: works without jit
    ref = _reference(key, env, params, policy, 2)
    for a, b in zip(jax.tree.leaves(traj), jax.tree.leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.slow
def test_fast_path_matches_step_by_step_reference(env, params):
    """Fast path: one threefry block per stage, its two words for the policy and the env."""
    policy = uniform_random_policy(9)
    assert uses_uniforms(env, policy)
    key = jax.random.key(11)
    traj = fast_rollout(key, env, params, policy, 3)
    ref = _reference(key, env, params, policy, 3, fast=True)
    for a, b in zip(jax.tree.leaves(traj), jax.tree.leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    _assert_same(rollout(key, env, params, policy, 3), traj)  # jit and eager agree exactly
    # episode(k) is the episode that rollout gives key k: rollout(key, K=1)[0] = episode(split(key, 1)[0])
    one = jax.jit(episode, static_argnums=(1, 3))(jax.random.split(key, 1)[0], env, params, policy)
    _assert_same(one, jax.tree.map(lambda x: x[0], fast_rollout(key, env, params, policy, 1)))
    # the policy's key path and fast path agree given the same uniform
    for k in jax.random.split(key, 5):
        assert int(policy(k, None, 0)) == int(policy.action_from_uniform(jax.random.uniform(k), None, 0))


@pytest.mark.slow
@pytest.mark.parametrize("fast", [True, False])
def test_rollout_returns_are_the_rollout_totals(env, params, fast):
    """Same key -> the same K episodes as ``rollout``: totals equal its ``episode_rewards`` /
    ``episode_costs`` (fast path and key path; jitted)."""
    if fast:
        policy = uniform_random_policy(9)
    else:
        logits = jnp.linspace(-1.0, 1.0, 9)
        policy = lambda key, obs, h: jax.random.categorical(key, logits * obs[0] + h)
    assert uses_uniforms(env, policy) == fast
    key = jax.random.key(5)
    traj = rollout(key, env, params, policy, 33)
    ret = jax.jit(rollout_returns, static_argnums=(1, 3, 4))(key, env, params, policy, 33)
    assert ret.rewards.shape == (33,) and ret.costs.shape == (33, 2)
    np.testing.assert_allclose(ret.rewards, traj.episode_rewards, rtol=1e-5)
    np.testing.assert_allclose(ret.costs, traj.episode_costs, rtol=1e-5)
    assert float(jnp.std(ret.rewards)) > 0  # the episodes differ: a real sample, not one episode repeated


def test_uniform_from_bits_is_jax_uniform():
    key = jax.random.key(12)
    np.testing.assert_array_equal(
        uniform_from_bits(jax.random.bits(key, (1000,), jnp.uint32)), jax.random.uniform(key, (1000,), jnp.float32)
    )
    u = uniform_from_bits(jnp.array([0, 2**32 - 1], jnp.uint32))
    assert float(u[0]) == 0.0 and float(u[1]) == 1.0 - 2.0**-23


@pytest.mark.slow
def test_keys_reproducible_and_independent_of_batch_size(env, params):
    policy = uniform_random_policy(9)
    a = fast_rollout(jax.random.key(2), env, params, policy, 6)
    b = fast_rollout(jax.random.key(2), env, params, policy, 6)
    c = fast_rollout(jax.random.key(3), env, params, policy, 6)
    small = fast_rollout(jax.random.key(2), env, params, policy, 2)
    for x, y, z in zip(jax.tree.leaves(a), jax.tree.leaves(b), jax.tree.leaves(small)):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x[:2], z)
    assert not np.array_equal(a.actions, c.actions)
    assert len({tuple(row) for row in np.asarray(a.actions).tolist()}) > 1  # episodes differ
    legacy = fast_rollout(jax.random.PRNGKey(2), env, params, policy, 6)  # raw uint32 key
    _assert_same(legacy, a)
    # other key implementations take jax.random.bits for the stage words: still deterministic
    rbg = [fast_rollout(jax.random.key(2, impl="rbg"), env, params, policy, 6) for _ in range(2)]
    _assert_same(rbg[0], rbg[1])
    assert not np.array_equal(rbg[0].actions, a.actions)


def test_vmap_over_params(env, params):
    both = jax.tree.map(
        lambda x, y: jnp.stack([x, y]), params.replace(slip=jnp.float32(0.0)), params.replace(slip=jnp.float32(1.0))
    )
    run = jax.jit(jax.vmap(lambda p: rollout(jax.random.key(4), env, p, uniform_random_policy(9), 50)))
    traj = run(both)
    table = next_state_table(3)
    intended = table[np.asarray(traj.states), np.asarray(traj.actions)]
    assert np.all(intended[0] == np.asarray(traj.next_states[0]))  # slip 0: always intended
    moved = intended[1] != table[np.asarray(traj.states[1]), 4]
    assert np.any(intended[1][moved] != np.asarray(traj.next_states[1])[moved])


def test_policy_sees_stage_index(env, params):
    traj = fast_rollout(jax.random.key(6), env, params, lambda key, obs, h: h + 2, 3)
    np.testing.assert_array_equal(traj.actions, np.tile(np.arange(H) + 2, (3, 1)))


def test_uniform_random_policy_is_uniform_and_hashable():
    policy = uniform_random_policy(9)
    assert policy == uniform_random_policy(9) and hash(policy) == hash(uniform_random_policy(9))
    actions = jax.vmap(lambda k: policy(k, None, 0))(jax.random.split(jax.random.key(5), 9000))
    counts = np.bincount(np.asarray(actions), minlength=9)
    assert counts.shape == (9,) and np.all(np.abs(counts - 1000) < 4 * np.sqrt(1000 * 8 / 9))


@pytest.mark.slow
def test_unrolled_threefry_is_bit_identical(x64):
    for seed in (0, 123):
        std, fast = jax.random.key(seed), jax.random.key(seed, impl=UNROLLED_THREEFRY)
        data = jax.random.key_data
        np.testing.assert_array_equal(data(jax.random.split(std, (3, 4))), data(jax.random.split(fast, (3, 4))))
        np.testing.assert_array_equal(data(jax.random.fold_in(std, 9)), data(jax.random.fold_in(fast, 9)))
        for bits in (8, 16, 32, 64):
            dtype = jnp.dtype(f"uint{bits}")
            np.testing.assert_array_equal(jax.random.bits(std, (5,), dtype), jax.random.bits(fast, (5,), dtype))
        np.testing.assert_array_equal(jax.random.uniform(std, (7,)), jax.random.uniform(fast, (7,)))
        np.testing.assert_array_equal(jax.random.normal(std, (7,)), jax.random.normal(fast, (7,)))


@pytest.mark.parametrize("slip", [0.3, 1.0])
def test_fast_path_transition_frequencies_match_to_cmdp(slip):
    """Empirical P(s' | s, a) and action frequencies over 2.4M rollout steps versus the exact model."""
    env = GridWorld(size=3, horizon=12, observation="index")
    params = env.make_params(slip=slip)
    traj = fast_rollout(jax.random.key(7), env, params, uniform_random_policy(9), 200_000)
    s, a, s2 = (np.asarray(x).reshape(-1) for x in (traj.states, traj.actions, traj.next_states))
    n = s.size
    assert np.all(np.abs(np.bincount(a, minlength=9) / n - 1 / 9) < 5 * np.sqrt(8 / 81 / n))
    counts = np.zeros((9, 9, 9))
    np.add.at(counts, (s, a, s2), 1)
    visits = counts.sum(-1, keepdims=True)
    p = np.asarray(env.to_cmdp(params).dense_transitions())
    se = np.sqrt(p * (1 - p) / np.maximum(visits, 1))
    assert np.all(visits > 5000)
    assert np.all(np.abs(counts / visits - p) <= 5 * se + 1e-12)
    # rewards and costs are paid on arrival at the recorded next state
    np.testing.assert_array_equal(
        traj.rewards, np.asarray(params.reward_map)[np.arange(12), np.asarray(traj.next_states)]
    )


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_uniform_pairs_are_uniform_and_independent(impl):
    from fhc_jax.random_bits import uniform_pairs

    key = jax.random.key(3, impl=impl)
    z = uniform_pairs(key, (200, 500))
    assert z.shape == (200, 500) and z.dtype == jnp.complex64
    np.testing.assert_array_equal(z, uniform_pairs(key, (200, 500)))  # deterministic
    u1, u2 = np.asarray(z.real, np.float64).ravel(), np.asarray(z.imag, np.float64).ravel()
    n = u1.size
    for u in (u1, u2):
        assert u.min() >= 0.0 and u.max() < 1.0
        assert abs(u.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n)
    assert abs(np.corrcoef(u1, u2)[0, 1]) < 4 / np.sqrt(n)
    other = uniform_pairs(jax.random.key(4, impl=impl), (200, 500))
    assert not np.array_equal(np.asarray(other), np.asarray(z))


def test_index_dtype_is_the_narrowest_exact_signed_integer():
    assert [index_dtype(n) for n in (1, 9, 128, 129, 32768, 32769, 10**6)] == [
        np.int8,
        np.int8,
        np.int8,
        np.int16,
        np.int16,
        np.int32,
        np.int32,
    ]
    # a larger grid records int16 state indices and int8 actions, holding the same values
    big = GridWorld(size=12, horizon=3)
    traj = fast_rollout(jax.random.key(1), big, big.default_params, uniform_random_policy(9), 50)
    assert traj.states.dtype == jnp.int16 and traj.final_states.dtype == jnp.int16 and traj.actions.dtype == jnp.int8
    assert int(traj.states.max()) >= 128  # indices beyond int8 survive


COMPACT = [("states", "actions", "rewards", "costs"), ("actions",), ("observations", "actions"), ()]


@pytest.mark.slow
@pytest.mark.parametrize("fast", [True, False])
def test_compact_records_hold_exactly_the_full_values(env, params, fast):
    """Every subset of fields holds exactly the full trajectory's values (same key), the rest
    is None; observations recomputed from the states are exactly the recorded ones."""
    if fast:
        policy = uniform_random_policy(9)
    else:
        logits = jnp.linspace(-1.0, 1.0, 9)
        policy = lambda key, obs, h: jax.random.categorical(key, logits * obs[0] + h)
    assert uses_uniforms(env, policy) == fast
    key = jax.random.key(21)
    full = jax.jit(lambda k: rollout(k, env, params, policy, 40))(key)
    assert full.observations is not None and full.states is not None
    for record in COMPACT:
        part = jax.jit(lambda k, record=record: rollout(k, env, params, policy, 40, record=record))(key)
        for name in RECORDABLE:
            value = getattr(part, name)
            if name in record:
                np.testing.assert_array_equal(value, getattr(full, name), err_msg=f"{record}: {name}")
                assert value.dtype == getattr(full, name).dtype
            else:
                assert value is None, (record, name)
        for name in ("final_states", "terminal_rewards", "terminal_costs"):
            np.testing.assert_array_equal(getattr(part, name), getattr(full, name))
        assert (part.final_observations is None) == ("observations" not in record)
        if "states" in record:
            obs, final = jax.jit(lambda t: trajectory_observations(t, env, params))(part)
            np.testing.assert_array_equal(obs, full.observations)
            np.testing.assert_array_equal(final, full.final_observations)
            np.testing.assert_array_equal(part.next_states, full.next_states)
        if record:
            assert part.horizon == H and part.num_episodes == 40
    # the totals of a compact trajectory are the full ones; fields not recorded say so
    part = jax.jit(lambda k: rollout(k, env, params, policy, 40, record=("rewards", "costs")))(key)
    np.testing.assert_array_equal(part.episode_rewards, full.episode_rewards)
    np.testing.assert_array_equal(part.episode_costs, full.episode_costs)
    with pytest.raises(ValueError, match="rewards were not recorded"):
        jax.eval_shape(lambda k: rollout(k, env, params, policy, 4, record=("states",)).episode_rewards, key)
    # episode() records the same subsets
    one = jax.jit(lambda k: episode(k, env, params, policy, record=("states", "actions")))(jax.random.split(key, 40)[3])
    np.testing.assert_array_equal(one.states, full.states[3])
    np.testing.assert_array_equal(one.actions, full.actions[3])
    assert one.rewards is None


def test_record_is_validated_before_compiling(env, params):
    policy = uniform_random_policy(9)
    for bad in (("states", "next_states"), "states", 3):
        with pytest.raises(ValueError, match="record must"):
            rollout(jax.random.key(0), env, params, policy, 4, record=bad)
    assert RECORDABLE == ("states", "observations", "actions", "rewards", "costs")
    # as a static argument of jax.jit
    fast = jax.jit(rollout, static_argnums=(1, 3, 4), static_argnames="record")
    traj = fast(jax.random.key(0), env, params, policy, 4, record=("actions",))
    assert traj.actions.shape == (4, H) and traj.states is None


@pytest.mark.slow
def test_trajectory_observations_needs_tabular_states(params):
    env = GridWorld(size=3, horizon=H, num_constraints=2, observation="one_hot")
    traj = fast_rollout(jax.random.key(3), env, params, uniform_random_policy(9), 5)
    obs, final = trajectory_observations(traj, env, params)
    np.testing.assert_array_equal(obs, traj.observations)
    np.testing.assert_array_equal(final, traj.final_observations)
    with pytest.raises(ValueError, match="no states"):
        trajectory_observations(
            rollout(jax.random.key(3), env, params, uniform_random_policy(9), 5, record=("actions",)), env, params
        )
    battery = fhc.BatteryStorage()
    with pytest.raises(ValueError, match="no tabular states"):
        trajectory_observations(traj, battery, battery.default_params)


@pytest.mark.slow
def test_non_tabular_environment_records_observations_from_states():
    """Without tabular states the rollout keeps the state pytree for the observations; the
    compact record without them holds the same values."""
    env = fhc.BatteryStorage()
    params = env.default_params
    policy = uniform_random_policy(env.num_actions)
    key = jax.random.key(4)
    full = jax.jit(lambda k: rollout(k, env, params, policy, 16))(key)
    assert full.states is None and full.final_states is None and full.next_states is None
    assert full.observations.shape[:2] == (16, env.horizon)
    part = jax.jit(lambda k: rollout(k, env, params, policy, 16, record=("actions", "rewards", "costs")))(key)
    assert part.observations is None and part.final_observations is None
    for name in ("actions", "rewards", "costs", "terminal_rewards", "terminal_costs"):
        np.testing.assert_array_equal(getattr(part, name), getattr(full, name))
    # the batch of the learners' sampled path from a trajectory of a tabular environment
    from fhc_jax.algos.core.tabular_rollout import batch_from_trajectory

    grid = GridWorld(size=3, horizon=4)
    traj = rollout(key, grid, grid.default_params, uniform_random_policy(9), 6)
    batch = batch_from_trajectory(traj)
    assert batch.states.dtype == jnp.int32 and batch.actions.dtype == jnp.int32
    np.testing.assert_array_equal(batch.states[:-1].T, traj.states)
    np.testing.assert_array_equal(batch.states[-1], traj.final_states)


class _StatePolicy:
    """A user's policy of the tabular state (the documented ``reads_state`` kind): action =
    state index mod A, whatever the observation."""

    reads_state = True

    def action_from_state(self, u, index, h):
        return (index % 9).astype(jnp.int32)


@pytest.mark.slow
def test_a_reads_state_policy_gets_the_state_index_on_both_paths(env, params):
    """The rollouts pass env.state_index(s_h) to a reads_state policy, on the fast path and on
    the key path (TabularEnv has no one-uniform noise), and refuse it without tabular states."""
    traj = rollout(jax.random.key(1), env, params, _StatePolicy(), 16, record=("states", "actions"))
    np.testing.assert_array_equal(np.asarray(traj.actions), np.asarray(traj.states) % 9)
    tab = fhc.TabularEnv(env.to_cmdp(params), observation="one_hot")
    traj = rollout(jax.random.key(1), tab, tab.default_params, _StatePolicy(), 16, record=("states", "actions"))
    np.testing.assert_array_equal(np.asarray(traj.actions), np.asarray(traj.states) % 9)
    battery = fhc.BatteryStorage()
    with pytest.raises(
        ValueError,
        match=r"_StatePolicy plays from tabular state indices \(reads_state\); "
        "BatteryStorage has none",
    ):
        rollout(jax.random.key(1), battery, battery.default_params, _StatePolicy(), 4)


def test_episode_shares_the_checks(env, params):
    """episode(...) refuses what rollout refuses (one episode: no episode index)."""
    with pytest.raises(ValueError, match="episode: the policy returned action 9 at stage 0; GridWorld takes"):
        episode(jax.random.key(0), env, params, lambda k, o, h: jnp.int32(9))
    with pytest.raises(ValueError, match=r"episode: params.reward_map has shape"):
        episode(jax.random.key(0), env, GridWorld(size=4, horizon=H).default_params, uniform_random_policy(9))
