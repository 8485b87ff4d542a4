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


@pytest.mark.slow
def test_box_environment_trained_and_evaluated_from_the_cli(tmp_path, capsys, algo="ppo-lag"):
    """``fhc-jax train`` on a user's box-action environment with default inputs ("auto"
    observation): Monte-Carlo judgement in summary.json, then ``fhc-jax eval`` of the run."""
    import json

    from fhc_jax.cli import main

    out = tmp_path / "reach"
    argv = [
        "train",
        "--algo",
        algo,
        "--env",
        "box_task:Reach",
        "--seeds",
        "2",
        "--set",
        "num_iterations=3",
        "--set",
        "episodes_per_iteration=16",
        "--set",
        "eval_episodes=64",
        "--set",
        "run.eval_episodes=500",
        "--out",
        str(out),
        "--quiet",
        "--no-plots",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    rows = summary["seeds"]
    assert all(r["judged_by"].startswith("monte-carlo") for r in rows), [r["judged_by"] for r in rows]
    assert len(rows) == 2 and all(np.isfinite(r["exact_reward"]) and len(r["costs_ci95"]) == 1 for r in rows)
    assert all(r["feasible"] == (r["costs_ci95"][0][1] <= 1.02) for r in rows)
    assert main(["eval", str(out), "--episodes", "200"]) == 0, capsys.readouterr().err
    assert "monte-carlo (200 episodes)" in capsys.readouterr().out
