"""Reproduce the paper's comparison on the default gridworld.

FH-Constrained, NN-Constrained (input "xy"), PPO-Lagrangian and CPO (inputs "xy" = paper Env 1
and "xyt" = Env 2), each with its default (tuned) ``Config``, 5 seeds vmapped in one program per
run, on ``fhc_jax.GridWorld()`` (10x10, H = 100, alpha = 25). Reports the paper's metric (mean
episode reward and cost over the last 10,000 training episodes), the exact reward and cost of
the final policies, the gap to the exact optimum, the violation rate, and wall/compile times.
The logic lives in :mod:`fhc_jax.experiment.compare`; ``fhc-jax compare`` runs the same. This
script adds the command and the git revision (``timing.provenance``, read before the run starts)
to the JSON that ``fhc-jax compare`` writes.

Usage::

    python benchmarks/reproduce_paper.py [--seeds 5] [--algos fh-constrained cpo ...]
                                         [--inputs xy xyt] [--set KEY=VALUE ...] [--out DIR]

Results: ``benchmarks/results/reproduce_paper.{json,md,png}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from timing import provenance

from fhc_jax.cli import main
from fhc_jax.experiment.rundir import write_json_atomic


def _option(args: list[str], name: str, default: str) -> str:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in ``args`` (the last one), else default."""
    value = default
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


if __name__ == "__main__":
    args = sys.argv[1:]
    source = provenance()
    if "--out" not in args and not any(a.startswith("--out=") for a in args):
        args += ["--out", str(Path(__file__).resolve().parent / "results")]
    code = main(["compare", *args])
    path = Path(_option(args, "--out", "")) / f"{_option(args, '--name', 'reproduce_paper')}.json"
    if code == 0 and path.is_file():
        data = json.loads(path.read_text())
        write_json_atomic(path, {**source, **{k: v for k, v in data.items() if k not in source}})
    elif code == 0:
        print(
            f"reproduce_paper.py: {path} not found, no command or revision added (pass --name of the study)",
            file=sys.stderr,
        )
    raise SystemExit(code)
