"""Statistics over seeds (``fhc_jax.experiment.statistics``) and the overall progress of sweeps
and comparisons (``fhc_jax.experiment.progress.RunsProgress``).

The bootstrap is checked against a stratified bootstrap computed here by hand with numpy (the
same index draws from a seeded global generator, the same percentiles), its intervals' coverage
on a synthetic population, the IQM on known arrays and against rliable, the Wilson interval
against its formula; a tiny sweep checks the per-setting statistics and the one plain progress
line per completed run."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from scipy import stats as sps

from fhc_jax.experiment import config, judge, statistics, sweep
from fhc_jax.experiment.judgement import Optimum
from fhc_jax.experiment.progress import Progress, RunsProgress, parse_run_line

rliable_metrics = pytest.importorskip("rliable.metrics")


def _optimum(reward: float) -> Optimum:
    return Optimum(
        reward=reward,
        costs=np.array([25.0]),
        multipliers=np.array([0.5]),
        policy=None,
        stage_costs=None,
        stage_rewards=None,
        solve_time_s=0.0,
    )


# ----------------------------------------------------------------------------- estimators


def test_iqm_of_known_arrays():
    # R = 8: floor(8/4) = 2 cut from each end -> mean(3, 4, 5, 6)
    assert statistics.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == pytest.approx(4.5)
    # the outlier is cut: R = 4 -> mean(2, 3)
    assert statistics.iqm([1.0, 100.0, 2.0, 3.0]) == pytest.approx(2.5)
    # R < 4 cuts nothing: the mean
    assert statistics.iqm([1.0, 2.0, 9.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="empty"):
        statistics.iqm([])


@pytest.mark.parametrize("r", [1, 2, 3, 4, 5, 7, 10, 13])
def test_column_estimators_equal_rliable(r):
    x = np.random.default_rng(r).normal(size=(r, 3))
    want_mean = [rliable_metrics.aggregate_mean(x[:, [j]]) for j in range(3)]
    want_iqm = [rliable_metrics.aggregate_iqm(x[:, [j]]) for j in range(3)]
    np.testing.assert_allclose(statistics.column_means(x), want_mean, rtol=1e-12)
    np.testing.assert_allclose(statistics.column_iqms(x), want_iqm, rtol=1e-12)
    assert statistics.iqm(x[:, 0]) == pytest.approx(want_iqm[0], rel=1e-12)


def test_bootstrap_equals_hand_computed_stratified_bootstrap():
    """rliable's stratified bootstrap: per resample, every column draws its own R seed indices
    (np.random.choice on the global generator, seeded here); percentile intervals."""
    x = np.array([[1.0, 10.0], [2.0, 14.0], [4.0, 11.0], [8.0, 30.0], [3.0, 12.0]])  # R = 5 seeds, K = 2
    reps, seed = 300, 7
    np.random.seed(12345)
    before = np.random.get_state()[1].copy()
    got = statistics.bootstrap(x, resamples=reps, seed=seed)
    np.testing.assert_array_equal(np.random.get_state()[1], before)  # the global generator is restored

    np.random.seed(seed)
    values = []
    for _ in range(reps):
        idx = np.random.choice(5, (5, 2), replace=True)
        sample = x[idx, np.arange(2)[None, :]]  # column j resampled with its own indices idx[:, j]
        values.append(np.concatenate([sample.mean(0), sps.trim_mean(sample, 0.25, axis=0)]))
    values = np.asarray(values)
    lo, hi = np.percentile(values, [2.5, 97.5], axis=0)
    np.testing.assert_allclose(got["mean"], x.mean(0))
    np.testing.assert_allclose(got["iqm"], sps.trim_mean(x, 0.25, axis=0))
    np.testing.assert_allclose(got["mean_ci"], np.stack([lo[:2], hi[:2]]), rtol=1e-12)
    np.testing.assert_allclose(got["iqm_ci"], np.stack([lo[2:], hi[2:]]), rtol=1e-12)
    # reproducible; another seed gives other intervals
    again = statistics.bootstrap(x, resamples=reps, seed=seed)
    np.testing.assert_array_equal(again["mean_ci"], got["mean_ci"])
    other = statistics.bootstrap(x, resamples=reps, seed=seed + 1)
    assert not np.array_equal(other["mean_ci"], got["mean_ci"])


def test_bootstrap_one_seed_and_bad_input():
    one = statistics.bootstrap(np.array([[3.0, 4.0]]))
    assert np.all(np.isnan(one["mean_ci"])) and one["mean"].tolist() == [3.0, 4.0]
    with pytest.raises(ValueError, match="resamples must be an integer >= 1, found 0"):
        statistics.bootstrap(np.ones((3, 1)), resamples=0)
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\), found -1"):
        statistics.bootstrap(np.ones((3, 1)), seed=-1)
    with pytest.raises(ValueError, match="finite"):
        statistics.bootstrap(np.array([1.0, np.nan, 2.0]))
    with pytest.raises(ValueError, match="shape"):
        statistics.bootstrap(np.zeros((0, 2)))


def test_bootstrap_interval_coverage_of_a_normal_mean():
    """200 independent experiments of 20 seeds each from N(3, 2^2): the 95% intervals of the
    mean cover 3 in about 95% of them (the percentile bootstrap under-covers a little at R = 20).
    Each experiment is one column, i.e. one stratum, so one call bootstraps all of them."""
    rng = np.random.default_rng(2024)
    x = rng.normal(3.0, 2.0, size=(20, 200))
    ci = statistics.bootstrap(x, resamples=500, seed=0)["mean_ci"]
    coverage = float(np.mean((ci[0] <= 3.0) & (3.0 <= ci[1])))
    assert 0.88 <= coverage <= 0.99, coverage
    # and the IQM intervals of a symmetric population cover its centre too
    ci = statistics.bootstrap(x, resamples=500, seed=0)["iqm_ci"]
    assert 0.85 <= float(np.mean((ci[0] <= 3.0) & (3.0 <= ci[1]))) <= 0.995


def test_bootstrap_costs_one_vectorised_evaluation_per_resample(monkeypatch):
    """The default number of resamples stays cheap because each resample evaluates the means and
    IQMs of all K columns at once: the statistic runs once per resample (plus a constant), on the
    whole (R, K) matrix, the same number of times for K = 1 as for K = 3."""
    shapes = []
    column_iqms = statistics.column_iqms

    def counted(scores):
        shapes.append(np.shape(scores))
        return column_iqms(scores)

    monkeypatch.setattr(statistics, "column_iqms", counted)
    calls = {}
    for k in (1, 3):
        shapes.clear()
        x = np.random.default_rng(k).normal(size=(5, k))
        out = statistics.bootstrap(x, resamples=statistics.DEFAULT_RESAMPLES)
        calls[k] = len(shapes)
        assert set(shapes) == {(5, k)}
        for name in ("mean", "iqm"):
            assert out[f"{name}_ci"].shape == (2, k) and np.all(np.isfinite(out[f"{name}_ci"]))
            assert np.all(out[f"{name}_ci"][0] <= out[name]) and np.all(out[name] <= out[f"{name}_ci"][1])
    assert statistics.DEFAULT_RESAMPLES <= calls[1] <= statistics.DEFAULT_RESAMPLES + 5
    assert calls[3] == calls[1], calls


def test_violation_probability_wilson_hand_case():
    out = statistics.violation_probability([False, True, False, False, False])
    z = sps.norm.ppf(0.975)
    n, p = 5, 0.2
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert out["violating_seeds"] == 1 and out["n_seeds"] == 5 and out["estimate"] == pytest.approx(0.2)
    assert out["ci95"] == pytest.approx([centre - half, centre + half], rel=1e-9)
    assert out["ci95"] == pytest.approx([0.0362, 0.6245], abs=1e-4)
    none = statistics.violation_probability(np.zeros(5, bool))
    assert none["estimate"] == 0.0 and none["ci95"][0] == 0.0 and none["ci95"][1] == pytest.approx(0.4345, abs=1e-4)
    with pytest.raises(ValueError, match="trials >= 1"):
        statistics.violation_probability(np.zeros(0, bool))


# ----------------------------------------------------------------------------- one judgement


def test_seed_statistics_fields():
    reward = np.array([40.0, 41.0, 42.0, 44.0, 46.0])
    costs = np.array([[25.4], [25.6], [10.0], [24.0], [27.0]])
    judged = judge.judge(reward, costs, [25.0], optimum=_optimum(45.0))
    st = statistics.seed_statistics(judged, resamples=500, seed=3)
    json.dumps(st)  # JSON-ready
    assert st["n_seeds"] == 5 and st["judged_by"] == "exact"
    assert st["intervals"]["resamples"] == 500 and st["intervals"]["bootstrap_seed"] == 3
    assert "unavailable" not in st["intervals"]
    for block in (st["reward"], st["costs"][0], st["optimality_gap"]):
        assert block["n_seeds"] == 5
        assert block["mean_ci95"][0] <= block["mean"] <= block["mean_ci95"][1]
        assert block["iqm_ci95"][0] <= block["iqm"] <= block["iqm_ci95"][1]
    assert st["reward"]["mean"] == pytest.approx(42.6) and st["reward"]["iqm"] == pytest.approx(np.mean([41, 42, 44]))
    boot = statistics.bootstrap(np.stack([reward, costs[:, 0], 45.0 - reward], 1), resamples=500, seed=3)
    assert st["reward"]["mean_ci95"] == pytest.approx(boot["mean_ci"][:, 0].tolist())
    assert st["costs"][0]["iqm_ci95"] == pytest.approx(boot["iqm_ci"][:, 1].tolist())
    gap = st["optimality_gap"]
    assert gap["mean"] == pytest.approx(45.0 - 42.6) and gap["mean_ci95"] == pytest.approx(
        boot["mean_ci"][:, 2].tolist()
    )
    assert gap["relative"]["mean"] == pytest.approx(gap["mean"] / 45.0)
    assert gap["relative"]["mean_ci95"] == pytest.approx([v / 45.0 for v in gap["mean_ci95"]])
    # 25.6 and 27 exceed 1.02 * 25 = 25.5: 2 of 5 seeds violate
    assert st["violation_probability"]["violating_seeds"] == 2 == 5 - judged.feasible_seeds
    line = statistics.format_line(st)
    assert "(5 seeds, 95% intervals)" in line and "P(violation) 0.40 [" in line and "IQM 42.33 [" in line


def test_seed_statistics_edge_cases():
    # no optimum: no gap
    st = statistics.seed_statistics(judge.judge([1.0, 2.0], [[0.0], [1.0]], [1.0]), resamples=50)
    assert st["optimality_gap"] is None and st["reward"]["mean_ci95"] is not None
    # one seed: point estimates, no interval, and why
    st = statistics.seed_statistics(judge.judge([1.0], [[0.0]], [1.0], optimum=_optimum(2.0)))
    assert st["n_seeds"] == 1 and st["reward"]["mean"] == 1.0 and st["reward"]["mean_ci95"] is None
    assert st["intervals"]["unavailable"] == "one seed: no interval"
    assert statistics.format_estimate(st["reward"]) == "1.00"
    # a diverged (non-finite) seed: that quantity has no value, the others keep theirs
    st = statistics.seed_statistics(judge.judge([1.0, np.nan, 3.0], [[0.0], [0.5], [1.0]], [1.0]), resamples=50)
    assert st["reward"]["mean"] is None and st["reward"]["non_finite_seeds"] == 1
    assert st["costs"][0]["mean"] == pytest.approx(0.5) and st["costs"][0]["mean_ci95"] is not None
    assert statistics.format_estimate(st["reward"]) == "-"
    with pytest.raises(ValueError, match="resamples"):
        statistics.seed_statistics(judge.judge([1.0], [[0.0]], [1.0]), resamples=-3)


def test_seed_statistics_without_rliable(monkeypatch):
    """Where rliable cannot be imported the point estimates and the Wilson interval remain, every
    bootstrap interval is None and the reason is recorded."""
    monkeypatch.setattr(statistics, "unavailable", lambda: "rliable's bootstrap cannot be imported (test)")
    st = statistics.seed_statistics(judge.judge([1.0, 2.0, 4.0], [[0.0], [1.0], [2.0]], [1.0], optimum=_optimum(5.0)))
    assert st["intervals"]["unavailable"] == "rliable's bootstrap cannot be imported (test)"
    assert st["reward"]["mean"] == pytest.approx(7 / 3) and st["reward"]["mean_ci95"] is None
    assert st["optimality_gap"]["iqm_ci95"] is None and st["violation_probability"]["violating_seeds"] == 1
    assert "reward mean 2.33, IQM 2.33" in statistics.format_line(st)
    with pytest.raises(ImportError, match="cannot be imported"):
        statistics.bootstrap(np.ones((3, 1)))


def test_seed_statistics_monte_carlo_judgement():
    judged = judge.judge(
        [10.0, 11.0, 12.0],
        [[1.0], [1.1], [0.9]],
        [1.0],
        episodes=1000,
        reward_half_width=[0.1] * 3,
        cost_half_width=[[0.05]] * 3,
        optimum=_optimum(12.5),
    )
    st = statistics.seed_statistics(judged, resamples=100)
    assert st["judged_by"] == "monte-carlo (1000 episodes)"
    # feasibility on the upper end of each cost interval: 1.05, 1.15 > 1.02; 0.95 passes
    assert st["violation_probability"]["violating_seeds"] == 2


def test_performance_profiles():
    scores = {"a": np.array([0.2, 0.5, 0.9, 1.0]), "b": np.array([0.95, 0.97])}
    taus = np.array([0.0, 0.5, 0.9, 0.96, 1.0])
    profiles, bands = statistics.performance_profiles(scores, taus, resamples=200, seed=1)
    np.testing.assert_allclose(profiles["a"], [1.0, 0.5, 0.25, 0.25, 0.0])
    np.testing.assert_allclose(profiles["b"], [1.0, 1.0, 1.0, 0.5, 0.0])
    for k in scores:
        assert bands[k].shape == (2, 5) and np.all(bands[k][0] <= profiles[k] + 1e-12)
        assert np.all(profiles[k] <= bands[k][1] + 1e-12)
    again = statistics.performance_profiles(scores, taus, resamples=200, seed=1)[1]
    np.testing.assert_array_equal(again["a"], bands["a"])
    # the thresholds take in every score
    wide = statistics.profile_taus({"a": np.array([-0.25, 1.3])})
    assert wide[0] <= -0.25 and wide[-1] >= 1.3
    assert statistics.profile_taus(scores) is statistics.PROFILE_TAUS
    judged = judge.judge([40.0, 45.0], [[25.0], [30.0]], [25.0], optimum=_optimum(50.0))
    np.testing.assert_allclose(statistics.profile_scores(judged), [0.8, 0.9])
    np.testing.assert_allclose(statistics.profile_scores(judged, feasible_only=True), [0.8, 0.0])
    # all-negative rewards: one minus the relative gap (J* = -1: J = -1.5 scores 0.5, J = -1 scores 1)
    negative = judge.judge([-1.5, -1.0], [[0.0], [0.0]], [1.0], optimum=_optimum(-1.0))
    np.testing.assert_allclose(statistics.profile_scores(negative), [0.5, 1.0])
    assert statistics.profile_scores(judge.judge([1.0], [[0.0]], [1.0], optimum=_optimum(0.0))) is None
    with pytest.raises(ValueError, match="finite"):
        statistics.performance_profiles({"a": np.array([np.nan])}, taus)


# ----------------------------------------------------------------------------- progress


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_runs_progress_lines_and_eta():
    clock = [100.0]
    stream = _Stream(tty=False)
    progress = RunsProgress(4, stream, clock=lambda: clock[0])
    assert progress.status() == "overall 0.0/4 runs, elapsed 0 s, eta -"
    clock[0] = 110.0
    assert progress.status(0.5) == "overall 0.5/4 runs, elapsed 10 s, eta 70 s"
    progress.done("CPO (xy)", "reward 1.00 | odd detail")
    clock[0] = 130.0
    progress.done("FH-Constrained")
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and len(lines) == 2
    first, second = (parse_run_line(line) for line in lines)
    assert first == {
        "done": 1,
        "total": 4,
        "unit": "runs",
        "elapsed_s": 10.0,
        "eta_s": 30.0,
        "name": "CPO (xy)",
        "detail": "reward 1.00 | odd detail",
    }
    assert second["done"] == 2 and second["elapsed_s"] == 30.0 and second["eta_s"] == 30.0 and second["detail"] == ""
    assert parse_run_line("fh-constrained 3/20 [###.....] 15% | 1.2k env-steps/s") is None
    # on a terminal the line first clears a progress line being redrawn in place
    tty = _Stream(tty=True)
    RunsProgress(1, tty, clock=lambda: 0.0).done("x")
    assert tty.getvalue().startswith("\r\033[K[1/1 runs done]")
    with pytest.raises(ValueError, match="total must be >= 1"):
        RunsProgress(0)
    # what it counts is named in both lines, and read back
    configs = _Stream(False)
    sweep_progress = RunsProgress(2, configs, clock=lambda: 0.0, unit="configurations")
    assert sweep_progress.status(0.5) == "overall 0.5/2 configurations, elapsed 0 s, eta 0 s"
    assert parse_run_line(sweep_progress.done("trace=0.2"))["unit"] == "configurations"
    assert configs.getvalue().startswith("[1/2 configurations done] elapsed 0.0 s | eta 0.0 s | trace=0.2")
    with pytest.raises(ValueError, match="unit must be a lowercase word"):
        RunsProgress(2, unit="Runs done]")
    one = RunsProgress(1, _Stream(False))
    one.done("a")
    with pytest.raises(ValueError, match="already done"):
        one.done("b")


def test_chunk_line_shows_overall_progress():
    from fhc_jax.experiment.runner import ChunkState

    stream = _Stream(tty=False)
    progress = Progress("cpo", 10, 2, None, np.array([1.0]), stream, overall=lambda frac: f"overall {frac:.2f}")
    state = ChunkState(
        carry=None,
        iteration=5,
        metrics={},
        exact_iterations=np.array([0, 5]),
        exact_reward=np.zeros((2, 2)),
        exact_costs=np.zeros((2, 2, 1)),
        elapsed_s=1.0,
    )
    progress(state)
    assert stream.getvalue().rstrip("\n").endswith("| overall 0.50") and "\r" not in stream.getvalue()


TINY = [
    "env.size=3",
    "env.horizon=4",
    "env.alpha=3.0",
    "num_iterations=6",
    "episodes_per_iteration=8",
    "run.chunk_size=3",
]


@pytest.mark.slow
def test_sweep_rows_have_statistics_and_one_progress_line_per_setting(tmp_path):
    spec = config.load_spec(overrides=TINY, seeds=2)
    stream = _Stream(tty=False)
    result = sweep.run_sweep(spec, {"trace": [0.2, 0.5]}, shard=False, stream=stream)
    out = stream.getvalue()
    assert "\r" not in out
    parsed = [p for p in map(parse_run_line, out.splitlines()) if p is not None]
    assert [(p["done"], p["total"], p["unit"]) for p in parsed] == [(1, 2, "configurations"), (2, 2, "configurations")]
    assert [p["name"] for p in parsed] == ["trace=0.2", "trace=0.5"]
    assert all("seeds feasible" in p["detail"] and "(2 seeds, 95% intervals)" in p["detail"] for p in parsed)
    assert parsed[-1]["eta_s"] == 0.0
    # the chunk lines (one per chunk) name the grid and end with the overall progress, in configurations
    chunk_lines = [line for line in out.splitlines() if line.startswith("sweep fh-constrained")]
    assert len(chunk_lines) == 2 and all("(2 configurations x 2 seeds = 4 runs)" in line for line in chunk_lines)
    assert all("overall" in line and "/2 configurations, elapsed" in line for line in chunk_lines)
    for i, row in enumerate(result["rows"]):
        st = row["statistics"]
        assert st["n_seeds"] == 2 and st["reward"]["n_seeds"] == 2
        assert st["reward"]["mean"] == pytest.approx(result["exact_reward"][i].mean())
        assert st["reward"]["mean_ci95"][0] <= st["reward"]["mean"] <= st["reward"]["mean_ci95"][1]
        assert st["violation_probability"]["violating_seeds"] == 2 - row["feasible_seeds"]
        assert st["optimality_gap"]["mean"] == pytest.approx(result["optimum"].reward - row["mean_exact_reward"])
    table = sweep.format_sweep(result)
    assert "IQM reward, 95% CI (2 seeds)" in table and "P(violation), 95% CI" in table
    sweep.write_sweep(tmp_path, spec, {"trace": [0.2, 0.5]}, result)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rows"][0]["statistics"]["costs"][0]["n_seeds"] == 2
