"""Timing shared by the learner benchmarks: compile once (``jit(...).lower().compile()``, timed
apart), then the median wall time of several runs, each ending in ``jax.block_until_ready``."""

from __future__ import annotations

import time
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
