"""Tuning NN-Constrained on ``BatteryStorage(continuous_actions=True)`` (issue 17's target:
>= 95% of the reference's reward, cost upper 95% bound <= 1.02, on 5/5 seeds).

One call of this script = one compiled call: the numeric configurations given by ``--grid``
(a JSON list of override dicts; "actor_step.init"-style keys reach into schedules) are stacked
with ``fhc_jax.algos.stack`` and trained over the seeds in ONE
``jax.jit(jax.vmap(jax.vmap(train, in_axes=(0, None)), in_axes=(None, 0)))(keys, stacked)``;
``--static`` (a JSON dict) sets the static fields shared by the call. Each final policy is
judged by Monte-Carlo (``fhc_jax.experiment.judge.monte_carlo``, ``--episodes`` per policy,
common random numbers) against ``judge.reference_optimum``; configurations are ranked by their
worst seed (feasible = cost's upper 95% bound <= 1.02, then reward).

Seeds: ``--seeds tune`` = ``jax.random.split(jax.random.key(0), 2)``; ``--seeds heldout`` =
``jax.random.split(jax.random.fold_in(jax.random.key(0), 17), 5)``; ``--seeds heldout:N`` =
``jax.random.split(jax.random.fold_in(jax.random.key(0), N), 5)``, a further held-out set.

Per run it also records the final multiplier (EUR/cycle; the reference's nu* for comparison),
the final per-stage log-std of the reported policy, and the training curve (batch reward/cost,
multiplier every 100 updates).

Usage::

    python benchmarks/tuning/nn_continuous_battery.py --label NAME --static '{"trace": ...}' \
        --grid '[{"logit_step": 1.0}, {"logit_step": 2.0}]' [--seeds tune|heldout] [--episodes 20000]

Results are merged (by label) into ``benchmarks/results/tuning/nn_continuous_battery.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import fhc_jax as fhc
from fhc_jax.algos import nn_constrained, stack
from fhc_jax.experiment import judge
from fhc_jax.experiment.rundir import write_json_atomic

OUT = Path(__file__).resolve().parents[1] / "results" / "tuning" / "nn_continuous_battery.json"
LIMIT = 1.02  # cost upper bound tolerated (alpha = 1, 2%)
REF_CACHE_EPISODES = 100_000


def with_overrides(cfg: nn_constrained.Config, overrides: dict) -> nn_constrained.Config:
    """``cfg`` with ``{"field": v, "schedule.init": v}`` overrides."""
    for key, value in overrides.items():
        if "." in key:
            outer, inner = key.split(".")
            cfg = dataclasses.replace(cfg, **{outer: dataclasses.replace(getattr(cfg, outer), **{inner: value})})
        else:
            cfg = dataclasses.replace(cfg, **{key: value})
    return cfg


def seed_keys(which: str) -> jax.Array:
    if which == "tune":
        return jax.random.split(jax.random.key(0), 2)
    if which == "heldout":
        return jax.random.split(jax.random.fold_in(jax.random.key(0), 17), 5)
    if which.startswith("heldout:") and which[8:].isdigit():  # a further held-out set
        return jax.random.split(jax.random.fold_in(jax.random.key(0), int(which[8:])), 5)
    raise ValueError(f"--seeds must be 'tune', 'heldout' or 'heldout:N' (N a non-negative integer), found {which!r}")


def mean_policy(state, env, params):
    """The reported policy's mean action (no exploration noise), a diagnostic: the learner
    reports and is judged by the stochastic Gaussian policy."""
    from functools import partial

    setup = nn_constrained.policy_setup(env, params, state)
    return setup.head.policy(partial(nn_constrained.observation_logits, state, setup), deterministic=True)


def log_stds(state, env, params) -> np.ndarray:
    """Per-stage log-std (state-independent head) of the reported policy, (H,) for one seed:
    the head's log-std at a zero observation of each stage."""
    setup = nn_constrained.policy_setup(env, params, state)
    obs = jnp.zeros(setup.shift.shape, jnp.float32)
    outs = jax.vmap(lambda h: nn_constrained.observation_logits(state, setup, obs, h))(jnp.arange(env.horizon))
    _, log_std = setup.head.mean_log_std(outs)
    return np.asarray(log_std[:, 0])


BLOCKS = {"00-06h": (0, 12), "06-10h": (12, 20), "10-16h": (20, 32), "16-22h": (32, 44), "22-24h": (44, 48)}


def stage_profile(env, params, policy, episodes: int, seed: int = 1) -> dict:
    """Per-stage means over ``episodes`` episodes (key ``seed``, as ``judge.monte_carlo``):
    reward (EUR), clipped rate, state of charge at the stage's start, cycles; the terminal
    reward; and the reward summed by block of the day (:data:`BLOCKS`)."""
    traj = jax.jit(fhc.rollout, static_argnums=(1, 3, 4))(jax.random.key(seed), env, params, policy, episodes)
    reward = np.asarray(traj.rewards, np.float64).mean(0)
    rate = np.clip(np.asarray(traj.actions, np.float64)[..., 0], -1.0, 1.0).mean(0)
    soc = np.asarray(traj.observations, np.float64)[..., 0].mean(0)
    cost = np.asarray(traj.costs, np.float64)[..., 0].mean(0)
    terminal = float(np.asarray(traj.terminal_rewards, np.float64).mean())
    blocks = {k: float(reward[a:b].sum()) for k, (a, b) in BLOCKS.items()}
    blocks["terminal"] = terminal
    return {"blocks": blocks, "reward": reward.round(3).tolist(), "rate": rate.round(3).tolist(),
            "soc": soc.round(3).tolist(), "cycles": cost.round(4).tolist(), "terminal_reward": terminal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--static", default="{}", help="JSON dict of static Config fields")
    parser.add_argument("--grid", default="[{}]", help="JSON list of numeric override dicts")
    parser.add_argument("--base", default="{}", help="JSON dict of numeric overrides shared by the grid")
    parser.add_argument("--seeds", default="tune")
    parser.add_argument("--episodes", type=int, default=20_000)
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--save-states", default="", help="pickle the final train states to this path")
    parser.add_argument("--profile-episodes", type=int, default=0,
                        help="also record per-stage profiles (stage_profile) of every policy and the reference")
    parser.add_argument("--discrete", action="store_true",
                        help="the discrete-action BatteryStorage() instead (use another --out: the reference is cached there)")
    args = parser.parse_args()

    static, base, grid = json.loads(args.static), json.loads(args.base), json.loads(args.grid)
    env = fhc.BatteryStorage(continuous_actions=not args.discrete)
    params = env.default_params
    cfg0 = with_overrides(nn_constrained.Config(eval_every=0, eval_episodes=2, **static), base)
    cfgs = [with_overrides(cfg0, g) for g in grid]
    keys = seed_keys(args.seeds)

    out_path = Path(args.out)
    results = json.loads(out_path.read_text()) if out_path.exists() else {"runs": {}}
    if "reference" not in results:
        ref = judge.reference_optimum(env, params, REF_CACHE_EPISODES)
        results["reference"] = {"reward": ref.reward, "costs": np.asarray(ref.costs).tolist(),
                                "multipliers": np.asarray(ref.multipliers).tolist(), "episodes": REF_CACHE_EPISODES}
    ref_reward = results["reference"]["reward"]
    if args.profile_episodes and "profile" not in results["reference"]:
        results["reference"]["profile"] = stage_profile(env, params, env.reference(params)[0], args.profile_episodes)
    ref_profile = results["reference"].get("profile")

    train = nn_constrained.make_train(env, params, cfg0)
    fn = jax.jit(jax.vmap(jax.vmap(train, in_axes=(0, None)), in_axes=(None, 0)))
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(keys, stack(cfgs)))
    wall = time.perf_counter() - t0
    print(f"[{args.label}] {len(cfgs)} configs x {keys.shape[0]} seeds: {wall:.0f} s (compile included)", flush=True)

    if args.save_states:  # for later diagnosis (host arrays; static fields ride in the pickle)
        import pickle

        Path(args.save_states).write_bytes(pickle.dumps({"grid": grid, "static": static, "base": base,
                                                          "state": jax.device_get(out.state)}))
    rows = []
    for c, g in enumerate(grid):
        states = [jax.tree.map(lambda x, c=c, s=s: x[c, s], out.state) for s in range(keys.shape[0])]
        mc = judge.monte_carlo(env, params, [nn_constrained.policy(st, env, params) for st in states], args.episodes)
        m = out.metrics
        det = None if args.discrete else judge.monte_carlo(env, params, [mean_policy(st, env, params) for st in states],
                                                            args.episodes)  # the Gaussian's mean action
        upper = mc["costs"][:, 0] + mc["cost_half_width"][:, 0]
        seeds = []
        for s in range(keys.shape[0]):
            seeds.append({
                "reward": float(mc["reward"][s]), "reward_half_width": float(mc["reward_half_width"][s]),
                "cost": float(mc["costs"][s, 0]), "cost_upper": float(upper[s]),
                "percent_of_reference": float(100 * mc["reward"][s] / ref_reward),
                "multiplier": float(m.multipliers[c, s, -1, 0]),
                **({} if det is None else {
                    "mean_action_policy": {"reward": float(det["reward"][s]), "cost": float(det["costs"][s, 0]),
                                           "cost_upper": float(det["costs"][s, 0] + det["cost_half_width"][s, 0])},
                    "log_std": [round(float(v), 3) for v in log_stds(states[s], env, params)]}),
                "curve": {"iteration": list(range(99, cfg0.num_iterations, 100)),
                          "batch_reward": [round(float(v), 2) for v in m.reward[c, s, 99::100]],
                          "batch_cost": [round(float(v), 3) for v in m.costs[c, s, 99::100, 0]],
                          "multiplier": [round(float(v), 2) for v in m.multipliers[c, s, 99::100, 0]]},
            })
        if args.profile_episodes:
            for s, st in enumerate(states):
                seeds[s]["profile"] = stage_profile(env, params, nn_constrained.policy(st, env, params), args.profile_episodes)
        feasible = all(r["cost_upper"] <= LIMIT for r in seeds)
        worst = min(r["reward"] for r in seeds)
        row = {"overrides": {**base, **g}, "worst_reward": worst, "worst_percent": 100 * worst / ref_reward,
               "all_feasible": feasible, "seeds": seeds}
        rows.append(row)
        print(f"  {json.dumps({**base, **g})}: worst {worst:.2f} ({100 * worst / ref_reward:.1f}%), "
              f"rewards {[round(r['reward'], 2) for r in seeds]}, cost_upper {[round(r['cost_upper'], 3) for r in seeds]}, "
              f"nu {[round(r['multiplier'], 1) for r in seeds]}, feasible {feasible}" + ("" if det is None else
              f"; mean-action policy: rewards {[round(r['mean_action_policy']['reward'], 2) for r in seeds]}, costs "
              f"{[round(r['mean_action_policy']['cost'], 3) for r in seeds]}"), flush=True)

    results = json.loads(out_path.read_text()) if out_path.exists() else results  # re-read: merge, lose nothing
    results.setdefault("reference", {"reward": ref_reward})
    if args.profile_episodes:
        results["reference"].setdefault("profile", ref_profile)
    results.setdefault("runs", {})[args.label] = {
        "static": static, "seeds": args.seeds, "episodes": args.episodes, "wall_s_compile_included": wall,
        "configs": len(cfgs), "num_seeds": int(keys.shape[0]), "rows": rows,
        "machine": {"cpus": jax.device_count(), "backend": jax.default_backend()},
    }
    write_json_atomic(out_path, results)


if __name__ == "__main__":
    main()
