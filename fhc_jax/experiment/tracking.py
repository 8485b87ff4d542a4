"""Experiment tracking: TensorBoard (``tensorboardX``) and Weights & Biases (``wandb``) loggers
for ``fhc-jax train``, ``sweep`` and ``compare`` (``--logger tensorboard|wandb|none``,
repeatable).

What a tracker records:

* the full resolved configuration: TensorBoard, a text summary of the config JSON plus the flat
  settings as hyperparameters (the HParams dashboard); W&B, the run's ``config``;
* per iteration (the step) and per seed, the numbers of metrics.csv under the same column
  names, as ``seed_{i}/reward``, ``seed_{i}/cost_0``, ``seed_{i}/multiplier_0``, ...,
  ``seed_{i}/exact_reward``, ``seed_{i}/exact_cost_0`` (exact, or Monte-Carlo on environments
  without a tabular exact model, at chunk boundaries and iteration 0), and per chunk
  ``speed/env_steps_per_s`` and ``speed/iterations_per_s`` (sweeps:
  ``config_{c}/seed_{s}/...``);
* the final summary (summary.json) as scalars ``summary/...`` (and, in TensorBoard, as text);
* the run's PNG figures (plots/) as images ``plots/<name>``.

Where: ``RUN/tensorboard/`` (``tensorboard --logdir RUN/tensorboard``) and ``RUN/wandb/``.
W&B runs offline (``RUN/wandb/offline-run-*``, upload later with ``wandb sync``) unless
credentials are configured (``WANDB_API_KEY``, or a ``~/.netrc`` entry for the W&B host); an
explicit ``WANDB_MODE`` is respected; ``WANDB_PROJECT`` names the project (default
``fhc_jax``).

**Never in the way of training.** The packages are imported lazily; asking for a logger whose
package is missing is a :class:`TrackingError` (a usage error, raised before anything is
compiled) naming the extra to install. Logging runs on one background thread fed between
compiled chunks with copies of the chunk's (small) metric arrays, so training waits for
neither serialization nor W&B's service (start-up included). Any exception inside a tracker
(a failed ``wandb.init``, an unreachable server, a full disk) turns into one warning on stderr
and disables that tracker; training and its results are unaffected. ``benchmarks/tracking_overhead.py``
measures the cost.
"""

from __future__ import annotations

import importlib.util
import json
import queue
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np

from fhc_jax.experiment.metrics_file import metric_columns
from fhc_jax.experiment.rundir import one_line
from fhc_jax.experiment.tracking_backends import (
    StepMetrics,
    TensorBoardTracker,
    WandbTracker,
)

#: logger name -> the package it imports
LOGGERS: dict[str, str] = {"tensorboard": "tensorboardX", "wandb": "wandb"}
#: what ``--logger`` accepts
CHOICES: tuple[str, ...] = (*LOGGERS, "none")
#: how to install the loggers' packages
INSTALL_HINT = "pip install 'fhc_jax[track]'"


class TrackingError(ValueError):
    """An unknown logger or a logger whose package is not installed: a usage error
    (``fhc-jax`` exit status 2), raised before anything is compiled."""


def resolve_loggers(loggers: str | Iterable[str] | None) -> tuple[str, ...]:
    """Validate a logger choice: ``None``, ``"none"``, ``"tensorboard"``, or an iterable of
    them (``("tensorboard", "wandb")``) -> the distinct loggers in order, ``()`` for none.

    Raises:
        TrackingError: an unknown name (the valid ones are listed), ``"none"`` together with a
            logger, or a logger whose package is not installed (names the extra to install).
    """
    if loggers is None:
        return ()
    names = [loggers] if isinstance(loggers, str) else list(loggers)
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or name not in CHOICES:
            raise TrackingError(f"logger: unknown logger {name!r}; valid: {', '.join(map(repr, CHOICES))}")
        if name != "none" and name not in out:
            out.append(name)
    if "none" in names and out:
        raise TrackingError(f"logger: 'none' cannot be combined with {', '.join(map(repr, out))}")
    for name in out:
        if importlib.util.find_spec(LOGGERS[name]) is None:
            raise TrackingError(
                f"logger {name!r} needs the package {LOGGERS[name]!r}, which is not installed; "
                f"install the tracking extra: {INSTALL_HINT}"
            )
    return tuple(out)


# ----------------------------------------------------------------------------- the trackers


class Tracker(Protocol):
    """What every logger backend implements (called from the tracking thread only)."""

    def log_config(self, config: Mapping[str, Any], hparams: Mapping[str, Any]) -> None:
        """The full configuration (nested JSON) and its flat settings (key -> scalar)."""

    def log_metrics(self, step: int, metrics: StepMetrics) -> None:
        """One iteration's values, group (``seed_0``) -> name (``reward``) -> value."""

    def log_summary(self, summary: Mapping[str, Any], step: int | None) -> None:
        """The final summary (summary.json's content)."""

    def log_images(self, paths: Sequence[Path], step: int | None) -> None:
        """PNG figures, tagged ``plots/<file stem>``."""

    def close(self) -> None:
        """Flush and release everything."""


#: logger name -> tracker class (constructor ``(directory, *, name, group, subdir, start_iteration)``)
TRACKERS: dict[str, Callable[..., Tracker]] = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker}


# ----------------------------------------------------------------------------- the fan-out


_STOP = object()


class Trackers:
    """The loggers of one run, fed between chunks and run on a background thread.

    Args:
        loggers: :func:`resolve_loggers`'s result (empty: every method is a no-op).
        directory: where the logs go (``directory/tensorboard[/subdir]``, ``directory/wandb``).
        name: the run's display name (W&B run name); group: W&B group; subdir: TensorBoard
            sub-folder (one TensorBoard run per ``fhc-jax compare`` learner).
        config: the full configuration (JSON-ready); hparams: flat settings (key -> value).
        run_labels: the tag group of each of the R runs (``seed_0`` ...), (R,).
        steps_per_iteration: environment steps of one iteration of one run (None: only
            iterations/s are logged).
        start_iteration, start_elapsed: where the run stands when tracking starts (a resume);
            ``start_iteration=None`` defers opening the trackers to :meth:`begin`.
        stream: where warnings go (default stderr).
        background: run the trackers on a thread (False: synchronously, in the caller).
        close_timeout: seconds :meth:`close` waits for the thread to finish.

    Attributes:
        cpu_s: CPU seconds spent by the tracking work (the thread's ``time.thread_time``);
        caller_s: seconds the caller spent in this object's methods (copying a chunk's rows,
            queueing): what training waits for, :meth:`close` aside.
    """

    def __init__(
        self,
        loggers: Sequence[str],
        directory: str | Path,
        *,
        name: str,
        config: Mapping[str, Any],
        hparams: Mapping[str, Any] | None = None,
        run_labels: Sequence[str] = (),
        steps_per_iteration: int | None = None,
        group: str | None = None,
        subdir: str | None = None,
        start_iteration: int | None = 0,
        start_elapsed: float = 0.0,
        stream: IO[str] | None = None,
        background: bool = True,
        close_timeout: float = 60.0,
    ):
        self.loggers = tuple(loggers)
        self.directory = Path(directory)
        self.run_labels = list(run_labels)
        self.steps_per_iteration = steps_per_iteration
        self.stream = stream
        self.background = background
        self.close_timeout = close_timeout
        # flat settings as hyperparameter values: scalars kept, lists and others as text, None dropped
        hparams = {
            str(k): v if isinstance(v, (bool, int, float, str)) else json.dumps(v, default=str)
            for k, v in (hparams or {}).items()
            if v is not None
        }
        self._opening = (dict(name=name, group=group, subdir=subdir), dict(config), hparams)
        self._next = 0
        self._last = (0, 0.0)
        self._step: int | None = None
        self._active: dict[str, Tracker] = {}
        self._begun = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue = queue.Queue()
        self.cpu_s = 0.0
        self.caller_s = 0.0
        if self.loggers and start_iteration is not None:
            self.begin(start_iteration, start_elapsed)

    def begin(self, iteration: int = 0, elapsed: float = 0.0) -> None:
        """Open the trackers (on the tracking thread) for a run that stands at ``iteration``
        updates after ``elapsed`` seconds of chunks (0 for a new run; a resumed run logs from
        ``iteration + 1``). Called once; later calls do nothing."""
        if not self.loggers or self._begun or self._closed:
            return
        self._begun = True
        self._next = iteration if iteration == 0 else iteration + 1
        self._last = (iteration, float(elapsed))
        opened, config, hparams = self._opening
        self._put(self._open, {**opened, "start_iteration": iteration}, config, hparams)
        if self.background:
            self._thread = threading.Thread(target=self._work, name="fhc-jax-tracking", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        """Whether the trackers are open: a logger was asked for, :meth:`begin` was called and
        :meth:`close` not yet."""
        return bool(self.loggers) and self._begun and not self._closed

    # ------------------------------------------------------------------ thread side
    def _put(self, fn: Callable, *args: Any) -> None:
        self._queue.put((fn, args))
        if not self.background:
            self._drain()

    def _drain(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            self._run(item)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            self._run(item)

    def _run(self, item: Any) -> None:
        fn, args = item
        t0 = time.thread_time()
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 (a bug of ours: stop tracking, never training)
            self._warn("tracking", err)
            self._active.clear()
        self.cpu_s += time.thread_time() - t0

    def _warn(self, name: str, err: BaseException) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        try:
            print(
                f"fhc-jax: warning: {name} logging disabled after an error ({one_line(err)}); "
                "training and its results are unaffected",
                file=stream,
                flush=True,
            )
        except Exception:  # noqa: BLE001 (a closed stream must not stop anything either)
            pass

    def _each(self, method: str, *args: Any) -> None:
        for name, tracker in list(self._active.items()):
            try:
                getattr(tracker, method)(*args)
            except Exception as err:  # noqa: BLE001 (one warning, then this tracker is off)
                self._active.pop(name, None)
                self._warn(name, err)
                try:
                    tracker.close()
                except Exception:  # noqa: BLE001
                    pass

    def _open(self, opened: dict[str, Any], config: dict[str, Any], hparams: dict[str, Any]) -> None:
        for name in self.loggers:
            try:
                self._active[name] = TRACKERS[name](self.directory, **opened)
            except Exception as err:  # noqa: BLE001 (e.g. wandb.init timed out)
                self._warn(name, err)
        self._each("log_config", config, hparams)

    def _log_rows(
        self,
        lo: int,
        hi: int,
        cols: list[tuple[str, np.ndarray]],
        exact: dict[int, tuple],
        speed: dict[str, float] | None,
    ) -> None:
        labels = self.run_labels
        columns = [(c, v.tolist()) for c, v in cols]  # (R, L) each, L = hi - max(lo, 1) + 1
        first = max(lo, 1)
        for it in range(lo, hi + 1):
            step: dict[str, dict[str, float]] = {}
            for r, label in enumerate(labels):
                row = {c: v[r][it - first] for c, v in columns} if it >= 1 else {}
                if it in exact:
                    reward, costs = exact[it]
                    row["exact_reward"] = reward[r]
                    row.update({f"exact_cost_{k}": c for k, c in enumerate(costs[r])})
                step[label] = row
            if speed is not None and it == hi:
                step["speed"] = speed
            self._each("log_metrics", it, step)

    # ------------------------------------------------------------------ caller side
    def log_chunk(self, state: Any) -> None:
        """Log the iterations of a :class:`~fhc_jax.experiment.runner.ChunkState` not logged yet
        (its training metrics, the exact evaluations among them, the chunk's speed). Only
        copies of the new rows are taken here; the rest happens on the tracking thread."""
        if not self.enabled:
            return
        lo, hi = self._next, int(state.iteration)
        if hi < lo:
            return
        t0 = time.perf_counter()
        first = max(lo, 1)
        cols = (
            [
                (c, np.array(state.metrics[k][(slice(None), slice(first - 1, hi)) + idx], np.float64))
                for c, k, idx in metric_columns(state.metrics)
            ]
            if hi >= first
            else []
        )
        exact = {
            int(it): (
                state.exact_reward[:, e].astype(np.float64).tolist(),
                state.exact_costs[:, e].astype(np.float64).tolist(),
            )
            for e, it in enumerate(state.exact_iterations)
            if lo <= it <= hi
        }
        speed = None
        last_it, last_s = self._last
        dt = float(state.elapsed_s) - last_s
        if hi > last_it and dt > 0:
            rate = (hi - last_it) / dt
            speed = {"iterations_per_s": rate}
            if self.steps_per_iteration:
                speed["env_steps_per_s"] = rate * self.steps_per_iteration * len(self.run_labels)
        self._last = (hi, float(state.elapsed_s))
        self._next = hi + 1
        self._step = hi
        self._put(self._log_rows, lo, hi, cols, exact, speed)
        if self.background:
            self.caller_s += time.perf_counter() - t0

    def log_summary(self, summary: Mapping[str, Any], step: int | None = None) -> None:
        """The final summary (a JSON-ready dict), at ``step`` (default: the last iteration logged)."""
        if self.enabled:
            self._put(
                self._each,
                "log_summary",
                json.loads(json.dumps(summary, default=str)),
                self._step if step is None else step,
            )

    def log_images(self, paths: Iterable[str | Path], step: int | None = None) -> None:
        """PNG figures (``plots/<stem>``), at ``step`` (default: the last iteration logged)."""
        paths = [Path(p) for p in paths]
        if self.enabled and paths:
            self._put(self._each, "log_images", paths, self._step if step is None else step)

    def close(self, timeout: float | None = None) -> None:
        """Flush and close every tracker; waits at most ``timeout`` seconds (default
        ``close_timeout``) for the tracking thread, then warns and leaves it behind."""
        if not self.enabled:
            self._closed = True
            return
        self._closed = True
        self._put(self._each, "close")
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join(self.close_timeout if timeout is None else timeout)
        if self._thread.is_alive():
            self._warn(
                ", ".join(self._active) or "tracking",
                TimeoutError(
                    f"the tracking thread did not finish within "
                    f"{self.close_timeout if timeout is None else timeout:g} s; its logs may be "
                    "incomplete"
                ),
            )

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def seed_labels(num_seeds: int) -> list[str]:
    """Tag groups of R seeds: ``seed_0`` ... ``seed_{R-1}``."""
    return [f"seed_{r}" for r in range(num_seeds)]


def slug(text: str) -> str:
    """``text`` as a folder name (``"PPO-Lagrangian (xy)"`` -> ``"PPO-Lagrangian_xy"``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"
