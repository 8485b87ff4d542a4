"""Runs over several processes (``jax.distributed``): the cost of the distributed path at one
process, and 2 and 4 local CPU processes against one.

**Overhead at one process.** ``fhc-jax train --seeds 5`` on the default gridworld (FH-Constrained,
its default Config and run settings, plots included) as a subprocess, with and without
``--coordinator localhost:PORT --num-processes 1 --process-id 0`` (which starts JAX's
coordination service, the gloo collectives and the supervising process), ``--repeats`` times
each, interleaved; the wall time of each command is measured from outside. The overhead is
median(distributed) / median(plain) - 1 (target: at most 2%), of the wall time and of the CPU
time (user + system, of the command and its children): on a machine shared with other work the
wall time measures how the scheduler shares the cores as much as the work done, so the CPU time
is the direct measure. metrics.csv, policy.npz and summary.json must be the same in both modes.

**Processes.** A small run (gridworld 3x3, H = 4, 40 updates of K = 8 episodes, 4 seeds, chunks
of 5) by 1, 2 and 4 local processes on localhost (1 CPU device each), and by one process with 2
and 4 host devices (``--xla_force_host_platform_device_count``): the same mesh in one process.
Recorded per layout: the wall time (the slowest process, from outside), and whether
metrics.csv, policy.npz and summary.json (apart from timings and the machine record) are
bit-identical to the one-process run with the same number of devices and to the one-process,
one-device run (``exact_max_rel_diff``: the largest relative difference of the in-training exact
evaluations, which XLA vectorises over a different number of runs per device). On a machine with
fewer cores than processes the wall times measure the sharing of the cores, not a speed-up.

Writes benchmarks/results/distributed.json.

    python benchmarks/distributed.py [--repeats 3] [--skip-overhead] [--skip-processes]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from timing import provenance  # noqa: E402

from fhc_jax.experiment.rundir import load_average, machine_info  # noqa: E402

SMALL = [
    "--set",
    "env.size=3",
    "--set",
    "env.horizon=4",
    "--set",
    "num_iterations=40",
    "--set",
    "episodes_per_iteration=8",
    "--set",
    "run.chunk_size=5",
    "--set",
    "env.alpha=3.0",
    "--seeds",
    "4",
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _env(devices: int = 1) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}" if devices > 1 else ""
    return env


def _run(commands: list[list[str]], env: dict[str, str]) -> float:
    """Start the commands together; the wall seconds until the last one ends (each must exit 0)."""
    return _run_timed(commands, env)[0]


def _run_timed(commands: list[list[str]], env: dict[str, str]) -> tuple[float, float]:
    """:func:`_run`, and the CPU seconds (user + system) of the commands and their children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "fhc_jax.cli", *c],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for c in commands
    ]
    errors = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - t0
    for p, err in zip(procs, errors):
        if p.returncode != 0:
            raise SystemExit(f"a command failed ({p.returncode}): {err[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _cluster(n: int, i: int, port: int) -> list[str]:
    return ["--coordinator", f"localhost:{port}", "--num-processes", str(n), "--process-id", str(i)]


def _summary(path: Path) -> dict:
    s = json.loads((path / "summary.json").read_text())
    for key in ("machine", "timing"):
        s.pop(key, None)
    if s.get("optimum"):
        s["optimum"].pop("solve_time_s", None)
    return s


def _same(a: Path, b: Path) -> dict[str, bool]:
    pa, pb = np.load(a / "policy.npz"), np.load(b / "policy.npz")
    return {
        "metrics_csv": (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes(),
        "policy_npz": set(pa) == set(pb) and all(np.array_equal(pa[k], pb[k]) for k in pa),
        "summary_json": _summary(a) == _summary(b),
    }


def _exact_rel_diff(a: Path, b: Path) -> float:
    """Largest relative difference of the exact_* columns of two metrics.csv files."""

    def columns(path: Path) -> dict[str, np.ndarray]:
        with (path / "metrics.csv").open() as f:
            rows = list(csv.DictReader(f))
        return {c: np.array([float(r[c]) if r[c] else np.nan for r in rows]) for c in rows[0] if c.startswith("exact_")}

    ca, cb = columns(a), columns(b)
    return float(max(np.nanmax(np.abs(ca[c] - cb[c]) / np.maximum(np.abs(cb[c]), 1e-30)) for c in ca))


def _training_identical(a: Path, b: Path) -> bool:
    """metrics.csv equal in every column but the exact evaluations."""

    def rows(path: Path) -> list[dict]:
        with (path / "metrics.csv").open() as f:
            return [{k: v for k, v in r.items() if not k.startswith("exact_")} for r in csv.DictReader(f)]

    return rows(a) == rows(b)


def overhead(root: Path, repeats: int) -> dict:
    times: dict[str, list[float]] = {"plain": [], "distributed": []}
    cpu: dict[str, list[float]] = {"plain": [], "distributed": []}
    for r in range(repeats):
        for mode in ("plain", "distributed") if r % 2 == 0 else ("distributed", "plain"):
            out = root / f"{mode}_{r}"
            cmd = ["train", "--seeds", "5", "--out", str(out)]
            if mode == "distributed":
                cmd += _cluster(1, 0, _port())
            wall, seconds = _run_timed([cmd], _env())
            times[mode].append(wall)
            cpu[mode].append(seconds)
            print(f"overhead: {mode} run {r}: {wall:.1f} s wall, {seconds:.1f} s CPU", flush=True)
    same = _same(root / "plain_0", root / "distributed_0")
    median = {m: float(np.median(t)) for m, t in times.items()}
    median_cpu = {m: float(np.median(t)) for m, t in cpu.items()}
    return {
        "command": "fhc-jax train --seeds 5 --out DIR [--coordinator localhost:PORT --num-processes 1 --process-id 0]",
        "repeats": repeats,
        "wall_s": times,
        "median_wall_s": median,
        "overhead": median["distributed"] / median["plain"] - 1,
        "cpu_s": cpu,
        "median_cpu_s": median_cpu,
        "cpu_overhead": median_cpu["distributed"] / median_cpu["plain"] - 1,
        "identical_results": same,
    }


def processes(root: Path) -> list[dict]:
    rows = []
    walls: dict[str, float] = {}
    for devices in (1, 2, 4):  # one process, 1, 2, 4 devices
        out = root / f"one_process_{devices}_devices"
        walls[out.name] = _run([["train", *SMALL, "--out", str(out), "--no-plots"]], _env(devices))
        print(f"processes: {out.name}: {walls[out.name]:.1f} s", flush=True)
    base = root / "one_process_1_devices"
    rows.append({"layout": "1 process, 1 device", "processes": 1, "devices": 1, "wall_s": walls[base.name]})
    for devices in (2, 4):
        out = root / f"one_process_{devices}_devices"
        rows.append(
            {
                "layout": f"1 process, {devices} devices",
                "processes": 1,
                "devices": devices,
                "wall_s": walls[out.name],
                "identical_to_one_device": _same(out, base),
                "training_identical_to_one_device": _training_identical(out, base),
                "exact_max_rel_diff_vs_one_device": _exact_rel_diff(out, base),
            }
        )
    for n in (2, 4):
        out, port = root / f"{n}_processes", _port()
        wall = _run(
            [["train", *SMALL, "--out", str(out), "--no-plots", *_cluster(n, i, port)] for i in range(n)], _env()
        )
        print(f"processes: {n} processes: {wall:.1f} s", flush=True)
        rows.append(
            {
                "layout": f"{n} processes, 1 device each",
                "processes": n,
                "devices": n,
                "wall_s": wall,
                "identical_to_one_process_same_devices": _same(out, root / f"one_process_{n}_devices"),
                "identical_to_one_device": _same(out, base),
                "training_identical_to_one_device": _training_identical(out, base),
                "exact_max_rel_diff_vs_one_device": _exact_rel_diff(out, base),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-processes", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "distributed.json"))
    args = ap.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured
    root = Path(tempfile.mkdtemp(prefix="fhc-distributed-"))
    previous = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
    load_start = load_average()
    try:
        result = {**source, "machine": machine_info(), "load_average_start": load_start}
        result["overhead_one_process"] = (
            previous.get("overhead_one_process") if args.skip_overhead else overhead(root, args.repeats)
        )
        result["small_run"] = "gridworld 3x3, H = 4, 40 updates x K = 8 episodes x 4 seeds, chunks of 5"
        result["processes"] = previous.get("processes") if args.skip_processes else processes(root)
        result["load_average_end"] = load_average()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
