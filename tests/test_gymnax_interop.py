"""gymnax interoperability: from_gymnax steps exactly as the wrapped environment and is absorbing
after termination; to_gymnax episodes (auto-reset, terminal values) match fhc_jax.evaluate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.envs.gymnax_interop import GymnaxEnv, from_gymnax, to_gymnax

gymnax = pytest.importorskip("gymnax")


def position_cost(state, action, next_state, params):
    return (jnp.abs(next_state.x) > 0.02).astype(jnp.float32)[None]


class CartPoleWithCost(gymnax.environments.classic_control.cartpole.CartPole):
    """CartPole reporting a cost in its info dict (the safe-RL suites' convention)."""

    def step_env(self, key, state, action, params):
        obs, new, reward, done, info = super().step_env(key, state, action, params)
        return obs, new, reward, done, {**info, "cost": jnp.stack([new.x**2, jnp.abs(new.theta)])}


def _reference(gx, env_params, key, actions):
    """gymnax's own reset_env / step_env with the keys the wrapper gets: (obs, reward, terminated)."""
    reset_key, steps_key = jax.random.split(key)
    obs, state = gx.reset_env(reset_key, env_params)

    def body(state, xs):
        k, a = xs
        obs, state, reward, terminated, info = gx.step_env(k, state, a, env_params)
        return state, (obs, reward, terminated, info)

    _, out = jax.lax.scan(body, state, (jax.random.split(steps_key, actions.shape[0]), actions))
    return obs, out


def _wrapped(env, params, key, actions):
    reset_key, steps_key = jax.random.split(key)
    obs, state = env.reset(reset_key, params)

    def body(state, xs):
        k, a = xs
        obs, state, reward, costs, done, _ = env.step(k, state, a, params)
        return state, (obs, reward, costs, done, state.terminated, state.time)

    _, out = jax.lax.scan(body, state, (jax.random.split(steps_key, actions.shape[0]), actions))
    return obs, out


@pytest.mark.parametrize("use_info", [False, True])
def test_from_gymnax_steps_as_gymnax_then_absorbs(use_info):
    gx = CartPoleWithCost() if use_info else gymnax.make("CartPole-v1")[0]
    env = from_gymnax(gx, horizon=60, cost_fn=None if use_info else position_cost)
    assert env.num_constraints == (2 if use_info else 1) and env.observation_shape == (4,)
    params = env.default_params
    actions = jnp.ones(60, jnp.int32)  # always push right: the pole falls within the horizon
    key = jax.random.key(3)
    obs0, (obs, rew, costs, done, ended, time) = jax.jit(_wrapped, static_argnums=0)(env, params, key, actions)
    ref_obs0, (r_obs, r_rew, r_term, r_info) = jax.jit(_reference, static_argnums=0)(
        gx, params.env_params, key, actions
    )
    r_term = np.asarray(r_term)
    t = int(np.argmax(r_term))  # first terminal transition
    assert r_term[t] and 5 < t < 50
    np.testing.assert_array_equal(obs0, ref_obs0)
    np.testing.assert_array_equal(obs[: t + 1], r_obs[: t + 1])
    np.testing.assert_array_equal(rew[: t + 1], r_rew[: t + 1])
    ref_costs = r_info["cost"] if use_info else (np.abs(np.asarray(r_obs)[:, :1]) > 0.02).astype(np.float32)
    np.testing.assert_allclose(costs[: t + 1], np.asarray(ref_costs)[: t + 1], rtol=1e-6)
    # absorbing after termination: same observation, no reward, no cost
    np.testing.assert_array_equal(obs[t + 1 :], np.broadcast_to(obs[t], obs[t + 1 :].shape))
    assert np.all(np.asarray(rew[t + 1 :]) == 0) and np.all(np.asarray(costs[t + 1 :]) == 0)
    np.testing.assert_array_equal(ended, np.arange(60) >= t)
    np.testing.assert_array_equal(time, np.arange(1, 61))
    np.testing.assert_array_equal(done, np.arange(1, 61) == 60)
    assert np.asarray(costs[: t + 1]).sum() > 0


def test_from_gymnax_uses_the_step_key():
    """Acrobot with torque noise: transitions depend on the key, and match gymnax's with that key."""
    gx, gx_params = gymnax.make("Acrobot-v1")
    gx_params = gx_params.replace(torque_noise_max=0.5)
    env = from_gymnax(gx, gx_params, horizon=30, cost_fn=lambda s, a, n, p: (a != 1).astype(jnp.float32)[None])
    actions = jax.random.randint(jax.random.key(1), (30,), 0, 3)
    key = jax.random.key(7)
    _, (obs, rew, costs, *_) = _wrapped(env, env.default_params, key, actions)
    _, (r_obs, r_rew, _, _) = _reference(gx, gx_params, key, actions)
    np.testing.assert_array_equal(obs, r_obs)
    np.testing.assert_array_equal(rew, r_rew)
    np.testing.assert_array_equal(costs[:, 0], np.asarray(actions != 1, np.float32))
    _, (other, *_) = _wrapped(env, env.default_params, jax.random.key(8), actions)
    assert not np.allclose(other, obs)


def test_rollout_returns_on_a_wrapped_env_follows_the_documented_keys():
    env = from_gymnax(gymnax.make("CartPole-v1")[0], horizon=80, cost_fn=position_cost)
    params = env.default_params
    right = lambda key, obs, h: jnp.ones((), jnp.int32)
    key, k = jax.random.key(11), 64
    got = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(key, env, params, right, k)

    def manual(episode_key):  # rollout's documented randomness: (reset, steps); steps -> (H, 2) keys
        reset_key, steps_key = jax.random.split(episode_key)
        obs, state = env.reset(reset_key, params)
        stage_keys = jax.random.split(steps_key, (env.horizon, 2))

        def body(c, ks):
            state, r, g = c
            _, state, rew, cost, _, _ = env.step(ks[1], state, jnp.ones((), jnp.int32), params)
            return (state, r + rew, g + cost), None

        (_, r, g), _ = jax.lax.scan(body, (state, 0.0, jnp.zeros(1)), stage_keys)
        return r, g

    want_r, want_g = jax.jit(jax.vmap(manual))(jax.random.split(key, k))
    np.testing.assert_allclose(got.rewards, want_r, rtol=1e-6)
    np.testing.assert_allclose(got.costs, want_g, rtol=1e-6)
    assert 5 < float(got.rewards.mean()) < 60  # terminated well before H = 80, absorbing afterwards


def test_rollout_on_a_wrapped_env():
    env = from_gymnax(gymnax.make("CartPole-v1")[0], horizon=40, cost_fn=position_cost, alpha=3.0)
    params, policy = env.default_params, fhc.uniform_random_policy(2)
    np.testing.assert_array_equal(env.thresholds(params), [3.0])
    run = jax.jit(lambda k: (fhc.rollout(k, env, params, policy, 32), fhc.rollout_returns(k, env, params, policy, 32)))
    traj, totals = run(jax.random.key(0))
    assert traj.observations.shape == (32, 40, 4) and traj.costs.shape == (32, 40, 1)
    np.testing.assert_allclose(traj.episode_rewards, totals.rewards, rtol=1e-6)
    np.testing.assert_allclose(traj.episode_costs, totals.costs, rtol=1e-6)
    # CartPole pays 1 per stage until it falls, then nothing: rewards are 1...1 0...0
    rewards = np.asarray(traj.rewards)
    assert np.all(np.diff(rewards, axis=1) <= 0) and set(np.unique(rewards)) <= {0.0, 1.0}
    fell = rewards[:, -1] == 0
    assert fell.any()
    lengths = rewards.sum(1).astype(int)
    obs = np.asarray(traj.observations)
    for i in np.flatnonzero(fell)[:4]:  # the observation freezes once the episode has ended
        assert np.all(obs[i, lengths[i] + 1 :] == obs[i, lengths[i]])


def test_from_gymnax_errors():
    cartpole = gymnax.make("CartPole-v1")[0]
    with pytest.raises(ValueError, match="horizon must be an integer >= 1"):
        from_gymnax(cartpole, horizon=0, cost_fn=position_cost)
    with pytest.raises(ValueError, match="no cost.*'cost'"):
        from_gymnax(cartpole, horizon=10)
    with pytest.raises(ValueError, match="no cost.*'risk'"):
        from_gymnax(CartPoleWithCost(), horizon=10, cost_key="risk")
    with pytest.raises(ValueError, match=r"shape \(\) \(one constraint\) or \(M,\).*found \(1, 1\)"):
        from_gymnax(cartpole, horizon=10, cost_fn=lambda s, a, n, p: jnp.abs(n.x).reshape(1, 1))
    assert (
        from_gymnax(cartpole, horizon=10, cost_fn=lambda s, a, n, p: jnp.abs(n.x)).num_constraints == 1
    )  # () is M = 1
    with pytest.raises(ValueError, match=r"shape \(\) or \(1,\), found \(2,\)"):
        from_gymnax(CartPoleWithCost(), horizon=10, num_constraints=1)
    with pytest.raises(ValueError, match="float array.*int32"):
        from_gymnax(cartpole, horizon=10, cost_fn=lambda s, a, n, p: (jnp.abs(n.x) > 1).astype(jnp.int32)[None])

    class TupleActions(type(cartpole)):  # box actions are taken (tests/test_box_environments.py), tuples not
        def action_space(self, params=None):
            return gymnax.environments.spaces.Tuple([gymnax.environments.spaces.Discrete(2)] * 2)

    with pytest.raises(ValueError, match="Discrete or a bounded Box.*Tuple action space"):
        from_gymnax(TupleActions(), horizon=10, cost_fn=position_cost)
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0"):
        from_gymnax(cartpole, horizon=10, cost_fn=position_cost, alpha=-1.0)
    with pytest.raises(ValueError, match="gymnax Environment"):
        from_gymnax(fhc.GridWorld(size=2, horizon=2), horizon=2, cost_fn=position_cost)
    with pytest.raises(ValueError, match="fhc_jax.envs.Environment"):
        to_gymnax(cartpole)


def test_registered_gymnax_tasks():
    from fhc_jax.experiment.config import make_env
    from fhc_jax.experiment.typed_settings import ConfigError

    env, params = make_env("gymnax:CartPole-v1", {"horizon": 20, "cost": "angle"})
    assert isinstance(env, GymnaxEnv) and env.horizon == 20 and float(params.thresholds[0]) == 10.0
    env, params = make_env("gymnax:Acrobot-v1", {"horizon": 5})
    assert env.num_actions == 3 and env.observation_shape == (6,) and float(params.thresholds[0]) == 100.0
    env, params = make_env("gymnax:MountainCar-v0", {"horizon": 5})
    push = lambda key, obs, h: jnp.where(h % 2 == 0, 2, 1).astype(jnp.int32)
    out = jax.jit(lambda k: fhc.rollout_returns(k, env, params, push, 8))(jax.random.key(0))
    np.testing.assert_array_equal(out.rewards, -5.0)  # far from the flag: -1 per stage
    np.testing.assert_array_equal(out.costs, 3.0)  # pushes at stages 0, 2, 4
    with pytest.raises(ConfigError, match="cost must be one of 'position', 'angle'"):
        make_env("gymnax:CartPole-v1", {"cost": "speed"})


def _uniform_episodes(gx, params, key, num_envs, num_episodes, horizon, num_actions):
    """Auto-resetting gymnax loop of num_envs x (num_episodes x horizon) steps, uniform actions."""

    def one(key):
        k_reset, k_loop = jax.random.split(key)
        _, state = gx.reset(k_reset, params)

        def body(state, k):
            k_act, k_step = jax.random.split(k)
            a = jax.random.randint(k_act, (), 0, num_actions)
            obs, state, r, term, trunc, info = gx.step(k_step, state, a, params)
            return state, (r, info["cost"], term, trunc, state.time)

        return jax.lax.scan(body, state, jax.random.split(k_loop, num_episodes * horizon))[1]

    return jax.jit(jax.vmap(one))(jax.random.split(key, num_envs))


def test_to_gymnax_matches_exact_evaluation():
    env = fhc.GridWorld(size=3, horizon=5)
    base = env.default_params
    rng = np.random.default_rng(0)
    params = env.params_from_maps(  # terminal values and a non-uniform start make the test sharp
        base.reward_map,
        base.cost_map,
        base.thresholds,
        terminal_rewards=rng.uniform(0, 3, 9),
        terminal_costs=rng.uniform(0, 2, (1, 9)),
        initial_distribution=np.array([0.5, 0.3, 0, 0, 0, 0, 0, 0, 0.2]),
        slip=0.1,
    )
    gx = to_gymnax(env)
    gparams = gx.default_params.replace(env_params=params)
    assert gx.default_params.max_steps_in_episode == 5
    assert gx.observation_space(gparams).shape == (2,) and gx.action_space(gparams).n == 9
    k, e, h = 2000, 4, 5
    r, c, term, trunc, time = _uniform_episodes(gx, gparams, jax.random.key(0), k, e, h, 9)
    ends = np.arange(1, e * h + 1) % h == 0
    np.testing.assert_array_equal(np.asarray(term), np.broadcast_to(ends, (k, e * h)))  # auto-reset every H
    np.testing.assert_array_equal(np.asarray(trunc), np.asarray(term))
    np.testing.assert_array_equal(np.asarray(time)[0], np.where(ends, 0, np.arange(1, e * h + 1) % h))
    ep_r = np.asarray(r).reshape(k * e, h).sum(1)
    ep_c = np.asarray(c).reshape(k * e, h, 1).sum(1)
    exact = fhc.evaluate(env.to_cmdp(params), jnp.full((h, 9, 9), 1 / 9))
    for sample, want in ((ep_r, float(exact.reward)), (ep_c[:, 0], float(exact.costs[0]))):
        se = sample.std(ddof=1) / np.sqrt(sample.size)
        assert abs(sample.mean() - want) < 4 * se, (sample.mean(), want, se)
    # the terminal terms matter: without them the exact means are many standard errors away
    bare = fhc.evaluate(
        env.to_cmdp(
            params.replace(terminal_rewards=0 * params.terminal_rewards, terminal_costs=0 * params.terminal_costs)
        ),
        jnp.full((h, 9, 9), 1 / 9),
    )
    assert abs(ep_r.mean() - float(bare.reward)) > 20 * ep_r.std() / np.sqrt(ep_r.size)
    assert abs(ep_c.mean() - float(bare.costs[0])) > 20 * ep_c.std() / np.sqrt(ep_c.size)


def test_params_and_static_configuration_are_checked():
    """Issue 33 items 4 and 7: from_gymnax's params are checked where they come in (reset,
    step, the rollouts), and to_gymnax refuses an environment whose horizon is not an int."""
    gx, gx_params = gymnax.make("CartPole-v1")
    env = from_gymnax(gx, gx_params, horizon=5, cost_fn=position_cost, alpha=1.0)
    params = env.default_params
    with pytest.raises(ValueError, match=r"from_gymnax.reset: params.thresholds \(alpha\) must be finite and >= 0"):
        env.reset(jax.random.key(0), params.replace(thresholds=jnp.array([-1.0])))
    with pytest.raises(ValueError, match=r"params.thresholds has shape \(2,\); .* expects \(1,\)"):
        fhc.rollout_returns(jax.random.key(0), env, params.replace(thresholds=jnp.ones(2)), fhc.random_policy(env), 4)
    with pytest.raises(ValueError, match="params must be a GymnaxParams pytree"):
        env.reset(jax.random.key(0), gx_params)

    class FloatHorizon(fhc.GridWorld):
        horizon = property(lambda self: 3.0)

    floating = FloatHorizon.__new__(FloatHorizon)
    with pytest.raises(ValueError, match=r"to_gymnax: FloatHorizon.horizon must be a positive int, found 3.0"):
        to_gymnax(floating)
