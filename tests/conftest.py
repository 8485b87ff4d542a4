"""Shared fixtures: float64 on demand and seeded random CMDPs."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fhc_jax as fhc


@pytest.fixture
def x64():
    """Run a test with 64-bit JAX types (exact-solver comparisons)."""
    with jax.enable_x64(True):
        yield


def random_cmdp(
    seed: int,
    num_states: int = 5,
    num_actions: int = 3,
    horizon: int = 4,
    num_constraints: int = 1,
    time_varying: bool = True,
    thresholds=None,
) -> fhc.TabularCMDP:
    """A seeded random CMDP with sparse-ish Dirichlet transitions and terminal terms."""
    rng = np.random.default_rng(seed)
    s, a, h, m = num_states, num_actions, horizon, num_constraints
    shape = (h, s, a) if time_varying else (s, a)
    p = rng.dirichlet(np.full(s, 0.5), size=shape)
    return fhc.TabularCMDP(
        transitions=p,
        rewards=rng.uniform(0.0, 1.0, (h, s, a)),
        costs=rng.uniform(0.0, 1.0, (m, h, s, a)),
        terminal_rewards=rng.uniform(0.0, 1.0, s),
        terminal_costs=rng.uniform(0.0, 1.0, (m, s)),
        thresholds=np.full(m, 1e9) if thresholds is None else thresholds,
        initial_distribution=rng.dirichlet(np.ones(s)),
    )


def random_policy(seed: int, horizon: int, num_states: int, num_actions: int) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(num_actions), size=(horizon, num_states))
