"""PPO-Lagrangian and CPO with Gaussian policies on box action spaces (the sampled path):
learning on ``Reach`` judged by Monte-Carlo, CPO's trust region with the Gaussian's KL (its
Fisher-vector product against the closed-form Fisher and against autodiff Hessians), the
recorded head, the observation options, validation, and Saute-Lagrangian's Gaussian policy."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from box_task import Reach
from jax.flatten_util import ravel_pytree

import fhc_jax as fhc
from fhc_jax.algos import cpo, saute, trust_region
from fhc_jax.algos import ppo_lagrangian as pl
from fhc_jax.algos.core.distributions import DiagonalGaussian
from fhc_jax.algos.core.networks import MLP
from fhc_jax.algos.core.scaffold import play_environment
from fhc_jax.envs import saute as saute_envs

ENV = Reach()
PARAMS = ENV.default_params
INITIAL_REWARD = -10.4  # the initial Gaussian policy (mean 0, sigma 0.5), tests/box_task.py

# PPO: the learned multiplier (Adam) with a step size that reaches the binding multiplier in tens
# of iterations (the PID defaults are tuned for hundreds of gridworld updates); the step size is
# for OmniSafe's advantage form and a budget that binds from the start (the sampled path's
# defaults, "lagrangian" and a tightening budget, are the plain-Config test's below)
PPO = pl.Config(
    num_iterations=40,
    episodes_per_iteration=256,
    eval_every=0,
    eval_episodes=4096,
    observation="env",
    multiplier_method="lagrangian",
    multiplier_lr=0.5,
    normalize_advantages="separate",
    budget_tightening=0.0,
)
CPO = cpo.Config(num_iterations=30, episodes_per_iteration=256, eval_every=0, eval_episodes=4096, observation="env")
SMALL = {
    "ppo": (pl, PPO.replace(num_iterations=2, episodes_per_iteration=16, eval_episodes=64)),
    "cpo": (
        cpo,
        CPO.replace(
            num_iterations=2, episodes_per_iteration=16, eval_episodes=64, fisher_samples=32, critic_minibatches=1
        ),
    ),
}


def _monte_carlo(policy, num_episodes: int = 4096) -> tuple[float, float, float, float]:
    """(mean reward, its 95% half-width, mean cost, its 95% half-width) of ``policy`` on Reach."""
    ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(jax.random.key(11), ENV, PARAMS, policy, num_episodes)
    r, c = np.asarray(ret.rewards), np.asarray(ret.costs)[:, 0]
    half = lambda x: 1.96 * float(x.std()) / math.sqrt(x.size)
    return float(r.mean()), half(r), float(c.mean()), half(c)


# ----------------------------------------------------------------------------- learning


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "cpo"])
def test_learns_reach_within_the_budget(name):
    """From the initial Gaussian (reward -10.4, cost 1.8) to a policy that earns far more
    (above -1.5; reaching the target at all costs 2 and earns -0.28, spending the budget alpha = 1
    well about -0.7) at a cost within 0.15 of alpha = 1 (Monte-Carlo over 4096 episodes with the
    learner's ``policy``; the in-training evaluation estimates the same policy)."""
    module, cfg = (pl, PPO) if name == "ppo" else (cpo, CPO)
    out = jax.jit(module.make_train(ENV, PARAMS, cfg))(jax.random.key(0))
    r0, c0 = float(out.metrics.evaluation.reward[0]), float(out.metrics.evaluation.costs[0, 0])
    assert abs(r0 - INITIAL_REWARD) < 0.3 and abs(c0 - 1.83) < 0.1, (r0, c0)
    r, r_half, c, c_half = _monte_carlo(module.policy(out.final_state, ENV, PARAMS))
    assert r - r_half > -1.5, (r, r_half)
    assert abs(c - 1.0) + c_half < 0.15, (c, c_half)
    assert abs(float(out.metrics.evaluation.reward[-1]) - r) < 0.1
    assert abs(float(out.metrics.evaluation.costs[-1, 0]) - c) < 0.1
    assert np.all(np.isfinite(np.asarray(out.metrics.entropy)))
    # exploration shrank from the initial sigma = 0.5 (differential entropy log 0.5 + 1.42 = 0.73)
    assert float(out.metrics.entropy[0]) == pytest.approx(math.log(0.5) + 0.5 * (1 + math.log(2 * math.pi)), abs=1e-5)
    assert float(out.metrics.entropy[-1]) < 0.0


@pytest.mark.slow
def test_ppo_plain_config_spends_the_reach_budget():
    """PPO-Lagrangian's plain Config() on Reach, a box task without a tabular model (so the
    sampled path's defaults: the Lagrangian advantage standardised as one signal, the budget
    tightening over half the run, the mean kept in the box): a policy that spends the budget
    alpha = 1 well (about -0.65 at cost 0.98) rather than the cheap one (-10.4 at cost 1.8 is
    the initial Gaussian; reaching the target at all costs 2). Judged on the returned policy
    (``out.state``, as users take it), not the last iterate: the last iterate is one sample of a
    multiplier's oscillation about alpha, and which side of 1.02 it lands on moves with float
    rounding (it was 1.018 +- 0.004 on one CPU and below 1.0 on another)."""
    out = jax.jit(pl.make_train(ENV, PARAMS, pl.Config()))(jax.random.key(0))
    assert out.state.network.observation == "env"
    r, r_half, c, c_half = _monte_carlo(pl.policy(out.state, ENV, PARAMS))
    assert r - r_half > -0.8, (r, r_half)
    assert c + c_half < 1.02 and c > 0.9, (c, c_half)
    # the learner certified what it returned, on episodes of its own
    assert bool(out.selection.feasible) and bool(out.status.ok), out.status


@pytest.mark.slow  # end-to-end training: the slow tier (CI runs both tiers)
@pytest.mark.parametrize("name", ["ppo", "cpo"])
def test_vmap_over_seeds(name):
    """``jax.vmap(make_train)`` over 2 seeds in one compiled program: each seed's run depends on
    its own key only (swapping the keys swaps the results), the seeds differ, and each seed's
    final state gives a policy. (The unbatched run is the learning test's.)"""
    module, cfg = SMALL[name]
    train = jax.jit(jax.vmap(module.make_train(ENV, PARAMS, cfg)))
    keys = jax.random.split(jax.random.key(4), 2)
    both, swapped = train(keys), train(keys[::-1])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b[::-1], rtol=1e-5, atol=1e-6), both, swapped)
    assert both.metrics.reward.shape == (2, cfg.num_iterations) and both.metrics.evaluation.reward.shape == (2, 2)
    actor = both.state.params["actor"] if name == "ppo" else both.state.actor
    flat = jax.vmap(lambda a: ravel_pytree(a)[0])(actor)
    assert flat.shape[0] == 2 and not np.allclose(flat[0], flat[1])  # the seeds differ
    state = jax.tree.map(lambda x: x[1], both.state)
    obs = ENV.reset(jax.random.key(2), PARAMS)[0]
    assert module.policy(state, ENV, PARAMS)(jax.random.key(3), obs, jnp.int32(1)).shape == (1,)
    with pytest.raises(ValueError, match="pass the state of one seed"):
        module.policy(both.state, ENV, PARAMS)


# ----------------------------------------------------------------------------- the head on the train state


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "cpo"])
def test_policy_acts_with_float32_box_actions_and_the_recorded_head(name):
    """``policy(...)`` returns float32 (1,) actions (jitted or not); the train state records
    log_std and initial_log_std, so the policy rebuilt from it alone explores with sigma =
    exp(initial_log_std) x half range at initialisation; no policy table on Reach."""
    module, cfg = SMALL[name]
    cfg = cfg.replace(initial_log_std=-1.0)
    setup = module.setup(ENV, PARAMS, cfg)
    state = module.init(jax.random.key(0), setup, cfg)
    assert state.network.log_std == "state_independent" and state.network.initial_log_std == -1.0
    head = module.ALGORITHM.action_head(module.policy_setup(ENV, PARAMS, state))
    assert isinstance(head, DiagonalGaussian) and head.initial_log_std == -1.0 and head.low == (-1.0,)
    act = module.policy(state, ENV, PARAMS)
    obs, _ = ENV.reset(jax.random.key(1), PARAMS)
    for a in (act(jax.random.key(2), obs, jnp.int32(0)), jax.jit(act)(jax.random.key(2), obs, jnp.int32(0))):
        assert a.dtype == jnp.float32 and a.shape == (1,)
    samples = jax.vmap(lambda k: act(k, obs, jnp.int32(0)))(jax.random.split(jax.random.key(3), 4096))
    assert samples.shape == (4096, 1)
    assert abs(float(samples.std()) - math.exp(-1.0)) < 0.02 and abs(float(samples.mean())) < 0.05
    with pytest.raises(ValueError, match="no tabular states"):
        module.policy_table(state, ENV, PARAMS)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "cpo"])
@pytest.mark.parametrize("log_std", ["state_independent", "state_dependent"])
def test_actor_outputs_for_both_log_std_forms(name, log_std):
    """State-independent: the actor computes the mean and holds the log-std as a free vector
    ("free", zeros at init); state-dependent: it computes both. Either way its output is the
    Gaussian's [m, s] (2 numbers), and one update runs with finite metrics."""
    module, cfg = SMALL[name]
    cfg = cfg.replace(log_std=log_std)
    setup = module.setup(ENV, PARAMS, cfg)
    state = module.init(jax.random.key(0), setup, cfg)
    actor = state.params["actor"] if name == "ppo" else state.actor
    assert ("free" in actor["params"]) == (log_std == "state_independent")
    out = module.observation_outputs(state, setup, ENV.reset(jax.random.key(1), PARAMS)[0], jnp.int32(0))
    assert out.shape == (2,)
    batch = module.rollout(jax.random.key(2), state, setup, cfg)
    assert batch.actions.shape == (ENV.horizon, cfg.episodes_per_iteration, 1) and batch.actions.dtype == jnp.float32
    key = jax.random.key(3) if name == "ppo" else jax.random.split(jax.random.key(3))
    new, metrics = jax.jit(lambda st, b, k: module.update(st, b, k, setup, cfg))(state, batch, key)
    assert all(np.all(np.isfinite(np.asarray(v))) for v in jax.tree.leaves(metrics))
    assert not np.array_equal(*(ravel_pytree(s.params["actor"] if name == "ppo" else s.actor)[0] for s in (state, new)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "cpo"])
def test_observation_options_on_a_box_environment(name):
    """On the sampled path the networks see "env" (Reach's (x, h / H)) or "env_t" (with h / H
    appended once more; the actor's input grows by one); PPO's critics get h / H with "env"
    (``critic_time``); the tabular encoders and ``path="tabular"`` are refused before compiling.
    ("env" trains in the learning tests; "env_t" trains here.)"""
    module, cfg = SMALL[name]
    for observation, dim in (("env", 2), ("env_t", 3)):
        c = cfg.replace(observation=observation)
        setup = module.setup(ENV, PARAMS, c)
        state = module.init(jax.random.key(0), setup, c)
        actor = state.params["actor"] if name == "ppo" else state.actor
        assert actor["params"]["Dense_0"]["kernel"].shape[0] == dim
        if name == "ppo":
            assert state.params["reward_critic"]["params"]["Dense_0"]["kernel"].shape[0] == 3
    out = jax.jit(module.make_train(ENV, PARAMS, cfg.replace(observation="env_t")))(jax.random.key(1))
    assert np.all(np.isfinite(np.asarray(out.metrics.reward))) and np.all(
        np.isfinite(np.asarray(out.metrics.evaluation.reward))
    )
    obs = ENV.reset(jax.random.key(2), PARAMS)[0]
    assert module.policy(out.state, ENV, PARAMS)(jax.random.key(3), obs, jnp.int32(5)).shape == (1,)
    with pytest.raises(
        ValueError, match=r"Config.observation must be one of 'env', 'env_t' for Reach on the sampled path"
    ):
        module.make_train(ENV, PARAMS, cfg.replace(observation="xy"))
    with pytest.raises(ValueError, match=r"path = 'tabular' needs a tabular exact model"):
        module.make_train(ENV, PARAMS, cfg.replace(path="tabular"))


# ----------------------------------------------------------------------------- CPO's Gaussian trust region


def _gaussian_fisher(head: DiagonalGaussian, out: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The closed-form Fisher of a diagonal Gaussian w.r.t. its outputs [m, s] (U points, d dims),
    flattened as the outputs (U 2d x U 2d): with mu = c + h m and log sigma = log h + l0 + s,
    the Fisher is diag(1 / sigma^2, 2) in (mu, log sigma), so w_u h^2 / sigma^2 = w_u
    exp(-2 (l0 + s)) for m and 2 w_u for s; no cross terms."""
    d = head.dim
    s = out[:, d:]
    diag = np.concatenate([np.exp(-2.0 * (head.initial_log_std + s)), np.full_like(s, 2.0)], axis=1)
    return np.diag((weights[:, None] * diag).reshape(-1))


@pytest.mark.slow
def test_gaussian_fisher_vector_product_is_the_closed_form_fisher():
    """Parameters = the outputs themselves (J = I): the head's Fisher-vector product is the
    closed-form Fisher of the diagonal Gaussian (two dimensions with different half ranges,
    log-stds inside the clip range), and the Hessian of the weighted mean KL at theta' = theta."""
    head = DiagonalGaussian(low=(-1.0, 0.0), high=(1.0, 4.0), initial_log_std=-0.5)
    u, d = 3, 2
    out0 = np.asarray(jax.random.uniform(jax.random.key(0), (u, 2 * d), minval=-0.8, maxval=0.8))
    w = np.array([0.2, 0.5, 0.3], np.float32)
    out_fn = lambda th: th.reshape(u, 2 * d)
    theta = jnp.asarray(out0.reshape(-1))
    fvp = trust_region.head_fisher_vector_product(out_fn, theta, jnp.asarray(w), head.kl)
    dense = np.stack([np.asarray(fvp(e)) for e in np.eye(theta.size, dtype=np.float32)], axis=1)
    closed = _gaussian_fisher(head, out0, w)
    np.testing.assert_allclose(dense, closed, rtol=1e-5, atol=1e-6)
    mean_kl = lambda th: jnp.sum(w * head.kl(out_fn(theta), out_fn(th)))
    np.testing.assert_allclose(np.asarray(jax.hessian(mean_kl)(theta)), closed, rtol=1e-5, atol=1e-6)
    # damping adds a multiple of the identity
    v = jax.random.normal(jax.random.key(1), theta.shape)
    damped = trust_region.head_fisher_vector_product(out_fn, theta, jnp.asarray(w), head.kl, 0.3)
    np.testing.assert_allclose(damped(v), closed @ np.asarray(v) + 0.3 * np.asarray(v), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_gaussian_fisher_vector_product_through_a_network_is_the_hessian_of_the_mean_kl():
    """Through an actor MLP (mean from the input, free log-std): J^T M J v == forward-over-reverse
    Hessian-vector product of KLbar(theta') = sum_u w_u KL(N_theta(u) || N_theta'(u))."""
    head = DiagonalGaussian(low=(-2.0,), high=(1.0,))
    module = MLP(outputs=1, free_outputs=1, width=8, depth=2)
    x = jax.random.normal(jax.random.key(0), (7, 3))
    params = module.init(jax.random.key(1), x[0])
    params = jax.tree.map(lambda p: p + 0.1, params)  # a nonzero log-std
    theta, unravel = ravel_pytree(params)
    out_fn = lambda th: module.apply(unravel(th), x)
    w = jax.random.uniform(jax.random.key(2), (7,))
    w = w / w.sum()
    mean_kl = lambda th: jnp.sum(w * head.kl(out_fn(theta), out_fn(th)))
    v = jax.random.normal(jax.random.key(3), theta.shape)
    hvp = jax.jit(lambda t, u: jax.jvp(jax.grad(mean_kl), (t,), (u,))[1])(theta, v)
    fvp = jax.jit(lambda t, u: trust_region.head_fisher_vector_product(out_fn, t, w, head.kl)(u))
    np.testing.assert_allclose(fvp(theta, v), hvp, rtol=2e-3, atol=1e-6)


@pytest.mark.slow
def test_cpo_update_keeps_the_gaussian_kl_in_the_trust_region():
    """One CPO update on Reach: the reported KL is the head's mean KL between the old and the new
    Gaussian policies at the batch's samples, within max_kl (the line search's check)."""
    cfg = CPO.replace(episodes_per_iteration=64, fisher_samples=0, max_kl=0.01)
    setup = cpo.setup(ENV, PARAMS, cfg)
    state = cpo.init(jax.random.key(0), setup, cfg)
    batch = cpo.rollout(jax.random.key(1), state, setup, cfg)
    new, metrics = jax.jit(lambda st, b, k: cpo.update(st, b, k, setup, cfg))(
        state, batch, jax.random.split(jax.random.key(2))
    )
    assert float(metrics["step_fraction"]) > 0
    x, _ = setup.sample_inputs(batch)
    kl = jnp.mean(setup.head.kl(setup.actor.apply(state.actor, x), setup.actor.apply(new.actor, x)))
    np.testing.assert_allclose(float(metrics["kl"]), float(kl), rtol=1e-4)
    assert 0 < float(kl) <= cfg.max_kl * (1 + 1e-5)


# ----------------------------------------------------------------------------- validation and refusals


@pytest.mark.parametrize("module", [pl, cpo, saute])
@pytest.mark.parametrize(
    "changes,match",
    [
        (
            {"log_std": "learned"},
            r"Config.log_std must be one of 'state_independent', 'state_dependent', found 'learned'",
        ),
        ({"initial_log_std": 2.0}, r"Config.initial_log_std must lie in \[-5, 1\], found 2"),
        ({"initial_log_std": -5.5}, r"Config.initial_log_std must lie in \[-5, 1\], found -5.5"),
        ({"initial_log_std": float("nan")}, r"Config.initial_log_std must be finite"),
        ({"initial_log_std": 0}, r"Config.initial_log_std must be a float in \[-5, 1\], found int"),
    ],
)
def test_bad_log_std_settings_are_refused_by_the_config(module, changes, match):
    with pytest.raises(ValueError, match=match):
        module.Config(**changes)


@pytest.mark.slow
def test_saute_trains_a_gaussian_policy_on_box_actions():
    """Saute-Lagrangian on box actions: the continuous budget in BudgetEnv with PPO's Gaussian
    head; from the initial Gaussian (reward -10.4, cost 1.83) 60 updates reach a reward above -3
    while the cost falls below 1.7, judged by Monte-Carlo of its ``policy`` in the environment
    where it tracks its budget (4096 episodes). Reach's rewards are all negative, so past an
    exhausted budget they are kept (min(r, -n)) and the multiplier does the constraining: 60
    updates do not reach alpha = 1 (1.58 measured); the robustness suite measures the default
    run on Pendulum."""
    cfg = saute.Config(
        num_iterations=60, episodes_per_iteration=256, eval_every=0, eval_episodes=1024, observation="env"
    )
    out = jax.jit(saute.make_train(ENV, PARAMS, cfg))(jax.random.key(0))
    assert out.state.budget == "continuous"
    assert isinstance(
        saute.ALGORITHM.action_head(saute.policy_setup(saute_envs.BudgetEnv(ENV), PARAMS, out.state)), DiagonalGaussian
    )
    env, params = play_environment(saute, out.state, ENV, PARAMS)
    assert isinstance(env, saute_envs.BudgetEnv) and env.observation_shape == (3,)  # (x, h / H, z)
    ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
        jax.random.key(11), env, params, saute.policy(out.state, env, params), 4096
    )
    r, c = float(np.mean(ret.rewards)), float(np.mean(ret.costs[:, 0]))
    assert r > -3.0 and c < 1.7, (r, c)
    with pytest.raises(ValueError, match="the remaining budget, which Reach"):
        saute.policy(out.state, ENV, PARAMS)


class _TabularReach(Reach):
    """Reach claiming tabular states: Saute-Lagrangian would report a Markov policy table."""

    is_tabular = property(lambda self: True)


def test_saute_refuses_box_actions_on_tabular_states_before_compiling():
    """A Markov policy table needs finitely many actions: box actions on tabular states are
    refused by make_train and setup, with the way out named."""
    env = _TabularReach()
    for call in (
        lambda: saute.make_train(env, PARAMS, saute.Config()),
        lambda: saute.setup(env, PARAMS, saute.Config()),
    ):
        with pytest.raises(ValueError, match=r"saute: on an environment with tabular states.*box\) actions"):
            call()
