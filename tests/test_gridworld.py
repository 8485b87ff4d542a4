"""GridWorld: exact semantics versus its own TabularCMDP, walls, slip, validation, encoders."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax.cmdp.transitions as tr
from fhc_jax.cmdp.evaluate import evaluate
from fhc_jax.envs import MOVES, GridState, GridWorld, next_state_table
from fhc_jax.rollout import rollout, uses_uniforms

SIZE, H = 4, 6


@pytest.fixture(scope="module")
def env() -> GridWorld:
    return GridWorld(size=SIZE, horizon=H, observation="index")


def _state(env: GridWorld, s: int, h: int = 0) -> GridState:
    return GridState(index=jnp.int32(s), time=jnp.int32(h))


@partial(jax.jit, static_argnums=0)
def _batched_step(env, params, s, a, h, keys):
    """env.step from state s at stage h with action a, once per key (s, a, h traced)."""
    state = GridState(index=jnp.int32(s), time=jnp.int32(h))
    return jax.vmap(lambda k: env.step(k, state, jnp.int32(a), params))(keys)


def test_action_table_and_wall_semantics():
    assert MOVES.tolist()[4] == [0, 0]
    assert sorted(map(tuple, MOVES.tolist())) == [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)]
    table = next_state_table(3)  # 3x3: s = row * 3 + col
    # corner (0, 0): every move with a negative component is cancelled as a whole
    assert table[0].tolist() == [0, 0, 0, 0, 0, 1, 0, 3, 4]
    # top edge (0, 1): up-left/up/up-right are cancelled, NOT clipped into a sideways move
    assert table[1].tolist() == [1, 1, 1, 0, 1, 2, 3, 4, 5]
    # corner (2, 2)
    assert table[8].tolist() == [4, 5, 8, 7, 8, 8, 8, 8, 8]
    # interior (1, 1): all nine neighbours
    assert table[4].tolist() == list(range(9))


def test_slip_zero_is_deterministic_and_matches_table(env):
    params = env.make_params(slip=0.0)
    table = next_state_table(SIZE)
    keys = jax.random.split(jax.random.key(0), 64)
    for s in (0, 5, SIZE * SIZE - 1):
        for a in range(9):
            _, nxt, reward, costs, done, info = _batched_step(env, params, s, a, 2, keys)
            idx = nxt.index
            assert np.all(np.asarray(idx) == table[s, a]), (s, a)
            assert np.all(np.asarray(info["move"]) == a)
            np.testing.assert_array_equal(reward, params.reward_map[2, table[s, a]])
            np.testing.assert_array_equal(costs[:, 0], params.cost_map[0, 2, table[s, a]])


def test_noise_is_one_uniform_and_row_col(env):
    params = env.default_params
    for key in jax.random.split(jax.random.key(9), 4):
        u = jax.random.uniform(key, (), jnp.float32)
        assert env.noise(key, params) == env.noise_from_uniform(u, params) == u
    row, col = env.row_col(GridState(index=jnp.arange(SIZE * SIZE), time=jnp.int32(0)))
    np.testing.assert_array_equal(row * SIZE + col, np.arange(SIZE * SIZE))
    np.testing.assert_array_equal(row, np.arange(SIZE * SIZE) // SIZE)


def test_slip_boundaries_follow_the_uniform(env):
    """u < 1 - slip executes the action; above, (u - keep) / slip picks the j-th other move."""
    params = env.make_params(slip=0.2)
    state = _state(env, 5, 0)
    action = 3
    us = jnp.array([0.0, 0.7999, 0.8001, 0.8249, 0.8251, 0.9999], jnp.float32)
    moves = jax.vmap(lambda u: env.transition(u, state, jnp.int32(action), params)[5]["move"])(us)
    # other moves in order 0, 1, 2, 4, 5, 6, 7, 8 (the action 3 skipped), each over 0.2 / 8 = 0.025
    assert np.asarray(moves).tolist() == [3, 3, 0, 0, 1, 8]


def test_slip_one_never_executes_the_chosen_move(env):
    params = env.make_params(slip=1.0)
    keys = jax.random.split(jax.random.key(1), 2000)
    _, _, _, _, _, info = _batched_step(env, params, 5, 3, 0, keys)
    moves = np.asarray(info["move"])
    assert not np.any(moves == 3)
    counts = np.bincount(moves, minlength=9)
    others = counts[np.arange(9) != 3]
    assert np.all(np.abs(others / 2000 - 1 / 8) < 0.04)


@pytest.mark.parametrize("s,a", [(0, 0), (0, 8), (1, 1), (5, 4), (15, 2)])
def test_step_frequencies_and_arrival_rewards_match_to_cmdp(env, s, a):
    params = env.make_params(slip=0.3)
    cmdp = env.to_cmdp(params)
    n, h = 4000, 3
    keys = jax.random.split(jax.random.key(2), n)
    _, nxt, reward, costs, done, _ = _batched_step(env, params, s, a, h, keys)
    idx = np.asarray(nxt.index)
    freq = np.bincount(idx, minlength=SIZE * SIZE) / n
    p = np.asarray(cmdp.dense_transitions())[s, a]
    se = np.sqrt(p * (1 - p) / n) + 1e-3
    assert np.all(np.abs(freq - p) < 5 * se)
    # rewards and costs are paid on arrival: R[h, s'], G[k, h, s']
    np.testing.assert_allclose(reward, np.asarray(params.reward_map)[h, idx])
    np.testing.assert_allclose(costs, np.asarray(params.cost_map)[:, h, idx].T)
    assert np.all(np.asarray(nxt.time) == h + 1) and not np.any(done)


def test_to_cmdp_structure(env):
    params = env.default_params
    cmdp = env.to_cmdp(params)
    s = SIZE * SIZE
    assert cmdp.transitions.next_states.shape == (s, 9, 9) and not cmdp.time_varying
    assert cmdp.rewards.shape == (H, s, 9) and cmdp.costs.shape == (1, H, s, 9)
    probs = np.asarray(cmdp.transitions.probabilities)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(probs[:, 2, 2], 0.9, rtol=1e-6)
    expected = tr.expect_next(cmdp.transitions, params.reward_map)
    np.testing.assert_allclose(cmdp.rewards, expected)
    np.testing.assert_array_equal(cmdp.thresholds, [25.0])


@pytest.mark.slow
@pytest.mark.parametrize("fast", [False, True])
def test_evaluate_matches_monte_carlo(x64, fast):
    """Monte-Carlo returns of a state- and stage-dependent policy match exact evaluation, through
    the rollout's key path (categorical draws) and its fast path (inverse CDF of one uniform)."""
    env = GridWorld(size=3, horizon=5, observation="index")
    rng = np.random.default_rng(0)
    params = env.params_from_maps(
        reward_map=rng.uniform(0, 1, (5, 9)),
        cost_map=rng.uniform(0, 1, (1, 5, 9)),
        thresholds=1.0,
        terminal_rewards=rng.uniform(0, 1, 9),
        terminal_costs=rng.uniform(0, 1, (1, 9)),
        initial_distribution=rng.dirichlet(np.ones(9)),
        slip=0.2,
    )
    table = jnp.asarray(rng.dirichlet(np.ones(9), size=(5, 9)))
    exact = evaluate(env.to_cmdp(params), table)
    if fast:
        cdf = jnp.cumsum(table, axis=-1).astype(jnp.float32)

        def policy(key, obs, h):
            return policy.action_from_uniform(jax.random.uniform(key), obs, h)

        policy.action_from_uniform = lambda u, obs, h: jnp.minimum(jnp.sum(cdf[h, obs] <= u * cdf[h, obs, -1]), 8)
        assert uses_uniforms(env, policy)
    else:
        policy = lambda key, obs, h: jax.random.categorical(key, jnp.log(table[h, obs]))
    traj = jax.jit(rollout, static_argnums=(1, 3, 4))(jax.random.key(3), env, params, policy, 4000)
    for sample, mean in ((traj.episode_rewards, exact.reward), (traj.episode_costs[:, 0], exact.costs[0])):
        se = float(np.std(sample)) / np.sqrt(sample.shape[0])
        assert abs(float(np.mean(sample)) - float(mean)) < 4 * se


def test_reset_done_and_time(env):
    params = env.make_params(initial_distribution=np.eye(SIZE * SIZE)[6])
    obs, state = env.reset(jax.random.key(0), params)
    assert int(obs) == 6 and int(state.time) == 0
    keys = jax.random.split(jax.random.key(1), H)
    step = jax.jit(env.step)
    dones = []
    for h in range(H):
        obs, state, _, _, done, _ = step(keys[h], state, jnp.int32(4), params)
        dones.append(bool(done))
        assert int(state.time) == h + 1
    assert dones == [False] * (H - 1) + [True]


def test_reset_samples_initial_distribution(env):
    beta = np.zeros(SIZE * SIZE)
    beta[[0, 7, 9]] = [0.2, 0.5, 0.3]
    params = env.make_params(initial_distribution=beta)
    keys = jax.random.split(jax.random.key(4), 4000)
    _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    freq = np.bincount(np.asarray(states.index), minlength=SIZE * SIZE) / 4000
    assert set(np.flatnonzero(freq)) == {0, 7, 9}
    assert np.all(np.abs(freq - beta) < 4 * np.sqrt(beta * (1 - beta) / 4000) + 1e-9)


@pytest.mark.slow
def test_jit_vmap_and_key_reproducibility(env):
    params = env.default_params
    state = _state(env, 5, 1)
    key = jax.random.key(7)
    single = env.step(key, state, jnp.int32(2), params)
    jitted = jax.jit(env.step)(key, state, jnp.int32(2), params)
    batched = jax.vmap(env.step, in_axes=(0, None, None, None))(jnp.stack([key, key]), state, jnp.int32(2), params)
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(jitted)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(batched)):
        np.testing.assert_array_equal(b, np.stack([a, a]))
    # different keys give different outcomes (slip = 1: 8 equally likely moves)
    slippy = env.make_params(slip=1.0)
    moves = jax.vmap(lambda k: env.step(k, state, jnp.int32(2), slippy)[5]["move"])(jax.random.split(key, 16))
    assert len(set(np.asarray(moves).tolist())) > 1


def test_vmap_over_params_slip():
    env = GridWorld(size=3, horizon=4, observation="index")
    params = jax.tree.map(lambda a, b: jnp.stack([a, b]), env.make_params(slip=0.0), env.make_params(slip=1.0))
    step = lambda p: env.step(jax.random.key(0), _state(env, 4), jnp.int32(5), p)
    _, _, _, _, _, info = jax.vmap(step)(params)
    assert int(info["move"][0]) == 5 and int(info["move"][1]) != 5


def test_encoders_shapes_and_ranges():
    params = None
    for name, shape, dtype in (
        ("xy", (2,), jnp.float32),
        ("xyt", (3,), jnp.float32),
        ("one_hot", (9,), jnp.float32),
        ("index", (), jnp.int32),
    ):
        env = GridWorld(size=3, horizon=4, observation=name)
        params = env.default_params
        assert env.observation_shape == shape and env.observation_dtype == dtype
        states = GridState(index=jnp.array([0, 8, 5]), time=jnp.array([0, 4, 2]))  # (row, col) (0,0) (2,2) (1,2)
        obs = np.asarray(jax.vmap(env.observation, in_axes=(0, None))(states, params))
        assert obs.shape == (3, *shape) and obs.dtype == dtype
        if name == "xy":
            np.testing.assert_allclose(obs, [[0, 0], [1, 1], [1, 0.5]])
        elif name == "xyt":
            np.testing.assert_allclose(obs, [[0, 0, 0], [1, 1, 1], [1, 0.5, 0.5]])
        elif name == "one_hot":
            np.testing.assert_array_equal(obs.argmax(-1), [0, 8, 5])
            np.testing.assert_array_equal(obs.sum(-1), 1)
        else:
            np.testing.assert_array_equal(obs, [0, 8, 5])


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(size=1), "size"),
        (dict(size=2.5), "size"),
        (dict(horizon=0), "horizon"),
        (dict(num_constraints=0), "num_constraints"),
        (dict(observation="pixels"), "observation"),
        (dict(slip=1.5), "slip"),
        (dict(slip=-0.1), "slip"),
        (dict(alpha=-1.0), "alpha"),
        (dict(alpha=[1.0, 2.0]), "alpha"),
        (dict(layout_seed=-1), "layout_seed"),
        (dict(num_phases=0), "num_phases"),
        (dict(horizon=3, num_phases=4), "num_phases"),
        (dict(num_hotspots=0), "num_hotspots"),
        (dict(num_quiet=-1), "num_quiet"),
    ],
)
def test_constructor_validation(kwargs, field):
    with pytest.raises(ValueError, match=field):
        GridWorld(**kwargs)


def test_params_validation():
    env = GridWorld(size=3, horizon=2)
    good = dict(reward_map=np.zeros((2, 9)), cost_map=np.zeros((1, 2, 9)), thresholds=1.0)
    env.params_from_maps(**good)
    for change, field in (
        (dict(reward_map=np.zeros((2, 8))), "reward_map"),
        (dict(cost_map=np.zeros((2, 2, 9))), "cost_map"),
        (dict(thresholds=-1.0), "thresholds"),
        (dict(terminal_rewards=np.zeros(3)), "terminal_rewards"),
        (dict(terminal_costs=np.zeros(9)), "terminal_costs"),
        (dict(initial_distribution=np.full(9, 0.5)), "initial_distribution"),
        (dict(reward_map=np.full((2, 9), np.nan)), "reward_map"),
        (dict(slip=2.0), "slip"),
    ):
        with pytest.raises(ValueError, match=field):
            env.params_from_maps(**{**good, **change})
    with pytest.raises(ValueError, match=r"alpha must be a number >= 0, found -3"):
        env.make_params(alpha=-3)


def test_layouts_move_and_fares_sit_in_congestion():
    env = GridWorld()
    params = env.default_params
    r, g = np.asarray(params.reward_map), np.asarray(params.cost_map[0])
    phases = [r[h] for h in range(0, 100, 20)]
    assert all(not np.array_equal(phases[i], phases[i + 1]) for i in range(4))
    assert np.array_equal(r[0], r[19]) and not np.array_equal(r[19], r[20])
    for h in (0, 50, 99):  # every top fare pays a cost; cost-free fares are worth less
        assert np.all(g[h][r[h] >= 0.8] == 1) and np.all(r[h][(r[h] > 0) & (g[h] == 0)] < 0.8)
    assert env.make_params(layout_seed=1).reward_map.tolist() != params.reward_map.tolist()


def test_default_layout_constraint_binds():
    """The paper's setting must be a real trade-off (unconstrained cost >= 1.5 alpha, >= 5%
    reward lost to the constraint) with a non-stationary optimum."""
    from fhc_jax.cmdp.solve import solve, solve_unconstrained

    env = GridWorld()
    cmdp = env.to_cmdp(env.default_params)
    free, best = solve_unconstrained(cmdp), solve(cmdp)
    assert free.costs[0] >= 1.5 * 25.0
    assert best.costs[0] <= 25.0 + 1e-6 and best.reward <= 0.95 * free.reward
    with jax.enable_x64(True):
        frozen = np.broadcast_to(best.policy[:1], best.policy.shape)
        assert float(evaluate(cmdp.astype(jnp.float64), jnp.asarray(frozen)).reward) < 0.5 * best.reward
