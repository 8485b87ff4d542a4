"""The paper's comparison (``fhc-jax compare``, ``fhc_jax.experiment.compare``) end to end on a
tiny gridworld: every learner, 2 seeds, a few iterations; the table, JSON and figure must be
written and agree with each other and with exact evaluation."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fhc_jax.algos import fh_constrained, resolve_env_defaults
from fhc_jax.cli import main
from fhc_jax.experiment import compare, compare_report, judge, study_file
from fhc_jax.experiment.judgement import Optimum
from fhc_jax.experiment.typed_settings import ConfigError

TINY = [
    "env.size=3",
    "env.horizon=4",
    "env.alpha=3.0",
    "num_iterations=6",
    "episodes_per_iteration=8",
    "run.chunk_size=3",
    "cpo.episodes_per_iteration=16",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The CLI on two learners with input xy: FH-Constrained and CPO (a per-learner override,
    cpo.episodes_per_iteration). Every row is written by the same code, and the selection of
    the other runs is tested without compiling below."""
    out = tmp_path_factory.mktemp("compare")
    argv = [
        "compare",
        "--seeds",
        "2",
        "--inputs",
        "xy",
        "--algos",
        "fh-constrained",
        "cpo",
        "--out",
        str(out),
        "--quiet",
    ]
    for s in TINY:
        argv += ["--set", s]
    assert main(argv) == 0
    return out, json.loads((out / "reproduce_paper.json").read_text())


@pytest.mark.slow
def test_outputs_written_and_consistent(tiny):
    out, res = tiny
    assert [r["name"] for r in res["runs"]] == ["FH-Constrained", "CPO (xy)"]
    assert res["seeds"] == 2 and res["thresholds"] == [3.0] and res["env"]["size"] == 3
    assert res["env"]["name"] == "gridworld" and res["env_title"] == "gridworld (size=3, horizon=4, alpha=3)"
    assert res["tolerance"] == judge.DEFAULT_TOLERANCE
    assert res["optimum"]["reward"] > 0 and res["unconstrained"]["reward"] >= res["optimum"]["reward"] - 1e-6
    assert res["optimum"]["costs"][0] == pytest.approx(3.0, abs=1e-6)
    assert res["machine"]["cpu"]["model"] and res["machine"]["cpu"]["logical_cores"] >= 1
    assert res["machine"]["device"]["count"] >= 1
    if (Path(compare.__file__).resolve().parents[2] / ".git").exists():  # a git checkout names its commit
        assert len(res["source"]["commit"]) == 40
    else:
        assert res["source"] is None
    assert res["machine"]["versions"]["jax"] and res["timing"]["total_wall_s"] >= res["timing"]["runs_wall_s"] > 0
    md = (out / "reproduce_paper.md").read_text()
    assert (out / "reproduce_paper.png").stat().st_size > 10_000
    assert (out / "reproduce_paper_profile.png").stat().st_size > 10_000
    main_table, stats_table = md.split("\n\n")[0], md.split("\n\n")[2]
    lines = [line for line in main_table.splitlines() if line.startswith("|")]
    assert len(stats_table.splitlines()) == 2 + len(res["runs"])
    assert len(lines) == 2 + len(res["runs"]) + 2  # header, rule, runs, the two optima
    for row, line in zip(res["runs"], lines[2:]):
        assert row["num_iterations"] == 6
        k = row["episodes_per_iteration"]
        assert k == (16 if row["algo"] == "cpo" else 8)
        assert row["changed_settings"]["num_iterations"] == 6
        assert row["settings"]["num_iterations"] == 6 and row["settings"]["episodes_per_iteration"] == k
        # the whole run is shorter than 10,000 episodes: the window is every iteration
        assert row["paper_metric"]["window_iterations"] == 6
        assert row["paper_metric"]["window_episodes"] == 6 * k
        ex = row["exact"]
        for s in (ex["reward"], ex["costs"][0], row["paper_metric"]["reward"]):
            assert len(s["per_seed"]) == 2
            assert s["mean"] == pytest.approx(np.mean(s["per_seed"]))
            assert s["min"] <= s["mean"] <= s["max"]
        costs = np.array(ex["costs"][0]["per_seed"])
        assert ex["violating_seeds"] == int(np.sum(costs > 3.06 + 1e-9))
        assert ex["judgement"]["feasible_seeds"] == 2 - ex["violating_seeds"]
        assert ex["gap"]["mean"] == pytest.approx(res["optimum"]["reward"] - ex["reward"]["mean"], abs=1e-9)
        # no seed within the threshold beats the exact optimum
        for reward, cost in zip(ex["reward"]["per_seed"], costs):
            assert cost > 3.0 or reward <= res["optimum"]["reward"] + 1e-4
        assert line.startswith(f"| {row['label']} | {row['input']} | 6 x {k} * |")
        assert f"{ex['reward']['mean']:.2f} ± {ex['reward']['std']:.2f}" in line
        assert f"{ex['violating_seeds']}/2 | {row['paper_metric']['violating_seeds']}/2" in line
        assert row["timing"]["wall_s"] >= row["timing"]["compile_s"] > 0
        assert row["exact_curve"]["iterations"] == [0, 3, 6]
    assert f"{res['optimum']['reward']:.2f}" in lines[-2] and "Exact optimum" in lines[-2]
    assert "Total wall time" in md and "load average" in md


@pytest.mark.slow
def test_exact_values_match_fhc_evaluate(tmp_path):
    """The exact columns are fhc_jax.evaluate of the returned final policies; the paper metric is
    the mean of the per-iteration batch means over the window. The statistics over seeds, their
    table and the performance profiles are there, and the progress written to a stream that is
    not a terminal has one plain, parseable line per completed run."""
    from fhc_jax.experiment.progress import parse_run_line

    stream = io.StringIO()  # not a terminal
    res = compare.run_comparison(
        study_file.select_runs(["fh-constrained"]), seeds=2, overrides=TINY[:-1], stream=stream, keep_policies=True
    )
    spec = study_file.build_specs(study_file.select_runs(["fh-constrained"]), 2, TINY[:-1])[0]
    env, params = spec.make_env()
    ev = judge.evaluate_policies(env.to_cmdp(params), res["_policies"][0])
    row = res["runs"][0]
    np.testing.assert_allclose(row["exact"]["reward"]["per_seed"], ev["reward"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(row["exact"]["costs"][0]["per_seed"], ev["costs"][:, 0], rtol=1e-5, atol=1e-5)
    # statistics over the 2 seeds, each interval with its number of seeds
    st = row["statistics"]
    assert st["n_seeds"] == 2 and st["intervals"]["resamples"] == 2000
    for block in (st["reward"], st["costs"][0], st["optimality_gap"]):
        assert block["n_seeds"] == 2 and block["mean_ci95"][0] <= block["mean"] <= block["mean_ci95"][1]
        assert block["iqm_ci95"][0] <= block["iqm"] <= block["iqm_ci95"][1]
    assert st["reward"]["mean"] == pytest.approx(row["exact"]["reward"]["mean"])
    assert st["optimality_gap"]["mean"] == pytest.approx(row["exact"]["gap"]["mean"])
    assert st["violation_probability"]["violating_seeds"] == row["exact"]["violating_seeds"]
    assert st["violation_probability"]["n_seeds"] == 2 and len(st["violation_probability"]["ci95"]) == 2
    # progress: no carriage return, one parseable line for the one run
    text = stream.getvalue()
    assert "\r" not in text
    parsed = [p for p in map(parse_run_line, text.splitlines()) if p is not None]
    assert len(parsed) == 1 and parsed[0]["name"] == "FH-Constrained"
    assert (parsed[0]["done"], parsed[0]["total"], parsed[0]["eta_s"]) == (1, 1, 0.0)
    assert "(2 seeds, 95% intervals)" in parsed[0]["detail"]
    # the markdown's second table and the performance-profile figure
    paths = compare_report.write_outputs({k: v for k, v in res.items() if k != "_policies"}, tmp_path, stem="c")
    md = paths["md"].read_text()
    assert "| Algorithm | Input | Seeds | Exact reward: mean [95% CI] |" in md
    stats_row = next(line for line in md.splitlines() if line.startswith("| FH-Constrained | tabular (h, s) | 2 |"))
    assert f"{st['reward']['mean']:.2f} [{st['reward']['mean_ci95'][0]:.2f}, " in stats_row
    assert paths["profile"] == tmp_path / "c_profile.png" and paths["profile"].stat().st_size > 10_000
    panels = compare_report.profile_panels(json.loads(paths["json"].read_text()))
    np.testing.assert_allclose(panels[0][1]["FH-Constrained"], ev["reward"] / res["optimum"]["reward"], rtol=1e-5)


def test_judge_run_window_and_violations():
    r, n, k = 3, 100, 256
    metrics = {"reward": np.tile(np.arange(n, dtype=float), (r, 1)), "costs": np.full((r, n, 1), 20.0)}
    metrics["costs"][1, -5:, 0] = 100.0  # seed 1's last iterations: mean over the window > alpha
    opt = Optimum(
        reward=45.0,
        costs=np.array([25.0]),
        multipliers=np.array([0.5]),
        policy=np.zeros(1),
        stage_costs=np.zeros(1),
        stage_rewards=np.zeros(1),
        solve_time_s=0.0,
    )
    judged = judge.judge(
        np.array([40.0, 41.0, 42.0]), np.array([[25.4], [25.6], [10.0]]), np.array([25.0]), optimum=opt
    )
    out = compare.judge_run(metrics, judged, k)
    window = math.ceil(10_000 / k)
    assert out["paper_metric"]["window_iterations"] == window == 40
    assert out["paper_metric"]["reward"]["mean"] == pytest.approx(np.mean(np.arange(n - window, n)))
    assert out["paper_metric"]["violating_seeds"] == 1
    assert out["paper_metric"]["fraction_of_window_iterations_above_alpha"] == pytest.approx(5 / (3 * 40))
    # 25.4 is within 2% of 25, 25.6 is not
    assert out["exact"]["violating_seeds"] == 1 and out["exact"]["violation_rate"] == pytest.approx(1 / 3)
    assert out["exact"]["gap"]["per_seed"] == pytest.approx([5.0, 4.0, 3.0])
    assert out["exact"]["max_relative_excess"] == pytest.approx(0.6 / 25)
    # the same rule with another tolerance: 0 counts 25.4 as a violation too
    strict = compare.judge_run(metrics, judge.judge(judged.reward, judged.costs, [25.0], tolerance=0.0), k)
    assert strict["exact"]["violating_seeds"] == 2 and strict["paper_metric"]["violating_seeds"] == 1


def test_selection_and_settings_validation():
    names = [r.name for r in study_file.select_runs()]
    assert names == [
        "FH-Constrained",
        "NN-Constrained (xy)",
        "PPO-Lagrangian (xy)",
        "PPO-Lagrangian (xyt)",
        "CPO (xy)",
        "CPO (xyt)",
        "e-COP (xy)",
        "Saute-Lagrangian (xy)",
        "Saute-Lagrangian (xyt)",
    ]
    assert [r.name for r in study_file.select_runs(["ppo_lagrangian", "cpo"], ["xyt"])] == [
        "PPO-Lagrangian (xyt)",
        "CPO (xyt)",
    ]
    with pytest.raises(ValueError, match="no run"):
        study_file.select_runs(["nn-constrained"], ["xyt"])
    specs = study_file.build_specs(
        study_file.select_runs(["fh-constrained", "cpo"], ["xyt"]),
        3,
        ["env.size=4", "cpo.num_iterations=7", "theta_bound=2.0"],
    )
    assert [s.algo for s in specs] == ["fh-constrained", "cpo"]
    assert all(s.env["size"] == 4 and s.seeds == 3 for s in specs)
    assert specs[1].learner.num_iterations == 7 and specs[1].learner.observation == "xyt"
    default = resolve_env_defaults(fh_constrained.Config(), True)  # GridWorld has a tabular exact model
    assert specs[0].learner.num_iterations == default.num_iterations and specs[0].learner.theta_bound == 2.0
    for bad in (["nope=1"], ["cpo.nope=1"], ["env.nope=1"], ["observation=xyt"]):
        with pytest.raises(ConfigError):
            study_file.build_specs(study_file.select_runs(["fh-constrained", "cpo"]), 2, bad)
    with pytest.raises(ConfigError, match="not among"):
        study_file.build_specs(study_file.select_runs(["cpo"]), 2, ["ppo-lag.num_iterations=3"])


def test_cli_rejects_bad_settings_before_compiling(tmp_path, capsys):
    assert main(["compare", "--set", "num_iterations=0", "--out", str(tmp_path)]) == 2
    assert "num_iterations" in capsys.readouterr().err
    assert main(["compare", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())


STUDY = """name = "two_step_sizes"
notes = ["two FH-Constrained critics"]
[set]
num_iterations = 6
theta_bound = 2.0
[[run]]
label = "FH slow critic"
algo = "fh-constrained"
set = { critic_lr = { init = 0.25 }, num_iterations = 9 }
[[run]]
label = "FH fast critic"
algo = "fh_constrained"
set = { "critic_lr.init" = 1.0 }
[[run]]
algo = "cpo"
set = { observation = "xyt" }
"""


def test_a_study_file_is_read_with_its_precedence(tmp_path):
    """Rows of a study: label, learner (either name form) and settings; the study's common
    settings apply where a learner has them, a row's settings win over them and --set wins over
    both."""
    path = tmp_path / "study.toml"
    path.write_text(STUDY)
    study = study_file.load_study(path)
    assert study.name == "two_step_sizes" and study.notes == ("two FH-Constrained critics",)
    assert [(r.name, r.algo, r.observation) for r in study.runs] == [
        ("FH slow critic", "fh-constrained", None),
        ("FH fast critic", "fh-constrained", None),
        ("CPO (xyt)", "cpo", "xyt"),
    ]
    assert [r.name for r in study_file.select_runs(inputs=["xy"], study=study)] == ["FH slow critic", "FH fast critic"]
    slow, fast, cpo = study_file.build_specs(
        study.runs, 2, ["env.size=3", "cpo.num_iterations=4"], common=study.settings
    )
    assert slow.learner.critic_lr.init == 0.25 and fast.learner.critic_lr.init == 1.0
    assert (slow.num_iterations, fast.num_iterations, cpo.num_iterations) == (9, 6, 4)
    assert slow.learner.theta_bound == fast.learner.theta_bound == 2.0 and cpo.learner.observation == "xyt"
    assert all(s.env["size"] == 3 and s.seeds == 2 for s in (slow, fast, cpo))
    slow, _, _ = study_file.build_specs(study.runs, 2, ["num_iterations=5"], common=study.settings)
    assert slow.num_iterations == 5


@pytest.mark.parametrize(
    "text, message",
    [
        ("[[run]]\nalgo = 'fh-constrained'\ncolour = 'red'\n", r"unknown key 'run\[0\].colour'"),
        ("[[run]]\nlabel = 'x'\n", r"run\[0\] needs algo = one of fh-constrained"),
        ("[[run]]\nalgo = 'sac'\n", r"run\[0\] needs algo = one of fh-constrained.*found 'sac'"),
        ("[[run]]\nalgo = 'cpo'\n[[run]]\nalgo = 'cpo'\n", "two runs are labelled 'CPO'"),
        ("name = 'x'\n", r"has no \[\[run\]\] rows"),
        ("seeds = 3\n[[run]]\nalgo = 'cpo'\n", r"unknown key 'seeds'"),
        ("[[run]\n", "is not valid TOML"),
    ],
)
def test_study_file_errors_are_one_line_before_compiling(tmp_path, capsys, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        study_file.load_study(path)
    assert main(["compare", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fhc-jax compare: error: ") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_rows_of_a_study_must_share_one_environment(tmp_path):
    path = tmp_path / "envs.toml"
    path.write_text("[[run]]\nalgo = 'cpo'\nset = { 'env.size' = 3 }\n[[run]]\nalgo = 'ppo-lag'\n")
    study = study_file.load_study(path)
    with pytest.raises(ConfigError, match="must share one environment"):
        study_file.build_specs(study.runs, 1, common=study.settings)
    with pytest.raises(ConfigError, match="observation is chosen per run"):
        study_file.build_specs(study.runs, 1, ["cpo.observation=xy"])


@pytest.mark.slow
def test_cli_runs_a_study_file(tmp_path, capsys):
    """fhc-jax compare STUDY: the study's rows, its name as the files' stem, its notes under the
    table."""
    path = tmp_path / "study.toml"
    path.write_text(STUDY)
    out = tmp_path / "out"
    assert (
        main(
            [
                "compare",
                str(path),
                "--algos",
                "fh-constrained",
                "--seeds",
                "1",
                "--set",
                "env.size=3",
                "--set",
                "env.horizon=4",
                "--set",
                "episodes_per_iteration=8",
                "--set",
                "run.chunk_size=3",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    res = json.loads((out / "two_step_sizes.json").read_text())
    assert [r["name"] for r in res["runs"]] == ["FH slow critic", "FH fast critic"]
    assert res["runs"][0]["changed_settings"]["critic_lr.init"] == 0.25
    assert res["runs"][0]["num_iterations"] == 9 and res["runs"][1]["num_iterations"] == 6
    assert res["notes"] == ["two FH-Constrained critics"]
    assert "two FH-Constrained critics" in (out / "two_step_sizes.md").read_text()
    assert "| FH slow critic | tabular (h, s) | 9 x 8 * |" in capsys.readouterr().out  # rows by their label
