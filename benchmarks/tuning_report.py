"""Rank the settings of ``fhc-jax sweep`` runs by their worst seed (how the defaults were chosen).

A sweep (``fhc-jax sweep --out DIR``) writes ``DIR/runs.csv`` with one row per setting x seed
and the exact reward and costs of each run's final policy. ``summary.txt`` ranks settings by
their seed-mean; a default must hold on every seed, so this report ranks them by

1. the number of seeds whose exact costs all satisfy ``cost <= (1 + tolerance) alpha``
   (the issue's bound, tolerance 0.02), then
2. the worst seed's reward as a fraction of the exact optimum (``summary.json``'s ``optimum``).

Usage::

    python benchmarks/tuning_report.py benchmarks/results/tuning/round3/fh_k512_n2000 [more dirs] [--top 5]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np


def rank(sweep_dir: Path, tolerance: float = 0.02) -> tuple[list[str], list[dict]]:
    """Settings of one sweep, best first: (grid keys, rows with seeds, feasible, min/mean
    reward fraction, max cost, mean multiplier)."""
    summary = json.loads((sweep_dir / "summary.json").read_text())
    optimum = summary["optimum"]["reward"]
    bounds = np.asarray(summary["thresholds"], float) * (1.0 + tolerance)
    with open(sweep_dir / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    fixed = {"seed", "exact_reward"}
    keys = [k for k in rows[0] if k not in fixed and not re.fullmatch(r"(exact_cost|multiplier)_\d+", k)]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in keys)].append(r)
    out = []
    for setting, runs in groups.items():
        reward = np.array([float(r["exact_reward"]) for r in runs])
        costs = np.array([[float(r[f"exact_cost_{i}"]) for i in range(bounds.size)] for r in runs])
        nus = [float(r["multiplier_0"]) for r in runs if "multiplier_0" in r]
        out.append({
            "setting": dict(zip(keys, setting)), "seeds": len(runs),
            "feasible": int(np.sum(np.all(costs <= bounds, axis=1))),
            "min_reward": float(reward.min() / optimum), "mean_reward": float(reward.mean() / optimum),
            "max_cost": float(costs[:, 0].max()), "mean_multiplier": float(np.mean(nus)) if nus else float("nan"),
        })
    out.sort(key=lambda r: (-r["feasible"], -r["min_reward"]))
    return keys, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=0.02)
    args = parser.parse_args()
    for d in args.dirs:
        keys, rows = rank(d, args.tolerance)
        print(f"{d}  ({rows[0]['seeds']} seeds per setting; feasible: cost <= {1 + args.tolerance:g} alpha)")
        print("  " + "  ".join(f"{k:>20}" for k in keys) + "  feasible  min reward  mean reward  max cost     nu")
        for r in rows[: args.top]:
            print("  " + "  ".join(f"{r['setting'][k]:>20}" for k in keys)
                  + f"  {r['feasible']:>5}/{r['seeds']:<2} {100 * r['min_reward']:>10.1f}% {100 * r['mean_reward']:>11.1f}%"
                  + f"  {r['max_cost']:>8.2f}  {r['mean_multiplier']:.3f}")


if __name__ == "__main__":
    main()
