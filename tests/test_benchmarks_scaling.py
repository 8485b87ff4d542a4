"""benchmarks/scaling.py: the smoke run writes complete curves and a figure; points are
skipped, with their reason, when they exceed the memory, time or support bounds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import scaling  # noqa: E402 (benchmarks/ is not a package)


@pytest.mark.slow  # compiles every learner (~35 s on 2 loaded cores)
def test_quick_run_writes_curves_analysis_and_figure(tmp_path):
    out = tmp_path / "scaling.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scaling.py"),
            "--quick",
            "--learners",
            "fh-constrained",
            "--axes",
            "K,M",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["quick"] and result["axes"] == ["K", "M"]
    curves = result["learners"]["fh-constrained"]
    assert set(curves) == {"K", "M"}
    assert [r["axis_value"] for r in curves["K"]] == scaling.QUICK["K"]
    for row in curves["K"] + curves["M"]:
        assert "skipped" not in row, row
        assert row["run_s"] > 0 and row["compile_s"] > 0 and row["repeats"] == 1
        assert row["env_steps_per_s"] == pytest.approx(row["iterations"] * row["K"] * row["H"] / row["run_s"])
    # the base point is measured once and shared by both axes
    assert curves["K"][0]["run_s"] == curves["M"][0]["run_s"]
    # the solver runs on the requested solver axes only (M here), column generation at M = 2
    assert set(result["solver"]) == {"M"}
    m2 = result["solver"]["M"][1]
    assert m2["M"] == 2 and m2["oracle_calls"] > 0 and m2["first_call_s"] > m2["median_s"] > 0
    assert all(c <= a * (1 + 1e-6) + 1e-9 for c, a in zip(m2["costs"], m2["thresholds"]))
    slopes = result["analysis"]["learners"]["fh-constrained"]["K"]["env_steps_per_s"]["log_log_slopes"]
    assert len(slopes) == 1 and slopes[0] is not None
    assert "load_average" in result["machine"] and result["uptime_before"] and result["uptime_after"]
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_run_that_measures_nothing_exits_1_beside_the_results(tmp_path):
    out = tmp_path / "scaling.json"
    out.write_text("previous results")
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scaling.py"),
            "--quick",
            "--learners",
            "fh-constrained",
            "--axes",
            "K",
            "--no-solver",
            "--max-gb",
            "1e-9",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 1 and "no point was measured" in proc.stderr
    assert out.read_text() == "previous results"
    failed = json.loads((tmp_path / "scaling.failed.json").read_text())
    assert all("trajectory" in r["skipped"] for r in failed["learners"]["fh-constrained"]["K"])


@pytest.mark.slow
def test_points_are_skipped_with_their_reason():
    point = {"K": 64, "H": 10, "size": 4, "M": 1}
    big = scaling.learner_point(
        "fh-constrained", point, 1, max_bytes=1.0, predicted_s=None, point_budget_s=60, budget=scaling.Budget(60)
    )
    assert "trajectory" in big["skipped"] and "run_s" not in big and "compile_s" not in big
    # XLA's buffer assignment is checked after compiling, before running
    compiled_only = scaling.learner_point(
        "fh-constrained",
        point,
        1,
        max_bytes=2 * big["trajectory_bytes"],
        predicted_s=None,
        point_budget_s=60,
        budget=scaling.Budget(60),
    )
    assert "XLA buffers" in compiled_only["skipped"] and compiled_only["compile_s"] > 0
    assert "run_s" not in compiled_only and compiled_only["xla_bytes"] > 2 * big["trajectory_bytes"]
    slow = scaling.learner_point(
        "fh-constrained", point, 1, max_bytes=2**40, predicted_s=500.0, point_budget_s=60, budget=scaling.Budget(60)
    )
    assert "predicted run time 500 s" in slow["skipped"]
    spent = scaling.Budget(1e-9)
    assert "time budget" in scaling.learner_point("fh-constrained", point, 1, 2**40, None, 60, spent)["skipped"]
    assert "time budget" in scaling.solver_point({"H": 10, "size": 4, "M": 1}, 1, spent)["skipped"]
    unsupported = scaling.learner_point("cpo", {**point, "M": 7}, 1, 2**40, None, 60, scaling.Budget(60))
    assert unsupported["skipped"].startswith("not supported") and "M must be in [1, 6]" in unsupported["skipped"]


def test_iterations_memory_estimate_and_slopes():
    assert scaling.iterations_for(64, 10) == 5 and scaling.iterations_for(65536, 100) == 1
    assert scaling.iterations_for(1024, 1000) == 2
    assert scaling.trajectory_bytes(1024, 100, 1) == 1024 * 100 * 24
    assert scaling.trajectory_bytes(1024, 100, 3) > scaling.trajectory_bytes(1024, 100, 1)
    assert scaling.log_slopes([1, 10, 100], [1.0, 10.0, 10.0]) == pytest.approx([1.0, 0.0])
    assert scaling.log_slopes([1, 10], [None, 3.0]) == [None]
    rows = [{"axis_value": x, "num_states": x, "m": y} for x, y in [(1, 1.0), (10, 10.0), (100, 100.0), (1000, 100.0)]]
    summary = scaling.curve_summary(rows, "m")
    assert summary["largest_slope_change"] == {
        "at": 100,
        "slope_before": pytest.approx(1.0),
        "slope_after": pytest.approx(0.0),
    }


def test_command_line_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        scaling.parse_args(["--axes", "K,Q"])
    assert "K,H,size,M" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        scaling.parse_args(["--learners", "nope"])
    assert "unknown algorithm" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        scaling.parse_args(["--repeats", "0"])
    assert "--repeats must be > 0" in capsys.readouterr().err
    args = scaling.parse_args(["--learners", "ppo_lagrangian,e-cop", "--quick"])
    assert args.learner_names == ["ppo-lag", "e-cop"] and args.repeats == 1
