"""Every learner is invariant to the units of rewards and costs (issue: "Invariance to units").

Rewards x c_r and costs with their thresholds x c_c describe the same decision problem. Each
learner trains on signals in units of their own observed magnitudes
(:class:`fhc_jax.envs.wrappers.ScaledSignals`) and moves its multipliers with the relative
violation, so the rescaled problem trains to the same policy: bit for bit when c_r and c_c are
powers of two (every scaling is then exact in floating point), and to the same judgement
within 1% for other factors (0.01, 100: one rounding per signal).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.algos import cpo, ecop, fh_constrained, nn_constrained, ppo_lagrangian, saute
from fhc_jax.envs import suite

SHORT = {
    fh_constrained: dict(num_iterations=30, episodes_per_iteration=32, eval_every=10, eval_episodes=512),
    nn_constrained: dict(num_iterations=12, episodes_per_iteration=32, eval_every=4, eval_episodes=512),
    ppo_lagrangian: dict(num_iterations=8, episodes_per_iteration=16, eval_every=4, eval_episodes=512),
    cpo: dict(num_iterations=4, episodes_per_iteration=32, eval_every=2, eval_episodes=512),
    ecop: dict(num_iterations=4, episodes_per_iteration=32, eval_every=2, eval_episodes=512),
    saute: dict(num_iterations=6, episodes_per_iteration=16, eval_every=3, eval_episodes=512),
}
BASE = suite.garnet(8, 3, 5, 2, seed=3, fraction=0.4)


def _train(module, reward_scale: float, cost_scale: float):
    cmdp = suite.rescale(BASE, reward_scale, cost_scale)
    env = fhc.TabularEnv(cmdp)
    out = jax.jit(module.make_train(env, cmdp, module.Config(**SHORT[module])))(jax.random.key(7))
    table = np.asarray(module.policy_table(out.state, env, cmdp))
    judged = fhc.evaluate(cmdp, table)
    return out, table, float(judged.reward) / reward_scale, np.asarray(judged.costs) / cost_scale


def _check(module, scales):
    out, table, reward, costs = _train(module, 1.0, 1.0)
    for c_r, c_c in scales:
        out2, table2, reward2, costs2 = _train(module, c_r, c_c)
        exact = np.log2(c_r).is_integer() and np.log2(c_c).is_integer()
        if exact:  # every scaling exact in floating point: the same run, bit for bit
            np.testing.assert_array_equal(table2, table)
            np.testing.assert_array_equal(
                np.asarray(out2.metrics.multipliers), np.asarray(out.metrics.multipliers) * np.float32(c_r / c_c)
            )
        else:  # one rounding per signal: the same judgement within 1%
            np.testing.assert_allclose(reward2, reward, rtol=0.01)
            np.testing.assert_allclose(costs2, costs, rtol=0.01)
            np.testing.assert_allclose(table2, table, atol=0.01)
        np.testing.assert_array_equal(np.asarray(out2.selection.iteration), np.asarray(out.selection.iteration))


@pytest.mark.slow
def test_fh_constrained_is_invariant_to_units():
    _check(fh_constrained, [(4.0, 0.25), (100.0, 0.01), (0.01, 100.0)])


@pytest.mark.slow  # five more learners: one compilation per scale each
@pytest.mark.parametrize(
    "module", [nn_constrained, ppo_lagrangian, cpo, ecop, saute], ids=lambda m: m.__name__.split(".")[-1]
)
def test_every_learner_is_invariant_to_units(module):
    _check(module, [(4.0, 0.25), (100.0, 0.01), (0.01, 100.0)])


def _with_thresholds(cmdp, thresholds):
    return fhc.TabularCMDP(
        cmdp.transitions,
        cmdp.rewards,
        cmdp.costs,
        cmdp.terminal_rewards,
        cmdp.terminal_costs,
        np.asarray(thresholds, np.float32),
        cmdp.initial_distribution,
    )


@pytest.mark.slow
def test_training_units_shrink_a_small_budget_only():
    """A rare-event budget (alpha below H / 100 step magnitudes) is H / 100 training units for
    the learners that ask for it; every other budget keeps the signals' magnitudes, bit for bit."""
    from fhc_jax.envs.wrappers import MAX_BUDGET_SHRINK, signal_scales, training_scales

    events = suite.task("maintenance_events").cmdp()
    env = fhc.TabularEnv(events)
    _, u = signal_scales(env, events)
    _, small = training_scales(env, events)
    alpha = float(np.asarray(events.thresholds)[0])
    assert alpha / u[0] < env.horizon / 100  # the task is a small budget in step magnitudes
    np.testing.assert_allclose(alpha / small[0], env.horizon / 100, rtol=1e-6)
    np.testing.assert_array_equal(training_scales(env, events, small_budgets=False)[1], u)
    # the same costs and threshold x 0.25: the same training units, so the same training
    quarter = suite.rescale(events, 1.0, 0.25)
    np.testing.assert_array_equal(training_scales(fhc.TabularEnv(quarter), quarter)[1], small * 0.25)
    # a budget of many step magnitudes, and a threshold of 0: the signals' magnitudes
    for cmdp in (BASE, _with_thresholds(BASE, [0.0])):
        np.testing.assert_array_equal(
            training_scales(fhc.TabularEnv(cmdp), cmdp)[1], signal_scales(fhc.TabularEnv(cmdp), cmdp)[1]
        )
    # a budget of almost nothing: the unit shrinks by at most MAX_BUDGET_SHRINK
    tiny = _with_thresholds(BASE, [1e-9])
    _, u_tiny = signal_scales(fhc.TabularEnv(tiny), tiny)
    np.testing.assert_allclose(training_scales(fhc.TabularEnv(tiny), tiny)[1], u_tiny / MAX_BUDGET_SHRINK)
