"""The replay of the user probe of issue 43, "trust at every scale: the referee, the judge and the
status never call an infeasible policy feasible": each case A..O, as the probe found it, as a
short check that the result is now right or the error is one line. The thorough tests of each
case are elsewhere (docs/RELIABILITY.md names them); this file only replays the probe, case by
case, so that a regression of any one of them shows here by its letter."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import RareCost, random_cmdp

import fhc_jax as fhc
from fhc_jax.algos.core import multipliers, selection
from fhc_jax.envs.wrappers import ScaledSignals
from fhc_jax.experiment import (
    compare_report,
    config,
    distributed,
    fingerprint,
    judge,
    returned,
)


def _one_line(call, error=ValueError, match: str = "") -> str:
    """The message of the error ``call()`` raises: one line, containing ``match``."""
    with pytest.raises(error) as err:
        call()
    text = str(err.value)
    assert "\n" not in text and match in text, text
    return text


def case_a():
    """A: a reward of 1,000 against a cost of 1e-8 and alpha = 5e-9: solve returned cost 1e-8."""
    cmdp = fhc.TabularCMDP(
        np.ones((1, 2, 1)),
        np.array([[[1e3, 0.0]]]),
        np.array([[[[1e-8, 0.0]]]]),
        thresholds=np.array([5e-9]),
        initial_distribution=np.ones(1),
    )
    np.testing.assert_allclose(fhc.solve(cmdp).costs, [5e-9], rtol=1e-6)


def case_b():
    """B: the judge's absolute slack 1e-9 called costs 10x alpha feasible at scale 1e-13."""
    assert not judge.judge([1.0], [[1e-12]], [1e-13]).feasible[0]
    assert judge.judge([1.0], [[1.01e-13]], [1e-13]).feasible[0]


def case_c():
    """C: infeasibility and the optimum at every scale (costs and alpha x 1e-12 and x 1e12)."""
    base = random_cmdp(2, num_states=4, num_actions=2, horizon=3, thresholds=np.array([2.0]))
    ref = fhc.solve(base)
    for c in (1e-12, 1e12):
        scaled = base.replace(
            costs=base.costs * c, terminal_costs=base.terminal_costs * c, thresholds=base.thresholds * c
        )
        np.testing.assert_allclose(fhc.solve(scaled).costs, ref.costs * c, rtol=1e-5)
        _one_line(
            lambda s=scaled: fhc.solve(s.replace(thresholds=np.array([0.0]))),
            fhc.InfeasibleConstraintError,
            "minimum achievable",
        )


def case_d():
    """D: costs of order 1e30 overflowed the candidates' float32 spread: nothing was selected."""
    from fhc_jax.algos import fh_constrained as fc

    cmdp = random_cmdp(3, num_states=4, num_actions=2, horizon=5, thresholds=np.array([1.2e30]))
    env = fhc.TabularEnv(cmdp.replace(costs=cmdp.costs * 1e30, terminal_costs=cmdp.terminal_costs * 1e30))
    cfg = fc.Config(num_iterations=20, episodes_per_iteration=16, eval_every=10, eval_episodes=256)
    out = jax.jit(fc.make_train(env, env.default_params, cfg))(jax.random.key(0))
    assert int(out.selection.iteration) >= 10 and np.all(np.isfinite(np.asarray(out.selection.upper)))


def case_e():
    """E: no cost event in the sample: the upper bound collapsed onto 0 ('[0.0, 0.0] feasible' at
    a true cost of 0.27 against 0.255), in the learners' bound and in the judge's."""
    np.testing.assert_allclose(
        multipliers.upper_bound_excess(jnp.zeros((100, 1)), 100), [np.log(20.0) / 100], rtol=1e-6
    )
    env = RareCost()
    j = judge.judge_monte_carlo(env, env.default_params, [lambda key, obs, h: jnp.zeros((), jnp.int32)], 20)
    assert not j.feasible[0] and j.cost_half_width[0, 0] > 0


def case_f():
    """F: the multiplier laws and ScaledSignals took bad inputs without a word."""
    _one_line(lambda: multipliers.pid(bound=-1.0, kp=0.0, ki=1.0), match="pid.bound must be > 0")
    _one_line(lambda: ScaledSignals(fhc.GridWorld(size=3, horizon=4), "2", [1.0]), match="reward_scale must be")


def case_g():
    """G: a run of 12 updates was called settled."""
    st = selection.constraint_status(
        np.full((12, 1), 1.0),
        np.full((12, 1), 1.0),
        np.array([2.0]),
        np.array([2.0]),
        np.array([1.0]),
        True,
        np.array([1.0]),
    )
    assert bool(st.short) and not bool(st.settled) and "too short to tell" in st.describe()


def case_h():
    """H: a reward below float32's smallest normal number was flushed to zero without a word."""
    rewards = np.ones((2, 1, 2))
    rewards[0, 0, 0] = 1e-40
    _one_line(
        lambda: fhc.TabularCMDP(
            np.ones((1, 2, 1)), rewards, np.ones((1, 2, 1, 2)), thresholds=np.ones(1), initial_distribution=np.ones(1)
        ),
        match="TabularCMDP.rewards: 1 nonzero values",
    )


def case_i():
    """I: run.seed wrapped modulo 2**32; run.feasibility_tolerance=inf failed after training."""
    _one_line(lambda: config.load_spec(overrides=["run.seed=4294967296"]), match="run.seed must be an integer <=")
    _one_line(lambda: config.load_spec(overrides=["run.feasibility_tolerance=inf"]), match="must be a finite number")


def case_j():
    """J: a run's environment whose data changed was resumed and judged '[as trained]'."""
    env, params = config.make_env("gridworld", {"size": 3, "horizon": 4})
    stored = fingerprint.environment_fingerprint(env, params)
    moved = params.replace(cost_map=params.cost_map * 2.0)
    assert "its params (leaf cost_map differs)" in fingerprint.environment_difference(stored, env, moved)
    assert fingerprint.environment_difference(None, env, params) == fingerprint.NOT_RECORDED


def case_k():
    """K: compare printed row 0's tolerance for every row and listed rows by algorithm."""
    s = {"mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0, "per_seed": [1.0]}
    row = lambda label, tol: {
        "label": label,
        "name": label,
        "input": "-",
        "num_iterations": 1,
        "episodes_per_iteration": 1,
        "changed_settings": {},
        "feasibility_tolerance": tol,
        "paper_metric": {"reward": s, "costs": [s], "violating_seeds": 0},
        "exact": {"reward": s, "costs": [s], "violating_seeds": 0},
        "timing": {"wall_s": 1.0, "compile_s": 0.0},
    }
    machine = {
        "cpu": {"model": "-", "usable_cores": 1, "logical_cores": 1},
        "versions": {"jax": "-"},
        "device": {"platform": "cpu", "name": "-"},
    }
    md = compare_report.format_markdown(
        {
            "thresholds": [1.0],
            "optimum": None,
            "seeds": 1,
            "seed": 0,
            "paper_episodes": 1,
            "notes": [],
            "unconstrained": {"reward": 1.0, "costs": [1.0], "solve_time_s": 0.0},
            "env": {"name": "x"},
            "machine": machine,
            "timing": {"total_wall_s": 1.0, "compile_s": 0.0, "load_average_start": None, "load_average_end": None},
            "runs": [row("strict", 0.0), row("lenient", 0.5)],
            "tolerance": None,
        }
    )
    assert "| strict |" in md and "| lenient |" in md and "(tolerance 50%)" in md


def case_l():
    """L: processes of one run never compared configurations; a port in use was a raw error."""
    assert (
        distributed.configuration_difference({"env.alpha": 3.0}, {"env.alpha": 4.0})
        == "env.alpha: 3.0 (process 0) vs 4.0 (process 1)"
    )
    with socket.socket() as held:
        held.bind(("localhost", 0))
        held.listen()
        port = held.getsockname()[1]
        _one_line(
            lambda: distributed.initialize(distributed.Cluster(f"localhost:{port}", 2, 0)),
            ValueError,
            f"port {port} is in use on this host",
        )


def case_m():
    """M: benchmarks/robustness.py checked --episodes after training a cell."""
    root = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(root))
    try:
        import robustness
    finally:
        sys.path.remove(str(root))
    with pytest.raises(SystemExit) as exit_:
        robustness.main(["--episodes", str(10**13), "--tasks", "gridworld5_tight"])
    assert exit_.value.code == 2


def case_n():
    """N: the returned iteration, far below the last iterate, was not reported."""
    rows = returned.returned_policies([25], [0, 25, 100], [[0.0, 6.0, 10.0]], [[[1.0], [0.5], [0.9]]], [1.0], "exact")
    assert rows[0]["message"].startswith("seed 0: returned the iteration-25 policy (60% of the last iterate's reward")


def case_o():
    """O: the status was several lines per batch; now one per run, from Status.describe()."""
    st = selection.constraint_status(
        np.full((100, 1), 2.0),
        np.full((100, 1), 1.0),
        np.array([2.0]),
        np.array([2.0]),
        np.array([1.0]),
        True,
        np.array([1.5]),
    )
    assert str(st) == st.describe() == "constraint met; multiplier settled"


CASES = {name[-1].upper(): fn for name, fn in sorted(globals().items()) if name.startswith("case_")}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_probe_case(case, capsys):
    assert CASES[case].__doc__.startswith(f"{case}: ")
    CASES[case]()


def test_every_case_of_the_probe_is_replayed():
    assert "".join(sorted(CASES)) == "ABCDEFGHIJKLMNO"
