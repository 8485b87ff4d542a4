"""The paper's comparison: FH-Constrained against NN-Constrained, PPO-Lagrangian and CPO on one
gridworld, several seeds each, judged by the paper's metric and exactly.

For every run (a learner with one network input) :func:`run_comparison` trains R seeds in one
vmapped, chunked program (:func:`fhc_jax.experiment.runner.train_seeds`) with the learner's
default (tuned) ``Config`` unless overridden, and measures

* the **paper's metric**: the mean episode reward and cost over the last 10,000 training
  episodes, i.e. over the batch means of the last ``ceil(10000 / K)`` iterations (K episodes
  per iteration), per seed; mean, std, min and max over seeds;
* the **exact** reward and costs of each seed's final policy (``fhc_jax.evaluate`` through the
  learner's exact evaluation), their gap to the exact constrained optimum (``fhc_jax.solve``);
* the **violation rate**: the fraction of seeds whose final policy's exact cost exceeds alpha by
  more than :data:`TOLERANCE` (relative), and the same for the paper's metric;
* wall and compile time.

:func:`write_outputs` writes ``<stem>.json`` (every number, hardware, versions, wall times),
``<stem>.md`` (:func:`format_markdown`) and ``<stem>.png`` (:func:`plot_comparison`, a Fig. 1
style two-panel figure). ``benchmarks/reproduce_paper.py`` and ``fhc-jax compare`` are thin
wrappers around :func:`main`-like calls of these functions.

Runs and inputs (:data:`DEFAULT_RUNS`): FH-Constrained uses tabular per-stage features (no input
choice); NN-Constrained uses the paper's "xy" input only: its per-stage networks already know the
stage h, so the paper's Env 2 ("xyt", the stage as an input) does not apply; the stationary
baselines PPO-Lagrangian and CPO run with "xy" (paper Env 1) and "xyt" (Env 2).
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import IO, Any, Iterable, Mapping, Sequence

import numpy as np

from fhc_jax.experiment import config_io, registry, summary as summ

#: relative tolerance of the violation rate: a cost counts as a violation above alpha * (1 + TOLERANCE)
TOLERANCE = 0.02
#: the paper's metric averages the last this many training episodes
PAPER_EPISODES = 10_000

#: display names of the learners
LABELS: dict[str, str] = {
    "fh-constrained": "FH-Constrained",
    "nn-constrained": "NN-Constrained",
    "ppo-lag": "PPO-Lagrangian",
    "cpo": "CPO",
}
#: display names of the inputs (None: the learner has no input choice)
INPUT_LABELS: dict[str | None, str] = {None: "tabular (h, s)", "xy": "Env 1 (xy)", "xyt": "Env 2 (xyt)",
                                       "one_hot": "one-hot s"}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of the comparison: a learner (command-line name) and its network input (None:
    tabular, no input choice)."""

    algo: str
    observation: str | None = None

    @property
    def name(self) -> str:
        return LABELS.get(self.algo, self.algo) + ("" if self.observation is None else f" ({self.observation})")


#: the paper's comparison (module docstring: why NN-Constrained has no "xyt" run)
DEFAULT_RUNS: tuple[RunSpec, ...] = (
    RunSpec("fh-constrained"),
    RunSpec("nn-constrained", "xy"),
    RunSpec("ppo-lag", "xy"),
    RunSpec("ppo-lag", "xyt"),
    RunSpec("cpo", "xy"),
    RunSpec("cpo", "xyt"),
)

NOTES = (
    "NN-Constrained runs with the paper's input (xy) only: its per-stage networks already know the "
    "stage h, so the paper's Env 2 (xyt) does not apply to it. FH-Constrained uses tabular per-stage "
    "features and has no input choice.",
)


def select_runs(algos: Iterable[str] | None = None, inputs: Iterable[str] | None = None) -> list[RunSpec]:
    """The runs of :data:`DEFAULT_RUNS` whose learner is in ``algos`` (either name form; None:
    all) and whose input is in ``inputs`` (runs without an input choice are always kept).

    Raises:
        ValueError: an unknown algorithm or input, or a selection that leaves no run.
    """
    wanted = None if algos is None else {registry.canonical_name(a) for a in algos}
    ins = None if inputs is None else set(inputs)
    if ins is not None:
        bad = sorted(ins - {"xy", "xyt"})
        if bad:
            raise ValueError(f"unknown input {bad[0]!r}; valid: 'xy', 'xyt'")
    runs = [r for r in DEFAULT_RUNS if (wanted is None or r.algo in wanted)
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
        key, _ = config_io.parse_assignment(text)
        head, dot, rest = key.partition(".")
        try:
            algo = registry.canonical_name(head) if dot else None
        except ValueError:
            algo = None
        if algo is None:
            common.append(text)
        else:
            per_algo.setdefault(algo, []).append(rest + text[text.index("="):])
    return common, per_algo


def build_specs(runs: Sequence[RunSpec], seeds: int, overrides: Iterable[str] = (), *, seed: int = 0
                ) -> list[config_io.ExperimentSpec]:
    """One validated :class:`~fhc_jax.experiment.config_io.ExperimentSpec` per run (nothing
    compiled). ``overrides``: ``--set`` strings (:func:`split_overrides`).

    Raises:
        ConfigError / ValueError: invalid settings, a learner key that no selected learner has,
            an algorithm-specific key for a learner that is not selected.
    """
    common, per_algo = split_overrides(overrides)
    selected = {r.algo for r in runs}
    extra = sorted(set(per_algo) - selected)
    if extra:
        raise config_io.ConfigError(f"--set {extra[0]}.*: {extra[0]!r} is not among the selected algorithms")
    common_values = dict(config_io.parse_assignment(t) for t in common)
    learner_keys = {k for k in common_values if not k.startswith(("env.", "run."))}
    known = set()
    for algo in selected:
        known |= set(config_io.learner_schema(registry.load_algorithm(algo).Config()))
    unknown = sorted(learner_keys - known)
    if unknown:
        raise config_io.ConfigError(f"unknown key {unknown[0]!r}: no selected learner has it (use env.*, run.*, "
                                    "a learner's Config field, or ALGO.key for one learner)")
    if "observation" in learner_keys:
        raise config_io.ConfigError("observation is chosen per run; select inputs with --inputs instead")
    env_run = [t for t in common if config_io.parse_assignment(t)[0] not in learner_keys]
    specs = []
    for r in runs:
        # learner keys common to all runs are "defaults": a learner that lacks one skips it
        specs.append(config_io.load_spec(r.algo, overrides=env_run + per_algo.get(r.algo, []),
                                         defaults={k: v for k, v in common_values.items() if k in learner_keys},
                                         settings={"run.seed": seed}, seeds=seeds, observation=r.observation))
    envs = {tuple(sorted((k, str(v)) for k, v in s.env.items())) for s in specs}
    if len(envs) != 1:  # pragma: no cover (env keys are common by construction)
        raise config_io.ConfigError("the runs must share one environment")
    return specs


def _changed_settings(spec: config_io.ExperimentSpec) -> dict[str, Any]:
    """Learner settings of ``spec`` that differ from the learner's defaults (observation aside)."""
    base = config_io.learner_settings(registry.load_algorithm(spec.algo).Config())
    now = config_io.learner_settings(spec.learner)
    return {k: v for k, v in now.items() if base.get(k) != v and k != "observation"}


# ----------------------------------------------------------------------------- statistics


def stats(x: np.ndarray) -> dict[str, Any]:
    """mean / std (population, over seeds) / min / max and the per-seed values of a (R,) array."""
    x = np.asarray(x, np.float64)
    return {"mean": float(np.mean(x)), "std": float(np.std(x)), "min": float(np.min(x)),
            "max": float(np.max(x)), "per_seed": x.tolist()}


def paper_window(num_iterations: int, episodes_per_iteration: int) -> int:
    """Iterations of the paper's metric: the last ceil(10000 / K), at most N."""
    return int(min(num_iterations, math.ceil(PAPER_EPISODES / episodes_per_iteration)))


def judge_run(metrics: Mapping[str, np.ndarray], exact_reward: np.ndarray, exact_costs: np.ndarray,
              thresholds: np.ndarray, episodes_per_iteration: int, opt: Mapping[str, Any] | None,
              tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Every number of one run's table row.

    Args:
        metrics: per-iteration batch means, ``reward`` (R, N) and ``costs`` (R, N, M).
        exact_reward: exact J of each seed's final policy, (R,); exact_costs: (R, M).
        thresholds: alpha, (M,). episodes_per_iteration: K.
        opt: :func:`fhc_jax.experiment.summary.optimum` or None.
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
    limit = np.asarray(thresholds, np.float64) * (1.0 + tolerance)
    p_violating = np.any(p_costs > limit, axis=1)
    # fraction of the window's iterations whose batch-mean cost is above alpha (all seeds)
    iters_above = float(np.mean(np.any(costs[:, -window:] > np.asarray(thresholds), axis=-1)))
    e_reward = np.asarray(exact_reward, np.float64)
    e_costs = np.asarray(exact_costs, np.float64).reshape(len(e_reward), -1)
    e_violating = np.any(e_costs > limit, axis=1)
    out = {
        "paper_metric": {
            "window_iterations": window,
            "window_episodes": window * episodes_per_iteration,
            "reward": stats(p_reward),
            "costs": [stats(p_costs[:, k]) for k in range(p_costs.shape[1])],
            "violating_seeds": int(p_violating.sum()),
            "violation_rate": float(p_violating.mean()),
            "fraction_of_window_iterations_above_alpha": iters_above,
        },
        "exact": {
            "reward": stats(e_reward),
            "costs": [stats(e_costs[:, k]) for k in range(e_costs.shape[1])],
            "violating_seeds": int(e_violating.sum()),
            "violation_rate": float(e_violating.mean()),
            "max_relative_excess": float(np.max((e_costs - thresholds) / np.asarray(thresholds))),
        },
    }
    if opt is not None:
        out["exact"]["gap"] = stats(opt["reward"] - e_reward)
        out["exact"]["fraction_of_optimum"] = stats(e_reward / opt["reward"]) if opt["reward"] else None
    return out


# ----------------------------------------------------------------------------- hardware


def hardware_info() -> dict[str, Any]:
    """CPU model, core counts, load average, platform and the JAX devices."""
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:  # pragma: no cover (not Linux)
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        usable = os.cpu_count()
    info = {"cpu_model": model, "cpu_count": os.cpu_count(), "usable_cores": usable,
            "platform": platform.platform(), "device": summ.device_info()}
    try:
        import jax

        info["device_name"] = str(jax.devices()[0])
    except Exception:  # pragma: no cover
        pass
    return info


def source_revision() -> dict[str, Any] | None:
    """The git commit of the checkout (read-only ``git`` calls) and the package files that
    differ from it or are untracked (``git status --porcelain -- fhc_jax``); None outside a
    git checkout."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "fhc_jax"], cwd=root, capture_output=True,
                               text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "modified": [line[3:] for line in dirty.splitlines() if line.strip()]}


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


# ----------------------------------------------------------------------------- the comparison


def run_comparison(runs: Sequence[RunSpec] | None = None, *, seeds: int = 5, seed: int = 0,
                   overrides: Iterable[str] = (), stream: IO[str] | None = None, quiet: bool = False,
                   keep_policies: bool = False) -> dict[str, Any]:
    """Train and judge every run; returns the result (JSON-ready, see :func:`write_outputs`).

    Args:
        runs: :class:`RunSpec` list (default :data:`DEFAULT_RUNS`).
        seeds: R seeds per run, vmapped in one program; seed i trains from
            ``fold_in(key(seed), i)``.
        overrides: ``--set`` strings (:func:`split_overrides`): ``env.size=4``,
            ``num_iterations=20`` (every learner), ``cpo.num_iterations=50`` (one learner).
        stream: progress lines (default stderr); quiet: none.
        keep_policies: also return the final policy tables, ``result["_policies"][i]`` (R, H, S, A)
            (not JSON; for tests).
    Raises:
        ConfigError / ValueError: invalid settings (before anything is compiled).
    """
    import jax

    import fhc_jax as fhc
    from fhc_jax.experiment.progress import Progress, env_steps_per_iteration
    from fhc_jax.experiment.runner import train_seeds

    t_start = time.perf_counter()
    load_start = load_average()
    source = source_revision()  # before the modules are imported
    stream = sys.stderr if stream is None else stream
    say = (lambda msg: None) if quiet else (lambda msg: print(msg, file=stream, flush=True))
    runs = list(DEFAULT_RUNS if runs is None else runs)
    specs = build_specs(runs, seeds, overrides, seed=seed)  # validates everything first
    env, params = specs[0].make_env()
    cmdp = env.to_cmdp(params)
    thresholds = np.asarray(cmdp.thresholds, np.float64)
    opt = summ.optimum(cmdp)
    unc = fhc.solve_unconstrained(cmdp)
    say(f"{env!r}: optimum J* = {opt['reward']:.4f} at cost {opt['costs'].tolist()} "
        f"(unconstrained {float(unc.reward):.4f} at cost {np.asarray(unc.costs).tolist()})"
        if opt is not None else f"{env!r}: the constraint is infeasible")
    results, policies = [], []
    for i, (run, spec) in enumerate(zip(runs, specs)):
        module = registry.load_algorithm(spec.algo)
        cfg = spec.learner
        say(f"[{i + 1}/{len(runs)}] {run.name}: {seeds} seeds x {cfg.num_iterations} iterations x "
            f"{cfg.episodes_per_iteration} episodes ...")
        progress = None if quiet else Progress(run.name, int(cfg.num_iterations), seeds,
                                               env_steps_per_iteration(cfg, env.horizon), thresholds, stream)
        t0 = time.perf_counter()
        res = train_seeds(module, env, params, cfg, seeds, seed=spec.seed, chunk_size=spec.chunk_size,
                          on_chunk=progress)
        wall = time.perf_counter() - t0
        exact_reward, exact_costs = res.state.exact_reward[:, -1], res.state.exact_costs[:, -1]
        row = {
            "name": run.name,
            "algo": spec.algo,
            "label": LABELS.get(spec.algo, spec.algo),
            "observation": run.observation,
            "input": INPUT_LABELS.get(run.observation, str(run.observation)),
            "num_iterations": int(cfg.num_iterations),
            "episodes_per_iteration": int(cfg.episodes_per_iteration),
            "training_episodes": int(cfg.num_iterations * cfg.episodes_per_iteration),
            "changed_settings": _changed_settings(spec),
            "settings": config_io.learner_settings(cfg),
            **judge_run(res.state.metrics, exact_reward, exact_costs, thresholds, cfg.episodes_per_iteration, opt),
            "exact_curve": {
                "iterations": res.state.exact_iterations.tolist(),
                "reward_mean": res.state.exact_reward.mean(0).tolist(),
                "costs_mean": res.state.exact_costs.mean(0).T.tolist(),
            },
            "timing": {"wall_s": wall, "compile_s": res.compile_s, "train_s": res.run_s},
        }
        if "multipliers" in res.state.metrics:
            row["final_multipliers"] = np.asarray(res.state.metrics["multipliers"][:, -1], np.float64).tolist()
        results.append(row)
        policies.append(res.policy)
        pm, ex = row["paper_metric"], row["exact"]
        say(f"    paper metric: reward {pm['reward']['mean']:.2f}, cost {pm['costs'][0]['mean']:.2f}; "
            f"exact: reward {ex['reward']['mean']:.2f}, cost {ex['costs'][0]['mean']:.2f}, "
            f"{ex['violating_seeds']}/{seeds} seeds violate; {wall:.1f} s (compile {res.compile_s:.1f} s)")
    total = time.perf_counter() - t_start
    result = {
        "env": dict(specs[0].env),
        "env_repr": repr(env),
        "seeds": seeds,
        "seed": specs[0].seed,
        "overrides": list(overrides),
        "thresholds": thresholds.tolist(),
        "tolerance": TOLERANCE,
        "paper_episodes": PAPER_EPISODES,
        "optimum": None if opt is None else {"reward": opt["reward"], "costs": opt["costs"].tolist(),
                                             "multipliers": opt["multipliers"].tolist(),
                                             "solve_time_s": opt["solve_time_s"]},
        "unconstrained": {"reward": float(unc.reward), "costs": np.asarray(unc.costs, np.float64).tolist(),
                          "solve_time_s": float(unc.solve_time)},
        "runs": results,
        "notes": list(NOTES),
        "hardware": hardware_info(),
        "versions": summ.versions(),
        "source": source,
        "timing": {"total_wall_s": total, "runs_wall_s": float(sum(r["timing"]["wall_s"] for r in results)),
                   "compile_s": float(sum(r["timing"]["compile_s"] for r in results)),
                   "load_average_start": load_start, "load_average_end": load_average()},
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if keep_policies:
        result["_policies"] = policies
    say(f"total wall time {total:.1f} s (load average {load_start} -> {result['timing']['load_average_end']})")
    return result


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
    hw, tm = result["hardware"], result["timing"]
    env = result["env"]
    legend = [
        "",
        f"GridWorld {env['size']}x{env['size']}, H = {env['horizon']}, alpha = {alpha}, slip = {env['slip']}, "
        f"layout_seed = {env['layout_seed']}; {r} seeds per run (vmapped in one program), base seed {result['seed']}.",
        f"Paper metric: mean episode reward / cost over the last {result['paper_episodes']:,} training episodes "
        f"(the batch means of the last ceil({result['paper_episodes']}/K) iterations), mean ± std over seeds. "
        "Exact: `fhc_jax.evaluate` of each seed's final policy, mean ± std [min, max] over seeds."
        + (f" Gap to J*: J* - J (J* = {opt['reward']:.2f})." if opt is not None else ""),
        f"Violating seeds: seeds whose cost exceeds alpha by more than {100 * result['tolerance']:g}% "
        f"(cost > {alpha} x {1 + result['tolerance']:g}).",
        "Every learner uses its default (tuned) `Config`" + (
            "; * marks runs with changed settings: " + "; ".join(
                f"{row['name']}: " + ", ".join(f"{k} = {v}" for k, v in row["changed_settings"].items())
                for row in result["runs"] if row["changed_settings"]) if any(
                row["changed_settings"] for row in result["runs"]) else "") + ".",
        *result.get("notes", []),
        f"Hardware: {hw['cpu_model']}, {hw['usable_cores']} usable cores ({hw['cpu_count']} logical), "
        f"JAX {result['versions']['jax']} on {hw['device']['platform']} ({hw.get('device_name', '')}). "
        f"Total wall time {tm['total_wall_s']:.0f} s (compilation {tm['compile_s']:.0f} s); "
        f"load average {tm['load_average_start']} at the start, {tm['load_average_end']} at the end.",
    ]
    return "\n".join(lines + [x for x in legend if x is not None]) + "\n"


def plot_comparison(result: Mapping[str, Any], path: str | Path, constraint: int = 0) -> Path:
    """Fig. 1-style figure: reward (left) and cost (right) per algorithm and input; bars are the
    means over seeds of the paper's metric (solid) and of the exact values of the final
    policies (hatched), dots the seeds; the optimum's reward (black dashed, the unconstrained
    one grey dotted) and the threshold alpha (red dotted)."""
    from fhc_jax.experiment.plots import _pyplot

    plt = _pyplot()
    runs = result["runs"]
    x = np.arange(len(runs))
    width = 0.38
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 1.9 * len(runs) + 2), 4.2))
    colors = {a: f"C{i}" for i, a in enumerate(LABELS)}
    panels = ((axes[0], "reward", lambda d: d["reward"], "episode reward"),
              (axes[1], "cost", lambda d: d["costs"][constraint], f"episode cost (constraint {constraint})"))
    rng = np.random.default_rng(0)
    for ax, _, get, ylabel in panels:
        for i, row in enumerate(runs):
            color = colors.get(row["algo"], "C7")
            for offset, key, hatch, lab in ((-width / 2, "paper_metric", None, "last 10k episodes (paper metric)"),
                                            (width / 2, "exact", "//", "final policy, exact")):
                s = get(row[key])
                ax.bar(x[i] + offset, s["mean"], width, color=color, alpha=0.55 if hatch else 0.85,
                       hatch=hatch, edgecolor="black", lw=0.5, label=lab if i == 0 else None)
                pts = np.asarray(s["per_seed"])
                jitter = rng.uniform(-width / 5, width / 5, len(pts))
                ax.scatter(x[i] + offset + jitter, pts, s=10, color="black", zorder=3,
                           label="seeds" if (i == 0 and hatch) else None)
        ax.set_xticks(x)
        ax.set_xticklabels([f"{row['label']}\n{row['input']}" for row in runs], fontsize=7)
        ax.set_ylabel(ylabel)
    if result["optimum"] is not None:
        axes[0].axhline(result["optimum"]["reward"], color="black", ls="--", lw=1,
                        label=f"constrained optimum J* = {result['optimum']['reward']:.2f}")
    axes[0].axhline(result["unconstrained"]["reward"], color="grey", ls=":", lw=1,
                    label=f"unconstrained optimum = {result['unconstrained']['reward']:.2f}")
    alpha = result["thresholds"][constraint]
    axes[1].axhline(alpha, color="red", ls=":", lw=1.5, label=f"threshold alpha = {alpha:g}")
    axes[1].axhspan(alpha, alpha * (1 + result["tolerance"]), color="red", alpha=0.12, lw=0,
                    label=f"alpha + {100 * result['tolerance']:g}% (violation above)")
    axes[0].set_title("reward", fontsize=9)
    axes[1].set_title("cost", fontsize=9)
    for ax in axes:  # headroom for the legend above the bars
        low, high = ax.get_ylim()
        ax.set_ylim(min(0.0, low), high + 0.35 * (high - min(0.0, low)))
        ax.legend(fontsize=6.5, loc="upper center", ncol=2)
    env = result["env"]
    fig.suptitle(f"GridWorld {env['size']}x{env['size']}, H = {env['horizon']}, {result['seeds']} seeds: "
                 "paper metric (solid) and exact values of the final policies (hatched)", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_outputs(result: Mapping[str, Any], out: str | Path, stem: str = "reproduce_paper") -> dict[str, Path]:
    """Write ``out/<stem>.json`` (everything), ``.md`` (the table) and ``.png`` (the figure),
    atomically; returns their paths."""
    from fhc_jax.experiment import rundir

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{stem}.json", "md": out / f"{stem}.md", "png": out / f"{stem}.png"}
    payload = {k: v for k, v in result.items() if not k.startswith("_")}
    rundir.write_json_atomic(paths["json"], payload)
    rundir.write_bytes_atomic(paths["md"], format_markdown(payload).encode())
    plot_comparison(payload, paths["png"])
    return paths
