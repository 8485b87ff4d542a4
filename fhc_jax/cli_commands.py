"""The ``fhc-jax`` sub-commands ``train``, ``plot``, ``eval``, ``sweep`` and ``compare``: each
validates its options before anything is compiled or written, runs, and prints what it wrote.
The parser, ``solve``, ``main`` (exit statuses) and the supervision of a command run over
several processes are :mod:`fhc_jax.cli`'s.

A failure the command reports itself is one line on stderr, ``fhc-jax COMMAND: error: ...``
(:func:`_error`), with exit status 2 for usage errors; over several processes, process 0
writes the files (:func:`_writer`) and every process agrees on failures
(:func:`fhc_jax.experiment.distributed.agree`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path


def _one_line(err: BaseException) -> str:
    lines = [x.strip() for x in str(err).strip().splitlines() if x.strip()]
    return " ".join(lines) if lines else type(err).__name__


def _error(command: str, err: BaseException, status: int = 2) -> int:
    print(f"fhc-jax {command}: error: {_one_line(err)}", file=sys.stderr)
    return status


def _refused(command: str, err: BaseException) -> int:
    """A usage error found before the command's first agreement among processes: one line,
    status 2; over several processes the others hear of it at their first agreement
    (:func:`fhc_jax.experiment.distributed.agree`) and end too, naming this process."""
    from fhc_jax.experiment import distributed

    if distributed.joined():
        with contextlib.suppress(BaseException):
            distributed.agree(err)
    return _error(command, err)


def _spec_from_args(args: argparse.Namespace, settings: dict | None = None):
    from fhc_jax.experiment.config import load_spec

    return load_spec(
        args.algo,
        config_file=args.config,
        overrides=args.set or (),
        seeds=args.seeds,
        observation=args.obs,
        env=args.env,
        settings=settings,
    )


def _cmd_train(args: argparse.Namespace) -> int:
    from fhc_jax.experiment import rundir, training

    config_given = any(x is not None for x in (args.algo, args.env, args.config, args.seeds, args.obs)) or bool(
        args.set
    )
    try:  # everything validated before compiling
        spec = None
        if not args.resume:
            spec = _spec_from_args(args)
        elif config_given:  # options on top of the stored run: train_run refuses any change
            spec = _spec_from_args(args, rundir.read_run(args.out).spec.settings())
    except ValueError as err:
        return _refused("train", err)
    try:  # train_run checks the rest (and, over several processes, that every process asks the same) first
        result = training.train_run(
            spec,
            args.out,
            resume=args.resume,
            overwrite=args.overwrite,
            quiet=args.quiet,
            max_chunks=args.max_chunks,
            plots=not args.no_plots,
            loggers=args.logger,
        )
    except ValueError as err:
        return _error("train", err)
    if result.get("complete") and _writer():
        print(f"wrote {args.out}")
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from fhc_jax.experiment import plots, rundir

    try:
        stages = None
        if args.stages:
            try:
                stages = [int(x) for x in args.stages.split(",")]
            except ValueError:
                raise ValueError(
                    f"--stages expects comma-separated stage numbers, e.g. 0,50,99; found {args.stages!r}"
                ) from None
        if not Path(args.run_dir).is_dir():
            raise rundir.RunDirectoryError(f"{args.run_dir} is not a run directory (not a directory)")
        written = plots.plot_run(args.run_dir, stages)
    except ValueError as err:
        return _error("plot", err)
    for path in written:
        print(path)
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from fhc_jax.experiment import evaluation

    say = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:  # everything is checked before anything is compiled
        result, out = evaluation.eval_run(args.run_dir, args.set or (), episodes=args.episodes, name=args.out, say=say)
    except ValueError as err:
        return _error("eval", err)
    print(evaluation.format_evaluation(result))
    print(f"wrote {out}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from fhc_jax.experiment import distributed, rundir, sweep, writer_lock

    writer = _writer()  # several processes: process 0 writes the files
    try:
        from fhc_jax.experiment import tracking

        loggers = tracking.resolve_loggers(args.logger)
        spec = _spec_from_args(args)
        grid = sweep.parse_grid(args.grid)
        sweep.grid_specs(spec, grid)  # validate every grid point before compiling
        rundir.check(args.out, resume=False, overwrite=args.overwrite, can_resume=False)
    except ValueError as err:
        return _refused("sweep", err)
    try:  # several processes: every process asks the same
        distributed.agree_configuration(
            {
                "command": "fhc-jax sweep",
                "--out": args.out,
                "--overwrite": args.overwrite,
                "--no-shard": args.no_shard,
                "--grid": grid,
                **spec.settings(),
            }
        )
    except ValueError as err:
        return _error("sweep", err)
    with contextlib.ExitStack() as held:
        try:
            error = None
            try:
                if writer:
                    held.enter_context(writer_lock.locked(args.out, f"fhc-jax sweep --out {args.out}"))
                    rundir.prepare(args.out, resume=False, overwrite=args.overwrite, can_resume=False)
                    rundir.write_json_atomic(Path(args.out) / rundir.CONFIG, sweep.sweep_config(spec, grid))
            except Exception as err:  # noqa: BLE001 (raised on every process by agree)
                error = err
            distributed.agree(error)
            result = sweep.run_sweep(
                spec,
                grid,
                shard=not args.no_shard,
                quiet=args.quiet or not writer,
                loggers=loggers if writer else None,
                out=args.out,
            )
        except ValueError as err:
            return _error("sweep", err)
        error = None
        if writer:
            try:
                sweep.write_sweep(args.out, spec, grid, result)
            except Exception as err:  # noqa: BLE001
                error = err
        distributed.agree(error)
    if writer:
        print(sweep.format_sweep(result))
        print(f"wrote {args.out}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from fhc_jax.experiment import compare, compare_report, distributed, rundir, study_file, writer_lock

    writer = _writer()  # several processes: process 0 writes the files and prints the progress
    try:  # validated before anything is compiled
        if args.seeds < 1:
            raise ValueError(f"--seeds must be an integer >= 1, found {args.seeds}")
        from fhc_jax.experiment import tracking

        loggers = tracking.resolve_loggers(args.logger)
        study = study_file.load_study(args.study)
        runs = study_file.select_runs(args.algos, args.inputs, study)
        specs = study_file.build_specs(runs, args.seeds, args.set or (), env=args.env, common=study.settings)
        name = study.name if args.name is None else args.name
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"--name must be a plain file name stem, found {name!r}")
        for ext in ("json", "md", "png"):
            rundir.check_writable_file(Path(args.out) / f"{name}.{ext}")
    except ValueError as err:
        return _refused("compare", err)
    try:  # several processes: every process asks the same
        distributed.agree_configuration(
            {
                "command": "fhc-jax compare",
                "--out": args.out,
                "--name": name,
                "--seeds": args.seeds,
                "rows": {r.name: s.settings() for r, s in zip(runs, specs)},
            }
        )
    except ValueError as err:
        return _error("compare", err)
    with contextlib.ExitStack() as held:
        try:
            error = None
            try:
                if writer:
                    held.enter_context(
                        writer_lock.locked(
                            args.out,
                            f"fhc-jax compare --out {args.out} --name {name}",
                            lock_file=writer_lock.shared_lock_file(args.out, name),
                        )
                    )
            except Exception as err:  # noqa: BLE001 (raised on every process by agree)
                error = err
            distributed.agree(error)
            result = compare.run_comparison(
                runs,
                seeds=args.seeds,
                overrides=args.set or (),
                env=args.env,
                study=study,
                quiet=args.quiet or not writer,
                loggers=loggers if writer else None,
                log_dir=args.out,
                log_name=name,
            )
        except ValueError as err:
            return _error("compare", err)
        error, paths = None, {}
        if writer:
            try:
                paths = compare_report.write_outputs(result, args.out, stem=name)
            except Exception as err:  # noqa: BLE001
                error = err
        distributed.agree(error)
    if writer:
        print(compare_report.format_markdown(result))
        for path in paths.values():
            print(f"wrote {path}")
    return 0


def _writer() -> bool:
    """Whether this process writes files and results (process 0 of a run over several)."""
    from fhc_jax.experiment import distributed

    return distributed.is_writer()
