"""``fhc-jax train``: one learner on R seeds, in chunks, into a run directory, resumable.

:func:`train_run` is the whole job; the CLI only parses arguments. Order of work: validate
the configuration and the directory (nothing compiled yet), write config.json, compile,
restore the newest checkpoint when resuming, then run chunks (progress line, metrics.csv
rewritten atomically after every chunk, a checkpoint every ``run.checkpoint_every`` chunks and
at the end), and finally judge the final policies against the exact optimum
(:mod:`fhc_jax.experiment.judge`; environments that declare ``has_exact_model``) and write
summary.json, policy.npz and the plots.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import IO, Any, Sequence

import jax
import numpy as np

from fhc_jax.algos.learner import judged_exactly
from fhc_jax.experiment import checkpoint, config, judge, rundir, tracking
from fhc_jax.experiment.config import ExperimentSpec, load_spec
from fhc_jax.experiment.rundir import machine_info
from fhc_jax.experiment.progress import Progress, env_steps_per_iteration
from fhc_jax.experiment.config import load_algorithm
from fhc_jax.experiment.runner import ChunkedTrainer, ChunkState, seed_keys


def config_payload(spec: ExperimentSpec) -> dict[str, Any]:
    """The content of config.json."""
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
        "machine": machine_info(),
        "rerun": rerun_command(spec),
    }


def rerun_command(spec: ExperimentSpec) -> str:
    """A ``fhc-jax train`` command line that reproduces ``spec`` (``--set`` for every setting
    that differs from the defaults); ``--out`` is left to fill in."""
    base = load_spec(spec.algo, env=spec.env_name).settings()
    sets = [f"--set {k}={_toml_value(v)}" for k, v in spec.settings().items()
            if k not in ("algo", "env.name", "run.seeds") and base.get(k) != v and v is not None]
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


class DivergenceError(RuntimeError):
    """Training stopped because a seed's values became non-finite (``fhc-jax`` exit status 1);
    ``divergence`` is the :class:`~fhc_jax.experiment.runner.Divergence`."""

    def __init__(self, message: str, divergence: Any):
        super().__init__(message)
        self.divergence = divergence


_STEP_SIZE = re.compile(r"(_step\.init|_lr|learning_rate|^logit_step)$")


def divergence_hint(spec: ExperimentSpec) -> str:
    """The likely cause of a divergence: the run's step sizes, changed ones first."""
    now = spec.settings()
    base = load_spec(spec.algo, env=spec.env_name).settings()
    keys = [k for k in now if _STEP_SIZE.search(k) and isinstance(now[k], (int, float)) and not isinstance(now[k], bool)]
    changed = [k for k in keys if base.get(k) != now[k]]
    shown = [f"{k} = {now[k]:g} (default {base.get(k):g})" for k in changed] or [f"{k} = {now[k]:g}" for k in keys]
    if not shown:
        return "likely cause: a step size too large for this problem"
    which = "the changed step size(s)" if changed else "the step sizes"
    return (f"likely cause: a step size too large for this problem; {which}: {', '.join(shown)}. "
            "Start a new run with smaller step sizes")


def feasibility_check(cmdp, say) -> tuple[Any, dict[str, Any]]:
    """Solve ``cmdp`` exactly before training: (the :class:`~fhc_jax.experiment.judge.Optimum`
    or None, summary.json's ``feasibility`` record). An infeasible threshold is reported through
    ``say`` with ``fhc-jax solve``'s message (training proceeds)."""
    opt, err = judge.solve_optimum(cmdp)
    if err is not None:
        say(f"warning: {err}; training proceeds, but no policy can meet the threshold")
    return opt, judge.feasibility(err)


def train_run(spec: ExperimentSpec | None, out: str | Path, *, resume: bool = False, overwrite: bool = False,
              stream: IO[str] | None = None, quiet: bool = False, max_chunks: int | None = None,
              plots: bool = True, loggers: str | Sequence[str] | None = None) -> dict[str, Any]:
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
    import sys

    t_start = time.perf_counter()
    loggers = tracking.resolve_loggers(loggers)  # a usage error before anything else
    out = Path(out)
    stream = sys.stderr if stream is None else stream
    say = (lambda msg: None) if quiet else (lambda msg: print(msg, file=stream, flush=True))
    warn = lambda msg: print(f"fhc-jax train: {msg}", file=stream, flush=True)  # noqa: E731
    if resume:
        rundir.check(out, resume=True, overwrite=False)
        stored = rundir.read_run(out).spec
        if spec is not None:
            _refuse_changes(stored, spec, out)
        spec = stored
    elif spec is None:
        raise ValueError("train_run: spec is required unless resume=True")
    else:
        rundir.check(out, resume=False, overwrite=overwrite)
    module = load_algorithm(spec.algo)
    env, params = spec.make_env()
    learner = module.make_learner(env, params, spec.learner)  # refuses an unsuitable env before any write
    with rundir.locked(out, "fhc-jax train " + ("--resume " if resume else "") + f"--out {out}"):
        if resume:  # read again under the lock: what we resume is what no one else is writing
            stored = rundir.read_run(out).spec
            _refuse_changes(stored, spec, out)
        else:
            rundir.prepare(out, resume=False, overwrite=overwrite)
            rundir.write_json_atomic(out / rundir.CONFIG, config_payload(spec))
        trackers = tracking.Trackers(loggers, out, name=out.name, config=rundir.read_json(out / rundir.CONFIG),
                                     hparams=spec.settings(), run_labels=tracking.seed_labels(spec.seeds),
                                     steps_per_iteration=env_steps_per_iteration(spec.learner, env.horizon),
                                     start_iteration=None, stream=stream)
        return _tracked(trackers, out, plots, lambda: _train_locked(
            spec, out, resume, module, env, params, learner, say, warn, stream, quiet, max_chunks, plots, t_start,
            trackers))


def _tracked(trackers: tracking.Trackers, out: Path, plots: bool, train) -> dict[str, Any]:
    """Run ``train()`` and log its summary (and figures) to ``trackers``, closing them however it ends."""
    try:
        result = train()
    except DivergenceError:
        try:
            trackers.log_summary(rundir.read_json(out / rundir.SUMMARY))
        except ValueError:  # no readable summary.json: the divergence is what matters
            pass
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


def _refuse_changes(stored: ExperimentSpec, spec: ExperimentSpec, out: Path) -> None:
    diff = rundir.settings_difference(stored.settings(), spec.settings())
    if diff:
        raise rundir.RunDirectoryError(
            f"--resume: the requested configuration differs from the one in {out / rundir.CONFIG}: "
            + "; ".join(diff) + ". Resume without config options, or start a new run (--out)")


def _train_locked(spec, out, resume, module, env, params, learner, say, warn, stream, quiet, max_chunks, plots,
                  t_start, trackers) -> dict[str, Any]:
    cmdp = env.to_cmdp(params) if judged_exactly(env) else None
    thresholds = np.asarray(env.thresholds(params), np.float64)
    # the stored settings: what the checkpoints' manifests record
    config_hash = rundir.settings_hash(rundir.read_json(out / rundir.CONFIG)["settings"])
    opt, feasibility = feasibility_check(cmdp, warn) if cmdp is not None else (None, None)
    trainer = ChunkedTrainer(learner, spec.seeds, spec.chunk_size)
    ckpt_dir = out / rundir.CHECKPOINTS
    saved = {"iteration": None}
    last = {"state": None}
    try:
        state = trainer.init(seed_keys(spec.seed, spec.seeds))
        last["state"] = state
        if resume:
            restored = checkpoint.restore_verified(ckpt_dir, trainer, state, config_hash=config_hash,
                                                   num_iterations=spec.num_iterations, say=warn)
            if restored is None:
                say(f"{out}: no checkpoint yet, starting from iteration 0")
            else:
                state = restored
                saved["iteration"] = state.iteration
                say(f"{out}: resuming from iteration {state.iteration} of {spec.num_iterations}")
        last["state"] = state
        start_iteration = state.iteration
        trackers.begin(state.iteration, state.elapsed_s)
        progress = None if quiet else Progress(f"{spec.algo} on {spec.env_name}", spec.num_iterations, spec.seeds,
                                               env_steps_per_iteration(spec.learner, env.horizon), thresholds,
                                               stream, start_iteration, state.elapsed_s, exact=cmdp is not None)
        chunks = {"n": 0}

        def write_metrics(st: ChunkState) -> None:
            rundir.write_bytes_atomic(out / rundir.METRICS, rundir.metrics_csv(
                st.metrics, st.exact_iterations, st.exact_reward, st.exact_costs, st.iteration).encode())

        def save(st: ChunkState) -> None:
            checkpoint.save(ckpt_dir, trainer, st, config_hash=config_hash)
            saved["iteration"] = st.iteration

        def on_chunk(st: ChunkState) -> None:
            chunks["n"] += 1
            last["state"] = st
            if progress is not None:
                progress(st)
            write_metrics(st)
            trackers.log_chunk(st)
            if st.divergence is not None:
                return  # never checkpoint non-finite values: a resume restarts from the last finite one
            finished = st.iteration >= spec.num_iterations
            stop = max_chunks is not None and chunks["n"] >= max_chunks
            periodic = spec.checkpoint_every > 0 and chunks["n"] % spec.checkpoint_every == 0
            if finished or stop or periodic:
                save(st)

        if state.iteration == 0:
            write_metrics(state)
            trackers.log_chunk(state)
        state = trainer.run(state, on_chunk=on_chunk, max_chunks=max_chunks)
    except KeyboardInterrupt:
        st = last["state"]
        iteration = 0 if st is None else st.iteration
        if st is not None and st.divergence is None and iteration > (saved["iteration"] or 0):
            try:  # keep the last finished chunk: the resume continues from here
                save(st)
            except BaseException:  # noqa: BLE001 (a second Ctrl-C, or a failed save: the older checkpoint stays)
                pass
        raise TrainingInterrupted(out, iteration, saved["iteration"]) from None

    if state.divergence is not None:
        return _diverged(spec, out, state, cmdp, thresholds, opt, feasibility, say, trainer, t_start)
    if state.iteration < spec.num_iterations:
        say(f"{out}: stopped at iteration {state.iteration} of {spec.num_iterations}; "
            f"continue with: fhc-jax train --resume --out {out}")
        return {"complete": False, "iteration": state.iteration}
    try:
        return _finish(spec, out, state, module, env, params, cmdp, thresholds, opt, feasibility, say, trainer, plots,
                       t_start, start_iteration)
    except KeyboardInterrupt:
        raise TrainingInterrupted(out, state.iteration, saved["iteration"]) from None


def _diverged(spec, out, state, cmdp, thresholds, opt, feasibility, say, trainer, t_start) -> dict[str, Any]:
    """summary.json of a diverged run (``"complete": false``, the reason, the finite seeds'
    judgement at the iteration where training stopped); raises :class:`DivergenceError`."""
    div = state.divergence
    message = f"{div.describe()}; {divergence_hint(spec)}"
    finite = [r for r in range(spec.seeds) if r not in set(div.seeds)]
    result: dict[str, Any] = {"complete": False, "reason": message, "divergence": div.as_dict(),
                              "stopped_at_iteration": state.iteration, "algo": spec.algo, "env": spec.env_name,
                              "env_title": spec.env_title(), "num_iterations": spec.num_iterations,
                              "finite_seeds": finite, "feasibility": feasibility}
    if finite:
        learned_nu = state.metrics["multipliers"][finite, -1] if "multipliers" in state.metrics else None
        judged = judge.judge(state.exact_reward[finite, -1], state.exact_costs[finite, -1], thresholds,
                             optimum=opt, multipliers=learned_nu, tolerance=spec.feasibility_tolerance)
        result.update(judge.judgement_fields(judged))
        for row, r in zip(result["seeds"], finite):
            row["seed"] = r
            row["at_iteration"] = state.iteration
    result["diverged_seeds"] = [{"seed": s, "first_iteration": i, "quantity": q}
                                for s, i, q in zip(div.seeds, div.iterations, div.quantities)]
    result["machine"] = machine_info()
    result["timing"] = {"wall_s": time.perf_counter() - t_start, "compile_s": trainer.compile_s,
                        "train_s": state.elapsed_s}
    rundir.write_json_atomic(out / rundir.SUMMARY, result)
    raise DivergenceError(message, div)


def _finish(spec, out, state, module, env, params, cmdp, thresholds, opt, feasibility, say, trainer, plots, t_start,
            start_iteration) -> dict[str, Any]:
    result: dict[str, Any] = {"complete": True, "algo": spec.algo, "env": spec.env_name, "env_title": spec.env_title(),
                              "num_iterations": spec.num_iterations}
    learned_nu = state.metrics["multipliers"][:, -1] if "multipliers" in state.metrics else None
    if cmdp is None:  # no tabular exact model: Monte-Carlo judgement against the environment's reference
        say(f"judging {spec.seeds} seeds by Monte-Carlo ({spec.eval_episodes} episodes each)")
        seeds = [jax.tree.map(lambda x, r=r: x[r], state.carry.state) for r in range(spec.seeds)]
        mc = judge.monte_carlo(env, params, [module.policy(st, env, params) for st in seeds], spec.eval_episodes)
        judged = judge.judge(mc["reward"], mc["costs"], thresholds, optimum=judge.reference_optimum(
            env, params, spec.eval_episodes), multipliers=learned_nu, tolerance=spec.feasibility_tolerance,
            episodes=spec.eval_episodes, reward_half_width=mc["reward_half_width"],
            cost_half_width=mc["cost_half_width"])
        result.update(judge.judgement_fields(judged))
        npz = {"thresholds": thresholds}
    else:
        policies = trainer.policy_tables(state)
        npz = {"policy": policies.astype(np.float32)}
        if env.is_spatial:  # what policy maps need (fhc_jax.experiment.plots)
            npz["grid_shape"] = np.asarray(env.grid_shape, np.int64)
            moves = config.load_environment(spec.env_name).action_moves
            if moves is not None and moves.shape[0] == env.num_actions:
                npz["action_moves"] = moves
        result["feasibility"] = feasibility
        judged = judge.judge(state.exact_reward[:, -1], state.exact_costs[:, -1], thresholds, optimum=opt,
                             multipliers=learned_nu, tolerance=spec.feasibility_tolerance)
        final = judge.evaluate_policies(cmdp, policies)
        npz.update(stage_costs=final["stage_costs"], stage_rewards=final["stage_rewards"], thresholds=thresholds)
        if opt is not None:
            npz.update(optimal_policy=opt.policy.astype(np.float32), optimal_stage_costs=opt.stage_costs,
                       optimal_stage_rewards=opt.stage_rewards)
        result.update(judge.judgement_fields(judged))
    rundir.write_npz_atomic(out / rundir.POLICY, **npz)
    result["machine"] = machine_info()
    result["timing"] = {"wall_s": time.perf_counter() - t_start, "compile_s": trainer.compile_s,
                        "train_s": state.elapsed_s, "resumed_from_iteration": start_iteration}
    steps = env_steps_per_iteration(spec.learner, env.horizon)
    if steps and state.elapsed_s > 0:
        result["timing"]["env_steps_per_s"] = steps * spec.num_iterations * spec.seeds / state.elapsed_s
    rundir.write_json_atomic(out / rundir.SUMMARY, result)
    if plots:
        from fhc_jax.experiment import plots as plotting

        plotting.plot_run(out)
    if judged is not None:
        say(judge.format_table(judged, result.get("statistics")))
    say(f"wrote {out}/ (wall {result['timing']['wall_s']:.1f} s, compile {trainer.compile_s:.1f} s)")
    return result
