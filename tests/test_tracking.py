"""Experiment tracking (``--logger tensorboard|wandb``): what is written equals metrics.csv and
summary.json, W&B runs offline without credentials or network, and a failing tracker never
fails training."""

from __future__ import annotations

import csv
import json
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import TINY_RUN

from fhc_jax.cli import main
from fhc_jax.experiment import config, tracking, tracking_backends, training
from fhc_jax.experiment.runner import ChunkState

pytest.importorskip("tensorboardX")
pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

TINY = TINY_RUN


@pytest.fixture
def offline_env(monkeypatch, tmp_path):
    """No W&B credentials or mode from this machine, and no reachable W&B server."""
    home = tmp_path / "home"
    home.mkdir()
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_ENTITY", "NETRC", "WANDB_DISABLED"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / ".config" / "wandb"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(home / ".cache" / "wandb"))
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    return home


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    """One tiny run (2 seeds, 4 chunks) with both loggers, no credentials, no network."""
    mp = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("tracked")
    home = tmp / "home"
    home.mkdir()
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_ENTITY", "NETRC", "WANDB_DISABLED"):
        mp.delenv(var, raising=False)
    mp.setenv("HOME", str(home))
    mp.setenv("WANDB_DIR", str(tmp / "wandb_dir"))
    mp.setenv("WANDB_CONFIG_DIR", str(home / ".config" / "wandb"))
    mp.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    out = tmp / "run"
    try:
        assert tracking_backends.wandb_mode() == "offline"
        assert (
            main(
                [
                    "train",
                    "--seeds",
                    "2",
                    *TINY,
                    "--out",
                    str(out),
                    "--quiet",
                    "--logger",
                    "tensorboard",
                    "--logger",
                    "wandb",
                ]
            )
            == 0
        )
    finally:
        mp.undo()
    return out


def _events(path: Path) -> EventAccumulator:
    ea = EventAccumulator(str(path), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    ea.Reload()
    return ea


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------- choices and errors


def test_resolve_loggers():
    assert tracking.resolve_loggers(None) == ()
    assert tracking.resolve_loggers("none") == ()
    assert tracking.resolve_loggers(["none", "none"]) == ()
    assert tracking.resolve_loggers("wandb") == ("wandb",)
    assert tracking.resolve_loggers(["tensorboard", "wandb", "tensorboard"]) == ("tensorboard", "wandb")
    with pytest.raises(tracking.TrackingError, match=r"unknown logger 'mlflow'.*'tensorboard', 'wandb', 'none'"):
        tracking.resolve_loggers(["mlflow"])
    with pytest.raises(tracking.TrackingError, match="'none' cannot be combined"):
        tracking.resolve_loggers(["none", "wandb"])


def test_missing_package_is_a_usage_error_naming_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb fails, find_spec finds nothing
    with pytest.raises(tracking.TrackingError, match=r"pip install 'fhc_jax\[track\]'"):
        tracking.resolve_loggers(["tensorboard", "wandb"])
    out = tmp_path / "run"
    assert main(["train", *TINY, "--out", str(out), "--logger", "wandb"]) == 2
    err = capsys.readouterr().err
    assert "fhc-jax train: error: logger 'wandb' needs the package 'wandb'" in err and "fhc_jax[track]" in err
    assert not out.exists()  # refused before anything was written (or compiled)
    for cmd in (
        ["sweep", *TINY, "--grid", "trace=0.5,0.6", "--out", str(tmp_path / "s")],
        ["compare", "--algos", "fh-constrained", *TINY, "--out", str(tmp_path / "c")],
    ):
        assert main([*cmd, "--logger", "wandb"]) == 2
        assert "fhc_jax[track]" in capsys.readouterr().err
        assert not (tmp_path / cmd[-1]).exists()


def test_unknown_logger_flag_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", *TINY, "--out", str(tmp_path / "run"), "--logger", "mlflow"])
    assert exc.value.code == 2
    assert "invalid choice: 'mlflow'" in capsys.readouterr().err
    with pytest.raises(tracking.TrackingError, match="unknown logger"):
        training.train_run(config.load_spec(overrides=TINY[1::2]), tmp_path / "api", loggers=["mlflow"])
    assert not (tmp_path / "api").exists()


def test_wandb_mode_offline_without_credentials(offline_env, monkeypatch):
    assert tracking_backends.wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")  # explicit mode: W&B decides
    assert tracking_backends.wandb_mode() is None
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert tracking_backends.wandb_mode() is None
    monkeypatch.delenv("WANDB_API_KEY")
    netrc = offline_env / ".netrc"
    netrc.write_text("machine 127.0.0.1\n  login user\n  password " + "y" * 40 + "\n")
    netrc.chmod(0o600)
    assert tracking_backends.wandb_mode() is None  # credentials for the configured host
    monkeypatch.setenv("WANDB_BASE_URL", "https://api.wandb.ai")
    assert tracking_backends.wandb_mode() == "offline"  # none for api.wandb.ai


# ----------------------------------------------------------------------------- what is written


@pytest.mark.slow
def test_tensorboard_scalars_equal_metrics_csv(tracked_run):
    rows = _csv_rows(tracked_run / "metrics.csv")
    ea = _events(tracked_run / "tensorboard")
    scalars = set(ea.Tags()["scalars"])
    columns = [c for c in rows[0] if c not in ("seed", "iteration")]
    assert {"reward", "cost_0", "multiplier_0", "exact_reward", "exact_cost_0"} <= set(columns)
    for seed in ("0", "1"):
        for col in columns:
            want = [(int(r["iteration"]), float(r[col])) for r in rows if r["seed"] == seed and r[col] != ""]
            tag = f"seed_{seed}/{col}"
            assert tag in scalars
            got = [(e.step, e.value) for e in ea.Scalars(tag)]
            assert [s for s, _ in got] == [s for s, _ in want], tag
            np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-6, err_msg=tag)
    assert [e.step for e in ea.Scalars("seed_0/exact_reward")] == [0, 5, 10, 15, 20]
    speed = ea.Scalars("speed/env_steps_per_s")
    assert [e.step for e in speed] == [5, 10, 15, 20] and all(e.value > 0 for e in speed)


@pytest.mark.slow
def test_tensorboard_config_summary_and_plots(tracked_run):
    ea = _events(tracked_run / "tensorboard")
    summary = json.loads((tracked_run / "summary.json").read_text())
    config = json.loads((tracked_run / "config.json").read_text())
    agg = ea.Scalars("summary/aggregate/exact_reward/mean")
    assert agg[-1].step == 20 and agg[-1].value == pytest.approx(summary["aggregate"]["exact_reward"]["mean"], rel=1e-6)
    assert ea.Scalars("summary/aggregate/feasible_seeds")[-1].value == summary["aggregate"]["feasible_seeds"]
    for r, row in enumerate(summary["seeds"]):
        assert ea.Scalars(f"summary/seeds/{r}/exact_costs/0")[-1].value == pytest.approx(
            row["exact_costs"][0], rel=1e-6
        )
    text = ea.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert json.loads("\n".join(line[4:] for line in text.splitlines())) == json.loads(json.dumps(config))
    hparams = ea.PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"} <= set(hparams)
    assert b"critic_lr.init" in hparams["_hparams_/session_start_info"]
    images = set(ea.Tags()["images"])
    assert images == {f"plots/{p.stem}" for p in (tracked_run / "plots").glob("*.png")} and len(images) >= 3
    assert ea.Images("plots/learning_curves")[0].width > 100


@pytest.mark.slow
def test_wandb_offline_run_written_without_network(tracked_run):
    runs = list((tracked_run / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    run_file = list(runs[0].glob("run-*.wandb"))
    assert len(run_file) == 1
    data = run_file[0].read_bytes()
    for key in (
        b"seed_0/reward",
        b"seed_1/exact_cost_0",
        b"speed/env_steps_per_s",
        b"summary/aggregate/feasible_seeds",
        b"plots/learning_curves",
        b"critic_lr.init",
    ):
        assert key in data, key
    assert list((runs[0] / "files" / "media" / "images").glob("plots/learning_curves*.png"))


@pytest.mark.slow
def test_results_do_not_depend_on_logging(tracked_run, tmp_path):
    out = tmp_path / "plain"
    assert main(["train", "--seeds", "2", *TINY, "--out", str(out), "--quiet", "--no-plots", "--logger", "none"]) == 0
    assert (out / "metrics.csv").read_text() == (tracked_run / "metrics.csv").read_text()
    assert not (out / "tensorboard").exists() and not (out / "wandb").exists()


# ----------------------------------------------------------------------------- never in the way


class _Raising:
    """A tracker that fails at ``where``."""

    where = "log_metrics"
    closed = 0

    def __init__(self, directory, **kwargs):
        if self.where == "init":
            raise ConnectionError("no route to host")

    def log_config(self, config, hparams):
        if self.where == "log_config":
            raise RuntimeError("boom")

    def log_metrics(self, step, metrics):
        if self.where == "log_metrics" and step >= 5:
            raise OSError(28, "No space left on device")

    def log_summary(self, summary, step):
        pass

    def log_images(self, paths, step):
        pass

    def close(self):
        type(self).closed += 1


@pytest.mark.slow
@pytest.mark.parametrize("where", ["init", "log_metrics"])
def test_failing_tracker_does_not_fail_training(tracked_run, monkeypatch, tmp_path, capsys, where):
    monkeypatch.setattr(_Raising, "where", where)
    monkeypatch.setattr(_Raising, "closed", 0)
    monkeypatch.setitem(tracking.TRACKERS, "wandb", _Raising)  # the other logger keeps working
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--seeds",
                "2",
                *TINY,
                "--out",
                str(out),
                "--quiet",
                "--no-plots",
                "--logger",
                "wandb",
                "--logger",
                "tensorboard",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "logging disabled" in line]
    assert len(warnings) == 1 and warnings[0].startswith("fhc-jax: warning: wandb logging disabled")
    assert ("ConnectionError" if where == "init" else "No space left") in warnings[0]
    assert _Raising.closed == (0 if where == "init" else 1)
    assert (out / "metrics.csv").read_text() == (tracked_run / "metrics.csv").read_text()
    assert json.loads((out / "summary.json").read_text())["complete"]
    ea = _events(out / "tensorboard")
    assert [e.step for e in ea.Scalars("seed_1/reward")] == list(range(1, 21))


def _state(iteration: int, runs: int = 2, elapsed: float = 1.0) -> ChunkState:
    n = iteration
    return ChunkState(
        carry=None,
        iteration=n,
        metrics={
            "reward": np.arange(runs * n, dtype=np.float32).reshape(runs, n),
            "costs": np.ones((runs, n, 1), np.float32),
        },
        exact_iterations=np.array([0, n] if n else [0]),
        exact_reward=np.full((runs, 2 if n else 1), 7.0),
        exact_costs=np.full((runs, 2 if n else 1, 1), 3.0),
        elapsed_s=elapsed,
    )


class _Recorder:
    instances: list = []

    def __init__(self, directory, **kwargs):
        self.kwargs, self.steps, self.summary, self.images, self.closed = kwargs, [], None, None, False
        self.config = None
        _Recorder.instances.append(self)

    def log_config(self, config, hparams):
        self.config = (config, hparams)

    def log_metrics(self, step, metrics):
        self.steps.append((step, {g: dict(d) for g, d in metrics.items()}))

    def log_summary(self, summary, step):
        self.summary = (summary, step)

    def log_images(self, paths, step):
        self.images = (paths, step)

    def close(self):
        self.closed = True


def test_trackers_log_each_iteration_once_and_resume_after_the_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setitem(tracking.TRACKERS, "tensorboard", _Recorder)
    monkeypatch.setattr(_Recorder, "instances", [])
    t = tracking.Trackers(
        ("tensorboard",),
        tmp_path,
        name="x",
        config={"a": [1, 2]},
        hparams={"a": [1, 2], "b": None},
        run_labels=["seed_0", "seed_1"],
        steps_per_iteration=10,
        start_iteration=None,
        background=False,
    )
    t.log_chunk(_state(0))  # before begin: nothing
    t.begin(0, 0.0)
    t.log_chunk(_state(0, elapsed=0.0))
    t.log_chunk(_state(3, elapsed=0.5))
    t.log_chunk(_state(3, elapsed=0.5))  # nothing new
    t.log_summary({"complete": True, "machine": {"cpu": "x"}})
    t.log_images([tmp_path / "a.png"])
    t.close()
    rec = _Recorder.instances[0]
    assert rec.config == ({"a": [1, 2]}, {"a": "[1, 2]"})
    assert [s for s, _ in rec.steps] == [0, 1, 2, 3]
    assert rec.steps[0][1] == {
        "seed_0": {"exact_reward": 7.0, "exact_cost_0": 3.0},
        "seed_1": {"exact_reward": 7.0, "exact_cost_0": 3.0},
    }
    assert rec.steps[2][1]["seed_1"] == {"reward": 4.0, "cost_0": 1.0}
    assert rec.steps[3][1]["seed_0"] == {"reward": 2.0, "cost_0": 1.0, "exact_reward": 7.0, "exact_cost_0": 3.0}
    assert rec.steps[3][1]["speed"] == {"iterations_per_s": 6.0, "env_steps_per_s": 120.0}
    assert rec.summary == ({"complete": True, "machine": {"cpu": "x"}}, 3) and rec.images[1] == 3
    assert rec.closed and not t.enabled
    # a resumed run at iteration 3 logs from iteration 4 on
    t = tracking.Trackers(
        ("tensorboard",),
        tmp_path,
        name="x",
        config={},
        run_labels=["seed_0", "seed_1"],
        start_iteration=3,
        start_elapsed=0.5,
        background=False,
    )
    t.log_chunk(_state(5, elapsed=1.5))
    t.close()
    rec = _Recorder.instances[1]
    assert rec.kwargs["start_iteration"] == 3
    assert [s for s, _ in rec.steps] == [4, 5] and rec.steps[-1][1]["speed"] == {"iterations_per_s": 2.0}


def test_close_does_not_wait_forever_for_a_hung_tracker(monkeypatch, tmp_path, capsys):
    release, finished = threading.Event(), threading.Event()

    class Hung(_Recorder):
        def close(self):
            release.wait(60)  # hung until the test lets it go
            finished.set()

    monkeypatch.setitem(tracking.TRACKERS, "wandb", Hung)
    t = tracking.Trackers(("wandb",), tmp_path, name="x", config={}, run_labels=["seed_0"], stream=sys.stderr)
    t.log_chunk(_state(2, runs=1))
    try:
        t.close(timeout=0.3)
        assert not finished.is_set()  # close returned while the tracker's close was still hung
        assert "did not finish within 0.3 s" in capsys.readouterr().err
    finally:
        release.set()


@pytest.mark.slow
def test_sweep_logs_every_configuration_and_seed(tmp_path):
    out = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                "--seeds",
                "1",
                *TINY,
                "--grid",
                "trace=0.5,0.6",
                "--out",
                str(out),
                "--quiet",
                "--logger",
                "tensorboard",
            ]
        )
        == 0
    )
    ea = _events(out / "tensorboard")
    runs = list(csv.DictReader((out / "runs.csv").open()))
    for c in (0, 1):
        assert [e.step for e in ea.Scalars(f"config_{c}/seed_0/reward")] == list(range(1, 21))
        final = ea.Scalars(f"config_{c}/seed_0/exact_reward")[-1]
        assert final.step == 20 and final.value == pytest.approx(float(runs[c]["exact_reward"]), rel=1e-6)
    summary = json.loads((out / "summary.json").read_text())
    assert ea.Scalars("summary/rows/1/rank")[-1].value == summary["rows"][1]["rank"]


@pytest.mark.slow
def test_compare_logs_one_tensorboard_run_per_learner(tmp_path):
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                "--algos",
                "fh-constrained",
                "--seeds",
                "2",
                *TINY,
                "--out",
                str(out),
                "--name",
                "t",
                "--quiet",
                "--logger",
                "tensorboard",
            ]
        )
        == 0
    )
    ea = _events(out / "tensorboard" / "t" / "FH-Constrained")
    result = json.loads((out / "t.json").read_text())
    assert [e.step for e in ea.Scalars("seed_1/cost_0")] == list(range(1, 21))
    assert ea.Scalars("summary/exact/reward/mean")[-1].value == pytest.approx(
        result["runs"][0]["exact"]["reward"]["mean"], rel=1e-6
    )


def test_unreachable_wandb_server_only_disables_wandb(offline_env, monkeypatch, tmp_path, capsys):
    """Credentials configured (so W&B goes online) but the server refuses connections: one
    warning after the short init timeout, TensorBoard logs everything, nothing raises."""
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.setitem(tracking_backends.WANDB_SETTINGS, "init_timeout", 3.0)
    assert tracking_backends.wandb_mode() is None
    import wandb

    release, initialised, threads = threading.Event(), threading.Event(), []
    init = wandb.init

    def gated_init(*args, **kwargs):  # the real wandb.init, once the test lets it start
        threads.append(threading.current_thread())
        release.wait(60)
        try:
            return init(*args, **kwargs)
        finally:
            initialised.set()

    monkeypatch.setattr(wandb, "init", gated_init)
    try:
        t = tracking.Trackers(
            ("wandb", "tensorboard"),
            tmp_path,
            name="x",
            config={"a": 1},
            run_labels=["seed_0", "seed_1"],
            stream=sys.stderr,
        )
        t.log_chunk(_state(4))
        assert not initialised.is_set()  # the training thread does not wait for W&B
    finally:
        release.set()
    t.log_summary({"complete": True})
    t.close()
    warnings = [line for line in capsys.readouterr().err.splitlines() if "logging disabled" in line]
    assert len(warnings) == 1 and "wandb logging disabled" in warnings[0]
    assert threads and threads[0] is not threading.main_thread()
    ea = _events(tmp_path / "tensorboard")
    assert [e.step for e in ea.Scalars("seed_1/reward")] == [1, 2, 3, 4]
    assert ea.Scalars("summary/complete")[0].value == 1.0
