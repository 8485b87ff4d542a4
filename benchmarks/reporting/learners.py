"""Renderers of the learners' results files: one learner's benchmark (``render_learner``), the
paper's comparison (``render_comparison``) and the robustness suite (``render_robustness``).

A renderer takes ``(name, data)``, the file's path relative to ``benchmarks/results`` and its
parsed JSON, and returns markdown lines whose first line is the section title."""

from __future__ import annotations

import re
from pathlib import Path

from reporting.fmt import num, pct, secs, si, span, table
from reporting.provenance import hardware, jax_version, on, provenance, provenance_text


def _multiplier(seed: dict) -> float | None:
    for key in ("learned_multiplier", "final_multiplier", "final_multiplier_nu"):
        if key in seed:
            return seed[key]
    return None


def render_learner(name: str, data: dict) -> list[str]:
    """A learner benchmark (``benchmarks/{fh_constrained,nn_constrained,...}.py``): each quality
    run's seeds judged exactly, and the training throughput."""
    title = {
        "fh_constrained": "FH-Constrained",
        "nn_constrained": "NN-Constrained",
        "ppo_lagrangian": "PPO-Lagrangian",
        "cpo": "CPO",
        "ecop": "e-COP",
        "saute": "Saute-Lagrangian",
    }
    stem = Path(name).stem
    learner = next((v for k, v in title.items() if stem == k or stem.startswith(k + "_")), stem)
    out = [f"{learner} on the default gridworld{on(name, data)}", provenance(name, data)]
    quality = data.get("quality") or {}
    if quality:
        rows = []
        for label, run in quality.items():
            seeds = run["seeds"]
            fr = [s["reward_fraction_of_optimum"] for s in seeds]
            budget = (
                f"{run['num_iterations']} x {run['episodes_per_iteration']}"
                if "num_iterations" in run and "episodes_per_iteration" in run
                else "default"
            )
            rows.append(
                [
                    label,
                    budget,
                    len(seeds),
                    " ".join(pct(f) for f in fr),
                    f"{pct(min(fr))} / {pct(sum(fr) / len(fr))}",
                    span([s["exact_cost"] for s in seeds]),
                    f"{sum(bool(s['cost_ok']) for s in seeds)}/{len(seeds)}",
                    span([_multiplier(s) for s in seeds]),
                    secs(run.get("wall_s_including_compile")),
                ]
            )
        first = next(iter(quality.values()))
        out += [
            "",
            f"Exact judgement against the optimum {num(first['optimum_reward'])} at cost "
            f"{num(first['optimum_cost'])} (multiplier {num(first.get('optimal_multiplier'), 3)}); "
            f"feasible: cost <= 1.02 alpha.",
        ]
        out += [""] + table(
            [
                "run",
                "updates x K",
                "seeds",
                "% of the optimum per seed",
                "worst / mean %",
                "cost",
                "feasible",
                "learned multiplier",
                "wall (with compile)",
            ],
            rows,
        )
    for cap in data.get("capacity", []):
        out += [
            "",
            f'Capacity: the {cap["depth"]} x {cap["width"]} network on "{cap["observation"]}" fitted '
            f"to the optimal policy by imitation earns {num(cap['imitation_reward'])} "
            f"({pct(cap['fraction_of_optimum'])}% of the optimum) at cost {num(cap['imitation_cost'])}.",
        ]
    speed = data.get("speed")
    rows_speed = speed.get("jax", []) if isinstance(speed, dict) else speed or []
    if rows_speed:
        numpy_ref = speed.get("numpy_per_episode_steps_per_s") if isinstance(speed, dict) else None
        header = ["K"] + (["input"] if any("observation" in r for r in rows_speed) else [])
        header += ["env-steps/s", "updates/s"]
        header += ["steady state", "vs numpy"] if numpy_ref else []
        rows = []
        for r in rows_speed:
            row = [r["K"]] + ([r.get("observation", "-")] if "input" in header else [])
            ups = r.get("updates_per_s") or (r["iterations"] / r["run_s"] if r.get("run_s") else None)
            row += [si(r["env_steps_per_s"]), si(ups)]
            if numpy_ref:
                steady = r.get("steady_env_steps_per_s")
                row += [si(steady), f"{si(r['env_steps_per_s'] / numpy_ref)}x"]
            rows.append(row)
        out += [
            "",
            "Training throughput (one seed, whole run in one jit, compile excluded"
            + (f"; numpy per-episode reference {si(numpy_ref)} steps/s" if numpy_ref else "")
            + "):",
            "",
        ]
        out += table(header, rows)
    seeds = data.get("seeds")
    if isinstance(seeds, dict) and "vmap_s" in seeds:
        out += [
            "",
            f"{seeds['seeds']} seeds x {seeds['iterations']} updates of K = {seeds['K']}: "
            f"{secs(seeds['vmap_s'])} vmapped in one call, {secs(seeds['sequential_s'])} one after another.",
        ]
    return out


def render_comparison(name: str, data: dict) -> list[str]:
    """``fhc-jax compare`` / ``benchmarks/reproduce_paper.py``: the paper's comparison."""
    opt, free = data["optimum"], data["unconstrained"]
    out = ["The paper's comparison on the default gridworld", provenance(name, data), ""]
    env = data.get("env", {})
    out.append(
        f"{env.get('size')}x{env.get('size')} grid, H = {env.get('horizon')}, alpha = "
        f"{num(data['thresholds'][0])}, {data['seeds']} seeds per run, each final policy judged exactly; "
        f"a seed violates when its cost exceeds alpha by more than {data['tolerance']:.0%}. "
        f"Paper metric: mean episode reward and cost over the last {data['paper_episodes']:,} training "
        f"episodes."
    )
    rows = []
    for run in data["runs"]:
        ex, pm = run["exact"], run["paper_metric"]
        fr = ex["fraction_of_optimum"]
        rows.append(
            [
                run["label"],
                run["input"],
                f"{run['num_iterations']} x {run['episodes_per_iteration']}",
                f"{num(pm['reward']['mean'])} / {num(pm['costs'][0]['mean'])}",
                f"{num(ex['reward']['mean'])} [{num(ex['reward']['min'], 1)}, {num(ex['reward']['max'], 1)}]",
                f"{pct(fr['mean'])} ({pct(fr['min'])}-{pct(fr['max'])})",
                f"{num(ex['costs'][0]['mean'])} [{num(ex['costs'][0]['min'], 1)}, {num(ex['costs'][0]['max'], 1)}]",
                f"{ex['violating_seeds']}/{data['seeds']}",
                f"{pm['violating_seeds']}/{data['seeds']}",
                f"{run['timing']['wall_s']:.0f} ({run['timing']['compile_s']:.0f})",
            ]
        )
    rows.append(
        [
            "**Exact optimum** (`fhc_jax.solve`)",
            "-",
            "-",
            "-",
            num(opt["reward"]),
            "100",
            num(opt["costs"][0]),
            "-",
            "-",
            num(opt.get("solve_time_s"), 1),
        ]
    )
    rows.append(
        [
            "Unconstrained optimum",
            "-",
            "-",
            "-",
            num(free["reward"]),
            "-",
            num(free["costs"][0]),
            "-",
            "-",
            num(free.get("solve_time_s"), 1),
        ]
    )
    out += [""] + table(
        [
            "learner",
            "input",
            "updates x K",
            "paper metric: reward / cost",
            "exact reward [min, max]",
            "% of the optimum (per-seed range)",
            "exact cost [min, max]",
            "violating (exact)",
            "violating (paper metric)",
            "wall s (compile s)",
        ],
        rows,
    )
    stats_rows = []
    for run in data["runs"]:
        st = run.get("statistics")
        if not st:
            continue
        r, c, v = st["reward"], st["costs"][0], st["violation_probability"]
        ci = lambda d, k: f"[{num(d[k][0])}, {num(d[k][1])}]"  # noqa: E731
        stats_rows.append(
            [
                run["label"],
                run["input"],
                st["n_seeds"],
                f"{num(r['mean'])} {ci(r, 'mean_ci95')}",
                f"{num(r['iqm'])} {ci(r, 'iqm_ci95')}",
                f"{num(c['mean'])} {ci(c, 'mean_ci95')}",
                f"{num(v['estimate'])} {ci(v, 'ci95')}",
                f"{num(st['optimality_gap']['mean'])} {ci(st['optimality_gap'], 'mean_ci95')}",
            ]
        )
    if stats_rows:
        out += [
            "",
            "Over seeds: mean and IQM with stratified-bootstrap 95% intervals (optimistic with 5 seeds), "
            "P(violation) with its Wilson 95% interval.",
            "",
        ]
        out += table(
            [
                "learner",
                "input",
                "seeds",
                "exact reward: mean [95% CI]",
                "IQM [95% CI]",
                "exact cost: mean [95% CI]",
                "P(violation) [95% CI]",
                "gap to J*: mean [95% CI]",
            ],
            stats_rows,
        )
    timing = data.get("timing", {})
    if timing:
        out += [
            "",
            f"Whole comparison: {timing['total_wall_s']:.0f} s of wall time, "
            f"{timing['compile_s']:.0f} s of it compilation. Figures: `benchmarks/results/reproduce_paper.png`, "
            f"`reproduce_paper_profile.png`.",
        ]
    return out


def robustness_cells(data: dict) -> tuple[list[dict], dict[str, dict]]:
    """``benchmarks/robustness.py``'s file as a list of cells (each with its ``learner`` and
    ``task``) and its runs (run id -> command, machine, jax version)."""
    cells = [
        {"learner": lr, "task": t, **c} for lr, by_task in data.get("results", {}).items() for t, c in by_task.items()
    ]
    return cells, data.get("runs", {})


def _slice_command(command: str | None) -> str | None:
    """A robustness slice's command without its ``--out PATH`` (each slice was merged into
    benchmarks/results/robustness.json)."""
    return None if command is None else re.sub(r" --out \S+", "", command)


def run_hosts(runs: dict) -> str:
    """The distinct hardware lines and jax versions of the runs, joined."""
    seen = dict.fromkeys(
        f"{hardware(r) or 'hardware not recorded'} · jax {jax_version(r) or '?'}" for r in runs.values()
    )
    return "; ".join(seen) or "hardware not recorded"


def render_robustness(name: str, data: dict) -> list[str]:
    """``benchmarks/robustness.py``: every learner on every task of the suite; each cell is the
    worst seed's % of the optimum (or reference) and the feasible seeds."""
    cells, runs = robustness_cells(data)
    learners = list(dict.fromkeys(c["learner"] for c in cells))
    tasks = [t for t in data.get("tasks", {}) if any(c["task"] == t for c in cells)]
    by = {(c["task"], c["learner"]): c for c in cells}

    def cell(c: dict | None) -> str:
        if c is None:
            return "not run"
        if c.get("error"):
            return "refused" if "refus" in c["error"] or "takes discrete actions" in c["error"] else "error"
        seeds = c.get("seeds", [])
        percents = [s["percent"] for s in seeds if s.get("percent") is not None]
        worst = f"{min(percents):.1f}%" if percents else "n/a"
        silent = sum(1 for s in seeds if s.get("silent_infeasible"))
        note = f", {silent} unflagged" if silent else ""
        return f"{worst} ({sum(bool(s['feasible']) for s in seeds)}/{len(seeds)}{note})"

    def wall(c: dict | None) -> str:
        if c is None or "run_s" not in c:
            return "-"
        return f"{c.get('compile_s', 0.0) + c['run_s']:.0f}"

    out = ["Robustness: every learner's plain Config() on every task of the suite", ""]
    for run in runs.values():  # each slice's command, without where it wrote its copy of the file
        out.append(f"Measured by {provenance_text({**run, 'command': _slice_command(run.get('command'))})}.")
    out += [
        "",
        "Each cell: the worst seed's % of the task's optimum (exact tasks) or reference (battery; n/a "
        "where the task has none) and, in brackets, the seeds whose returned policy is within 1.02 alpha "
        '(Monte-Carlo: its upper 95% bound), out of all seeds; "unflagged": infeasible seeds the learner\'s '
        "own status did not flag.",
        "",
    ]
    out += table(
        ["task", "nu*"] + learners,
        [[t, _nu_star(data.get("tasks", {}).get(t, {}))] + [cell(by.get((t, lr))) for lr in learners] for t in tasks],
    )
    out += ["", "Wall time of each cell in seconds (compilation and 5 seeds' training in one program):", ""]
    out += table(["task"] + learners, [[t] + [wall(by.get((t, lr))) for lr in learners] for t in tasks])
    for c in cells:
        if c.get("error"):
            out += ["", f"{c['learner']} on {c['task']}: {c['error']}"]
    total = sum((c.get("compile_s") or 0.0) + (c.get("run_s") or 0.0) for c in cells)
    out += ["", f"Total wall time of the {len(cells)} cells: {total / 60:.0f} minutes (compilation included)."]
    from fhc_jax.envs import suite  # the suite's tasks this file has no results for yet

    missing = [t for t in suite.TASKS if t not in tasks]
    if missing:
        out += [
            "",
            f"Not measured yet: {', '.join(f'`{t}`' for t in missing)} "
            "(`python benchmarks/robustness.py --tasks ...` merges them into this file).",
        ]
    return out


def _nu_star(task: dict) -> str:
    nu = task.get("nu_star")
    if not nu:
        return "-"
    return ", ".join(f"{v:.3g}" for v in nu)
