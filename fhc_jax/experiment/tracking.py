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
import math
import netrc
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import urlparse

import numpy as np

from fhc_jax.experiment.metrics_file import metric_columns
from fhc_jax.experiment.rundir import one_line

#: logger name -> the package it imports
LOGGERS: dict[str, str] = {"tensorboard": "tensorboardX", "wandb": "wandb"}
#: what ``--logger`` accepts
CHOICES: tuple[str, ...] = (*LOGGERS, "none")
#: how to install the loggers' packages
INSTALL_HINT = "pip install 'fhc_jax[track]'"
#: W&B project when ``WANDB_PROJECT`` is not set
DEFAULT_PROJECT = "fhc_jax"

#: per-step values handed to :meth:`Tracker.log_metrics`: group (``seed_0``, ``speed``) -> name -> value
StepMetrics = Mapping[str, Mapping[str, float]]


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


def flatten_scalars(tree: Any, prefix: str = "", *, strings: bool = False) -> dict[str, Any]:
    """Numeric leaves of nested dicts/lists as ``prefix/key/0/...`` -> float (booleans as 0/1;
    None and non-finite values skipped); with ``strings`` also the string leaves."""
    out: dict[str, Any] = {}

    def walk(x: Any, path: str) -> None:
        if isinstance(x, Mapping):
            for k, v in x.items():
                walk(v, f"{path}/{k}" if path else str(k))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{path}/{i}" if path else str(i))
        elif isinstance(x, np.ndarray):
            walk(x.tolist(), path)
        elif isinstance(x, (bool, np.bool_)):
            out[path] = float(bool(x))
        elif isinstance(x, (int, float, np.integer, np.floating)):
            if math.isfinite(float(x)):
                out[path] = float(x)
        elif strings and isinstance(x, str):
            out[path] = x

    walk(tree, prefix)
    return out


def _summary_payload(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "machine"}


#: summary.json aggregates shown in TensorBoard's HParams dashboard next to the settings
HPARAM_METRICS = (
    "summary/aggregate/feasible_seeds",
    "summary/aggregate/exact_reward/mean",
    "summary/aggregate/exact_reward/min",
    "summary/aggregate/worst/fraction_of_optimum",
    "summary/aggregate/worst/relative_excess",
)


class TensorBoardTracker:
    """Event files in ``directory/tensorboard[/subdir]`` through ``tensorboardX.SummaryWriter``.

    One event per iteration holds every seed's values (one ``Summary`` with many values: a
    tenth of the cost of one ``add_scalar`` per value). ``start_iteration`` > 0 (a resumed run)
    sets ``purge_step`` so TensorBoard drops what an interrupted process logged after its last
    checkpoint.
    """

    def __init__(
        self,
        directory: Path,
        *,
        name: str,
        group: str | None = None,
        subdir: str | None = None,
        start_iteration: int = 0,
    ):
        from tensorboardX import SummaryWriter
        from tensorboardX.proto.summary_pb2 import Summary

        self._summary = Summary
        self.log_dir = Path(directory) / "tensorboard" / (subdir or "")
        self._writer = SummaryWriter(
            logdir=str(self.log_dir),
            max_queue=1000,
            flush_secs=30,
            purge_step=start_iteration + 1 if start_iteration > 0 else None,
        )
        self._hparams = False

    def _add(self, values: Mapping[str, float], step: int | None) -> None:
        summary = self._summary(value=[self._summary.Value(tag=t, simple_value=v) for t, v in values.items()])
        self._writer._get_file_writer().add_summary(summary, step)

    def log_config(self, config: Mapping[str, Any], hparams: Mapping[str, Any]) -> None:
        text = json.dumps(config, indent=2, default=str)
        self._writer.add_text("config", "\n".join("    " + line for line in text.splitlines()), 0)
        if hparams:
            from tensorboardX.summary import hparams as hparams_summary

            exp, ssi, _ = hparams_summary(dict(hparams), {k: 0.0 for k in HPARAM_METRICS})
            fw = self._writer._get_file_writer()
            fw.add_summary(exp)
            fw.add_summary(ssi)
            self._hparams = True

    def log_metrics(self, step: int, metrics: StepMetrics) -> None:
        self._add({f"{g}/{k}": v for g, d in metrics.items() for k, v in d.items()}, step)

    def log_summary(self, summary: Mapping[str, Any], step: int | None) -> None:
        payload = _summary_payload(summary)
        values = flatten_scalars(payload, "summary")
        if values:
            self._add(values, step)
        text = json.dumps(payload, indent=2, default=str)
        self._writer.add_text("summary", "\n".join("    " + line for line in text.splitlines()), step)
        if self._hparams:
            from tensorboardX.summary import hparams as hparams_summary

            _, _, sei = hparams_summary({}, {})
            self._writer._get_file_writer().add_summary(sei)

    def log_images(self, paths: Sequence[Path], step: int | None) -> None:
        from PIL import Image

        for p in paths:
            with Image.open(p) as img:
                arr = np.asarray(img.convert("RGB"))
            self._writer.add_image(f"plots/{Path(p).stem}", arr, step, dataformats="HWC")

    def close(self) -> None:
        self._writer.close()


def _netrc_has(host: str) -> bool:
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode() -> str | None:
    """The ``mode`` for ``wandb.init``: None (W&B decides) when ``WANDB_MODE`` is set or
    credentials are configured (``WANDB_API_KEY``, or a netrc entry for the host of
    ``WANDB_BASE_URL``, default api.wandb.ai); ``"offline"`` otherwise."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return None
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    return None if _netrc_has(host) else "offline"


#: wandb.Settings: no console capture, no system metrics or metadata, no git/code/requirements
#: capture, no output; short timeouts (fields unknown to the installed wandb are left out)
WANDB_SETTINGS: dict[str, Any] = {
    "console": "off",
    "silent": True,
    "quiet": True,
    "show_info": False,
    "show_warnings": False,
    "disable_git": True,
    "save_code": False,
    "disable_job_creation": True,
    "init_timeout": 20.0,
    "x_disable_stats": True,
    "x_disable_meta": True,
    "x_disable_machine_info": True,
    "x_save_requirements": False,
    "x_disable_viewer": True,
    "finish_timeout": 60.0,
}


class WandbTracker:
    """A W&B run in ``directory/wandb`` (offline unless credentials are configured:
    :func:`wandb_mode`); ``wandb.log`` per iteration with the iteration as ``step``."""

    def __init__(
        self,
        directory: Path,
        *,
        name: str,
        group: str | None = None,
        subdir: str | None = None,
        start_iteration: int = 0,
    ):
        import wandb

        self._wandb = wandb
        fields = getattr(wandb.Settings, "model_fields", None)
        settings = {k: v for k, v in WANDB_SETTINGS.items() if fields is None or k in fields}
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            dir=str(directory),
            project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            name=name,
            group=group,
            mode=wandb_mode(),
            reinit="create_new",
            settings=wandb.Settings(**settings),
        )
        self._step: int | None = None

    def log_config(self, config: Mapping[str, Any], hparams: Mapping[str, Any]) -> None:
        self.run.config.update(json.loads(json.dumps(config, default=str)), allow_val_change=True)

    def log_metrics(self, step: int, metrics: StepMetrics) -> None:
        self.run.log({f"{g}/{k}": v for g, d in metrics.items() for k, v in d.items()}, step=step)
        self._step = step

    def log_summary(self, summary: Mapping[str, Any], step: int | None) -> None:
        self.run.summary.update(flatten_scalars(_summary_payload(summary), "summary", strings=True))

    def log_images(self, paths: Sequence[Path], step: int | None) -> None:
        if paths:
            images = {f"plots/{Path(p).stem}": self._wandb.Image(str(p)) for p in paths}
            at = step if step is not None else self._step
            self.run.log(images, **({} if at is None else {"step": max(at, self._step or 0)}))

    def close(self) -> None:
        self.run.finish()


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
