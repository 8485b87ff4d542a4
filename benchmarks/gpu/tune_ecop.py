"""Vmapped tuning sweeps of e-COP and Saute-Lagrangian on the default gridworld, judged exactly.

Each round is (learner module, static fields, list of numeric settings): one compiled program
per round trains every setting x seed (``jax.vmap(train)(keys, stacked_hparams)``); every
final policy is evaluated exactly (``fhc_jax.evaluate``). Tuning seeds are
``fold_in(key(0), i)``, i < seeds (the held-out seeds ``fold_in(key(0), 1000 + i)`` and the
benchmark seeds ``split(key(0), R)`` are never used here). Results: one JSON line per round in
``$OUT/tune_ecop.jsonl`` (settings, per-seed exact reward, cost, multiplier, wall time).

Usage: ``OUT=dir python benchmarks/gpu/tune_ecop.py ROUNDS.py`` where ROUNDS.py defines
``ROUNDS = [(module_name, static_kwargs, [numeric_kwargs, ...], seeds, iterations), ...]``.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import fhc_jax as fhc
from fhc_jax.algos import stack


def run_round(module_name, static, grid, seeds, iterations, env, params, cmdp, best):
    mod = importlib.import_module(f"fhc_jax.algos.{module_name}")
    base = mod.Config(**static, num_iterations=iterations, eval_every=0)
    cfgs = [base.replace(**g) for g in grid]
    c = len(cfgs)
    hp = jax.tree.map(lambda x: jnp.repeat(x, seeds, axis=0), stack(cfgs))
    keys = jnp.stack([jax.random.fold_in(jax.random.key(0), i) for i in range(seeds)] * c)
    t0 = time.perf_counter()
    out = jax.block_until_ready(jax.jit(jax.vmap(mod.make_train(env, params, base)))(keys, hp))
    wall = time.perf_counter() - t0
    tables = mod.policy_table(out.state, env, params)
    ev = jax.vmap(fhc.evaluate, in_axes=(None, 0))(cmdp, tables)
    r = np.asarray(ev.reward).reshape(c, seeds)
    co = np.asarray(ev.costs[:, 0]).reshape(c, seeds)
    nu = np.asarray(out.metrics.multipliers[:, -1, 0]).reshape(c, seeds)
    return {"module": module_name, "static": static, "iterations": iterations, "seeds": seeds, "wall_s": wall,
            "optimum": best, "results": [{"setting": g, "reward": r[i].tolist(), "cost": co[i].tolist(),
                                          "nu": nu[i].tolist()} for i, g in enumerate(grid)]}


def main() -> None:
    rounds = runpy.run_path(sys.argv[1])["ROUNDS"]
    out = os.path.join(os.environ.get("OUT", "."), "tune_ecop.jsonl")
    env = fhc.GridWorld()
    params = env.default_params
    cmdp = env.to_cmdp(params)
    best = float(fhc.solve(cmdp).reward)
    alpha = float(cmdp.thresholds[0])
    print("jax", jax.__version__, jax.devices(), "optimum", best, flush=True)
    for spec in rounds:
        try:
            res = run_round(*spec, env, params, cmdp, best)
        except Exception as err:  # noqa: BLE001 (a failed round must not lose the others)
            print(f"== {spec[0]} {spec[1]}: FAILED {type(err).__name__}: {err}", flush=True)
            continue
        with open(out, "a") as f:
            f.write(json.dumps(res) + "\n")
        ranked = []
        for row in res["results"]:
            cost, rew = np.array(row["cost"]), np.array(row["reward"])
            ok = cost <= 1.02 * alpha + 1e-9
            ranked.append((int(ok.sum()), float(rew.min()), row["setting"], float(cost.max())))
        ranked.sort(key=lambda x: (x[0], x[1]), reverse=True)
        print(f"== {spec[0]} {spec[1]} N={spec[4]}: {res['wall_s']:.1f}s", flush=True)
        for feas, worst, g, cmax in ranked[:6]:
            print(f"   feasible {feas}/{spec[3]} worst {100 * worst / best:.1f}% max cost {cmax:.2f} {g}", flush=True)


if __name__ == "__main__":
    main()
