"""The API boundary (issue 33; docs/RELIABILITY.md, "The API boundary"): every case ends in the
correct result or an error naming the bad value and what is valid; inside a user's jax.jit, an
action error arrives as jax.errors.JaxRuntimeError whose message contains the same line."""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.envs.validation import InvalidActionError
from fhc_jax.rollout import NO_ACTION, episode

GRID = fhc.GridWorld(size=3, horizon=4)
GRID_PARAMS = GRID.default_params
KEY = jax.random.key(0)


def _returns(policy, k=8, env=GRID, params=GRID_PARAMS):
    return fhc.rollout_returns(KEY, env, params, policy, k)


def _jitted_returns(policy, k=8, env=GRID, params=GRID_PARAMS):
    return jax.jit(lambda key: fhc.rollout_returns(key, env, params, policy, k).rewards.mean())(KEY)


def _constant(action):
    return lambda key, obs, h: jnp.asarray(action)


@pytest.mark.slow
@pytest.mark.parametrize("action, shown", [(9, "action 9"), (-1, "action -1"), (100, "action 100")])
def test_out_of_range_actions_are_refused_eagerly_and_inside_jit(action, shown):
    """Issue 33 item 2: A, -1 or 100 on the 9-action gridworld was executed (as move 0 of the
    next state, ...). Now: the action, the stage, the episode and the valid range, eagerly;
    the same line from inside the user's jit; rollout, rollout_returns and episode alike."""
    policy = _constant(action)
    line = f"{shown} at stage 0 (episode 0); GridWorld takes integers in [0, 9)"
    with pytest.raises(InvalidActionError, match=re.escape(line)):
        _returns(policy)
    with pytest.raises(InvalidActionError, match=re.escape("rollout: the policy returned " + shown)):
        fhc.rollout(KEY, GRID, GRID_PARAMS, policy, 4)
    with pytest.raises(InvalidActionError, match=re.escape(f"episode: the policy returned {shown} at stage 0;")):
        episode(KEY, GRID, GRID_PARAMS, policy)
    with pytest.raises(jax.errors.JaxRuntimeError, match=re.escape(line)):
        _jitted_returns(policy)
    with pytest.raises(jax.errors.JaxRuntimeError, match=re.escape("rollout: the policy returned " + shown)):
        jax.block_until_ready(jax.jit(lambda key: fhc.rollout(key, GRID, GRID_PARAMS, policy, 4096))(KEY))


@pytest.mark.slow
def test_action_errors_under_vmap_name_one_offender_and_valid_actions_pass():
    """Under the user's vmap (here inside jit) the batch is reduced to one report; a policy
    whose actions are valid runs as before (the mean of 8 uniform episodes is a number)."""
    late = lambda key, obs, h: jnp.where(h == 2, 100, 4).astype(jnp.int32)
    batched = jax.jit(jax.vmap(lambda k: fhc.rollout_returns(k, GRID, GRID_PARAMS, late, 8).rewards.mean()))
    with pytest.raises(jax.errors.JaxRuntimeError, match=re.escape("action 100 at stage 2")):
        batched(jax.random.split(KEY, 3))
    valid = lambda key, obs, h: jax.random.randint(key, (), 0, 9)
    assert np.isfinite(float(_jitted_returns(valid))) and float(_jitted_returns(valid)) == float(
        _returns(valid).rewards.mean()
    )


@pytest.mark.slow
def test_float_actions_are_refused_while_tracing():
    """Issue 33 item 2: a float 2.7 from a discrete policy was truncated to 2."""
    with pytest.raises(
        InvalidActionError,
        match="has dtype float32.*GridWorld takes discrete actions, integers in "
        r"\[0, 9\)",
    ):
        _returns(_constant(2.7))
    with pytest.raises(InvalidActionError, match="has dtype float32"):
        _jitted_returns(_constant(2.7))
    with pytest.raises(InvalidActionError, match=r"has shape \(1,\)"):
        _returns(_constant(jnp.array([3])))
    with pytest.raises(ValueError, match=r"uniform_random_policy\(12\) draws actions in \[0, 12\)"):
        _returns(fhc.uniform_random_policy(12))


def test_environment_step_and_to_gymnax_refuse_bad_actions():
    """Issue 33 item 2: to_gymnax(GridWorld()).step(..., 9, ...) returned reward 0 and cost 1."""
    _, state = GRID.reset(KEY, GRID_PARAMS)
    with pytest.raises(
        InvalidActionError,
        match=re.escape("GridWorld.step: action 9 is outside the action space of GridWorld: integers in [0, 9)"),
    ):
        GRID.step(KEY, state, 9, GRID_PARAMS)
    with pytest.raises(jax.errors.JaxRuntimeError, match="action 9 is outside"):
        jax.block_until_ready(jax.jit(GRID.step)(KEY, state, jnp.int32(9), GRID_PARAMS))
    with pytest.raises(InvalidActionError, match=r"dtype float32 \(found 2.7"):
        GRID.step(KEY, state, 2.7, GRID_PARAMS)
    gx = fhc.envs.to_gymnax(fhc.GridWorld())
    gp = gx.default_params
    _, gstate = gx.reset(KEY, gp)
    with pytest.raises(jax.errors.JaxRuntimeError, match="action 9 is outside"):
        jax.block_until_ready(gx.step(KEY, gstate, 9, gp))
    with pytest.raises(InvalidActionError, match="dtype float32"):
        gx.step(KEY, gstate, 2.7, gp)
    reward = gx.step(KEY, gstate, 4, gp)[2]
    assert np.isfinite(float(reward))


@pytest.mark.slow
@pytest.mark.parametrize("k", [8, 64])  # 64 >= 2 S: the policy is played from its table over states
@pytest.mark.parametrize("fill", [np.nan, -np.inf])
def test_invalid_logits_raise_eagerly_and_poison_traced_returns(k, fill):
    """Issue 33 item 3: NaN or all -inf logits always gave action 0 and a plausible return
    (0.747). Now eagerly a ValueError naming the stage; traced, NaN returns (no host callback:
    a learner's divergence is still reported by its own metrics)."""
    policy = fhc.softmax_policy(lambda obs, h: jnp.where(h == 1, jnp.full(9, fill), jnp.zeros(9)))
    where = "at stage 1" if k == 8 else "at stage 1, state 0"
    with pytest.raises(ValueError, match=f"softmax_policy has no valid action {where}.*NaN or all -inf"):
        _returns(policy, k)
    assert np.isnan(float(_jitted_returns(policy, k)))
    assert int(policy(KEY, jnp.zeros(2), jnp.int32(1))) == NO_ACTION


@pytest.mark.parametrize("shape", [(12,), (2,), (9, 1)])
@pytest.mark.parametrize("k", [8, 64])
def test_logits_of_the_wrong_shape_are_refused_while_tracing(shape, k):
    """Issue 33 items 3 and 7: logits (A + 3,) drew actions 9-11; (2,) never drew 2-8;
    (A, 1) gave a raw scan-carry error."""
    policy = fhc.softmax_policy(lambda obs, h: jnp.zeros(shape))
    message = (
        r"logits_fn returns logits of shape \(9, 1\); expected \(A,\)"
        if len(shape) == 2
        else rf"logits of shape \({shape[0]},\); GridWorld has A = 9 actions: expected shape \(9,\)"
    )
    with pytest.raises(ValueError, match=message):
        _returns(policy, k)


def test_params_of_another_configuration_or_range_are_refused():
    """Issue 33 items 4 and 5: size-4 params in a size-3 environment rolled out (0.499 against
    0.986); BatteryStorage accepted capacity -1 (an 'optimal' 431) and capacity 0 (NaN)."""
    four = fhc.GridWorld(size=4, horizon=4).default_params
    message = r"params.reward_map has shape \(4, 16\); GridWorld\(size=3, .*\) expects \(4, 9\)"
    with pytest.raises(ValueError, match="rollout_returns: " + message):
        _returns(fhc.uniform_random_policy(9), params=four)
    with pytest.raises(ValueError, match="GridWorld.to_cmdp: " + message):
        GRID.to_cmdp(four)
    with pytest.raises(ValueError, match="GridWorld.reset: " + message):
        GRID.reset(KEY, four)
    # traced params: the shapes are still checked (static), under the user's vmap too
    with pytest.raises(ValueError, match=message):
        jax.vmap(lambda p: _returns(fhc.uniform_random_policy(9), params=p).rewards)(
            jax.tree.map(lambda x: jnp.stack([x, x]), four)
        )
    with pytest.raises(ValueError, match=r"params.slip must be a probability in \[0, 1\], found 1.5"):
        _returns(fhc.uniform_random_policy(9), params=GRID_PARAMS.replace(slip=jnp.float32(1.5)))
    battery = fhc.BatteryStorage()
    bp = battery.default_params
    with pytest.raises(ValueError, match=r"BatteryStorage.to_cmdp: params.capacity must be > 0 \(MWh\), found -1"):
        fhc.solve(battery.to_cmdp(bp.replace(capacity=jnp.float32(-1.0)), resolution=(5, 3)))
    with pytest.raises(ValueError, match="rollout_returns: params.capacity must be > 0"):
        _returns(fhc.random_policy(battery), env=battery, params=bp.replace(capacity=jnp.float32(0.0)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ar_coef = 1 used to print numpy warnings first
        with pytest.raises(ValueError, match=r"params.ar_coef must be in \(-1, 1\) \(\|ar_coef\| < 1"):
            battery.to_cmdp(bp.replace(ar_coef=jnp.float32(1.0)))


def test_rollout_arguments_are_one_line_errors():
    """Issue 33 item 7: K = -3 and K = 2.5 gave raw JAX shape errors."""
    for k in (-3, 2.5, 0, True):
        with pytest.raises(ValueError, match=rf"rollout: num_episodes \(K\) must be an integer >= 1, found {k}"):
            fhc.rollout(KEY, GRID, GRID_PARAMS, fhc.uniform_random_policy(9), k)
    with pytest.raises(ValueError, match=r"rollout_returns: num_episodes \(K\) must be an integer >= 1, found 2.5"):
        _returns(fhc.uniform_random_policy(9), k=2.5)


class _FloatHorizon(fhc.TabularEnv):
    horizon = property(lambda self: 4.0)


class _TwoCosts(fhc.GridWorld):
    def transition(self, noise, state, action, params):
        obs, nxt, reward, costs, done, info = super().transition(noise, state, action, params)
        return obs, nxt, reward, jnp.concatenate([costs, costs]), done, info


class _PaysNaN(fhc.GridWorld):
    def transition(self, noise, state, action, params):
        obs, nxt, reward, costs, done, info = super().transition(noise, state, action, params)
        return obs, nxt, jnp.where(state.time == 2, jnp.nan, reward), costs, done, info


@pytest.mark.slow
def test_a_users_environment_mistakes_are_named():
    """Issue 33 item 7: a float horizon ('internal error: Shapes must be 1D sequences...'),
    costs of the wrong shape (a raw scan carry error), an environment paying NaN (diagnosed
    as a step-size problem by training; from the rollouts the environment is named)."""
    cmdp = GRID.to_cmdp(GRID_PARAMS)
    with pytest.raises(
        ValueError,
        match=r"rollout_returns: _FloatHorizon.horizon must be a positive int, found 4.0 "
        r"\(float\)",
    ):
        _returns(fhc.uniform_random_policy(9), env=_FloatHorizon(cmdp), params=cmdp)
    two = _TwoCosts(size=3, horizon=4)
    with pytest.raises(
        ValueError, match=re.escape("_TwoCosts.transition returned costs of shape (2,); expected (M,) = (1,)")
    ):
        _returns(fhc.uniform_random_policy(9), env=two)
    nan = _PaysNaN(size=3, horizon=4)
    with pytest.raises(
        ValueError,
        match=r"rollout: _PaysNaN paid a non-finite reward at stage 2 \(episode 0\): nan; "
        "the environment or its params produce it",
    ):
        fhc.rollout(KEY, nan, GRID_PARAMS, fhc.uniform_random_policy(9), 4)
    with pytest.raises(ValueError, match="rollout_returns: _PaysNaN paid a non-finite reward in an episode's total"):
        _returns(fhc.uniform_random_policy(9), env=nan)
