"""benchmarks/report.py: docs/benchmarks.md and the README's learner table are up to date with
benchmarks/results/*.json, every results file has a renderer (or is listed as lacking one),
the README table says so where a number is missing, and the robustness renderer reads the
schema benchmarks/robustness.py writes."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import report  # noqa: E402  (benchmarks/ is not a package)


def test_generated_page_and_readme_are_up_to_date(capsys):
    code = report.main(["--check"])
    assert code == 0, capsys.readouterr().err


def test_every_results_file_has_a_renderer_and_provenance():
    names = report.results_files(report.RESULTS)
    assert "reproduce_paper.json" in names
    assert [n for n in names if report.renderer_for(n) is None] == []
    for name in names:
        data = json.loads((report.RESULTS / name).read_text())
        assert data.get("command"), f"{name} records no command"
        assert report.hardware(data), f"{name} records no hardware"
        assert report.jax_version(data), f"{name} records no jax version"
    page = report.render_page()
    assert "20" + "26-" not in page  # dates stay inside the JSON


@pytest.fixture
def results(tmp_path: Path) -> Path:
    out = tmp_path / "results"
    out.mkdir()
    shutil.copy(report.RESULTS / "reproduce_paper.json", out)
    shutil.copy(report.RESULTS / "fh_constrained.json", out)
    return out


def test_check_fails_on_a_stale_page_and_names_it(results, tmp_path, capsys):
    page, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    readme.write_text("# x\n<!-- learners -->\nold\n<!-- /learners -->\n<!-- speed -->\n<!-- /speed -->\n")
    assert report.main([], results=results, page=page, readme=readme) == 0
    assert report.main(["--check"], results=results, page=page, readme=readme) == 0
    data = json.loads((results / "reproduce_paper.json").read_text())
    data["runs"][0]["exact"]["fraction_of_optimum"]["mean"] = 0.5
    (results / "reproduce_paper.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert report.main(["--check"], results=results, page=page, readme=readme) == 1
    err = capsys.readouterr().err
    assert "benchmarks.md" in err and "README.md" in err and len(err.strip().splitlines()) == 1


def test_unknown_files_are_listed_and_missing_numbers_said(results):
    (results / "mystery.json").write_text(json.dumps({"command": "python x.py"}))
    assert "`benchmarks/results/mystery.json`" in report.render_page(results)
    data = json.loads((results / "reproduce_paper.json").read_text())
    data["runs"] = [r for r in data["runs"] if r["label"] != "CPO"]
    del data["runs"][0]["exact"]["fraction_of_optimum"]
    (results / "reproduce_paper.json").write_text(json.dumps(data))
    rows = {line.split("|")[1].strip(): line for line in report.learner_table(results).splitlines()[2:8]}
    assert "not in reproduce_paper.json" in rows["[CPO](docs/algorithms/cpo.md)"]
    assert "no exact result" in rows["[FH-Constrained](docs/algorithms/fh_constrained.md)"]
    assert "96.4%" not in report.learner_table(results)


def test_robustness_renderer_reads_its_schema(results):
    seed = lambda p, ok: {"percent": p, "reward": 1.0, "costs": [0.5], "feasible": ok}  # noqa: E731
    cells = [
        {"learner": "fh-constrained", "task": "gridworld", "seeds": [seed(97.0, True), seed(95.5, False)],
         "compile_s": 2.0, "run_s": 10.0, "error": None, "nu_star": [0.47]},
        {"learner": "cpo", "task": "gridworld", "seeds": [seed(20.0, True), seed(30.0, True)],
         "compile_s": 1.0, "run_s": 3.0, "error": None, "nu_star": [0.47]},
        {"learner": "fh-constrained", "task": "pendulum", "seeds": [], "compile_s": 0.0, "run_s": 0.0,
         "error": "box actions", "nu_star": None},
        {"learner": "cpo", "task": "pendulum", "seeds": [seed(None, True), seed(None, False)],
         "compile_s": 1.0, "run_s": 5.0, "error": None, "nu_star": None},
    ]
    data = {"command": "python benchmarks/robustness.py", "jax": "0.10.2", "date": "x",
            "machine": {"cpu": {"model": "Test CPU", "logical_cores": 2}, "device": {"platform": "cpu"}},
            "cells": cells}
    (results / "robustness.json").write_text(json.dumps(data))
    page = report.render_page(results)
    block = page[page.index("## Robustness"):]
    assert "| task | fh-constrained | cpo |" in block
    assert "| gridworld | 95.5% (1/2) | 20.0% (2/2) |" in block
    assert "| pendulum | error | n/a (1/2) |" in block
    assert "fh-constrained on pendulum: error: box actions" in block
    assert "22 s" in block and "Test CPU, 2 cores" in block and "jax 0.10.2" in block
