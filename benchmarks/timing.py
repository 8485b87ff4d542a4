"""Timing and provenance shared by the benchmarks: compile once (``jit(...).lower().compile()``,
timed apart), then the median wall time of several runs, each ending in
``jax.block_until_ready``; and the command line every results file records."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Callable

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


def command_line() -> str:
    """The running command as typed from the repository root (``python benchmarks/NAME.py ARGS``):
    the ``command`` field of every results file, which ``benchmarks/report.py`` prints under its
    table."""
    script = Path(sys.argv[0]).resolve()
    root = Path(__file__).resolve().parents[1]
    name = script.relative_to(root).as_posix() if script.is_relative_to(root) else sys.argv[0]
    return shlex.join(["python", name, *sys.argv[1:]])
