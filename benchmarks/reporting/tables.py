"""Renderers of the other results files: solvers, environment throughput, the sampled path,
scaling, speed and Monte-Carlo quality on environments without a tabular model, the battery's
resolution, gymnax interop, chunked training, tracking, the boundary checks' cost and several
processes (same contract as ``reporting.learners``)."""

from __future__ import annotations

from reporting.fmt import num, pct, secs, si, span, table
from reporting.provenance import on, provenance


def render_stationary_margin(name: str, data: dict) -> list[str]:
    """``benchmarks/stationary_margin.py``: the room each exact task leaves a stationary policy."""
    margin = data.get("margin", 0.05)
    rows = [
        [
            r["task"],
            num(r["stationary_ratio"], 3),
            num(r["least_ratio"], 3),
            pct(r["room"]) if r["room"] > 0 else "none",
            "yes" if r["has_margin"] else "**no**",
        ]
        for r in data["rows"]
    ]
    none = [r["task"] for r in data["rows"] if not r["has_margin"]]
    return (
        ["Room for a stationary policy", provenance(name, data), ""]
        + [
            "The cheapest stationary policy pi(a | s) that a search on the exact costs finds "
            f"(`fhc_jax.stationary_cost_floor`: Adam from {data.get('starts')} starts, {data.get('steps')} steps "
            "each), as max_k S^(k) / alpha^(k), next to the cheapest policy of all (non-stationary). "
            "PPO-Lagrangian and CPO on a stage-free observation can only meet what a stationary policy meets: "
            f"the robustness suite expects them within budget where one has at least {margin:.0%} of room. "
            f"Tasks without it: {', '.join(f'`{t}`' for t in none) or 'none'} (a ratio above 1: no stationary "
            "policy found within the thresholds at all).",
            "",
        ]
        + table(["task", "stationary", "any policy", "room (%)", f">= {margin:.0%} room"], rows)
    )


def render_solver(name: str, data: dict) -> list[str]:
    """``benchmarks/solver.py``: the exact solvers."""
    rows = [
        [
            r["case"],
            r["num_states"],
            r["horizon"],
            secs(r.get("median_s")),
            secs(r.get("first_call_s")),
            r.get("oracle_calls", "-"),
            num(r.get("reward"), 3),
        ]
        for r in data["rows"]
    ]
    return ["Exact solvers", provenance(name, data), ""] + table(
        ["case", "states", "H", "median", "first call (with compile)", "oracle calls", "optimal reward"], rows
    )


def render_env_throughput(name: str, data: dict) -> list[str]:
    """``benchmarks/env_throughput.py``: uniform random policy on the default gridworld against
    numpy references written in the benchmark."""
    out = [f"Environment throughput{on(name, data)}", provenance(name, data), ""]
    one = data.get("numpy_one_episode", {})
    out.append(
        "Uniform random policy on the default gridworld; `rollout` records the full trajectory, "
        "`rollout_returns` keeps each episode's totals. numpy: the same gridworld vectorised over the "
        f"K episodes (one episode at a time: {si(one.get('steps_per_s'))} steps/s)."
    )
    returns = {r["K"]: r for r in data.get("jax_returns_only", [])}
    rows = []
    for r in data["jax"]:
        ret = returns.get(r["K"])
        rows.append(
            [
                r["K"],
                si(r["steps_per_s"]),
                f"{r['ratio_vs_numpy']:.1f}x",
                si(ret["steps_per_s"]) if ret else "-",
                f"{ret['ratio_vs_numpy']:.1f}x" if ret else "-",
            ]
        )
    out += [""] + table(["K", "`rollout` steps/s", "vs numpy", "`rollout_returns` steps/s", "vs numpy"], rows)
    policies = data.get("policies")
    if policies:
        rows = [
            [
                p["policy"],
                p["call"],
                "default" if p.get("record") in ("all", None) else ", ".join(p["record"]),
                si(p["steps_per_s"]),
            ]
            for p in policies["rows"]
        ]
        out += [
            "",
            f"Policies at K = {policies['K']} (median of {policies['repeats']}; softmax logits "
            f"`{policies['logits']}`):",
            "",
        ]
        out += table(["policy", "call", "record", "steps/s"], rows)
    return out


def render_sampled_path(name: str, data: dict) -> list[str]:
    """``benchmarks/sampled_path.py``: the sampled path against the tabular path on the gridworld."""
    rows = [
        [
            learner,
            r["episodes_per_iteration"],
            secs(r["tabular"]["run_s"]),
            secs(r["sampled"]["run_s"]),
            f"{r['ratio']:.2f}x",
        ]
        for learner, r in data["rows"].items()
    ]
    return [
        "What the sampled path costs",
        provenance(name, data),
        "",
        f"Default gridworld, each learner's default config, {data['iterations']} updates, one seed, whole run "
        f"in one jit, median of {data['repeats']}, compile excluded.",
        "",
    ] + table(["learner", "K", '`path="tabular"`', '`path="sampled"`', "ratio"], rows)


def render_scaling(name: str, data: dict) -> list[str]:
    """``benchmarks/scaling.py``: training env-steps/s of every learner along K, H, grid size and M,
    and ``fhc_jax.solve`` along grid size and M."""
    base = data["grid"]["base"]
    out = [
        "Scaling",
        provenance(name, data),
        "",
        f"Around K = {base['K']}, H = {base['H']}, {base['size']}x{base['size']}, M = {base['M']}; "
        "training env-steps/s (compile apart). Figure: `benchmarks/results/scaling.png`; log-log slopes and "
        "their reading in the JSON's `analysis` and `interpretation`.",
    ]
    for axis in data["axes"]:
        values = sorted({p["axis_value"] for pts in data["learners"].values() for p in pts.get(axis, [])})
        rows = []
        for learner, pts in data["learners"].items():
            at = {p["axis_value"]: p.get("env_steps_per_s") for p in pts.get(axis, [])}
            rows.append([learner] + [si(at.get(v)) if v in at else "" for v in values])
        out += [
            "",
            f"Along {axis} (empty: not measured; -: not applicable, the learner refuses that M):"
            if axis == "M"
            else f"Along {axis} (empty: not measured):",
            "",
        ]
        out += table(["learner"] + [f"{axis} = {v}" for v in values], rows)
    solver = data.get("solver", {})
    for axis, pts in solver.items():
        out += ["", f"`fhc_jax.solve` along {axis}:", ""]
        out += table(
            [axis, "median", "first call"],
            [[p["axis_value"], secs(p.get("median_s")), secs(p.get("first_call_s"))] for p in pts],
        )
    return out


def render_speed(name: str, data: dict) -> list[str]:
    """``benchmarks/battery.py`` and ``benchmarks/continuous_actions.py`` without ``--quality``:
    training throughput per learner and K."""
    env = data.get("env", "?")
    speed = data.get("speed") or {}
    ks = sorted({r["K"] for rows in speed.values() for r in rows})
    rows = [
        [learner] + [si(next((r["env_steps_per_s"] for r in rs if r["K"] == k), None)) for k in ks]
        for learner, rs in speed.items()
    ]
    return [
        f"Training throughput on `{env}`{on(name, data)}",
        provenance(name, data),
        "",
        "Env-steps/s of a whole run in one jit, one seed, default config, compile excluded.",
        "",
    ] + table(["learner"] + [f"K = {k}" for k in ks], rows)


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
        rows.append(
            [
                learner,
                f"{cfg.get('num_iterations', '?')} x {cfg.get('episodes_per_iteration', '?')}",
                rewards,
                by_ref,
                span([s["exact_costs"][0] for s in seeds]),
                num(max(u for u in map(_upper, seeds) if u is not None), 3),
                f"{sum(bool(s['feasible']) for s in seeds)}/{len(seeds)}",
                secs(q.get("wall_s")),
            ]
        )
    judged = seeds[0]["judged_by"] if rows else "monte-carlo"
    limit = next((q["aggregate"]["limits"][0] for q in (data.get("quality") or {}).values() if "aggregate" in q), None)
    text = (
        f"Default configs, 5 seeds in one vmapped call, each final policy judged by {judged}; feasible: "
        f"the upper end of the cost's 95% interval within 1.02 alpha"
        + (f" = {num(limit, 2)}" if limit is not None else "")
        + ". "
    )
    free = data.get("unconstrained_ppo")
    if free:
        r = [s["exact_reward"] for s in free["seeds"]]
        c = [s["exact_costs"][0] for s in free["seeds"]]
        text += (
            f"Yardstick: PPO-Lagrangian without the constraint (alpha = 1e9) earns "
            f"{span(r, lambda v: f'{v:.0f}')} at cost {span(c, lambda v: f'{v:.0f}')}."
        )
    else:
        text += (
            f"Reference: reward {num(ref.get('reward'))} at cost {num((ref.get('costs') or [None])[0], 3)} "
            "(the discretized model's optimum executed in the environment)."
        )
    out += ["", text]
    out += [""] + table(
        [
            "learner",
            "updates x K",
            "reward per seed",
            "% of the reference per seed",
            "cost",
            "largest cost upper bound",
            "feasible",
            "wall (5 seeds)",
        ],
        rows,
    )
    return out


def render_battery_resolution(name: str, data: dict) -> list[str]:
    """``benchmarks/battery_resolution.py``: the discretized exact model's optimum executed in the
    continuous BatteryStorage."""
    rows = [
        [
            "x".join(map(str, r["resolution"])),
            r["states"],
            num(r["model_reward"]),
            f"{num(r['monte_carlo']['reward'])} ± {num(r['monte_carlo']['reward_ci'])}",
            " ".join(num(c, 3) for c in r["monte_carlo"]["costs"]),
            secs(r.get("solve_s")),
        ]
        for r in data["rows"]
    ]
    free, still = data["unconstrained"], data["stationary"]
    return (
        [
            f"BatteryStorage: the discretized optimum, M = {data['num_constraints']}",
            provenance(name, data),
            "",
            f"Thresholds {data['thresholds']}; each policy executed in the continuous environment "
            f"({data['episodes']:,} episodes, 95% interval).",
            "",
        ]
        + table(
            ["resolution (soc x price)", "states", "model reward", "executed reward", "executed costs", "solve"], rows
        )
        + [
            "",
            f"Unconstrained optimum ({'x'.join(map(str, free['resolution']))}): executed reward "
            f"{num(free['monte_carlo']['reward'])} at costs {[round(c, 3) for c in free['monte_carlo']['costs']]}; "
            f"best stationary policy found: {num(still['reward'])}.",
        ]
    )


def render_gymnax(name: str, data: dict) -> list[str]:
    """``benchmarks/gymnax_interop.py``: a gymnax environment through ``from_gymnax``."""
    rows = [[k, si(r["env_steps_per_s"]), f"{r['speed_vs_step_env']:.2f}x"] for k, r in data["rows"].items()]
    return [
        "gymnax interop",
        provenance(name, data),
        "",
        f"{data['env']}, K = {data['episodes']}, H = {data['horizon']}, median of {data['repeats']}.",
        "",
    ] + table(["loop", "env-steps/s", "vs gymnax `step_env`"], rows)


def render_brax(name: str, data: dict) -> list[str]:
    """``benchmarks/brax_interop.py``: a Brax environment through ``from_brax``, and a learner's
    plain ``Config()`` trained on it."""
    rows = [
        [k, secs(r["compile_s"]), si(r["env_steps_per_s"]), f"{r['speed_vs_brax']:.2f}x"]
        for k, r in data["rows"].items()
    ]
    out = [
        "Brax interop",
        provenance(name, data),
        "",
        f"{data['env']} (brax {data.get('brax_version', '?')}), K = {data['episodes']}, H = {data['horizon']}, "
        f"uniform actions, median of {data['repeats']}.",
        "",
    ]
    out += table(["pipeline: loop", "compile", "env-steps/s", "vs Brax's own loop"], rows)
    t = data.get("training")
    if t:
        out += [
            "",
            f"{t['learner']} `{t['config']}` on {t['env']}: {t['seeds']} seeds in "
            f"{secs(t['wall_s'])} ({secs(t['compile_s'])} compiling); each returned policy judged over "
            f"{t['episodes']:,} episodes (95% intervals), {t['within_budget_seeds']}/{t['seeds']} within budget "
            "(upper end of the cost interval at most 1.02 alpha).",
            "",
        ]
        rows = [
            [
                f"seed {r['seed']}",
                f"{r['reward']:.2f} ± {r['reward_half_width']:.2f}",
                f"{r['costs'][0]:.2f} ± {r['cost_half_width'][0]:.2f}",
                "yes" if r["within_budget"] else "no",
            ]
            for r in t["seed_results"]
        ]
        rows += [
            [
                k,
                f"{r['reward']:.2f} ± {r['reward_half_width']:.2f}",
                f"{r['costs'][0]:.2f} ± {r['cost_half_width'][0]:.2f}",
                "-",
            ]
            for k, r in t["yardsticks"].items()
        ]
        out += table(["policy", "reward", "cost", "within budget"], rows)
    return out


def render_chunked(name: str, data: dict) -> list[str]:
    """``benchmarks/chunked_training.py``: chunked training against one monolithic jit."""
    rows = [
        [
            r["mode"],
            secs(r["run_median_s"]),
            si(r["env_steps_per_s"]),
            "-" if not r["slowdown_vs_monolithic"] else f"+{100 * r['slowdown_vs_monolithic']:.1f}%",
        ]
        for r in data["results"]
    ]
    same = "bit-identical to" if data.get("bit_identical_to_monolithic") else "different from"
    return [
        "Chunked training",
        provenance(name, data),
        "",
        f"FH-Constrained default config, {data['iterations']} updates of K = {data['episodes_per_iteration']}, "
        f"{data['seeds']} seed, chunks of {data['chunk_size']}, median of {data['repeats']}; final parameters "
        f"{same} the monolithic run.",
        "",
    ] + table(["mode", "run", "env-steps/s", "vs monolithic"], rows)


def render_tracking(name: str, data: dict) -> list[str]:
    """``benchmarks/tracking_overhead.py``: TensorBoard and W&B loggers against none."""
    rows = [
        [
            r["logger"],
            secs(r["median_run_s"]),
            "-" if r["logger"] == "none" else f"{100 * r['overhead_vs_none']:+.1f}%",
            f"{r['median_tracking_cpu_s']:.2f} s ({100 * r['tracking_cpu_fraction_of_run']:.2f}%)",
        ]
        for r in data["results"]
    ]
    return [
        "Experiment tracking overhead",
        provenance(name, data),
        "",
        f"{data['algo']} on {data['env']}, {data['iterations']} updates x K = {data['episodes_per_iteration']} x "
        f"{data['seeds']} seeds, chunks of {data['chunk_size']}, median of {data['repeats']} interleaved runs; "
        "the tracking CPU (the logging thread and W&B's service) is the direct measure, the wall times are "
        "noisy on a shared machine.",
        "",
    ] + table(["logger", "run (total - compile)", "wall vs none", "tracking CPU (% of the run)"], rows)


def render_validation_overhead(name: str, data: dict) -> list[str]:
    """``benchmarks/validation_overhead.py``: the API boundary's checks, before against after."""
    rows = [
        [
            case,
            f"{r['before_ms']:.3f} ms",
            f"{r['after_ms']:.3f} ms",
            f"{r['overhead_percent']:+.1f}%",
            f"{r['cpu_overhead_percent']:+.1f}%",
            "yes" if r.get("same_compiled_program") else "no",
        ]
        for case, r in data["results"].items()
    ]
    return ["Cost of the boundary checks", provenance(name, data), "", data["what"] + ".", ""] + table(
        ["case", "before", "after", "wall", "CPU time", "same compiled program"], rows
    )


def render_distributed(name: str, data: dict) -> list[str]:
    """``benchmarks/distributed.py``: the distributed path at one process, and several local
    processes against one."""
    out = ["Several processes (jax.distributed)", provenance(name, data), ""]
    o = data.get("overhead_one_process")
    if o:
        same = "identical" if all(o["identical_results"].values()) else "NOT identical"
        out += [
            f"`{o['command']}` (FH-Constrained on the default gridworld, plots included), median of "
            f"{o['repeats']} interleaved runs of the whole command; results {same} in both modes. The CPU time "
            "(user + system) is the direct measure; the wall time on a shared machine also measures how the "
            "scheduler shares the cores.",
            "",
        ]
        cpu = o.get("median_cpu_s")
        out += table(
            ["mode", "wall (median)", "vs plain", "CPU (median)", "vs plain"],
            [
                ["plain", secs(o["median_wall_s"]["plain"]), "-", secs(cpu and cpu["plain"]), "-"],
                [
                    "`--num-processes 1`",
                    secs(o["median_wall_s"]["distributed"]),
                    f"{100 * o['overhead']:+.1f}%",
                    secs(cpu and cpu["distributed"]),
                    "-" if not cpu else f"{100 * o['cpu_overhead']:+.1f}%",
                ],
            ],
        )
        out += [""]
    rows = []
    for r in data.get("processes") or []:
        same = r.get("identical_to_one_process_same_devices")
        vs_one = r.get("identical_to_one_device")
        rows.append(
            [
                r["layout"],
                secs(r["wall_s"]),
                "-" if same is None else ("yes" if all(same.values()) else "no"),
                "-"
                if vs_one is None
                else (
                    "yes"
                    if all(vs_one.values())
                    else (
                        "training, policies and judgement; exact evaluations within "
                        f"{r['exact_max_rel_diff_vs_one_device']:.1e}"
                        if r.get("training_identical_to_one_device") and vs_one["policy_npz"] and vs_one["summary_json"]
                        else "no"
                    )
                ),
            ]
        )
    if rows:
        out += [
            f"{data.get('small_run', 'a small run')}, on localhost; the wall time of the slowest process, "
            "compilation included (every process compiles); with fewer cores than processes it measures the "
            "sharing of the cores.",
            "",
        ]
        out += table(["layout", "wall", "bit-identical to 1 process, same devices", "vs 1 process, 1 device"], rows)
    return out


#: results file pattern (relative to benchmarks/results, fnmatch) -> renderer; the first match
#: wins, and the page follows this order.


def render_deep_reference(name: str, data: dict) -> list[str]:
    """``benchmarks/deep_reference.py``: the neural learners with a slack budget against rejax's PPO."""
    lines = [
        "The unconstrained limit against rejax's PPO",
        provenance(name, data),
        "",
        "Each learner's plain `Config()` with the budget slack (alpha = 1e9), 5 seeds, each final policy played "
        "as users play it (sampled actions); score = (R - R_uniform) / (R_rejax - R_uniform) with R_rejax the "
        "median of rejax 0.1.3's PPO seeds at its published settings (`benchmarks/results/reference/`). "
        "Environment steps: K H N for fhc_jax's learners.",
        "",
    ]
    for task, row in data["tasks"].items():
        rejax = row["rejax"]
        rejax_seeds = ", ".join(f"{s['mean_return']:.1f}" for s in rejax["seeds"])
        lines += [
            f"**{task}** ({row['env']}): uniform policy {row['uniform_return']:.1f}, rejax PPO median "
            f"{rejax['median_return']:.1f} over seeds {rejax_seeds} "
            f"in {rejax['env_steps']:,} env-steps ({secs(rejax['wall_s'])}).",
            "",
        ]
        rows = [
            [
                learner,
                ", ".join(f"{r:.1f}" for r in r_["returns"]),
                f"{r_['worst_score']:.3f}",
                f"{r_['env_steps']:,} ({r_['steps_vs_rejax']:.0f}x)",
                secs(r_["wall_s"]),
                f"`{str(r_.get('revision') or data.get('revision') or '?')[:7]}`",
            ]
            for learner, r_ in row["learners"].items()
        ]
        header = ["learner", "returns per seed", "worst score", "env-steps (vs rejax)", "train wall", "revision"]
        lines += table(header, rows)
        lines.append("")
    return lines[:-1]


def render_rejax(name: str, data: dict) -> list[str]:
    """``benchmarks/reference_rejax.py``: rejax's PPO, the outside reference of ``deep_reference``."""
    rows = [
        [s["seed"], f"{s['mean_return']:.1f} ± {s['half_width']:.1f}", f"{d['mean_return']:.1f}"]
        for s, d in zip(data["seeds"], data.get("seeds_deterministic", data["seeds"]), strict=True)
    ]
    return [
        f"rejax PPO on {data['gymnax_env']}",
        provenance(name, data),
        "",
        f"rejax {data['rejax_version']} (gymnax {data['versions']['gymnax']}, its own environment), settings from "
        f"{data['config_source']}; {data['env_steps']:,} env-steps ({secs(data['wall_s'])}), "
        f"{data['episodes']} episodes per seed; median {data['median_return']:.1f} sampled, "
        f"{data['median_return_deterministic']:.1f} deterministic.",
        "",
    ] + table(["seed", "return (sampled actions, as rejax plays)", "deterministic"], rows)
