"""Progress lines on stderr: one training run's chunk line, and the overall progress of a sequence
of runs (``compare``, ``sweep``).

**A run's chunk line** (:class:`Progress`, the ``on_chunk`` hook that
:meth:`~fhc_jax.experiment.runner.ChunkedTrainer.drive` installs): plain text, redrawn in
place on a terminal, one line per chunk in logs and pipes: ``label it/N [bar] env-steps/s
reward cost nu exact eta``.

**Overall progress** (:class:`RunsProgress`) of a sequence of runs (``compare``: one run per
row): the chunk line gains ``overall done/total runs, elapsed, eta``, and every completed run
prints one plain line, ``[3/9 runs done] elapsed 120.4 s | eta 240.8 s | NAME | DETAIL``, that
:func:`parse_run_line` reads back. A sweep counts its configurations (C configurations x S
seeds = C S runs, every configuration trained at once): ``overall 0.5/4 configurations, ...``
and ``[1/4 configurations done] ...``.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import IO, Any

import numpy as np


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
        overall: called with this run's fraction done; its text ends the line
            (:meth:`RunsProgress.status`).
    """

    def __init__(
        self,
        label: str,
        total: int,
        num_runs: int,
        steps_per_iteration: int | None,
        thresholds: np.ndarray | None,
        stream: IO[str] | None = None,
        start_iteration: int = 0,
        start_elapsed: float = 0.0,
        exact: bool = True,
        overall: Callable[[float], str] | None = None,
    ):
        self.overall = overall
        self.label, self.total, self.num_runs = label, total, num_runs
        self.evaluation = "exact" if exact else "mc"  # Monte-Carlo estimates without a tabular exact model
        self.steps = steps_per_iteration
        self.thresholds = None if thresholds is None else np.asarray(thresholds)
        self.stream = sys.stderr if stream is None else stream
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last_elapsed = start_elapsed
        self.last_iteration = start_iteration

    def __call__(self, state: Any) -> None:
        """Print the line of a :class:`~fhc_jax.experiment.runner.ChunkState` (after a chunk)."""
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
        parts.append(
            f"{self.evaluation} {np.mean(state.exact_reward[:, -1]):.3f}/"
            + "/".join(f"{c:.2f}" for c in np.mean(state.exact_costs[:, -1], axis=0))
        )
        if rate > 0 and state.iteration < self.total:
            parts.append(f"eta {(self.total - state.iteration) / rate:.0f}s")
        if self.overall is not None:
            parts.append(self.overall(frac))
        line = " | ".join(parts)
        if self.tty:
            end = "\n" if state.iteration >= self.total else ""
            self.stream.write("\r\033[K" + line + end)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


#: one completed run's line (:meth:`RunsProgress.done`); ``unit`` is what the progress counts
#: ("runs", or "configurations" in a sweep)
RUN_LINE = re.compile(
    r"^\[(?P<done>\d+)/(?P<total>\d+) (?P<unit>[a-z]+) done\] elapsed (?P<elapsed>\d+\.\d) s "
    r"\| eta (?P<eta>\d+\.\d) s \| (?P<name>.+?)(?: \| (?P<detail>.*))?$"
)


def parse_run_line(line: str) -> dict[str, Any] | None:
    """A completed run's line (:meth:`RunsProgress.done`) as ``{"done", "total", "unit",
    "elapsed_s", "eta_s", "name", "detail"}``; None for any other line."""
    m = RUN_LINE.match(line.rstrip("\n"))
    if m is None:
        return None
    return {
        "done": int(m["done"]),
        "total": int(m["total"]),
        "unit": m["unit"],
        "elapsed_s": float(m["elapsed"]),
        "eta_s": float(m["eta"]),
        "name": m["name"],
        "detail": m["detail"] or "",
    }


class RunsProgress:
    """Overall progress of ``total`` runs: runs done / total, elapsed time, ETA.

    Args:
        total: the number of runs (>= 1).
        stream: where to print (default stderr); on a terminal :meth:`done` first clears a
            progress line being redrawn in place.
        clock: seconds (default ``time.perf_counter``); the clock starts at construction.
        unit: what one of the ``total`` is called in the lines (a lowercase plural word):
            "runs" (``compare``: one per row), "configurations" (``sweep``: each trains all its
            seeds at once).
    """

    def __init__(
        self,
        total: int,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        unit: str = "runs",
    ):
        if total < 1:
            raise ValueError(f"RunsProgress: total must be >= 1 {unit}, found {total}")
        if not re.fullmatch(r"[a-z]+", unit):
            raise ValueError(f"RunsProgress: unit must be a lowercase word (e.g. 'runs'), found {unit!r}")
        self.unit = unit
        self.total, self.completed = int(total), 0
        self.stream = sys.stderr if stream is None else stream
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.clock = clock
        self.start = clock()

    def elapsed(self) -> float:
        """Seconds since construction."""
        return self.clock() - self.start

    def eta(self, partial: float = 0.0) -> float | None:
        """Seconds left, extrapolating the time per run so far (``partial``: the fraction done of
        the runs in progress, in runs); None before any progress."""
        done = self.completed + min(max(partial, 0.0), self.total - self.completed)
        if done <= 0:
            return None
        return self.elapsed() * (self.total - done) / done

    def status(self, partial: float = 0.0) -> str:
        """``overall 2.4/9 runs, elapsed 80 s, eta 150 s`` (the chunk line's last part)."""
        eta = self.eta(partial)
        done = self.completed + partial
        return f"overall {done:.1f}/{self.total} {self.unit}, elapsed {self.elapsed():.0f} s, " + (
            "eta -" if eta is None else f"eta {eta:.0f} s"
        )

    def done(self, name: str, detail: str = "") -> str:
        """Count one run as completed and print its line (returned): ``[k/N runs done] elapsed
        E s | eta T s | name | detail`` (``runs``: :attr:`unit`; :data:`RUN_LINE`)."""
        if self.completed >= self.total:
            raise ValueError(f"RunsProgress: all {self.total} {self.unit} are already done")
        self.completed += 1
        eta = self.eta() or 0.0
        line = (
            f"[{self.completed}/{self.total} {self.unit} done] elapsed {self.elapsed():.1f} s | eta {eta:.1f} s "
            f"| {name}"
        )
        if detail:
            line += f" | {detail}"
        self.stream.write(("\r\033[K" if self.tty else "") + line + "\n")
        self.stream.flush()
        return line
