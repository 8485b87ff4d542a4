"""The processes of one run over several processes agree on their configuration before they
train (issue "trust at every scale", case L): different settings, seeds or mode flags end every
process with one line naming the differing setting (exit status 2), a validation error on one
process ends the others naming it, and a coordinator port in use or a duplicate process id is
one line too. The multi-process runs are in the slow tier."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fhc_jax import cli
from fhc_jax.experiment import distributed

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--set",
    "env.size=3",
    "--set",
    "env.horizon=4",
    "--set",
    "num_iterations=10",
    "--set",
    "episodes_per_iteration=8",
    "--set",
    "run.chunk_size=5",
    "--set",
    "env.alpha=3.0",
    "--no-plots",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("FHC_JAX_DISTRIBUTED_WORKER", None)
    env["XLA_FLAGS"] = ""
    return env


def test_configuration_difference_names_the_settings():
    a = {"command": "fhc-jax train", "--resume": True, "env.alpha": 3.0, "run.seeds": 4}
    b = {"command": "fhc-jax train", "--resume": False, "env.alpha": 4.0, "run.seeds": 4}
    assert distributed.configuration_difference(a, b, 1) == (
        "--resume: True (process 0) vs False (process 1); env.alpha: 3.0 (process 0) vs 4.0 (process 1)"
    )
    many = {f"k{i}": i for i in range(5)}
    assert distributed.configuration_difference(many, {}, 2).endswith("; and 2 more")
    distributed.agree_configuration({"x": 1})  # one process: nothing to agree on
    with pytest.raises(KeyError):
        distributed.agree_configuration({"x": 1}, KeyError("mine"))


def test_a_duplicate_process_id_is_named():
    """Two processes with --process-id 1: JAX's runtime said '1 unexpectedly tried to connect with
    a different incarnation. It has likely restarted.'"""
    log = (
        "F1128 04:52:40.000000 1 client.h:80] " + distributed.FATAL + ". absl::Status: ABORTED: 1 unexpectedly "
        "tried to connect with a different incarnation. It has likely restarted.\n"
    )
    assert distributed.runtime_verdict(log, 0, 2) == (
        "two processes were started with --process-id 1 (or process 1 was started again while the run started); "
        "give every process its own --process-id"
    )


@pytest.mark.slow
def test_a_coordinator_port_in_use_is_a_usage_error(tmp_path, capfd):
    """Was a raw JaxRuntimeError (or a crash of the runtime): one line before the runtime starts."""
    out = tmp_path / "never"
    with socket.socket() as held:
        held.bind(("localhost", 0))
        held.listen()
        port = held.getsockname()[1]
        code = cli.main(
            [
                "train",
                *TINY,
                "--out",
                str(out),
                "--coordinator",
                f"localhost:{port}",
                "--num-processes",
                "2",
                "--process-id",
                "0",
            ]
        )
    assert code == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [
        (
            f"fhc-jax train: error: --coordinator localhost:{port}: port {port} is in use on this host (by "
            "another program, or by process 0 of another run, or a second process was given --process-id 0), "
            "so process 0 cannot serve JAX's coordination service there; choose a free port, the same in "
            "every process, and give each process its own --process-id"
        )
    ]
    assert not out.exists()


def _launch(argvs: list[list[str]], init_timeout: int = 60) -> list[tuple[int, list[str]]]:
    """Processes ``fhc-jax ARGV + --coordinator ... --process-id I`` on localhost (one per argv,
    ids from ``--pid`` entries or their order); (exit status, stderr lines) of each."""
    port = _free_port()
    procs = []
    for i, argv in enumerate(argvs):
        pid = argv[argv.index("--pid") + 1] if "--pid" in argv else str(i)
        argv = [a for j, a in enumerate(argv) if a != "--pid" and (j == 0 or argv[j - 1] != "--pid")]
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fhc_jax.cli",
                    *argv,
                    "--coordinator",
                    f"localhost:{port}",
                    "--num-processes",
                    str(min(len(argvs), 2)),
                    "--process-id",
                    pid,
                    "--init-timeout",
                    str(init_timeout),
                ],
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for p in procs:
        _, err = p.communicate(timeout=600)
        results.append((p.returncode, [line for line in err.strip().splitlines() if line]))
    return results


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra, named",
    [
        ([["--set", "env.alpha=3.0"], ["--set", "env.alpha=4.0"]], "env.alpha: 3.0 (process 0) vs 4.0 (process 1)"),
        ([["--seeds", "4"], ["--seeds", "2"]], "run.seeds: 4 (process 0) vs 2 (process 1)"),
        ([["--set", "num_iterations=10"], ["--set", "num_iterations=15"]], "num_iterations: 10 (process 0) vs 15"),
    ],
)
def test_processes_started_with_different_settings_all_stop_naming_the_setting(tmp_path, extra, named):
    """Both exited 0 with one alpha in the summary while a seed trained with the other, or
    aborted inside gloo (exit 134, a raw C++ message)."""
    out = tmp_path / "run"
    results = _launch([["train", *TINY, "--out", str(out), *e] for e in extra])
    for code, err in results:
        assert code == 2 and len(err) == 1, err
        assert (
            err[0].startswith(
                "fhc-jax train: error: process 1 of 2 was started with another configuration than process 0: "
            )
            and named in err[0]
        )
        assert err[0].endswith("start every process with the same command (only --process-id differs)")
    assert not (out / "metrics.csv").exists()


@pytest.mark.slow
def test_resume_on_one_process_and_overwrite_on_the_other_are_refused(tmp_path):
    out = tmp_path / "run"
    code, _ = _launch([["train", *TINY, "--out", str(out), "--max-chunks", "1"]] * 2)[0]
    assert code == 0
    results = _launch(
        [["train", "--resume", "--out", str(out), "--no-plots"], ["train", *TINY, "--out", str(out), "--overwrite"]]
    )
    for code, err in results:
        assert code == 2 and len(err) == 1, err
        assert "--overwrite: False (process 0) vs True (process 1); --resume: True (process 0) vs False" in err[0]
    assert (out / "config.json").is_file()  # nothing overwritten


@pytest.mark.slow
def test_a_bad_setting_on_one_process_ends_the_other_naming_it(tmp_path):
    out = tmp_path / "run"
    (code0, err0), (code1, err1) = _launch(
        [["train", *TINY, "--out", str(out)], ["train", *TINY, "--out", str(out), "--set", "bogus=1"]]
    )
    assert code1 == 2 and len(err1) == 1 and err1[0].startswith("fhc-jax train: error: unknown key 'bogus'")
    assert code0 == 1 and len(err0) == 1
    assert err0[0].startswith("fhc-jax train: error: process 1 of 2 failed: ConfigError: unknown key 'bogus'")


@pytest.mark.slow
def test_sweeps_on_different_grids_are_refused(tmp_path):
    out = tmp_path / "sweep"
    tiny = TINY[:-1]  # sweeps draw no plots
    results = _launch(
        [
            ["sweep", *tiny, "--out", str(out), "--grid", "trace=0.2,0.5"],
            ["sweep", *tiny, "--out", str(out), "--grid", "trace=0.2,0.6"],
        ]
    )
    for code, err in results:
        assert code == 2 and len(err) == 1 and "--grid.trace: [0.2, 0.5] (process 0) vs [0.2, 0.6]" in err[0], err


@pytest.mark.slow
def test_two_processes_with_one_id_are_named(tmp_path):
    """A duplicate --process-id 1 next to process 0: every process ends with one line."""
    out = tmp_path / "run"
    results = _launch(
        [
            ["train", *TINY, "--out", str(out)],
            ["train", *TINY, "--out", str(out), "--pid", "1"],
            ["train", *TINY, "--out", str(out), "--pid", "1"],
        ],
        init_timeout=20,
    )
    lines = [err[-1] for _, err in results]
    assert all(code != 0 for code, _ in results) and all(len(err) == 1 for _, err in results), results
    assert any("two processes were started with --process-id 1" in line for line in lines), lines
