"""Cost of experiment tracking: ``fhc-jax train`` with ``--logger none`` vs ``tensorboard`` vs
``wandb`` (offline).

FH-Constrained on the default gridworld (10x10, H = 100) with its default Config and run
settings (5 seeds, chunk_size = eval_every = 100, a checkpoint every 4 chunks), by default its
full 2,500 updates (``--iterations`` shortens it, keeping the chunk size). Each mode trains
``--repeats`` times in this process through :func:`fhc_jax.experiment.training.train_run`
(after one unmeasured warm-up run), the modes interleaved in rotating order so that a drifting
machine load falls on all of them alike. Measured per run:

* ``total_s``: the whole ``train_run`` call (compilation, chunks, metrics.csv, checkpoints,
  the final judgement, and for the loggers the wait for the tracking thread to finish);
* ``compile_s``: compilation (the same programs in every mode);
* ``run_s`` = total - compile: what tracking may slow down; the overhead is
  median(run_s of a logger) / median(run_s of none) - 1 (target: below 2%);
* ``train_s``: the compiled chunks alone;
* ``tracking_cpu_s``: CPU seconds of the tracking thread (``Trackers.cpu_s``) plus, for W&B,
  of its service process (``wandb-core``, with psutil), and ``caller_s``, the seconds the
  training thread spent handing chunks over (``Trackers.caller_s``): the cost of tracking
  measured directly, which a loaded machine's noise in ``run_s`` can hide or exaggerate.

Compilations go through a persistent compilation cache in a temporary folder, so every run
after the warm-up compiles in about a second (compile time is excluded anyway).

W&B runs offline (``WANDB_MODE=offline`` is set here), so no network is involved. metrics.csv
must be identical in every mode (tracking never changes results). Writes
benchmarks/results/tracking_overhead.json.

    python benchmarks/tracking_overhead.py [--repeats 3] [--iterations N] [--plots]

The default is the full default run (2,500 updates x 5 seeds); on a 2-core CPU one run takes a
few minutes, so ``--iterations 1000`` (10 chunks of the default size) is the quicker choice.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ["WANDB_MODE"] = "offline"  # never upload from a benchmark
os.environ.setdefault("WANDB_SILENT", "true")

import jax  # noqa: E402
from timing import provenance  # noqa: E402

from fhc_jax.experiment import rundir, tracking, training  # noqa: E402
from fhc_jax.experiment.config import load_spec  # noqa: E402
from fhc_jax.experiment.rundir import load_average, machine_info  # noqa: E402

MODES = ("none", "tensorboard", "wandb")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=None, help="updates (default: the Config's, 2500)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds (default: run.seeds, 5)")
    ap.add_argument("--plots", action="store_true", help="also draw the figures (and log them as images)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "tracking_overhead.json"))
    args = ap.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured

    overrides = [] if args.iterations is None else [f"num_iterations={args.iterations}"]
    spec = load_spec("fh-constrained", overrides=overrides, seeds=args.seeds)
    root = Path(tempfile.mkdtemp(prefix="fhc-tracking-"))
    jax.config.update("jax_compilation_cache_dir", str(root / "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    load_start = load_average()
    csvs: dict[str, str] = {}
    opened: list[tracking.Trackers] = []

    class Recorded(tracking.Trackers):  # keeps the instance: its cpu_s / caller_s
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            opened.append(self)

    tracking.Trackers = Recorded  # train_run looks it up at call time

    def children_cpu() -> float:
        try:
            import psutil
        except ImportError:
            return float("nan")
        total = 0.0
        for child in psutil.Process().children(recursive=True):
            try:
                t = child.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def run(mode: str, name: str) -> dict[str, float]:
        out = root / name
        opened.clear()
        child0 = children_cpu()
        t0 = time.perf_counter()
        result = training.train_run(
            spec, out, quiet=True, plots=args.plots, stream=io.StringIO(), loggers=None if mode == "none" else [mode]
        )
        total = time.perf_counter() - t0
        service = children_cpu() - child0 if mode == "wandb" else 0.0
        assert result["complete"], result
        text = (out / rundir.METRICS).read_text()
        if csvs.setdefault("reference", text) != text:
            raise AssertionError(f"metrics.csv of mode {mode} differs: tracking changed the results")
        t = result["timing"]
        shutil.rmtree(out)
        tr = opened[0]
        return {
            "total_s": total,
            "compile_s": t["compile_s"],
            "run_s": total - t["compile_s"],
            "train_s": t["train_s"],
            "tracking_cpu_s": tr.cpu_s + max(service, 0.0),
            "thread_cpu_s": tr.cpu_s,
            "service_cpu_s": service,
            "caller_s": tr.caller_s,
        }

    try:
        warm = run("none", "warmup")
        times: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        for r in range(args.repeats):
            order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
            for mode in order:
                times[mode].append(run(mode, f"{mode}_{r}"))
                print(
                    f"  repeat {r} {mode:<12} run {times[mode][-1]['run_s']:.2f} s "
                    f"(compile {times[mode][-1]['compile_s']:.2f} s)",
                    flush=True,
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    keys = ("total_s", "compile_s", "run_s", "train_s", "tracking_cpu_s", "caller_s")
    med = {m: {k: float(np.median([t[k] for t in times[m]])) for k in keys} for m in MODES}
    base = med["none"]["run_s"]
    steps = spec.learner.episodes_per_iteration * spec.make_env()[0].horizon * spec.num_iterations * spec.seeds
    mc = machine_info()
    print(
        f"FH-Constrained, default gridworld, {spec.num_iterations} updates x K={spec.learner.episodes_per_iteration} "
        f"x {spec.seeds} seeds, chunk_size={spec.chunk_size}, plots={'on' if args.plots else 'off'}, "
        f"median of {args.repeats}; {mc['cpu']['model']}, {mc['cpu']['usable_cores']} usable cores"
    )
    print(
        "| logger | run (total - compile) [s] | train (chunks) [s] | env-steps/s | overhead vs none (wall) | "
        "tracking CPU [s] (% of run) | training thread waits [ms] |"
    )
    print("|---|---|---|---|---|---|---|")
    results = []
    for m in MODES:
        over = med[m]["run_s"] / base - 1
        cpu = med[m]["tracking_cpu_s"]
        print(
            f"| {m} | {med[m]['run_s']:.2f} | {med[m]['train_s']:.2f} | {steps / med[m]['train_s'] / 1e6:.2f}M | "
            f"{100 * over:+.1f}% | {cpu:.2f} ({100 * cpu / base:.1f}%) | {1e3 * med[m]['caller_s']:.1f} |"
        )
        results.append(
            {
                "logger": m,
                **{f"median_{k}": v for k, v in med[m].items()},
                "runs": times[m],
                "overhead_vs_none": over,
                "tracking_cpu_fraction_of_run": cpu / base,
                "env_steps_per_s": steps / med[m]["train_s"],
            }
        )
    payload = {
        "benchmark": "tracking_overhead",
        "algo": spec.algo,
        "env": spec.env_name,
        "iterations": spec.num_iterations,
        "seeds": spec.seeds,
        "chunk_size": spec.chunk_size,
        "episodes_per_iteration": spec.learner.episodes_per_iteration,
        "plots": args.plots,
        "repeats": args.repeats,
        "warmup": warm,
        "results": results,
        "metrics_csv_identical_across_loggers": True,
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "machine": mc,
        **source,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    rundir.write_json_atomic(Path(args.out), payload)
    print(f"load average {load_start} -> {payload['load_average_end']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
