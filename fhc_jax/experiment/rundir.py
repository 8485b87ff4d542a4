"""The run directory: the files a run leaves behind, written atomically, one writer at a time,
and the one way to read them back.

Layout of ``runs/NAME``::

    config.json      everything needed to rerun (format version, algo, environment name and
                     settings, full learner config, seeds, chunk size, feasibility tolerance,
                     machine record, the command that reruns it); ``--resume`` checks against it
    metrics.csv      one row per (seed, iteration): training metrics of the iteration's batch
                     and, where evaluated (chunk boundaries, iteration 0 included), the exact
                     reward and costs of the policy after that many updates
                     (:mod:`fhc_jax.experiment.metrics_file`)
    summary.json     the judgement (fhc_jax.experiment.judge) per seed: exact reward/costs,
                     feasibility, slack, gap to the exact optimum, learned vs optimal multipliers;
                     worst-seed aggregates; machine record, timings
    policy.npz       final policy tables (R, H, S, A), the optimum's table, the per-stage
                     expected costs of both, and for spatial environments ``grid_shape`` (and
                     ``action_moves``): ``fhc-jax plot`` redraws from files alone
    checkpoints/     orbax checkpoints (``checkpoints/<iteration>/``), each with a manifest of
                     hashes (:mod:`fhc_jax.experiment.checkpoint`)
    rejected_checkpoints/  checkpoints found damaged or foreign on ``--resume``, moved aside
    plots/           PNG figures (:mod:`fhc_jax.experiment.plots`)
    tensorboard/, wandb/  experiment tracking, with ``--logger`` (:mod:`fhc_jax.experiment.tracking`)
    eval/            ``fhc-jax eval`` judgements of the final policies, one JSON per (changed)
                     environment (:mod:`fhc_jax.experiment.evaluation`); never touches the above
    .fhc-jax.lock    the writer's lock (:mod:`fhc_jax.experiment.writer_lock`): one process
                     writes a run directory

Every file is written to a temporary file in the same directory and renamed over the old one
(``os.replace``, atomic on POSIX), so an interrupted run never leaves a truncated file.

**One writer per directory** (:mod:`fhc_jax.experiment.writer_lock`): a second writer is
refused at once with the holder's process id and command line, and ``--overwrite`` never
deletes a directory another process holds.

**Format version.** config.json records :data:`FORMAT_VERSION`. :func:`read_config`, the one
reader of config.json (``--resume``, ``eval``, ``plot`` and :func:`read_run` go through it),
refuses a run directory without it or with another version in one line that gives the command
which trains the run again with this version; nothing is upgraded.

Every result file (summaries, sweeps, comparisons, benchmark JSON) records where it was produced
(:func:`machine_info`: versions, devices, CPU and load).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.experiment.config import EnvironmentImportError, ExperimentSpec, load_spec

CONFIG = "config.json"
METRICS = "metrics.csv"
SUMMARY = "summary.json"
POLICY = "policy.npz"
CHECKPOINTS = "checkpoints"
PLOTS = "plots"
REJECTED = "rejected_checkpoints"
LOCK = ".fhc-jax.lock"
#: the run directory format this version writes and reads (config.json's ``format_version``)
FORMAT_VERSION = 1


class RunDirectoryError(ValueError):
    """A run directory that cannot be used as asked (exists, differs, is missing files): a
    usage error (``fhc-jax`` exit status 2)."""


def settings_hash(settings: dict) -> str:
    """A short hash of a flat settings dict (canonical JSON): what a checkpoint's manifest
    records and ``--resume`` compares with config.json."""
    text = json.dumps(jsonable(settings), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# ----------------------------------------------------------------------------- where it ran


def versions() -> dict[str, str]:
    """Versions of fhc_jax, jax, jaxlib, numpy and Python."""
    import jax
    import jaxlib

    import fhc_jax

    return {
        "fhc_jax": fhc_jax.__version__,
        "jax": jax.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "jaxlib": jaxlib.__version__,
    }


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
        "device": {
            "platform": devs[0].platform,
            "kind": devs[0].device_kind,
            "count": len(devs),
            "process_count": jax.process_count(),
            "name": str(devs[0]),
        },
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count(), "usable_cores": usable},
        "platform": platform.platform(),
        "load_average": load_average(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def source_revision() -> dict[str, Any] | None:
    """The git commit of the checkout (read-only ``git`` calls) and the package files that
    differ from it or are untracked; None outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "fhc_jax"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "modified": [line[3:] for line in dirty.splitlines() if line.strip()]}


# ----------------------------------------------------------------------------- atomic writes


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` through a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, payload: Any) -> None:
    """JSON (indented, NaN written as null) through :func:`write_bytes_atomic`."""
    write_bytes_atomic(path, (json.dumps(jsonable(payload), indent=2) + "\n").encode())


def write_npz_atomic(path: str | Path, **arrays: np.ndarray) -> None:
    """A ``.npz`` archive through :func:`write_bytes_atomic`."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    write_bytes_atomic(path, buf.getvalue())


def jsonable(x: Any) -> Any:
    """``x`` made JSON-ready: numpy arrays and scalars as Python values, tuples as lists, keys as
    strings, non-finite floats as None."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; :class:`RunDirectoryError` when missing, unreadable or invalid."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirectoryError(f"{path} does not exist") from None
    except NotADirectoryError:
        raise RunDirectoryError(f"{path.parent} is not a directory") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunDirectoryError(f"{path} is not valid JSON ({one_line(err)}); restore it or rerun") from None
    except OSError as err:
        raise RunDirectoryError(f"cannot read {path}: {err.strerror or err}") from None


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file; :class:`RunDirectoryError` naming the file when it is
    missing or damaged (e.g. truncated)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise RunDirectoryError(f"{path} does not exist") from None
    except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError) as err:
        raise RunDirectoryError(f"{path} is damaged ({one_line(err)}); rerun the training to rewrite it") from None


def one_line(err: BaseException, limit: int = 300) -> str:
    """``"Type: first line of the message"`` of an exception, at most ``limit`` characters."""
    lines = [x.strip() for x in str(err).strip().splitlines() if x.strip()]
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------- writable files


def check_writable_file(path: str | Path, flag: str = "--out") -> Path:
    """Check, before any work, that a file can be written at ``path``: it is not a directory,
    and its nearest existing folder accepts a temporary file (created and removed at once;
    folders that do not exist yet are not created here).

    Raises:
        RunDirectoryError: naming the path and the reason.
    """
    path = Path(path)
    if path.is_dir():
        raise RunDirectoryError(f"{flag} {path} is a directory; give a file name")
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise RunDirectoryError(f"{flag} {path}: cannot write there ({err.strerror or err})") from None
    return path


# ----------------------------------------------------------------------------- directory checks


def _entries(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.name != LOCK] if path.is_dir() else []


def check(path: str | Path, *, resume: bool, overwrite: bool, can_resume: bool = True) -> Path:
    """:func:`prepare`'s checks without touching anything (call it before compiling).

    Raises:
        RunDirectoryError: see :func:`prepare`.
    """
    path = Path(path)
    if resume and overwrite:
        raise RunDirectoryError("--resume and --overwrite exclude each other")
    try:
        if path.exists() and not path.is_dir():
            raise RunDirectoryError(f"--out {path} exists and is not a directory")
        is_run = (path / CONFIG).is_file()
        non_empty = bool(_entries(path))
    except OSError as err:  # e.g. a path under a file, or no permission
        raise RunDirectoryError(f"--out {path}: cannot use it ({err.strerror or err})") from None
    if resume:
        if not is_run:
            raise RunDirectoryError(f"--resume: {path} is not a run directory (no {CONFIG})")
        return path
    if non_empty:
        if not is_run:
            raise RunDirectoryError(
                f"--out {path} is a non-empty directory that is not a run directory; choose another --out"
            )
        if not overwrite:
            hint = (
                "pass --resume to continue it or --overwrite to replace it"
                if can_resume
                else "pass --overwrite to replace it or choose another --out"
            )
            raise RunDirectoryError(f"--out {path} already holds a run; {hint}")
    return path


def prepare(path: str | Path, *, resume: bool, overwrite: bool, can_resume: bool = True) -> Path:
    """Check that ``path`` may be used and create it (hold
    :func:`~fhc_jax.experiment.writer_lock.locked` first when writing).

    * new or empty directory: fine;
    * an existing run (has config.json): ``resume`` continues it, ``overwrite`` deletes it
      (all but the lock file), neither is refused (nothing already written is lost by accident);
    * any other non-empty directory: refused (``--overwrite`` never deletes foreign files).

    Args:
        can_resume: whether the command has ``--resume`` (``fhc-jax sweep`` has not: the
            refusal's advice differs).
    Raises:
        RunDirectoryError: the refusals above, ``resume`` without a run to resume, or a path
            that cannot be created.
    """
    path = check(path, resume=resume, overwrite=overwrite, can_resume=can_resume)
    if resume:
        return path
    try:
        for entry in _entries(path):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunDirectoryError(f"--out {path}: cannot create or clear it ({err.strerror or err})") from None
    return path


def settings_difference(stored: dict, requested: dict) -> list[str]:
    """Keys whose values differ between two flat settings dicts, as "key: stored -> requested"."""
    out = []
    for k in sorted(set(stored) | set(requested)):
        a, b = stored.get(k, "<absent>"), requested.get(k, "<absent>")
        if jsonable(a) != jsonable(b):
            out.append(f"{k}: {a!r} -> {b!r}")
    return out


# ----------------------------------------------------------------------------- reading a run


def rerun_command(config: dict, path: str | Path) -> str:
    """The command that trains the run of ``config`` (config.json) again into ``path``."""
    cmd = config.get("rerun") if isinstance(config.get("rerun"), str) else "fhc-jax train ... --out runs/NAME"
    return cmd.replace("--out runs/NAME", f"--overwrite --out {path}")


def read_config(path: str | Path) -> dict:
    """config.json of the run directory ``path``, checked: the one reader of a run's config.

    Raises:
        RunDirectoryError: not a directory, no or damaged config.json, a sweep directory, or a
            run directory of another format version (the message gives the command that trains
            it again).
    """
    path = Path(path)
    config_path = path / CONFIG
    if not path.is_dir():
        raise RunDirectoryError(f"{path} is not a run directory (no such directory)")
    if not config_path.is_file():
        raise RunDirectoryError(
            f"{config_path} does not exist: {path} is not a run directory written by "
            "fhc-jax train (or its config.json was deleted: restore it from a copy)"
        )
    config = read_json(config_path)
    if not isinstance(config, dict) or not isinstance(config.get("settings"), dict):
        raise RunDirectoryError(
            f"{config_path} has no 'settings': it is damaged or not written by fhc-jax train; "
            "restore it from a copy or retrain"
        )
    if config.get("kind") == "sweep":
        raise RunDirectoryError(f"{path} is a sweep directory (fhc-jax sweep), not a run written by fhc-jax train")
    found = config.get("format_version")
    if found != FORMAT_VERSION:
        written = "an older fhc_jax (no format version)" if found is None else f"format version {found!r}"
        raise RunDirectoryError(
            f"{path} was written by {written}; this fhc_jax reads format version "
            f"{FORMAT_VERSION} only: train it again with {rerun_command(config, path)}"
        )
    return config


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """A run directory read and checked without compiling anything (:func:`read_run`).

    Attributes:
        path: the run directory. config: config.json as written. spec: the
            :class:`~fhc_jax.experiment.config.ExperimentSpec` rebuilt from its settings.
        env, params: the trained environment (through the registry) and its params.
        summary: summary.json, or None when absent or unreadable.
    """

    path: Path
    config: dict
    spec: ExperimentSpec
    env: Any
    params: Any
    summary: dict | None

    @property
    def module(self) -> Any:
        """The learner module."""
        return self.spec.module

    @property
    def exact(self) -> bool:
        """Whether the policies are tables over a tabular exact model (judged exactly)."""
        return judged_exactly(self.env)

    @property
    def rerun(self) -> str:
        """The command that trains this run again (config.json's ``rerun``, ``--out`` filled in)."""
        return rerun_command(self.config, self.path)

    @property
    def config_hash(self) -> str:
        """The hash of the settings as config.json stores them (what the checkpoints record)."""
        return settings_hash(self.config["settings"])


def read_run(path: str | Path) -> RunFiles:
    """Read a run directory's config.json (:func:`read_config`) and summary.json (if any) and
    rebuild its configuration and environment; nothing is compiled or written.

    Raises:
        RunDirectoryError: :func:`read_config`'s refusals, or settings this fhc_jax does not
            accept (naming the file and what to do).
    """
    path = Path(path)
    config = read_config(path)
    try:
        spec = load_spec(settings=config["settings"])
        env, params = spec.make_env()
    except EnvironmentImportError as err:  # the run is fine; its environment's module is not on the path
        raise RunDirectoryError(
            f"{path} was trained on an environment that cannot be imported here ({err}); make "
            "its module importable (install it, or add its folder to PYTHONPATH) and run the "
            "command again"
        ) from None
    except ValueError as err:
        raise RunDirectoryError(
            f"{path / CONFIG}: its settings are not valid for this version of fhc_jax "
            f"({err}); retrain the run with this version"
        ) from None
    try:  # only compared with, never needed: a missing or damaged summary.json does not stop a load
        summary = read_json(path / SUMMARY)
    except RunDirectoryError:
        summary = None
    return RunFiles(
        path=path,
        config=config,
        spec=spec,
        env=env,
        params=params,
        summary=summary if isinstance(summary, dict) else None,
    )
