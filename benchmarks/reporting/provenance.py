"""Where a table's numbers come from: the command, one hardware line, the jax version, the git
revision (the caption under each section title), and the stale marker when the code the table
measures changed after that revision."""

from __future__ import annotations

import re

from reporting.code import cell_code, measured_code
from reporting.revision import Git, revision_of

#: every stale marker (and every "not checked" note) starts with this: ``report.py --check``
#: compares the page without these lines, since they change with the repository's history,
#: not with the results files
STALE = "> **Stale"

# an absolute path (``/home/x/...``, ``/tmp/before``): a slash not preceded by a word, a dot or
# another slash, then at least one more slash-separated part
_ABSOLUTE = re.compile(r"(?<![\w.:/~-])/(?:[\w.+-]+/)*[\w.+-]+")


#: the repository's top-level folders: an absolute path through one of them is shown from there
REPO_FOLDERS = ("benchmarks", "fhc_jax", "docs", "tests", "notebooks")


def relative(text: str, out: str | None = None) -> str:
    """``text`` with each absolute path shown relative to the repository root when it runs
    through one of its folders (``/any/checkout/benchmarks/x.py -> benchmarks/x.py``), else by its
    file name (``/tmp/before -> before``); ``--out ABSOLUTE`` becomes ``--out OUT`` when ``out``
    (the results file's path in the repository) is given."""
    if out is not None:
        text = re.sub(r"(--out[ =])/\S+", lambda m: m.group(1) + out, text)

    def show(m: re.Match) -> str:
        parts = m.group(0).strip("/").split("/")
        inside = next((i for i, part in enumerate(parts) if part in REPO_FOLDERS), None)
        return "/".join(parts[inside:]) if inside is not None else parts[-1]

    return _ABSOLUTE.sub(show, text)


def _machine(data: dict) -> dict:
    for key in ("machine_quality", "machine"):
        if isinstance(data.get(key), dict):
            return data[key]
    return {}


def hardware(data: dict) -> str | None:
    """One line naming the hardware: ``hardware_line`` if the file has one, else read from the
    machine record (``fhc_jax.experiment.rundir.machine_info``, or the older flat record)."""
    if isinstance(data.get("hardware_line"), str):
        return data["hardware_line"]
    m = _machine(data)
    if isinstance(m.get("cpu"), dict):
        cpu, dev = m["cpu"], m.get("device", {})
        model = (cpu.get("model") or "CPU").replace("(R)", "").replace("(TM)", "")
        host = f"{model}, {cpu.get('logical_cores', '?')} cores"
        if dev.get("platform", "cpu") != "cpu":
            return f"{dev.get('count', 1)} x {dev.get('kind', dev.get('platform'))} ({host} host)"
        return f"{host}, no accelerator"
    if "cpu_count" in m:
        devices = [d for d in m.get("devices", []) if not str(d).startswith("cpu")]
        host = f"{m['cpu_count']}-core {m.get('processor') or 'x86_64'} CPU"
        return f"{', '.join(devices)} ({host} host)" if devices else f"{host}, no accelerator"
    return None


def accelerator(data: dict) -> str | None:
    """The accelerator the file was measured on (``'NVIDIA H200'``), None on a CPU."""
    line = hardware(data) or ""
    if "no accelerator" in line or not line:
        return None
    return line.split(" (")[0].removeprefix("1 x ")


def on(name: str, data: dict) -> str:
    """A title suffix naming the accelerator, if any."""
    device = accelerator(data)
    return f", {device}" if device else ""


def jax_version(data: dict) -> str | None:
    """The jax version the file records, None if none."""
    if isinstance(data.get("jax"), str):
        return data["jax"]
    m = _machine(data)
    for record in (m.get("versions"), m, data.get("versions"), data.get("hardware")):
        if isinstance(record, dict):
            for key in ("jax", "jax_version"):
                if isinstance(record.get(key), str):
                    return record[key]
    return None


def provenance_text(data: dict, out: str | None = None) -> str:
    """The command (absolute paths made relative; ``out``: where its ``--out`` file now lies),
    the hardware line, the jax version and the revision, joined by dots, saying so where one is
    not recorded."""
    command = data.get("command")
    return " · ".join(
        [
            f"`{relative(command, out=out)}`" if command else "command not recorded",
            hardware(data) or "hardware not recorded",
            f"jax {jax_version(data)}" if jax_version(data) else "jax version not recorded",
            revision_of(data).caption(),
        ]
    )


def provenance(name: str, data: dict) -> str:
    """The caption under a section title, naming the results file."""
    path = f"benchmarks/results/{name}"
    return f"*{provenance_text(data, out=path)} · `{path}`*"


def _paths(paths: list[str]) -> str:
    return ", ".join(f"`{p}`" for p in paths)


def stale_lines(name: str, data: dict, git: Git) -> list[str]:
    """The stale marker of results file ``name``: one line naming the revision and the declared
    paths (``reporting.code``) that changed since, nothing when none did; a "not checked" line
    when that cannot be told."""
    if isinstance(data.get("runs"), dict) and isinstance(data.get("results"), dict):
        return robustness_stale_lines(data, git)
    rev, paths = revision_of(data), measured_code(name, data)
    command = relative(data.get("command") or "", out=f"benchmarks/results/{name}")
    if paths is None:
        return [f"{STALE}ness not checked:** `reporting/code.py` declares no code for this file."]
    if rev.sha is None:
        return [f"{STALE}ness not checked:** no revision recorded; rerun `{command}` to record one."]
    changed = git.changed(rev.sha, paths)
    if changed is None:
        return [f"{STALE}ness not checked:** {git.problem or f'revision `{rev.short}` is not in this history'}."]
    if not changed:
        return []
    return [
        f"{STALE}:** {_paths(changed)} changed since `{rev.short}`, so these numbers may not describe the "
        f"current code; `{command}` measures it again."
    ]


def robustness_stale_lines(data: dict, git: Git) -> list[str]:
    """The stale marker of ``robustness.json``, cell by cell: each cell (a learner on a task)
    against its run's revision and the learner's and the task's modules, grouped by learner."""
    runs = data["runs"]
    by_learner: dict[str, dict] = {}
    unknown: set[str] = set()
    for learner, by_task in data["results"].items():
        for task, cell in by_task.items():
            rev = revision_of(runs.get(cell.get("run"), {}))
            changed = git.changed(rev.sha, cell_code(learner, task)) if rev.sha else None
            if changed is None:
                unknown.add(rev.short if rev.sha else "not recorded")
            elif changed:
                g = by_learner.setdefault(learner, {"tasks": [], "paths": {}, "revs": {}})
                g["tasks"].append(task)
                g["paths"].update(dict.fromkeys(changed))
                g["revs"][rev.short] = rev
    out = []
    if by_learner:
        parts = [
            f"{learner} on {len(g['tasks'])} task{'s' * (len(g['tasks']) > 1)} since "
            f"{', '.join(f'`{r}`' for r in g['revs'])} ({_paths(list(g['paths']))})"
            for learner, g in by_learner.items()
        ]
        out.append(
            f"{STALE}:** the code of these cells changed after they were measured: {'; '.join(parts)}; "
            "`python benchmarks/robustness.py --learners L --tasks T` measures them again."
        )
    if unknown:
        why = git.problem or "revision not recorded, or not in this history"
        out.append(f"{STALE}ness not checked** for the cells of run(s) at {', '.join(sorted(unknown))}: {why}.")
    return out
