"""The learner scaffold and rollouts with box action spaces (fhc_jax.envs.spaces.Box)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from box_task import Reach

import fhc_jax as fhc
from fhc_jax.algos import fh_constrained


def test_fh_constrained_refuses_box_actions_before_compiling():
    env = Reach()
    with pytest.raises(ValueError, match="fh_constrained takes discrete actions only.*Reach has continuous"):
        fh_constrained.make_train(env, env.default_params, fh_constrained.Config())


def test_rollout_records_box_actions_unclipped_and_the_environment_clips():
    env = Reach()
    params = env.default_params
    push = lambda key, obs, h: jnp.array([5.0])  # beyond the box: the environment plays 1.0
    traj = jax.jit(lambda k: fhc.rollout(k, env, params, push, 16))(jax.random.key(0))
    assert traj.actions.dtype == jnp.float32 and traj.actions.shape == (16, env.horizon, 1)
    np.testing.assert_allclose(traj.actions, 5.0)
    np.testing.assert_allclose(traj.costs, 1.0)  # cost a^2 of the clipped action
    returns = jax.jit(lambda k: fhc.rollout_returns(k, env, params, push, 16))(jax.random.key(0))
    np.testing.assert_allclose(returns.rewards, traj.episode_rewards, rtol=1e-5)


def test_random_policy_is_uniform_in_the_box():
    env = Reach()
    traj = jax.jit(lambda k: fhc.rollout(k, env, env.default_params, fhc.random_policy(env), 4096))(jax.random.key(1))
    a = np.asarray(traj.actions).ravel()
    assert a.min() >= -1.0 and a.max() <= 1.0
    assert abs(a.mean()) < 4 * np.sqrt(1 / 3 / a.size) and abs(a.var() - 1 / 3) < 0.01
    assert fhc.random_policy(fhc.GridWorld()) == fhc.uniform_random_policy(9)
