"""TabularCMDP validation: every bad field gets a ValueError that names it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_cmdp

import fhc_jax as fhc


def _fields(cmdp):
    return dict(
        transitions=np.asarray(cmdp.transitions),
        rewards=np.asarray(cmdp.rewards),
        costs=np.asarray(cmdp.costs),
        terminal_rewards=np.asarray(cmdp.terminal_rewards),
        terminal_costs=np.asarray(cmdp.terminal_costs),
        thresholds=np.asarray(cmdp.thresholds),
        initial_distribution=np.asarray(cmdp.initial_distribution),
    )


def test_sizes_and_repr():
    cmdp = random_cmdp(0, num_states=4, num_actions=2, horizon=3, num_constraints=2)
    assert (cmdp.horizon, cmdp.num_states, cmdp.num_actions, cmdp.num_constraints) == (3, 4, 2, 2)
    assert cmdp.time_varying
    assert "H=3" in repr(cmdp) and "M=2" in repr(cmdp)


def test_defaults_for_terminal_terms():
    base = _fields(random_cmdp(0))
    cmdp = fhc.TabularCMDP(
        base["transitions"],
        base["rewards"],
        base["costs"],
        thresholds=base["thresholds"],
        initial_distribution=base["initial_distribution"],
    )
    np.testing.assert_array_equal(cmdp.terminal_rewards, 0.0)
    assert cmdp.terminal_costs.shape == (1, 5)


# case -> (field, how to corrupt it, text the message must contain)
BAD = {
    "transitions_shape": ("transitions", lambda f: f["transitions"][..., :-1], "last axis must have S = 5"),
    "transitions_rows": ("transitions", lambda f: f["transitions"] * 1.01, "sum to 1"),
    "transitions_negative": (
        "transitions",
        lambda f: np.where(np.arange(5) == 0, -0.1, f["transitions"] + 0.1 / 4),
        "non-negative",
    ),
    "transitions_horizon": ("transitions", lambda f: f["transitions"][:2], "H = 4"),
    "rewards_shape": ("rewards", lambda f: f["rewards"][:, :, :2], "expected shape"),
    "rewards_nan": ("rewards", lambda f: np.where(f["rewards"] > 0.5, np.nan, f["rewards"]), "finite"),
    "costs_rank": ("costs", lambda f: f["costs"][0], "expected shape"),
    "costs_horizon": ("costs", lambda f: f["costs"][:, :3], "H = 4"),
    "terminal_rewards": ("terminal_rewards", lambda f: f["terminal_rewards"][:3], "(S,)"),
    "terminal_costs": ("terminal_costs", lambda f: f["terminal_costs"][:, :3], "(M, S)"),
    "thresholds_shape": ("thresholds", lambda f: np.zeros(2), "(M,)"),
    "thresholds_inf": ("thresholds", lambda f: np.array([np.inf]), "finite"),
    "initial_sum": ("initial_distribution", lambda f: f["initial_distribution"] * 2, "sum to 1"),
    "initial_shape": ("initial_distribution", lambda f: np.ones(3) / 3, "(S,)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_validation_errors_name_the_field(case):
    fields = _fields(random_cmdp(0))
    name, corrupt, expected = BAD[case]
    fields[name] = corrupt(fields)
    with pytest.raises(ValueError) as err:
        fhc.TabularCMDP(**fields)
    msg = str(err.value)
    assert f"TabularCMDP.{name}" in msg
    assert expected in msg


def test_sparse_validation():
    nxt = np.zeros((3, 2, 2), dtype=np.int32)
    probs = np.full((3, 2, 2), 0.5)
    kw = dict(
        rewards=np.zeros((2, 3, 2)), costs=np.zeros((1, 2, 3, 2)), thresholds=[1.0], initial_distribution=np.ones(3) / 3
    )
    fhc.TabularCMDP(fhc.SparseTransitions(nxt, probs), **kw)  # valid
    with pytest.raises(ValueError, match=r"next_states: indices must lie in \[0, 2\]"):
        fhc.TabularCMDP(fhc.SparseTransitions(nxt + 3, probs), **kw)
    with pytest.raises(ValueError, match="next_states: expected integers"):
        fhc.TabularCMDP(fhc.SparseTransitions(nxt.astype(float), probs), **kw)
    with pytest.raises(ValueError, match="sum to 1"):
        fhc.TabularCMDP(fhc.SparseTransitions(nxt, probs * 0.9), **kw)
    with pytest.raises(ValueError, match="rewards"):
        fhc.TabularCMDP(fhc.SparseTransitions(nxt, probs), **{**kw, "rewards": np.zeros((2, 3, 2, 3))})


def test_is_a_pytree_through_jit():
    cmdp = random_cmdp(1)
    leaves = jax.tree.leaves(cmdp)
    assert len(leaves) == 7
    doubled = jax.jit(lambda c: jax.tree.map(lambda x: 2 * x, c))(cmdp)
    assert isinstance(doubled, fhc.TabularCMDP)
    np.testing.assert_allclose(doubled.rewards, 2 * np.asarray(cmdp.rewards), rtol=1e-6)


def test_expected_rewards_from_per_next_state_rewards():
    cmdp = random_cmdp(2, time_varying=False)
    r4 = np.random.default_rng(0).uniform(size=(4, 5, 3, 5))
    cmdp4 = cmdp.replace(rewards=r4)
    p = np.asarray(cmdp.transitions)
    np.testing.assert_allclose(cmdp4.expected_rewards(), np.einsum("sat,hsat->hsa", p, r4), rtol=1e-5)


def test_sparse_to_dense_sums_repeated_successors():
    sparse = fhc.SparseTransitions(jnp.array([[[1, 1, 0]]]), jnp.array([[[0.25, 0.25, 0.5]]]))
    np.testing.assert_allclose(sparse.to_dense(2), [[[0.5, 0.5]]])
