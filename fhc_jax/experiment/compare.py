"""``fhc-jax compare``: a study of several learners on one environment, described in a TOML file,
several seeds each, judged by the paper's metric and exactly.

**A study** is a TOML file of rows, one run each: the learner (``algo``, a command-line name),
the settings that differ from its defaults (``set``, dotted keys as with ``--set``) and the
row's ``label``; optionally settings common to every row (a top-level ``set`` table: learner
keys apply where the learner has them), ``notes`` printed under the table, and ``name``, the
default stem of the output files::

    name = "my_study"
    notes = ["..."]
    [set]
    num_iterations = 400
    [[run]]
    label = "FH-Constrained"
    algo = "fh-constrained"
    [[run]]
    label = "PPO-Lagrangian (xy)"
    algo = "ppo-lag"
    set = { observation = "xy" }

The paper's comparison (FH-Constrained against NN-Constrained, PPO-Lagrangian, CPO, e-COP and
Saute-Lagrangian with both network inputs where they apply) is the study
``benchmarks/paper_comparison.toml`` (:data:`DEFAULT_STUDY`), which ``fhc-jax compare`` runs when
no file is given.

For every row :func:`run_comparison` trains R seeds in one vmapped, chunked program
(:func:`fhc_jax.experiment.runner.train_seeds`) and measures

* the **paper's metric**: the mean episode reward and cost over the last 10,000 training
  episodes, i.e. over the batch means of the last ``ceil(10000 / K)`` iterations (K episodes
  per iteration), per seed; mean, std, min and max over seeds;
* the **exact** reward and costs of each seed's final policy, judged by
  :func:`fhc_jax.experiment.judge.judge`: gap to the exact constrained optimum
  (``fhc_jax.solve``), fraction of it, feasibility;
* the **violation rate**: the fraction of seeds whose final policy is infeasible by the judge's
  rule (cost above alpha + ``run.feasibility_tolerance`` |alpha|, default 2%), and the same rule
  applied to the paper's metric;
* **statistics over seeds** (:mod:`fhc_jax.experiment.statistics`): mean and IQM of the exact
  reward, each cost and the gap to J* with stratified-bootstrap 95% intervals, and the
  probability of violating the constraint with its Wilson 95% interval;
* wall and compile time.

:func:`write_outputs` writes ``<stem>.json`` (every number, hardware, versions, wall times),
``<stem>.md`` (:func:`format_markdown`), ``<stem>.png``
(:func:`fhc_jax.experiment.plots.plot_comparison`, a Fig. 1 style two-panel figure) and
``<stem>_profile.png`` (performance profiles of the fraction of the optimum over seeds).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import IO, Any, Iterable, Mapping, Sequence

import numpy as np

from fhc_jax.algos.hyperparameters import resolve_env_defaults
from fhc_jax.experiment import config, judge, statistics, tracking
from fhc_jax.experiment.judgement import Judgement, Optimum, relative_excess, stats
from fhc_jax.experiment.plots import plot_comparison
from fhc_jax.experiment.progress import RunsProgress, env_steps_per_iteration
from fhc_jax.experiment.rundir import load_average, machine_info, source_revision
from fhc_jax.experiment.runner import DivergenceError, divergence_hint, train_seeds
from fhc_jax.experiment.typed_settings import (ConfigError, flatten, learner_schema, learner_settings, parse_assignment,
                                               read_toml, unknown_key)

#: the paper's metric averages the last this many training episodes
PAPER_EPISODES = 10_000
#: the study ``fhc-jax compare`` runs without a file: the paper's comparison
DEFAULT_STUDY = Path(__file__).resolve().parents[2] / "benchmarks" / "paper_comparison.toml"

#: display names of the learners (the table's Algorithm column)
LABELS: dict[str, str] = {
    "fh-constrained": "FH-Constrained",
    "nn-constrained": "NN-Constrained",
    "ppo-lag": "PPO-Lagrangian",
    "cpo": "CPO",
    "e-cop": "e-COP",
    "saute-lag": "Saute-Lagrangian",
}
#: display names of the network inputs (None: the learner has no input choice)
INPUT_LABELS: dict[str | None, str] = {None: "tabular (h, s)", "xy": "Env 1 (xy)", "xyt": "Env 2 (xyt)",
                                       "one_hot": "one-hot s"}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One row of a study: its label, the learner's command-line name and the row's settings
    (dotted keys -> values)."""

    name: str
    algo: str
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def observation(self) -> str | None:
        """The network input the row sets (None: none set)."""
        return self.settings.get("observation")


@dataclasses.dataclass(frozen=True)
class Study:
    """A study file, read and checked (:func:`load_study`): its rows, the settings common to
    them, the notes under the table and the default output stem."""

    runs: tuple[RunSpec, ...]
    settings: Mapping[str, Any]
    notes: tuple[str, ...]
    name: str


def load_study(path: str | Path | None = None) -> Study:
    """Read a study file (module docstring; default :data:`DEFAULT_STUDY`).

    Raises:
        ConfigError: a missing or invalid file, an unknown key, a row without ``algo`` or with
            an unknown one, two rows with the same label, or no row.
    """
    path = Path(DEFAULT_STUDY if path is None else path)
    data = read_toml(path, "study file")
    where = f"study file {str(path)!r}"
    unknown = sorted(set(data) - {"name", "notes", "set", "run"})
    if unknown:
        raise unknown_key(unknown[0], ["name", "notes", "set", "run"], where)
    rows, runs = data.get("run", []), []
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ConfigError(f"{where} has no [[run]] rows; each names an algo (and a label and set)")
    for i, row in enumerate(rows):
        bad = sorted(set(row) - {"label", "algo", "set"})
        if bad:
            raise unknown_key(f"run[{i}].{bad[0]}", ["label", "algo", "set"], where)
        algo = row.get("algo")
        if not isinstance(algo, str) or (algo not in config.ALGORITHMS and algo not in config.ALGORITHMS.values()):
            raise ConfigError(f"{where}: run[{i}] needs algo = one of {', '.join(config.LEARNERS)}, found "
                              f"{algo!r}")
        algo = config.canonical_name(algo)
        settings = flatten(row.get("set", {}))
        label = row.get("label", LABELS.get(algo, algo) + (f" ({settings['observation']})"
                                                           if "observation" in settings else ""))
        runs.append(RunSpec(str(label), algo, settings))
    labels = [r.name for r in runs]
    if len(set(labels)) < len(labels):
        twice = next(x for x in labels if labels.count(x) > 1)
        raise ConfigError(f"{where}: two runs are labelled {twice!r}; give each run its own label")
    notes = data.get("notes", [])
    return Study(runs=tuple(runs), settings=flatten(data.get("set", {})),
                 notes=tuple(notes) if isinstance(notes, list) else (str(notes),),
                 name=str(data.get("name", path.stem)))


def select_runs(algos: Iterable[str] | None = None, inputs: Iterable[str] | None = None,
                study: Study | None = None) -> list[RunSpec]:
    """The runs of ``study`` (default: :func:`load_study` of :data:`DEFAULT_STUDY`) whose learner
    is in ``algos`` (either name form; None: all) and whose input is in ``inputs`` (runs that set
    no input are always kept).

    Raises:
        ValueError: an unknown algorithm or input, or a selection that leaves no run.
    """
    study = load_study() if study is None else study
    wanted = None if algos is None else {config.canonical_name(a) for a in algos}
    ins = None if inputs is None else set(inputs)
    bad = sorted((ins or set()) - {"xy", "xyt"})
    if bad:
        raise ValueError(f"unknown input {bad[0]!r}; valid: 'xy', 'xyt'")
    runs = [r for r in study.runs if (wanted is None or r.algo in wanted)
            and (ins is None or r.observation is None or r.observation in ins)]
    if not runs:
        raise ValueError("the selection of algorithms and inputs leaves no run")
    return runs


# ----------------------------------------------------------------------------- settings


def split_overrides(assignments: Iterable[str]) -> tuple[list[str], dict[str, list[str]]]:
    """``--set`` strings -> (common, per-algorithm).

    ``ALGO.key=value`` (``cpo.num_iterations=50``, ``ppo_lagrangian.clip_eps=0.1``) applies to
    one learner; ``env.*`` and ``run.*`` keys to every run; any other ``key=value`` to every
    learner whose ``Config`` has that key.

    Raises:
        ConfigError: a malformed assignment.
    """
    common: list[str] = []
    per_algo: dict[str, list[str]] = {}
    for text in assignments:
        head, dot, rest = parse_assignment(text)[0].partition(".")
        algo = next((cli for cli, module in config.ALGORITHMS.items() if dot and head in (cli, module)), None)
        if algo is None:
            common.append(text)
        else:
            per_algo.setdefault(algo, []).append(rest + text[text.index("="):])
    return common, per_algo


def build_specs(runs: Sequence[RunSpec], seeds: int, overrides: Iterable[str] = (), *, seed: int = 0,
                env: str | None = None, common: Mapping[str, Any] | None = None) -> list[config.ExperimentSpec]:
    """One validated :class:`~fhc_jax.experiment.config.ExperimentSpec` per run (nothing
    compiled). Precedence (later wins): ``common`` (a study's common settings) < the row's
    settings < ``overrides`` (``--set`` strings, :func:`split_overrides`) < ``env`` (the
    environment's name). Learner keys of ``common`` and of the common overrides apply where the
    learner has them.

    Raises:
        ConfigError / ValueError: invalid settings, a learner key that no selected learner has,
            an algorithm-specific key for a learner that is not selected, an input the
            environment does not support, or runs on different environments.
    """
    common_sets, per_algo = split_overrides(overrides)
    selected = {r.algo for r in runs}
    extra = sorted(set(per_algo) - selected)
    if extra:
        raise ConfigError(f"--set {extra[0]}.*: {extra[0]!r} is not among the selected algorithms")
    values = dict(parse_assignment(t) for t in common_sets)
    learner_keys = {k for k in values if not k.startswith(("env.", "run."))}
    known = set().union(*(learner_schema(config.LEARNERS[a].Config()) for a in selected))
    unknown = sorted(learner_keys - known)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}: no selected learner has it (use env.*, run.*, "
                          "a learner's Config field, or ALGO.key for one learner)")
    if "observation" in learner_keys | {t.partition("=")[0].strip() for ts in per_algo.values() for t in ts}:
        raise ConfigError("observation is chosen per run; select inputs with --inputs instead")
    common = dict(common or {})
    lenient = learner_keys | {k for k in common if not k.startswith(("env.", "run."))}
    specs = [config.load_spec(r.algo, settings={"run.seed": seed, **common, **r.settings, **values},
                              overrides=per_algo.get(r.algo, []), lenient=lenient - set(r.settings),
                              seeds=seeds, env=env) for r in runs]
    if len({(s.env_name, str(sorted(s.env.items()))) for s in specs}) != 1:
        raise ConfigError("the runs of a comparison must share one environment; set env.* for all of them")
    environment, _ = specs[0].make_env()
    if not environment.has_exact_model:
        raise ConfigError(f"compare: environment {specs[0].env_name!r} has no exact model "
                          "(has_exact_model is False); the comparison judges every run exactly")
    for r in runs:
        if r.observation is not None and r.observation not in environment.supported_observations:
            raise ConfigError(
                f"input {r.observation!r} of {r.name} is not supported by environment {specs[0].env_name!r} "
                f"(its observations: {', '.join(environment.supported_observations)}); choose --inputs or --algos")
    return specs


def _changed_settings(spec: config.ExperimentSpec) -> dict[str, Any]:
    """Learner settings of ``spec`` that differ from the learner's defaults (observation aside)."""
    # compare runs on environments with a tabular exact model (it judges every run exactly)
    base = learner_settings(resolve_env_defaults(spec.module.Config(), True))
    now = learner_settings(spec.learner)
    return {k: v for k, v in now.items() if base.get(k) != v and k != "observation"}


# ----------------------------------------------------------------------------- judging a run


def paper_window(num_iterations: int, episodes_per_iteration: int) -> int:
    """Iterations of the paper's metric: the last ceil(10000 / K), at most N."""
    return int(min(num_iterations, math.ceil(PAPER_EPISODES / episodes_per_iteration)))


def judge_run(metrics: Mapping[str, np.ndarray], judged: Judgement, episodes_per_iteration: int
              ) -> dict[str, Any]:
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


def run_comparison(runs: Sequence[RunSpec] | None = None, *, seeds: int = 5, seed: int = 0,
                   overrides: Iterable[str] = (), env: str | None = None, study: Study | None = None,
                   stream: IO[str] | None = None, quiet: bool = False, keep_policies: bool = False,
                   loggers: str | Sequence[str] | None = None, log_dir: str | Path | None = None,
                   log_name: str = "compare") -> dict[str, Any]:
    """Train and judge every run; returns the result (JSON-ready, see :func:`write_outputs`).

    Args:
        runs: the rows to run (default: every row of ``study``).
        seeds: R seeds per run, vmapped in one program; seed i trains from
            ``fold_in(key(seed), i)``.
        overrides: ``--set`` strings (:func:`split_overrides`): ``env.size=4``,
            ``num_iterations=20`` (every learner), ``cpo.num_iterations=50`` (one learner).
        env: the environment's name (:mod:`fhc_jax.experiment.config`; default gridworld).
        study: the study (default :func:`load_study` of :data:`DEFAULT_STUDY`): its common
            settings and notes.
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
    opt, infeasible = judge.solve_optimum(cmdp)
    unc = fhc.solve_unconstrained(cmdp)
    if infeasible is not None:  # the same message as fhc-jax solve; the comparison proceeds
        print(f"fhc-jax compare: warning: {infeasible}; the comparison proceeds, but no policy can meet the "
              "threshold", file=stream, flush=True)
    say(f"{title}: optimum J* = {opt.reward:.4f} at cost {opt.costs.tolist()} "
        f"(unconstrained {float(unc.reward):.4f} at cost {np.asarray(unc.costs).tolist()})"
        if opt is not None else f"{title}: the constraint is infeasible")
    overall = None if quiet else RunsProgress(len(runs), stream)
    rows, policies = [], []
    for i, (run, spec) in enumerate(zip(runs, specs)):
        say(f"[{i + 1}/{len(runs)}] {run.name}: {seeds} seeds x {spec.learner.num_iterations} iterations x "
            f"{spec.learner.episodes_per_iteration} episodes ...")
        row, policy = _run_row(run, spec, env, params, thresholds, opt, stream, quiet, overall, loggers, log_dir,
                               log_name)
        rows.append(row)
        policies.append(policy)
    total = time.perf_counter() - t_start
    result = {
        "env": {"name": specs[0].env_name, **specs[0].env},
        "env_title": title,
        "env_repr": config.env_repr(env),
        "seeds": seeds,
        "seed": specs[0].seed,
        "overrides": list(overrides),
        "thresholds": thresholds.tolist(),
        "tolerance": specs[0].feasibility_tolerance,
        "paper_episodes": PAPER_EPISODES,
        "optimum": None if opt is None else opt.as_dict(),
        "unconstrained": {"reward": float(unc.reward), "costs": np.asarray(unc.costs, np.float64).tolist(),
                          "solve_time_s": float(unc.solve_time)},
        "runs": rows,
        "notes": list(study.notes),
        "machine": machine_info(),
        "source": source,
        "timing": {"total_wall_s": total, "runs_wall_s": float(sum(r["timing"]["wall_s"] for r in rows)),
                   "compile_s": float(sum(r["timing"]["compile_s"] for r in rows)),
                   "load_average_start": load_start, "load_average_end": load_average()},
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if keep_policies:
        result["_policies"] = policies
    say(f"total wall time {total:.1f} s (load average {load_start} -> {result['timing']['load_average_end']})")
    return result


def _run_row(run, spec, env, params, thresholds, opt, stream, quiet, overall, loggers, log_dir, log_name):
    """Train and judge one row: (its table row, its final policy tables)."""
    cfg, seeds = spec.learner, spec.seeds
    observation = getattr(cfg, "observation", None)
    t0 = time.perf_counter()
    trackers = tracking.Trackers(
        loggers, log_dir or ".", name=f"{log_name}: {run.name}", group=log_name,
        subdir=f"{log_name}/{tracking.slug(run.name)}", stream=stream, hparams=spec.settings(),
        config={"run": run.name, "algo": spec.algo, "observation": observation, "seeds": seeds,
                "settings": spec.settings()},
        run_labels=tracking.seed_labels(seeds), steps_per_iteration=env_steps_per_iteration(cfg, env.horizon))
    try:
        res = train_seeds(spec.module, env, params, cfg, seeds, seed=spec.seed, chunk_size=spec.chunk_size,
                          label=None if quiet else run.name, stream=stream, trackers=trackers,
                          overall=None if quiet else overall.status)
    except BaseException:
        trackers.close()
        raise
    if res.divergence is not None:
        trackers.close()
        raise DivergenceError(f"{run.name}: {res.divergence.describe()}; {divergence_hint(spec)}", res.divergence)
    wall = time.perf_counter() - t0
    nu = res.state.metrics["multipliers"][:, -1] if "multipliers" in res.state.metrics else None
    judged = judge.judge(res.state.exact_reward[:, -1], res.state.exact_costs[:, -1], thresholds, optimum=opt,
                         multipliers=nu, tolerance=spec.feasibility_tolerance)
    row = {
        "name": run.name,
        "algo": spec.algo,
        "label": LABELS.get(spec.algo, spec.algo),
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
        overall.done(run.name, f"paper metric: reward {pm['reward']['mean']:.2f}, cost "
                     f"{pm['costs'][0]['mean']:.2f}; exact: {statistics.format_line(row['statistics'])}; "
                     f"{wall:.1f} s (compile {res.compile_s:.1f} s)")
    return row, res.policy


# ----------------------------------------------------------------------------- outputs


def _pm(s: Mapping[str, Any], digits: int = 2) -> str:
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}"


def _range(s: Mapping[str, Any], digits: int = 1) -> str:
    return f"[{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


def _costs(stats_list: Sequence[Mapping[str, Any]], with_range: bool) -> str:
    parts = [_pm(s) + (f" {_range(s)}" if with_range else "") for s in stats_list]
    return " / ".join(parts)


def format_markdown(result: Mapping[str, Any]) -> str:
    """The comparison table (GitHub markdown) with its legend, hardware and wall time."""
    alpha = "/".join(f"{a:g}" for a in result["thresholds"])
    opt, unc = result["optimum"], result["unconstrained"]
    r = result["seeds"]
    lines = [
        f"| Algorithm | Input | Iterations x K | Paper metric: reward | Paper metric: cost | "
        f"Exact reward [min, max] | Exact cost [min, max] | Gap to J* | Violating seeds (exact) | "
        f"Violating seeds (paper metric) | Wall s (compile s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["runs"]:
        pm, ex = row["paper_metric"], row["exact"]
        gap = _pm(ex["gap"]) if "gap" in ex else "-"
        iters = f"{row['num_iterations']} x {row['episodes_per_iteration']}"
        if row["changed_settings"]:
            iters += " *"
        lines.append(
            f"| {row['label']} | {row['input']} | {iters} | {_pm(pm['reward'])} | {_costs(pm['costs'], False)} | "
            f"{_pm(ex['reward'])} {_range(ex['reward'])} | {_costs(ex['costs'], True)} | {gap} | "
            f"{ex['violating_seeds']}/{r} | {pm['violating_seeds']}/{r} | "
            f"{row['timing']['wall_s']:.0f} ({row['timing']['compile_s']:.0f}) |")
    if opt is not None:
        lines.append(f"| **Exact optimum** (`fhc_jax.solve`) | - | - | - | - | {opt['reward']:.2f} | "
                     f"{'/'.join(f'{c:.2f}' for c in opt['costs'])} | 0 | - | - | {opt['solve_time_s']:.1f} |")
    lines.append(f"| Unconstrained optimum (`fhc_jax.solve_unconstrained`) | - | - | - | - | {unc['reward']:.2f} | "
                 f"{'/'.join(f'{c:.2f}' for c in unc['costs'])} | - | - | - | {unc['solve_time_s']:.1f} |")
    lines += format_statistics_table(result)
    mc, tm = result["machine"], result["timing"]
    env = dict(result["env"])
    name = env.pop("name", config.DEFAULT_ENV)
    legend = [
        "",
        f"Environment {name} ({', '.join(f'{k} = {v}' for k, v in env.items())}), alpha = {alpha}; "
        f"{r} seeds per run (vmapped in one program), base seed {result['seed']}.",
        f"Paper metric: mean episode reward / cost over the last {result['paper_episodes']:,} training episodes "
        f"(the batch means of the last ceil({result['paper_episodes']}/K) iterations), mean ± std over seeds. "
        "Exact: `fhc_jax.evaluate` of each seed's final policy, mean ± std [min, max] over seeds."
        + (f" Gap to J*: J* - J (J* = {opt['reward']:.2f})." if opt is not None else ""),
        f"Violating seeds: seeds whose cost exceeds alpha by more than {100 * result['tolerance']:g}% of |alpha| "
        f"(the judge's feasibility rule, `run.feasibility_tolerance`).",
        "Every learner uses its default (tuned) `Config`" + (
            "; * marks runs with changed settings: " + "; ".join(
                f"{row['name']}: " + ", ".join(f"{k} = {v}" for k, v in row["changed_settings"].items())
                for row in result["runs"] if row["changed_settings"]) if any(
                row["changed_settings"] for row in result["runs"]) else "") + ".",
        *result.get("notes", []),
        f"Hardware: {mc['cpu']['model']}, {mc['cpu']['usable_cores']} usable cores ({mc['cpu']['logical_cores']} "
        f"logical), JAX {mc['versions']['jax']} on {mc['device']['platform']} ({mc['device']['name']}). "
        f"Total wall time {tm['total_wall_s']:.0f} s (compilation {tm['compile_s']:.0f} s); "
        f"load average {tm['load_average_start']} at the start, {tm['load_average_end']} at the end.",
    ]
    return "\n".join(lines + [x for x in legend if x is not None]) + "\n"


def format_statistics_table(result: Mapping[str, Any]) -> list[str]:
    """The second table of :func:`format_markdown` (lines; empty for a result without
    statistics): per run the mean and IQM of the exact reward and cost, the probability of
    violating the constraint and the gap to J*, each with its 95% interval and the seeds."""
    rows = [row for row in result["runs"] if row.get("statistics")]
    if not rows:
        return []
    method = rows[0]["statistics"]["intervals"]
    missing = method.get("unavailable")
    est = statistics.format_estimate
    head = (f"Statistics over seeds ({result['seeds']} seeds per run): mean and IQM (interquartile mean) of the final "
            "policies' exact values with " + (f"no bootstrap interval ({missing})" if missing else
                                             f"stratified-bootstrap 95% intervals ({method['resamples']} resamples, "
                                             f"seed {method['bootstrap_seed']}, rliable)")
            + "; P(violation): the fraction of seeds the judge finds infeasible, Wilson 95% interval; "
            "gap: J* - J (signed), mean over seeds.")
    lines = ["", head, "",
             "| Algorithm | Input | Seeds | Exact reward: mean [95% CI] | Exact reward: IQM [95% CI] | "
             "Exact cost: mean [95% CI] | Exact cost: IQM [95% CI] | P(violation) [95% CI] | Gap to J*: mean [95% CI] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        st = row["statistics"]
        lines.append(f"| {row['label']} | {row['input']} | {st['n_seeds']} | {est(st['reward'], 'mean')} | "
                     f"{est(st['reward'], 'iqm')} | {' / '.join(est(c, 'mean') for c in st['costs'])} | "
                     f"{' / '.join(est(c, 'iqm') for c in st['costs'])} | "
                     f"{statistics.format_violation(st['violation_probability'])} | "
                     f"{est(st['optimality_gap'], 'mean')} |")
    return lines


def profile_panels(result: Mapping[str, Any]) -> list[tuple[str, dict[str, np.ndarray]]] | None:
    """The performance profiles' scores from a comparison's JSON: per run the fraction of the
    optimum J / J* of each seed, over all seeds and with the seeds the judge finds infeasible
    scored 0; None without a positive optimum."""
    opt = result.get("optimum")
    if opt is None or not opt["reward"] > 0:
        return None
    optimum = Optimum(reward=opt["reward"], costs=np.asarray(opt["costs"]),
                      multipliers=np.asarray(opt["multipliers"]), policy=None, stage_costs=None,
                      stage_rewards=None, solve_time_s=opt["solve_time_s"])
    every, feasible = {}, {}
    for row in result["runs"]:
        reward = row["exact"]["reward"]["per_seed"]
        costs = np.stack([np.asarray(c["per_seed"], np.float64) for c in row["exact"]["costs"]], axis=1)
        judged = judge.judge(reward, costs, result["thresholds"], optimum=optimum, tolerance=result["tolerance"])
        every[row["name"]] = statistics.profile_scores(judged)
        feasible[row["name"]] = statistics.profile_scores(judged, feasible_only=True)
    return [("all seeds", every), ("seeds the judge finds infeasible scored 0", feasible)]


def plot_profiles(result: Mapping[str, Any], path: str | Path) -> Path | None:
    """``<stem>_profile.png``: performance profiles (:func:`profile_panels`) with 95%
    stratified-bootstrap bands; None (nothing written) without a positive optimum or rliable."""
    panels = profile_panels(result)
    if panels is None or statistics.unavailable() is not None:
        return None
    return statistics.plot_performance_profiles(panels, path, seeds=result["seeds"], title=result.get("env_title", ""))


def write_outputs(result: Mapping[str, Any], out: str | Path, stem: str = "reproduce_paper") -> dict[str, Path]:
    """Write ``out/<stem>.json`` (everything), ``.md`` (the tables), ``.png`` (the figure) and
    ``_profile.png`` (:func:`plot_profiles`, where it can be drawn), atomically; returns their
    paths."""
    from fhc_jax.experiment import rundir

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{stem}.json", "md": out / f"{stem}.md", "png": out / f"{stem}.png"}
    payload = {k: v for k, v in result.items() if not k.startswith("_")}
    rundir.write_json_atomic(paths["json"], payload)
    rundir.write_bytes_atomic(paths["md"], format_markdown(payload).encode())
    plot_comparison(payload, paths["png"], colors={a: f"C{i}" for i, a in enumerate(LABELS)})
    profile = plot_profiles(payload, out / f"{stem}_profile.png")
    if profile is not None:
        paths["profile"] = profile
    return paths
