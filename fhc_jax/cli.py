"""The ``fhc-jax`` command line.

* ``fhc-jax solve``: exact unconstrained and constrained optima of an environment (``--env``,
  default the paper's gridworld; ``--set env.KEY=VALUE``); ``--tradeoff [N]`` adds the exact
  trade-off curve (reward and multiplier against the threshold) as a table and a figure.
* ``fhc-jax train``: train a learner on several seeds in chunks into a run directory
  (config.json, metrics.csv, summary.json, policy.npz, checkpoints/, plots/); ``--resume``.
* ``fhc-jax plot RUN_DIR``: redraw a run directory's figures from its files.
* ``fhc-jax eval RUN_DIR``: judge a run's final policies again, exactly or by Monte-Carlo, on
  the trained environment or a changed one (``--set env.slip=0.2``) -> ``RUN_DIR/eval/NAME.json``.
* ``fhc-jax sweep``: a grid of numeric hyperparameters x seeds as one sharded program.
* ``fhc-jax compare [STUDY]``: a study of several learners described in a TOML file (default the
  paper's comparison, ``benchmarks/paper_comparison.toml``) -> a table, JSON and a Fig. 1-style
  figure.

``--env`` takes a registered name (:data:`fhc_jax.experiment.config.ENVIRONMENTS`) or
``module:ClassOrFactory`` of your own environment.

This module holds the parser (:func:`build_parser`) and :func:`main`; the
commands are :mod:`fhc_jax.cli_commands`.

``train``, ``sweep`` and ``compare`` run over several processes or hosts with ``--coordinator
HOST:PORT --num-processes N --process-id I`` (or ``--distributed``: from a cluster scheduler's
environment), the same command in every process (docs/distributed.md); such a command runs in a
worker process that this one supervises (:func:`_supervise`), so that a lost process ends the
others with one line naming it and the command that continues the run (exit status 1).

Every failure is one line on stderr, ``fhc-jax COMMAND: error: ...``, naming the bad field or
file and what to do, and the exit status says what kind it was (docs/RELIABILITY.md lists every
case):

* 0: done, results complete;
* 2: usage errors (unknown keys, wrong types, out-of-range values, unusable ``--out``, a run
  directory that would be overwritten, a changed configuration on ``--resume``), reported before
  anything is compiled or written;
* 1: runtime failures (divergence, no intact checkpoint, a run directory in use by another
  process, an infeasible ``solve``, file-system errors, internal errors: set
  ``FHC_JAX_TRACEBACK=1`` to see the traceback);
* 130: interrupted (Ctrl-C); ``train`` says how to continue.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from fhc_jax.cli_commands import (
    _cmd_compare,
    _cmd_eval,
    _cmd_plot,
    _cmd_solve,
    _cmd_sweep,
    _cmd_train,
    _error,
    _one_line,
)


def _add_logger_option(p: argparse.ArgumentParser) -> None:
    from fhc_jax.experiment.tracking import CHOICES, INSTALL_HINT

    p.add_argument(
        "--logger",
        action="append",
        choices=CHOICES,
        default=None,
        help="experiment tracking, repeatable (--logger tensorboard --logger wandb; default none): "
        "logs in OUT/tensorboard and OUT/wandb (offline without W&B credentials); needs "
        f"{INSTALL_HINT}",
    )


def _add_env_option(p: argparse.ArgumentParser, default: str | None = None) -> None:
    from fhc_jax.experiment.config import ENVIRONMENTS

    p.add_argument(
        "--env",
        default=default,
        metavar="NAME",
        help=f"environment: {', '.join(ENVIRONMENTS)} (default gridworld), or module:ClassOrFactory "
        "of your own (its keyword arguments are the env.* settings)",
    )


def _add_config_options(p: argparse.ArgumentParser) -> None:
    from fhc_jax.experiment.config import ALGORITHMS

    p.add_argument("--algo", choices=tuple(ALGORITHMS), default=None, help="learner (default fh-constrained)")
    _add_env_option(p)
    p.add_argument(
        "--obs",
        choices=("xy", "xyt"),
        default=None,
        help="network input of nn-constrained, ppo-lag and cpo (paper Env 1 / Env 2)",
    )
    p.add_argument("--seeds", type=int, default=None, help="number of seeds R (default 5)")
    p.add_argument("--config", default=None, help="TOML file of settings (see fhc_jax.experiment.config)")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set env.size=4 --set critic_lr.init=0.5 (repeatable)",
    )
    p.add_argument("--out", required=True, help="run directory, e.g. runs/demo")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def _add_cluster_options(p: argparse.ArgumentParser) -> None:
    from fhc_jax.experiment.distributed import HEARTBEAT_TIMEOUT_S, INIT_TIMEOUT_S

    g = p.add_argument_group("several processes or hosts (jax.distributed; run the same command in every process)")
    g.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="address of process 0, which serves JAX's coordination service there",
    )
    g.add_argument("--num-processes", type=int, default=None, metavar="N", help="number of processes N")
    g.add_argument("--process-id", type=int, default=None, metavar="I", help="this process's index in [0, N)")
    g.add_argument(
        "--distributed",
        action="store_true",
        help="join a run over several processes with everything the flags above leave out taken from "
        "the environment a cluster scheduler sets (SLURM, Open MPI, ...), as "
        "jax.distributed.initialize() detects it",
    )
    g.add_argument(
        "--init-timeout",
        type=int,
        default=INIT_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for every process to join (default {INIT_TIMEOUT_S})",
    )
    g.add_argument(
        "--heartbeat-timeout",
        type=int,
        default=HEARTBEAT_TIMEOUT_S,
        metavar="S",
        help="seconds without a heartbeat after which a process counts as lost and the others stop "
        f"(default {HEARTBEAT_TIMEOUT_S})",
    )


#: the options that make a command join a run over several processes (:func:`_supervise`)
_CLUSTER_FLAGS = ("--coordinator", "--num-processes", "--process-id", "--distributed")
#: set in the worker process that :func:`_supervise` starts
_WORKER_ENV = "FHC_JAX_DISTRIBUTED_WORKER"


def _cluster(args: argparse.Namespace):
    """The :class:`~fhc_jax.experiment.distributed.Cluster` the options ask for, or None (one process)."""
    from fhc_jax.experiment.distributed import Cluster

    if not any(
        getattr(args, name, None) not in (None, False)
        for name in ("coordinator", "num_processes", "process_id", "distributed")
    ):
        return None
    return Cluster(
        coordinator=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
        init_timeout_s=args.init_timeout,
        heartbeat_timeout_s=args.heartbeat_timeout,
    )


def _wants_cluster(argv: Sequence[str]) -> bool:
    """Whether ``argv`` names a cluster option (a scan before parsing, which imports JAX)."""
    return any(a.split("=", 1)[0] in _CLUSTER_FLAGS for a in argv if a.startswith("--"))


def _die_with_parent(parent: int) -> None:
    """Linux: this worker is killed when its supervising process ``parent`` dies (prctl
    PR_SET_PDEATHSIG), and ends now if it has died already."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(137)


#: a log record of JAX's C++ runtime (absl/glog format): severity, date, time, thread, file:line]
_RUNTIME_RECORD = re.compile(rb"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ([\w./-]+):\d+\] ")
#: the source files of the distributed runtime's records (others, e.g. XLA's compile-time alarms, pass)
_DISTRIBUTED_SOURCE = re.compile(rb"coordination|client\.h|distributed|preemption|gloo|add_port")


def _runtime_error(line: bytes) -> bool:
    """Whether ``line`` starts a record in which JAX's runtime reports a fatal error, or an
    error of the distributed runtime (what comes before it ends a process)."""
    m = _RUNTIME_RECORD.match(line)
    if m is None:
        return False
    return m.group(1) == b"F" or (m.group(1) == b"E" and _DISTRIBUTED_SOURCE.search(m.group(2)) is not None)


def _supervise(argv: Sequence[str]) -> int:
    """Run this command (which joins a run over several processes) in a worker process and say
    how it ended.

    JAX's distributed runtime ends a process whose peer is lost (missed heartbeats, the
    coordinator gone, a process that never joined) by aborting it from C++, which Python
    cannot catch. So the command runs in a child process (this interpreter forked, when no JAX
    backend has started in it yet, so nothing is imported twice; else a new interpreter); this
    one passes on its output, forwards SIGTERM and SIGHUP (Ctrl-C reaches the child from the
    terminal), holds back the runtime's log records once it reports an error, and when the
    runtime has ended the child, prints one line: which process was lost and the command that
    continues the run. The child dies with this process (Linux: :func:`_die_with_parent`)."""
    import signal

    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    if _forkable():
        pid = os.fork()
        if pid == 0:  # the worker: stderr into the pipe, then the command
            os.close(read)
            os.dup2(write, 2)
            os.close(write)
            os.environ[_WORKER_ENV] = str(os.getppid())
            os._exit(_work(argv))
        wait = lambda: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])  # noqa: E731
        send = lambda signum: os.kill(pid, signum)  # noqa: E731
    else:
        import subprocess

        env = dict(os.environ, **{_WORKER_ENV: str(os.getpid())})
        proc = subprocess.Popen([sys.executable, "-m", "fhc_jax.cli", *argv], env=env, stderr=write)
        wait, send = proc.wait, proc.send_signal
    os.close(write)

    def forward(signum, frame):  # noqa: ARG001
        with contextlib.suppress(ProcessLookupError):
            send(signum)

    # a second Ctrl-C, forwarded, would interrupt the child's way out
    handlers = {signal.SIGTERM: forward, signal.SIGHUP: forward, signal.SIGINT: lambda signum, frame: None}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    held: list[bytes] = []  # the runtime's records (and what follows them) after it reported an error
    try:
        with os.fdopen(read, "rb") as pipe:
            for line in iter(pipe.readline, b""):
                if (held or _runtime_error(line)) and not line.startswith(b"fhc-jax "):  # the command's own lines pass
                    held.append(line)
                else:
                    sys.stderr.write(line.decode("utf-8", "replace"))
                    sys.stderr.flush()
        code = wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log = b"".join(held).decode("utf-8", "replace")
    line = _fault_line(argv, log) if held and code not in (0, 2) else None
    # a usage error (status 2) is the command's own one line: the runtime's records before it are noise
    if (line is None and code != 2) or os.environ.get("FHC_JAX_TRACEBACK"):
        sys.stderr.write(log)
        sys.stderr.flush()
    if line is not None:
        print(line, file=sys.stderr, flush=True)
        return 1
    return code if code >= 0 else 128 - code


def _forkable() -> bool:
    """Whether this interpreter may fork the worker: POSIX, and no JAX backend (with its
    threads) started yet (the ``fhc-jax`` command; a Python caller that has used JAX gets a new
    interpreter instead)."""
    if not hasattr(os, "fork"):
        return False
    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:  # another JAX: the safe way
        return False
    return not backends_are_initialized()


def _work(argv: Sequence[str]) -> int:
    """The forked worker's whole life: the command, then JAX's distributed shutdown (what the
    interpreter's exit would do; a forked worker ends with ``os._exit``); its exit status."""
    code = 1
    try:
        code = main(argv)
    except SystemExit as err:  # argparse's usage errors
        code = err.code if isinstance(err.code, int) else (0 if err.code is None else 2)
    except BaseException:  # noqa: BLE001 (main reports its errors; anything else is a bug)
        import traceback

        traceback.print_exc()
    finally:
        try:
            import jax

            jax.distributed.shutdown()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
    return code


def _fault_line(argv: Sequence[str], log: str) -> str | None:
    """The one line for a worker that JAX's runtime ended (None: the log holds no verdict):
    which process is lost, where the run stands and the command that continues it."""
    args = build_parser().parse_args(list(argv))
    from fhc_jax.experiment import checkpoint, distributed, rundir

    cluster = _cluster(args)
    verdict = distributed.runtime_verdict(log, args.process_id, args.num_processes, args.init_timeout)
    if verdict is None:
        return None
    flags = " ".join(cluster.flags())
    each = " (each with its own --process-id)" if args.process_id is not None else ""
    if args.command == "train" and (Path(args.out) / rundir.CONFIG).is_file():
        last = checkpoint.latest_iteration(Path(args.out) / rundir.CHECKPOINTS)
        where = "no checkpoint yet" if last is None else f"the last checkpoint (iteration {last}) is intact"
        again = f"fhc-jax train --resume --out {args.out} {flags}"
        return (
            f"fhc-jax train: error: {verdict}; the run stopped ({where}); continue it on every process{each}: {again}"
        )
    started = Path(args.out).is_dir() and any(Path(args.out).iterdir())
    overwrite = args.command in ("sweep", "train") and "--overwrite" not in argv and started
    rerun = " ".join(["fhc-jax", *argv] + (["--overwrite"] if overwrite else []))
    what = {"train": "run", "sweep": "sweep", "compare": "comparison"}[args.command]
    return (
        f"fhc-jax {args.command}: error: {verdict}; the {what} {'stopped' if started else 'did not start'}; "
        f"start it again on every process{each}: {rerun}"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fhc-jax", description="Finite-horizon constrained RL in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("solve", help="exact optima of an environment (default the paper's gridworld)")
    _add_env_option(p, default="gridworld")
    p.add_argument("--set", action="append", metavar="env.KEY=VALUE", help="an environment setting (repeatable)")
    p.add_argument("--size", type=int, default=None, help="shorthand for --set env.size (gridworld: side, default 10)")
    p.add_argument("--horizon", type=int, default=None, help="shorthand for --set env.horizon (gridworld: 100)")
    p.add_argument("--alpha", type=float, default=None, help="shorthand for --set env.alpha (gridworld: 25)")
    p.add_argument("--layout-seed", type=int, default=None, help="shorthand for --set env.layout_seed (gridworld: 0)")
    p.add_argument("--slip", type=float, default=None, help="shorthand for --set env.slip (gridworld: 0.1)")
    p.add_argument(
        "--method",
        choices=("dual", "lp"),
        default="dual",
        help="dual: Lagrangian duality + DP (default); lp: HiGHS occupancy LP (slow)",
    )
    p.add_argument("--out", help="write the results as JSON to this file")
    p.add_argument(
        "--tradeoff",
        nargs="?",
        type=int,
        const=21,
        default=None,
        metavar="N",
        help="also the exact trade-off curve of each constraint: the optimum's reward, multiplier and "
        "reward lost at N thresholds (default 21) from the cheapest policy's cost to the unconstrained "
        "optimum's, printed with the threshold in use marked, and plotted (--plot)",
    )
    p.add_argument(
        "--plot",
        default=None,
        metavar="PATH",
        help="the trade-off figure (PNG) of --tradeoff (default: next to --out as NAME_tradeoff.png, "
        "else tradeoff.png in the working directory)",
    )
    p.set_defaults(func=_cmd_solve)

    p = sub.add_parser(
        "train",
        help="train a learner on several seeds into a run directory",
        description="Train in compiled chunks (progress, exact evaluation and checkpoints "
        "between chunks). Settings: algo, env.name and env.* (the environment's "
        "settings), run.* (seeds, seed, chunk_size, checkpoint_every, "
        "feasibility_tolerance) and the learner's Config fields (dotted for "
        "schedules: critic_lr.init).",
    )
    _add_config_options(p)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint")
    p.add_argument("--max-chunks", type=int, default=None, help="stop after this many chunks (resumable)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    _add_logger_option(p)
    _add_cluster_options(p)
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("plot", help="redraw the figures of a run directory")
    p.add_argument("run_dir")
    p.add_argument("--stages", default=None, help="stages of the policy maps, e.g. 0,50,99")
    p.set_defaults(func=_cmd_plot)

    p = sub.add_parser(
        "eval",
        help="judge a trained run's final policies, also on a changed environment",
        description="Load RUN_DIR's final checkpoint and judge every seed's final policy: exactly "
        "(gap to fhc_jax.solve's optimum) where the environment has a tabular exact "
        "model, else by Monte-Carlo with 95% intervals; --set env.* judges the same "
        "policies on a changed environment (robustness). Writes RUN_DIR/eval/NAME.json; "
        "nothing else in RUN_DIR changes.",
    )
    p.add_argument("run_dir", help="a run directory written by fhc-jax train")
    p.add_argument(
        "--set",
        action="append",
        metavar="env.KEY=VALUE",
        help="judge on a changed environment, e.g. --set env.slip=0.2 (repeatable)",
    )
    p.add_argument(
        "--episodes", type=int, default=None, help="Monte-Carlo episodes per seed (default the run's run.eval_episodes)"
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="NAME",
        help="file name in RUN_DIR/eval/ (default derived from the changes, e.g. slip=0.2)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("sweep", help="grid of numeric hyperparameters x seeds in one sharded program")
    _add_config_options(p)
    p.add_argument(
        "--grid",
        action="append",
        required=True,
        metavar="KEY=V1,V2,...",
        help="values of one numeric hyperparameter (repeatable: the grid is their product)",
    )
    p.add_argument("--no-shard", action="store_true", help="keep all runs on the first device")
    _add_logger_option(p)
    _add_cluster_options(p)
    p.set_defaults(func=_cmd_sweep)

    from fhc_jax.experiment.config import ALGORITHMS

    p = sub.add_parser(
        "compare",
        help="a study of several learners (default the paper's comparison) -> table, JSON, figure",
        description="Train every run of a study (a TOML file of rows: algo, label, set; default "
        "benchmarks/paper_comparison.toml, the paper's comparison) on several seeds each "
        "and judge them by the paper's metric (last 10,000 episodes) and exactly "
        "(fhc_jax.solve). Writes NAME.json, NAME.md (the table) and NAME.png (the "
        "figure) to --out.",
    )
    p.add_argument(
        "study",
        nargs="?",
        default=None,
        help="study file (default benchmarks/paper_comparison.toml, the paper's comparison)",
    )
    p.add_argument("--seeds", type=int, default=5, help="seeds per run, vmapped (default 5)")
    _add_env_option(p)
    p.add_argument(
        "--algos",
        nargs="+",
        choices=tuple(ALGORITHMS),
        default=None,
        help="only the study's runs of these learners (default all)",
    )
    p.add_argument(
        "--inputs",
        nargs="+",
        choices=("xy", "xyt"),
        default=None,
        help="only the study's runs with these network inputs (default all; runs without one are kept)",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="env.* (e.g. env.size=4), a setting of every learner that has it (num_iterations=20), "
        "or ALGO.key for one learner (cpo.num_iterations=50); repeatable",
    )
    p.add_argument("--out", default="benchmarks/results", help="output folder (default benchmarks/results)")
    p.add_argument(
        "--name",
        default=None,
        help="file name stem (default the study's name; the paper's comparison: reproduce_paper)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    _add_logger_option(p)
    _add_cluster_options(p)
    p.set_defaults(func=_cmd_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (module docstring). Usage errors of the
    argument syntax itself exit through argparse with status 2. A command that joins a run over
    several processes (``--coordinator``, ``--num-processes``, ``--process-id``,
    ``--distributed``) runs in a worker process that this one supervises (:func:`_supervise`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parent = os.environ.get(_WORKER_ENV, "")
    worker = parent.isdigit()
    if _wants_cluster(argv) and not worker:
        return _supervise(argv)
    if worker:
        _die_with_parent(int(parent))
    args = build_parser().parse_args(argv)
    from fhc_jax.experiment import checkpoint, config, distributed, divergence, training, writer_lock

    command = args.command
    cluster = _cluster(args)
    if cluster is not None:
        if not worker:  # an abbreviated option the scan above did not recognise
            return _supervise(argv)
        try:
            distributed.initialize(cluster)
        except ValueError as err:
            return _error(command, err)
        except distributed.DistributedError as err:
            return _error(command, err, 1)
    try:
        return args.func(args)
    except training.TrainingInterrupted as err:
        print(f"fhc-jax {command}: {err}", file=sys.stderr)
        return _interrupted(cluster)
    except KeyboardInterrupt:
        print(f"fhc-jax {command}: interrupted", file=sys.stderr)
        return _interrupted(cluster)
    except distributed.DistributedError as err:  # another process failed (its message), or one was lost
        lost = err.process is None and command == "train"
        hint = (
            f"; continue it on every process with: fhc-jax train --resume --out {args.out} " + " ".join(cluster.flags())
            if lost
            else ""
        )
        return _error(command, f"{err}{hint}", 1)
    except (
        writer_lock.RunInUseError,
        checkpoint.CheckpointError,
        divergence.DivergenceError,
        config.EnvironmentFailure,
    ) as err:
        return _error(command, err, 1)
    except ValueError as err:  # usage errors raised outside a command's own handler
        return _error(command, err, 2)
    except OSError as err:  # the file system: full disk, permissions, vanished files
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        return _error(command, f"{err.strerror or err}{where}", 1)
    except Exception as err:  # noqa: BLE001 (a bug: one line, the traceback on request)
        if os.environ.get("FHC_JAX_TRACEBACK"):
            raise
        return _error(
            command,
            f"internal error: {type(err).__name__}: {_one_line(err)} (set FHC_JAX_TRACEBACK=1 for the traceback)",
            1,
        )


def _interrupted(cluster) -> int:
    """Exit status 130; a process of a run over several ends at once (the others, not
    interrupted, would otherwise wait for it at the end), and the others report it lost."""
    import jax

    if cluster is not None and jax.process_count() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    return 130


if __name__ == "__main__":
    raise SystemExit(main())
