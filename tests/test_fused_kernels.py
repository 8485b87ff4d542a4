"""The exact solvers' fast forms equal the reference forms: the term-by-term successor sums,
the deterministic-policy kernel operations, the fused evaluation, the oracle's tracked values
and the occupancy of a mixture of deterministic policies."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_cmdp, random_policy

import fhc_jax as fhc
from fhc_jax.cmdp import transitions as tr
from fhc_jax.cmdp.evaluate import _evaluate

solve_module = importlib.import_module("fhc_jax.cmdp.solve")


def _sparse(cmdp: fhc.TabularCMDP, seed: int, successors: int = 4) -> fhc.TabularCMDP:
    """The same rewards with a random sparse kernel (repeated successors included)."""
    rng = np.random.default_rng(seed)
    shape = np.asarray(cmdp.transitions).shape[:-1] + (successors,)
    nxt = rng.integers(0, cmdp.num_states, shape).astype(np.int32)
    nxt[..., 1] = nxt[..., 0]  # a repeated successor: probabilities add up
    return cmdp.replace(transitions=fhc.SparseTransitions(nxt, rng.dirichlet(np.ones(successors), shape[:-1])))


def _models(m: int):
    dense = random_cmdp(m, num_states=7, num_actions=3, horizon=6, num_constraints=m)
    still = random_cmdp(10 + m, num_states=7, num_actions=3, horizon=6, num_constraints=m, time_varying=False)
    grid = fhc.GridWorld(size=4, horizon=7, num_constraints=max(m, 1))
    models = [dense, still, _sparse(dense, m), _sparse(still, m + 1)]
    return models + ([grid.to_cmdp(grid.default_params)] if m >= 1 else [])


@pytest.mark.slow
@pytest.mark.parametrize("m", [0, 1, 2])
def test_kernel_operations_agree_with_the_reference_forms(x64, m):
    for cmdp in _models(m):
        c = cmdp.astype(jnp.float64)
        rng = np.random.default_rng(m)
        values = jnp.asarray(rng.normal(size=(3, c.num_states)))
        acts = jnp.asarray(rng.integers(0, c.num_actions, c.num_states))
        pi = jnp.asarray(random_policy(m, 1, c.num_states, c.num_actions)[0])
        mass = jnp.asarray(rng.uniform(size=c.num_states))
        for h in range(c.horizon):
            k = tr.stage(c.transitions, h)
            full = tr.expect_next(k, values)
            np.testing.assert_allclose(tr.expect_next(k, values, fused=True), full, rtol=1e-13, atol=1e-13)
            np.testing.assert_allclose(
                tr.expect_next_action(k, values, acts),
                jnp.take_along_axis(full, acts[None, :, None], -1)[..., 0],
                rtol=1e-13,
                atol=1e-13,
            )
            one_hot = mass[:, None] * jax.nn.one_hot(acts, c.num_actions, dtype=mass.dtype)
            np.testing.assert_allclose(
                tr.push_forward_action(k, mass, acts), tr.push_forward(k, one_hot), rtol=1e-13, atol=1e-15
            )
            w, idx = tr.policy_weighted(k, pi)
            np.testing.assert_allclose(
                jnp.sum(w * values[0][idx], -1), jnp.sum(pi * full[0], -1), rtol=1e-13, atol=1e-13
            )


@pytest.mark.slow
@pytest.mark.parametrize("m", [0, 1, 2])
def test_fused_evaluation_equals_the_reference(x64, m):
    for i, cmdp in enumerate(_models(m)):
        c = cmdp.astype(jnp.float64)
        policy = jnp.asarray(random_policy(i, c.horizon, c.num_states, c.num_actions))
        ref, fused = _evaluate(c, policy), _evaluate(c, policy, fused=True)
        for field in ("reward", "costs", "values", "cost_values", "occupancy", "stage_rewards", "stage_costs"):
            np.testing.assert_allclose(
                getattr(fused, field), getattr(ref, field), rtol=1e-12, atol=1e-12, err_msg=field
            )


@pytest.mark.slow
@pytest.mark.parametrize("m", [1, 2])
def test_oracle_values_and_mixture_occupancy(x64, m):
    for cmdp in _models(m):
        c = cmdp.astype(jnp.float64)
        penalties = jnp.linspace(0.2, 0.7, m)
        acts, j, costs = solve_module._greedy(c, jnp.asarray(1.0), penalties)
        policy = jax.nn.one_hot(acts, c.num_actions, dtype=jnp.float64)
        ev = _evaluate(c, policy)
        np.testing.assert_allclose([j, *costs], [ev.reward, *ev.costs], rtol=1e-12)
        # the greedy policy maximises the scalarised return: no random policy does better
        scal = float(j - penalties @ costs)
        for seed in range(3):
            other = _evaluate(c, jnp.asarray(random_policy(seed, c.horizon, c.num_states, c.num_actions)))
            assert float(other.reward - penalties @ other.costs) <= scal + 1e-9
        acts2 = solve_module._greedy(c, jnp.asarray(0.0), jnp.ones(m))[0]
        x = solve_module._mixture(c, [(acts, 0.3), (acts2, 0.7)])
        ref = [_evaluate(c, jax.nn.one_hot(a, c.num_actions, dtype=jnp.float64)) for a in (acts, acts2)]
        want = sum(
            w * r.occupancy[:-1, :, None] * jax.nn.one_hot(a, c.num_actions, dtype=jnp.float64)
            for w, r, a in zip((0.3, 0.7), ref, (acts, acts2))
        )
        np.testing.assert_allclose(x, want, rtol=1e-13, atol=1e-15)
