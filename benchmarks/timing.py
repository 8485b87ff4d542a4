"""Timing and provenance shared by the benchmarks: compile once (``jit(...).lower().compile()``,
timed apart), then the median wall time of several runs, each ending in
``jax.block_until_ready``; and what every results file records about where it came from: the
command line and the git revision of the code it measured (:func:`provenance`)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np


def compile_and_time(train: Callable, repeats: int = 3) -> tuple[float, float]:
    """``train(key)`` compiled and run ``repeats`` times with keys 0..repeats-1.

    Returns:
        (compile seconds, median run seconds).
    """
    t0 = time.perf_counter()
    compiled = jax.jit(train).lower(jax.random.key(0)).compile()
    compile_s = time.perf_counter() - t0
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(jax.random.key(r)))
        times.append(time.perf_counter() - t0)
    return compile_s, float(np.median(times))


ROOT = Path(__file__).resolve().parents[1]

#: the tracked code whose uncommitted changes make a measurement ``dirty`` (the results files
#: under benchmarks/results are what the scripts write, not what they measure)
MEASURED_CODE = ("fhc_jax", "benchmarks", ":(exclude)benchmarks/results")


def _git(*args: str, root: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30, check=True).stdout


def source_revision(root: Path = ROOT) -> dict[str, Any]:
    """The git revision of the checkout the benchmark runs from.

    Returns:
        ``revision`` (the full ``git rev-parse HEAD``), ``dirty`` (whether tracked files under
        fhc_jax/ or benchmarks/, results excluded, differ from it) and ``dirty_paths``. Where the
        environment variable ``BENCHMARK_REVISION`` is set, it names the revision whatever git
        says (a copy of the tree on a remote accelerator may carry no ``.git``, or a stale one
        whose HEAD is not the copied tree's): then ``dirty`` is None (unknown). Where git or the
        repository is unavailable and the variable is unset, ``revision`` None and
        ``revision_unavailable`` (why).
    """
    given = os.environ.get("BENCHMARK_REVISION", "").strip()
    if given:
        return {"revision": given, "dirty": None, "revision_from": "BENCHMARK_REVISION"}
    try:
        revision = _git("rev-parse", "HEAD", root=root).strip()
        status = _git("status", "--porcelain", "--untracked-files=no", "--", *MEASURED_CODE, root=root)
    except (OSError, subprocess.SubprocessError) as e:
        reason = getattr(e, "stderr", None) or str(e)
        return {"revision": None, "revision_unavailable": f"git rev-parse HEAD failed: {reason.strip()[:200]}"}
    paths = [line[3:] for line in status.splitlines() if line.strip()]
    return {"revision": revision, "dirty": bool(paths), "dirty_paths": paths, "revision_from": "checkout"}


def provenance() -> dict[str, Any]:
    """The fields every results file starts with: ``command`` (:func:`command_line`) and the
    revision fields of :func:`source_revision`. Call it when the measurement starts."""
    return {"command": command_line(), **source_revision()}


def command_line() -> str:
    """The running command as typed from the repository root (``python benchmarks/NAME.py ARGS``):
    the ``command`` field of every results file, which ``benchmarks/report.py`` prints under its
    table."""
    script = Path(sys.argv[0]).resolve()
    root = Path(__file__).resolve().parents[1]
    name = script.relative_to(root).as_posix() if script.is_relative_to(root) else sys.argv[0]
    return shlex.join(["python", name, *sys.argv[1:]])
