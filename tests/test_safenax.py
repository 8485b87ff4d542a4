"""safenax (constrained environments with a gymnax interface and scalar ``info["cost"]``) through
fhc_jax with no wrapper: FrozenLakeV1/V2 and PortfolioOptimizationGARCH via from_gymnax, the
Brax-based EcoAnt via from_brax. The wrapped FrozenLakes are checked against their exact models
(written out below from safenax's documented dynamics), and a learner trains on FrozenLakeV2
to a policy within budget (slow).

Optional: skipped unless safenax is installed. On a CPU-only machine install it without its
``jax[cuda13]`` requirement (docs/brax.md): ``pip install -e ".[brax]" && pip install
--no-deps safenax && pip install polars``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.envs import from_brax, from_gymnax

safenax = pytest.importorskip(
    "safenax", reason="safenax is not installed (docs/brax.md: pip install --no-deps safenax on CPU machines)"
)

MOVES = np.array([[0, -1], [1, 0], [0, 1], [-1, 0]])  # safenax's actions: left, down, right, up


def frozen_lake_cmdp(gx, horizon: int, alpha: float) -> fhc.TabularCMDP:
    """The exact model of ``from_gymnax(gx)`` for safenax's FrozenLakeV1/V2 (slippery: the
    intended move with prob. ``success_rate``, each perpendicular one with the rest / 2; moves
    off the grid stay): reward ``reward_schedule[tile]`` on arrival; V1 ends on a hole (cost 1)
    or the goal, V2 on the goal only, with expected cost on arrival 0 (goal), thin_cost_base +
    thin_shock_prob thin_shock_val (thin ice), safe_cost_mean (otherwise). Ended episodes are
    absorbing (the wrapper pays nothing after termination). The time limit
    (``max_steps_in_episode``) must exceed the horizon."""
    p = gx.default_params
    assert p.max_steps_in_episode > horizon
    desc = np.asarray(p.desc)
    rows, cols = desc.shape
    s = rows * cols
    tile = desc.reshape(-1)
    goal = tile == ord("G")
    v1 = ord("H") in tile
    bad = tile == (ord("H") if v1 else ord("T"))  # holes (V1) or thin ice (V2)
    ends = goal | bad if v1 else goal
    schedule = np.asarray(p.reward_schedule, np.float64)
    arrive_reward = np.where(goal, schedule[0], np.where(bad, schedule[1], schedule[2]))
    if v1:
        arrive_cost = bad.astype(np.float64)
    else:
        arrive_cost = np.where(
            goal, 0.0, np.where(bad, p.thin_cost_base + p.thin_shock_prob * p.thin_shock_val, p.safe_cost_mean)
        )
    sr = float(p.success_rate)
    trans = np.zeros((s, 4, s))
    for x in range(s):
        if ends[x]:
            trans[x, :, x] = 1.0
            continue
        r, c = divmod(x, cols)
        for a in range(4):
            for move, prob in ((a, sr), ((a - 1) % 4, (1 - sr) / 2), ((a + 1) % 4, (1 - sr) / 2)):
                nr, nc = np.clip(r + MOVES[move, 0], 0, rows - 1), np.clip(c + MOVES[move, 1], 0, cols - 1)
                trans[x, a, nr * cols + nc] += prob
    live = ~ends[:, None, None]
    rewards = np.where(live, np.broadcast_to(arrive_reward, (s, 4, s)), 0.0)
    costs = np.where(live, np.broadcast_to(arrive_cost, (s, 4, s)), 0.0)
    return fhc.TabularCMDP(
        transitions=trans,
        rewards=np.broadcast_to(rewards, (horizon, s, 4, s)),
        costs=np.broadcast_to(costs, (1, horizon, s, 4, s)),
        thresholds=np.array([alpha]),
        initial_distribution=np.eye(s)[0],
    )


@pytest.mark.parametrize("version", ["FrozenLakeV1", "FrozenLakeV2"])
def test_frozen_lake_goes_in_unwrapped_and_matches_its_exact_model(version):
    gx = getattr(safenax, version)()
    h, alpha, k = 30, 10.0, 40_000
    env = from_gymnax(gx, horizon=h, alpha=alpha)  # safenax's scalar info["cost"], no wrapper
    assert env.num_constraints == 1 and env.observation_shape == (1,) and env.num_actions == 4
    out = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
        jax.random.key(0), env, env.default_params, fhc.uniform_random_policy(4), k
    )
    assert out.costs.shape == (k, 1)
    exact = fhc.evaluate(frozen_lake_cmdp(gx, h, alpha), jnp.full((h, 16, 4), 0.25))
    for sample, want in (
        (np.asarray(out.rewards), float(exact.reward)),
        (np.asarray(out.costs)[:, 0], float(exact.costs[0])),
    ):
        se = sample.std(ddof=1) / np.sqrt(k)
        assert abs(sample.mean() - want) < 4 * se, (version, sample.mean(), want, se)


def test_portfolio_garch_goes_in_unwrapped():
    from safenax.portfolio_optimization.po_garch import GARCHParams

    gx = safenax.PortfolioOptimizationGARCH(num_samples=100)
    assets = {
        name: GARCHParams(omega=0.01, alpha=jnp.array([0.1]), beta=jnp.array([0.85]), mu=5e-4, initial_price=100.0)
        for name in ("a", "b")
    }
    params = gx.default_params.replace(garch_params=gx.vectorize_garch_params(assets))
    env = from_gymnax(gx, params, horizon=20, alpha=1.0)
    assert env.num_constraints == 1 and env.action_space.dim == 3  # weights of two assets and cash
    out = jax.jit(fhc.rollout, static_argnums=(1, 3, 4))(
        jax.random.key(0), env, env.default_params, fhc.random_policy(env), 8
    )
    assert out.costs.shape == (8, 20, 1) and np.all(np.isfinite(np.asarray(out.costs)))


def test_brax_environments_go_in_through_from_brax():
    """safenax's Ants keep a scalar state.info["cost"]: from_brax reads it as one constraint
    (checked abstractly, with jax.eval_shape: nothing is compiled); Hopper has no cost of its
    own and is refused without a cost_fn."""
    for ant in (
        safenax.EcoAntV1(backend="spring"),
        safenax.EcoAntV2(backend="spring"),
        safenax.FragileAnt(cost_budget=1000.0, backend="spring"),
    ):
        env = from_brax(ant, horizon=10, alpha=1.0)
        assert env.num_constraints == 1 and env.action_space.dim == 8 and env.observation_shape == (28,)
    hopper = safenax.HopperV1(backend="spring")
    with pytest.raises(ValueError, match="no cost: give cost_fn"):
        from_brax(hopper, horizon=10)
    assert from_brax(hopper, horizon=10, cost_fn=lambda s, a, n: jnp.sum(a * a)).num_constraints == 1


@pytest.mark.slow
def test_a_learner_trains_on_frozen_lake_v2_within_budget():
    """PPO-Lagrangian's plain Config() on FrozenLakeV2 (H = 50, alpha = 40), 5 seeds, each
    final policy judged by Monte-Carlo: the upper 95% bound of its cost within 1.02 alpha, its
    reward (the probability of reaching the goal) near the exact constrained optimum."""
    from fhc_jax.algos import ppo_lagrangian as pl
    from fhc_jax.experiment.judge import Z95, cost_limits

    h, alpha, episodes = 50, 40.0, 20_000
    gx = safenax.FrozenLakeV2()
    env = from_gymnax(gx, horizon=h, alpha=alpha)
    params = env.default_params
    best = fhc.solve(frozen_lake_cmdp(gx, h, alpha))
    out = jax.jit(jax.vmap(pl.make_train(env, params, pl.Config())))(jax.random.split(jax.random.key(0), 5))
    for i in range(5):
        state = jax.tree.map(lambda x, i=i: x[i], out.state)
        ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
            jax.random.key(1), env, params, pl.policy(state, env, params), episodes
        )
        r, c = np.asarray(ret.rewards, np.float64), np.asarray(ret.costs, np.float64)[:, 0]
        upper = c.mean() + Z95 * c.std(ddof=1) / np.sqrt(episodes)
        assert upper <= cost_limits([alpha])[0], (i, c.mean(), upper)
        assert r.mean() >= 0.9 * best.reward, (i, r.mean(), best.reward)
