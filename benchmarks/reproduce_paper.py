"""Reproduce the paper's comparison on the default gridworld.

FH-Constrained, NN-Constrained (input "xy"), PPO-Lagrangian and CPO (inputs "xy" = paper Env 1
and "xyt" = Env 2), each with its default (tuned) ``Config``, 5 seeds vmapped in one program per
run, on ``fhc_jax.GridWorld()`` (10x10, H = 100, alpha = 25). Reports the paper's metric (mean
episode reward and cost over the last 10,000 training episodes), the exact reward and cost of
the final policies, the gap to the exact optimum, the violation rate, and wall/compile times.
The logic lives in :mod:`fhc_jax.experiment.compare`; ``fhc-jax compare`` runs the same.

Usage::

    python benchmarks/reproduce_paper.py [--seeds 5] [--algos fh-constrained cpo ...]
                                         [--inputs xy xyt] [--set KEY=VALUE ...] [--out DIR]

Results: ``benchmarks/results/reproduce_paper.{json,md,png}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fhc_jax.cli import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--out" not in args:
        args += ["--out", str(Path(__file__).resolve().parent / "results")]
    raise SystemExit(main(["compare", *args]))
