"""Fault injection (docs/RELIABILITY.md): damaged and partial checkpoints, concurrent writers,
divergence, interrupts and bad inputs. Every case ends in the correct result or a one-line error
with a non-zero exit status, and no file of an earlier good run changes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TINY_RUN

import fhc_jax as fhc
from fhc_jax.algos import fh_constrained as fc
from fhc_jax.cli import main
from fhc_jax.experiment import checkpoint, config, rundir, runner, writer_lock

TINY = [
    *TINY_RUN,
    "--set",
    "run.checkpoint_every=1",
    "--seeds",
    "2",
]
RESULT_FILES = ("config.json", "metrics.csv", "summary.json", "policy.npz")


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("fhc-jax")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "fhc_jax.cli"]


def snapshot(path: Path) -> dict[str, bytes]:
    """Bytes of every file under ``path`` except plots (PNG metadata) and the lock file."""
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and "plots" not in p.parts and p.name != rundir.LOCK
    }


def one_line_error(err: str, status_text: str = "error:") -> str:
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and status_text in lines[0] and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    """A complete tiny run (2 seeds, 4 chunks, a checkpoint after every chunk: 15 and 20 kept)."""
    out = tmp_path_factory.mktemp("good") / "run"
    assert main(["train", *TINY, "--out", str(out), "--quiet", "--no-plots"]) == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["15", "20"]
    return out


@pytest.fixture(scope="module")
def restorer(good_run):
    """(trainer, template, config hash) of the good run, compiled once for restore tests."""
    spec = config.load_spec(settings=json.loads((good_run / "config.json").read_text())["settings"])
    env, params = spec.make_env()
    trainer = runner.ChunkedTrainer(fc.make_learner(env, params, spec.learner), spec.seeds, spec.chunk_size)
    return trainer, trainer.init(runner.seed_keys(spec.seed, spec.seeds)), rundir.settings_hash(spec.settings())


def _copy(good_run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(good_run, out)
    return out


def _largest(step_dir: Path) -> Path:
    return max((p for p in step_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def _flip(path: Path, count: int = 32) -> None:
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    for i in range(mid, min(mid + count, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


# ----------------------------------------------------------------------------- checkpoints


def test_damaged_newest_checkpoint_falls_back_and_ends_identical(good_run, tmp_path, capsys):
    """The issue's case 1: 32 flipped bytes in the largest data file of the newest checkpoint."""
    out = _copy(good_run, tmp_path)
    _flip(_largest(out / "checkpoints" / "20"))
    assert main(["train", "--resume", "--out", str(out), "--quiet", "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert f"checkpoint {out / 'checkpoints' / '20'} rejected" in err
    assert (out / "rejected_checkpoints" / "20").is_dir()  # moved aside, not deleted
    for name in ("metrics.csv",):
        assert (out / name).read_bytes() == (good_run / name).read_bytes()
    a, b = (json.loads((d / "summary.json").read_text())["seeds"] for d in (out, good_run))
    assert a == b
    assert checkpoint.latest_iteration(out / "checkpoints") == 20  # rewritten, verified


@pytest.mark.parametrize(
    "damage",
    [
        "flip-largest",
        "truncate-largest",
        "delete-manifest",
        "garbage-manifest",
        "delete-orbax-metadata",
        "delete-ocdbt-manifest",
        "delete-data-files",
        "empty-directory",
    ],
)
def test_every_damage_is_rejected_or_harmless(restorer, good_run, tmp_path, damage):
    """Each kind of damage to checkpoint 20: either it is rejected (and 15 restored) or what is
    restored verifies (bit-identical to the undamaged checkpoint)."""
    trainer, template, chash = restorer
    ckpt = _copy(good_run, tmp_path) / "checkpoints"
    step = ckpt / "20"
    if damage == "flip-largest":
        _flip(_largest(step))
    elif damage == "truncate-largest":
        f = _largest(step)
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif damage == "delete-manifest":
        (step / checkpoint.MANIFEST).unlink()
    elif damage == "garbage-manifest":
        (step / checkpoint.MANIFEST).write_bytes(b"\x00\xff not json")
    elif damage == "delete-orbax-metadata":
        for p in step.rglob("_*METADATA"):
            p.unlink()
    elif damage == "delete-ocdbt-manifest":
        for p in step.rglob("manifest.ocdbt"):
            p.unlink()
    elif damage == "delete-data-files":
        for p in step.rglob("*"):
            if p.is_file() and p.parent.name == "d":
                p.unlink()
    elif damage == "empty-directory":
        shutil.rmtree(step)
        step.mkdir()
    messages = []
    state = checkpoint.restore_verified(
        ckpt, trainer, template, config_hash=chash, num_iterations=20, say=messages.append
    )
    reference = checkpoint.restore(good_run / "checkpoints", trainer, template, 20, config_hash=chash)
    if state.iteration == 15:
        assert any("20 rejected" in m for m in messages)
        assert not step.exists() and (ckpt.parent / "rejected_checkpoints" / "20").exists()
    else:  # orbax did not need what was damaged, and every array verified
        assert state.iteration == 20
        for x, y in zip(
            jax.tree.leaves(trainer.host_carry(state.carry)), jax.tree.leaves(trainer.host_carry(reference.carry))
        ):
            np.testing.assert_array_equal(x, y)
    assert (
        damage not in ("flip-largest", "truncate-largest", "delete-manifest", "garbage-manifest")
        or state.iteration == 15
    )


def test_no_intact_checkpoint_is_a_one_line_error_and_changes_nothing(good_run, tmp_path, capsys):
    out = _copy(good_run, tmp_path)
    for step in ("15", "20"):
        _flip(_largest(out / "checkpoints" / step))
    before = snapshot(out)
    assert main(["train", "--resume", "--out", str(out), "--quiet", "--no-plots"]) == 1
    line = one_line_error(capsys.readouterr().err.splitlines()[-1])
    assert "no intact checkpoint" in line and "15:" in line and "20:" in line
    assert snapshot(out) == before


def test_partial_save_is_cleaned_and_foreign_checkpoints_refused(restorer, good_run, tmp_path):
    """A kill during a save (orbax's temporary directory; a finished step without manifest), a
    checkpoint beyond num_iterations and one written under another configuration."""
    trainer, template, chash = restorer
    ckpt = _copy(good_run, tmp_path) / "checkpoints"
    (ckpt / "25.orbax-checkpoint-tmp-1234").mkdir()
    (ckpt / "25.orbax-checkpoint-tmp-1234" / "junk").write_bytes(b"x")
    state15 = checkpoint.restore(ckpt, trainer, template, 15, config_hash=chash)
    long = dataclass_replace(state15, iteration=40)
    checkpoint.save(ckpt, trainer, long, max_to_keep=10, config_hash=chash)  # beyond N = 20
    messages = []
    st = checkpoint.restore_verified(ckpt, trainer, template, config_hash=chash, num_iterations=20, say=messages.append)
    assert st.iteration == 20
    assert not (ckpt / "25.orbax-checkpoint-tmp-1234").exists()
    assert any("exceeds the configuration's num_iterations = 20" in m for m in messages)
    # another configuration's checkpoint at the newest step
    shutil.rmtree(ckpt.parent / "rejected_checkpoints")
    checkpoint.save(ckpt, trainer, dataclass_replace(state15, iteration=20), max_to_keep=10, config_hash="other")
    messages.clear()
    st = checkpoint.restore_verified(ckpt, trainer, template, config_hash=chash, num_iterations=20, say=messages.append)
    assert st.iteration == 15 and any("another configuration" in m for m in messages)
    (ckpt / "15" / checkpoint.MANIFEST).unlink()  # now nothing is intact
    with pytest.raises(checkpoint.CheckpointError, match="no intact checkpoint.*15: no manifest"):
        checkpoint.restore_verified(ckpt, trainer, template, config_hash=chash, num_iterations=20)


def dataclass_replace(state, **changes):
    import dataclasses

    return dataclasses.replace(state, **changes)


# ----------------------------------------------------------------------------- one writer


def test_second_writer_is_refused_at_once(good_run, tmp_path, capsys, monkeypatch):
    """The issue's case 2: a second train/--overwrite/--resume/sweep on a directory in use."""
    out = _copy(good_run, tmp_path)
    built = []  # every learner is trained through a ChunkedTrainer: none may be built (compiled)
    monkeypatch.setattr(runner.ChunkedTrainer, "__init__", lambda self, *a, **k: built.append(a))
    before = snapshot(out)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from fhc_jax.experiment import writer_lock\n"
                f"with writer_lock.locked({str(out)!r}, 'fhc-jax train --out {out}'):\n"
                "    print('locked', flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        for argv in (
            ["train", *TINY, "--overwrite", "--out", str(out)],
            ["train", "--resume", "--out", str(out)],
            ["sweep", *TINY, "--grid", "trace=0.2,0.5", "--overwrite", "--out", str(out)],
        ):
            assert main(argv) == 1
            assert built == []  # refused at once, nothing compiled
            line = one_line_error(capsys.readouterr().err.splitlines()[-1])
            assert f"is in use by process {holder.pid}" in line and "fhc-jax train --out" in line
        assert snapshot(out) == before  # --overwrite deleted nothing
    finally:
        holder.kill()
        holder.wait()
    # the OS released the killed holder's lock: the directory is usable again
    with writer_lock.locked(out, "test"):
        pass


# ----------------------------------------------------------------------------- divergence


@pytest.mark.slow
def test_divergence_stops_with_message_and_incomplete_summary(tmp_path, capsys):
    """The issue's case 3 (there critic_lr.init = 10 on a 4x4 grid, H = 10; here a smaller and
    faster instance that diverges the same way)."""
    out = tmp_path / "div"
    argv = [
        "train",
        "--set",
        "critic_lr.init=20",
        "--set",
        "env.size=3",
        "--set",
        "env.horizon=5",
        "--set",
        "num_iterations=60",
        "--set",
        "episodes_per_iteration=8",
        "--set",
        "run.chunk_size=20",
        "--seeds",
        "2",
        "--out",
        str(out),
        "--quiet",
        "--no-plots",
    ]
    assert main(argv) == 1
    line = one_line_error(capsys.readouterr().err)
    assert "training diverged" in line and "seed 0 at iteration" in line and "critic_lr.init = 20" in line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and "diverged" in summary["reason"]
    assert summary["divergence"]["seeds"] == [0, 1] and summary["stopped_at_iteration"] == 40
    assert summary["divergence"]["first_iteration"] <= 40
    assert not (out / "policy.npz").exists()
    # no checkpoint holds non-finite values
    assert checkpoint.latest_iteration(out / "checkpoints") in (None, 20)


def test_finite_seeds_keep_their_results(tmp_path, monkeypatch, capsys):
    """Seed 1's parameters are poisoned with NaN inside the compiled chunk: training stops,
    seed 0 is judged at the stop iteration, exit status 1."""
    original = runner.ChunkedTrainer._chunk_fn

    def poisoned(self, length, *args):
        fn = original(self, length, *args)

        def chunk(carry, *rest):
            def poison(x):
                if not jnp.issubdtype(x.dtype, jnp.floating):
                    return x
                mask = (jnp.arange(x.shape[0]) == 1).reshape((-1,) + (1,) * (x.ndim - 1))
                return jnp.where(mask, jnp.nan, x)

            return fn(carry.replace(state=jax.tree.map(poison, carry.state)), *rest)

        return chunk

    monkeypatch.setattr(runner.ChunkedTrainer, "_chunk_fn", poisoned)
    out = tmp_path / "partial"
    assert main(["train", *TINY, "--out", str(out), "--quiet", "--no-plots"]) == 1
    assert "seed 1 at iteration" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["finite_seeds"] == [0]
    assert [r["seed"] for r in summary["seeds"]] == [0] and np.isfinite(summary["seeds"][0]["exact_reward"])
    assert summary["diverged_seeds"][0]["seed"] == 1


@pytest.mark.slow
def test_python_api_reports_divergence():
    spec = config.load_spec(
        overrides=["critic_lr.init=20", "env.size=3", "env.horizon=5", "num_iterations=40", "episodes_per_iteration=8"]
    )
    env, params = spec.make_env()
    res = runner.train_seeds(fc, env, params, spec.learner, 2, chunk_size=20)
    assert res.divergence is not None and not res.complete
    assert res.divergence.seeds == (0, 1) and all(i <= 40 for i in res.divergence.iterations)
    assert res.state.iteration == res.divergence.detected_at == 40 and list(res.finite_seeds) == []
    assert not np.isfinite(np.asarray(res.state.carry.state.theta)).all()  # the final iterate diverged
    # the returned policy is the selection's (selection.Selection), a candidate from before the
    # divergence: finite, and flagged by res.divergence and res.complete above
    assert np.isfinite(res.policy).all()


# ----------------------------------------------------------------------------- interrupts


def test_interrupt_saves_the_last_chunk_and_resume_is_identical(good_run, tmp_path, monkeypatch, capsys):
    """Ctrl-C (KeyboardInterrupt) during the third chunk: exit 130 with the resume command, a
    checkpoint of the second chunk, and a resume that ends bit-identical to the good run."""
    original = runner.ChunkedTrainer.advance
    calls = {"n": 0}

    def advance(self, state):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(self, state)

    monkeypatch.setattr(runner.ChunkedTrainer, "advance", advance)
    out = tmp_path / "int"
    args = [a.replace("run.checkpoint_every=1", "run.checkpoint_every=4") for a in TINY]
    assert main(["train", *args, "--out", str(out), "--quiet", "--no-plots"]) == 130
    last = one_line_error(capsys.readouterr().err, "interrupted")
    assert last == f"fhc-jax train: interrupted at iteration 10; continue with: fhc-jax train --resume --out {out}"
    assert checkpoint.latest_iteration(out / "checkpoints") == 10  # saved on the way out
    monkeypatch.setattr(runner.ChunkedTrainer, "advance", original)
    assert main(["train", "--resume", "--out", str(out), "--quiet", "--no-plots"]) == 0
    assert (out / "metrics.csv").read_bytes() == (good_run / "metrics.csv").read_bytes()
    a, b = (json.loads((d / "summary.json").read_text())["seeds"] for d in (out, good_run))
    assert a == b


@pytest.mark.slow
def test_ctrl_c_exits_130_with_resume_hint_and_resume_completes(tmp_path):
    """Ctrl-C (SIGINT) in the middle of a run: exit 130, the resume command on the last line, and
    the resume finishes the run (bit-identity of resumes: tests/test_cli.py)."""
    out = tmp_path / "int"
    args = [
        "--set",
        "env.size=3",
        "--set",
        "env.horizon=4",
        "--set",
        "num_iterations=150",
        "--set",
        "episodes_per_iteration=8",
        "--set",
        "run.chunk_size=5",
        "--set",
        "run.checkpoint_every=2",
        "--seeds",
        "1",
    ]
    proc = subprocess.Popen(
        _cli() + ["train", *args, "--out", str(out), "--no-plots"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    deadline = time.time() + 120
    while time.time() < deadline and checkpoint.latest_iteration(out / "checkpoints") is None and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:  # finished before the signal arrived: nothing to check
        pytest.skip("the run finished before Ctrl-C")
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert "interrupted at iteration" in last and f"continue with: fhc-jax train --resume --out {out}" in last
    assert "Traceback" not in err
    interrupted_at = int(last.split("interrupted at iteration ")[1].split(";")[0])
    assert checkpoint.latest_iteration(out / "checkpoints") == interrupted_at  # the last chunk was saved
    assert main(["train", "--resume", "--out", str(out), "--quiet", "--no-plots"]) == 0
    assert json.loads((out / "summary.json").read_text())["complete"] is True


# ----------------------------------------------------------------------------- bad inputs


def test_bad_inputs_are_one_line_errors(good_run, tmp_path, capsys, monkeypatch):
    out = _copy(good_run, tmp_path)
    before = snapshot(out)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    not_utf8 = tmp_path / "latin1.toml"
    not_utf8.write_bytes("size = 3 # caf\xe9\n".encode("latin-1"))
    plot_copy = tmp_path / "plotcopy"
    shutil.copytree(good_run, plot_copy, ignore=shutil.ignore_patterns("checkpoints"))
    cases = [
        (["train", *TINY, "--out", "/proc/fhc-x"], 2, "--out /proc/fhc-x"),
        (["train", *TINY, "--out", str(a_file / "sub")], 2, "a_file/sub"),
        (["solve", "--size", "3", "--out", "/proc/fhc-x.json"], 2, "cannot write there"),
        (["solve", "--size", "3", "--out", str(tmp_path)], 2, "is a directory"),
        (["plot", str(a_file)], 2, "not a run directory"),
        (["plot", str(plot_copy), "--stages", "999"], 2, "--stages must lie in [0, 3]"),
        (["plot", str(plot_copy), "--stages", "a,b"], 2, "--stages expects comma-separated"),
        (["train", "--config", str(tmp_path), "--out", str(tmp_path / "n1")], 2, "is a directory"),
        (["train", "--config", str(not_utf8), "--out", str(tmp_path / "n2")], 2, "not UTF-8"),
        (["sweep", *TINY, "--grid", "trace=0.2,0.5", "--out", str(out)], 2, "pass --overwrite to replace it"),
        (["train", "--resume", "--out", str(tmp_path / "nothing")], 2, "is not a run directory"),
        (["train", *TINY, "--out", str(out)], 2, "already holds a run"),
        (["train", "--resume", "--set", "env.alpha=4.0", "--out", str(out)], 2, "env.alpha: 3.0 -> 4.0"),
    ]
    monkeypatch.setattr(fhc, "solve", lambda *a, **k: pytest.fail("solved before checking --out"))
    for argv, status, message in cases:
        assert main(argv) == status, argv
        line = one_line_error(capsys.readouterr().err)
        assert message in line, (argv, line)
    assert snapshot(out) == before
    # damaged files of a finished run, named by plot
    (plot_copy / "policy.npz").write_bytes((plot_copy / "policy.npz").read_bytes()[:100])
    assert main(["plot", str(plot_copy)]) == 2
    assert "policy.npz is damaged" in one_line_error(capsys.readouterr().err)
    text = (plot_copy / "metrics.csv").read_text().splitlines()
    text[3] = text[3].replace(",", ",garbage", 1)
    (plot_copy / "metrics.csv").write_text("\n".join(text) + "\n")
    assert main(["plot", str(plot_copy)]) == 2
    assert "metrics.csv, line 4" in one_line_error(capsys.readouterr().err)


@pytest.mark.slow
def test_infeasible_threshold_is_reported_before_training(tmp_path, capsys):
    """The issue's case 5: alpha = 0 on a 4x4 grid; training proceeds and the summary says so."""
    out = tmp_path / "inf"
    assert (
        main(
            [
                "train",
                "--set",
                "env.size=4",
                "--set",
                "env.horizon=5",
                "--set",
                "env.alpha=0",
                "--set",
                "num_iterations=10",
                "--set",
                "episodes_per_iteration=8",
                "--seeds",
                "1",
                "--out",
                str(out),
                "--quiet",
                "--no-plots",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "warning: infeasible constraints" in err and "minimum achievable expected total costs" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["feasibility"]["feasible"] is False and summary["feasibility"]["min_costs"][0] > 0
    assert summary["optimum"] is None and summary["aggregate"]["feasible_seeds"] == 0


def test_exact_layer_rejects_bad_inputs():
    env = fhc.GridWorld(3, 4)
    cmdp = env.to_cmdp(env.default_params)
    pol = np.full((4, 9, 9), 1 / 9, np.float32)
    cases = [
        (pol * 2, ValueError, r"policy\[h=0, s=0\] sums to 2"),
        (np.where(np.arange(9) == 4, -0.1, pol), ValueError, r"policy\[h=0, s=0, a=4\] = -0.1 is negative"),
        (np.where((np.arange(9) == 2)[None, :, None], np.nan, pol), ValueError, r"policy\[h=0, s=2, a=0\] = nan"),
        (pol[:3], ValueError, r"shape \(H, S, A\) = \(4, 9, 9\), found \(3, 9, 9\)"),
        (pol[None].repeat(2, 0), ValueError, "vmap evaluate"),
        ("uniform", TypeError, "array of real numbers"),
    ]
    for policy, error, message in cases:
        with pytest.raises(error, match=message):
            fhc.evaluate(cmdp, policy)
    with pytest.raises(TypeError, match="expected a fhc_jax.TabularCMDP as cmdp, found dict"):
        fhc.solve({})
    with pytest.raises(TypeError, match="expected a fhc_jax.TabularCMDP"):
        fhc.evaluate(None, pol)
    with pytest.raises(TypeError, match="max_iterations must be an integer"):
        fhc.solve(cmdp, max_iterations=2.5)
    with pytest.raises(ValueError, match="at least one state and one action, found S = 3 states and A = 0"):
        fhc.TabularCMDP(
            np.zeros((3, 0, 3)),
            np.zeros((2, 3, 0)),
            np.zeros((1, 2, 3, 0)),
            thresholds=[1.0],
            initial_distribution=np.ones(3) / 3,
        )
    with pytest.raises(TypeError, match="TabularCMDP.rewards: expected a numeric array, got dict"):
        fhc.TabularCMDP(
            np.eye(2)[None].repeat(2, 0), {}, np.zeros((1, 2, 2, 2)), thresholds=[1.0], initial_distribution=[1.0, 0.0]
        )
    # float16: a dtype-aware tolerance accepts what rounding gives, and names the dtype otherwise
    rng = np.random.default_rng(0)
    p16 = rng.dirichlet(np.ones(4), (4, 2)).astype(np.float16)
    assert abs(p16.astype(np.float64).sum(-1) - 1).max() > 1e-6  # the 0.9997-like rows
    small = fhc.TabularCMDP(
        p16,
        np.zeros((3, 4, 2), np.float16),
        np.zeros((1, 3, 4, 2), np.float16),
        thresholds=np.ones(1, np.float16),
        initial_distribution=np.full(4, 0.25, np.float16),
    )
    assert fhc.solve(small).reward == 0.0
    with pytest.raises(ValueError, match="tolerance .* for float16 data"):
        fhc.TabularCMDP(
            p16 * np.float16(1.1),
            np.zeros((3, 4, 2)),
            np.zeros((1, 3, 4, 2)),
            thresholds=[1.0],
            initial_distribution=np.full(4, 0.25),
        )
