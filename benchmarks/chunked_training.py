"""Chunked training (fhc_jax.experiment) vs one monolithic jit (make_train).

FH-Constrained on the default gridworld with the default Config (10x10, H = 100; by default
its own number of updates and K). Three ways of running the same updates for R seeds:

* monolithic: ``jax.jit(jax.vmap(make_train(...)))(keys)``, one lax.scan, no host contact;
* chunked: ``ChunkedTrainer`` with chunk_size = eval_every = 100, a progress line
  and a metrics.csv rewrite after every chunk (what ``fhc-jax train`` does);
* chunked + checkpoints: the same plus an orbax checkpoint after every chunk.

Compile time is measured apart (AOT ``lower().compile()``); run times are medians of
``--repeats`` runs. Target: chunked < 5% slower than monolithic. Writes
benchmarks/results/chunked_training.json.

    python benchmarks/chunked_training.py [--repeats 5] [--seeds 1] [--iterations N]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from timing import provenance

import fhc_jax as fhc
from fhc_jax.algos import fh_constrained as fc
from fhc_jax.experiment import checkpoint, metrics_file, rundir
from fhc_jax.experiment.config import RUN_DEFAULTS
from fhc_jax.experiment.progress import Progress
from fhc_jax.experiment.rundir import machine_info
from fhc_jax.experiment.runner import ChunkedTrainer, seed_keys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=None, help="updates (default: the Config's)")
    ap.add_argument("--chunk-size", type=int, default=100)
    ap.add_argument(
        "--checkpoint-every",
        type=int,
        default=RUN_DEFAULTS["checkpoint_every"],
        help="chunks between checkpoints of the default-checkpointing mode (default: fhc-jax train's)",
    )
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "chunked_training.json"))
    args = ap.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured

    env = fhc.GridWorld()
    params = env.default_params
    if args.iterations is None:
        args.iterations = fhc.algos.resolve_env_defaults(fc.Config(), True).num_iterations  # GridWorld: tabular
    cfg = fc.Config(num_iterations=args.iterations)
    keys = seed_keys(0, args.seeds)
    steps = args.iterations * cfg.episodes_per_iteration * env.horizon * args.seeds

    # --- monolithic
    t0 = time.perf_counter()
    mono = jax.jit(jax.vmap(fc.make_train(env, params, cfg))).lower(keys).compile()
    mono_compile = time.perf_counter() - t0
    mono_times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(mono(keys))
        mono_times.append(time.perf_counter() - t0)

    # --- chunked (progress + metrics.csv), with and without checkpoints
    learner = fc.make_learner(env, params, cfg)
    trainer = ChunkedTrainer(learner, args.seeds, args.chunk_size)
    thresholds = np.asarray(params.thresholds)

    def run_chunked(ckpt_dir: Path | None, every: int = 1) -> tuple[float, object]:
        sink = io.StringIO()
        progress = Progress(
            "bench", args.iterations, args.seeds, cfg.episodes_per_iteration * env.horizon, thresholds, sink
        )
        tmp = Path(tempfile.mkdtemp())

        def on_chunk(st):
            progress(st)
            rundir.write_bytes_atomic(
                tmp / "metrics.csv",
                metrics_file.metrics_csv(
                    st.metrics, st.exact_iterations, st.exact_reward, st.exact_costs, st.iteration
                ).encode(),
            )
            if ckpt_dir is not None and (
                st.iteration // args.chunk_size % every == 0 or st.iteration == args.iterations
            ):
                checkpoint.save(ckpt_dir, trainer, st)

        t0 = time.perf_counter()
        st = trainer.run(trainer.init(keys), on_chunk=on_chunk)
        jax.block_until_ready(st.carry)
        return time.perf_counter() - t0, st

    run_chunked(None)  # compiles init + chunk programs
    chunk_compile = trainer.compile_s
    chunk_times, ckpt_times, default_times = [], [], []
    for _ in range(args.repeats):
        t, st = run_chunked(None)
        chunk_times.append(t)
        t, _ = run_chunked(Path(tempfile.mkdtemp()) / "ckpt")
        ckpt_times.append(t)
        t, _ = run_chunked(Path(tempfile.mkdtemp()) / "ckpt", args.checkpoint_every)
        default_times.append(t)
    same = bool(np.array_equal(np.asarray(out.state.theta), trainer.host_carry(st.carry).state.theta))

    rows = [
        ("monolithic make_train", mono_compile, mono_times),
        ("chunked + progress + metrics.csv", chunk_compile, chunk_times),
        ("chunked + checkpoint every chunk", chunk_compile, ckpt_times),
        (
            f"chunked + checkpoint every {args.checkpoint_every} chunks (fhc-jax train default)",
            chunk_compile,
            default_times,
        ),
    ]
    base = float(np.median(mono_times))
    print(
        f"FH-Constrained, default gridworld, {args.iterations} updates x K={cfg.episodes_per_iteration}, "
        f"{args.seeds} seed(s), chunk_size={args.chunk_size}, {args.repeats} repeats, {jax.devices()[0].device_kind}"
    )
    print("| mode | compile [s] | run median [s] | min [s] | env-steps/s | vs monolithic |")
    print("|---|---|---|---|---|---|")
    results = []
    for name, comp, times in rows:
        med = float(np.median(times))
        print(
            f"| {name} | {comp:.2f} | {med:.3f} | {min(times):.3f} | {steps / med / 1e6:.2f}M | "
            f"{100 * (med / base - 1):+.1f}% |"
        )
        results.append(
            {
                "mode": name,
                "compile_s": comp,
                "run_median_s": med,
                "run_times_s": times,
                "env_steps_per_s": steps / med,
                "slowdown_vs_monolithic": med / base - 1,
            }
        )
    print(f"final parameters identical to the monolithic run: {same}")
    payload = {
        "benchmark": "chunked_training",
        "iterations": args.iterations,
        "seeds": args.seeds,
        "chunk_size": args.chunk_size,
        "episodes_per_iteration": cfg.episodes_per_iteration,
        "repeats": args.repeats,
        "results": results,
        "bit_identical_to_monolithic": same,
        "machine": machine_info(),
        **source,
    }
    rundir.write_json_atomic(Path(args.out), payload)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
