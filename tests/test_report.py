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


def _seed(percent, feasible, silent=False):
    return {"percent": percent, "reward": 1.0, "costs": [0.5], "feasible": feasible, "silent_infeasible": silent}


def _robustness() -> dict:
    """A robustness.json in the schema benchmarks/robustness.py writes."""
    run = {"command": "python benchmarks/robustness.py", "jax": "0.10.2",
           "machine": {"cpu": {"model": "Test CPU", "logical_cores": 2}, "device": {"platform": "cpu"},
                       "timestamp": "x"}}
    cell = lambda seeds, **kw: {"seeds": seeds, "num_seeds": len(seeds),  # noqa: E731
                                "feasible_seeds": sum(s["feasible"] for s in seeds), "compile_s": 2.0, "run_s": 10.0,
                                "run": "r1", **kw}
    return {
        "tasks": {"gridworld": {"judgement": "exact", "nu_star": [0.47]},
                  "garnet": {"judgement": "exact", "nu_star": [0.6]},
                  "pendulum": {"judgement": "budget", "nu_star": None}},
        "runs": {"r1": run},
        "results": {
            "fh_constrained": {"gridworld": cell([_seed(97.0, True), _seed(95.5, False, True)]),
                               "garnet": cell([_seed(99.0, True), _seed(98.0, True)]),
                               "pendulum": {"error": "make_train: ValueError: fh_constrained takes discrete actions only",
                                            "run": "r1"}},
            "cpo": {"gridworld": cell([_seed(20.0, True), _seed(30.0, True)]),
                    "pendulum": cell([_seed(None, True), _seed(None, False)])},
        },
    }


@pytest.fixture
def results(tmp_path: Path) -> Path:
    out = tmp_path / "results"
    out.mkdir()
    shutil.copy(report.RESULTS / "reproduce_paper.json", out)
    shutil.copy(report.RESULTS / "fh_constrained.json", out)
    (out / "robustness.json").write_text(json.dumps(_robustness()))
    return out


def test_check_fails_on_a_stale_page_and_names_it(results, tmp_path, capsys):
    page, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    readme.write_text("# x\n<!-- learners -->\nold\n<!-- /learners -->\n<!-- speed -->\n<!-- /speed -->\n")
    assert report.main([], results=results, page=page, readme=readme) == 0
    assert report.main(["--check"], results=results, page=page, readme=readme) == 0
    data = json.loads((results / "robustness.json").read_text())
    data["results"]["cpo"]["gridworld"]["seeds"][0]["percent"] = 50.0
    (results / "robustness.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert report.main(["--check"], results=results, page=page, readme=readme) == 1
    err = capsys.readouterr().err
    assert "benchmarks.md" in err and "README.md" in err and len(err.strip().splitlines()) == 1


def test_unknown_files_are_listed_and_missing_numbers_said(results):
    (results / "mystery.json").write_text(json.dumps({"command": "python x.py"}))
    assert "`benchmarks/results/mystery.json`" in report.render_page(results)
    rows = {line.split("|")[1].strip(): line for line in report.learner_table(results).splitlines()[2:8]}
    assert "not in robustness.json" in rows["[NN-Constrained](docs/algorithms/nn_constrained.md)"]
    assert "95.5-97.0%, 1/2 over" in rows["[FH-Constrained](docs/algorithms/fh_constrained.md)"]
    assert "3/4 seeds feasible on 2 tasks" in rows["[FH-Constrained](docs/algorithms/fh_constrained.md)"]
    assert "2/2 seeds feasible on 1 tasks" in rows["[CPO](docs/algorithms/cpo.md)"]


def test_robustness_renderer_reads_its_schema(results):
    page = report.render_page(results)
    block = page[page.index("Robustness: every learner"):]
    assert "| task | nu* | fh_constrained | cpo |" in block
    assert "| gridworld | 0.47 | 95.5% (1/2, 1 unflagged) | 20.0% (2/2) |" in block
    assert "| pendulum | - | refused | n/a (1/2) |" in block
    assert "fh_constrained on pendulum: make_train: ValueError: fh_constrained takes discrete actions only" in block
    assert "Test CPU, 2 cores" in block and "jax 0.10.2" in block
