"""Write ``docs/benchmarks.md`` and the README's learner table from ``benchmarks/results/*.json``.

Every measured number of the documentation comes from a results file that a script of
``benchmarks/`` wrote. This script turns them into one generated page: one small renderer per
kind of results file, chosen by file name (``RENDERERS``: the first matching pattern wins);
every table names the command that produced it, one hardware line and the jax version (dates
stay inside the JSON). A results file that no pattern matches is listed at the end of the page,
never skipped silently. The README's learner table (between ``<!-- learners -->`` and
``<!-- /learners -->``) and its one speed figure (``<!-- speed -->`` ... ``<!-- /speed -->``)
are rewritten from ``reproduce_paper.json`` and ``fh_constrained.json``.

Usage::

    python benchmarks/report.py            # rewrite docs/benchmarks.md and the README blocks
    python benchmarks/report.py --check    # exit 1, naming what is stale, if either differs

A renderer takes ``(name, data)``, the file's path relative to ``benchmarks/results`` and its
parsed JSON, and returns markdown lines whose first line is the section title.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"

Renderer = Callable[[str, dict], list[str]]

# --------------------------------------------------------------------------------------------
# formatting


def _three(x: float) -> str:
    """Three significant digits, trailing zeros kept (``16.0``, ``117``, ``4.41``)."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def si(x: float | None) -> str:
    """``57804528.7 -> '57.8M'``; None -> '-'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{_three(x / scale)}{suffix}"
    return _three(x)


def pct(fraction: float | None) -> str:
    """A fraction as a percentage with one decimal (``0.9658 -> '96.6'``)."""
    return "-" if fraction is None else f"{100 * fraction:.1f}"


def num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def secs(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{_three(x * 1e3)} ms" if x < 1 else f"{_three(x)} s"


def span(values: list[float], fmt: Callable[[float], str] = num) -> str:
    """``'lo-hi'`` of the values (one value alone when they agree)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    lo, hi = fmt(min(vals)), fmt(max(vals))
    return lo if lo == hi else f"{lo} to {hi}" if lo.startswith("-") or hi.startswith("-") else f"{lo}-{hi}"


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


# --------------------------------------------------------------------------------------------
# provenance: the command, one hardware line, the jax version


def _machine(data: dict) -> dict:
    for key in ("machine_quality", "machine"):
        if isinstance(data.get(key), dict):
            return data[key]
    return {}


def hardware(data: dict) -> str | None:
    """One line naming the hardware: ``hardware_line`` if the file has one, else read from the
    machine record (``fhc_jax.experiment.machine.machine_info``, or the older flat record)."""
    if isinstance(data.get("hardware_line"), str):
        return data["hardware_line"]
    m = _machine(data)
    if isinstance(m.get("cpu"), dict):
        cpu, dev = m["cpu"], m.get("device", {})
        model = (cpu.get("model") or "CPU").replace("(R)", "").replace("(TM)", "")
        host = f"{model}, {cpu.get('logical_cores', '?')} cores"
        if dev.get("platform", "cpu") != "cpu":
            return f"{dev.get('count', 1)} x {dev.get('kind', dev.get('platform'))} ({host} host)"
        return f"{host}, no accelerator"
    if "cpu_count" in m:
        devices = [d for d in m.get("devices", []) if not str(d).startswith("cpu")]
        host = f"{m['cpu_count']}-core {m.get('processor') or 'x86_64'} CPU"
        return f"{', '.join(devices)} ({host} host)" if devices else f"{host}, no accelerator"
    return None


def accelerator(data: dict) -> str | None:
    """The accelerator the file was measured on (``'NVIDIA H200'``), None on a CPU."""
    line = hardware(data) or ""
    if "no accelerator" in line or not line:
        return None
    return line.split(" (")[0].removeprefix("1 x ")


def on(name: str, data: dict) -> str:
    """A title suffix naming the accelerator, if any."""
    device = accelerator(data)
    return f", {device}" if device else ""


def jax_version(data: dict) -> str | None:
    if isinstance(data.get("jax"), str):
        return data["jax"]
    m = _machine(data)
    for record in (m.get("versions"), m, data.get("versions"), data.get("hardware")):
        if isinstance(record, dict):
            for key in ("jax", "jax_version"):
                if isinstance(record.get(key), str):
                    return record[key]
    return None


def provenance_text(data: dict) -> str:
    """The command, the hardware line and the jax version joined by dots, saying so where one is
    not recorded."""
    command = data.get("command")
    return " · ".join([f"`{command}`" if command else "command not recorded",
                       hardware(data) or "hardware not recorded",
                       f"jax {jax_version(data)}" if jax_version(data) else "jax version not recorded"])


def provenance(name: str, data: dict) -> str:
    """The provenance line under a section title, naming the results file."""
    return f"*{provenance_text(data)} · `benchmarks/results/{name}`*"


# --------------------------------------------------------------------------------------------
# renderers


def _multiplier(seed: dict) -> float | None:
    for key in ("learned_multiplier", "final_multiplier", "final_multiplier_nu"):
        if key in seed:
            return seed[key]
    return None


def render_learner(name: str, data: dict) -> list[str]:
    """A learner benchmark (``benchmarks/{fh_constrained,nn_constrained,...}.py``): each quality
    run's seeds judged exactly, and the training throughput."""
    title = {"fh_constrained": "FH-Constrained", "nn_constrained": "NN-Constrained",
             "ppo_lagrangian": "PPO-Lagrangian", "cpo": "CPO", "ecop": "e-COP",
             "saute": "Saute-Lagrangian"}
    stem = Path(name).stem
    learner = next((v for k, v in title.items() if stem == k or stem.startswith(k + "_")), stem)
    out = [f"{learner} on the default gridworld{on(name, data)}", provenance(name, data)]
    quality = data.get("quality") or {}
    if quality:
        rows = []
        for label, run in quality.items():
            seeds = run["seeds"]
            fr = [s["reward_fraction_of_optimum"] for s in seeds]
            budget = (f"{run['num_iterations']} x {run['episodes_per_iteration']}"
                      if "num_iterations" in run and "episodes_per_iteration" in run else "default")
            rows.append([label, budget, len(seeds), " ".join(pct(f) for f in fr),
                         f"{pct(min(fr))} / {pct(sum(fr) / len(fr))}",
                         span([s["exact_cost"] for s in seeds]),
                         f"{sum(bool(s['cost_ok']) for s in seeds)}/{len(seeds)}",
                         span([_multiplier(s) for s in seeds]),
                         secs(run.get("wall_s_including_compile"))])
        first = next(iter(quality.values()))
        out += ["", f"Exact judgement against the optimum {num(first['optimum_reward'])} at cost "
                f"{num(first['optimum_cost'])} (multiplier {num(first.get('optimal_multiplier'), 3)}); "
                f"feasible: cost <= 1.02 alpha."]
        out += [""] + table(["run", "updates x K", "seeds", "% of the optimum per seed", "worst / mean %",
                             "cost", "feasible", "learned multiplier", "wall (with compile)"], rows)
    for cap in data.get("capacity", []):
        out += ["", f"Capacity: the {cap['depth']} x {cap['width']} network on \"{cap['observation']}\" fitted "
                f"to the optimal policy by imitation earns {num(cap['imitation_reward'])} "
                f"({pct(cap['fraction_of_optimum'])}% of the optimum) at cost {num(cap['imitation_cost'])}."]
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
        out += ["", "Training throughput (one seed, whole run in one jit, compile excluded"
                + (f"; numpy per-episode reference {si(numpy_ref)} steps/s" if numpy_ref else "") + "):", ""]
        out += table(header, rows)
    seeds = data.get("seeds")
    if isinstance(seeds, dict) and "vmap_s" in seeds:
        out += ["", f"{seeds['seeds']} seeds x {seeds['iterations']} updates of K = {seeds['K']}: "
                f"{secs(seeds['vmap_s'])} vmapped in one call, {secs(seeds['sequential_s'])} one after another."]
    return out


def render_comparison(name: str, data: dict) -> list[str]:
    """``fhc-jax compare`` / ``benchmarks/reproduce_paper.py``: the paper's comparison."""
    opt, free = data["optimum"], data["unconstrained"]
    out = ["The paper's comparison on the default gridworld", provenance(name, data), ""]
    env = data.get("env", {})
    out.append(f"{env.get('size')}x{env.get('size')} grid, H = {env.get('horizon')}, alpha = "
               f"{num(data['thresholds'][0])}, {data['seeds']} seeds per run, each final policy judged exactly; "
               f"a seed violates when its cost exceeds alpha by more than {data['tolerance']:.0%}. "
               f"Paper metric: mean episode reward and cost over the last {data['paper_episodes']:,} training "
               f"episodes.")
    rows = []
    for run in data["runs"]:
        ex, pm = run["exact"], run["paper_metric"]
        fr = ex["fraction_of_optimum"]
        rows.append([run["label"], run["input"], f"{run['num_iterations']} x {run['episodes_per_iteration']}",
                     f"{num(pm['reward']['mean'])} / {num(pm['costs'][0]['mean'])}",
                     f"{num(ex['reward']['mean'])} [{num(ex['reward']['min'], 1)}, {num(ex['reward']['max'], 1)}]",
                     f"{pct(fr['mean'])} ({pct(fr['min'])}-{pct(fr['max'])})",
                     f"{num(ex['costs'][0]['mean'])} [{num(ex['costs'][0]['min'], 1)}, {num(ex['costs'][0]['max'], 1)}]",
                     f"{ex['violating_seeds']}/{data['seeds']}", f"{pm['violating_seeds']}/{data['seeds']}",
                     f"{run['timing']['wall_s']:.0f} ({run['timing']['compile_s']:.0f})"])
    rows.append(["**Exact optimum** (`fhc_jax.solve`)", "-", "-", "-", num(opt["reward"]), "100", num(opt["costs"][0]),
                 "-", "-", num(opt.get("solve_time_s"), 1)])
    rows.append(["Unconstrained optimum", "-", "-", "-", num(free["reward"]), "-", num(free["costs"][0]), "-", "-",
                 num(free.get("solve_time_s"), 1)])
    out += [""] + table(["learner", "input", "updates x K", "paper metric: reward / cost",
                         "exact reward [min, max]", "% of the optimum (per-seed range)", "exact cost [min, max]",
                         "violating (exact)", "violating (paper metric)", "wall s (compile s)"], rows)
    stats_rows = []
    for run in data["runs"]:
        st = run.get("statistics")
        if not st:
            continue
        r, c, v = st["reward"], st["costs"][0], st["violation_probability"]
        ci = lambda d, k: f"[{num(d[k][0])}, {num(d[k][1])}]"  # noqa: E731
        stats_rows.append([run["label"], run["input"], st["n_seeds"], f"{num(r['mean'])} {ci(r, 'mean_ci95')}",
                           f"{num(r['iqm'])} {ci(r, 'iqm_ci95')}", f"{num(c['mean'])} {ci(c, 'mean_ci95')}",
                           f"{num(v['estimate'])} {ci(v, 'ci95')}",
                           f"{num(st['optimality_gap']['mean'])} {ci(st['optimality_gap'], 'mean_ci95')}"])
    if stats_rows:
        out += ["", "Over seeds: mean and IQM with stratified-bootstrap 95% intervals (optimistic with 5 seeds), "
                "P(violation) with its Wilson 95% interval.", ""]
        out += table(["learner", "input", "seeds", "exact reward: mean [95% CI]", "IQM [95% CI]",
                      "exact cost: mean [95% CI]", "P(violation) [95% CI]", "gap to J*: mean [95% CI]"], stats_rows)
    timing = data.get("timing", {})
    if timing:
        out += ["", f"Whole comparison: {timing['total_wall_s']:.0f} s of wall time, "
                f"{timing['compile_s']:.0f} s of it compilation. Figures: `benchmarks/results/reproduce_paper.png`, "
                f"`reproduce_paper_profile.png`."]
    return out


def robustness_cells(data: dict) -> tuple[list[dict], dict[str, dict]]:
    """``benchmarks/robustness.py``'s file as a list of cells (each with its ``learner`` and
    ``task``) and its runs (run id -> command, machine, jax version)."""
    cells = [{"learner": lr, "task": t, **c} for lr, by_task in data.get("results", {}).items()
             for t, c in by_task.items()]
    return cells, data.get("runs", {})


def _slice_command(command: str | None) -> str | None:
    """A robustness slice's command without its ``--out PATH`` (each slice was merged into
    benchmarks/results/robustness.json)."""
    return None if command is None else re.sub(r" --out \S+", "", command)


def _run_hosts(runs: dict) -> str:
    """The distinct hardware lines and jax versions of the runs, joined."""
    seen = dict.fromkeys(f"{hardware(r) or 'hardware not recorded'} · jax {jax_version(r) or '?'}" for r in runs.values())
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
    out += ["", "Each cell: the worst seed's % of the task's optimum (exact tasks) or reference (battery; n/a "
            "where the task has none) and, in brackets, the seeds whose returned policy is within 1.02 alpha "
            "(Monte-Carlo: its upper 95% bound), out of all seeds; \"unflagged\": infeasible seeds the learner's "
            "own status did not flag.",
            ""]
    out += table(["task", "nu*"] + learners,
                 [[t, _nu_star(data.get("tasks", {}).get(t, {}))] + [cell(by.get((t, lr))) for lr in learners]
                  for t in tasks])
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
        out += ["", f"Not measured yet: {', '.join(f'`{t}`' for t in missing)} "
                "(`python benchmarks/robustness.py --tasks ...` merges them into this file)."]
    return out


def _nu_star(task: dict) -> str:
    nu = task.get("nu_star")
    if not nu:
        return "-"
    return ", ".join(f"{v:.3g}" for v in nu)


def render_solver(name: str, data: dict) -> list[str]:
    """``benchmarks/solver.py``: the exact solvers."""
    rows = [[r["case"], r["num_states"], r["horizon"], secs(r.get("median_s")), secs(r.get("first_call_s")),
             r.get("oracle_calls", "-"), num(r.get("reward"), 3)] for r in data["rows"]]
    return ["Exact solvers", provenance(name, data), ""] + table(
        ["case", "states", "H", "median", "first call (with compile)", "oracle calls", "optimal reward"], rows)


def render_env_throughput(name: str, data: dict) -> list[str]:
    """``benchmarks/env_throughput.py``: uniform random policy on the default gridworld against
    numpy references written in the benchmark."""
    out = [f"Environment throughput{on(name, data)}", provenance(name, data), ""]
    one = data.get("numpy_one_episode", {})
    out.append("Uniform random policy on the default gridworld; `rollout` records the full trajectory, "
               "`rollout_returns` keeps each episode's totals. numpy: the same gridworld vectorised over the "
               f"K episodes (one episode at a time: {si(one.get('steps_per_s'))} steps/s).")
    returns = {r["K"]: r for r in data.get("jax_returns_only", [])}
    rows = []
    for r in data["jax"]:
        ret = returns.get(r["K"])
        rows.append([r["K"], si(r["steps_per_s"]), f"{r['ratio_vs_numpy']:.1f}x",
                     si(ret["steps_per_s"]) if ret else "-", f"{ret['ratio_vs_numpy']:.1f}x" if ret else "-"])
    out += [""] + table(["K", "`rollout` steps/s", "vs numpy", "`rollout_returns` steps/s", "vs numpy"], rows)
    policies = data.get("policies")
    if policies:
        rows = [[p["policy"], p["call"], "default" if p.get("record") in ("all", None) else ", ".join(p["record"]),
                 si(p["steps_per_s"])] for p in policies["rows"]]
        out += ["", f"Policies at K = {policies['K']} (median of {policies['repeats']}; softmax logits "
                f"`{policies['logits']}`):", ""]
        out += table(["policy", "call", "record", "steps/s"], rows)
    return out


def render_sampled_path(name: str, data: dict) -> list[str]:
    """``benchmarks/sampled_path.py``: the sampled path against the tabular path on the gridworld."""
    rows = [[learner, r["episodes_per_iteration"], secs(r["tabular"]["run_s"]), secs(r["sampled"]["run_s"]),
             f"{r['ratio']:.2f}x"] for learner, r in data["rows"].items()]
    return ["What the sampled path costs", provenance(name, data), "",
            f"Default gridworld, each learner's default config, {data['iterations']} updates, one seed, whole run "
            f"in one jit, median of {data['repeats']}, compile excluded.", ""] + table(
        ["learner", "K", '`path="tabular"`', '`path="sampled"`', "ratio"], rows)


def render_scaling(name: str, data: dict) -> list[str]:
    """``benchmarks/scaling.py``: training env-steps/s of every learner along K, H, grid size and M,
    and ``fhc_jax.solve`` along grid size and M."""
    base = data["grid"]["base"]
    out = ["Scaling", provenance(name, data), "",
           f"Around K = {base['K']}, H = {base['H']}, {base['size']}x{base['size']}, M = {base['M']}; "
           "training env-steps/s (compile apart). Figure: `benchmarks/results/scaling.png`; log-log slopes and "
           "their reading in the JSON's `analysis` and `interpretation`."]
    for axis in data["axes"]:
        values = sorted({p["axis_value"] for pts in data["learners"].values() for p in pts.get(axis, [])})
        rows = []
        for learner, pts in data["learners"].items():
            at = {p["axis_value"]: p.get("env_steps_per_s") for p in pts.get(axis, [])}
            rows.append([learner] + [si(at.get(v)) if v in at else "" for v in values])
        out += ["", f"Along {axis} (empty: not measured; -: not applicable, CPO and Saute-Lagrangian take one "
                f"constraint):" if axis == "M" else f"Along {axis} (empty: not measured):", ""]
        out += table(["learner"] + [f"{axis} = {v}" for v in values], rows)
    solver = data.get("solver", {})
    for axis, pts in solver.items():
        out += ["", f"`fhc_jax.solve` along {axis}:", ""]
        out += table([axis, "median", "first call"], [[p["axis_value"], secs(p.get("median_s")),
                                                       secs(p.get("first_call_s"))] for p in pts])
    return out


def render_speed(name: str, data: dict) -> list[str]:
    """``benchmarks/battery.py`` and ``benchmarks/continuous_actions.py`` without ``--quality``:
    training throughput per learner and K."""
    env = data.get("env", "?")
    speed = data.get("speed") or {}
    ks = sorted({r["K"] for rows in speed.values() for r in rows})
    rows = [[learner] + [si(next((r["env_steps_per_s"] for r in rs if r["K"] == k), None)) for k in ks]
            for learner, rs in speed.items()]
    return [f"Training throughput on `{env}`{on(name, data)}", provenance(name, data), "",
            "Env-steps/s of a whole run in one jit, one seed, default config, compile excluded.", ""] + table(
        ["learner"] + [f"K = {k}" for k in ks], rows)


def _upper(seed: dict) -> float | None:
    if "costs_ci95" in seed:
        return seed["costs_ci95"][0][1]
    return (seed.get("costs_upper95") or [None])[0]


def render_monte_carlo(name: str, data: dict) -> list[str]:
    """``benchmarks/continuous_actions.py --quality`` (and ``battery.py --quality``): learners on
    an environment without a tabular model, judged by Monte-Carlo with 95% intervals."""
    ref = data.get("reference", {})
    out = [f"Learners on `{data.get('env', '?')}`", provenance(name, data)]
    if data.get("transcribed_from"):
        out += ["", f"Transcribed from {data['transcribed_from']}."]
    rows = []
    for learner, q in (data.get("quality") or {}).items():
        seeds = q["seeds"]
        rewards = " ".join(f"{s['exact_reward']:.1f}" for s in seeds)
        frac = [s.get("fraction_of_optimum") for s in seeds]
        by_ref = " ".join(pct(f) for f in frac) if ref.get("reward", 0) > 0 and None not in frac else "-"
        cfg = q.get("config", {})
        rows.append([learner, f"{cfg.get('num_iterations', '?')} x {cfg.get('episodes_per_iteration', '?')}",
                     rewards, by_ref, span([s["exact_costs"][0] for s in seeds]),
                     num(max(u for u in map(_upper, seeds) if u is not None), 3),
                     f"{sum(bool(s['feasible']) for s in seeds)}/{len(seeds)}", secs(q.get("wall_s"))])
    judged = seeds[0]["judged_by"] if rows else "monte-carlo"
    limit = next((q["aggregate"]["limits"][0] for q in (data.get("quality") or {}).values() if "aggregate" in q), None)
    text = (f"Default configs, 5 seeds in one vmapped call, each final policy judged by {judged}; feasible: "
            f"the upper end of the cost's 95% interval within 1.02 alpha"
            + (f" = {num(limit, 2)}" if limit is not None else "") + ". ")
    free = data.get("unconstrained_ppo")
    if free:
        r = [s["exact_reward"] for s in free["seeds"]]
        c = [s["exact_costs"][0] for s in free["seeds"]]
        text += (f"Yardstick: PPO-Lagrangian without the constraint (alpha = 1e9) earns "
                 f"{span(r, lambda v: f'{v:.0f}')} at cost {span(c, lambda v: f'{v:.0f}')}.")
    else:
        text += (f"Reference: reward {num(ref.get('reward'))} at cost {num((ref.get('costs') or [None])[0], 3)} "
                 "(the discretized model's optimum executed in the environment).")
    out += ["", text]
    out += [""] + table(["learner", "updates x K", "reward per seed", "% of the reference per seed", "cost",
                         "largest cost upper bound", "feasible", "wall (5 seeds)"], rows)
    return out


def render_battery_resolution(name: str, data: dict) -> list[str]:
    """``benchmarks/battery_resolution.py``: the discretized exact model's optimum executed in the
    continuous BatteryStorage."""
    rows = [["x".join(map(str, r["resolution"])), r["states"], num(r["model_reward"]),
             f"{num(r['monte_carlo']['reward'])} ± {num(r['monte_carlo']['reward_ci'])}",
             " ".join(num(c, 3) for c in r["monte_carlo"]["costs"]), secs(r.get("solve_s"))] for r in data["rows"]]
    free, still = data["unconstrained"], data["stationary"]
    return [f"BatteryStorage: the discretized optimum, M = {data['num_constraints']}", provenance(name, data), "",
            f"Thresholds {data['thresholds']}; each policy executed in the continuous environment "
            f"({data['episodes']:,} episodes, 95% interval).", ""] + table(
        ["resolution (soc x price)", "states", "model reward", "executed reward", "executed costs", "solve"], rows) + [
        "", f"Unconstrained optimum ({'x'.join(map(str, free['resolution']))}): executed reward "
        f"{num(free['monte_carlo']['reward'])} at costs {[round(c, 3) for c in free['monte_carlo']['costs']]}; "
        f"best stationary policy found: {num(still['reward'])}."]


def render_gymnax(name: str, data: dict) -> list[str]:
    """``benchmarks/gymnax_interop.py``: a gymnax environment through ``from_gymnax``."""
    rows = [[k, si(r["env_steps_per_s"]), f"{r['speed_vs_step_env']:.2f}x"] for k, r in data["rows"].items()]
    return ["gymnax interop", provenance(name, data), "",
            f"{data['env']}, K = {data['episodes']}, H = {data['horizon']}, median of {data['repeats']}.", ""] + table(
        ["loop", "env-steps/s", "vs gymnax `step_env`"], rows)


def render_brax(name: str, data: dict) -> list[str]:
    """``benchmarks/brax_interop.py``: a Brax environment through ``from_brax``, and a learner's
    plain ``Config()`` trained on it."""
    rows = [[k, secs(r["compile_s"]), si(r["env_steps_per_s"]), f"{r['speed_vs_brax']:.2f}x"]
            for k, r in data["rows"].items()]
    out = ["Brax interop", provenance(name, data), "",
           f"{data['env']} (brax {data.get('brax_version', '?')}), K = {data['episodes']}, H = {data['horizon']}, "
           f"uniform actions, median of {data['repeats']}.", ""]
    out += table(["pipeline: loop", "compile", "env-steps/s", "vs Brax's own loop"], rows)
    t = data.get("training")
    if t:
        seeds = t["seed_results"]
        out += ["", f"{t['learner']} `{t['config']}` on {t['env']}: {t['seeds']} seeds in "
                f"{secs(t['wall_s'])} ({secs(t['compile_s'])} compiling); each returned policy judged over "
                f"{t['episodes']:,} episodes (95% intervals), {t['within_budget_seeds']}/{t['seeds']} within budget "
                "(upper end of the cost interval at most 1.02 alpha).", ""]
        rows = [[f"seed {r['seed']}", f"{r['reward']:.2f} ± {r['reward_half_width']:.2f}",
                 f"{r['costs'][0]:.2f} ± {r['cost_half_width'][0]:.2f}", "yes" if r["within_budget"] else "no"]
                for r in seeds]
        rows += [[k, f"{r['reward']:.2f} ± {r['reward_half_width']:.2f}",
                  f"{r['costs'][0]:.2f} ± {r['cost_half_width'][0]:.2f}", "-"] for k, r in t["yardsticks"].items()]
        out += table(["policy", "reward", "cost", "within budget"], rows)
    return out


def render_chunked(name: str, data: dict) -> list[str]:
    """``benchmarks/chunked_training.py``: chunked training against one monolithic jit."""
    rows = [[r["mode"], secs(r["run_median_s"]), si(r["env_steps_per_s"]),
             "-" if not r["slowdown_vs_monolithic"] else f"+{100 * r['slowdown_vs_monolithic']:.1f}%"]
            for r in data["results"]]
    same = "bit-identical to" if data.get("bit_identical_to_monolithic") else "different from"
    return ["Chunked training", provenance(name, data), "",
            f"FH-Constrained default config, {data['iterations']} updates of K = {data['episodes_per_iteration']}, "
            f"{data['seeds']} seed, chunks of {data['chunk_size']}, median of {data['repeats']}; final parameters "
            f"{same} the monolithic run.", ""] + table(["mode", "run", "env-steps/s", "vs monolithic"], rows)


def render_tracking(name: str, data: dict) -> list[str]:
    """``benchmarks/tracking_overhead.py``: TensorBoard and W&B loggers against none."""
    rows = [[r["logger"], secs(r["median_run_s"]),
             "-" if r["logger"] == "none" else f"{100 * r['overhead_vs_none']:+.1f}%",
             f"{r['median_tracking_cpu_s']:.2f} s ({100 * r['tracking_cpu_fraction_of_run']:.2f}%)"]
            for r in data["results"]]
    return ["Experiment tracking overhead", provenance(name, data), "",
            f"{data['algo']} on {data['env']}, {data['iterations']} updates x K = {data['episodes_per_iteration']} x "
            f"{data['seeds']} seeds, chunks of {data['chunk_size']}, median of {data['repeats']} interleaved runs; "
            "the tracking CPU (the logging thread and W&B's service) is the direct measure, the wall times are "
            "noisy on a shared machine.", ""] + table(
        ["logger", "run (total - compile)", "wall vs none", "tracking CPU (% of the run)"], rows)


def render_validation_overhead(name: str, data: dict) -> list[str]:
    """``benchmarks/validation_overhead.py``: the API boundary's checks, before against after."""
    rows = [[case, f"{r['before_ms']:.3f} ms", f"{r['after_ms']:.3f} ms", f"{r['overhead_percent']:+.1f}%",
             f"{r['cpu_overhead_percent']:+.1f}%", "yes" if r.get("same_compiled_program") else "no"]
            for case, r in data["results"].items()]
    return ["Cost of the boundary checks", provenance(name, data), "", data["what"] + ".", ""] + table(
        ["case", "before", "after", "wall", "CPU time", "same compiled program"], rows)


def render_distributed(name: str, data: dict) -> list[str]:
    """``benchmarks/distributed.py``: the distributed path at one process, and several local
    processes against one."""
    out = ["Several processes (jax.distributed)", provenance(name, data), ""]
    o = data.get("overhead_one_process")
    if o:
        same = "identical" if all(o["identical_results"].values()) else "NOT identical"
        out += [f"`{o['command']}` (FH-Constrained on the default gridworld, plots included), median of "
                f"{o['repeats']} interleaved runs of the whole command; results {same} in both modes. The CPU time "
                "(user + system) is the direct measure; the wall time on a shared machine also measures how the "
                "scheduler shares the cores.", ""]
        cpu = o.get("median_cpu_s")
        out += table(["mode", "wall (median)", "vs plain", "CPU (median)", "vs plain"],
                     [["plain", secs(o["median_wall_s"]["plain"]), "-", secs(cpu and cpu["plain"]), "-"],
                      ["`--num-processes 1`", secs(o["median_wall_s"]["distributed"]), f"{100 * o['overhead']:+.1f}%",
                       secs(cpu and cpu["distributed"]),
                       "-" if not cpu else f"{100 * o['cpu_overhead']:+.1f}%"]])
        out += [""]
    rows = []
    for r in data.get("processes") or []:
        same = r.get("identical_to_one_process_same_devices")
        vs_one = r.get("identical_to_one_device")
        rows.append([r["layout"], secs(r["wall_s"]),
                     "-" if same is None else ("yes" if all(same.values()) else "no"),
                     "-" if vs_one is None else ("yes" if all(vs_one.values()) else
                                                 ("training, policies and judgement; exact evaluations within "
                                                  f"{r['exact_max_rel_diff_vs_one_device']:.1e}"
                                                  if r.get("training_identical_to_one_device") and vs_one["policy_npz"]
                                                  and vs_one["summary_json"] else "no"))])
    if rows:
        out += [f"{data.get('small_run', 'a small run')}, on localhost; the wall time of the slowest process, "
                "compilation included (every process compiles); with fewer cores than processes it measures the "
                "sharing of the cores.", ""]
        out += table(["layout", "wall", "bit-identical to 1 process, same devices", "vs 1 process, 1 device"], rows)
    return out


#: results file pattern (relative to benchmarks/results, fnmatch) -> renderer; the first match
#: wins, and the page follows this order.
RENDERERS: dict[str, Renderer] = {
    "reproduce_paper.json": render_comparison,
    "robustness.json": render_robustness,
    "fh_constrained.json": render_learner,
    "nn_constrained.json": render_learner,
    "ppo_lagrangian.json": render_learner,
    "cpo.json": render_learner,
    "ecop*.json": render_learner,
    "saute*.json": render_learner,
    "solver.json": render_solver,
    "env_throughput.json": render_env_throughput,
    "sampled_path.json": render_sampled_path,
    "scaling.json": render_scaling,
    "battery.json": render_speed,
    "continuous_*_speed.json": render_speed,
    "continuous_*.json": render_monte_carlo,
    "battery_resolution*.json": render_battery_resolution,
    "gymnax_interop.json": render_gymnax,
    "brax_interop.json": render_brax,
    "chunked_training.json": render_chunked,
    "tracking_overhead.json": render_tracking,
    "validation_overhead.json": render_validation_overhead,
    "distributed.json": render_distributed,
    "gpu_*/env_throughput.json": render_env_throughput,
    "gpu_*/fh_constrained.json": render_learner,
    "gpu_*/nn_constrained.json": render_learner,
    "gpu_*/battery*.json": render_speed,
}


def results_files(results: Path) -> list[str]:
    return sorted(p.relative_to(results).as_posix() for p in results.rglob("*.json"))


def renderer_for(name: str) -> tuple[int, Renderer] | None:
    for i, (pattern, render) in enumerate(RENDERERS.items()):
        if fnmatch.fnmatch(name, pattern):
            return i, render
    return None


def render_page(results: Path = RESULTS) -> str:
    """The whole of docs/benchmarks.md."""
    names = results_files(results)
    matched = sorted(((renderer_for(n), n) for n in names if renderer_for(n)), key=lambda t: (t[0][0], t[1]))
    unknown = [n for n in names if renderer_for(n) is None]
    out = ["# Benchmarks", "",
           "<!-- generated by `python benchmarks/report.py` from benchmarks/results/*.json: do not edit by hand -->",
           "",
           "Every number below comes from a JSON file in `benchmarks/results/`, written by the script of "
           "`benchmarks/` named under each table (with the hardware and the jax version it ran on; the date of "
           "each run is inside its JSON). `python benchmarks/report.py` rewrites this page and the README's "
           "learner table; `python benchmarks/report.py --check` (run by the test suite) fails when either is "
           "stale. Speeds are medians of several runs with compilation timed apart; wall times of shared CPUs "
           "vary by about 15% from run to run."]
    for (_, render), name in matched:
        title, *body = render(name, json.loads((results / name).read_text()))
        out += ["", f"## {title}", ""] + body
    if unknown:
        out += ["", "## Results files without a renderer", "",
                "These files match no pattern of `RENDERERS` in `benchmarks/report.py`; add a renderer:", ""]
        out += [f"- `benchmarks/results/{n}`" for n in unknown]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# the README blocks

#: learner module -> (label, docs page, one line on what it is)
LEARNERS: dict[str, tuple[str, str, str]] = {
    "fh_constrained": ("FH-Constrained", "docs/algorithms/fh_constrained.md",
                       "the paper's Algorithm 1: per-stage Gibbs actors on features, linear critics, three timescales"),
    "nn_constrained": ("NN-Constrained", "docs/algorithms/nn_constrained.md",
                       "the paper's deep variant: per-stage MLP actors and critics stacked on the stage axis"),
    "ecop": ("e-COP", "docs/algorithms/ecop.md",
             "episodic constrained policy optimisation: per-stage clipped surrogates and damped penalty"),
    "ppo_lagrangian": ("PPO-Lagrangian", "docs/algorithms/ppo_lagrangian.md",
                       "baseline: one stationary network, PID-Lagrangian multiplier"),
    "cpo": ("CPO", "docs/algorithms/cpo.md", "baseline: one stationary network, trust-region step with a cost constraint"),
    "saute": ("Saute-Lagrangian", "docs/algorithms/saute.md",
              "PPO-Lagrangian on the state augmented with the remaining budget"),
}

MARK = {"learners": ("<!-- learners -->", "<!-- /learners -->"), "speed": ("<!-- speed -->", "<!-- /speed -->")}


def learner_table(results: Path = RESULTS) -> str:
    """The README's learner table, from the robustness benchmark (robustness.json): each
    learner's plain ``Config()`` on the default gridworld (worst and best seed's % of the
    optimum, seeds over 1.02 alpha) and over the suite's exactly judged tasks (feasible seeds)."""
    path = results / "robustness.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    cells, runs = robustness_cells(data)
    by = {(c["learner"], c["task"]): c for c in cells}
    exact = [t for t, r in data.get("tasks", {}).items() if r.get("judgement") == "exact"]

    def gridworld(name: str) -> str:
        c = by.get((name, "gridworld"))
        if c is None or c.get("error") or not c.get("seeds"):
            return "not in robustness.json" if c is None else "error"
        p = [sd["percent"] for sd in c["seeds"]]
        return f"{min(p):.1f}-{max(p):.1f}%, {c['num_seeds'] - c['feasible_seeds']}/{c['num_seeds']} over"

    def suite_cell(name: str) -> str:
        cells = [by[(name, t)] for t in exact if (name, t) in by and not by[(name, t)].get("error")]
        if not cells:
            return "not in robustness.json"
        ok = sum(c["feasible_seeds"] for c in cells)
        n = sum(c["num_seeds"] for c in cells)
        errors = sum(1 for t in exact if by.get((name, t), {}).get("error"))
        return f"{ok}/{n} seeds feasible on {len(cells)} tasks" + (f" ({errors} refused)" if errors else "")

    rows = [[f"[{label}]({page})", what, gridworld(name), suite_cell(name)]
            for name, (label, page, what) in LEARNERS.items()]
    lines = table(["learner", "what it is", "default gridworld: % of the optimum, seeds over 1.02 alpha",
                   "robustness suite (exact tasks)"], rows)
    if cells:
        lines += ["", "Plain `Config()`, 5 seeds per task, each returned policy judged exactly "
                  f"(`python benchmarks/robustness.py`, run in slices on {_run_hosts(runs)}); every task: "
                  "[docs/benchmarks.md](docs/benchmarks.md)."]
    return "\n".join(lines)


def speed_line(results: Path = RESULTS) -> str:
    """One speed figure with its hardware line, from fh_constrained.json."""
    path = results / "fh_constrained.json"
    if not path.is_file():
        return "No speed figure: benchmarks/results/fh_constrained.json is missing."
    data = json.loads(path.read_text())
    rows = (data.get("speed") or {}).get("jax", [])
    if not rows:
        return "No speed figure: benchmarks/results/fh_constrained.json has no speed rows."
    best = max(rows, key=lambda r: r["K"])
    return (f"FH-Constrained trains at {si(best['env_steps_per_s'])} env-steps/s with K = {best['K']} episodes "
            f"per update (one seed, whole run in one jit; {hardware(data) or 'hardware not recorded'}, "
            f"jax {jax_version(data) or '?'}).")


def render_readme(text: str, results: Path = RESULTS) -> str:
    """README.md with its generated blocks rewritten (each block must exist once)."""
    for key, body in (("learners", learner_table(results)), ("speed", speed_line(results))):
        start, end = MARK[key]
        i, j = text.find(start), text.find(end)
        if i < 0 or j < i:
            raise ValueError(f"README.md lacks the {start} ... {end} block")
        text = text[: i + len(start)] + "\n" + body + "\n" + text[j:]
    return text


def _stale(path: Path, expected: str) -> str | None:
    current = path.read_text() if path.is_file() else ""
    if current == expected:
        return None
    diff = [d for d in difflib.unified_diff(current.splitlines(), expected.splitlines(), lineterm="", n=0)
            if d[:1] in "+-" and d[:3] not in ("+++", "---")]
    first = next((d for d in diff), "")
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {len(diff)} line(s) differ (first: {first[:80]!r})"


def main(argv: list[str] | None = None, results: Path = RESULTS, page: Path = PAGE, readme: Path = README) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md or the README is stale")
    args = parser.parse_args(argv)
    expected = {page: render_page(results), readme: render_readme(readme.read_text(), results)}
    if args.check:
        stale = [s for s in (_stale(p, text) for p, text in expected.items()) if s]
        if stale:
            print("stale: " + "; ".join(stale) + " (run python benchmarks/report.py)", file=sys.stderr)
            return 1
        return 0
    for path, text in expected.items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
