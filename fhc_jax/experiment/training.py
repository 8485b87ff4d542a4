"""``fhc-jax train``: one learner on R seeds, in chunks, into a run directory, resumable.

:func:`train_run` is the whole job; the CLI only parses arguments. Order of work: validate
the configuration and the directory (nothing compiled yet), write config.json, then the chunked
driver (:meth:`fhc_jax.experiment.runner.ChunkedTrainer.drive`: the newest intact checkpoint
restored when resuming, progress line, metrics.csv rewritten atomically after every chunk, a
checkpoint every ``run.checkpoint_every`` chunks and at the end), and finally judge the final
policies (:mod:`fhc_jax.experiment.judge`: exactly against ``fhc_jax.solve``'s optimum on a
tabular exact model, by Monte-Carlo against the environment's reference otherwise) and write
summary.json, policy.npz and the plots. Over several processes (docs/distributed.md) every
process trains and judges, process 0 alone locks the directory, writes its files and prints.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import jax
import numpy as np

from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.algos.core.scaffold import play_environment
from fhc_jax.algos.core.selection import describe_status
from fhc_jax.experiment import (
    checkpoint,
    config,
    distributed,
    fingerprint,
    judge,
    metrics_file,
    returned,
    rundir,
    tracking,
    writer_lock,
)
from fhc_jax.experiment.config import ExperimentSpec, load_spec
from fhc_jax.experiment.divergence import DivergenceError, divergence_hint
from fhc_jax.experiment.progress import env_steps_per_iteration
from fhc_jax.experiment.runner import ChunkedTrainer, ChunkState, seed_keys
from fhc_jax.experiment.typed_settings import ConfigError


def config_payload(spec: ExperimentSpec, env: Any = None, params: Any = None) -> dict[str, Any]:
    """The content of config.json; with the environment built from ``spec`` (``env``,
    ``params``), its fingerprint (``environment``,
    :func:`fhc_jax.experiment.fingerprint.environment_fingerprint`)."""
    if env is None:
        env, params = spec.make_env()
    return {
        "format_version": rundir.FORMAT_VERSION,
        "algo": spec.algo,
        "env": {"name": spec.env_name, **spec.env},
        "env_title": spec.env_title(),
        "learner": {k: v for k, v in spec.settings().items() if not k.startswith(("env.", "run.", "algo"))},
        "seeds": spec.seeds,
        "seed": spec.seed,
        "chunk_size": spec.chunk_size,
        "checkpoint_every": spec.checkpoint_every,
        "feasibility_tolerance": spec.feasibility_tolerance,
        "num_iterations": spec.num_iterations,
        "settings": spec.settings(),
        "machine": rundir.machine_info(),
        "rerun": rerun_command(spec),
        "environment": fingerprint.environment_fingerprint(env, params),
    }


def run_identity(
    spec: ExperimentSpec | None, out: Path, resume: bool, overwrite: bool, max_chunks: int | None
) -> dict[str, Any]:
    """What every process of a ``fhc-jax train`` over several processes must agree on
    (:func:`fhc_jax.experiment.distributed.agree_configuration`): every setting and the
    command's mode flags."""
    return {
        "command": "fhc-jax train",
        "--out": str(out),
        "--resume": resume,
        "--overwrite": overwrite,
        "--max-chunks": max_chunks,
        **({} if spec is None else spec.settings()),
    }


def rerun_command(spec: ExperimentSpec) -> str:
    """A ``fhc-jax train`` command line that reproduces ``spec`` (``--set`` for every setting
    that differs from the defaults); ``--out`` is left to fill in."""
    base = load_spec(spec.algo, env=spec.env_name).settings()
    sets = [
        f"--set {k}={_toml_value(v)}"
        for k, v in spec.settings().items()
        if k not in ("algo", "env.name", "run.seeds") and base.get(k) != v and v is not None
    ]
    head = f"fhc-jax train --algo {spec.algo} --env {spec.env_name} --seeds {spec.seeds}"
    return " ".join([head] + sets + ["--out runs/NAME"])


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_toml_value(x) for x in v) + "]"
    return repr(v)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`train_run` (still a ``KeyboardInterrupt``), with where the run stands.

    Attributes: out (the run directory), iteration (updates done when interrupted),
    checkpoint (the newest checkpoint's iteration, or None)."""

    def __init__(self, out: Path, iteration: int, checkpoint: int | None):
        super().__init__(f"interrupted at iteration {iteration}; continue with: fhc-jax train --resume --out {out}")
        self.out, self.iteration, self.checkpoint = out, iteration, checkpoint


def train_run(
    spec: ExperimentSpec | None,
    out: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    stream: IO[str] | None = None,
    quiet: bool = False,
    max_chunks: int | None = None,
    plots: bool = True,
    loggers: str | Sequence[str] | None = None,
) -> dict[str, Any]:
    """Train ``spec`` into the run directory ``out``.

    Args:
        spec: the experiment; None with ``resume`` takes it from ``out/config.json``.
        out: the run directory.
        resume: continue from the newest intact checkpoint in ``out`` (``spec``, if given, must
            equal the stored one); damaged or foreign checkpoints are reported and skipped.
        overwrite: replace an existing run in ``out``.
        stream: where progress goes (default stderr); quiet: no progress lines (warnings and
            checkpoint reports are still printed).
        max_chunks: stop after this many chunks (the run stays resumable): for budgets and tests.
        plots: draw the PNG figures at the end.
        loggers: experiment trackers, ``"tensorboard"``, ``"wandb"`` or several
            (:mod:`fhc_jax.experiment.tracking`; logs in ``out/tensorboard``, ``out/wandb``);
            None or ``"none"``: no tracking.
    Returns:
        summary.json's content (or ``{"complete": False, "iteration": n}`` when stopped early by
        ``max_chunks``).
    Raises:
        ValueError (ConfigError, RunDirectoryError): refused before anything is compiled.
        RunInUseError: another process writes ``out``.
        CheckpointError: resuming, and no checkpoint is intact.
        DivergenceError: a seed became non-finite; summary.json (``"complete": false``) records
            it with the finite seeds' results.
        TrainingInterrupted: Ctrl-C (a checkpoint of the last finished chunk is written first).
    """
    t_start = time.perf_counter()
    out = Path(out)
    stream = sys.stderr if stream is None else stream
    writer = distributed.is_writer()  # several processes: process 0 writes the files and prints the progress
    if not writer:
        loggers, quiet, plots = [], True, False
    error, stored = None, None
    try:  # everything checked before anything is compiled or written
        loggers = tracking.resolve_loggers(loggers)
        rundir.check(out, resume=resume, overwrite=overwrite)
        if resume:
            stored = rundir.read_run(out)
            _refuse_changes(stored.spec, spec or stored.spec, out)
            spec = stored.spec
        elif spec is None:
            raise ValueError("train_run: spec is required unless resume=True")
        env, params = spec.make_env()
        if resume:  # the same settings may build another environment once its code or data changed
            _refuse_environment_change(stored, env, params, out, stream if writer else None)
        learner = spec.module.make_learner(env, params, spec.learner)  # refuses an unsuitable env before any write
        _check_playable(spec, env, params, learner)
    except Exception as err:  # noqa: BLE001 (one process: raised here; several: on every process by the agreement)
        error = err
    # several processes: the same configuration everywhere, before the first other collective operation
    distributed.agree_configuration(run_identity(spec, out, resume, overwrite, max_chunks), error)
    with contextlib.ExitStack() as held:
        error = None
        try:
            if writer:  # several processes: process 0 alone locks, prepares and writes the directory
                command = "fhc-jax train " + ("--resume " if resume else "") + f"--out {out}"
                held.enter_context(writer_lock.locked(out, command))
                if resume:  # read again under the lock: what we resume is what no one else is writing
                    _refuse_changes(rundir.read_run(out).spec, spec, out)
                else:
                    rundir.prepare(out, resume=False, overwrite=overwrite)
                    rundir.write_json_atomic(out / rundir.CONFIG, config_payload(spec, env, params))
        except Exception as err:  # noqa: BLE001 (raised on every process by agree)
            error = err
        distributed.agree(error)  # the others start once process 0 has prepared the directory
        trackers = tracking.Trackers(
            loggers,
            out,
            name=out.name,
            config=rundir.read_json(out / rundir.CONFIG),
            hparams=spec.settings(),
            run_labels=tracking.seed_labels(spec.seeds),
            steps_per_iteration=env_steps_per_iteration(spec.learner, env.horizon),
            start_iteration=None,
            stream=stream,
        )
        try:
            result = _train(
                spec, out, resume, env, params, learner, stream, quiet, max_chunks, plots, t_start, trackers
            )
        except DivergenceError:
            trackers.log_summary(rundir.read_json(out / rundir.SUMMARY))
            trackers.close()
            raise
        except KeyboardInterrupt:
            trackers.close(timeout=5.0)
            raise
        except BaseException:
            trackers.close()
            raise
        trackers.log_summary(result)
        if plots and result.get("complete"):
            trackers.log_images(sorted((out / rundir.PLOTS).glob("*.png")))
        trackers.close()
        return result


def _check_playable(spec: ExperimentSpec, env, params, learner) -> None:
    """Without a tabular exact model a run is judged by playing its policies (``policy``): try
    that on the structure of the initial train state before anything is trained or written.

    Raises:
        ConfigError: the learner cannot play its policy in ``env`` (its reason, and what to do).
    """
    if judged_exactly(env):
        return
    template = ChunkedTrainer(learner, 1, 1, shard=False).template(seed_keys(spec.seed, 1))
    try:
        state = jax.tree.map(lambda x: x[0], template.carry.state)
        spec.module.policy(state, *play_environment(spec.module, state, env, params))
    except ValueError as err:
        raise ConfigError(
            f"{spec.algo} could train on {env.name} (no exact model, so judged by playing its policy) but could not "
            f"play the trained policy there: {str(err).rstrip('.')}; declare the environment's exact model "
            "(has_exact_model, "
            "to_cmdp) or choose another learner (--algo)"
        ) from None


def _refuse_environment_change(stored: rundir.RunFiles, env, params, out: Path, stream: IO[str] | None) -> None:
    """Refuse to resume a run whose environment, built from the same settings, is not the one
    it was trained on (:func:`fhc_jax.experiment.fingerprint.environment_difference`); say so
    where the run directory cannot tell (recorded before environments were fingerprinted).

    Raises:
        RunDirectoryError: naming what changed and what to do.
    """
    diff = fingerprint.environment_difference(stored.config.get("environment"), env, params)
    if diff == fingerprint.NOT_RECORDED:
        if stream is not None:
            print(
                f"fhc-jax train: note: {out / rundir.CONFIG} was {diff} that the environment is the one the run was "
                "trained on",
                file=stream,
                flush=True,
            )
    elif diff is not None:
        raise rundir.RunDirectoryError(
            f"--resume: the environment {stored.spec.env_name!r} built from {out / rundir.CONFIG}'s settings differs "
            f"from the one the run was trained on: {diff} (its code or data changed since); restore that "
            f"environment to continue the run, or train a new run on this one (--overwrite, or another --out)"
        )


def _refuse_changes(stored: ExperimentSpec, spec: ExperimentSpec, out: Path) -> None:
    diff = rundir.settings_difference(stored.settings(), spec.settings())
    if diff:
        raise rundir.RunDirectoryError(
            f"--resume: the requested configuration differs from the one in {out / rundir.CONFIG}: "
            + "; ".join(diff)
            + ". Resume without config options, or start a new run (--out)"
        )


def _train(
    spec, out, resume, env, params, learner, stream, quiet, max_chunks, plots, t_start, trackers
) -> dict[str, Any]:
    say = (lambda msg: None) if quiet else (lambda msg: print(msg, file=stream, flush=True))
    warn = lambda msg: print(f"fhc-jax train: {msg}", file=stream, flush=True)  # noqa: E731
    cmdp = env.to_cmdp(params) if judged_exactly(env) else None
    opt, infeasible = judge.solve_optimum(cmdp) if cmdp is not None else (None, None)
    if infeasible is not None:
        warn(f"warning: {infeasible}; training proceeds, but no policy can meet the threshold")
    # the settings as config.json stores them: what the checkpoints' manifests record
    config_hash = rundir.settings_hash(rundir.read_config(out)["settings"])
    trainer = ChunkedTrainer(learner, spec.seeds, spec.chunk_size)
    ckpt_dir = out / rundir.CHECKPOINTS
    saved: dict[str, int | None] = {"iteration": None}
    last: dict[str, Any] = {"state": None, "chunks": 0, "start": 0}

    def write_metrics(st: ChunkState) -> None:
        if not distributed.is_writer():
            return
        rundir.write_bytes_atomic(
            out / rundir.METRICS,
            metrics_file.metrics_csv(
                st.metrics, st.exact_iterations, st.exact_reward, st.exact_costs, st.iteration
            ).encode(),
        )

    def save(st: ChunkState) -> None:
        checkpoint.save(ckpt_dir, trainer, st, config_hash=config_hash)
        saved["iteration"] = st.iteration

    def restore(template: ChunkState) -> ChunkState | None:
        return checkpoint.restore_verified(
            ckpt_dir, trainer, template, config_hash=config_hash, num_iterations=spec.num_iterations, say=warn
        )

    def on_start(st: ChunkState) -> None:
        last["state"], last["start"] = st, st.iteration
        if resume and st.iteration == 0:
            say(f"{out}: no checkpoint yet, starting from iteration 0")
        elif resume:
            saved["iteration"] = st.iteration
            say(f"{out}: resuming from iteration {st.iteration} of {spec.num_iterations}")
        if st.iteration == 0:
            write_metrics(st)
            trackers.log_chunk(st)

    def on_chunk(st: ChunkState) -> None:
        last["state"], last["chunks"] = st, last["chunks"] + 1
        write_metrics(st)
        if st.divergence is not None:
            return  # never checkpoint non-finite values: a resume restarts from the last finite one
        finished = st.iteration >= spec.num_iterations
        stop = max_chunks is not None and last["chunks"] >= max_chunks
        periodic = spec.checkpoint_every > 0 and last["chunks"] % spec.checkpoint_every == 0
        if finished or stop or periodic:
            save(st)

    try:
        state = trainer.drive(
            seed_keys(spec.seed, spec.seeds),
            env=env,
            params=params,
            stream=stream,
            label=None if quiet else f"{spec.algo} on {spec.env_name}",
            trackers=trackers,
            restore=restore if resume else None,
            on_start=on_start,
            on_chunk=on_chunk,
            max_chunks=max_chunks,
        )
    except KeyboardInterrupt:
        st = last["state"]
        iteration = 0 if st is None else st.iteration
        # (several processes: no save, whose collectives the others, not interrupted, would not join)
        if (
            st is not None
            and st.divergence is None
            and iteration > (saved["iteration"] or 0)
            and jax.process_count() == 1
        ):
            try:  # keep the last finished chunk: the resume continues from here
                save(st)
            except BaseException:  # noqa: BLE001 (a second Ctrl-C, or a failed save: the older checkpoint stays)
                pass
        raise TrainingInterrupted(out, iteration, saved["iteration"]) from None
    if state.divergence is None and state.iteration < spec.num_iterations:
        say(
            f"{out}: stopped at iteration {state.iteration} of {spec.num_iterations}; "
            f"continue with: fhc-jax train --resume --out {out}"
        )
        return {"complete": False, "iteration": state.iteration}
    try:
        return _summarize(
            spec, out, state, env, params, cmdp, opt, infeasible, say, trainer, plots, t_start, last["start"], stream
        )
    except KeyboardInterrupt:
        raise TrainingInterrupted(out, state.iteration, saved["iteration"]) from None


def _written(write: Callable[[], None]) -> BaseException | None:
    """Run ``write`` on the writing process (process 0; the only one in a run of one process,
    where its exceptions propagate); returns the exception it raised on process 0 of several
    (for :func:`fhc_jax.experiment.distributed.agree`), else None."""
    if jax.process_count() == 1:
        write()
        return None
    if not distributed.is_writer():
        return None
    try:
        write()
    except Exception as err:  # noqa: BLE001 (raised on every process by agree)
        return err
    return None


def constraint_lines(statuses: list, thresholds: Any = None, multipliers: Any = None) -> list[str | None]:
    """Per seed, the learner's one line when its constraint is not yet met or its multiplier
    has not settled (:func:`fhc_jax.algos.core.selection.describe_status`), else None."""
    return [
        describe_status(st, thresholds, None if multipliers is None else multipliers[r, -1], label=f"seed {r}")
        for r, st in enumerate(statuses)
    ]


def status_fields(statuses: list) -> list[dict[str, Any]]:
    """summary.json's ``constraint_status``: per seed ``seed``, ``ok`` (constraint met and
    multiplier settled), ``status`` (the learner's one line,
    :meth:`fhc_jax.algos.core.selection.Status.describe`) and ``message`` (that line when not
    ok, else None)."""
    out = []
    for r, st in enumerate(statuses):
        ok = bool(np.asarray(st.ok))
        line = st.describe(label=f"seed {r}")
        out.append({"seed": r, "ok": ok, "status": line, "message": None if ok else line})
    return out


def _returned(spec, env, state, trainer, thresholds) -> list[dict[str, Any]]:
    """Per seed, the returned policy's iteration and in-training values beside the last
    iterate's (:func:`fhc_jax.experiment.returned.returned_policies`)."""
    from fhc_jax.experiment.distributed import to_host

    how = "exact" if judged_exactly(env) else f"monte-carlo ({int(spec.learner.eval_episodes)} episodes)"
    selected = to_host(state.carry.selection.iteration)[: spec.seeds]
    return returned.returned_policies(
        selected,
        state.exact_iterations,
        state.exact_reward,
        state.exact_costs,
        thresholds,
        how,
        estimate=lambda: trainer.last_iterate_estimates(state),
        eval_episodes=int(spec.learner.eval_episodes),
    )


def _summarize(
    spec, out, state, env, params, cmdp, opt, infeasible, say, trainer, plots, t_start, start_iteration, stream
) -> dict[str, Any]:
    """Judge the final (or, after a divergence, the finite seeds') policies and write
    summary.json, policy.npz and the plots; raises :class:`DivergenceError` after a divergence."""
    div = state.divergence
    thresholds = np.asarray(env.thresholds(params), np.float64)
    seeds = [r for r in range(spec.seeds) if div is None or r not in div.seeds]
    learned_nu = state.metrics["multipliers"][seeds, -1] if "multipliers" in state.metrics else None
    head = {
        "complete": div is None,
        "algo": spec.algo,
        "env": spec.env_name,
        "env_title": spec.env_title(),
        "num_iterations": spec.num_iterations,
    }
    feasibility = None if cmdp is None else judge.feasibility(infeasible)
    npz: dict[str, Any] = {"thresholds": thresholds}
    if div is not None:
        message = f"{div.describe()}; {divergence_hint(spec)}"
        result = {
            "complete": False,
            "reason": message,
            "divergence": div.as_dict(),
            "stopped_at_iteration": state.iteration,
            **head,
            "finite_seeds": seeds,
            "feasibility": feasibility,
        }
        judged = (
            None
            if not seeds
            else judge.judge(
                state.exact_reward[seeds, -1],
                state.exact_costs[seeds, -1],
                thresholds,
                optimum=opt,
                multipliers=learned_nu,
                tolerance=spec.feasibility_tolerance,
                cost_scale=None if cmdp is None else judge.cost_scale(cmdp),
            )
        )
    elif cmdp is None:  # no tabular exact model: Monte-Carlo judgement against the environment's reference
        result = head
        say(f"judging {spec.seeds} seeds by Monte-Carlo ({spec.eval_episodes} episodes each)")
        gathered = distributed.gathered(state.carry.selection.state)  # the policies the learner returns
        states = [jax.tree.map(lambda x, r=r: x[r], gathered) for r in range(spec.seeds)]
        play_env, play_params = play_environment(spec.module, states[0], env, params)  # the task, where it plays
        policies = [spec.module.policy(st, play_env, play_params) for st in states]
        judged = judge.judge_monte_carlo(
            play_env,
            play_params,
            policies,
            spec.eval_episodes,
            multipliers=learned_nu,
            tolerance=spec.feasibility_tolerance,
        )
    else:
        result = {**head, "feasibility": feasibility}
        policies = trainer.policy_tables(state)
        npz = {"policy": policies.astype(np.float32)}
        if env.is_spatial:  # what policy maps need (fhc_jax.experiment.plots)
            npz["grid_shape"] = np.asarray(env.grid_shape, np.int64)
            moves = config.load_environment(spec.env_name).action_moves
            if moves is not None and moves.shape[0] == env.num_actions:
                npz["action_moves"] = moves
        final = judge.evaluate_policies(cmdp, policies)  # the returned policies, judged exactly
        judged = judge.judge(
            final["reward"],
            final["costs"],
            thresholds,
            optimum=opt,
            multipliers=learned_nu,
            tolerance=spec.feasibility_tolerance,
            cost_scale=judge.cost_scale(cmdp),
        )
        npz.update(stage_costs=final["stage_costs"], stage_rewards=final["stage_rewards"], thresholds=thresholds)
        if opt is not None:
            npz.update(
                optimal_policy=opt.policy.astype(np.float32),
                optimal_stage_costs=opt.stage_costs,
                optimal_stage_rewards=opt.stage_rewards,
            )
    if judged is not None:
        result.update(judge.judgement_fields(judged))
    if div is None:  # the learner's own verdict: constraint met and multipliers settled (one line each)
        result["constraint_status"] = status_fields(trainer.status(state))
        picked = _returned(spec, env, state, trainer, thresholds)  # which iteration each seed returned
        for row, status, pick in zip(result["seeds"], result["constraint_status"], picked):
            row["status"], row["returned"] = status["status"], pick
    timing = {"wall_s": time.perf_counter() - t_start, "compile_s": trainer.compile_s, "train_s": state.elapsed_s}
    if div is not None:
        for row, r in zip(result.get("seeds", []), seeds):
            row["seed"], row["at_iteration"] = r, state.iteration
        result["diverged_seeds"] = [
            {"seed": s, "first_iteration": i, "quantity": q}
            for s, i, q in zip(div.seeds, div.iterations, div.quantities)
        ]
        result.update(machine=rundir.machine_info(), timing=timing)
        distributed.agree(_written(lambda: rundir.write_json_atomic(out / rundir.SUMMARY, result)))
        raise DivergenceError(message, div)
    timing["resumed_from_iteration"] = start_iteration
    steps = env_steps_per_iteration(spec.learner, env.horizon)
    if steps and state.elapsed_s > 0:
        timing["env_steps_per_s"] = steps * spec.num_iterations * spec.seeds / state.elapsed_s
    result.update(machine=rundir.machine_info(), timing=timing)

    def write() -> None:
        rundir.write_npz_atomic(out / rundir.POLICY, **npz)
        rundir.write_json_atomic(out / rundir.SUMMARY, result)
        if plots:
            from fhc_jax.experiment import plots as plotting

            plotting.plot_run(out)

    distributed.agree(_written(write))  # several processes: the others end once process 0 has written the run
    say(judge.format_table(judged, result.get("statistics")))
    say(returned.returned_line([row["returned"] for row in result["seeds"]]))
    # what says a result is not what it seems is printed even when quiet (process 0 only), one line per seed
    notes = [row["returned"]["message"] for row in result["seeds"] if row["returned"]["message"]]
    notes += [row["message"] for row in result["constraint_status"] if row["message"]]
    if distributed.is_writer():
        for line in notes:
            print(line, file=stream, flush=True)
    say(f"wrote {out}/ (wall {timing['wall_s']:.1f} s, compile {trainer.compile_s:.1f} s)")
    return result
