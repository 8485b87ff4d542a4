"""One writer per run directory: ``fhc-jax train``, ``eval``, ``sweep`` and ``compare`` hold an
exclusive ``fcntl.flock`` on the directory's lock file (:data:`fhc_jax.experiment.rundir.LOCK`)
for as long as they write (:func:`locked`); the operating system releases it when the process
ends, however it ends. A second writer is refused at once with the holder's process id, host
and command line (:class:`RunInUseError`), and ``--overwrite`` never deletes a directory
another process holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from fhc_jax.experiment.rundir import LOCK, RunDirectoryError


class RunInUseError(RuntimeError):
    """Another process holds the run directory's lock (``fhc-jax`` exit status 1)."""


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode() or "{}")
        return (
            f"process {info.get('pid', '?')} on {info.get('host', '?')} "
            f"({info.get('command', '?')}, since {info.get('started', '?')})"
        )
    except (OSError, ValueError):
        return "another process"


def holder(path: str | Path) -> str | None:
    """Who holds the writer's lock of the run directory ``path`` (pid, host, command), or None
    when nobody does; the lock is only tested, never kept."""
    target = Path(path) / LOCK
    try:
        import fcntl

        fd = os.open(target, os.O_RDONLY)
    except (ImportError, OSError):  # no lock file (or not POSIX): nobody holds it
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released when fd closes
        return None
    except BlockingIOError:
        return _holder(fd)
    finally:
        os.close(fd)


def shared_lock_file(path: str | Path, stem: str) -> Path:
    """A lock file outside ``path`` for outputs that share a folder with other files (``fhc-jax
    compare``'s ``NAME.*`` in ``benchmarks/results``): in the temporary directory, named by a
    hash of the absolute output path and stem, so no lock file is left in the folder."""
    key = hashlib.sha256(f"{Path(path).absolute()}/{stem}".encode()).hexdigest()[:20]
    return Path(tempfile.gettempdir()) / "fhc-jax-locks" / f"{key}.lock"


@contextlib.contextmanager
def locked(
    path: str | Path,
    command: str,
    *,
    name: str = LOCK,
    lock_file: str | Path | None = None,
    advice: str = "wait for it to finish, stop it, or choose another --out",
) -> Iterator[Path]:
    """Hold the exclusive writer's lock of directory ``path`` (created if missing) while the
    ``with`` block runs.

    The lock is ``fcntl.flock`` on ``path/name`` (or ``lock_file``), which records the holder (pid, host, command
    line); the operating system releases it when the process ends, so a killed writer never
    leaves a stale lock. The lock file itself is never deleted (deleting it would let two
    writers lock two different files).

    Raises:
        RunInUseError: another process holds the lock (the message names it).
        RunDirectoryError: ``path`` cannot be created or written.
    """
    path = Path(path)
    target = Path(lock_file) if lock_file is not None else path / name
    try:
        path.mkdir(parents=True, exist_ok=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise RunDirectoryError(f"--out {path}: cannot create or write it ({err.strerror or err})") from None
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover (not POSIX): no lock
            fcntl = None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunInUseError(f"{path} is in use by {_holder(fd)}; {advice}") from None
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": command,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(info).encode())
        yield path
    finally:
        os.close(fd)  # releases the flock
