"""benchmarks/report.py: docs/benchmarks.md and the README's learner table are up to date with
benchmarks/results/*.json, every results file has a renderer (or is listed as lacking one),
the README table says so where a number is missing, and the robustness renderer reads the
schema benchmarks/robustness.py writes. Every results file names its git revision and the code
it measures; a table is marked stale exactly when that code changed after its revision (checked
in temporary git repositories, independent of this repository's history); no absolute path
reaches the page."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import report  # noqa: E402  (benchmarks/ is not a package)
import timing  # noqa: E402
from reporting import code, provenance, revision  # noqa: E402


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


def test_every_suite_task_declares_its_code():
    """Each task of the robustness suite names the modules a change of which makes its cells
    stale (reporting/code.py ENV_CODE), so the page can say which cells a commit made stale."""
    from fhc_jax.envs import suite

    for name in suite.TASKS:
        assert code.env_code(name), name
    with pytest.raises(KeyError, match="no module declared for environment 'nope'"):
        code.env_code("nope")


def _seed(percent, feasible, silent=False):
    return {"percent": percent, "reward": 1.0, "costs": [0.5], "feasible": feasible, "silent_infeasible": silent}


def _robustness() -> dict:
    """A robustness.json in the schema benchmarks/robustness.py writes."""
    run = {
        "command": "python benchmarks/robustness.py",
        "jax": "0.10.2",
        "machine": {"cpu": {"model": "Test CPU", "logical_cores": 2}, "device": {"platform": "cpu"}, "timestamp": "x"},
    }
    cell = lambda seeds, **kw: {
        "seeds": seeds,
        "num_seeds": len(seeds),  # noqa: E731
        "feasible_seeds": sum(s["feasible"] for s in seeds),
        "compile_s": 2.0,
        "run_s": 10.0,
        "run": "r1",
        **kw,
    }
    return {
        "tasks": {
            "gridworld": {"judgement": "exact", "nu_star": [0.47]},
            "garnet": {"judgement": "exact", "nu_star": [0.6]},
            "pendulum": {"judgement": "budget", "nu_star": None},
        },
        "runs": {"r1": run},
        "results": {
            "fh_constrained": {
                "gridworld": cell([_seed(97.0, True), _seed(95.5, False, True)]),
                "garnet": cell([_seed(99.0, True), _seed(98.0, True)]),
                "pendulum": {
                    "error": "make_train: ValueError: fh_constrained takes discrete actions only",
                    "run": "r1",
                },
            },
            "cpo": {
                "gridworld": cell([_seed(20.0, True), _seed(30.0, True)]),
                "pendulum": cell([_seed(None, True), _seed(None, False)]),
            },
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
    block = page[page.index("Robustness: every learner") :]
    assert "| task | nu* | fh_constrained | cpo |" in block
    assert "| gridworld | 0.47 | 95.5% (1/2, 1 unflagged) | 20.0% (2/2) |" in block
    assert "| pendulum | - | refused | n/a (1/2) |" in block
    assert "fh_constrained on pendulum: make_train: ValueError: fh_constrained takes discrete actions only" in block
    assert "Test CPU, 2 cores" in block and "jax 0.10.2" in block


# --------------------------------------------------------------------------------------------
# revisions, stale markers, relative paths

ABSOLUTE = re.compile(r"(?<![\w.:/~-])/(home|tmp|work|root|Users|mnt|scratch|var|opt|private)/")


def test_every_results_file_names_its_revision_and_declares_its_code():
    for name in report.results_files(report.RESULTS):
        data = json.loads((report.RESULTS / name).read_text())
        records = list(data["runs"].values()) if name == "robustness.json" else [data]
        for record in records:
            assert re.fullmatch(r"[0-9a-f]{40}", revision.revision_of(record).sha or ""), f"{name}: no revision"
        assert code.measured_code(name, data), f"{name}: reporting/code.py declares no code for it"


def test_every_declared_path_exists():
    missing = [p for p in code.all_declared_paths() if not (ROOT / p).exists()]
    assert missing == [], f"reporting/code.py names paths that do not exist: {missing}"


def test_no_absolute_path_on_the_page_or_in_the_readme_blocks():
    page = report.render_page()
    readme = report.learner_table() + "\n" + report.speed_line()
    for text in (page, readme):
        found = [line for line in text.splitlines() if ABSOLUTE.search(line)]
        assert found == [], found[0][:200] if found else ""


def test_relative_shows_absolute_paths_from_the_repository_or_by_name():
    text = "python benchmarks/x.py --before /tmp/before --after . --out /root/out/x.json 1/2 steps/s https://a.b/c"
    assert provenance.relative(text, out="benchmarks/results/gpu_h100/x.json") == (
        "python benchmarks/x.py --before before --after . --out benchmarks/results/gpu_h100/x.json 1/2 steps/s "
        "https://a.b/c"
    )
    assert provenance.relative("see /work/main/benchmarks/results/r.json") == "see benchmarks/results/r.json"


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "HOME": str(repo),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with a fake FH-Constrained (its modules) and gridworld, committed."""
    root = tmp_path / "repo"
    for path, text in (
        ("fhc_jax/algos/fh_constrained.py", "STEP = 1\n"),
        ("fhc_jax/algos/fh_kernels.py", "K = 1\n"),
        ("fhc_jax/algos/core/features.py", "F = 1\n"),
        ("fhc_jax/envs/gridworld.py", "SIZE = 10\n"),
        ("fhc_jax/envs/wrappers.py", "W = 1\n"),
        ("fhc_jax/algos/old_name.py", "X = 1\n"),
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "fake learner")
    return root


def _measured_at(results: Path, sha: str) -> None:
    data = json.loads((report.RESULTS / "fh_constrained.json").read_text())
    data.update(revision=sha, revision_from="checkout", dirty=False, dirty_paths=[])
    (results / "fh_constrained.json").write_text(json.dumps(data))


def _section(page: str, title: str) -> str:
    start = page.index(f"## {title}")
    end = page.find("\n## ", start + 1)
    return page[start : end if end > 0 else None]


def test_stale_marker_follows_the_declared_code(repo, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    sha = _git(repo, "rev-parse", "HEAD")
    _measured_at(results, sha)
    section = _section(report.render_page(results, root=repo), "FH-Constrained on the default gridworld")
    assert f"revision `{sha[:7]}`" in section and provenance.STALE not in section
    assert provenance.STALE not in report.speed_line(results, root=repo)

    (repo / "fhc_jax/envs/other.py").write_text("unrelated\n")  # code the table does not declare
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "another module")
    assert provenance.STALE not in report.render_page(results, root=repo)

    (repo / "fhc_jax/algos/fh_constrained.py").write_text("STEP = 2\n")
    _git(repo, "commit", "-q", "-am", "change the learner")
    section = _section(report.render_page(results, root=repo), "FH-Constrained on the default gridworld")
    marker = [line for line in section.splitlines() if line.startswith(provenance.STALE)]
    assert marker == [
        f"> **Stale:** `fhc_jax/algos/fh_constrained.py` changed since `{sha[:7]}`, so these numbers "
        "may not describe the current code; `python benchmarks/fh_constrained.py` measures it again."
    ]
    assert marker[0] in report.speed_line(results, root=repo)


def test_a_path_added_or_renamed_after_the_revision(repo):
    sha = _git(repo, "rev-parse", "HEAD")
    _git(repo, "mv", "fhc_jax/algos/old_name.py", "fhc_jax/algos/new_name.py")  # renamed, content unchanged
    (repo / "fhc_jax/algos/added.py").write_text("Y = 1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "rename and add")
    git = revision.Git(repo)
    assert git.changed(sha, ["fhc_jax/algos/new_name.py", "fhc_jax/algos/fh_constrained.py"]) == []
    assert git.changed(sha, ["fhc_jax/algos/added.py"]) == ["fhc_jax/algos/added.py"]
    assert git.changed(sha, ["fhc_jax/algos/old_name.py"]) == ["fhc_jax/algos/old_name.py"]  # gone from HEAD
    assert git.changed(sha, ["fhc_jax/algos/"]) == ["fhc_jax/algos/"]
    assert git.changed(sha, ["fhc_jax/envs/"]) == []
    assert git.changed("0" * 40, ["fhc_jax/envs/"]) is None  # not a commit of this history


def test_check_ignores_the_stale_markers_and_says_they_moved(repo, tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    _measured_at(results, _git(repo, "rev-parse", "HEAD"))
    page, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    readme.write_text("# x\n<!-- learners -->\n<!-- /learners -->\n<!-- speed -->\n<!-- /speed -->\n")
    assert report.main([], results=results, page=page, readme=readme, root=repo) == 0
    (repo / "fhc_jax/envs/gridworld.py").write_text("SIZE = 5\n")
    _git(repo, "commit", "-q", "-am", "change the environment")
    capsys.readouterr()
    assert report.main(["--check"], results=results, page=page, readme=readme, root=repo) == 0
    assert "stale markers changed" in capsys.readouterr().err
    assert report.main([], results=results, page=page, readme=readme, root=repo) == 0
    assert "`fhc_jax/envs/gridworld.py` changed since" in page.read_text()


def test_without_git_the_page_says_staleness_is_not_checked(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    _measured_at(results, "a" * 40)
    page = report.render_page(results, root=tmp_path)  # not a repository
    assert "> **Staleness not checked:** no git history" in page


def test_benchmark_scripts_record_the_revision_and_uncommitted_changes(repo, tmp_path, monkeypatch):
    monkeypatch.delenv("BENCHMARK_REVISION", raising=False)
    record = timing.source_revision(repo)
    assert record["revision"] == _git(repo, "rev-parse", "HEAD") and record["dirty"] is False
    (repo / "benchmarks/results").mkdir(parents=True)
    (repo / "benchmarks/results/x.json").write_text("{}")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "a results file")
    (repo / "benchmarks/results/x.json").write_text('{"rewritten": 1}')  # results are not measured code
    assert timing.source_revision(repo)["dirty"] is False
    (repo / "fhc_jax/algos/core/features.py").write_text("F = 2\n")
    record = timing.source_revision(repo)
    assert record["dirty"] is True and record["dirty_paths"] == ["fhc_jax/algos/core/features.py"]
    assert (
        revision.revision_of(record).caption().endswith("with uncommitted changes to `fhc_jax/algos/core/features.py`")
    )
    nowhere = tmp_path / "nowhere"  # a copy of the tree without .git
    nowhere.mkdir()
    monkeypatch.delenv("BENCHMARK_REVISION", raising=False)
    outside = timing.source_revision(nowhere)
    assert outside["revision"] is None and "git" in outside["revision_unavailable"]
    monkeypatch.setenv("BENCHMARK_REVISION", "b" * 40)
    given = timing.source_revision(nowhere)
    assert given["revision"] == "b" * 40 and given["dirty"] is None
    assert revision.revision_of(given).caption() == "revision `bbbbbbb` (uncommitted changes not checked)"
    # a copy whose .git is stale (its HEAD is not the copied tree's): the variable wins over git
    assert timing.source_revision(repo)["revision"] == "b" * 40
