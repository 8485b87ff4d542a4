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

import numpy as np


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


def _solution_dict(sol) -> dict:
    return {
        "reward": float(sol.reward),
        "costs": [float(c) for c in sol.costs],
        "multipliers": [float(m) for m in sol.multipliers],
        "method": sol.method,
        "oracle_calls": int(sol.oracle_calls),
        "solve_time_s": float(sol.solve_time),
    }


#: ``fhc-jax solve`` shorthand flags -> the environment settings they set
_SOLVE_FLAGS = {"size": "size", "horizon": "horizon", "alpha": "alpha", "layout_seed": "layout_seed", "slip": "slip"}


def _cmd_solve(args: argparse.Namespace) -> int:
    import fhc_jax as fhc
    from fhc_jax.experiment import config, rundir

    try:  # validation before any compilation
        entry = config.load_environment(args.env)
        values = dict(config.parse_assignment(t) for t in args.set or ())
        bad = [k for k in values if not k.startswith("env.")]
        if bad:
            raise config.ConfigError(f"fhc-jax solve takes only env.* settings, found {bad[0]!r}")
        values = {k[4:]: v for k, v in values.items()}
        values.update(
            {key: getattr(args, flag) for flag, key in _SOLVE_FLAGS.items() if getattr(args, flag) is not None}
        )
        settings = entry.validate(values)
        env, params = entry.make(settings)
        if not env.has_exact_model:
            raise config.ConfigError(f"environment {entry.name!r} has no exact model (has_exact_model is False)")
        if args.out:  # before solving: a file we cannot write is known now, not after the solve
            rundir.check_writable_file(args.out)
        plot_path = _check_tradeoff_args(args, env)
    except ValueError as err:
        return _error("solve", err)
    cmdp = env.to_cmdp(params)
    unconstrained = fhc.solve_unconstrained(cmdp)
    title = f"{entry.describe(settings)}: {config.env_repr(env)}"
    figure_title = f"{entry.describe(settings)}: exact trade-off"
    try:
        constrained = fhc.solve(cmdp, method=args.method)
    except fhc.InfeasibleConstraintError as err:
        print(f"fhc-jax solve: {err}", file=sys.stderr)
        if args.tradeoff is not None:  # the curve shows where the feasible thresholds are
            from fhc_jax.experiment import tradeoff_plot

            tradeoff_plot.report(cmdp, args.tradeoff, None, plot_path, figure_title)
        return 1
    alpha = np.asarray(cmdp.thresholds, dtype=np.float64)
    loss_line, loss, relative = _reward_loss(unconstrained, constrained)
    print(f"{title}, S={cmdp.num_states}, A={cmdp.num_actions}, H={cmdp.horizon}, alpha={alpha.tolist()}")
    print(f"{'optimum':<14}{'reward':>10}{'cost':>22}{'multiplier':>22}{'solve [s]':>11}")
    for name, sol in (("unconstrained", unconstrained), ("constrained", constrained)):
        print(
            f"{name:<14}{sol.reward:>10.4f}{np.array2string(sol.costs, precision=4):>22}"
            f"{np.array2string(sol.multipliers, precision=4):>22}{sol.solve_time:>11.3f}"
        )
    print(f"{loss_line} (method={constrained.method}, {constrained.oracle_calls} backward inductions)")
    curves = []
    if args.tradeoff is not None:
        from fhc_jax.experiment import tradeoff_plot

        curves = tradeoff_plot.report(cmdp, args.tradeoff, constrained, plot_path, figure_title)
    if args.out:
        rundir.write_json_atomic(
            Path(args.out),
            {
                "env": {"name": entry.name, **settings},
                "unconstrained": _solution_dict(unconstrained),
                "constrained": _solution_dict(constrained),
                "reward_loss": loss,
                "relative_reward_loss": relative,
                **({"tradeoff": [c.as_dict() for c in curves], "tradeoff_plot": str(plot_path)} if curves else {}),
                "machine": rundir.machine_info(),
            },
        )
        print(f"wrote {args.out}")
    return 0


def _reward_loss(unconstrained, constrained) -> tuple[str, float, float | None]:
    """The reward the constraints cost, J_u - J_c (>= 0 up to rounding), in words, with a
    relative figure (J_u - J_c) / |J_u| only where it means something (J_u != 0), for rewards
    of any sign. Returns (the summary line, J_u - J_c, the relative figure or None)."""
    j_u, j_c = float(unconstrained.reward), float(constrained.reward)
    loss = j_u - j_c
    what = "the constraint" if np.size(constrained.multipliers) == 1 else "the constraints"
    if not np.any(np.asarray(constrained.multipliers) > 0):
        return (
            f"{what} do{'es' * (what == 'the constraint')} not bind (multiplier 0): no reward lost",
            loss,
            (loss / abs(j_u) if j_u else None),
        )
    line = f"{what} cost{'s' * (what == 'the constraint')} {loss:.6g} reward (J_u - J_c = {j_u:.6g} - {j_c:.6g})"
    if j_u == 0:
        return f"{line}; no relative figure: the unconstrained reward J_u is 0", loss, None
    return f"{line}, {loss / abs(j_u):.1%} of |J_u|, the unconstrained reward's magnitude", loss, loss / abs(j_u)


def _check_tradeoff_args(args: argparse.Namespace, env):
    """``--tradeoff N`` and ``--plot`` before any computation: N in [2, 10000], a model with a
    constraint, a writable figure path (returned; None without ``--tradeoff``)."""
    from fhc_jax.experiment import config, rundir, tradeoff_plot

    if args.tradeoff is None:
        if args.plot is not None:
            raise config.ConfigError("--plot is the figure of --tradeoff; add --tradeoff [N] or drop --plot")
        return None
    if not 2 <= args.tradeoff <= 10_000:
        raise config.ConfigError(
            f"--tradeoff N: the number of thresholds must lie in [2, 10000], found {args.tradeoff}"
        )
    if env.num_constraints < 1:
        raise config.ConfigError("--tradeoff: the environment has no constraint, so there is no trade-off curve")
    path = Path(args.plot) if args.plot is not None else tradeoff_plot.default_plot_path(args.out)
    if path.suffix.lower() != ".png":
        raise config.ConfigError(f"--plot {path}: the figure is a PNG file; give a name ending in .png")
    return rundir.check_writable_file(path, "--plot")
