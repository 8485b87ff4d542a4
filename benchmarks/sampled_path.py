"""The general (sampled) path against the tabular fast path on the default gridworld.

Every learner with both paths trains on ``GridWorld()`` twice with its default ``Config``
(``--iterations`` updates, one seed): ``path="tabular"`` (rollouts from the exact model's
tables, networks tabulated over the (stage, state) table) and ``path="sampled"`` (episodes
through ``fhc_jax.rollout``, networks applied to every recorded observation: what an
environment without a tabular model gets). Whole runs in one jit, compile timed apart, median
of ``--repeats`` runs with ``jax.block_until_ready``; the ratio is sampled / tabular run time
(issue 12's target for NN-Constrained: <= 2x).

Usage::

    python benchmarks/sampled_path.py [--iterations 100] [--repeats 5] [--learners nn-constrained,...]

Results: ``benchmarks/results/sampled_path.json`` (``--out``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from judge import machine_info
from timing import compile_and_time, provenance

import fhc_jax as fhc
from fhc_jax.algos import cpo, ecop, nn_constrained, ppo_lagrangian
from fhc_jax.experiment.rundir import write_json_atomic

LEARNERS = {"nn-constrained": nn_constrained, "e-cop": ecop, "ppo-lag": ppo_lagrangian, "cpo": cpo}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--learners", default=",".join(LEARNERS))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sampled_path.json"))
    args = parser.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured
    names = args.learners.split(",")
    unknown = [n for n in names if n not in LEARNERS]
    if unknown:
        parser.error(f"--learners: unknown {unknown}; choose from {list(LEARNERS)}")

    env = fhc.GridWorld()
    params = env.default_params
    result: dict = {
        "benchmark": "sampled_path",
        "env": repr(env),
        "iterations": args.iterations,
        "repeats": args.repeats,
        "machine": machine_info(),
        **source,
        "rows": {},
    }
    print(
        f"{'learner':15s} {'K':>5s} {'tabular run':>12s} {'sampled run':>12s} {'ratio':>6s} "
        f"{'compile (tab / samp)':>21s}"
    )
    for name in names:
        module = LEARNERS[name]
        row = {}
        for path in ("tabular", "sampled"):
            cfg = module.Config(num_iterations=args.iterations, eval_every=0, path=path)
            compile_s, run_s = compile_and_time(module.make_train(env, params, cfg), args.repeats)
            row[path] = {
                "compile_s": compile_s,
                "run_s": run_s,
                "env_steps_per_s": args.iterations * cfg.episodes_per_iteration * env.horizon / run_s,
            }
            row["episodes_per_iteration"] = cfg.episodes_per_iteration
        row["ratio"] = row["sampled"]["run_s"] / row["tabular"]["run_s"]
        result["rows"][name] = row
        print(
            f"{name:15s} {row['episodes_per_iteration']:5d} {row['tabular']['run_s']:11.3f}s "
            f"{row['sampled']['run_s']:11.3f}s {row['ratio']:5.2f}x "
            f"{row['tabular']['compile_s']:9.1f}s / {row['sampled']['compile_s']:.1f}s",
            flush=True,
        )
        write_json_atomic(args.out, result)  # after every learner: a run cut short keeps what it measured
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
