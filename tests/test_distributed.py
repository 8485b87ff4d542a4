"""Runs over several processes (``jax.distributed``): the cluster options, the runtime's
verdicts turned into one line, and (slow tier) 2 local CPU processes bit-identical to one
process with as many devices, and a killed process that stops the other with a resumable run."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import TINY_RUN

from fhc_jax import cli
from fhc_jax.experiment import distributed, rundir
from fhc_jax.experiment.typed_settings import ConfigError

TINY = TINY_RUN
ROOT = Path(__file__).resolve().parents[1]

# What JAX's runtime (jaxlib 0.10) wrote on stderr when it ended a process, recorded from real
# runs of 2 local processes (stack traces cut): a peer killed, the coordinator killed, a peer
# never started.
_LOGS = Path(__file__).resolve().parent / "data" / "jax_runtime"
PEER_DIED = (_LOGS / "peer_died.log").read_text()
COORDINATOR_DIED = (_LOGS / "coordinator_died.log").read_text()
NEVER_JOINED = (_LOGS / "never_joined.log").read_text()


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(coordinator="localhost"), "--coordinator must be HOST:PORT with a port in [1, 65535], found 'localhost'"),
        (dict(coordinator="localhost:0"), "--coordinator must be HOST:PORT"),
        (dict(coordinator=":1234"), "--coordinator must be HOST:PORT"),
        (dict(num_processes=0), "--num-processes must be an integer >= 1, found 0"),
        (dict(num_processes=2, process_id=2), "--process-id must lie in [0, 1] (N = --num-processes), found 2"),
        (dict(process_id=-1), "--process-id must lie in [0, N - 1]"),
        (dict(init_timeout_s=0), "--init-timeout must be an integer >= 1 (seconds), found 0"),
        (dict(heartbeat_timeout_s=-5), "--heartbeat-timeout must be an integer >= 1 (seconds), found -5"),
    ],
)
def test_cluster_refuses_out_of_range_fields(fields, message):
    with pytest.raises(ConfigError) as err:
        distributed.Cluster(**fields).check()
    assert message in str(err.value)


def test_cluster_flags_join_the_same_run_again():
    c = distributed.Cluster("node1:1234", 4, 2, heartbeat_timeout_s=10).check()
    assert c.flags() == [
        "--coordinator",
        "node1:1234",
        "--num-processes",
        "4",
        "--process-id",
        "2",
        "--heartbeat-timeout",
        "10",
    ]
    assert distributed.Cluster().flags() == ["--distributed"]  # everything from the scheduler's environment
    args = cli.build_parser().parse_args(["train", "--out", "x", *c.flags()])
    assert cli._cluster(args) == c
    assert cli._cluster(cli.build_parser().parse_args(["train", "--out", "x"])) is None
    assert cli._wants_cluster(["train", "--num-processes=2"]) and cli._wants_cluster(["sweep", "--distributed"])
    assert not cli._wants_cluster(["train", "--out", "--coordinator-notes"])


def test_runtime_verdict_names_the_lost_process():
    assert distributed.runtime_verdict(PEER_DIED, 0, 2) == "process 1 of 2 stopped sending heartbeats (died or hung)"
    assert distributed.runtime_verdict(COORDINATOR_DIED, 1, 2) == "process 0 of 2 (the coordinator) is gone"
    assert distributed.runtime_verdict(NEVER_JOINED, 0, 2, 60) == "process 1 of 2 did not join within 60 s"
    assert (
        distributed.runtime_verdict(NEVER_JOINED, 1, 2, 60)
        == "process 0 of 2 (the coordinator) did not join within 60 s"
    )
    assert distributed.runtime_verdict(NEVER_JOINED, 3, 8, 60) == "not every process of 8 joined within 60 s"
    unknown = "F1127 12:00:00.000000 1 client.h:80] " + distributed.FATAL + ". absl::Status: INTERNAL: something else\n"
    assert (
        distributed.runtime_verdict(unknown, 0, 2)
        == "JAX's distributed runtime stopped this process: INTERNAL: something else"
    )
    assert distributed.runtime_verdict("Traceback (most recent call last):\nValueError: x\n", 0, 2) is None
    # the supervisor holds back exactly the runtime's records
    records = [line for line in PEER_DIED.splitlines() if line.startswith(("E1", "F1"))]
    assert len(records) == 3 and all(cli._runtime_error(line.encode()) for line in records)
    assert not cli._runtime_error(b"fh-constrained on gridworld 5/20 [#####...............]  25%")
    # XLA's compile-time alarms pass through
    assert not cli._runtime_error(
        b"E1127 13:26:42.471812   30924 slow_operation_alarm.cc:73] Constant folding an instruction is taking > 1s:"
    )


def test_fault_line_names_the_process_and_the_resume_command(tmp_path):
    out = tmp_path / "run"
    argv = [
        "train",
        "--seeds",
        "4",
        "--out",
        str(out),
        "--coordinator",
        "localhost:1234",
        "--num-processes",
        "2",
        "--process-id",
        "0",
    ]
    line = cli._fault_line(argv, NEVER_JOINED)  # nothing written yet: start it again
    assert line.startswith("fhc-jax train: error: process 1 of 2 did not join within 300 s; the run did not start")
    assert line.endswith("fhc-jax " + " ".join(argv)) and "\n" not in line
    (out / rundir.CHECKPOINTS / "10").mkdir(parents=True)
    (out / rundir.CONFIG).write_text("{}")
    (out / rundir.CHECKPOINTS / "10" / "fhc_manifest.json").write_text("{}")
    (out / rundir.CHECKPOINTS / "15").mkdir()  # an unfinished save: no manifest
    line = cli._fault_line(argv, PEER_DIED)
    assert line == (
        f"fhc-jax train: error: process 1 of 2 stopped sending heartbeats (died or hung); the run stopped "
        f"(the last checkpoint (iteration 10) is intact); continue it on every process (each with its own "
        f"--process-id): fhc-jax train --resume --out {out} --coordinator localhost:1234 --num-processes 2 "
        "--process-id 0"
    )
    sweep = ["sweep", "--grid", "trace=0.2,0.5", "--out", str(out), "--distributed"]
    assert cli._fault_line(sweep, COORDINATOR_DIED) == (
        "fhc-jax sweep: error: process 0 (the coordinator) is gone; the sweep stopped; start it again on every "
        f"process: fhc-jax sweep --grid trace=0.2,0.5 --out {out} --distributed --overwrite"
    )
    assert cli._fault_line(argv, "E1127 unrelated\n") is None


def test_agree_and_share_in_one_process():
    distributed.agree()
    assert distributed.share(7) == 7
    with pytest.raises(KeyError):
        distributed.agree(KeyError("mine"))
    with pytest.raises(OSError):
        distributed.share(3, OSError("disk full"))


@pytest.mark.slow
def test_bad_cluster_option_is_a_usage_error(tmp_path, capfd):
    """The option is checked in the worker before JAX's runtime starts: exit 2, one line."""
    out = tmp_path / "never"
    assert cli.main(["train", *TINY, "--out", str(out), "--num-processes", "2", "--process-id", "5"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err == ["fhc-jax train: error: --process-id must lie in [0, 1] (N = --num-processes), found 5"]
    assert not out.exists()


# ----------------------------------------------------------------------------- several processes (slow)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _env(devices: int = 1) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("FHC_JAX_DISTRIBUTED_WORKER", None)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}" if devices > 1 else ""
    return env


def _launch(n: int, args: list[str], tmp: Path, tag: str) -> list[subprocess.Popen]:
    """n processes of ``fhc-jax ARGS`` joined on localhost (the command line the docs give)."""
    port = _free_port()
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fhc_jax.cli",
                *args,
                "--coordinator",
                f"localhost:{port}",
                "--num-processes",
                str(n),
                "--process-id",
                str(i),
            ],
            env=_env(),
            stdout=(tmp / f"{tag}.{i}.out").open("w"),
            stderr=(tmp / f"{tag}.{i}.err").open("w"),
        )
        for i in range(n)
    ]


def _finish(procs: list[subprocess.Popen], tmp: Path, tag: str, timeout: float = 900) -> None:
    for i, p in enumerate(procs):
        assert p.wait(timeout=timeout) == 0, (tmp / f"{tag}.{i}.err").read_text()[-3000:]


def _one_process(args: list[str], devices: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fhc_jax.cli", *args], env=_env(devices), capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _summary(path: Path) -> dict:
    """summary.json without what depends on the machine and the clock, nor the values of the
    in-training evaluations each seed's ``returned`` repeats (float32, they agree to rounding
    across device counts: metrics.csv's exact columns are compared with a tolerance)."""
    s = json.loads(path.read_text())
    for key in ("machine", "timing"):
        s.pop(key, None)
    if s.get("optimum"):
        s["optimum"].pop("solve_time_s", None)
    for row in s.get("seeds", []):
        for key in ("reward", "costs", "last_reward", "last_costs"):
            row.get("returned", {}).pop(key, None)
    return s


def _csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_two_processes_are_bit_identical_to_one(tmp_path):
    """2 local CPU processes (1 device each) train the same runs as one process with 2 devices,
    bit for bit (metrics.csv, summary.json, policy.npz); against one process with 1 device the
    training, the policies and the judgement are identical, and the in-training exact
    evaluations (float32, vectorised over a different number of runs per device) agree to
    float32 rounding. Process 1 writes nothing but what it shares."""
    args = ["train", "--seeds", "4", *TINY, "--no-plots"]
    procs = _launch(2, args + ["--out", str(tmp_path / "two")], tmp_path, "two")
    _finish(procs, tmp_path, "two")
    _one_process(args + ["--out", str(tmp_path / "mesh2"), "--quiet"], devices=2)
    _one_process(args + ["--out", str(tmp_path / "one"), "--quiet"], devices=1)
    two, mesh2, one = (tmp_path / d for d in ("two", "mesh2", "one"))
    assert (two / "metrics.csv").read_bytes() == (mesh2 / "metrics.csv").read_bytes()
    assert _summary(two / "summary.json") == _summary(mesh2 / "summary.json") == _summary(one / "summary.json")
    for other in (mesh2, one):
        a, b = np.load(two / "policy.npz"), np.load(other / "policy.npz")
        assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    rows_two, rows_one = _csv(two / "metrics.csv"), _csv(one / "metrics.csv")
    exact = {c for c in rows_two[0] if c.startswith("exact_")}
    assert [{k: v for k, v in r.items() if k not in exact} for r in rows_two] == [
        {k: v for k, v in r.items() if k not in exact} for r in rows_one
    ]
    for c in exact:
        x = np.array([float(r[c]) if r[c] else np.nan for r in rows_two])
        y = np.array([float(r[c]) if r[c] else np.nan for r in rows_one])
        np.testing.assert_allclose(x, y, rtol=1e-6, equal_nan=True)
    assert json.loads((two / "summary.json").read_text())["machine"]["device"]["process_count"] == 2
    assert (tmp_path / "two.1.out").read_text() == "" and (tmp_path / "two.1.err").read_text() == ""
    assert (tmp_path / "two.0.out").read_text().strip().endswith(f"wrote {two}")


@pytest.mark.slow
def test_killed_process_stops_the_other_and_the_run_resumes(tmp_path):
    """Process 1 is killed mid-run: process 0 exits non-zero within 60 s with one line naming
    process 1 and the resume command; the last checkpoint is intact and ``--resume`` with 2
    processes completes the run, bit-identical to one uninterrupted process with 2 devices."""
    out = tmp_path / "run"
    args = [
        "train",
        "--seeds",
        "4",
        *TINY,
        "--set",
        "num_iterations=200",
        "--set",
        "run.checkpoint_every=1",
        "--no-plots",
        "--heartbeat-timeout",
        "10",
    ]
    procs = _launch(2, args + ["--out", str(out)], tmp_path, "kill")
    deadline = time.monotonic() + 600
    while checkpoint_steps(out) == [] and time.monotonic() < deadline and procs[0].poll() is None:
        time.sleep(0.2)
    assert checkpoint_steps(out), (tmp_path / "kill.0.err").read_text()[-3000:]
    procs[1].send_signal(signal.SIGKILL)  # its worker dies with it
    killed = time.monotonic()
    code = procs[0].wait(timeout=120)
    assert code != 0 and time.monotonic() - killed < 60
    last = (tmp_path / "kill.0.err").read_text().strip().splitlines()[-1]
    assert last.startswith("fhc-jax train: error: process 1 of 2 stopped sending heartbeats"), last
    assert f"fhc-jax train --resume --out {out} --coordinator localhost:" in last and "--process-id 0" in last
    stopped = max(checkpoint_steps(out))
    assert f"the last checkpoint (iteration {stopped}) is intact" in last and stopped < 200
    resume = ["train", "--resume", "--out", str(out), "--heartbeat-timeout", "10"]
    _finish(_launch(2, resume, tmp_path, "resume"), tmp_path, "resume")
    assert f"resuming from iteration {stopped} of 200" in (tmp_path / "resume.0.err").read_text()
    assert json.loads((out / "summary.json").read_text())["complete"]
    _one_process(args[:-2] + ["--out", str(tmp_path / "mesh2"), "--quiet"], devices=2)
    assert (out / "metrics.csv").read_bytes() == (tmp_path / "mesh2" / "metrics.csv").read_bytes()
    a, b = np.load(out / "policy.npz"), np.load(tmp_path / "mesh2" / "policy.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a)


def checkpoint_steps(out: Path) -> list[int]:
    """Iterations of the complete checkpoints (with a manifest) in a run directory."""
    ckpt = out / rundir.CHECKPOINTS
    if not ckpt.is_dir():
        return []
    return [int(p.name) for p in ckpt.iterdir() if p.name.isdigit() and (p / "fhc_manifest.json").is_file()]


@pytest.mark.slow
def test_a_process_that_never_joins_stops_the_other(tmp_path):
    """Process 1 is never started: process 0 exits 1 after the startup timeout with one line,
    and writes nothing."""
    out = tmp_path / "run"
    argv = [
        "train",
        *TINY,
        "--out",
        str(out),
        "--coordinator",
        f"localhost:{_free_port()}",
        "--num-processes",
        "2",
        "--process-id",
        "0",
        "--init-timeout",
        "5",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "fhc_jax.cli", *argv], env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "fhc-jax train: error: process 1 of 2 did not join within 5 s; the run did not start; start it again on "
        "every process (each with its own --process-id): fhc-jax " + " ".join(argv)
    ]
    assert not out.exists()


@pytest.mark.slow
def test_a_run_resumes_with_another_number_of_processes(tmp_path):
    """A checkpoint holds every run whole: a run begun by one process with 2 devices continues
    in 2 processes, bit-identical to the uninterrupted one-process run."""
    out, whole = tmp_path / "run", tmp_path / "whole"
    args = ["train", "--seeds", "4", *TINY, "--no-plots", "--quiet"]
    _one_process(args + ["--out", str(out), "--max-chunks", "2"], devices=2)
    _finish(_launch(2, ["train", "--resume", "--out", str(out), "--no-plots"], tmp_path, "resume"), tmp_path, "resume")
    assert "resuming from iteration 10 of 20" in (tmp_path / "resume.0.err").read_text()
    _one_process(args + ["--out", str(whole)], devices=2)
    assert (out / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()
    assert _summary(out / "summary.json") == _summary(whole / "summary.json")
    a, b = np.load(out / "policy.npz"), np.load(whole / "policy.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a)
