"""NN-Constrained's training curves on a non-tabular task: batch cost, multiplier and batch
reward at every tenth of the run, then each final policy judged by Monte-Carlo (20,000
episodes; feasible = the cost's upper 95% bound within 1.02 alpha). A diagnostic of the
multiplier's dynamics (docs/algorithms/nn_constrained.md, "Is it the Gaussian's collapsing sigma?").

Usage::

    python benchmarks/tuning/nn_curves.py TASK '{"trace": 1.0, "multiplier_step.init": 0.01}' HELD_OUT [OUT.json]

TASK is pendulum (gymnax Pendulum-v1 with its torque budget), battery_c
(``BatteryStorage(continuous_actions=True)``) or battery_d (``BatteryStorage()``); the JSON
dict sets Config fields ("schedule.init"-style keys reach into schedules); the 5 seeds are
``split(fold_in(key(0), HELD_OUT), 5)``. Batteries report the share of the reference policy's
reward (``judge.reference_optimum``, 100,000 episodes). Box-action tasks also report each seed's
final per-stage sigma of the current actor (min / median / max over the stages, at the standardised input 0).

A diagnostic key that is not a ``Config`` field: ``"log_std_min": -2.3`` raises the Gaussian
head's lower log-std bound (``fhc_jax.algos.distributions.LOG_STD_MIN``, -5 by default:
sigma >= e^-5 half ranges) for the whole run, training and judgement alike (a sigma floor;
docs/algorithms/nn_constrained.md, "Is it the Gaussian's collapsing sigma?").
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time

import jax
import numpy as np

import fhc_jax as fhc
from fhc_jax.algos import distributions, nn_losses
from fhc_jax.algos import nn_constrained as nc
from fhc_jax.envs import gymnax_interop
from fhc_jax.experiment import judge
from fhc_jax.experiment.rundir import write_json_atomic

TASKS = {"pendulum": gymnax_interop.pendulum, "battery_c": lambda: fhc.BatteryStorage(continuous_actions=True),
         "battery_d": fhc.BatteryStorage}
SEEDS, EPISODES = 5, 20_000


def stage_sigmas(env, params, state) -> list[float] | None:
    """(min, median, max) over the stages of the current actor's sigma (the one that rolls out
    and would have to respond to the multiplier; first action dimension, environment units) at
    the standardised input 0; None for discrete actions."""
    setup = nc.policy_setup(env, params, state)
    if not isinstance(setup.head, distributions.DiagonalGaussian):
        return None
    current = state.replace(actor_average=state.actor)  # observation_logits reads the reported actor
    outs = jax.vmap(lambda h: nc.observation_logits(current, setup, setup.shift, h))(np.arange(env.horizon))
    sigma = np.exp(np.asarray(setup.head.mean_log_std(outs)[1][:, 0]))
    return [float(sigma.min()), float(np.median(sigma)), float(sigma.max())]


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[1] not in TASKS:
        raise SystemExit(f"usage: nn_curves.py {{{','.join(TASKS)}}} CONFIG_JSON HELD_OUT [OUT.json]")
    task, overrides, held_out = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    env = TASKS[task]()
    params = env.default_params
    floor = overrides.pop("log_std_min", None)
    if floor is not None and not (math.isfinite(float(floor)) and float(floor) < distributions.LOG_STD_MAX):
        raise SystemExit(f"nn_curves: log_std_min must be a finite number below LOG_STD_MAX = "
                         f"{distributions.LOG_STD_MAX}, found {floor!r}")
    if floor is not None:  # a diagnostic sigma floor: both modules read the bound at trace time
        distributions.LOG_STD_MIN = nn_losses.LOG_STD_MIN = float(floor)
        overrides_out = {**overrides, "log_std_min": float(floor)}
    else:
        overrides_out = overrides
    cfg = nc.Config(eval_every=0, eval_episodes=2)
    for field, value in overrides.items():
        outer, _, inner = field.partition(".")
        cfg = cfg.replace(**{outer: dataclasses.replace(getattr(cfg, outer), **{inner: value}) if inner else value})
    keys = jax.random.split(jax.random.fold_in(jax.random.key(0), held_out), SEEDS)
    t0 = time.perf_counter()
    out = jax.block_until_ready(jax.jit(jax.vmap(nc.make_train(env, params, cfg)))(keys))
    wall = time.perf_counter() - t0
    print(task, json.dumps(overrides_out), "held-out", held_out, f"wall {wall:.0f} s (compile included)", flush=True)
    stride = max(cfg.num_iterations // 10, 1)
    m, curves = out.metrics, []
    for s in range(SEEDS):
        curve = {"iteration": list(range(stride - 1, cfg.num_iterations, stride)),
                 "batch_cost": np.round(np.asarray(m.costs[s, stride - 1::stride, 0]), 2).tolist(),
                 "multiplier": np.round(np.asarray(m.multipliers[s, stride - 1::stride, 0]), 2).tolist(),
                 "batch_reward": np.round(np.asarray(m.reward[s, stride - 1::stride]), 1).tolist()}
        curves.append(curve)
        print(f" seed {s} cost {curve['batch_cost']}\n        nu   {curve['multiplier']}\n        rew  {curve['batch_reward']}")
    states = [jax.tree.map(lambda x, r=r: x[r], out.state) for r in range(SEEDS)]
    mc = judge.monte_carlo(env, params, [nc.policy(st, env, params) for st in states], EPISODES)
    ref = None if task == "pendulum" else judge.reference_optimum(env, params, 100_000).reward
    alpha = float(np.asarray(env.thresholds(params))[0])
    rows = []
    for s in range(SEEDS):
        upper = float(mc["costs"][s, 0] + mc["cost_half_width"][s, 0])
        rows.append({"reward": float(mc["reward"][s]), "cost": float(mc["costs"][s, 0]), "cost_upper": upper,
                     "feasible": upper <= 1.02 * alpha, "multiplier": float(m.multipliers[s, -1, 0]),
                     "percent_of_reference": None if ref is None else 100 * float(mc["reward"][s]) / ref,
                     "sigma": stage_sigmas(env, params, states[s]), "curve": curves[s]})
        pct = "" if ref is None else f" ({rows[-1]['percent_of_reference']:.1f}%)"
        sig = "" if rows[-1]["sigma"] is None else " sigma min/median/max " + "/".join(f"{x:.3f}" for x in rows[-1]["sigma"])
        print(f"  seed {s}: reward {rows[-1]['reward']:.2f}{pct} cost {rows[-1]['cost']:.3f} upper {upper:.3f} "
              f"feasible {rows[-1]['feasible']}{sig}")
    if len(sys.argv) > 4:
        write_json_atomic(sys.argv[4], {"task": task, "config": overrides_out, "held_out": held_out, "episodes": EPISODES,
                                        "reference_reward": ref, "wall_s": wall, "seeds": rows})


if __name__ == "__main__":
    main()
