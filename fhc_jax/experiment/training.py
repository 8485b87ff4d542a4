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

import time
from pathlib import Path
from typing import IO, Any

import numpy as np

from fhc_jax.experiment import checkpoint, environments, judge, rundir, summary as summ
from fhc_jax.experiment.config_io import ExperimentSpec, load_spec
from fhc_jax.experiment.machine import machine_info
from fhc_jax.experiment.progress import Progress, env_steps_per_iteration
from fhc_jax.experiment.registry import load_algorithm
from fhc_jax.experiment.runner import ChunkedTrainer, ChunkState, seed_keys


def config_payload(spec: ExperimentSpec) -> dict[str, Any]:
    """The content of config.json."""
    return {
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


def load_run_spec(path: str | Path) -> ExperimentSpec:
    """The :class:`ExperimentSpec` stored in a run directory's config.json."""
    cfg = rundir.read_json(Path(path) / rundir.CONFIG)
    if "settings" not in cfg:
        raise rundir.RunDirectoryError(f"{Path(path) / rundir.CONFIG} has no 'settings'")
    return load_spec(settings=cfg["settings"])


def train_run(spec: ExperimentSpec | None, out: str | Path, *, resume: bool = False, overwrite: bool = False,
              stream: IO[str] | None = None, quiet: bool = False, max_chunks: int | None = None,
              plots: bool = True) -> dict[str, Any]:
    """Train ``spec`` into the run directory ``out``.

    Args:
        spec: the experiment; None with ``resume`` takes it from ``out/config.json``.
        out: the run directory.
        resume: continue from the newest checkpoint in ``out`` (``spec``, if given, must equal
            the stored one).
        overwrite: replace an existing run in ``out``.
        stream: where progress goes (default stderr); quiet: no progress lines.
        max_chunks: stop after this many chunks (the run stays resumable): for budgets and tests.
        plots: draw the PNG figures at the end.
    Returns:
        summary.json's content (or ``{"complete": False, "iteration": n}`` when stopped early).
    Raises:
        ValueError (ConfigError, RunDirectoryError): refused before anything is compiled.
    """
    import sys

    t_start = time.perf_counter()
    out = Path(out)
    stream = sys.stderr if stream is None else stream
    say = (lambda msg: None) if quiet else (lambda msg: print(msg, file=stream, flush=True))
    if resume:
        rundir.prepare(out, resume=True, overwrite=False)
        stored = load_run_spec(out)
        if spec is not None:
            diff = rundir.settings_difference(stored.settings(), spec.settings())
            if diff:
                raise rundir.RunDirectoryError(
                    f"--resume: the requested configuration differs from the one in {out / rundir.CONFIG}: "
                    + "; ".join(diff) + ". Resume without config options, or start a new run (--out)")
        spec = stored
    elif spec is None:
        raise ValueError("train_run: spec is required unless resume=True")
    module = load_algorithm(spec.algo)
    env, params = spec.make_env()
    learner = module.make_learner(env, params, spec.learner)  # refuses an unsuitable env before any write
    cmdp = env.to_cmdp(params) if env.has_exact_model else None
    thresholds = None if cmdp is None else np.asarray(cmdp.thresholds, np.float64)
    if not resume:
        rundir.prepare(out, resume=False, overwrite=overwrite)
        rundir.write_json_atomic(out / rundir.CONFIG, config_payload(spec))
    trainer = ChunkedTrainer(learner, spec.seeds, spec.chunk_size)
    state = trainer.init(seed_keys(spec.seed, spec.seeds))
    ckpt_dir = out / rundir.CHECKPOINTS
    if resume:
        if checkpoint.latest_iteration(ckpt_dir) is None:
            say(f"{out}: no checkpoint yet, starting from iteration 0")
        else:
            state = checkpoint.restore(ckpt_dir, trainer, state)
            say(f"{out}: resuming from iteration {state.iteration} of {spec.num_iterations}")
    start_iteration = state.iteration
    progress = None if quiet else Progress(f"{spec.algo} on {spec.env_name}", spec.num_iterations, spec.seeds,
                                           env_steps_per_iteration(spec.learner, env.horizon), thresholds,
                                           stream, start_iteration, state.elapsed_s)
    chunks = {"n": 0}

    def write_metrics(st: ChunkState) -> None:
        rundir.write_bytes_atomic(out / rundir.METRICS, rundir.metrics_csv(
            st.metrics, st.exact_iterations, st.exact_reward, st.exact_costs, st.iteration).encode())

    def on_chunk(st: ChunkState) -> None:
        chunks["n"] += 1
        if progress is not None:
            progress(st)
        write_metrics(st)
        finished = st.iteration >= spec.num_iterations
        last = max_chunks is not None and chunks["n"] >= max_chunks
        periodic = spec.checkpoint_every > 0 and chunks["n"] % spec.checkpoint_every == 0
        if finished or last or periodic:
            checkpoint.save(ckpt_dir, trainer, st)

    if state.iteration == 0:
        write_metrics(state)
    state = trainer.run(state, on_chunk=on_chunk, max_chunks=max_chunks)
    if state.iteration < spec.num_iterations:
        say(f"{out}: stopped at iteration {state.iteration} of {spec.num_iterations}; "
            f"continue with: fhc-jax train --resume --out {out}")
        return {"complete": False, "iteration": state.iteration}

    policies = trainer.policy_tables(state)
    npz = {"policy": policies.astype(np.float32)}
    if env.is_spatial:  # what policy maps need (fhc_jax.experiment.plots)
        npz["grid_shape"] = np.asarray(env.grid_shape, np.int64)
        moves = environments.load_environment(spec.env_name).action_moves
        if moves is not None and moves.shape[0] == env.num_actions:
            npz["action_moves"] = moves
    result: dict[str, Any] = {"complete": True, "algo": spec.algo, "env": spec.env_name, "env_title": spec.env_title(),
                              "num_iterations": spec.num_iterations}
    judged = None
    if cmdp is not None:
        opt = judge.optimum(cmdp)
        learned_nu = state.metrics["multipliers"][:, -1] if "multipliers" in state.metrics else None
        judged = judge.judge(state.exact_reward[:, -1], state.exact_costs[:, -1], thresholds, optimum=opt,
                             multipliers=learned_nu, tolerance=spec.feasibility_tolerance)
        final = judge.evaluate_policies(cmdp, policies)
        npz.update(stage_costs=final["stage_costs"], stage_rewards=final["stage_rewards"], thresholds=thresholds)
        if opt is not None:
            npz.update(optimal_policy=opt.policy.astype(np.float32), optimal_stage_costs=opt.stage_costs,
                       optimal_stage_rewards=opt.stage_rewards)
        result.update(summ.judgement_fields(judged))
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
        say(summ.format_table(judged))
    say(f"wrote {out}/ (wall {result['timing']['wall_s']:.1f} s, compile {trainer.compile_s:.1f} s)")
    return result
