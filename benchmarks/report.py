"""Write ``docs/benchmarks.md`` and the README's generated blocks from ``benchmarks/results/*.json``.

Every measured number of the documentation comes from a results file that a script of
``benchmarks/`` wrote. This script turns them into one generated page: one small renderer per
kind of results file, chosen by file name (``RENDERERS``: the first matching pattern wins; the
renderers live in ``benchmarks/reporting/``); every section's caption names the command that
produced it, one hardware line, the jax version and the git revision (dates stay inside the
JSON). A section whose measured code (``reporting/code.py``) changed after its revision carries
a stale marker naming the changed files. A results file that no pattern matches is listed at
the end of the page, never skipped silently. The README's learner table (between
``<!-- learners -->`` and ``<!-- /learners -->``) and its one speed figure (``<!-- speed -->``
... ``<!-- /speed -->``) are rewritten from ``robustness.json`` and ``fh_constrained.json``.

Usage::

    python benchmarks/report.py            # rewrite docs/benchmarks.md and the README blocks
    python benchmarks/report.py --check    # exit 1, naming what differs, if either is out of date

``--check`` compares everything but the stale markers: those follow the repository's history
(a commit to a learner's module makes its tables stale), not the results files, so it only says
when they would change.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import sys
from collections.abc import Callable
from pathlib import Path

from reporting.fmt import si, table
from reporting.learners import (
    render_comparison,
    render_learner,
    render_robustness,
    robustness_cells,
    run_hosts,
)
from reporting.provenance import (
    STALE,
    hardware,
    jax_version,
    robustness_stale_lines,
    stale_lines,
)
from reporting.revision import Git, revision_of
from reporting.tables import (
    render_battery_resolution,
    render_brax,
    render_chunked,
    render_deep_reference,
    render_distributed,
    render_env_throughput,
    render_gymnax,
    render_monte_carlo,
    render_rejax,
    render_sampled_path,
    render_scaling,
    render_solver,
    render_speed,
    render_stationary_margin,
    render_tracking,
    render_validation_overhead,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"

Renderer = Callable[[str, dict], list[str]]

#: results file pattern (relative to benchmarks/results, fnmatch) -> renderer; the first match
#: wins, and the page follows this order.
RENDERERS: dict[str, Renderer] = {
    "reproduce_paper.json": render_comparison,
    "robustness.json": render_robustness,
    "stationary_margin.json": render_stationary_margin,
    "fh_constrained.json": render_learner,
    "nn_constrained.json": render_learner,
    "ppo_lagrangian.json": render_learner,
    "cpo.json": render_learner,
    "ecop*.json": render_learner,
    "saute*.json": render_learner,
    "solver.json": render_solver,
    "env_throughput.json": render_env_throughput,
    "sampled_path.json": render_sampled_path,
    "scaling.json": render_scaling,
    "battery.json": render_speed,
    "continuous_*_speed.json": render_speed,
    "continuous_*.json": render_monte_carlo,
    "battery_resolution*.json": render_battery_resolution,
    "gymnax_interop.json": render_gymnax,
    "deep_reference.json": render_deep_reference,
    "reference/rejax_*.json": render_rejax,
    "brax_interop.json": render_brax,
    "chunked_training.json": render_chunked,
    "tracking_overhead.json": render_tracking,
    "validation_overhead.json": render_validation_overhead,
    "distributed.json": render_distributed,
    "gpu_*/env_throughput.json": render_env_throughput,
    "gpu_*/fh_constrained.json": render_learner,
    "gpu_*/nn_constrained.json": render_learner,
    "gpu_*/battery*.json": render_speed,
}

INTRO = (
    "Every number below comes from a JSON file in `benchmarks/results/`, written by the script of `benchmarks/` "
    "named under each table, with the hardware, the jax version and the git revision it ran at (the date of each "
    'run is inside its JSON). "Recorded in commit X" marks a file measured before the scripts recorded their '
    "revision: X is the commit that recorded its numbers, so the code measured is X's or older. A section whose "
    "measured code (the learner's and the environment's modules, declared in `benchmarks/reporting/code.py`) "
    "changed after its revision is marked **Stale**, naming the files: its numbers describe the code of its "
    "revision, not necessarily the current code, until its command is run again. `python benchmarks/report.py` "
    "rewrites this page and the README's generated blocks; `python benchmarks/report.py --check` (run by the test "
    "suite) fails when a number on them is out of date. Speeds are medians of several runs with compilation timed "
    "apart; wall times of shared CPUs vary by about 15% from run to run."
)


def results_files(results: Path) -> list[str]:
    """Every results file under ``results``, as paths relative to it."""
    return sorted(p.relative_to(results).as_posix() for p in results.rglob("*.json"))


def renderer_for(name: str) -> tuple[int, Renderer] | None:
    """The position and renderer of the first ``RENDERERS`` pattern matching ``name``."""
    for i, (pattern, render) in enumerate(RENDERERS.items()):
        if fnmatch.fnmatch(name, pattern):
            return i, render
    return None


def anchor(name: str) -> str:
    """The stable link target of a results file's section (``gpu_h100/fh_constrained.json ->
    'gpu_h100-fh_constrained'``): the docs link to ``benchmarks.md#<anchor>``, whatever the
    section's title says."""
    return name.removesuffix(".json").replace("/", "-")


def render_page(results: Path = RESULTS, root: Path = ROOT) -> str:
    """The whole of docs/benchmarks.md; ``root``: the git repository whose HEAD the revisions are
    compared with."""
    git = Git(root)
    names = results_files(results)
    matched = sorted(((renderer_for(n), n) for n in names if renderer_for(n)), key=lambda t: (t[0][0], t[1]))
    unknown = [n for n in names if renderer_for(n) is None]
    out = [
        "# Benchmarks",
        "",
        "<!-- generated by `python benchmarks/report.py` from benchmarks/results/*.json: do not edit by hand -->",
        "",
        INTRO,
    ]
    for (_, render), name in matched:
        data = json.loads((results / name).read_text())
        title, *body = render(name, data)
        stale = stale_lines(name, data, git)
        out += ["", f'<a id="{anchor(name)}"></a>', "", f"## {title}", ""]
        out += (stale + ([""] if body and body[0] else []) if stale else []) + body
    if unknown:
        out += [
            "",
            "## Results files without a renderer",
            "",
            "These files match no pattern of `RENDERERS` in `benchmarks/report.py`; add a renderer:",
            "",
        ]
        out += [f"- `benchmarks/results/{n}`" for n in unknown]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# the README blocks

#: learner module -> (label, docs page, one line on what it is)
LEARNERS: dict[str, tuple[str, str, str]] = {
    "fh_constrained": (
        "FH-Constrained",
        "docs/algorithms/fh_constrained.md",
        "the paper's Algorithm 1: per-stage Gibbs actors on features, linear critics, three timescales",
    ),
    "nn_constrained": (
        "NN-Constrained",
        "docs/algorithms/nn_constrained.md",
        "the paper's deep variant: per-stage MLP actors and critics stacked on the stage axis",
    ),
    "ecop": (
        "e-COP",
        "docs/algorithms/ecop.md",
        "episodic constrained policy optimisation: per-stage clipped surrogates and damped penalty",
    ),
    "ppo_lagrangian": (
        "PPO-Lagrangian",
        "docs/algorithms/ppo_lagrangian.md",
        "baseline: one stationary network, Lagrange multiplier (geometric law on tabular tasks, PID elsewhere)",
    ),
    "cpo": (
        "CPO",
        "docs/algorithms/cpo.md",
        "baseline: one stationary network, trust-region step with a cost constraint",
    ),
    "saute": (
        "Saute-Lagrangian",
        "docs/algorithms/saute.md",
        "PPO-Lagrangian on the state augmented with the remaining budget",
    ),
}

MARK = {"learners": ("<!-- learners -->", "<!-- /learners -->"), "speed": ("<!-- speed -->", "<!-- /speed -->")}


def _revisions(runs: dict) -> str:
    """The distinct revisions of the runs, in their order ("revision `a`, `b`", "recorded in
    commits `a`, `b`")."""
    revs = list(dict.fromkeys(revision_of(r) for r in runs.values()))
    exact = [f"`{r.short}`" for r in revs if r.sha and r.exact]
    recorded = [f"`{r.short}`" for r in revs if r.sha and not r.exact]
    parts = ([f"revision{'s' * (len(exact) > 1)} {', '.join(exact)}"] if exact else []) + (
        [f"recorded in commit{'s' * (len(recorded) > 1)} {', '.join(recorded)}"] if recorded else []
    )
    if any(r.sha is None for r in revs):
        parts.append("some revisions not recorded")
    return "; ".join(parts) or "revision not recorded"


def learner_table(results: Path = RESULTS, root: Path = ROOT) -> str:
    """The README's learner table, from the robustness benchmark (robustness.json): each
    learner's plain ``Config()`` on the default gridworld (worst and best seed's % of the
    optimum, seeds over 1.02 alpha) and over the suite's exactly judged tasks (feasible seeds),
    with the revisions the cells were measured at and a stale marker for the cells whose code
    changed since."""
    path = results / "robustness.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    cells, runs = robustness_cells(data)
    by = {(c["learner"], c["task"]): c for c in cells}
    exact = [t for t, r in data.get("tasks", {}).items() if r.get("judgement") == "exact"]

    def gridworld(name: str) -> str:
        c = by.get((name, "gridworld"))
        if c is None or c.get("error") or not c.get("seeds"):
            return "not in robustness.json" if c is None else "error"
        p = [sd["percent"] for sd in c["seeds"]]
        return f"{min(p):.1f}-{max(p):.1f}%, {c['num_seeds'] - c['feasible_seeds']}/{c['num_seeds']} over"

    def suite_cell(name: str) -> str:
        cells = [by[(name, t)] for t in exact if (name, t) in by and not by[(name, t)].get("error")]
        if not cells:
            return "not in robustness.json"
        ok = sum(c["feasible_seeds"] for c in cells)
        n = sum(c["num_seeds"] for c in cells)
        errors = sum(1 for t in exact if by.get((name, t), {}).get("error"))
        return f"{ok}/{n} seeds feasible on {len(cells)} tasks" + (f" ({errors} refused)" if errors else "")

    rows = [
        [f"[{label}]({page})", what, gridworld(name), suite_cell(name)]
        for name, (label, page, what) in LEARNERS.items()
    ]
    lines = table(
        [
            "learner",
            "what it is",
            "default gridworld: % of the optimum, seeds over 1.02 alpha",
            "robustness suite (exact tasks)",
        ],
        rows,
    )
    if cells:
        used = {c["run"] for c in cells if c["task"] in exact}
        lines += [
            "",
            "Plain `Config()`, 5 seeds per task, each returned policy judged exactly "
            f"(`python benchmarks/robustness.py`, run in slices on {run_hosts(runs)}; "
            f"{_revisions({k: v for k, v in runs.items() if k in used})}); every task: "
            "[docs/benchmarks.md](docs/benchmarks.md). The percentages come from that one machine: "
            "training amplifies float rounding, which differs between CPUs, so on another CPU the same "
            "seeds can land a point or two either side.",
        ]
        shown = {
            **data,
            "results": {
                lr: {t: c for t, c in by_task.items() if t in exact} for lr, by_task in data.get("results", {}).items()
            },
        }
        marker = robustness_stale_lines(shown, Git(root))
        lines += [""] + marker if marker else []
    return "\n".join(lines)


def speed_line(results: Path = RESULTS, root: Path = ROOT) -> str:
    """One speed figure with its hardware line and revision, from fh_constrained.json (and its
    stale marker, if any)."""
    path = results / "fh_constrained.json"
    if not path.is_file():
        return "No speed figure: benchmarks/results/fh_constrained.json is missing."
    data = json.loads(path.read_text())
    rows = (data.get("speed") or {}).get("jax", [])
    if not rows:
        return "No speed figure: benchmarks/results/fh_constrained.json has no speed rows."
    best = max(rows, key=lambda r: r["K"])
    line = (
        f"FH-Constrained trains at {si(best['env_steps_per_s'])} env-steps/s with K = {best['K']} episodes "
        f"per update (one seed, whole run in one jit; {hardware(data) or 'hardware not recorded'}, "
        f"jax {jax_version(data) or '?'}, {revision_of(data).caption()})."
    )
    return "\n\n".join([line, *stale_lines("fh_constrained.json", data, Git(root))])


def render_readme(text: str, results: Path = RESULTS, root: Path = ROOT) -> str:
    """README.md with its generated blocks rewritten (each block must exist once)."""
    for key, body in (("learners", learner_table(results, root)), ("speed", speed_line(results, root))):
        start, end = MARK[key]
        i, j = text.find(start), text.find(end)
        if i < 0 or j < i:
            raise ValueError(f"README.md lacks the {start} ... {end} block")
        text = text[: i + len(start)] + "\n" + body + "\n" + text[j:]
    return text


def _without_markers(text: str) -> list[str]:
    """The lines of ``text`` but the stale markers and blank lines (which come and go with them)."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith(STALE)]


def _differs(path: Path, expected: str) -> tuple[str | None, bool]:
    """(what differs apart from the stale markers, or None; whether the stale markers differ)."""
    current = path.read_text() if path.is_file() else ""
    if current == expected:
        return None, False
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    a, b = _without_markers(current), _without_markers(expected)
    if a == b:
        return None, True
    diff = [d for d in difflib.unified_diff(a, b, lineterm="", n=0) if d[:1] in "+-" and d[:3] not in ("+++", "---")]
    first = next((d for d in diff), "")
    return f"{name}: {len(diff)} line(s) differ (first: {first[:80]!r})", True


def main(
    argv: list[str] | None = None, results: Path = RESULTS, page: Path = PAGE, readme: Path = README, root: Path = ROOT
) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if docs/benchmarks.md or the README is out of date"
    )
    args = parser.parse_args(argv)
    expected = {page: render_page(results, root), readme: render_readme(readme.read_text(), results, root)}
    if args.check:
        found = [_differs(p, text) for p, text in expected.items()]
        stale = [s for s, _ in found if s]
        if stale:
            print("out of date: " + "; ".join(stale) + " (run python benchmarks/report.py)", file=sys.stderr)
            return 1
        if any(markers for _, markers in found):
            print(
                "note: the stale markers changed with the repository's history (run python benchmarks/report.py "
                "to update them)",
                file=sys.stderr,
            )
        return 0
    for path, text in expected.items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
