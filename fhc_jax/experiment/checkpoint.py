"""Verified checkpoints of chunked runs with orbax (``orbax.checkpoint.CheckpointManager``).

A checkpoint holds the full carry of every run (train state: parameters, critics, optimizer
states, multipliers, step counter; and the loop's PRNG keys, stored as raw key data) plus
everything measured so far (per-iteration metrics, exact evaluations), so a resumed run
continues bit-identically and loses nothing. The carry is stored as a flat dict of its leaves
(``"carry/0"``, ``"carry/1"``, ...); the tree structure (including static fields such as the
feature spec) comes back from a template carry built by the same learner.

**Verification.** Every checkpoint ``checkpoints/<iteration>/`` carries a manifest,
``fhc_manifest.json``, written (atomically) after orbax has finished the checkpoint: the
iteration, the run's configuration hash (:func:`fhc_jax.experiment.rundir.settings_hash`) and,
for every stored array, its dtype, shape and CRC-32 checksum. :func:`restore_verified` checks a
checkpoint against its manifest before using it: the manifest exists and parses, the iteration
matches the directory and does not exceed the configuration's ``num_iterations``, the
configuration hash equals the run's, orbax reads every array, and every array's dtype, shape and
checksum match. The manifest is the commit marker: a checkpoint without one was interrupted while
saving and is never restored. CRC-32 detects every burst error
up to 32 bits and any other damage with probability 1 - 2^-32; it runs at memory speed, so
verification costs a small fraction of a checkpoint (docs/RELIABILITY.md).

**Fallback.** :func:`restore_verified` walks the checkpoints from the newest down and restores
the first intact one; the ones it rejected (damaged, foreign or unfinished) are reported by name
and moved to ``rejected_checkpoints/`` next to ``checkpoints/`` (never deleted: they may matter to
someone), so new checkpoints can take their place. Orbax's own temporary directories of an
interrupted save hold nothing usable and are deleted. When checkpoints exist but none is intact,
:class:`CheckpointError` says why for each and nothing is moved.

**Several processes.** A checkpoint holds the carry gathered from every process (all R runs,
unpadded), written by process 0 alone (orbax's ``MultiprocessingOptions`` with
``active_processes={0}``); process 0 picks the checkpoint to restore (and alone moves or deletes
anything), every process restores that one, verified, onto its own shard of the mesh. So a run
resumes with any number of processes or devices.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import signal
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fhc_jax.experiment import distributed, rundir
from fhc_jax.experiment.runner import ChunkedTrainer, ChunkState
from fhc_jax.experiment.typed_settings import flatten

#: the manifest's file name inside a checkpoint directory
MANIFEST = "fhc_manifest.json"
MANIFEST_VERSION = 1


class CheckpointError(RuntimeError):
    """No intact checkpoint to resume from (a runtime failure: ``fhc-jax`` exit status 1)."""


def _manager(directory: Path, max_to_keep: int = 2):
    import orbax.checkpoint as ocp

    logging.getLogger("absl").setLevel(logging.ERROR)  # orbax logs every save at INFO/WARNING
    if jax.process_count() == 1:
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False)
        return ocp.CheckpointManager(Path(directory).absolute(), options=options)
    # several processes: this process alone (process 0 writes, each process reads for itself),
    # so orbax's barriers involve no other process
    me = jax.process_index()
    Path(directory).mkdir(parents=True, exist_ok=True)  # orbax does not create it for a subset of processes
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep,
        create=False,
        enable_async_checkpointing=False,
        multiprocessing_options=ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me}),
    )
    return ocp.CheckpointManager(Path(directory).absolute(), options=options)


def _payload(trainer: ChunkedTrainer, state: ChunkState) -> dict[str, Any]:
    leaves = jax.tree.leaves(trainer.host_carry(state.carry))
    return {
        "carry": {str(i): np.asarray(x) for i, x in enumerate(leaves)},
        "metrics": {k: np.asarray(v) for k, v in state.metrics.items()},
        "exact_iterations": np.asarray(state.exact_iterations, np.int64),
        "exact_reward": np.asarray(state.exact_reward),
        "exact_costs": np.asarray(state.exact_costs),
        "iteration": np.asarray(state.iteration, np.int64),
        "elapsed_s": np.asarray(state.elapsed_s, np.float64),
    }


def digest(x: Any) -> dict[str, Any]:
    """dtype, shape and CRC-32 of an array's bytes (C order): one manifest entry."""
    a = np.ascontiguousarray(np.asarray(x))
    return {"dtype": a.dtype.str, "shape": list(a.shape), "crc32": zlib.crc32(memoryview(a).cast("B"))}


def manifest(payload: dict[str, Any], config_hash: str | None) -> dict[str, Any]:
    """The manifest of a checkpoint payload (see the module docstring)."""
    return {
        "version": MANIFEST_VERSION,
        "iteration": int(payload["iteration"]),
        "config_hash": config_hash,
        "arrays": {k: digest(v) for k, v in flatten(payload, sep="/").items()},
    }


def save(
    directory: str | Path,
    trainer: ChunkedTrainer,
    state: ChunkState,
    max_to_keep: int = 2,
    *,
    config_hash: str | None = None,
) -> Path:
    """Write a checkpoint of ``state`` as step ``state.iteration`` under ``directory``
    (synchronously; keeps the newest ``max_to_keep``), then its manifest. Returns the
    checkpoint's directory.

    Args:
        config_hash: the run's configuration hash, recorded for :func:`restore_verified`.
    """
    directory = Path(directory)
    payload = _payload(trainer, state)  # every process: the carry is gathered from all of them
    step_dir = directory / str(state.iteration)
    if jax.process_count() == 1:
        _write(directory, payload, config_hash, step_dir, state.iteration, max_to_keep)
        return step_dir
    error = None
    if distributed.is_writer():  # several processes: process 0 writes, the others learn whether it could
        try:
            _write(directory, payload, config_hash, step_dir, state.iteration, max_to_keep)
        except Exception as err:  # noqa: BLE001 (reported on every process)
            error = err
    distributed.agree(error)
    return step_dir


def _write(
    directory: Path, payload: dict[str, Any], config_hash: str | None, step_dir: Path, iteration: int, max_to_keep: int
) -> None:
    import orbax.checkpoint as ocp

    man = manifest(payload, config_hash)
    if step_dir.exists():  # an unfinished or rejected earlier attempt at this step (we hold the run's lock)
        shutil.rmtree(step_dir)
    with _interrupt_after():  # orbax's writer threads must not race a Ctrl-C's cleanup
        mngr = _manager(directory, max_to_keep)
        try:
            mngr.save(iteration, args=ocp.args.StandardSave(payload), force=True)
            mngr.wait_until_finished()
        finally:
            mngr.close()
        rundir.write_json_atomic(step_dir / MANIFEST, man)  # the commit marker: written last


@contextlib.contextmanager
def _interrupt_after() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that arrives inside the block and raise it as KeyboardInterrupt
    when the block has finished, so a checkpoint is either complete or not started (in the main
    thread; elsewhere signals are not delivered anyway). A save takes milliseconds."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def _steps(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted((int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)


def latest_iteration(directory: str | Path) -> int | None:
    """The iteration of the newest checkpoint that has a manifest (not yet verified), or None."""
    for step in _steps(Path(directory)):
        if (Path(directory) / str(step) / MANIFEST).is_file():
            return step
    return None


def _read_manifest(step_dir: Path) -> dict[str, Any]:
    path = step_dir / MANIFEST
    if not path.is_file():
        raise ValueError("no manifest (interrupted while saving, or written before checkpoints were verified)")
    try:
        man = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(man, dict) or not isinstance(man.get("arrays"), dict):
            raise ValueError("not a manifest")
        return man
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"damaged manifest ({type(err).__name__})") from None


def _check_manifest(man: dict, step: int, config_hash: str | None, num_iterations: int | None) -> None:
    if man.get("iteration") != step:
        raise ValueError(f"its manifest says iteration {man.get('iteration')!r}, the directory says {step}")
    if num_iterations is not None and step > num_iterations:
        raise ValueError(
            f"iteration {step} exceeds the configuration's num_iterations = {num_iterations}: it belongs to another run"
        )
    if config_hash is not None and man.get("config_hash") != config_hash:
        raise ValueError("written under another configuration (its configuration hash differs from config.json)")


def _verify_arrays(data: dict[str, Any], man: dict) -> None:
    flat = flatten(data, sep="/")
    expected = man["arrays"]
    missing = sorted(set(expected) - set(flat))
    if missing:
        raise ValueError(f"array {missing[0]!r} is missing")
    extra = sorted(set(flat) - set(expected))
    if extra:
        raise ValueError(f"array {extra[0]!r} is not in the manifest")
    for name in expected:
        got, want = digest(flat[name]), expected[name]
        if got["dtype"] != want.get("dtype") or got["shape"] != want.get("shape"):
            raise ValueError(
                f"array {name!r} is {got['dtype']} {tuple(got['shape'])}, the manifest says "
                f"{want.get('dtype')} {tuple(want.get('shape') or ())}"
            )
        if got["crc32"] != want.get("crc32"):
            raise ValueError(f"array {name!r} fails its checksum (the data is damaged)")


def _quiet_orbax_shutdown() -> None:
    """Orbax's asyncio loop, after a failed read of a damaged checkpoint, later reports
    "RuntimeError: Event loop is closed" through ``sys.unraisablehook`` (a traceback on stderr
    from a callback that no longer matters). Filter exactly that report; pass on every other."""
    import sys

    if getattr(sys.unraisablehook, "_fhc_filter", False):
        return
    previous = sys.unraisablehook

    def hook(unraisable):
        exc = unraisable.exc_value
        if isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed":
            return
        previous(unraisable)

    hook._fhc_filter = True
    sys.unraisablehook = hook


def _short(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    text = (lines[0] if lines else "").split(" [tensorstore_spec=")[0]
    if len(text) > 160:
        text = text[:157] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _state_from(data: dict[str, Any], trainer: ChunkedTrainer, template: ChunkState, where: str) -> ChunkState:
    template_leaves, treedef = jax.tree.flatten(template.carry)
    stored = data["carry"]
    if len(stored) != len(template_leaves):
        raise ValueError(
            f"checkpoint {where} holds {len(stored)} arrays, the learner's carry "
            f"has {len(template_leaves)}: it was written by another learner or config"
        )
    host = [np.asarray(stored[str(i)]) for i in range(len(template_leaves))]
    for i, (x, t) in enumerate(zip(host, template_leaves)):
        t_shape = np.shape(jax.random.key_data(t)) if jax.dtypes.issubdtype(t.dtype, jax.dtypes.prng_key) else t.shape
        if x.shape[1:] != tuple(t_shape[1:]) or x.shape[0] != trainer.num_runs:
            raise ValueError(
                f"checkpoint {where}: array {i} has shape {x.shape}, the learner expects "
                f"({trainer.num_runs}, {', '.join(map(str, t_shape[1:]))})"
            )
    carry = trainer.put_carry(jax.tree.unflatten(treedef, host), template.carry)
    return ChunkState(
        carry=carry,
        iteration=int(data["iteration"]),
        metrics={k: np.asarray(v) for k, v in data.get("metrics", {}).items()},
        exact_iterations=np.asarray(data["exact_iterations"]),
        exact_reward=np.asarray(data["exact_reward"]),
        exact_costs=np.asarray(data["exact_costs"]),
        elapsed_s=float(data["elapsed_s"]),
    )


def _restore_step(
    directory: Path,
    step: int,
    trainer: ChunkedTrainer,
    template: ChunkState,
    config_hash: str | None,
    num_iterations: int | None,
) -> ChunkState:
    """One checkpoint, verified; ValueError (or orbax's own exceptions) when it is not intact."""
    import orbax.checkpoint as ocp

    step_dir = directory / str(step)
    man = _read_manifest(step_dir)
    _check_manifest(man, step, config_hash, num_iterations)
    mngr = _manager(directory)
    try:
        data = mngr.restore(step, args=ocp.args.StandardRestore())
    finally:
        mngr.close()
    data = jax.tree.map(np.asarray, data)
    _verify_arrays(data, man)
    if int(data["iteration"]) != step:
        raise ValueError(f"it holds iteration {int(data['iteration'])}, not {step}")
    return _state_from(data, trainer, template, str(step_dir))


def restore_verified(
    directory: str | Path,
    trainer: ChunkedTrainer,
    template: ChunkState,
    *,
    config_hash: str | None = None,
    num_iterations: int | None = None,
    say: Callable[[str], None] | None = None,
) -> ChunkState | None:
    """The newest intact checkpoint under ``directory`` as a :class:`ChunkState` placed like
    ``template.carry``, or None when there is no checkpoint at all.

    Checkpoints are tried newest first; each one that fails verification (module docstring) is
    reported through ``say`` by name with the reason and, once an older one has been restored,
    moved to ``rejected_checkpoints/`` beside ``directory``. Orbax's
    temporary directories of interrupted saves are deleted.

    Args:
        config_hash: the run's configuration hash (None: not checked).
        num_iterations: the configuration's N; a checkpoint beyond it is refused (None: not checked).
    Several processes: process 0 walks the checkpoints as above (and alone moves or deletes
    anything), then every other process restores, verified, the checkpoint process 0 chose; a
    failure on any process is raised on every process.

    Raises:
        CheckpointError: checkpoints exist but none is intact (each one's reason is listed).
    """
    directory = Path(directory)
    say = say or (lambda msg: None)
    if jax.process_count() > 1:
        return _restore_everywhere(directory, trainer, template, config_hash, num_iterations, say)
    return _restore_newest(directory, trainer, template, config_hash, num_iterations, say)


def _restore_everywhere(
    directory: Path,
    trainer: ChunkedTrainer,
    template: ChunkState,
    config_hash: str | None,
    num_iterations: int | None,
    say: Callable[[str], None],
) -> ChunkState | None:
    state, error = None, None
    if distributed.is_writer():
        try:
            state = _restore_newest(directory, trainer, template, config_hash, num_iterations, say)
        except Exception as err:  # noqa: BLE001 (raised on every process by share)
            error = err
    step = distributed.share(-1 if state is None else state.iteration, error)
    error = None
    if not distributed.is_writer() and step >= 0:
        try:
            state = _restore_step(directory, step, trainer, template, config_hash, num_iterations)
        except Exception as err:  # noqa: BLE001
            error = CheckpointError(
                f"checkpoint {directory / str(step)} cannot be read on process "
                f"{jax.process_index()}: {_short(err)} (every process needs the run directory "
                "on a shared file system)"
            )
    distributed.agree(error)
    return state


def _restore_newest(
    directory: Path,
    trainer: ChunkedTrainer,
    template: ChunkState,
    config_hash: str | None,
    num_iterations: int | None,
    say: Callable[[str], None],
) -> ChunkState | None:
    if not directory.is_dir():
        return None
    _quiet_orbax_shutdown()
    for p in list(directory.iterdir()):
        if "orbax-checkpoint-tmp" in p.name:  # orbax's own temporary directory
            say(f"{p}: unfinished checkpoint (interrupted while saving), deleted")
            shutil.rmtree(p, ignore_errors=True)
    rejected: list[tuple[int, str]] = []
    restored = None
    for step in _steps(directory):
        try:
            restored = _restore_step(directory, step, trainer, template, config_hash, num_iterations)
            break
        except Exception as err:  # noqa: BLE001 (orbax raises many kinds on damaged files)
            mine = type(err) is ValueError and "\n" not in str(err) and len(str(err)) < 300  # our own checks
            reason = str(err) if mine else _short(err)
            say(f"checkpoint {directory / str(step)} rejected: {reason}")
            rejected.append((step, reason))
    if restored is None:
        if not rejected:
            return None
        raise CheckpointError(
            f"no intact checkpoint in {directory}: "
            + "; ".join(f"{step}: {reason}" for step, reason in rejected)
            + ". Start the run again with --overwrite (or from a copy)"
        )
    target = directory.parent / rundir.REJECTED
    for step, _ in rejected:
        target.mkdir(parents=True, exist_ok=True)
        dest = target / str(step)
        n = 1
        while dest.exists():
            dest, n = target / f"{step}.{n}", n + 1
        shutil.move(str(directory / str(step)), str(dest))
        say(f"moved the rejected checkpoint {step} to {dest}")
    return restored


def restore(
    directory: str | Path,
    trainer: ChunkedTrainer,
    template: ChunkState,
    iteration: int | None = None,
    *,
    config_hash: str | None = None,
    num_iterations: int | None = None,
) -> ChunkState:
    """The verified :class:`ChunkState` saved at ``iteration`` (default: the newest intact one,
    :func:`restore_verified`), placed on the devices like ``template.carry`` (e.g.
    ``trainer.init(keys)``).

    Raises:
        FileNotFoundError: no checkpoint. CheckpointError: none intact / the one asked for is not.
        ValueError: a checkpoint whose carry does not match the template (another learner or config).
    """
    directory = Path(directory)
    if iteration is None:
        state = restore_verified(directory, trainer, template, config_hash=config_hash, num_iterations=num_iterations)
        if state is None:
            raise FileNotFoundError(f"no checkpoint in {directory}")
        return state
    if not (directory / str(iteration)).is_dir():
        raise FileNotFoundError(f"no checkpoint {iteration} in {directory}")
    try:
        return _restore_step(directory, iteration, trainer, template, config_hash, num_iterations)
    except Exception as err:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {directory / str(iteration)} is not intact: {_short(err)}") from None
