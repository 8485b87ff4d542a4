"""Why NN- and FH-Constrained fail on ``BatteryStorage`` (diagnosis; short CPU experiments).

The GPU sweep (benchmarks/results/tuning/battery_round1) found NN-Constrained at -15 EUR/day,
0.52 cycles, multiplier 0 (the reference earns 77 EUR at 1 cycle) and FH-Constrained infeasible
at 1.8-1.9 cycles with multipliers of 45-408 EUR/cycle, whatever the multiplier settings. The
parts below (``--parts``) isolate the causes; everything is one seed and K = ``--episodes``
unless stated, and every run is one ``jax.jit`` of a whole ``lax.scan``.

1. ``signals``: what the sampled path trains on. ``ScaledSignals``' scales (so the units of
   the multiplier and of ``multiplier_max``), the proportional term's first multiplier, the
   terminal penalty against the stage rewards, the input standardisation, and a numerical
   check of the sampled-path actor target of NN-Constrained (``sample_advantage_targets``)
   against the tabular one (``advantage_targets``) it is documented to match to first order.
2. ``critic``: policy evaluation only. NN-Constrained's critics (actor and multiplier frozen
   at their initial values: the uniform policy) on the discretized (21, 9) model with the
   continuous environment's inputs (soc, d / sd, h / H), against the exact V^pi of
   ``fhc_jax.evaluate``: RMSE per stage and the value of stored energy dV/dsoc (least squares
   over the visited states), for lambda-return traces 0.4 (default), 0.8 and 1.0.
3. ``discretized``: NN-Constrained on the discretized model, judged exactly against
   ``fhc_jax.solve``: ``TabularEnv(to_cmdp(params, (21, 9)))`` with one-hot inputs (raw EUR and
   in the sampled path's scaled units), and the same model with (soc, d, t) inputs on the
   tabular and the sampled path, trace 0.4 and 1.0; and FH-Constrained's tabular path.
4. ``battery``: NN-Constrained on ``BatteryStorage`` (sampled path), judged by Monte-Carlo
   (``--judge-episodes`` episodes, ``fhc_jax.experiment.judge.monte_carlo``): default config,
   trace 1.0, the unconstrained check (multiplier_max 1e-6, gain 0) with both traces, and
   trace 1.0 with the importance-weighted target (prototype, patched in memory).
5. ``fh``: FH-Constrained on ``BatteryStorage`` with three sampled-path actor increments: as
   shipped, delta * e_a; centred, delta * (e_a - mu); importance-weighted, delta * (e_a / mu_a
   - 1) (the per-sample form of the tabular improved step). The variants run on an in-memory
   copy of ``fhc_jax/algos/fh_constrained.py`` with that one branch replaced (the package
   is not modified).

Usage::

    python benchmarks/battery_diagnosis.py [--parts signals,critic,discretized,battery,fh]
        [--iterations 600] [--fh-iterations 1000] [--critic-iterations 300] [--episodes 256]

Writes ``benchmarks/results/battery_diagnosis.json`` (``--out``; atomically, and merged with
the parts of an earlier run that this run does not redo).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import fhc_jax as fhc
from fhc_jax.algos import fh_constrained as fh
from fhc_jax.algos import nn_constrained as nn
from fhc_jax.algos import nn_losses
from fhc_jax.algos.learner import observation_sample
from fhc_jax.envs.wrappers import signal_scales
from fhc_jax.experiment import judge
from fhc_jax.experiment.machine import machine_info
from fhc_jax.experiment.rundir import write_json_atomic
from fhc_jax.rollout import rollout, uniform_random_policy

PARTS = ("signals", "critic", "discretized", "battery", "fh")
RESOLUTION = (21, 9)
REFERENCE_EUR = 77.0  # the reference policy (81, 25) executed in the environment, docs of battery.py


# ---------------------------------------------------------------------------------- helpers
class GridBattery(fhc.TabularEnv):
    """The discretized battery model whose observation of a grid point is the continuous
    environment's (soc, d / sd_stationary, h / H), (3,) float32: the same inputs as the
    sampled path, on dynamics that can be judged exactly."""

    supported_observations = ("index",)

    def __init__(self, cmdp: fhc.TabularCMDP, soc_grid: np.ndarray, dev_grid_sd: np.ndarray):
        super().__init__(cmdp, "index")
        self._soc = jnp.asarray(soc_grid, jnp.float32)
        self._dev = jnp.asarray(dev_grid_sd, jnp.float32)

    observation_shape = property(lambda self: (3,))
    observation_dtype = property(lambda self: jnp.float32)

    def observation(self, state, params) -> jax.Array:
        nd = self._dev.shape[0]
        i, j = state.index // nd, state.index % nd
        return jnp.stack([self._soc[i], self._dev[j], state.time.astype(jnp.float32) / self.horizon])


@dataclasses.dataclass
class Discretized:
    """The (21, 9) model in EUR (``raw``) and in the sampled path's units (``scaled``: rewards
    / reward_scale, costs and thresholds / cost_scale), with its grids and optima (EUR)."""

    env: fhc.BatteryStorage
    params: Any
    raw: fhc.TabularCMDP
    scaled: fhc.TabularCMDP
    reward_scale: float
    cost_scale: float
    soc: np.ndarray
    dev_sd: np.ndarray
    optimum: float
    optimum_nu: float
    unconstrained: float
    unconstrained_cost: float


def discretized_model() -> Discretized:
    env = fhc.BatteryStorage()
    params = env.default_params
    raw = env.to_cmdp(params, resolution=RESOLUTION)
    sr, sc = signal_scales(env, params)
    sc = float(sc[0])
    scaled = raw.replace(rewards=raw.rewards / sr, costs=raw.costs / sc, terminal_rewards=raw.terminal_rewards / sr,
                         terminal_costs=raw.terminal_costs / sc, thresholds=raw.thresholds / sc)
    soc, dev = env.grids(params, RESOLUTION)
    best, unc = fhc.solve(raw), fhc.solve_unconstrained(raw)
    return Discretized(env, params, raw, scaled, float(sr), sc, soc, dev / float(params.stationary_sd),
                       float(best.evaluation.reward), float(best.multipliers[0]), float(unc.evaluation.reward),
                       float(unc.evaluation.costs[0]))


def config(module, **overrides: Any):
    """``module.Config`` with ``field=value`` and ``field.sub=value`` (schedules) overrides."""
    base, kw = module.Config(), {}
    for key, value in overrides.items():
        if "." in key:
            field, sub = key.split(".")
            kw[field] = dataclasses.replace(kw.get(field, getattr(base, field)), **{sub: value})
        else:
            kw[key] = value
    return module.Config(**kw)


def stage_slopes(values: np.ndarray, occupancy: np.ndarray, soc: np.ndarray, n_dev: int) -> np.ndarray:
    """Occupancy-weighted least-squares slope of V_h(s) on soc(s) at every stage, (H+1,)."""
    x = np.repeat(soc, n_dev)
    out = []
    for v, w in zip(values, occupancy):
        xm, ym = (w * x).sum() / w.sum(), (w * v).sum() / w.sum()
        out.append((w * (x - xm) * (v - ym)).sum() / max((w * (x - xm) ** 2).sum(), 1e-12))
    return np.asarray(out)


def every_3h(x: np.ndarray, digits: int = 1) -> list[float]:
    return [round(float(v), digits) for v in np.asarray(x)[::6]]


# ---------------------------------------------------------------------------------- 1. signals
def target_check(seed: int = 0, eta: float = 1e-3, num_actions: int = 5) -> dict[str, Any]:
    """First-order check of ``sample_advantage_targets`` against ``advantage_targets``.

    One state with policy mu = softmax(z) and per-action advantages A (centred under mu). The
    sampled path's expected target is sum_a mu_a softmax(z + eta A_a e_a); the tabular target
    is softmax(z + eta A_hat) with A_hat = A (exact visit averages). Returned, divided by eta,
    as logit steps log(q) - z centred under mu: the sampled step, its first-order prediction
    mu_b A_b - sum_a mu_a^2 A_a, the tabular step A_b, and the sampled step caused by a
    constant advantage offset c = 1 (prediction mu_b - sum_a mu_a^2; 0 for a baseline-
    invariant step, as the tabular one is)."""
    key = jax.random.key(seed)
    z = jax.random.normal(key, (num_actions,))
    mu = jax.nn.softmax(z)
    a_raw = jax.random.normal(jax.random.fold_in(key, 1), (num_actions,))
    adv = a_raw - jnp.sum(mu * a_raw)
    eye, actions = jnp.eye(num_actions), jnp.arange(num_actions)

    def centred_step(q):
        d = (jnp.log(q) - z) / eta
        return d - jnp.sum(mu * d)

    expected = lambda a_of: jnp.sum(mu[:, None] * jax.vmap(
        lambda a: nn_losses.sample_advantage_targets(z, eye[a], a_of(a), eta))(actions), axis=0)
    sampled = centred_step(expected(lambda a: adv[a]))
    tabular = centred_step(jax.nn.softmax(z + eta * adv))
    offset = centred_step(expected(lambda a: jnp.float32(1.0)))
    r = lambda x: np.round(np.asarray(x), 3).tolist()
    return {"mu": r(mu), "advantages": r(adv), "sampled_step": r(sampled),
            "predicted_mu_A_minus_sum_mu2_A": r(mu * adv - jnp.sum(mu ** 2 * adv)), "tabular_step": r(tabular),
            "relative_difference_sampled_vs_tabular": float(jnp.linalg.norm(sampled - tabular) / jnp.linalg.norm(tabular)),
            "offset_step": r(offset), "predicted_offset_step": r(mu - jnp.sum(mu ** 2))}


def part_signals(args) -> dict:
    env = fhc.BatteryStorage()
    params = env.default_params
    sr, sc = signal_scales(env, params)
    unit = sr / float(sc[0])
    traj = jax.jit(rollout, static_argnums=(1, 3, 4))(jax.random.key(0), env, params, uniform_random_policy(env.num_actions), 2000)
    r, term = np.asarray(traj.rewards), np.asarray(traj.terminal_rewards)
    costs = np.asarray(traj.costs)[..., 0].sum(1)
    cfg = nn.Config()
    violation0 = (costs.mean() - 1.0) / float(sc[0])
    obs = np.asarray(observation_sample(env, params))
    out = {
        "reward_scale_EUR": sr, "cost_scale_cycles": float(sc[0]),
        "multiplier_unit_EUR_per_cycle": unit,
        "nu_star_scaled": 53.0 / unit,
        "multiplier_max_20_and_2_in_EUR_per_cycle": [20 * unit, 2 * unit],
        "threshold_scaled": 1.0 / float(sc[0]),
        "nn_first_multiplier_EUR_per_cycle (gain 0.05 x violation of the uniform policy)": cfg.multiplier_gain * violation0 * unit,
        "uniform_policy": {"episode_reward_EUR": float(r.sum(1).mean() + term.mean()), "cycles": float(costs.mean()),
                           "stage_reward_abs_q50_q99_EUR": np.quantile(np.abs(r), [0.5, 0.99]).round(2).tolist(),
                           "terminal_reward_mean_EUR": float(term.mean()), "terminal_paid_fraction": float((term < 0).mean()),
                           "terminal_reward_min_EUR": float(term.min())},
        "input_standardisation (soc, d/sd, h/H)": {"mean": obs.mean(0).round(3).tolist(), "std": obs.std(0).round(3).tolist(),
                                                    "min": obs.min(0).round(2).tolist(), "max": obs.max(0).round(2).tolist()},
        "nn_sampled_target_check": target_check(),
    }
    print(f"[signals] reward scale {sr:.2f} EUR, cost scale {float(sc[0]):.4f} cycles: multiplier unit {unit:.0f} EUR/cycle "
          f"(nu* = 53 EUR/cycle = {53 / unit:.3f}; multiplier_max 20 / 2 = {20 * unit:.0f} / {2 * unit:.0f} EUR/cycle)")
    print(f"[signals] NN's first multiplier (proportional term on the uniform policy's violation): "
          f"{out['nn_first_multiplier_EUR_per_cycle (gain 0.05 x violation of the uniform policy)']:.0f} EUR/cycle")
    u = out["uniform_policy"]
    print(f"[signals] uniform policy: {u['episode_reward_EUR']:.1f} EUR at {u['cycles']:.2f} cycles; |r_h| median/99% "
          f"{u['stage_reward_abs_q50_q99_EUR']} EUR; terminal penalty paid in {100 * u['terminal_paid_fraction']:.0f}% "
          f"of episodes, mean {u['terminal_reward_mean_EUR']:.1f} EUR, worst {u['terminal_reward_min_EUR']:.0f} EUR")
    print(f"[signals] inputs: {out['input_standardisation (soc, d/sd, h/H)']}")
    t = out["nn_sampled_target_check"]
    print(f"[signals] NN sampled-path actor target (expected over a ~ mu) vs the tabular one, logit steps / eta: mu = "
          f"{t['mu']}, A = {t['advantages']}: sampled {t['sampled_step']} (predicted mu_b A_b - sum mu^2 A: "
          f"{t['predicted_mu_A_minus_sum_mu2_A']}), tabular {t['tabular_step']} (relative difference "
          f"{t['relative_difference_sampled_vs_tabular']:.2f}; documented: equal to first order); a constant advantage "
          f"offset 1 moves the logits by {t['offset_step']} (tabular: 0)")
    return out


# ---------------------------------------------------------------------------------- 2. critic
def part_critic(args, model: Discretized) -> dict:
    tenv = GridBattery(model.scaled, model.soc, model.dev_sd)
    uniform = jnp.full((tenv.horizon, model.raw.num_states, tenv.num_actions), 1.0 / tenv.num_actions)
    ev = fhc.evaluate(model.scaled, uniform)
    exact, occ = np.asarray(ev.values), np.asarray(ev.occupancy)
    weights = occ / occ.sum(1, keepdims=True)
    slope_true = stage_slopes(exact, occ, model.soc, model.dev_sd.size) * model.reward_scale
    marks = sorted({m for m in (50, 100, args.critic_iterations) if m <= args.critic_iterations})
    out: dict = {"iterations": marks, "episodes_per_iteration": args.episodes,
                 "dV_dsoc_exact_EUR_every_3h": every_3h(slope_true), "traces": {}}
    print(f"[critic] exact dV/dsoc of the uniform policy, EUR per unit soc, every 3 h: {every_3h(slope_true)}")
    for trace in (0.4, 0.8, 1.0):
        cfg = nn.Config(episodes_per_iteration=args.episodes, trace=trace)
        setup = nn.setup(tenv, model.scaled, cfg)
        st0 = nn.init(jax.random.key(0), setup, cfg)

        def step(carry, _, setup=setup, cfg=cfg, st0=st0):
            st, key = carry
            key, k1 = jax.random.split(key)
            st, _ = nn.update(st, nn.rollout(k1, st, setup, cfg), None, setup, cfg)
            frozen = st.replace(actor=st0.actor, actor_average=st0.actor, actor_opt=st0.actor_opt,
                                multipliers=st0.multipliers, multiplier_state=st0.multiplier_state)
            return (frozen, key), None

        carry, done, rows, t0 = (st0, jax.random.key(1)), 0, [], time.perf_counter()
        for mark in marks:
            carry, _ = jax.jit(lambda c, n=mark - done: jax.lax.scan(step, c, None, length=n))(carry)
            done = mark
            v = np.asarray(setup.nets.critic.apply(carry[0].critic, setup.obs_table))[..., 0]
            rmse = np.sqrt((weights * (v - exact) ** 2).sum(1)) * model.reward_scale
            slope = stage_slopes(v, occ, model.soc, model.dev_sd.size) * model.reward_scale
            rows.append({"iteration": mark, "mean_rmse_EUR": float(rmse[:-1].mean()), "rmse_EUR_every_3h": every_3h(rmse),
                         "dV_dsoc_EUR_every_3h": every_3h(slope),
                         "night_slope_fraction (00:00-09:00)": float(slope[:18].mean() / slope_true[:18].mean())})
            print(f"[critic] trace {trace}: after {mark:4d} updates RMSE {rows[-1]['mean_rmse_EUR']:6.1f} EUR; dV/dsoc "
                  f"{every_3h(slope)}; night slope {100 * rows[-1]['night_slope_fraction (00:00-09:00)']:.0f}% of exact "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        out["traces"][str(trace)] = rows
    return out


# ---------------------------------------------------------------------------------- 3. discretized
def exact_run(module, env, cmdp, cfg, model: Discretized, scaled: bool) -> dict:
    t0 = time.perf_counter()
    res = jax.block_until_ready(jax.jit(module.make_train(env, cmdp, cfg))(jax.random.key(0)))
    sr, sc = (model.reward_scale, model.cost_scale) if scaled else (1.0, 1.0)
    ex = res.metrics.exact
    reward = np.asarray(ex.reward) * sr
    cost = np.asarray(ex.costs)[:, 0] * sc
    nu = float(res.metrics.multipliers[-1, 0]) * sr / sc
    return {"iterations": np.asarray(ex.iteration).tolist(), "reward_EUR": reward.round(2).tolist(),
            "cycles": cost.round(3).tolist(), "final_reward_EUR": float(reward[-1]), "final_cycles": float(cost[-1]),
            "fraction_of_optimum": float(reward[-1] / model.optimum), "final_nu_EUR_per_cycle": nu,
            "wall_s": time.perf_counter() - t0}


def part_discretized(args, model: Discretized) -> dict:
    grid = GridBattery(model.scaled, model.soc, model.dev_sd)
    n, k = args.iterations, args.episodes
    common = {"num_iterations": n, "episodes_per_iteration": k, "eval_every": max(n // 4, 1)}
    runs = [
        ("nn one-hot tabular, raw EUR (TabularEnv(to_cmdp(21, 9)))", nn, fhc.TabularEnv(model.raw), model.raw, False, {}),
        ("nn one-hot tabular, scaled units", nn, fhc.TabularEnv(model.scaled), model.scaled, True, {}),
        ("nn (soc,d,t) tabular, trace 0.4", nn, grid, model.scaled, True, {}),
        ("nn (soc,d,t) tabular, trace 1.0", nn, grid, model.scaled, True, {"trace": 1.0}),
        ("nn (soc,d,t) sampled, trace 0.4", nn, grid, model.scaled, True, {"path": "sampled"}),
        ("nn (soc,d,t) sampled, trace 1.0", nn, grid, model.scaled, True, {"path": "sampled", "trace": 1.0}),
        ("fh one-hot tabular, raw EUR", fh, fhc.TabularEnv(model.raw), model.raw, False, {}),
        ("fh one-hot tabular, scaled units", fh, fhc.TabularEnv(model.scaled), model.scaled, True, {}),
    ]
    out = {"optimum_EUR": model.optimum, "optimum_nu_EUR_per_cycle": model.optimum_nu,
           "unconstrained_EUR": model.unconstrained, "unconstrained_cycles": model.unconstrained_cost,
           "iterations": n, "episodes_per_iteration": k, "runs": {}}
    print(f"[discretized] (21, 9): optimum {model.optimum:.2f} EUR at 1 cycle (nu* {model.optimum_nu:.1f} EUR/cycle), "
          f"unconstrained {model.unconstrained:.2f} EUR at {model.unconstrained_cost:.2f} cycles")
    for name, module, env, cmdp, scaled, over in runs:
        row = exact_run(module, env, cmdp, config(module, **common, **over), model, scaled)
        out["runs"][name] = row
        print(f"[discretized] {name:58s}: {row['final_reward_EUR']:7.2f} EUR ({100 * row['fraction_of_optimum']:5.1f}% of the "
              f"optimum), {row['final_cycles']:.3f} cycles, nu {row['final_nu_EUR_per_cycle']:6.1f}; over training "
              f"{row['reward_EUR']} ({row['wall_s']:.0f} s)", flush=True)
    return out


# ---------------------------------------------------------------------------------- 4. battery
def importance_weighted_targets(logits, onehot_actions, advantages, logit_step, floor: float = 0.05):
    """Prototype of the proposed NN sampled-path target: q = softmax(z + eta A e_a / mu_a)
    (averaged over a ~ mu: the tabular step softmax(z + eta A_hat) to first order, and a
    constant advantage offset cancels)."""
    mu_a = jnp.sum(jax.nn.softmax(logits, axis=-1) * onehot_actions, axis=-1, keepdims=True)
    step = logit_step * advantages[..., None] * onehot_actions / jnp.maximum(mu_a, floor)
    return jax.lax.stop_gradient(jax.nn.softmax(logits + step, axis=-1))


def monte_carlo_run(module, cfg, episodes: int, seeds: int) -> dict:
    env = fhc.BatteryStorage()
    params = env.default_params
    t0 = time.perf_counter()
    res = jax.block_until_ready(jax.jit(jax.vmap(module.make_train(env, params, cfg)))(
        jax.random.split(jax.random.key(0), seeds)))
    wall = time.perf_counter() - t0
    states = [jax.tree.map(lambda x, r=r: x[r], res.state) for r in range(seeds)]
    mc = judge.monte_carlo(env, params, [module.policy(s, env, params) for s in states], episodes)
    ex = res.metrics.exact
    return {"reward_EUR": mc["reward"].round(2).tolist(), "reward_half_width": mc["reward_half_width"].round(2).tolist(),
            "cycles": mc["costs"][:, 0].round(3).tolist(), "cycles_half_width": mc["cost_half_width"][:, 0].round(3).tolist(),
            "fraction_of_reference": (mc["reward"] / REFERENCE_EUR).round(3).tolist(),
            "nu_EUR_per_cycle": np.asarray(res.metrics.multipliers[:, -1, 0]).round(1).tolist(),
            "training_curve_iterations": np.asarray(ex.iteration[0]).tolist(),
            "training_curve_reward_EUR": np.asarray(ex.reward).round(2).tolist(),
            "training_curve_cycles": np.asarray(ex.costs[..., 0]).round(3).tolist(), "wall_s": wall}


def part_battery(args) -> dict:
    n, k = args.iterations, args.episodes
    common = {"num_iterations": n, "episodes_per_iteration": k, "eval_every": max(n // 4, 1), "eval_episodes": 2048}
    unc = {"multiplier_max": 1e-6, "multiplier_gain": 0.0}
    runs = [("default (trace 0.4)", {}, False), ("trace 1.0", {"trace": 1.0}, False),
            ("unconstrained, trace 0.4", unc, False), ("unconstrained, trace 1.0", {**unc, "trace": 1.0}, False),
            ("trace 1.0, importance-weighted target (prototype)", {"trace": 1.0}, True)]
    out = {"iterations": n, "episodes_per_iteration": k, "seeds": args.seeds, "judge_episodes": args.judge_episodes,
           "reference_EUR": REFERENCE_EUR, "runs": {}}
    for name, over, patch in runs:
        shipped = nn.sample_advantage_targets
        try:
            if patch:
                nn.sample_advantage_targets = importance_weighted_targets
            row = monte_carlo_run(nn, config(nn, **common, **over), args.judge_episodes, args.seeds)
        finally:
            nn.sample_advantage_targets = shipped
        out["runs"][name] = row
        print(f"[battery] NN {name:50s}: {row['reward_EUR']} EUR (+- {row['reward_half_width']}), {row['cycles']} cycles, "
              f"nu {row['nu_EUR_per_cycle']} EUR/cycle; curve {row['training_curve_reward_EUR']} ({row['wall_s']:.0f} s)",
              flush=True)
    return out


# ---------------------------------------------------------------------------------- 5. fh
FH_SHIPPED = """        elif s_all is None:  # no tabular states: the sample's own advantage G - v^T phi(o)
            per_sample = delta[..., None] * onehot_a"""
FH_VARIANTS = {
    "centred": """        elif s_all is None:
            mu_rows = jax.nn.softmax(jnp.einsum("hkx,hxa->hka", phi_all[:-1], theta), axis=-1)
            per_sample = delta[..., None] * (onehot_a - mu_rows)""",
    "importance-weighted": """        elif s_all is None:
            mu_rows = jax.nn.softmax(jnp.einsum("hkx,hxa->hka", phi_all[:-1], theta), axis=-1)
            mu_a = jnp.sum(mu_rows * onehot_a, axis=-1, keepdims=True)
            per_sample = delta[..., None] * (onehot_a / jnp.maximum(mu_a, 0.05) - 1.0)""",
}


def fh_variant(name: str):
    """An in-memory copy of fhc_jax.algos.fh_constrained with the sampled-path actor branch
    replaced (``FH_VARIANTS``); the package itself is untouched."""
    source = Path(fh.__file__).read_text()
    if FH_SHIPPED not in source:
        raise RuntimeError("fh_constrained.py changed: the sampled-path actor branch this diagnosis patches is gone")
    spec = importlib.util.spec_from_loader(f"fh_constrained_{name.replace('-', '_')}", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = fh.__file__
    sys.modules[spec.name] = module
    # the package's own source with one branch replaced: a prototype, not a plug-in mechanism
    exec(compile(source.replace(FH_SHIPPED, FH_VARIANTS[name]), fh.__file__, "exec"), module.__dict__)  # noqa: S102
    return module


def part_fh(args) -> dict:
    n, k = args.fh_iterations, args.episodes
    common = {"num_iterations": n, "episodes_per_iteration": k, "eval_every": max(n // 4, 1), "eval_episodes": 2048}
    out = {"iterations": n, "episodes_per_iteration": k, "seeds": args.seeds, "judge_episodes": args.judge_episodes, "runs": {}}
    for name in ("shipped", "centred", "importance-weighted"):
        module = fh if name == "shipped" else fh_variant(name)
        row = monte_carlo_run(module, config(module, **common), args.judge_episodes, args.seeds)
        out["runs"][name] = row
        print(f"[fh] actor increment {name:20s}: {row['reward_EUR']} EUR, {row['cycles']} cycles, nu {row['nu_EUR_per_cycle']} "
              f"EUR/cycle; cycles over training {row['training_curve_cycles']} ({row['wall_s']:.0f} s)", flush=True)
    return out


# ---------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {PARTS}")
    parser.add_argument("--iterations", type=int, default=600, help="updates of the NN runs (parts 3, 4)")
    parser.add_argument("--fh-iterations", type=int, default=1000, help="updates of the FH runs (part 5)")
    parser.add_argument("--critic-iterations", type=int, default=300, help="critic-only updates (part 2)")
    parser.add_argument("--episodes", type=int, default=256, help="K, episodes per update")
    parser.add_argument("--seeds", type=int, default=1, help="seeds of the Monte-Carlo judged runs (parts 4, 5)")
    parser.add_argument("--judge-episodes", type=int, default=10_000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "battery_diagnosis.json"))
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        parser.error(f"--parts: unknown {bad}; valid: {', '.join(PARTS)}")
    for name in ("iterations", "fh_iterations", "critic_iterations", "episodes", "seeds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, found {getattr(args, name)}")
    if args.judge_episodes < 2:
        parser.error(f"--judge-episodes must be >= 2, found {args.judge_episodes}")

    path = Path(args.out)
    result: dict = json.loads(path.read_text()) if path.exists() else {}
    result.update({"machine": machine_info(), "args": vars(args)})
    model = discretized_model() if {"critic", "discretized"} & set(parts) else None
    for part in parts:
        t0 = time.perf_counter()
        fn = {"signals": part_signals, "critic": partial(part_critic, model=model),
              "discretized": partial(part_discretized, model=model), "battery": part_battery, "fh": part_fh}[part]
        result[part] = {**fn(args), "part_wall_s": time.perf_counter() - t0}
        write_json_atomic(path, result)  # after every part: a later failure loses nothing already measured
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
