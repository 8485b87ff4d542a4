"""Exact solvers: `solve` (Lagrangian dual + backward induction) versus the occupancy LP
(HiGHS) on small gridworlds, `solve` alone on 10x10, 20x20 and 50x50 grids with H = 100, and
`evaluate` on the default gridworld.

    python benchmarks/solver.py [--quick] [--repeats N] [--large-lp]

Prints a table and writes benchmarks/results/solver.json. First call (compilation included)
and the median of the following runs are reported separately.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from timing import provenance

import fhc_jax as fhc
from fhc_jax.experiment.rundir import machine_info, write_json_atomic

RESULTS = Path(__file__).resolve().parent / "results" / "solver.json"


def timed(fn, repeats: int):
    """(first-call seconds, median of `repeats` further calls, last result). JAX's caches are
    cleared first, so the first call compiles as in a fresh process (the thresholds'
    unconstrained solve would otherwise have compiled the same shapes)."""
    jax.clear_caches()
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - t0
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        runs.append(time.perf_counter() - t0)
    return first, statistics.median(runs), out


def gridworld_cmdp(size: int, horizon: int, alpha: float | None = None) -> fhc.TabularCMDP:
    env = fhc.GridWorld(size=size, horizon=horizon)
    cmdp = env.to_cmdp(env.default_params)
    if alpha is None:  # scale the threshold so it binds at every size: 1/4 of the unconstrained cost
        alpha = 0.25 * float(fhc.solve_unconstrained(cmdp).costs[0])
    return cmdp.replace(thresholds=np.array([alpha]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller instances, 1 repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--large-lp", action="store_true", help="also run the LP on the default 10x10, H=100 grid (about 5 minutes)"
    )
    args = parser.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured
    repeats = 1 if args.quick else args.repeats
    rows = []

    print(f"machine: {machine_info()}")
    print(
        f"{'case':<34}{'S':>6}{'H':>5}{'first [s]':>11}{'median [s]':>12}"
        f"{'reward':>12}{'cost':>10}{'nu':>9}{'calls':>7}"
    )

    def report(case, cmdp, first, median, sol=None, extra=None):
        row = {
            "case": case,
            "num_states": cmdp.num_states,
            "horizon": cmdp.horizon,
            "first_call_s": first,
            "median_s": median,
            "repeats": repeats,
        }
        if sol is not None:
            row.update(
                reward=sol.reward,
                costs=sol.costs.tolist(),
                multipliers=sol.multipliers.tolist(),
                oracle_calls=sol.oracle_calls,
            )
            print(
                f"{case:<34}{cmdp.num_states:>6}{cmdp.horizon:>5}{first:>11.3f}{median:>12.4f}"
                f"{sol.reward:>12.5f}{sol.costs[0]:>10.4f}{sol.multipliers[0]:>9.4f}{sol.oracle_calls:>7}"
            )
        else:
            print(f"{case:<34}{cmdp.num_states:>6}{cmdp.horizon:>5}{first:>11.3f}{median:>12.4f}")
        row.update(extra or {})
        rows.append(row)

    # 1. dual versus LP on small instances (the LP is the cross-check, not the workhorse)
    small = [(4, 20), (6, 30)] if args.quick else [(4, 20), (6, 30), (8, 50)]
    small += [(10, 100)] if args.large_lp else []
    for size, horizon in small:
        cmdp = gridworld_cmdp(size, horizon)
        f_d, m_d, dual = timed(lambda cmdp=cmdp: fhc.solve(cmdp), repeats)
        report(f"dual {size}x{size}", cmdp, f_d, m_d, dual)
        f_l, m_l, lp = timed(lambda cmdp=cmdp: fhc.solve(cmdp, method="lp"), max(1, repeats // 3))
        rel = abs(dual.reward - lp.reward) / abs(lp.reward)
        report(
            f"lp   {size}x{size} (rel. diff {rel:.1e})",
            cmdp,
            f_l,
            m_l,
            lp,
            {"relative_reward_difference_to_dual": rel, "speedup_of_dual": m_l / m_d},
        )

    # 2. the dual solver alone at H = 100, growing grids (the paper's alpha = 25 on 10x10)
    for size in [10, 20] if args.quick else [10, 20, 50]:
        cmdp = gridworld_cmdp(size, 100, alpha=25.0 if size == 10 else None)
        f, m, sol = timed(lambda cmdp=cmdp: fhc.solve(cmdp), repeats)
        report(f"dual {size}x{size} H=100", cmdp, f, m, sol)

    # 3. exact evaluation of one policy on the default gridworld (float32 and float64)
    cmdp = gridworld_cmdp(10, 100, alpha=25.0)
    uniform = jnp.full((100, 100, 9), 1.0 / 9)
    f, m, _ = timed(lambda: fhc.evaluate(cmdp, uniform), max(repeats, 5))
    report("evaluate 10x10 H=100 float32", cmdp, f, m)
    with jax.enable_x64(True):
        c64, u64 = cmdp.astype(jnp.float64), uniform.astype(jnp.float64)
        f, m, _ = timed(lambda: fhc.evaluate(c64, u64), max(repeats, 5))
    report("evaluate 10x10 H=100 float64", cmdp, f, m)

    write_json_atomic(RESULTS, {**source, "machine": machine_info(), "quick": args.quick, "rows": rows})
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
