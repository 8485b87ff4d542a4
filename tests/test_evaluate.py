"""Exact evaluation: hand-computable cases, jit/vmap consistency, dense vs sparse kernels."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import STAY, SWITCH, random_cmdp, random_policy, switch_cmdp

import fhc_jax as fhc


def test_hand_computed_uniform_policy(x64):
    ev = fhc.evaluate(switch_cmdp(), jnp.full((2, 2, 2), 0.5))
    # Stage 0 from s=0: reward 0.5, reaches s=1 w.p. 0.5; stage 1: reward 0.5, P(s_2=1)=0.5.
    assert ev.reward == pytest.approx(0.5 + 0.5 + 10 * 0.5)
    np.testing.assert_allclose(ev.costs, [1.0])
    np.testing.assert_allclose(ev.occupancy, [[1, 0], [0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_allclose(ev.stage_rewards, [0.5, 0.5, 5.0])
    np.testing.assert_allclose(ev.stage_costs, [[0.5, 0.5, 0.0]])
    np.testing.assert_allclose(ev.values[2], [0.0, 10.0])
    np.testing.assert_allclose(ev.values[1], [0.5 + 5.0, 0.5 + 5.0])
    np.testing.assert_allclose(ev.cost_values[0, 1], [0.5, 0.5])


@pytest.mark.parametrize(
    "actions, reward, cost",
    [((STAY, STAY), 0.0, 0.0), ((STAY, SWITCH), 11.0, 1.0), ((SWITCH, STAY), 11.0, 2.0), ((SWITCH, SWITCH), 2.0, 1.0)],
)
def test_hand_computed_deterministic_policies(x64, actions, reward, cost):
    policy = np.zeros((2, 2, 2))
    for h, a in enumerate(actions):
        policy[h, :, a] = 1.0
    ev = fhc.evaluate(switch_cmdp(), jnp.asarray(policy))
    assert float(ev.reward) == pytest.approx(reward)
    assert float(ev.costs[0]) == pytest.approx(cost)


def test_values_satisfy_bellman_and_occupancy_sums_to_one(x64):
    cmdp = random_cmdp(3, num_constraints=2)
    pol = random_policy(0, 4, 5, 3)
    ev = fhc.evaluate(cmdp, jnp.asarray(pol))
    p = np.asarray(cmdp.transitions)
    r = np.asarray(cmdp.rewards)
    for h in range(4):  # reference recursion with plain loops
        q = r[h] + p[h] @ np.asarray(ev.values[h + 1])
        np.testing.assert_allclose(ev.values[h], (pol[h] * q).sum(-1), rtol=1e-12)
    np.testing.assert_allclose(ev.occupancy.sum(-1), 1.0, rtol=1e-12)
    assert float(ev.reward) == pytest.approx(float(ev.stage_rewards.sum()))
    np.testing.assert_allclose(ev.costs, ev.stage_costs.sum(-1), rtol=1e-12)
    np.testing.assert_allclose(ev.costs, ev.cost_values[:, 0] @ np.asarray(cmdp.initial_distribution))


def test_float64_when_enabled(x64):
    ev = fhc.evaluate(random_cmdp(0), jnp.asarray(random_policy(0, 4, 5, 3)))
    assert ev.reward.dtype == jnp.float64


def test_float32_by_default():
    ev = fhc.evaluate(random_cmdp(0), jnp.asarray(random_policy(0, 4, 5, 3), jnp.float32))
    assert ev.reward.dtype == jnp.float32


def test_vmap_over_policies_equals_single_calls(x64):
    cmdp = random_cmdp(4, time_varying=False)
    pols = jnp.stack([jnp.asarray(random_policy(i, 4, 5, 3)) for i in range(6)])
    batched = jax.vmap(fhc.evaluate, in_axes=(None, 0))(cmdp, pols)
    for i in range(6):
        single = fhc.evaluate(cmdp, pols[i])
        np.testing.assert_allclose(batched.reward[i], single.reward, rtol=1e-12)
        np.testing.assert_allclose(batched.costs[i], single.costs, rtol=1e-12)


@pytest.mark.parametrize("time_varying", [False, True])
def test_sparse_kernel_matches_dense(x64, time_varying):
    cmdp = random_cmdp(5, time_varying=time_varying, num_constraints=2)
    p = np.asarray(cmdp.transitions)
    nxt = np.broadcast_to(np.arange(5), p.shape).astype(np.int32)
    sparse = cmdp.replace(transitions=fhc.SparseTransitions(nxt, p))
    pol = jnp.asarray(random_policy(1, 4, 5, 3))
    a, b = fhc.evaluate(cmdp, pol), fhc.evaluate(sparse, pol)
    np.testing.assert_allclose(a.reward, b.reward, rtol=1e-12)
    np.testing.assert_allclose(a.costs, b.costs, rtol=1e-12)
    np.testing.assert_allclose(a.occupancy, b.occupancy, atol=1e-14)
