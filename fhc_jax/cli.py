"""The ``fhc-jax`` command line.

``fhc-jax solve``: exact unconstrained and constrained optima of the paper's gridworld.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np


def _write_json_atomic(path: Path, payload: dict) -> None:
    """Write JSON through a temporary file and an atomic rename: an interrupted or failed
    write never leaves a truncated file, and an existing file is replaced only on success."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _solution_dict(sol) -> dict:
    return {
        "reward": float(sol.reward),
        "costs": [float(c) for c in sol.costs],
        "multipliers": [float(m) for m in sol.multipliers],
        "method": sol.method,
        "oracle_calls": int(sol.oracle_calls),
        "solve_time_s": float(sol.solve_time),
    }


def _cmd_solve(args: argparse.Namespace) -> int:
    import jax

    import fhc_jax as fhc

    try:  # validation before any compilation
        env = fhc.GridWorld(size=args.size, horizon=args.horizon, alpha=args.alpha,
                            layout_seed=args.layout_seed, slip=args.slip)
    except ValueError as err:
        print(f"fhc-jax solve: error: {err}", file=sys.stderr)
        return 2
    cmdp = env.to_cmdp(env.default_params)
    unconstrained = fhc.solve_unconstrained(cmdp)
    try:
        constrained = fhc.solve(cmdp, method=args.method)
    except fhc.InfeasibleConstraintError as err:
        print(f"fhc-jax solve: {err}", file=sys.stderr)
        return 1
    alpha = np.asarray(cmdp.thresholds, dtype=np.float64)
    gap = 1.0 - constrained.reward / unconstrained.reward if unconstrained.reward else 0.0
    print(f"{env!r}: S={cmdp.num_states}, A={cmdp.num_actions}, H={cmdp.horizon}, "
          f"alpha={alpha.tolist()}, layout_seed={args.layout_seed}")
    print(f"{'optimum':<14}{'reward':>10}{'cost':>22}{'multiplier':>22}{'solve [s]':>11}")
    for name, sol in (("unconstrained", unconstrained), (f"constrained", constrained)):
        print(f"{name:<14}{sol.reward:>10.4f}{np.array2string(sol.costs, precision=4):>22}"
              f"{np.array2string(sol.multipliers, precision=4):>22}{sol.solve_time:>11.3f}")
    print(f"constraint costs {gap:.1%} of the unconstrained reward "
          f"(method={constrained.method}, {constrained.oracle_calls} backward inductions)")
    if args.out:
        _write_json_atomic(Path(args.out), {
            "env": {"size": args.size, "horizon": args.horizon, "alpha": args.alpha,
                    "layout_seed": args.layout_seed, "slip": args.slip},
            "unconstrained": _solution_dict(unconstrained),
            "constrained": _solution_dict(constrained),
            "relative_reward_loss": gap,
            "versions": {"fhc_jax": fhc.__version__, "jax": jax.__version__, "python": platform.python_version()},
            "device": str(jax.devices()[0]),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        })
        print(f"wrote {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fhc-jax", description="Finite-horizon constrained RL in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("solve", help="exact optima of the paper's gridworld")
    p.add_argument("--size", type=int, default=10, help="grid side, >= 2 (default 10)")
    p.add_argument("--horizon", type=int, default=100, help="H, >= 1 (default 100)")
    p.add_argument("--alpha", type=float, default=25.0, help="cost threshold, >= 0 (default 25)")
    p.add_argument("--layout-seed", type=int, default=0, help="seed of the moving layouts, >= 0")
    p.add_argument("--slip", type=float, default=0.1, help="slip probability in [0, 1] (default 0.1)")
    p.add_argument("--method", choices=("dual", "lp"), default="dual",
                   help="dual: Lagrangian duality + DP (default); lp: HiGHS occupancy LP (slow)")
    p.add_argument("--out", help="write the results as JSON to this file")
    p.set_defaults(func=_cmd_solve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
