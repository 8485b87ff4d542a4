"""Where a result was produced: one record of the software, devices, CPU and load, written into
every result file (run summaries, sweep and comparison results, benchmark JSON)."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any


def versions() -> dict[str, str]:
    """Versions of fhc_jax, jax, jaxlib, numpy and Python."""
    import jax
    import numpy as np

    import fhc_jax

    out = {"fhc_jax": fhc_jax.__version__, "jax": jax.__version__, "python": platform.python_version(),
           "numpy": np.__version__}
    try:
        import jaxlib

        out["jaxlib"] = jaxlib.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover (not Linux)
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or None where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):  # pragma: no cover
        return None


def machine_info() -> dict[str, Any]:
    """Versions, JAX devices, CPU and load now.

    Returns:
        ``versions`` (:func:`versions`); ``device``: platform, kind, count, process_count and
        name of the first device (e.g. ``TFRT_CPU_0``); ``cpu``: model, logical and usable
        cores; ``platform`` (OS string); ``load_average``; ``timestamp`` (ISO 8601).
    """
    import jax

    devs = jax.devices()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        usable = os.cpu_count()
    return {
        "versions": versions(),
        "device": {"platform": devs[0].platform, "kind": devs[0].device_kind, "count": len(devs),
                   "process_count": jax.process_count(), "name": str(devs[0])},
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count(), "usable_cores": usable},
        "platform": platform.platform(),
        "load_average": load_average(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def source_revision() -> dict[str, Any] | None:
    """The git commit of the checkout (read-only ``git`` calls) and the package files that
    differ from it or are untracked (``git status --porcelain -- fhc_jax``); None outside a
    git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "fhc_jax"], cwd=root, capture_output=True,
                               text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "modified": [line[3:] for line in dirty.splitlines() if line.strip()]}
