"""Merge robustness slices (files written by ``benchmarks/robustness.py --out PART``, e.g. the
parallel slices of ``benchmarks/gpu/robustness.sh``) into the robustness results file, with the
same semantics as a run of ``benchmarks/robustness.py`` on that file: each part's (learner, task)
cells replace the file's, each with the run (command, revision, machine) it came from.

Usage::

    python benchmarks/gpu/merge_robustness.py PART.json [PART.json ...] [--out benchmarks/results/robustness.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import robustness  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("parts", nargs="+", type=Path, help="robustness JSON files to merge in")
    parser.add_argument("--out", type=Path, default=robustness.DEFAULT_OUT, help="the results file to merge into")
    args = parser.parse_args(argv)
    parts = []
    for path in args.parts:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            parts.append((path, data["runs"], data["tasks"], data["results"]))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError) as err:
            print(f"error: {path} is not a robustness results file ({type(err).__name__}: {err})", file=sys.stderr)
            return 2
    robustness.check_out(args.out)
    for path, runs, refs, results in parts:  # all read before anything is written
        for run_id, run in runs.items():
            cells = {
                learner: {task: cell for task, cell in by_task.items() if cell.get("run") == run_id}
                for learner, by_task in results.items()
            }
            cells = {learner: by_task for learner, by_task in cells.items() if by_task}
            tasks = {task for by_task in cells.values() for task in by_task}
            merged = robustness.merge(args.out, run_id, run, {t: refs[t] for t in tasks}, cells)
            robustness.write_atomic(args.out, json.dumps(robustness.to_json(merged), indent=1) + "\n")
            print(f"{path}: run {run_id}, {sum(len(c) for c in cells.values())} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
