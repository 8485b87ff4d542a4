"""What ``fhc-jax compare`` writes (:func:`write_outputs`): ``<stem>.json`` (every number,
hardware, versions, wall times), ``<stem>.md`` (:func:`format_markdown`: the comparison table
and the statistics over seeds), ``<stem>.png`` (:func:`fhc_jax.experiment.plots.plot_comparison`,
a Fig. 1 style two-panel figure) and ``<stem>_profile.png`` (performance profiles of the
fraction of the optimum over seeds, :func:`plot_profiles`). Everything is drawn from the
comparison's JSON-ready result (:func:`fhc_jax.experiment.compare.run_comparison`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fhc_jax.experiment import config, judge, statistics
from fhc_jax.experiment.judgement import Optimum
from fhc_jax.experiment.plots import plot_comparison
from fhc_jax.experiment.study_file import LABELS


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
    common = result.get("tolerance")  # None: the rows were judged with different tolerances
    lines = [
        "| Algorithm | Input | Iterations x K | Paper metric: reward | Paper metric: cost | "
        "Exact reward [min, max] | Exact cost [min, max] | Gap to J* | Violating seeds (exact) | "
        "Violating seeds (paper metric) | Wall s (compile s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["runs"]:
        pm, ex = row["paper_metric"], row["exact"]
        gap = _pm(ex["gap"]) if "gap" in ex else "-"
        iters = f"{row['num_iterations']} x {row['episodes_per_iteration']}"
        if row["changed_settings"]:
            iters += " *"
        tol = row.get("feasibility_tolerance", common)
        own = "" if common is not None else f" (tolerance {100 * tol:g}%)"
        lines.append(
            f"| {row['label']} | {row['input']} | {iters} | {_pm(pm['reward'])} | {_costs(pm['costs'], False)} | "
            f"{_pm(ex['reward'])} {_range(ex['reward'])} | {_costs(ex['costs'], True)} | {gap} | "
            f"{ex['violating_seeds']}/{r}{own} | {pm['violating_seeds']}/{r}{own} | "
            f"{row['timing']['wall_s']:.0f} ({row['timing']['compile_s']:.0f}) |"
        )
    if opt is not None:
        lines.append(
            f"| **Exact optimum** (`fhc_jax.solve`) | - | - | - | - | {opt['reward']:.2f} | "
            f"{'/'.join(f'{c:.2f}' for c in opt['costs'])} | 0 | - | - | {opt['solve_time_s']:.1f} |"
        )
    lines.append(
        f"| Unconstrained optimum (`fhc_jax.solve_unconstrained`) | - | - | - | - | {unc['reward']:.2f} | "
        f"{'/'.join(f'{c:.2f}' for c in unc['costs'])} | - | - | - | {unc['solve_time_s']:.1f} |"
    )
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
        (
            f"Violating seeds: seeds whose cost exceeds alpha by more than {100 * common:g}% of |alpha| "
            f"(the judge's feasibility rule, `run.feasibility_tolerance`)."
            if common is not None
            else "Violating seeds: seeds whose cost exceeds alpha by more than the row's tolerance (in its cell) "
            "of |alpha| (the judge's feasibility rule, `run.feasibility_tolerance`, set per row)."
        ),
        "Every learner uses its default (tuned) `Config`"
        + (
            "; * marks runs with changed settings: "
            + "; ".join(
                f"{row['name']}: " + ", ".join(f"{k} = {v}" for k, v in row["changed_settings"].items())
                for row in result["runs"]
                if row["changed_settings"]
            )
            if any(row["changed_settings"] for row in result["runs"])
            else ""
        )
        + ".",
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
    head = (
        f"Statistics over seeds ({result['seeds']} seeds per run): mean and IQM (interquartile mean) of the final "
        "policies' exact values with "
        + (
            f"no bootstrap interval ({missing})"
            if missing
            else f"stratified-bootstrap 95% intervals ({method['resamples']} resamples, "
            f"seed {method['bootstrap_seed']}, rliable)"
        )
        + "; P(violation): the fraction of seeds the judge finds infeasible, Wilson 95% interval; "
        "gap: J* - J (signed), mean over seeds."
    )
    lines = [
        "",
        head,
        "",
        "| Algorithm | Input | Seeds | Exact reward: mean [95% CI] | Exact reward: IQM [95% CI] | "
        "Exact cost: mean [95% CI] | Exact cost: IQM [95% CI] | P(violation) [95% CI] | Gap to J*: mean [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        st = row["statistics"]
        lines.append(
            f"| {row['label']} | {row['input']} | {st['n_seeds']} | {est(st['reward'], 'mean')} | "
            f"{est(st['reward'], 'iqm')} | {' / '.join(est(c, 'mean') for c in st['costs'])} | "
            f"{' / '.join(est(c, 'iqm') for c in st['costs'])} | "
            f"{statistics.format_violation(st['violation_probability'])} | "
            f"{est(st['optimality_gap'], 'mean')} |"
        )
    return lines


def profile_panels(result: Mapping[str, Any]) -> list[tuple[str, dict[str, np.ndarray]]] | None:
    """The performance profiles' scores from a comparison's JSON: per run the fraction of the
    optimum J / J* of each seed, over all seeds and with the seeds the judge finds infeasible
    scored 0; None without a positive optimum."""
    opt = result.get("optimum")
    if opt is None or not opt["reward"] > 0:
        return None
    optimum = Optimum(
        reward=opt["reward"],
        costs=np.asarray(opt["costs"]),
        multipliers=np.asarray(opt["multipliers"]),
        policy=None,
        stage_costs=None,
        stage_rewards=None,
        solve_time_s=opt["solve_time_s"],
    )
    every, feasible = {}, {}
    for row in result["runs"]:
        reward = row["exact"]["reward"]["per_seed"]
        costs = np.stack([np.asarray(c["per_seed"], np.float64) for c in row["exact"]["costs"]], axis=1)
        judged = judge.judge(
            reward,
            costs,
            result["thresholds"],
            optimum=optimum,
            tolerance=row.get("feasibility_tolerance", result["tolerance"]),
            cost_scale=result.get("cost_scale"),
        )
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
