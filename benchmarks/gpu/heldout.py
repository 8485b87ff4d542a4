"""Re-run the best settings of tuning sweeps on held-out seeds (a base key no sweep used).

For each tuning sweep directory (with the static settings it ran under), the ``--top`` settings
ranked by :func:`benchmarks.tuning_report.rank` (feasible seeds, then the worst seed's reward)
are re-run by ``fhc-jax sweep`` with ``--set run.seed=HELDOUT`` on ``--seeds`` seeds, each into
``OUT/heldout_<sweep>_<i>``. Defaults are then chosen from the tuning seeds alone and this
report only confirms (or refutes) them.

Usage::

    python benchmarks/gpu/heldout.py --out DIR --algo nn-constrained \
        --sweep DIR1 "--set actor_epochs=8" --sweep DIR2 "--set actor_epochs=16" --top 2
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tuning_report import rank  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--algo", default="nn-constrained")
    p.add_argument("--sweep", nargs=2, action="append", metavar=("DIR", "STATIC_SETS"), required=True)
    p.add_argument("--top", type=int, default=2)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--heldout", type=int, default=1000, help="run.seed of the held-out seeds")
    a = p.parse_args()
    for d, static in a.sweep:
        keys, rows = rank(Path(d))
        for i, r in enumerate(rows[: a.top]):
            grid = [f"--grid={k}={v}" for k, v in r["setting"].items()]
            out = a.out / f"heldout_{Path(d).name}_{i}"
            cmd = [sys.executable, "-m", "fhc_jax.cli", "sweep", "--overwrite", "--quiet", "--algo", a.algo,
                   "--seeds", str(a.seeds), "--out", str(out), "--set", f"run.seed={a.heldout}",
                   *shlex.split(static), *grid]
            print("===", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=False)
            print(f"tuning seeds: {r['feasible']}/{r['seeds']} feasible, worst {100 * r['min_reward']:.1f}%", flush=True)
            subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "tuning_report.py"), str(out)],
                           check=False)


if __name__ == "__main__":
    main()
