"""Scalar costs (the Safety-Gym / OmniSafe / safenax convention, ``info["cost"]`` of shape ())
are one constraint wherever an fhc_jax adapter reads a cost: from_gymnax (info and cost_fn),
to_gymnax(scalar_cost=True) on the way out. Checked on a small gymnax environment written in
that convention, whose exact model is written out by hand below."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.envs.gymnax_interop import from_gymnax, to_gymnax

gymnax = pytest.importorskip("gymnax")
from flax import struct  # noqa: E402
from gymnax.environments import environment, spaces  # noqa: E402

N, WALK, RUN = 4, 0.5, 0.9  # cells 0..N (N the goal); P(advance) walking and running


@struct.dataclass
class ChainState(environment.EnvState):
    pos: jax.Array = 0


@struct.dataclass
class ChainParams(environment.EnvParams):
    walk: float = WALK
    run: float = RUN


class ScalarCostChain(environment.Environment):
    """A walk to the goal cell N: action 0 walks (advance with prob. 0.5), action 1 runs
    (advance with prob. 0.9) and costs 1. Reward 1 on reaching the goal, which terminates.
    The cost is a SCALAR ``info["cost"]`` and the observation a scalar cell index, as in
    safenax's FrozenLake."""

    @property
    def default_params(self) -> ChainParams:
        return ChainParams(max_steps_in_episode=1000)

    def step_env(self, key, state, action, params):
        p = jnp.where(action == 1, params.run, params.walk)
        pos = jnp.minimum(state.pos + (jax.random.uniform(key) < p).astype(jnp.int32), N)
        new = ChainState(time=state.time + 1, pos=pos)
        reward = (pos == N).astype(jnp.float32)
        cost = (action == 1).astype(jnp.float32)  # shape (): one constraint
        return self.get_obs(new), new, reward, pos == N, {"cost": cost}

    def reset_env(self, key, params):
        state = ChainState(time=0, pos=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jnp.asarray(state.pos, jnp.int32)

    def is_terminal(self, state, params):
        return state.pos == N

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Discrete(N + 1)


def chain_cmdp(horizon: int, alpha: float) -> fhc.TabularCMDP:
    """The exact model of ``from_gymnax(ScalarCostChain())``: the goal is absorbing (the
    wrapper pays nothing after termination)."""
    s = N + 1
    p = np.zeros((s, 2, s))
    r = np.zeros((s, 2, s))
    for x in range(N):
        for a, q in enumerate((WALK, RUN)):
            p[x, a, x + 1], p[x, a, x] = q, 1 - q
        r[x, :, N] = 1.0 if x + 1 == N else 0.0
    p[N, :, N] = 1.0
    c = np.zeros((1, s, 2))
    c[0, :N, 1] = 1.0
    return fhc.TabularCMDP(
        transitions=p,
        rewards=np.broadcast_to(r, (horizon, s, 2, s)),
        costs=np.broadcast_to(c[:, None], (1, horizon, s, 2)),
        thresholds=np.array([alpha]),
        initial_distribution=np.eye(s)[0],
    )


def test_scalar_info_cost_is_one_constraint_paid_as_a_vector():
    env = from_gymnax(ScalarCostChain(), horizon=12, alpha=2.0)
    assert env.num_constraints == 1 and env.observation_shape == (1,)  # the scalar index, flattened
    np.testing.assert_array_equal(env.thresholds(env.default_params), [2.0])
    params = env.default_params
    run_then_walk = lambda key, obs, h: (h < 3).astype(jnp.int32)
    traj = jax.jit(lambda k: fhc.rollout(k, env, params, run_then_walk, 64))(jax.random.key(0))
    assert traj.costs.shape == (64, 12, 1) and traj.observations.shape == (64, 12, 1)
    ran = np.arange(12) < 3
    # every episode starts at cell 0 and needs at least N = 4 > 3 steps: it ran, paying 1, at 0, 1, 2
    np.testing.assert_array_equal(np.asarray(traj.costs)[..., 0], np.broadcast_to(ran, (64, 12)).astype(np.float32))
    # the observation is the cell index, as (1,); the goal is absorbing
    obs = np.asarray(traj.observations)[..., 0]
    assert np.all(np.diff(obs, axis=1) >= 0) and obs.max() <= N
    reached = np.asarray(traj.rewards).sum(1)
    assert set(np.unique(reached)) <= {0.0, 1.0} and 0 < reached.mean() < 1


def test_scalar_cost_fn_and_declared_counts():
    chain = ScalarCostChain()
    env = from_gymnax(chain, horizon=5, cost_fn=lambda s, a, n, p: jnp.asarray(n.pos, jnp.float32))
    assert env.num_constraints == 1
    from_gymnax(chain, horizon=5, num_constraints=1)  # () declared as one constraint: fine
    with pytest.raises(ValueError, match=r"info\['cost'\] must have shape \(M,\) = \(2,\), found \(\)"):
        from_gymnax(chain, horizon=5, num_constraints=2)
    with pytest.raises(
        ValueError,
        match=r"cost_fn must have shape \(\) \(one constraint\) or \(M,\) with M >= 1, "
        r"found \(2, 2\)",
    ):
        from_gymnax(chain, horizon=5, cost_fn=lambda s, a, n, p: jnp.zeros((2, 2)))
    with pytest.raises(
        ValueError,
        match=r"info\['cost'\] must be a float array of shape \(\) or \(M,\), found "
        "dtype bool",
    ):

        class BoolCost(ScalarCostChain):
            def step_env(self, key, state, action, params):
                obs, new, r, d, _ = super().step_env(key, state, action, params)
                return obs, new, r, d, {"cost": action == 1}

        from_gymnax(BoolCost(), horizon=5)


def test_monte_carlo_of_the_wrapped_chain_matches_its_exact_model():
    """Independent check of the reading of scalar costs: the uniformly random policy's
    Monte-Carlo totals through from_gymnax against fhc.evaluate on the hand-written model."""
    h, alpha, k = 8, 2.0, 40_000
    env = from_gymnax(ScalarCostChain(), horizon=h, alpha=alpha)
    out = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
        jax.random.key(3), env, env.default_params, fhc.uniform_random_policy(2), k
    )
    exact = fhc.evaluate(chain_cmdp(h, alpha), jnp.full((h, N + 1, 2), 0.5))
    for sample, want in (
        (np.asarray(out.rewards), float(exact.reward)),
        (np.asarray(out.costs)[:, 0], float(exact.costs[0])),
    ):
        se = sample.std(ddof=1) / np.sqrt(k)
        assert abs(sample.mean() - want) < 4 * se, (sample.mean(), want, se)


def test_to_gymnax_scalar_cost_round_trip():
    inner = from_gymnax(ScalarCostChain(), horizon=6, alpha=1.0)
    gx = to_gymnax(inner, scalar_cost=True)
    gparams = gx.default_params
    _, state = gx.reset(jax.random.key(0), gparams)
    _, _, _, _, _, info = gx.step(jax.random.key(1), state, jnp.int32(1), gparams)
    assert info["cost"].shape == () and float(info["cost"]) == 1.0
    _, _, _, _, _, info = to_gymnax(inner).step(jax.random.key(1), state, jnp.int32(1), gparams)
    assert info["cost"].shape == (1,)  # the default keeps (M,)
    back = from_gymnax(gx, horizon=6, alpha=1.0)  # the scalar convention comes back in as M = 1
    assert back.num_constraints == 1
    run = lambda key, obs, h: jnp.ones((), jnp.int32)
    a = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(jax.random.key(5), inner, inner.default_params, run, 32)
    b = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(jax.random.key(5), back, back.default_params, run, 32)
    # the same episodes both ways (to_gymnax's step_env is the inner environment's step)
    np.testing.assert_array_equal(np.asarray(b.costs), np.asarray(a.costs))
    np.testing.assert_array_equal(np.asarray(b.rewards), np.asarray(a.rewards))
    assert np.all(np.asarray(a.costs) >= N) and np.all(np.asarray(a.costs) <= 6.0)  # runs until the goal
    two = from_gymnax(ScalarCostChain(), horizon=6, cost_fn=lambda s, a, n, p: jnp.zeros(2))
    with pytest.raises(ValueError, match=r"scalar_cost=True needs one constraint \(M = 1\); .* has M = 2"):
        to_gymnax(two, scalar_cost=True)
    with pytest.raises(ValueError, match="scalar_cost must be True or False"):
        to_gymnax(inner, scalar_cost=1)


@pytest.mark.slow
def test_a_learner_trains_on_a_scalar_cost_environment():
    """e-COP's plain Config() on the scalar-cost chain, 5 seeds, each final policy judged by
    Monte-Carlo (upper 95% cost bound within 1.02 alpha) and against the exact constrained
    optimum J* = 0.799 of the hand-written model (measured: 0.788-0.794 at cost 1.95-1.98;
    the uniformly random policy gets 0.744, over budget)."""
    from fhc_jax.algos import ecop as pl
    from fhc_jax.experiment.judge import Z95, cost_limits

    h, alpha, episodes = 6, 2.0, 20_000
    env = from_gymnax(ScalarCostChain(), horizon=h, alpha=alpha)
    params = env.default_params
    best = fhc.solve(chain_cmdp(h, alpha))
    free = fhc.solve_unconstrained(chain_cmdp(h, alpha))
    assert best.reward < free.reward - 0.05  # the budget binds
    out = jax.jit(jax.vmap(pl.make_train(env, params, pl.Config())))(jax.random.split(jax.random.key(0), 5))
    for i in range(5):
        state = jax.tree.map(lambda x, i=i: x[i], out.state)
        ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
            jax.random.key(1), env, params, pl.policy(state, env, params), episodes
        )
        r, c = np.asarray(ret.rewards, np.float64), np.asarray(ret.costs, np.float64)[:, 0]
        upper = c.mean() + Z95 * c.std(ddof=1) / np.sqrt(episodes)
        assert upper <= cost_limits([alpha])[0], (i, c.mean(), upper)
        assert r.mean() >= 0.95 * best.reward, (i, r.mean(), best.reward)
