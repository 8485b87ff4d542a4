"""fhc_jax.softmax_policy and fhc_jax.table_policy: the same distributions as
jax.random.categorical and as the table (chi-square tests with fixed seeds), the fast
protocol's contract, masked actions, validation, and their use in rollouts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_cmdp
from scipy import stats

import fhc_jax as fhc
from fhc_jax.algos.core.policies import SoftmaxPolicy, TablePolicy, softmax_inverse_cdf
from fhc_jax.rollout import rollout, rollout_returns, tabulates, uses_uniforms

DRAWS = 200_000
ALPHA = 1e-4  # chi-square tests: a false alarm once in 10,000 seeds (the seeds are fixed)

LOGITS = {
    "mixed": [0.5, -1.0, 2.0, 0.0, 1.0, -0.3, 0.7, 1.5, -2.0],
    "equal": [0.0] * 9,
    "two actions": [0.3, -0.4],
    "large magnitudes": [80.0, 79.0, 78.5, -80.0, 81.0, 79.5, 60.0, 80.5, 70.0],
    "masked": [1.0, -np.inf, 0.5, -np.inf, 0.0, 2.0, -np.inf, -1.0, 0.2],
    "one dominant": [12.0, 0.0, 1.0, 0.5, -1.0, 2.0, 0.0, 3.0, 1.0],
    "long (array path)": list(np.linspace(-3.0, 3.0, 40)),
}


def _pooled_chisquare(counts: np.ndarray, probabilities: np.ndarray) -> float:
    """p-value of a chi-square goodness-of-fit test, pooling the cells whose expected count is
    below 5 into one (the test's validity condition); cells of probability 0 must be empty."""
    assert np.all(counts[probabilities == 0] == 0)  # impossible outcomes never occur
    counts, probabilities = counts[probabilities > 0], probabilities[probabilities > 0]
    n = counts.sum()
    expected = probabilities * n
    big = expected >= 5
    obs = list(counts[big]) + ([counts[~big].sum()] if (~big).any() else [])
    exp = list(expected[big]) + ([expected[~big].sum()] if (~big).any() else [])
    obs, exp = np.asarray(obs, np.float64), np.asarray(exp, np.float64)
    exp *= obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


def _draws(sample, logits, key):
    keys = jax.random.split(key, DRAWS)
    return np.asarray(jax.jit(jax.vmap(lambda k: sample(k, logits)))(keys))


@pytest.mark.parametrize("name", list(LOGITS))
def test_softmax_policy_samples_the_categorical_distribution(name):
    logits = jnp.asarray(LOGITS[name], jnp.float32)
    a = logits.shape[0]
    x = np.asarray(LOGITS[name], np.float64)
    p = np.exp(x - x.max())
    p = p / p.sum()  # softmax(logits), exactly 0 for -inf
    policy = fhc.softmax_policy(lambda obs, h: logits)
    helper = np.bincount(_draws(lambda k, z: policy(k, None, jnp.int32(0)), logits, jax.random.key(1)), minlength=a)
    categorical = np.bincount(_draws(lambda k, z: jax.random.categorical(k, z), logits, jax.random.key(2)), minlength=a)
    # both samplers fit softmax(logits) ...
    assert _pooled_chisquare(helper, p) > ALPHA, (name, helper, p * DRAWS)
    assert _pooled_chisquare(categorical, p) > ALPHA, (name, categorical, p * DRAWS)
    # ... and each other (two-sample test on the cells both can draw)
    seen = (helper + categorical) > 0
    if seen.sum() > 1:
        assert stats.chi2_contingency(np.stack([helper[seen], categorical[seen]])).pvalue > ALPHA
    # actions of probability 0 are never drawn
    assert np.all(helper[p == 0] == 0)


def test_softmax_inverse_cdf_is_the_inverse_cdf():
    """Exactly the inverse CDF of exp(logits - max) at the uniform's quantiles, both code paths."""
    rng = np.random.default_rng(0)
    for a in (2, 9, 33, 40):  # unrolled (<= 32) and array paths
        logits = rng.normal(0.0, 3.0, a).astype(np.float32)
        w = np.exp(logits.astype(np.float64) - logits.max())
        cdf = np.cumsum(w) / w.sum()
        u = rng.uniform(0.0, 1.0, 5000).astype(np.float32)
        got = np.asarray(jax.vmap(softmax_inverse_cdf, in_axes=(None, 0))(jnp.asarray(logits), jnp.asarray(u)))
        want = np.minimum(np.searchsorted(cdf, u, side="right"), a - 1)
        # float32 rounding may move a draw whose uniform sits on a bin boundary; nothing else
        assert np.mean(got != want) < 1e-3
        near = np.min(np.abs(u[got != want][:, None] - cdf[None, :]), axis=1) if np.any(got != want) else np.zeros(0)
        assert np.all(near < 1e-5)
    # extremes of u: 0 draws the first action with positive probability, the largest float32
    # uniform below 1 the last one
    logits = jnp.array([-jnp.inf, 0.0, 1.0, -jnp.inf])
    assert int(softmax_inverse_cdf(logits, jnp.float32(0.0))) == 1
    assert int(softmax_inverse_cdf(logits, jnp.float32(1.0 - 2.0**-23))) == 2


def test_softmax_policy_fast_protocol_contract_and_hashing():
    weights = jax.random.normal(jax.random.key(3), (5, 2, 9))
    logits_fn = lambda obs, h: obs @ weights[h]
    policy = fhc.softmax_policy(logits_fn)
    assert isinstance(policy, SoftmaxPolicy)
    assert policy == fhc.softmax_policy(logits_fn) and hash(policy) == hash(fhc.softmax_policy(logits_fn))
    obs = jnp.array([0.3, 0.8])
    keys = jax.random.split(jax.random.key(4), 2000)
    hs = jnp.arange(2000, dtype=jnp.int32) % 5
    by_key = jax.jit(jax.vmap(lambda k, h: policy(k, obs, h)))(keys, hs)
    by_uniform = jax.jit(jax.vmap(lambda k, h: policy.action_from_uniform(jax.random.uniform(k), obs, h)))(keys, hs)
    np.testing.assert_array_equal(by_key, by_uniform)
    assert len(np.unique(np.asarray(by_key))) > 3  # a real sample
    with pytest.raises(ValueError, match="logits_fn must be a function"):
        fhc.softmax_policy(np.zeros(3))


def test_softmax_policy_in_rollout_matches_the_categorical_policy():
    """In a rollout (fast path) the per-(stage, state) action frequencies of softmax_policy and of
    the same logits through jax.random.categorical (key path) agree."""
    env = fhc.GridWorld(size=3, horizon=4, observation="xyt")
    params = env.default_params
    weights = jax.random.normal(jax.random.key(5), (4, 3, 9))
    logits_fn = lambda obs, h: 2.0 * obs @ weights[h]
    fast = fhc.softmax_policy(logits_fn)
    slow = lambda key, obs, h: jax.random.categorical(key, logits_fn(obs, h))
    assert uses_uniforms(env, fast) and not uses_uniforms(env, slow)
    k = 40_000
    run = lambda policy: jax.jit(lambda key: rollout(key, env, params, policy, k, record=("states", "actions")))
    counts = []
    for policy, seed in ((fast, 6), (slow, 7)):
        traj = run(policy)(jax.random.key(seed))
        s, a = np.asarray(traj.states, np.int64), np.asarray(traj.actions, np.int64)
        c = np.zeros((4, 9, 9))
        np.add.at(c, (np.broadcast_to(np.arange(4), s.shape), s, a), 1)
        counts.append(c)
    pvalues = []
    for h in range(4):
        for s in range(9):
            pair = np.stack([counts[0][h, s], counts[1][h, s]])
            pair = pair[:, pair.sum(0) > 0]
            if pair.sum() > 2000 and pair.shape[1] > 1:
                pvalues.append(stats.chi2_contingency(pair).pvalue)
    assert len(pvalues) >= 15
    # Fisher's combination of the per-cell tests
    assert stats.combine_pvalues(pvalues).pvalue > ALPHA


@pytest.mark.parametrize("num_actions", [9, 40])
def test_softmax_table_on_states_draws_what_the_policy_draws(num_actions):
    """SoftmaxPolicy.on_states: every (stage, state) row of the table gives, for every uniform,
    the action softmax_inverse_cdf draws from that state's logits (unrolled and array paths)."""
    env = (
        fhc.TabularEnv(random_cmdp(2, num_states=5, num_actions=num_actions, horizon=3))
        if num_actions != 9
        else fhc.GridWorld(size=3, horizon=3, observation="xyt")
    )
    params = env.default_params
    d = int(np.prod(env.observation_shape))
    weights = 3.0 * jax.random.normal(jax.random.key(1), (3, d, num_actions))
    logits_fn = lambda obs, h: jnp.reshape(jnp.asarray(obs, jnp.float32), (-1,)) @ weights[h]
    policy = fhc.softmax_policy(logits_fn)
    table = policy.on_states(env, params)
    assert table.cumulative.shape == (3, num_actions, env.num_states)
    u = jax.random.uniform(jax.random.key(3), (64,))
    direct = jax.vmap(lambda uu, o, h: softmax_inverse_cdf(logits_fn(o, h), uu), in_axes=(0, None, None))
    tabulated = jax.vmap(table.action_from_state, in_axes=(0, None, None))
    for h in range(3):
        for s in range(env.num_states):
            obs = env.observation(env.state_at(jnp.int32(s), jnp.int32(h)), params)
            np.testing.assert_array_equal(np.asarray(direct(u, obs, h)), np.asarray(tabulated(u, s, h)))


@pytest.mark.slow
def test_rollout_of_a_tabulated_softmax_policy_is_the_per_step_rollout():
    """rollout and rollout_returns tabulate a softmax policy over (stage, state) when 2 S <= K:
    the episodes are those of the per-step draws (episode i depends on split(key, K)[i] only,
    so the first K' episodes of a large batch are a small batch's)."""
    env = fhc.GridWorld(size=4, horizon=6)
    params = env.default_params
    weights = jax.random.normal(jax.random.key(5), (6, 2, 9))
    policy = fhc.softmax_policy(lambda obs, h: 2.0 * obs @ weights[h] + jnp.arange(9.0) * 0.1)
    small, large = 16, 256  # S = 16: a batch of 16 calls the policy per step, one of 256 tabulates
    assert not tabulates(env, policy, small) and tabulates(env, policy, large)
    assert not tabulates(env, lambda k, o, h: jnp.int32(0), large)  # no table for other policies
    key = jax.random.key(11)
    run = jax.jit(lambda k, n: rollout(k, env, params, policy, n), static_argnums=1)
    per_step, tabulated = run(key, small), run(key, large)
    for name in ("states", "actions", "rewards", "costs", "final_states"):
        np.testing.assert_array_equal(
            np.asarray(getattr(tabulated, name))[:small], np.asarray(getattr(per_step, name)), err_msg=name
        )
    assert len(np.unique(np.asarray(per_step.actions))) > 5  # a real sample
    totals = jax.jit(lambda k, n: rollout_returns(k, env, params, policy, n), static_argnums=1)
    np.testing.assert_array_equal(
        np.asarray(totals(key, large).rewards)[:small], np.asarray(totals(key, small).rewards)
    )


@pytest.mark.parametrize("observation", ["xy", "one_hot", "index"])
def test_table_policy_on_a_gridworld_matches_the_table(observation):
    """Per-(stage, state) action frequencies of table_policy in rollouts match the table
    (chi-square), zero entries are never drawn, and the fast path is taken."""
    env = fhc.GridWorld(size=3, horizon=3, observation=observation)
    params = env.default_params
    rng = np.random.default_rng(8)
    table = rng.dirichlet(np.ones(9), size=(3, 9))
    table[rng.uniform(size=table.shape) < 0.3] = 0.0  # some actions impossible
    table[..., 4] += 0.05  # every row keeps positive weight
    table = table / table.sum(-1, keepdims=True)
    policy = fhc.table_policy(jnp.asarray(table, jnp.float32), env)
    assert isinstance(policy, TablePolicy) and uses_uniforms(env, policy)
    traj = jax.jit(lambda key: rollout(key, env, params, policy, 100_000, record=("states", "actions")))(
        jax.random.key(9)
    )
    s, a = np.asarray(traj.states, np.int64), np.asarray(traj.actions, np.int64)
    counts = np.zeros((3, 9, 9))
    np.add.at(counts, (np.broadcast_to(np.arange(3), s.shape), s, a), 1)
    assert np.all(counts[table == 0] == 0)
    pvalues = [
        _pooled_chisquare(counts[h, x], table[h, x]) for h in range(3) for x in range(9) if counts[h, x].sum() > 1000
    ]
    assert len(pvalues) >= 15
    assert stats.combine_pvalues(pvalues).pvalue > ALPHA
    # the protocol's contract, on the tabular state index (never the observation)
    _, state = env.reset(jax.random.key(10), params)
    index = env.state_index(state)
    for key in jax.random.split(jax.random.key(11), 10):
        assert int(policy(key, index, jnp.int32(1))) == int(
            policy.action_from_state(jax.random.uniform(key), index, jnp.int32(1))
        )


def test_table_policy_validation():
    env = fhc.GridWorld(size=3, horizon=3)
    good = np.full((3, 9, 9), 1 / 9)
    with pytest.raises(ValueError, match=r"table must have shape \(H, S, A\) = \(3, 9, 9\)"):
        fhc.table_policy(good[:2], env)
    bad = good.copy()
    bad[0, 0, 0] = -0.1
    with pytest.raises(ValueError, match="non-negative"):
        fhc.table_policy(bad, env)
    bad = good.copy()
    bad[1, 2] = 0.0
    with pytest.raises(ValueError, match="positive weight"):
        fhc.table_policy(bad, env)
    battery = fhc.BatteryStorage()
    with pytest.raises(ValueError, match="no tabular states"):
        fhc.table_policy(good, battery)
    # inside a jitted function the table may be traced (its shape is checked at once, its rows
    # once per rollout); the policy takes the state index, and refuses an observation
    out = jax.jit(lambda t, key: fhc.table_policy(t, env)(key, jnp.int32(4), jnp.int32(0)))(
        jnp.asarray(good, jnp.float32), jax.random.key(0)
    )
    assert 0 <= int(out) < 9
    with pytest.raises(ValueError, match="tabular state index"):
        fhc.table_policy(good, env)(jax.random.key(0), jnp.float32([0.5, 0.5]), jnp.int32(0))
    with pytest.raises(
        ValueError, match=r"the table has shape \(H, S, A\) = \(3, 9, 9\); GridWorld has \(H, S, A\) = \(3, 16, 9\)"
    ):
        fhc.rollout_returns(
            jax.random.key(0),
            fhc.GridWorld(size=4, horizon=3),
            fhc.GridWorld(size=4, horizon=3).default_params,
            fhc.table_policy(good, env),
            4,
        )


@pytest.mark.slow
def test_learner_policies_use_the_fast_helpers():
    """Every learner's ``policy(...)`` is a table_policy on tabular exact models and a
    softmax_policy elsewhere (both take the rollout's fast path)."""
    from fhc_jax.algos import fh_constrained as fc

    env = fhc.GridWorld(size=3, horizon=3)
    params = env.default_params
    out = jax.jit(fc.make_train(env, params, fc.Config(num_iterations=2, episodes_per_iteration=4, eval_every=0)))(
        jax.random.key(0)
    )
    policy = fc.policy(out.state, env, params)
    assert isinstance(policy, TablePolicy) and uses_uniforms(env, policy)
    from fhc_jax.algos.core.evaluation import observation_policy

    assert isinstance(observation_policy(lambda obs, h: jnp.zeros(9)), SoftmaxPolicy)


def test_invalid_distributions_and_traced_tables():
    """NaN or all -inf logits give NO_ACTION (never a plausible action 0); a traced table is
    checked once per rollout: its invalid rows make the returns NaN."""
    from fhc_jax.rollout import NO_ACTION

    policy = fhc.softmax_policy(lambda obs, h: jnp.where(obs[0] > 0.4, jnp.nan, 0.0) * jnp.ones(9))
    key = jax.random.key(0)
    assert int(policy(key, jnp.float32([0.5, 0.0]), jnp.int32(0))) == NO_ACTION
    assert 0 <= int(policy(key, jnp.float32([0.0, 0.0]), jnp.int32(0))) < 9
    masked = fhc.softmax_policy(lambda obs, h: jnp.where(jnp.arange(9) == h, 0.0, -jnp.inf))
    assert (
        int(masked(key, jnp.zeros(2), jnp.int32(3))) == 3 and int(masked(key, jnp.zeros(2), jnp.int32(9))) == NO_ACTION
    )
    with pytest.raises(ValueError, match=r"logits_fn returns logits of shape \(\)"):
        fhc.softmax_policy(lambda obs, h: jnp.float32(0.0))(key, jnp.zeros(2), jnp.int32(0))
    env = fhc.GridWorld(size=3, horizon=3)
    params = env.default_params
    good = np.full((3, 9, 9), 1 / 9, np.float32)
    bad = good.copy()
    bad[2, 5] = 0.0
    run = jax.jit(lambda t, k: fhc.rollout_returns(k, env, params, fhc.table_policy(t, env), 16).rewards)
    assert np.all(np.isfinite(run(good, key))) and np.all(np.isnan(run(bad, key)))
