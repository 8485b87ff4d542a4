"""from_brax: a Brax environment steps in fhc_jax exactly as in Brax's own loop (states,
observations, rewards, costs), absorbing after Brax ends an episode; costs from cost_fn or
state.info (scalar or (M,)); box actions in [-1, 1] for the Gaussian learners; --env brax:NAME.

The environment is Brax's ``inverted_pendulum`` on the "spring" pipeline (the cheapest on CPU:
compiles in seconds, ~300k steps/s on 2 cores). Every test but the first needs brax
(``pip install 'fhc_jax[brax]'``, docs/brax.md) and is skipped without it.
"""

from __future__ import annotations

import importlib.util
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc

HAVE_BRAX = importlib.util.find_spec("brax") is not None
needs_brax = pytest.mark.skipif(not HAVE_BRAX, reason="brax is not installed (pip install 'fhc_jax[brax]')")
H = 40


def test_missing_brax_is_one_clear_line(monkeypatch):
    """Without brax: from_brax's module imports, and what needs brax says how to install it."""
    from fhc_jax.envs import brax_interop
    from fhc_jax.experiment.config import EnvironmentImportError, load_environment

    monkeypatch.setitem(sys.modules, "brax", None)  # import brax -> ImportError
    monkeypatch.setattr("fhc_jax.experiment.config._ENTRIES", {})
    with pytest.raises(ImportError, match=r"pip install 'fhc_jax\[brax\]'"):
        brax_interop.brax_task("inverted_pendulum")
    with pytest.raises(EnvironmentImportError, match=r"env 'brax:inverted_pendulum': .*pip install 'fhc_jax\[brax\]'"):
        load_environment("brax:inverted_pendulum")


def cart_costs(state, action, next_state):
    """Two constraints on the Brax states and the action: the cart's kinetic energy (qd[0]^2
    of the next state) and the control effort |a|^2."""
    return jnp.stack([jnp.square(next_state.pipeline_state.qd[0]), jnp.sum(jnp.square(action))])


def policy(key, obs, h):
    """A stochastic linear controller (float32 (1,)), sometimes out of [-1, 1] (clipped)."""
    mean = jnp.tanh(jnp.dot(obs, jnp.array([0.5, 4.0, 0.3, 0.6])))
    return (1.2 * mean + 0.6 * jax.random.normal(key, (1,))).astype(jnp.float32)


@pytest.fixture(scope="module")
def pendulum():
    from brax import envs

    return envs.get_environment("inverted_pendulum", backend="spring")


def brax_loop(benv, key, horizon):
    """Brax's own loop with fhc_jax's documented randomness (fhc_jax.rollout): reset from
    split(key)[0], stage h's action from policy(split(split(key)[1], (H, 2))[h, 0], obs, h),
    brax step on the clipped action. Returns (obs (H+1, 4), q (H+1, 2), rewards (H,),
    done (H,), costs (H, 2)) with nothing masked."""
    reset_key, steps_key = jax.random.split(key)
    state = benv.reset(reset_key)
    keys = jax.random.split(steps_key, (horizon, 2))

    def body(state, xs):
        h, k = xs
        a = jnp.clip(policy(k[0], state.obs, h), -1.0, 1.0)
        new = benv.step(state, a)
        return new, (
            new.obs,
            new.pipeline_state.q,
            jnp.asarray(new.reward, jnp.float32),
            new.done,
            cart_costs(state, a, new),
        )

    _, (obs, q, rewards, done, costs) = jax.lax.scan(body, state, (jnp.arange(horizon, dtype=jnp.int32), keys))
    return (
        jnp.concatenate([state.obs[None], obs]),
        jnp.concatenate([state.pipeline_state.q[None], q]),
        rewards,
        done,
        costs,
    )


@needs_brax
@pytest.mark.as_users_compile  # bit for bit as users compile (XLA's lowest level rounds the two programs apart)
def test_rollout_matches_brax_own_loop_then_absorbs(pendulum):
    env = fhc.envs.from_brax(pendulum, horizon=H, cost_fn=cart_costs, alpha=[2.0, 10.0])
    params = env.default_params
    assert env.action_space == fhc.envs.Box((-1.0,), (1.0,)) and env.observation_shape == (4,)
    assert env.num_constraints == 2 and env.thresholds(params).tolist() == [2.0, 10.0]
    key = jax.random.key(2)
    traj = jax.jit(lambda k: fhc.rollout(k, env, params, policy, 3))(key)
    ref = jax.jit(jax.vmap(lambda k: brax_loop(pendulum, k, H)))(jax.random.split(key, 3))
    r_obs, r_q, r_rew, r_done, r_costs = (np.asarray(x) for x in ref)

    # the same states through the wrapper's own step (pipeline q, stage, absorbing flag)
    def wrapped(k):
        reset_key, steps_key = jax.random.split(k)
        _, state = env.reset(reset_key, params)
        keys = jax.random.split(steps_key, (H, 2))

        def body(state, xs):
            h, kk = xs
            _, state, *_ = env.step(kk[1], state, policy(kk[0], env.observation(state, params), h), params)
            return state, (state.brax_state.pipeline_state.q, state.terminated, state.time)

        return jax.lax.scan(body, state, (jnp.arange(H, dtype=jnp.int32), keys))[1]

    q, terminated, time = (np.asarray(x) for x in jax.jit(jax.vmap(wrapped))(jax.random.split(key, 3)))
    obs, rewards, costs = np.asarray(traj.observations), np.asarray(traj.rewards), np.asarray(traj.costs)
    ends = []
    for i in range(3):
        t = int(np.argmax(r_done[i] > 0)) if np.any(r_done[i] > 0) else H - 1  # the terminal transition
        ends.append(t)
        live = slice(0, t + 1)
        # up to and including Brax's terminal transition: bit for bit Brax's own loop
        np.testing.assert_array_equal(obs[i, : t + 1], r_obs[i, : t + 1])
        np.testing.assert_array_equal(rewards[i, live], r_rew[i, live])
        np.testing.assert_array_equal(costs[i, live], r_costs[i, live])
        np.testing.assert_array_equal(q[i, live], r_q[i, 1 : t + 2])
        # then absorbing: the terminal state and observation stay, nothing is paid
        np.testing.assert_array_equal(obs[i, t + 1 :], np.broadcast_to(r_obs[i, t + 1], obs[i, t + 1 :].shape))
        np.testing.assert_array_equal(q[i, t:], np.broadcast_to(r_q[i, t + 1], q[i, t:].shape))
        assert np.all(rewards[i, t + 1 :] == 0) and np.all(costs[i, t + 1 :] == 0)
        np.testing.assert_array_equal(terminated[i], np.arange(H) >= t if np.any(r_done[i] > 0) else False)
        np.testing.assert_array_equal(time[i], np.arange(1, H + 1))
        np.testing.assert_array_equal(traj.episode_rewards[i], t + 1)  # 1 per stage while the pole is up
    assert min(ends) < H - 1 and costs[..., 1].max() > 0  # the pole fell in some episode; the effort was paid
    np.testing.assert_array_equal(np.asarray(traj.final_observations), r_obs[np.arange(3), np.array(ends) + 1])
    # proposed actions are recorded as the policy gave them; the environment clipped them
    assert np.abs(np.asarray(traj.actions)).max() > 1.0
    np.testing.assert_array_less(costs[..., 1], 1.0 + 1e-6)


def pendulum_with_info_cost():
    """Brax's inverted pendulum reporting a SCALAR cost in state.info (safenax's convention):
    1 per stage with the cart beyond |x| > 0.05."""
    from brax.envs.inverted_pendulum import InvertedPendulum

    class WithCost(InvertedPendulum):
        def reset(self, rng):
            state = super().reset(rng)
            return state.replace(info={**state.info, "cost": jnp.zeros(())})

        def step(self, state, action):
            new = super().step(state, action)
            return new.replace(info={**new.info, "cost": (jnp.abs(new.obs[0]) > 0.05).astype(jnp.float32)})

    return WithCost(backend="spring")


@needs_brax
def test_scalar_info_cost_is_one_constraint():
    benv = pendulum_with_info_cost()
    env = fhc.envs.from_brax(benv, horizon=H, alpha=3.0)
    assert env.num_constraints == 1
    traj = jax.jit(lambda k: fhc.rollout(k, env, env.default_params, policy, 16))(jax.random.key(0))
    obs, costs, rewards = np.asarray(traj.observations), np.asarray(traj.costs), np.asarray(traj.rewards)
    assert costs.shape == (16, H, 1)
    # the cost of stage h is read from the state stage h arrives at (obs[h + 1]), while alive
    nxt = np.concatenate([obs[:, 1:], np.asarray(traj.final_observations)[:, None]], axis=1)
    want = ((np.abs(nxt[..., 0]) > 0.05) & (rewards > 0)).astype(np.float32)
    np.testing.assert_array_equal(costs[..., 0], want)
    assert 0 < want.sum() < want.size
    with pytest.raises(ValueError, match=r"state.info\['cost'\] must have shape \(M,\) = \(2,\), found \(\)"):
        fhc.envs.from_brax(benv, horizon=H, num_constraints=2)


@needs_brax
def test_from_brax_refuses_what_it_cannot_wrap(pendulum):
    from brax import envs

    with pytest.raises(ValueError, match="horizon must be an integer >= 1"):
        fhc.envs.from_brax(pendulum, horizon=0, cost_fn=cart_costs)
    with pytest.raises(ValueError, match=r"no cost: .*'cost'.*info keys: \['time_out'\]"):
        fhc.envs.from_brax(pendulum, horizon=5)
    with pytest.raises(ValueError, match="wrapped by AutoResetWrapper"):
        fhc.envs.from_brax(envs.create("inverted_pendulum", backend="spring"), horizon=5, cost_fn=cart_costs)
    with pytest.raises(ValueError, match=r"cost_fn must have shape \(\) \(one constraint\) or \(M,\).*\(2, 1\)"):
        fhc.envs.from_brax(pendulum, horizon=5, cost_fn=lambda s, a, n: jnp.zeros((2, 1)))
    with pytest.raises(ValueError, match="must be a Brax Env"):
        fhc.envs.from_brax(fhc.GridWorld(size=3, horizon=4), horizon=5, cost_fn=cart_costs)
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0"):
        fhc.envs.from_brax(pendulum, horizon=5, cost_fn=cart_costs, alpha=-1.0)
    env = fhc.envs.from_brax(pendulum, horizon=5, cost_fn=cart_costs)
    with pytest.raises(ValueError, match="box"):
        _ = env.num_actions
    with pytest.raises(ValueError, match=r"params.thresholds \(alpha\) must be finite and >= 0"):
        env.reset(jax.random.key(0), env.default_params.replace(thresholds=jnp.array([-1.0, 0.0])))


@needs_brax
def test_command_line_name():
    from fhc_jax.experiment.config import ConfigError, make_env

    env, params = make_env("brax:inverted_pendulum", {"horizon": 30, "alpha": 4.0, "backend": "spring"})
    assert isinstance(env, fhc.envs.BraxEnv) and env.horizon == 30 and params.thresholds.tolist() == [4.0]
    ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(jax.random.key(0), env, params, policy, 8)
    effort = jax.jit(fhc.rollout, static_argnums=(1, 3, 4))(jax.random.key(0), env, params, policy, 8)
    clipped = np.clip(np.asarray(effort.actions)[..., 0], -1, 1) ** 2 * (np.asarray(effort.rewards) > 0)
    np.testing.assert_allclose(np.asarray(ret.costs)[:, 0], clipped.sum(1), rtol=1e-5)  # cost "control" = |a|^2
    with pytest.raises(ConfigError, match="unknown Brax environment 'pendulum'; Brax registers: .*inverted_pendulum"):
        make_env("brax:pendulum", {})
    with pytest.raises(ConfigError, match="cost must be one of 'control', 'info'"):
        make_env("brax:inverted_pendulum", {"cost": "speed"})
    with pytest.raises(ConfigError, match="backend must be one of"):
        make_env("brax:inverted_pendulum", {"backend": "euler"})
    with pytest.raises(ConfigError, match="no cost"):
        make_env("brax:inverted_pendulum", {"cost": "info", "backend": "spring"})


def _train(module, env, config, seeds: int):
    train = module.make_train(env, env.default_params, config)
    return jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), seeds))


@needs_brax
@pytest.mark.slow
def test_a_gaussian_learner_trains_on_a_brax_env(pendulum):
    """PPO-Lagrangian (Gaussian policy on the box actions) runs on the wrapped Brax environment:
    a few updates, finite metrics, and its policy plays in the environment."""
    from fhc_jax.algos import ppo_lagrangian as pl

    env = fhc.envs.from_brax(pendulum, horizon=20, cost_fn=cart_costs, alpha=[1.0, 5.0])
    out = _train(pl, env, pl.Config(num_iterations=3, episodes_per_iteration=16), 1)
    assert np.all(np.isfinite(np.asarray(out.metrics.reward))) and np.asarray(out.metrics.reward).shape[:2] == (1, 3)
    state = jax.tree.map(lambda x: x[0], out.state)
    ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
        jax.random.key(1), env, env.default_params, pl.policy(state, env, env.default_params), 64
    )
    assert np.all(np.isfinite(np.asarray(ret.rewards))) and np.asarray(ret.costs).shape == (64, 2)


@needs_brax
@pytest.mark.slow
@pytest.mark.parametrize("name", ["nn_constrained", "ecop", "cpo", "saute"])
def test_every_gaussian_learner_runs_on_a_brax_env(pendulum, name):
    import importlib

    module = importlib.import_module(f"fhc_jax.algos.{name}")
    kinetic = lambda s, a, n: jnp.square(n.pipeline_state.qd[0])  # one constraint
    env = fhc.envs.from_brax(pendulum, horizon=10, cost_fn=kinetic, alpha=1.0)
    out = _train(module, env, module.Config(num_iterations=2, episodes_per_iteration=8), 1)
    assert np.all(np.isfinite(np.asarray(out.metrics.reward)))
