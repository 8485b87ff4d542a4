"""``fhc-jax compare``: a study of several learners on one environment, described in a TOML file,
several seeds each, judged by the paper's metric and exactly.

**A study** (:mod:`fhc_jax.experiment.study_file`) is a TOML file of rows, one run each: the
learner, the settings that differ from its defaults and the row's label. The paper's comparison
(FH-Constrained against NN-Constrained, PPO-Lagrangian, CPO, e-COP and Saute-Lagrangian with
both network inputs where they apply) is ``benchmarks/paper_comparison.toml``, which ``fhc-jax
compare`` runs when no file is given.

For every row :func:`run_comparison` trains R seeds in one vmapped, chunked program
(:func:`fhc_jax.experiment.runner.train_seeds`) and measures

* the **paper's metric**: the mean episode reward and cost over the last 10,000 training
  episodes, i.e. over the batch means of the last ``ceil(10000 / K)`` iterations (K episodes
  per iteration), per seed; mean, std, min and max over seeds;
* the **exact** reward and costs of each seed's final policy, judged by
  :func:`fhc_jax.experiment.judge.judge`: gap to the exact constrained optimum
  (``fhc_jax.solve``), fraction of it, feasibility;
* the **violation rate**: the fraction of seeds whose final policy is infeasible by the judge's
  rule (cost above alpha + ``run.feasibility_tolerance`` |alpha|, default 2%, each row with its
  own tolerance: a study may set ``run.feasibility_tolerance`` per row, and each row records the
  one it was judged with), and the same rule applied to the paper's metric;
* **statistics over seeds** (:mod:`fhc_jax.experiment.statistics`): mean and IQM of the exact
  reward, each cost and the gap to J* with stratified-bootstrap 95% intervals, and the
  probability of violating the constraint with its Wilson 95% interval;
* wall and compile time.

What a comparison writes (``<stem>.json``, ``.md``, ``.png``, ``_profile.png``) is
:mod:`fhc_jax.experiment.compare_report`.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from fhc_jax.algos.core.hyperparameters import resolve_env_defaults
from fhc_jax.experiment import config, judge, statistics, tracking
from fhc_jax.experiment.divergence import DivergenceError, divergence_hint
from fhc_jax.experiment.judgement import Judgement, relative_excess, stats
from fhc_jax.experiment.progress import RunsProgress, env_steps_per_iteration
from fhc_jax.experiment.rundir import load_average, machine_info, source_revision
from fhc_jax.experiment.runner import train_seeds
from fhc_jax.experiment.study_file import LABELS, RunSpec, Study, build_specs, load_study
from fhc_jax.experiment.typed_settings import ConfigError, learner_settings

#: the paper's metric averages the last this many training episodes
PAPER_EPISODES = 10_000
#: display names of the network inputs (None: the learner has no input choice)
INPUT_LABELS: dict[str | None, str] = {
    None: "tabular (h, s)",
    "xy": "Env 1 (xy)",
    "xyt": "Env 2 (xyt)",
    "one_hot": "one-hot s",
}


# ----------------------------------------------------------------------------- judging a run


def paper_window(num_iterations: int, episodes_per_iteration: int) -> int:
    """Iterations of the paper's metric: the last ceil(10000 / K), at most N."""
    return int(min(num_iterations, math.ceil(PAPER_EPISODES / episodes_per_iteration)))


def judge_run(metrics: Mapping[str, np.ndarray], judged: Judgement, episodes_per_iteration: int) -> dict[str, Any]:
    """Every number of one run's table row.

    Args:
        metrics: per-iteration batch means, ``reward`` (R, N) and ``costs`` (R, N, M).
        judged: the exact judgement of the R final policies (:func:`fhc_jax.experiment.judge.judge`);
            its feasibility rule also decides which seeds violate by the paper's metric.
        episodes_per_iteration: K.
    Returns:
        ``paper_metric`` (window, reward and per-constraint cost stats over seeds, violation
        rate), ``exact`` (reward and cost stats, gap to the optimum, violation rate).
    """
    reward = np.asarray(metrics["reward"], np.float64)
    costs = np.asarray(metrics["costs"], np.float64)
    if costs.ndim == 2:
        costs = costs[..., None]
    n = reward.shape[1]
    window = paper_window(n, episodes_per_iteration)
    p_reward = reward[:, -window:].mean(1)  # (R,)
    p_costs = costs[:, -window:].mean(1)  # (R, M)
    p_violating = np.any(p_costs > judged.limits, axis=1)
    # fraction of the window's iterations whose batch-mean cost is above alpha (all seeds)
    iters_above = float(np.mean(np.any(costs[:, -window:] > judged.thresholds, axis=-1)))
    e_costs = judged.costs
    e_violating = ~judged.feasible
    out = {
        "paper_metric": {
            "window_iterations": window,
            "window_episodes": window * episodes_per_iteration,
            "reward": stats(p_reward, per_seed=True),
            "costs": [stats(p_costs[:, k], per_seed=True) for k in range(p_costs.shape[1])],
            "violating_seeds": int(p_violating.sum()),
            "violation_rate": float(p_violating.mean()),
            "fraction_of_window_iterations_above_alpha": iters_above,
        },
        "exact": {
            "reward": stats(judged.reward, per_seed=True),
            "costs": [stats(e_costs[:, k], per_seed=True) for k in range(e_costs.shape[1])],
            "violating_seeds": int(e_violating.sum()),
            "violation_rate": float(e_violating.mean()),
            "max_relative_excess": float(np.max(relative_excess(e_costs, judged.thresholds))),
            "judgement": judged.summary(),
        },
    }
    if judged.optimum is not None:
        out["exact"]["gap"] = stats(judged.gap, per_seed=True)
        frac = judged.fraction_of_optimum
        out["exact"]["fraction_of_optimum"] = None if frac is None else stats(frac, per_seed=True)
    return out


# ----------------------------------------------------------------------------- the comparison


def run_comparison(
    runs: Sequence[RunSpec] | None = None,
    *,
    seeds: int = 5,
    seed: int = 0,
    overrides: Iterable[str] = (),
    env: str | None = None,
    study: Study | None = None,
    stream: IO[str] | None = None,
    quiet: bool = False,
    keep_policies: bool = False,
    loggers: str | Sequence[str] | None = None,
    log_dir: str | Path | None = None,
    log_name: str = "compare",
) -> dict[str, Any]:
    """Train and judge every run; returns the result (JSON-ready, see
    :func:`fhc_jax.experiment.compare_report.write_outputs`).

    Args:
        runs: the rows to run (default: every row of ``study``).
        seeds: R seeds per run, vmapped in one program; seed i trains from
            ``fold_in(key(seed), i)``.
        overrides: ``--set`` strings (:func:`~fhc_jax.experiment.study_file.split_overrides`):
            ``env.size=4``, ``num_iterations=20`` (every learner), ``cpo.num_iterations=50``
            (one learner).
        env: the environment's name (:mod:`fhc_jax.experiment.config`; default gridworld).
        study: the study (default :func:`~fhc_jax.experiment.study_file.load_study` of
            :data:`~fhc_jax.experiment.study_file.DEFAULT_STUDY`): its common settings and notes.
        stream: progress lines (default stderr); quiet: none.
        keep_policies: also return the final policy tables, ``result["_policies"][i]`` (R, H, S, A)
            (not JSON; for tests).
        loggers: experiment trackers (:mod:`fhc_jax.experiment.tracking`), one tracked run per
            row: TensorBoard in ``log_dir/tensorboard/<log_name>/<run>`` (earlier event files
            there are replaced), W&B in ``log_dir/wandb`` grouped as ``log_name``.
    Raises:
        ConfigError / ValueError: invalid settings (before anything is compiled).
        DivergenceError: a run's values became non-finite (names the run, seeds and quantity).
    """
    import fhc_jax as fhc

    t_start, load_start = time.perf_counter(), load_average()
    source = source_revision()
    stream = sys.stderr if stream is None else stream
    say = (lambda msg: None) if quiet else (lambda msg: print(msg, file=stream, flush=True))
    study = load_study() if study is None else study
    runs = list(study.runs if runs is None else runs)
    specs = build_specs(runs, seeds, overrides, seed=seed, env=env, common=study.settings)  # validates first
    missing = statistics.unavailable()
    if missing is not None:  # said before training, not after it
        print(f"fhc-jax compare: warning: {missing}; the bootstrap intervals will be missing", file=stream, flush=True)
    loggers = tracking.resolve_loggers(loggers)
    if loggers and log_dir is None:
        raise ConfigError("run_comparison: loggers need log_dir, the folder their logs go to")
    if "tensorboard" in loggers:  # this comparison's logs replace those of an earlier one of the same name
        for old in (Path(log_dir) / "tensorboard" / log_name).glob("*/events.out.tfevents.*"):
            old.unlink()
    env, params = specs[0].make_env()
    title = specs[0].env_title()
    cmdp = env.to_cmdp(params)
    thresholds = np.asarray(cmdp.thresholds, np.float64)
    scale = judge.cost_scale(cmdp)  # the feasibility rule's cost scale (alpha = 0: rounding of it only)
    opt, infeasible = judge.solve_optimum(cmdp)
    unc = fhc.solve_unconstrained(cmdp)
    if infeasible is not None:  # the same message as fhc-jax solve; the comparison proceeds
        print(
            f"fhc-jax compare: warning: {infeasible}; the comparison proceeds, but no policy can meet the threshold",
            file=stream,
            flush=True,
        )
    say(
        f"{title}: optimum J* = {opt.reward:.4f} at cost {opt.costs.tolist()} "
        f"(unconstrained {float(unc.reward):.4f} at cost {np.asarray(unc.costs).tolist()})"
        if opt is not None
        else f"{title}: the constraint is infeasible"
    )
    overall = None if quiet else RunsProgress(len(runs), stream)
    rows, policies = [], []
    for i, (run, spec) in enumerate(zip(runs, specs)):
        say(
            f"[{i + 1}/{len(runs)}] {run.name}: {seeds} seeds x {spec.learner.num_iterations} iterations x "
            f"{spec.learner.episodes_per_iteration} episodes ..."
        )
        row, policy = _run_row(
            run, spec, env, params, thresholds, opt, stream, quiet, overall, loggers, log_dir, log_name, scale
        )
        rows.append(row)
        policies.append(policy)
    total = time.perf_counter() - t_start
    tolerances = [s.feasibility_tolerance for s in specs]
    result = {
        "env": {"name": specs[0].env_name, **specs[0].env},
        "env_title": title,
        "env_repr": config.env_repr(env),
        "seeds": seeds,
        "seed": specs[0].seed,
        "overrides": list(overrides),
        "thresholds": thresholds.tolist(),
        # one tolerance when every row shares it, else None: each row's is its feasibility_tolerance
        "tolerance": tolerances[0] if len(set(tolerances)) == 1 else None,
        "cost_scale": scale.tolist(),
        "paper_episodes": PAPER_EPISODES,
        "optimum": None if opt is None else opt.as_dict(),
        "unconstrained": {
            "reward": float(unc.reward),
            "costs": np.asarray(unc.costs, np.float64).tolist(),
            "solve_time_s": float(unc.solve_time),
        },
        "runs": rows,
        "notes": list(study.notes),
        "machine": machine_info(),
        "source": source,
        "timing": {
            "total_wall_s": total,
            "runs_wall_s": float(sum(r["timing"]["wall_s"] for r in rows)),
            "compile_s": float(sum(r["timing"]["compile_s"] for r in rows)),
            "load_average_start": load_start,
            "load_average_end": load_average(),
        },
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if keep_policies:
        result["_policies"] = policies
    say(f"total wall time {total:.1f} s (load average {load_start} -> {result['timing']['load_average_end']})")
    return result


def _changed_settings(spec: config.ExperimentSpec) -> dict[str, Any]:
    """Learner settings of ``spec`` that differ from the learner's defaults (observation aside)."""
    # compare runs on environments with a tabular exact model (it judges every run exactly)
    base = learner_settings(resolve_env_defaults(spec.module.Config(), True))
    now = learner_settings(spec.learner)
    return {k: v for k, v in now.items() if base.get(k) != v and k != "observation"}


def _run_row(run, spec, env, params, thresholds, opt, stream, quiet, overall, loggers, log_dir, log_name, scale):
    """Train and judge one row: (its table row, its final policy tables)."""
    cfg, seeds = spec.learner, spec.seeds
    observation = getattr(cfg, "observation", None)
    t0 = time.perf_counter()
    trackers = tracking.Trackers(
        loggers,
        log_dir or ".",
        name=f"{log_name}: {run.name}",
        group=log_name,
        subdir=f"{log_name}/{tracking.slug(run.name)}",
        stream=stream,
        hparams=spec.settings(),
        config={
            "run": run.name,
            "algo": spec.algo,
            "observation": observation,
            "seeds": seeds,
            "settings": spec.settings(),
        },
        run_labels=tracking.seed_labels(seeds),
        steps_per_iteration=env_steps_per_iteration(cfg, env.horizon),
    )
    try:
        res = train_seeds(
            spec.module,
            env,
            params,
            cfg,
            seeds,
            seed=spec.seed,
            chunk_size=spec.chunk_size,
            label=None if quiet else run.name,
            stream=stream,
            trackers=trackers,
            overall=None if quiet else overall.status,
        )
    except BaseException:
        trackers.close()
        raise
    if res.divergence is not None:
        trackers.close()
        raise DivergenceError(f"{run.name}: {res.divergence.describe()}; {divergence_hint(spec)}", res.divergence)
    wall = time.perf_counter() - t0
    nu = res.state.metrics["multipliers"][:, -1] if "multipliers" in res.state.metrics else None
    judged = judge.judge(
        res.state.exact_reward[:, -1],
        res.state.exact_costs[:, -1],
        thresholds,
        optimum=opt,
        multipliers=nu,
        tolerance=spec.feasibility_tolerance,
        cost_scale=scale,
    )
    row = {
        "name": run.name,
        "algo": spec.algo,
        "label": run.name,  # the study's label of the row (two rows of one learner differ here)
        "algorithm": LABELS.get(spec.algo, spec.algo),
        "feasibility_tolerance": spec.feasibility_tolerance,
        "cost_limits": judged.limits.tolist(),
        "observation": observation,
        "input": INPUT_LABELS.get(observation, str(observation)),
        "num_iterations": int(cfg.num_iterations),
        "episodes_per_iteration": int(cfg.episodes_per_iteration),
        "training_episodes": int(cfg.num_iterations * cfg.episodes_per_iteration),
        "changed_settings": _changed_settings(spec),
        "settings": learner_settings(cfg),
        **judge_run(res.state.metrics, judged, cfg.episodes_per_iteration),
        "exact_curve": {
            "iterations": res.state.exact_iterations.tolist(),
            "reward_mean": res.state.exact_reward.mean(0).tolist(),
            "costs_mean": res.state.exact_costs.mean(0).T.tolist(),
        },
        "timing": {"wall_s": wall, "compile_s": res.compile_s, "train_s": res.run_s},
        "statistics": statistics.seed_statistics(judged),
    }
    if nu is not None:
        row["final_multipliers"] = judged.multipliers.tolist()
    trackers.log_summary(row)
    trackers.close()
    if overall is not None:  # one plain line per completed run
        pm = row["paper_metric"]
        overall.done(
            run.name,
            f"paper metric: reward {pm['reward']['mean']:.2f}, cost "
            f"{pm['costs'][0]['mean']:.2f}; exact: {statistics.format_line(row['statistics'])}; "
            f"{wall:.1f} s (compile {res.compile_s:.1f} s)",
        )
    return row, res.policy
