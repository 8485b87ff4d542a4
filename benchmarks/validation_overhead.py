"""What the boundary checks cost (docs/RELIABILITY.md, "API boundary"): ``rollout_returns`` at
K = 4096 on the default gridworld, called as users call it, and a default FH-Constrained
training run's time per iteration, each measured with the package before and after the checks.

Usage::

    git archive <commit before the checks> | tar -x -C /tmp/before
    python benchmarks/validation_overhead.py --before /tmp/before --after . \\
        --out benchmarks/results/validation_overhead.json

Each measurement runs in its own process with ``PYTHONPATH`` set to the package copy under
test; the two copies alternate for ``--rounds`` rounds (the machine's load changes over time:
alternating puts both under the same conditions), and the report gives the median over rounds
of each round's median. ``rollout_returns`` is called as
``jax.jit(lambda k: fhc.rollout_returns(k, env, params, policy, 4096))`` with a fresh key each
call (fresh outputs), ``--calls`` calls after one compiling call. Policies: the uniform policy,
a ``softmax_policy`` of the observation (tabulated on the gridworld, K >= 2 S), a
``table_policy``, and a policy of your own drawing with ``jax.random.categorical`` (the one
whose actions are checked at every step); on the battery (not tabular) a ``softmax_policy``
called at every step. FH-Constrained: its default ``Config`` with ``num_iterations`` reduced
to ``--iterations`` (the learner's own tabular rollout; the checks are not on its path), the
median of ``--train-runs`` compiled runs divided by the iterations.

Timings on a shared machine are noisy, so each case also records whether the two copies
compile to the same program (the optimised HLO with source locations and numbering removed):
where they do, the checks cost nothing at run time whatever the timings say.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

K = 4096


def _program_digest(compiled) -> str:
    """A digest of a compiled program's optimised HLO with source locations and instruction
    numbering removed: equal digests mean the same program, whatever the timings say."""
    import hashlib
    import re

    lines = [line for line in compiled.as_text().splitlines() if "=" in line and not re.match(r"^\s*\d+ ", line)]
    text = re.sub(r",? ?(metadata|stack_frame_id|frontend_attributes)=(\{[^}]*\}|\d+)", "", "\n".join(lines))
    text = re.sub(r"(region|\bwide)_\d+", r"\1", re.sub(r"\.\d+", "", text))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _time_calls(run, args_of, calls: int) -> float:
    import jax

    jax.block_until_ready(run(*args_of(10_000)))
    times = []
    for i in range(calls):
        args = args_of(i)
        t0 = time.perf_counter()
        jax.block_until_ready(run(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _worker_rollout(calls: int) -> dict[str, float]:
    import jax
    import jax.numpy as jnp

    import fhc_jax as fhc

    env = fhc.GridWorld()
    params = env.default_params
    rng = np.random.default_rng(0)
    weights = jnp.asarray(rng.normal(size=(env.horizon, 2, 9)), jnp.float32)
    logits_fn = lambda obs, h: obs @ weights[h]
    table = rng.dirichlet(np.ones(9), size=(env.horizon, env.num_states)).astype(np.float32)
    own_logits = jnp.asarray(rng.normal(size=9), jnp.float32)
    battery = fhc.BatteryStorage()
    battery_w = jnp.asarray(rng.normal(size=(3, battery.num_actions)), jnp.float32)
    cases = {
        "gridworld_uniform": (env, params, fhc.uniform_random_policy(9)),
        "gridworld_softmax_tabulated": (env, params, fhc.softmax_policy(logits_fn)),
        "gridworld_table_policy": (env, params, fhc.table_policy(table, env)),
        "gridworld_own_categorical": (env, params, lambda key, obs, h: jax.random.categorical(key, own_logits)),
        "battery_softmax_per_step": (battery, battery.default_params,
                                     fhc.softmax_policy(lambda obs, h: obs @ battery_w)),
    }
    out = {}
    for name, (e, p, policy) in cases.items():
        run = jax.jit(lambda k, e=e, p=p, policy=policy: fhc.rollout_returns(k, e, p, policy, K))
        out[name] = _time_calls(run, lambda i: (jax.random.key(i),), calls)
        out[name + "/program"] = _program_digest(run.lower(jax.random.key(0)).compile())
    # the softmax policy's weights as an argument: its table (and the table's check) is computed
    # at run time instead of being folded into a constant
    traced = jax.jit(lambda k, w: fhc.rollout_returns(k, env, params, fhc.softmax_policy(lambda o, h: o @ w[h]), K))
    name = "gridworld_softmax_tabulated_traced_weights"
    out[name] = _time_calls(traced, lambda i: (jax.random.key(i), weights + i), calls)
    out[name + "/program"] = _program_digest(traced.lower(jax.random.key(0), weights).compile())
    return out


def _worker_train(iterations: int, runs: int) -> dict[str, float]:
    import dataclasses

    import jax

    import fhc_jax as fhc
    from fhc_jax.algos import fh_constrained as fc

    env = fhc.GridWorld()
    params = env.default_params
    config = dataclasses.replace(fc.Config(), num_iterations=iterations)
    compiled = jax.jit(fc.make_train(env, params, config)).lower(jax.random.key(0)).compile()
    times = []
    for r in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(jax.random.key(r)))
        times.append(time.perf_counter() - t0)
    return {"fh_constrained_per_iteration": float(np.median(times)) / iterations,
            "fh_constrained_per_iteration/program": _program_digest(compiled)}


def _run(path: str, args: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(path)}
    done = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="package copy without the checks (a directory holding fhc_jax/)")
    parser.add_argument("--after", default=".", help="package copy with the checks")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--train-runs", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/validation_overhead.json")
    parser.add_argument("--worker", choices=("rollout", "train"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "rollout":
        print(json.dumps(_worker_rollout(args.calls)))
        return
    if args.worker == "train":
        print(json.dumps(_worker_train(args.iterations, args.train_runs)))
        return
    if not args.before:
        parser.error("--before is required")
    rounds: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for r in range(args.rounds):
        for which in (("before", "after") if r % 2 == 0 else ("after", "before")):
            path = args.before if which == "before" else args.after
            got = {**_run(path, ["--worker", "rollout", "--calls", str(args.calls)]),
                   **_run(path, ["--worker", "train", "--iterations", str(args.iterations),
                                 "--train-runs", str(args.train_runs)])}
            for name, value in got.items():
                rounds[which].setdefault(name, []).append(value)
            print(f"round {r} {which}: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in got.items()
                                                     if not k.endswith("/program")), flush=True)
    table = {}
    for name in rounds["before"]:
        if name.endswith("/program"):
            continue
        before, after = float(np.median(rounds["before"][name])), float(np.median(rounds["after"][name]))
        same = set(rounds["before"][name + "/program"]) == set(rounds["after"][name + "/program"])
        table[name] = {"before_ms": before * 1e3, "after_ms": after * 1e3, "overhead_percent": 100 * (after / before - 1),
                       "same_compiled_program": same,
                       "rounds_before_ms": [x * 1e3 for x in rounds["before"][name]],
                       "rounds_after_ms": [x * 1e3 for x in rounds["after"][name]]}
        print(f"{name}: before {before * 1e3:.3f} ms, after {after * 1e3:.3f} ms, "
              f"{table[name]['overhead_percent']:+.1f}%{' (the same compiled program)' if same else ''}")
    result = {
        "command": "python " + " ".join([os.path.relpath(__file__), *sys.argv[1:]]),
        "what": "median over rounds of each round's median time; rollout_returns at K = 4096 per call "
                "(jax.jit(lambda k: fhc.rollout_returns(k, env, params, policy, 4096)), fresh key each call, "
                "compile excluded); FH-Constrained default Config per iteration (compile excluded)",
        "K": K, "rounds": args.rounds, "calls": args.calls, "train_iterations": args.iterations,
        "train_runs": args.train_runs, "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared)",
        "results": table,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
