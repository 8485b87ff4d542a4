"""The exact trade-off curve (``fhc_jax.tradeoff``, ``fhc-jax solve --tradeoff``): every point is
the constrained optimum at its alpha (a separate ``solve``, and the occupancy LP), the curve is
non-decreasing and concave with the multipliers as its slopes, M = 2 sweeps each constraint, and
the command line prints the table, marks the threshold and writes the figure."""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_cmdp

import fhc_jax as fhc
from fhc_jax.cli import main
from fhc_jax.envs import suite
from fhc_jax.experiment.tradeoff_plot import MARK


def _solve_at(cmdp, alpha, k: int = 0, method: str = "dual"):
    """``solve`` with threshold k replaced by ``alpha``, in float64 (no float32 rounding of alpha)."""
    with jax.enable_x64(True):
        c64 = cmdp.astype(jnp.float64)
        thresholds = np.asarray(c64.thresholds, np.float64).copy()
        thresholds[k] = alpha
        return fhc.solve(c64.replace(thresholds=thresholds), method=method)


def _shape_violations(alphas, rewards, nu, rtol: float = 1e-7) -> list[str]:
    """What keeps (alphas, rewards) with slopes ``nu`` from being a non-decreasing concave curve
    whose multipliers are supergradients: nu_i >= (r_{i+1} - r_i) / (a_{i+1} - a_i) >= nu_{i+1}."""
    tol = rtol * max(1.0, float(np.max(np.abs(rewards))))
    out = []
    steps = np.diff(rewards)
    if np.any(steps < -tol):
        out.append(f"decreasing at {np.flatnonzero(steps < -tol).tolist()}")
    slopes = steps / np.diff(alphas)
    if np.any(np.diff(slopes) > tol / np.min(np.diff(alphas))):
        out.append(f"not concave at {np.flatnonzero(np.diff(slopes) > tol / np.min(np.diff(alphas))).tolist()}")
    slack = tol / np.diff(alphas)
    if np.any(nu[:-1] < slopes - slack) or np.any(nu[1:] > slopes + slack):
        out.append("multipliers are not the slopes")
    if np.any(nu < 0):
        out.append("negative multiplier")
    return out


@functools.cache
def _gridworld():
    env = fhc.GridWorld()
    cmdp = env.to_cmdp(env.default_params)
    return cmdp, fhc.tradeoff(cmdp, 21)


@functools.cache
def _garnet():
    cmdp = suite.task("garnet_s20").cmdp()
    return cmdp, fhc.tradeoff(cmdp, 21)


def test_gridworld_points_equal_separate_solves():
    cmdp, curve = _gridworld()
    assert curve.alphas.shape == curve.rewards.shape == (21,) and curve.multipliers.shape == curve.costs.shape == (
        21,
        1,
    )
    free = fhc.solve_unconstrained(cmdp)
    assert curve.alphas[-1] == pytest.approx(float(free.costs[0]), rel=1e-9) == curve.unconstrained_cost
    assert curve.rewards[-1] == pytest.approx(free.reward, rel=1e-9)
    assert curve.alphas[0] == curve.cheapest_cost and 0 < curve.cheapest_cost < 25.0 < curve.unconstrained_cost
    for i in (0, 4, 11, 19, 20):  # a few points (each solve is ~13 backward inductions)
        sol = _solve_at(cmdp, curve.alphas[i])
        assert curve.rewards[i] == pytest.approx(sol.reward, rel=1e-6), i
        np.testing.assert_allclose(curve.costs[i], sol.costs, rtol=1e-6)
        if 0 < i:  # at the cheapest cost (a breakpoint) any nu* >= the right slope is optimal
            np.testing.assert_allclose(curve.multipliers[i], sol.multipliers, rtol=1e-6, atol=1e-12)
        else:
            assert sol.multipliers[0] >= curve.multipliers[0, 0] * (1 - 1e-6)
    # the threshold in use: 25 lies on the curve between its neighbours
    sol = fhc.solve(cmdp)
    i = int(np.searchsorted(curve.alphas, 25.0))
    assert curve.rewards[i - 1] < sol.reward < curve.rewards[i]
    assert curve.position(25.0) == "binding"


def test_garnet_points_equal_separate_solves_and_the_lp():
    cmdp, curve = _garnet()
    for i, alpha in enumerate(curve.alphas):
        sol = _solve_at(cmdp, alpha)
        assert curve.rewards[i] == pytest.approx(sol.reward, rel=1e-6), i
        np.testing.assert_allclose(curve.costs[i], sol.costs, rtol=1e-6)
        if i > 0:
            np.testing.assert_allclose(curve.multipliers[i], sol.multipliers, rtol=1e-6, atol=1e-12)
    for i in (0, 7, 20):  # the occupancy LP: an independent method
        assert curve.rewards[i] == pytest.approx(_solve_at(cmdp, curve.alphas[i], method="lp").reward, rel=1e-6)


def test_curves_are_non_decreasing_and_concave():
    for _cmdp, curve in (_gridworld(), _garnet()):
        a, r, nu = curve.alphas, curve.rewards, curve.multipliers[:, 0]
        assert _shape_violations(a, r, nu) == []
        assert np.all(curve.reward_lost >= -1e-9) and curve.reward_lost[-1] == pytest.approx(0.0, abs=1e-9)
        # the check catches curves that are not: a dent, a convex curve, a drop, wrong slopes
        dent = r.copy()
        dent[10] -= 0.01 * (r[-1] - r[0])
        convex = r[0] + (r[-1] - r[0]) * ((a - a[0]) / (a[-1] - a[0])) ** 2
        drop = r.copy()
        drop[15:] -= 0.05 * (r[-1] - r[0])
        assert any("not concave" in v for v in _shape_violations(a, dent, nu))
        assert any("not concave" in v for v in _shape_violations(a, convex, np.gradient(convex, a)))
        assert any("decreasing" in v for v in _shape_violations(a, drop, nu))
        assert "multipliers are not the slopes" in _shape_violations(a, r, 0.5 * nu)
    # concave between the grid points too: the midpoint's exact value lies above the chord
    cmdp, curve = _garnet()
    mid = 0.5 * (curve.alphas[3] + curve.alphas[4])
    assert _solve_at(cmdp, mid).reward >= 0.5 * (curve.rewards[3] + curve.rewards[4]) - 1e-9


def _two_constraints():
    base = random_cmdp(5, num_states=6, num_actions=3, horizon=5, num_constraints=2)
    with jax.enable_x64(True):
        least, free = suite.cost_range(base.astype(jnp.float64))
    return base.replace(thresholds=least + 0.5 * (free - least))


def test_two_constraints_sweep_each_with_the_other_at_its_threshold(x64):
    cmdp = _two_constraints()
    alpha = np.asarray(cmdp.thresholds, np.float64)
    at_threshold = fhc.solve(cmdp)
    for k in (0, 1):
        curve = fhc.tradeoff(cmdp, 6, constraint=k)
        assert curve.constraint == k and curve.multipliers.shape == curve.costs.shape == (6, 2)
        assert curve.threshold == pytest.approx(alpha[k]) and curve.position(alpha[k]) == "binding"
        other = 1 - k
        for i in (0, 2, 5):  # the occupancy LP, independent of the dual's column generation
            lp = _solve_at(cmdp, curve.alphas[i], k, method="lp")
            assert curve.rewards[i] == pytest.approx(lp.reward, rel=1e-6), (k, i)
        assert np.all(curve.costs[:, other] <= alpha[other] * (1 + 1e-9))
        binding = curve.multipliers[:, k] > 0
        np.testing.assert_allclose(curve.costs[binding, k], curve.alphas[binding], rtol=1e-9)
        assert _shape_violations(curve.alphas, curve.rewards, curve.multipliers[:, k], rtol=1e-6) == []
        # the ends: below the cheapest cost (the other constraint kept) nothing is feasible, and
        # the last point is the optimum without constraint k
        with pytest.raises(fhc.InfeasibleConstraintError):
            _solve_at(cmdp, curve.cheapest_cost - 1e-3 * (curve.unconstrained_cost - curve.cheapest_cost), k)
        dropped = fhc.solve(
            cmdp.replace(
                costs=cmdp.costs[other : other + 1],
                terminal_costs=cmdp.terminal_costs[other : other + 1],
                thresholds=alpha[other : other + 1],
            )
        )
        assert curve.unconstrained_reward == pytest.approx(dropped.reward, rel=1e-9) == curve.rewards[-1]
        # the model's own threshold lies on the curve
        i = int(np.searchsorted(curve.alphas, alpha[k]))
        assert curve.rewards[i - 1] <= at_threshold.reward + 1e-9 and at_threshold.reward <= curve.rewards[i] + 1e-9


def test_alphas_outside_the_range_are_explained():
    _, curve = _garnet()
    below, above = curve.cheapest_cost - 0.1, curve.unconstrained_cost + 0.1
    assert curve.position(below) == "infeasible" and curve.position(above) == "not binding"
    assert (
        curve.position(curve.cheapest_cost) == "binding" and curve.position(curve.unconstrained_cost) == "not binding"
    )
    assert "is infeasible: it is below" in curve.describe(below) and "no policy meets it" in curve.describe(below)
    assert "does not bind" in curve.describe(above) and "multiplier 0" in curve.describe(above)
    assert curve.as_dict()["position_of_threshold"] == "binding"


def test_bad_arguments_are_refused():
    cmdp = random_cmdp(0)
    with pytest.raises(ValueError, match="tradeoff: num must be >= 2 points, found 1"):
        fhc.tradeoff(cmdp, 1)
    with pytest.raises(ValueError, match=r"tradeoff: constraint must lie in \[0, 0\], found 1"):
        fhc.tradeoff(cmdp, constraint=1)
    with pytest.raises(TypeError, match="tradeoff: num must be an integer, found float"):
        fhc.tradeoff(cmdp, 2.5)
    with pytest.raises(TypeError, match="tradeoff: expected a fhc_jax.TabularCMDP"):
        fhc.tradeoff("model")


def test_cli_prints_the_curve_marks_the_threshold_and_writes_the_plot(tmp_path, capsys):
    out = tmp_path / "solve.json"
    assert main(["solve", "--size", "3", "--horizon", "4", "--alpha", "3", "--tradeoff", "5", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["alpha", "reward"])
    rows = lines[head + 1 : head + 7]
    assert len(rows) == 6 and sum(MARK in row for row in rows) == 1  # 5 alphas and the threshold in use
    marked = next(row for row in rows if MARK in row).split()
    result = json.loads(out.read_text())
    assert float(marked[0]) == 3 and float(marked[1]) == pytest.approx(result["constrained"]["reward"], rel=1e-5)
    assert "alpha = 3 binds" in text
    curve = result["tradeoff"][0]
    assert len(curve["alphas"]) == 5 and curve["position_of_threshold"] == "binding"
    assert curve["alphas"][0] < 3 < curve["alphas"][-1]
    plot = tmp_path / "solve_tradeoff.png"  # the default: next to --out
    assert result["tradeoff_plot"] == str(plot) and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result["reward_loss"] == pytest.approx(result["unconstrained"]["reward"] - result["constrained"]["reward"])
    # outside the range: said in words; an infeasible alpha still shows the curve, exit 1
    figure = tmp_path / "figs" / "curve.png"
    assert main(["solve", "--size", "3", "--horizon", "4", "--alpha", "100", "--tradeoff", "--plot", str(figure)]) == 0
    text = capsys.readouterr().out
    assert "alpha = 100 does not bind" in text and "do" in text and figure.is_file()
    assert "the constraint does not bind (multiplier 0): no reward lost" in text
    assert (
        main(["solve", "--size", "3", "--horizon", "4", "--alpha", "0.5", "--tradeoff", "3", "--plot", str(figure)])
        == 1
    )
    captured = capsys.readouterr()
    assert "alpha = 0.5 is infeasible: it is below" in captured.out and "infeasible constraints" in captured.err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tradeoff", "1"], "--tradeoff N: the number of thresholds must lie in [2, 10000], found 1"),
        (["--tradeoff", "0"], "--tradeoff N: the number of thresholds must lie in [2, 10000], found 0"),
        (["--plot", "x.png"], "--plot is the figure of --tradeoff; add --tradeoff [N] or drop --plot"),
        (["--tradeoff", "--plot", "/proc/x.png"], "--plot /proc/x.png: cannot write there"),
        (["--tradeoff", "--plot", "curve.pdf"], "--plot curve.pdf: the figure is a PNG file"),
    ],
)
def test_cli_refuses_bad_tradeoff_arguments_in_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["solve", "--size", "3", "--horizon", "4", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fhc-jax solve: error: ") and message in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_solve_summary_is_right_for_negative_and_zero_rewards(capsys):
    from fhc_jax.cli_commands import _reward_loss

    class Sol:
        def __init__(self, reward, nu):
            self.reward, self.multipliers = reward, np.array([nu])

    line, loss, rel = _reward_loss(Sol(-10.0, 0.0), Sol(-15.0, 2.0))  # was "-50.0%"
    assert loss == 5.0 and rel == 0.5 and "costs 5 reward (J_u - J_c = -10 - -15), 50.0% of |J_u|" in line
    line, loss, rel = _reward_loss(Sol(0.0, 0.0), Sol(-3.0, 1.0))  # was "0.0%"
    assert loss == 3.0 and rel is None and "no relative figure: the unconstrained reward J_u is 0" in line
    line, loss, rel = _reward_loss(Sol(4.0, 0.0), Sol(4.0, 0.0))
    assert "does not bind" in line and loss == 0.0


@pytest.mark.slow
def test_column_generation_does_not_cycle():
    """garnet_m2 at alpha = (7.46, 6.15): with the master LP's default tolerances (1e-7) its
    duals were inexact enough for Kelley's method to return the same column 200 times."""
    cmdp = suite.task("garnet_m2").cmdp()
    thresholds = np.array([7.456086085394325, 6.14893389])
    with jax.enable_x64(True):
        c64 = cmdp.astype(jnp.float64).replace(thresholds=thresholds)
        dual, lp = fhc.solve(c64, max_iterations=60), fhc.solve(c64, method="lp")
    assert dual.reward == pytest.approx(lp.reward, rel=1e-6)
    assert np.all(dual.costs <= thresholds * (1 + 1e-9))
