"""A plain-text progress line for chunked runs (stderr; no extra dependency).

On a terminal the line is redrawn in place (carriage return); in logs and pipes each chunk
prints one line.
"""

from __future__ import annotations

import sys
from typing import IO

import numpy as np

from fhc_jax.experiment.runner import ChunkState


def env_steps_per_iteration(config, horizon: int) -> int | None:
    """Environment transitions consumed by one update of a learner ``Config`` with
    ``episodes_per_iteration`` K: K * H; None for a config without that field."""
    k = getattr(config, "episodes_per_iteration", None)
    return k * horizon if isinstance(k, int) else None


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


class Progress:
    """Callable ``on_chunk`` hook that prints ``label it/N [bar] env-steps/s reward cost nu exact eta``.

    Args:
        label: e.g. the algorithm's name.
        total: N iterations.
        num_runs: R runs progressing together (env-steps/s counts all of them).
        steps_per_iteration: env transitions per update and run (None: show it/s only).
        thresholds: alpha, (M,), shown next to the cost (None: not shown).
        stream: where to print (default stderr).
    """

    def __init__(self, label: str, total: int, num_runs: int, steps_per_iteration: int | None,
                 thresholds: np.ndarray | None, stream: IO[str] | None = None, start_iteration: int = 0,
                 start_elapsed: float = 0.0, exact: bool = True):
        self.label, self.total, self.num_runs = label, total, num_runs
        self.evaluation = "exact" if exact else "mc"  # Monte-Carlo estimates without a tabular exact model
        self.steps = steps_per_iteration
        self.thresholds = None if thresholds is None else np.asarray(thresholds)
        self.stream = sys.stderr if stream is None else stream
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last_elapsed = start_elapsed
        self.last_iteration = start_iteration

    def __call__(self, state: ChunkState) -> None:
        # chunk time only (state.elapsed_s excludes compilation and checkpoint writes)
        dt = max(state.elapsed_s - self.last_elapsed, 1e-9)
        done = state.iteration - self.last_iteration
        self.last_elapsed, self.last_iteration = state.elapsed_s, state.iteration
        frac = state.iteration / self.total
        bar = "#" * int(20 * frac) + "." * (20 - int(20 * frac))
        rate = done / dt
        speed = f"{_si(rate * self.steps * self.num_runs)} env-steps/s" if self.steps else f"{rate:.1f} it/s"
        parts = [f"{self.label} {state.iteration:>{len(str(self.total))}}/{self.total} [{bar}] {frac:4.0%}", speed]
        m = state.metrics
        if "reward" in m:
            parts.append(f"reward {np.mean(m['reward'][:, -1]):.3f}")
        if "costs" in m:
            cost = np.mean(m["costs"][:, -1], axis=0)
            alpha = "" if self.thresholds is None else " (alpha " + "/".join(f"{a:g}" for a in self.thresholds) + ")"
            parts.append("cost " + "/".join(f"{c:.2f}" for c in cost) + alpha)
        if "multipliers" in m:
            parts.append("nu " + "/".join(f"{v:.3f}" for v in np.mean(m["multipliers"][:, -1], axis=0)))
        parts.append(f"{self.evaluation} {np.mean(state.exact_reward[:, -1]):.3f}/"
                     + "/".join(f"{c:.2f}" for c in np.mean(state.exact_costs[:, -1], axis=0)))
        if rate > 0 and state.iteration < self.total:
            parts.append(f"eta {(self.total - state.iteration) / rate:.0f}s")
        line = " | ".join(parts)
        if self.tty:
            end = "\n" if state.iteration >= self.total else ""
            self.stream.write("\r\033[K" + line + end)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
