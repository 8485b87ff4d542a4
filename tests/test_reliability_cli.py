"""Fault injection at the experiment layer and the command line (docs/RELIABILITY.md, "The
experiment layer and the command line"): each case ends in the correct result or one line on
stderr with a non-zero exit status that names the field or file and what to do, and nothing is
trained or written first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import TINY_RUN
from toy_env import ToyEnv

from fhc_jax.cli import main
from fhc_jax.experiment import config, judge, rundir, runner, writer_lock
from fhc_jax.experiment.judgement import Optimum

TINY = [
    *TINY_RUN,
    "--set",
    "run.checkpoint_every=1",
    "--seeds",
    "1",
]


class NoModel(ToyEnv):
    """tests/toy_env.py's two lanes without a declared exact model: tabular, judged by playing."""

    has_exact_model = property(lambda self: False)

    def thresholds(self, params):
        return params.thresholds


class Broken(ToyEnv):
    """A user's environment whose constructor fails in its own code."""

    def __init__(self, horizon: int = 3, alpha: float = 1.0):
        super().__init__(horizon, alpha)
        raise KeyError("lane_table")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A complete tiny gridworld run on the "xy" observations (checkpoints 15 and 20 kept)."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    assert main(["train", *TINY, "--out", str(out), "--quiet", "--no-plots"]) == 0
    return out


def _copy(run: Path, tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("eval", rundir.LOCK))
    return dest


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def _no_compilation(monkeypatch) -> None:
    """Fail the test if a learner's chunk program is built (training would start)."""
    monkeypatch.setattr(runner.ChunkedTrainer, "init", lambda *a, **k: pytest.fail("compiled before refusing"))
    monkeypatch.setattr(runner.ChunkedTrainer, "advance", lambda *a, **k: pytest.fail("trained before refusing"))


@pytest.mark.slow
def test_eval_refuses_a_changed_observation_encoder(trained, tmp_path, monkeypatch, capsys):
    """Issue 33 item 6: the policies cannot follow another observation encoder; judging them
    under the label [changed: observation=xyt] gave the as-trained numbers."""
    run = _copy(trained, tmp_path, "obs")
    _no_compilation(monkeypatch)
    assert main(["eval", str(run), "--set", "env.observation=xyt"]) == 2
    line = one_line(capsys)
    assert "--set env.observation" in line and "trained on 'xy' observations" in line and "'xyt'" in line
    assert not (run / "eval").exists()


@pytest.mark.slow
def test_episodes_beyond_the_maximum_are_one_line_errors(trained, tmp_path, monkeypatch, capsys):
    """--episodes 10**12 (and run.eval_episodes) raised NotImplementedError deep in jax.random."""
    run = _copy(trained, tmp_path, "episodes")
    _no_compilation(monkeypatch)
    assert main(["eval", str(run), "--episodes", str(10**12)]) == 2
    line = one_line(capsys)
    assert f"--episodes must be an integer <= {config.MAX_EPISODES}, found {10**12}" in line
    assert main(["train", *TINY, "--set", f"run.eval_episodes={10**12}", "--out", str(tmp_path / "t")]) == 2
    assert f"run.eval_episodes must be an integer <= {config.MAX_EPISODES}" in one_line(capsys)
    assert not (tmp_path / "t").exists() and not (run / "eval").exists()


@pytest.mark.slow
def test_a_missing_environment_module_is_named(trained, tmp_path, capsys):
    """A run of an environment whose module is not importable here was called "not valid for
    this version ... retrain": the run is fine, its environment's module is missing."""
    run = _copy(trained, tmp_path, "module")
    cfg = json.loads((run / "config.json").read_text())
    cfg["settings"]["env.name"] = "module_not_on_this_path_xyz:Lanes"
    (run / "config.json").write_text(json.dumps(cfg))
    assert main(["eval", str(run)]) == 2
    line = one_line(capsys)
    assert "no module named 'module_not_on_this_path_xyz'" in line and "PYTHONPATH" in line
    assert "not valid for this version" not in line and "retrain" not in line


@pytest.mark.slow
def test_eval_of_a_run_another_process_writes_advises_waiting(trained, tmp_path, capsys):
    """A run still being trained has no final checkpoint: eval advised `--resume`, which the
    training process's lock then refused. It names the writer and says to wait."""
    run = _copy(trained, tmp_path, "busy")
    shutil.rmtree(run / "checkpoints" / "20")
    with writer_lock.locked(run, f"fhc-jax train --out {run}"):
        assert main(["eval", str(run)]) == 1
        line = one_line(capsys)
    assert "is in use by process" in line and f"(fhc-jax train --out {run}," in line
    assert "wait for it to finish, then run fhc-jax eval again" in line and "--resume" not in line
    assert not (run / "eval").exists()
    assert main(["eval", str(run)]) == 2  # released: the incomplete run is named as such
    assert f"finish it with: fhc-jax train --resume --out {run}" in one_line(capsys)


@pytest.mark.slow
def test_a_tabular_environment_without_an_exact_model_is_refused_before_training(tmp_path, monkeypatch, capsys):
    """FH-Constrained trained and checkpointed such a run, then exited 2 at judging time over
    "coarse coordinate features" nobody asked for."""
    out = tmp_path / "nomodel"
    _no_compilation(monkeypatch)
    assert (
        main(
            [
                "train",
                "--env",
                f"{__name__}:NoModel",
                "--set",
                "num_iterations=4",
                "--seeds",
                "1",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 2
    )
    line = one_line(capsys)
    assert "fh-constrained could train on NoModel" in line and "could not play the trained policy" in line
    assert "coarse coordinate features" in line and "has_exact_model" in line
    assert not out.exists()


def test_a_failing_user_environment_is_labelled_as_its_error(tmp_path, capsys):
    """An exception from a user's own constructor was reported as fhc_jax's internal error."""
    assert main(["train", "--env", f"{__name__}:Broken", "--out", str(tmp_path / "b"), "--quiet"]) == 1
    line = one_line(capsys)
    assert f"environment '{__name__}:Broken' raised KeyError: 'lane_table'" in line and "not in fhc_jax" in line
    assert main(["solve", "--env", f"{__name__}:Broken"]) == 1
    assert "raised KeyError: 'lane_table'" in one_line(capsys)
    with pytest.raises(config.EnvironmentFailure, match="lane_table"):
        config.make_env(f"{__name__}:Broken")
    assert not (tmp_path / "b").exists()


def test_solve_names_a_user_environment(capsys):
    """`fhc-jax solve --env module:Class` printed <module.Class object at 0x...>."""
    assert main(["solve", "--env", "toy_env:ToyEnv", "--set", "env.horizon=4"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.startswith("toy_env:ToyEnv (horizon=4): ToyEnv, S=2, A=2, H=4") and "object at 0x" not in head


def test_an_infeasible_seed_is_not_shown_as_a_share_of_the_optimum():
    """A seed above the threshold can beat J*: its 100.3% is no achievement, and says so."""
    opt = Optimum(
        reward=10.0,
        costs=np.array([3.0]),
        multipliers=np.array([0.5]),
        policy=None,
        stage_costs=None,
        stage_rewards=None,
        solve_time_s=0.0,
    )
    judged = judge.judge([10.03, 9.5], [[3.5], [2.9]], [3.0], optimum=opt)
    rows = judge.format_table(judged).splitlines()
    assert "100.3% (infeasible)" in rows[1] and rows[1].split()[-2] == "NO"
    assert "95.0%" in rows[2] and "infeasible" not in rows[2]
