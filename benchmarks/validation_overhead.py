"""What the boundary checks cost (docs/RELIABILITY.md, "The API boundary"): ``rollout_returns``
at K = 4096 on the default gridworld, called as users call it, and a default FH-Constrained
training run's time per iteration, each with the package before and after the checks.

Usage::

    git archive <commit before the checks> fhc_jax | tar -x -C /tmp/before
    python benchmarks/validation_overhead.py --before /tmp/before --after . \\
        --out benchmarks/results/validation_overhead.json

Both package copies are loaded into ONE process (the first is imported, its programs compiled,
then the module is unloaded and the second imported and compiled; a compiled program keeps
running after its module is gone), and the calls of the two alternate, so that both run under
the same load on a shared machine: separate processes differed by more than the checks cost.
``--processes`` such processes, the loading order alternating; each reports the median time
per case and copy (wall clock, and the process's CPU time, which the load of other processes
disturbs less), and the report gives the median over processes.

``rollout_returns`` runs as ``jax.jit(lambda k: fhc.rollout_returns(k, env, params, policy,
4096))`` with a fresh key each call (fresh outputs), compile excluded. Policies: the uniform
policy, a ``softmax_policy`` of the observation (tabulated on the gridworld, K >= 2 S), the same
with its weights an argument of the jitted function (its table, and the table's check, computed
at run time instead of folded into a constant), a ``table_policy``, and a policy of your own
drawing with ``jax.random.categorical`` (the one whose actions are checked at every step); on
the battery (not tabular) a ``softmax_policy`` called at every step (the path of the learners
that roll out through ``fhc_jax.rollout``). FH-Constrained: its default ``Config`` with
``num_iterations`` reduced to ``--iterations`` (it rolls out through its own tabular rollout),
the median of its runs divided by the iterations, compile excluded.

Each case also records whether the two copies compile to the same program (the optimised HLO
with source locations and numbering removed): where they do, the checks cost nothing at run
time, whatever the timings say.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

K = 4096


def _load(path: str):
    """Import the fhc_jax package found under ``path`` (unloading any other copy first)."""
    for name in [n for n in sys.modules if n == "fhc_jax" or n.startswith("fhc_jax.")]:
        del sys.modules[name]
    sys.path.insert(0, os.path.abspath(path))
    try:
        import fhc_jax
    finally:
        sys.path.pop(0)
    return fhc_jax


def _program_digest(compiled) -> str:
    """A digest of a compiled program's optimised HLO with source locations and instruction
    numbering removed: equal digests mean the same program."""
    import hashlib
    import re

    lines = [line for line in compiled.as_text().splitlines() if "=" in line and not re.match(r"^\s*\d+ ", line)]
    text = re.sub(r",? ?(metadata|stack_frame_id|frontend_attributes)=(\{[^}]*\}|\d+)", "", "\n".join(lines))
    text = re.sub(r"(region|\bwide)_\d+", r"\1", re.sub(r"\.\d+", "", text))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cases(fhc, iterations: int) -> dict[str, tuple]:
    """name -> (compiled program, arguments of call i, divisor) for one package copy."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from_copy = fhc.__file__
    env = fhc.GridWorld()
    params = env.default_params
    rng = np.random.default_rng(0)
    weights = jnp.asarray(rng.normal(size=(env.horizon, 2, 9)), jnp.float32)
    table = rng.dirichlet(np.ones(9), size=(env.horizon, env.num_states)).astype(np.float32)
    own_logits = jnp.asarray(rng.normal(size=9), jnp.float32)
    battery = fhc.BatteryStorage()
    battery_w = jnp.asarray(rng.normal(size=(3, battery.num_actions)), jnp.float32)
    by_key = {
        "gridworld_uniform": (env, params, fhc.uniform_random_policy(9)),
        "gridworld_softmax_tabulated": (env, params, fhc.softmax_policy(lambda obs, h: obs @ weights[h])),
        "gridworld_table_policy": (env, params, fhc.table_policy(table, env)),
        "gridworld_own_categorical": (env, params, lambda key, obs, h: jax.random.categorical(key, own_logits)),
        "battery_softmax_per_step": (
            battery,
            battery.default_params,
            fhc.softmax_policy(lambda obs, h: obs @ battery_w),
        ),
    }
    key0 = jax.random.key(0)
    cases = {}
    for name, (e, p, policy) in by_key.items():
        run = jax.jit(lambda k, e=e, p=p, policy=policy: fhc.rollout_returns(k, e, p, policy, K))
        cases[name] = (run.lower(key0).compile(), lambda i: (jax.random.key(i),), 1)
    traced = jax.jit(lambda k, w: fhc.rollout_returns(k, env, params, fhc.softmax_policy(lambda o, h: o @ w[h]), K))
    cases["gridworld_softmax_tabulated_traced_weights"] = (
        traced.lower(key0, weights).compile(),
        lambda i: (jax.random.key(i), weights + i),
        1,
    )
    from fhc_jax.algos import fh_constrained as fc

    assert fc.__file__.startswith(os.path.dirname(from_copy))
    config = dataclasses.replace(fc.Config(), num_iterations=iterations)
    train = jax.jit(fc.make_train(env, params, config)).lower(key0).compile()
    cases["fh_constrained_per_iteration"] = (train, lambda i: (jax.random.key(i),), iterations)
    return cases


def _worker(before: str, after: str, order: str, calls: int, train_calls: int, iterations: int) -> dict:
    import jax

    copies = {}
    for which in ("before", "after") if order == "before" else ("after", "before"):
        copies[which] = _cases(_load(before if which == "before" else after), iterations)
    out = {}
    for name in copies["before"]:
        n = train_calls if name.startswith("fh_") else calls
        times = {"before": [], "after": []}
        cpu = {"before": [], "after": []}
        for which in ("before", "after"):  # one call each to warm up
            program, args_of, _ = copies[which][name]
            jax.block_until_ready(program(*args_of(10_000)))
        for i in range(n):
            for which in ("before", "after") if i % 2 == 0 else ("after", "before"):
                program, args_of, divisor = copies[which][name]
                args = args_of(i)
                c0, t0 = time.process_time(), time.perf_counter()
                jax.block_until_ready(program(*args))
                times[which].append((time.perf_counter() - t0) / divisor)
                cpu[which].append((time.process_time() - c0) / divisor)
        out[name] = {which: float(np.median(times[which])) for which in times}
        out[name].update({f"{which}_cpu": float(np.median(cpu[which])) for which in cpu})
        out[name]["same_compiled_program"] = _program_digest(copies["before"][name][0]) == _program_digest(
            copies["after"][name][0]
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--before", required=True, help="package copy without the checks (a directory holding fhc_jax/)"
    )
    parser.add_argument("--after", default=".", help="package copy with the checks")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100, help="calls of each rollout case and copy per process")
    parser.add_argument("--train-calls", type=int, default=5, help="training runs per copy and process")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--out", default="benchmarks/results/validation_overhead.json")
    parser.add_argument("--worker", choices=("before", "after"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.before, args.after, args.worker, args.calls, args.train_calls, args.iterations)))
        return
    # imported here, not at the top: a worker imports no jax before the package copies
    from timing import source_revision

    # the revision of the --after checkout (the code whose checks are measured), read first
    source = source_revision(Path(args.after).resolve())
    per_process = []
    for p in range(args.processes):
        order = "before" if p % 2 == 0 else "after"
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--before",
                args.before,
                "--after",
                args.after,
                "--worker",
                order,
                "--calls",
                str(args.calls),
                "--train-calls",
                str(args.train_calls),
                "--iterations",
                str(args.iterations),
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": ""},
        )
        per_process.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(
            f"process {p} ({order} loaded first): "
            + ", ".join(
                f"{k} {v['before_cpu'] * 1e3:.3f} -> {v['after_cpu'] * 1e3:.3f} ms CPU"
                for k, v in per_process[-1].items()
            ),
            flush=True,
        )
    table = {}
    for name in per_process[0]:
        med = {
            key: float(np.median([r[name][key] for r in per_process]))
            for key in ("before", "after", "before_cpu", "after_cpu")
        }
        table[name] = {
            "before_ms": med["before"] * 1e3,
            "after_ms": med["after"] * 1e3,
            "overhead_percent": 100 * (med["after"] / med["before"] - 1),
            "before_cpu_ms": med["before_cpu"] * 1e3,
            "after_cpu_ms": med["after_cpu"] * 1e3,
            "cpu_overhead_percent": 100 * (med["after_cpu"] / med["before_cpu"] - 1),
            "same_compiled_program": all(r[name]["same_compiled_program"] for r in per_process),
            "per_process_ms": [[r[name]["before"] * 1e3, r[name]["after"] * 1e3] for r in per_process],
            "per_process_cpu_ms": [[r[name]["before_cpu"] * 1e3, r[name]["after_cpu"] * 1e3] for r in per_process],
        }
        print(
            f"{name}: wall {med['before'] * 1e3:.3f} -> {med['after'] * 1e3:.3f} ms "
            f"({table[name]['overhead_percent']:+.1f}%), CPU {med['before_cpu'] * 1e3:.3f} -> "
            f"{med['after_cpu'] * 1e3:.3f} ms ({table[name]['cpu_overhead_percent']:+.1f}%)"
            f"{', the same compiled program' if table[name]['same_compiled_program'] else ''}"
        )
    result = {
        "command": "python " + " ".join([os.path.relpath(__file__), *sys.argv[1:]]),
        **source,
        "what": "median over processes of each process's median time per call (wall clock, and CPU time of the "
        "process, which another process's load disturbs less), the two package copies loaded into "
        "one process and called alternately; rollout_returns at K = 4096 per call (jax.jit(lambda k: "
        "fhc.rollout_returns(k, env, params, policy, 4096)), fresh key each call, compile excluded); "
        "FH-Constrained default Config per iteration (compile excluded)",
        "K": K,
        "processes": args.processes,
        "calls": args.calls,
        "train_calls": args.train_calls,
        "train_iterations": args.iterations,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared)",
        "hardware_line": f"{platform.machine()} CPU, {os.cpu_count()} cores (shared)",
        "jax": version("jax"),
        "results": table,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
