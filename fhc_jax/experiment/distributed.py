"""Runs over several processes and hosts (docs/distributed.md): joining JAX's distributed runtime,
agreeing on failures, gathering results, and reading the runtime's verdict when it ends a process.

A run over several processes (hosts, or one process per GPU) is the same program: every process
runs the same command, builds the same global inputs and joins JAX's distributed runtime
(:func:`initialize`, ``jax.distributed.initialize``); the runs axis of
:class:`~fhc_jax.experiment.runner.ChunkedTrainer` is sharded over the global mesh, each process
steps its addressable shard, and host-side reads (metrics, evaluations, the carry for
checkpoints and policies) gather the shards (:func:`to_host`,
``multihost_utils.process_allgather``), so every process holds the same results. Process 0
writes (:func:`is_writer`); :func:`agree` makes a failure of work only some processes did
(process 0's writes) an error on every process (:func:`share` also hands process 0's value to
all); a failed collective operation means a lost process, which JAX's runtime reports
(:func:`runtime_verdict` reads its log).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def is_key(x: Any) -> bool:
    """Whether ``x`` is a typed PRNG key array."""
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def to_host(x: Array) -> np.ndarray:
    """A global array as numpy on every process (gathers across hosts when needed)."""
    if is_key(x):
        x = jax.random.key_data(x)
    if jax.process_count() > 1 and not x.is_fully_addressable:  # several processes (tests/test_distributed.py)
        return _gather(x)
    return np.asarray(x)


#: seconds a process waits for every process to join (``jax.distributed``'s initialization_timeout)
INIT_TIMEOUT_S = 300
#: seconds without a heartbeat after which JAX's runtime declares a process lost and ends the others
HEARTBEAT_TIMEOUT_S = 30
#: seconds a process waits at the end for the others (``jax.distributed``'s shutdown timeout; the
#: processes leave their last agree() together)
SHUTDOWN_TIMEOUT_S = 60
#: seconds a process waits, after a collective operation failed, for JAX's runtime to end it
#: (it does so once the lost process misses its heartbeats) before it reports the failure itself
_VERDICT_MARGIN_S = 15
_MESSAGE_BYTES = 512

_cluster: dict[str, Any] = {}  # the Cluster this process joined (empty: none)


class DistributedError(RuntimeError):
    """A run over several processes cannot go on: another process failed or was lost
    (``fhc-jax`` exit status 1). ``process``: the index of the process concerned, or None."""

    def __init__(self, message: str, process: int | None = None):
        super().__init__(message)
        self.process = process


@dataclasses.dataclass(frozen=True)
class Cluster:
    """How this process joins a run over several processes (``jax.distributed``).

    Attributes:
        coordinator: ``HOST:PORT`` where process 0 serves the coordination service; None: from
            the environment (``JAX_COORDINATOR_ADDRESS``, or a cluster scheduler's variables,
            e.g. SLURM's, as ``jax.distributed.initialize()`` detects them).
        num_processes: N >= 1 (None: from the environment).
        process_id: this process's index in [0, N) (None: from the environment).
        init_timeout_s: seconds to wait for every process to join (>= 1).
        heartbeat_timeout_s: seconds without a heartbeat after which a process counts as lost
            and the others stop (>= 1).
    """

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    init_timeout_s: int = INIT_TIMEOUT_S
    heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S

    def check(self) -> Cluster:
        """Raises :class:`~fhc_jax.experiment.typed_settings.ConfigError` for a field out of range
        (naming the flag and the valid range); returns self."""
        from fhc_jax.experiment.typed_settings import ConfigError

        if self.coordinator is not None:
            host, sep, port = self.coordinator.rpartition(":")
            if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ConfigError(
                    f"--coordinator must be HOST:PORT with a port in [1, 65535], found {self.coordinator!r}"
                )
        if self.num_processes is not None and self.num_processes < 1:
            raise ConfigError(f"--num-processes must be an integer >= 1, found {self.num_processes}")
        if self.process_id is not None:
            top = "N - 1" if self.num_processes is None else str(self.num_processes - 1)
            if self.process_id < 0 or (self.num_processes is not None and self.process_id >= self.num_processes):
                raise ConfigError(f"--process-id must lie in [0, {top}] (N = --num-processes), found {self.process_id}")
        for flag, value in (("--init-timeout", self.init_timeout_s), ("--heartbeat-timeout", self.heartbeat_timeout_s)):
            if value < 1:
                raise ConfigError(f"{flag} must be an integer >= 1 (seconds), found {value}")
        return self

    def flags(self) -> list[str]:
        """The command-line flags that join this process to the same run again (for the
        resume command): the values given, and the timeouts where they differ from the
        defaults."""
        out: list[str] = []
        for flag, value in (
            ("--coordinator", self.coordinator),
            ("--num-processes", self.num_processes),
            ("--process-id", self.process_id),
        ):
            if value is not None:
                out += [flag, str(value)]
        if self.init_timeout_s != INIT_TIMEOUT_S:
            out += ["--init-timeout", str(self.init_timeout_s)]
        if self.heartbeat_timeout_s != HEARTBEAT_TIMEOUT_S:
            out += ["--heartbeat-timeout", str(self.heartbeat_timeout_s)]
        return out or ["--distributed"]


def initialize(cluster: Cluster) -> None:
    """Join the run: ``jax.distributed.initialize`` with the cluster's coordinator, process
    count and id (those not given come from the environment, as JAX detects them), the startup
    and heartbeat timeouts, and gloo as the CPU collectives (set before initialising; a choice
    already made is kept). Then one collective operation among all processes, so that the
    collectives' connections exist before the processes' work drifts apart. Call it before
    anything else uses JAX, once per process.

    Raises:
        ConfigError: a field out of range, or a coordinator, count or id neither given nor
            found in the environment.
    """
    from fhc_jax.experiment.typed_settings import ConfigError

    cluster.check()
    _check_port(cluster)
    if jax.config.jax_cpu_collectives_implementation != "mpi":  # gloo, unless MPI was chosen
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address=cluster.coordinator,
            num_processes=cluster.num_processes,
            process_id=cluster.process_id,
            initialization_timeout=cluster.init_timeout_s,
            heartbeat_timeout_seconds=cluster.heartbeat_timeout_s,
            shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_S,
        )
    except (ValueError, TypeError) as err:  # nothing given and nothing detected in the environment
        raise ConfigError(
            f"cannot join a run over several processes: {str(err).strip()} Give --coordinator "
            "HOST:PORT, --num-processes N and --process-id I, or run under a cluster scheduler "
            "that sets them (e.g. SLURM's srun)"
        ) from None
    except Exception as err:  # noqa: BLE001 (the runtime's own errors, e.g. JaxRuntimeError)
        from fhc_jax.experiment.rundir import one_line

        if "Failed to start RPC server" in str(err) or "address already in use" in str(err).lower():
            where = cluster.coordinator or "the coordinator address"
            raise ConfigError(
                f"--coordinator {where}: process 0 cannot serve JAX's coordination service there: the "
                "port is in use (by another program, or by process 0 of another run) or the address "
                "is not this host's, or a second process was given --process-id 0; choose a free "
                "port, the same in every process, and give each process its own --process-id"
            ) from None
        raise DistributedError(f"cannot join the run over several processes: {one_line(err)}") from None
    _cluster.update(cluster=cluster, process_id=jax.process_index(), num_processes=jax.process_count())
    _quietly(lambda: _gather(np.zeros(1, np.int32)))  # the collectives connect (gloo prints a line on stdout)


def _port_in_use(port: int) -> bool:
    """Whether a server could not listen on ``port`` on every interface of this host (as the
    coordination service does: IPv6 and IPv4, the address reusable)."""
    import socket

    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((address, port))
                return False
        except OSError as err:
            if err.errno == 98 or "in use" in str(err).lower():  # EADDRINUSE
                return True
            continue  # this family is not available here: try the other
    return False


def _check_port(cluster: Cluster) -> None:
    """Process 0 serves JAX's coordination service on the coordinator's port: refuse a port
    already in use in one line (JAX's runtime fails there with a raw error, or crashes)."""
    from fhc_jax.experiment.typed_settings import ConfigError

    if cluster.process_id != 0 or cluster.coordinator is None:
        return
    port = int(cluster.coordinator.rpartition(":")[2])
    if _port_in_use(port):
        raise ConfigError(
            f"--coordinator {cluster.coordinator}: port {port} is in use on this host (by another "
            "program, or by process 0 of another run, or a second process was given --process-id 0), "
            "so process 0 cannot serve JAX's coordination service there; choose a free port, the same "
            "in every process, and give each process its own --process-id"
        )


def _quietly(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` with file descriptor 1 (stdout) sent to /dev/null."""
    import os

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            return fn()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def joined() -> bool:
    """Whether this process joined a run over several processes (:func:`initialize`)."""
    return bool(_cluster) and jax.process_count() > 1


def is_writer() -> bool:
    """Whether this process writes the run's files (process 0; always true in one process)."""
    return jax.process_index() == 0


def _gather(x: Any) -> np.ndarray:
    """``process_allgather`` (tiled) of a global array, or stacked (leading axis N) for a host
    array; a failure means another process is gone (:func:`_peer_lost`)."""
    from jax.experimental import multihost_utils

    tiled = isinstance(x, jax.Array) and not x.is_fully_addressable
    try:
        return np.asarray(multihost_utils.process_allgather(x, tiled=tiled))
    except Exception as err:  # noqa: BLE001 (the runtime raises several kinds)
        _peer_lost(err)


def _peer_lost(err: BaseException) -> NoReturn:
    """A collective operation failed: another process is most likely gone. JAX's runtime ends
    this process once the lost one has missed its heartbeats (``fhc-jax`` then says which one);
    wait for that, then report the failure here (:class:`DistributedError`)."""
    timeout = _cluster.get("cluster", Cluster()).heartbeat_timeout_s
    deadline = time.monotonic() + timeout + _VERDICT_MARGIN_S
    while time.monotonic() < deadline:
        time.sleep(0.2)
    from fhc_jax.experiment.rundir import one_line

    raise DistributedError(
        f"a collective operation among the processes failed and JAX's runtime did not say why "
        f"within {timeout + _VERDICT_MARGIN_S} s ({one_line(err)})"
    ) from None


def agree(error: BaseException | None = None) -> None:
    """Every process calls it at the same point after work that only some of them did (process
    0's writes): when any process failed, every process raises, the failed ones their own
    ``error``, the others a :class:`DistributedError` naming the first failed process and its
    message. In one process: raises ``error`` if given."""
    if jax.process_count() == 1:
        if error is not None:
            raise error
        return
    from fhc_jax.experiment.rundir import one_line

    text = b"" if error is None else one_line(error, _MESSAGE_BYTES).encode("utf-8")[:_MESSAGE_BYTES]
    message = np.zeros(_MESSAGE_BYTES + 1, np.uint8)
    message[0] = error is not None
    message[1 : 1 + len(text)] = np.frombuffer(text, np.uint8)
    every = _gather(message)  # (N, 1 + bytes)
    if error is not None:
        raise error
    failed = np.flatnonzero(every[:, 0])
    if failed.size:
        k = int(failed[0])
        said = bytes(every[k, 1:]).rstrip(b"\0").decode("utf-8", "replace")
        raise DistributedError(f"process {k} of {jax.process_count()} failed: {said}", process=k)


class ConfigurationMismatch(ValueError):
    """The processes of one run were started with different configurations (a usage error,
    ``fhc-jax`` exit status 2, raised on every process with the same message)."""


#: at most this many differing settings are named
_NAMED_DIFFERENCES = 3


def agree_configuration(configuration: Mapping[str, Any] | None, error: BaseException | None = None) -> None:
    """Every process of a run calls it once, before its first other collective operation, with
    its full configuration (the validated settings and the command's mode flags, JSON-able) or
    the error that stopped it validating them. When any process failed, every process raises as
    :func:`agree` does; when the configurations differ, every process raises the same
    :class:`ConfigurationMismatch` naming the first differing settings, e.g. ``process 1 of 2
    was started with another configuration than process 0: settings.env.alpha: 3.0 (process 0)
    vs 4.0 (process 1); start every process with the same command (only --process-id
    differs)``. A configuration is compared by the SHA-256 of its canonical JSON; only when the
    hashes differ are the texts gathered. In one process: raises ``error`` if given."""
    if jax.process_count() == 1:
        if error is not None:
            raise error
        return
    agree(error)
    text = json.dumps(configuration, sort_keys=True, default=str, separators=(",", ":")).encode()
    digests = _gather(np.frombuffer(hashlib.sha256(text).digest(), np.uint8))  # (N, 32)
    differ = np.flatnonzero(np.any(digests != digests[0], axis=1))
    if differ.size == 0:
        return
    lengths = _gather(np.asarray([len(text)], np.int64))[:, 0]
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[: len(text)] = np.frombuffer(text, np.uint8)
    texts = _gather(padded)
    k = int(differ[0])
    first, other = (json.loads(bytes(texts[i, : int(lengths[i])]).decode("utf-8")) for i in (0, k))
    raise ConfigurationMismatch(
        f"process {k} of {jax.process_count()} was started with another configuration than process 0: "
        f"{configuration_difference(first, other, k)}; start every process with the same command (only "
        "--process-id differs)"
    )


def configuration_difference(first: Any, other: Any, k: int = 1) -> str:
    """The first settings in which two configurations (nested JSON data) differ, as
    ``key: A (process 0) vs B (process k)`` joined by "; " (at most 3, then "and N more")."""

    def flat(x: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(x, dict):
            out: dict[str, Any] = {}
            for key, v in x.items():
                out.update(flat(v, f"{prefix}{key}."))
            return out
        return {prefix.rstrip("."): x}

    a, b = flat(first), flat(other)
    keys = [key for key in sorted(set(a) | set(b)) if a.get(key, "<absent>") != b.get(key, "<absent>")]
    parts = [
        f"{key}: {a.get(key, '<absent>')!r} (process 0) vs {b.get(key, '<absent>')!r} (process {k})"
        for key in keys[:_NAMED_DIFFERENCES]
    ]
    more = len(keys) - _NAMED_DIFFERENCES
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "") if parts else "their configurations differ"


def share(value: int, error: BaseException | None = None) -> int:
    """Process 0's ``value`` on every process (an :func:`agree` point: raises everywhere when
    any process passes an ``error``)."""
    if jax.process_count() == 1:
        agree(error)
        return int(value)
    agree(error)
    return int(_gather(np.asarray([value], np.int64))[0, 0])


def gathered(tree: Any) -> Any:
    """``tree`` with every array that spans several processes gathered onto this one (typed
    keys stay keys); arrays this process holds entirely are returned as they are."""

    def leaf(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if is_key(x):
            return jax.random.wrap_key_data(jnp.asarray(to_host(x)), impl=jax.random.key_impl(x))
        return jnp.asarray(to_host(x))

    return jax.tree.map(leaf, tree)


#: what JAX's runtime writes when it ends a process because another one is lost (its fatal
#: log record), and how each case names the process
_UNHEALTHY = re.compile(r"tasks are unhealthy \(stopped sending heartbeats\):\s*\n?\s*([\d,\s]+)")
_HEARTBEAT = re.compile(r"Task (\d+) heartbeat timeout")
_TIMED_OUT = re.compile(r"timed out task names:\s*\n?\s*([\d,\s]+)")
_INCARNATION = re.compile(r"(\d+) unexpectedly tried to connect with a different incarnation")
FATAL = "Terminating process because the JAX distributed service detected fatal errors"


def runtime_verdict(
    log: str, process_id: int | None = None, num_processes: int | None = None, init_timeout_s: int | None = None
) -> str | None:
    """The process(es) that JAX's distributed runtime found missing when it ended this process,
    from the text of its log (what it wrote on stderr), as a short phrase: ``"process 1 of 2
    stopped sending heartbeats"``, ``"process 0 of 2 (the coordinator) is gone"``, ``"not every
    process joined within 300 s"``; None when the log holds no such verdict.

    Args:
        log: the runtime's log text (stderr of the process it ended).
        process_id: this process's index (for the wording; None: unknown).
        num_processes: N (for the wording; None: unknown).
        init_timeout_s: the startup timeout that was set (for the wording).
    """
    if FATAL not in log and "coordination_service" not in log:
        return None
    of = "" if num_processes is None else f" of {num_processes}"

    def named(ids: str) -> list[int]:
        return sorted({int(x) for x in re.findall(r"\d+", ids)})

    for pattern in (_UNHEALTHY, _HEARTBEAT):
        found = [i for m in pattern.finditer(log) for i in named(m.group(1))]
        found = sorted(set(found) - ({process_id} if process_id is not None else set()))
        if found:
            who = ", ".join(str(i) for i in found)
            return f"process{'es' if len(found) > 1 else ''} {who}{of} stopped sending heartbeats (died or hung)"
    m = _INCARNATION.search(log)
    if m is not None:  # a second process registered with an id already taken
        return (
            f"two processes were started with --process-id {m.group(1)} (or process {m.group(1)} was started "
            "again while the run started); give every process its own --process-id"
        )
    if "RegisterTask" in log:  # the startup's registration timed out
        within = "" if init_timeout_s is None else f" within {init_timeout_s} s"
        if num_processes == 2 and process_id is not None:
            other = 1 - process_id
            who = f"process {other} of 2" + (" (the coordinator)" if other == 0 else "")
            return f"{who} did not join{within}"
        return f"not every process{of} joined{within}"
    if "leader task" in log or "Failed to send RPC to coordination service" in log:
        return f"process 0{of} (the coordinator) is gone"
    m = _TIMED_OUT.search(log)
    if m is not None:
        found = sorted(set(named(m.group(1))) - ({process_id} if process_id is not None else set()))
        if found:
            return f"process{'es' if len(found) > 1 else ''} {', '.join(map(str, found))}{of} did not reach the end"
    if FATAL in log:
        status = log.split(FATAL, 1)[1].split("absl::Status:", 1)[-1].strip().splitlines()
        return f"JAX's distributed runtime stopped this process: {status[0].strip() if status else 'unknown cause'}"
    return None
