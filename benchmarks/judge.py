"""Quality runs shared by the learner benchmarks: R seeds trained in one vmapped program, each
final policy judged exactly (``fhc_jax.evaluate``) against the optimum of ``fhc_jax.solve``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import jax
import numpy as np

import fhc_jax as fhc


@dataclass
class Judged:
    """One quality run: ``out`` (the vmapped ``TrainResult``), the optimum ``best``, alpha, wall
    and compile seconds, and one row per seed (exact reward and cost, gap, fraction of the
    optimum, whether cost <= 1.02 alpha)."""

    out: Any
    best: Any
    alpha: float
    wall_s: float
    compile_s: float
    rows: list[dict]

    def summary(self) -> dict:
        """The fields every learner benchmark reports (its own fields go beside them)."""
        ex = self.out.metrics.exact
        return {
            "wall_s_including_compile": self.wall_s,
            "compile_s": self.compile_s,
            "alpha": self.alpha,
            "optimum_reward": self.best.reward,
            "optimum_cost": float(self.best.costs[0]),
            "optimal_multiplier": float(self.best.multipliers[0]),
            "seeds": self.rows,
            "mean_exact_reward": float(np.mean([r["exact_reward"] for r in self.rows])),
            "mean_exact_cost": float(np.mean([r["exact_cost"] for r in self.rows])),
            "cost_ok_seeds": sum(r["cost_ok"] for r in self.rows),
            "min_reward_fraction": min(r["reward_fraction_of_optimum"] for r in self.rows),
            "exact_curve_mean": {
                "iteration": np.asarray(ex.iteration[0]).tolist(),
                "reward": np.asarray(ex.reward.mean(0)).round(3).tolist(),
                "cost": np.asarray(ex.costs[..., 0].mean(0)).round(3).tolist(),
            },
        }


def train_and_judge(env, params, train: Callable, policy_tables: Callable, seeds: int = 5) -> Judged:
    """Train ``seeds`` seeds (keys ``split(key(0), seeds)``) in one ``jax.jit(jax.vmap(train))``
    program (compiled ahead, timed apart) and evaluate each final policy exactly.

    Args:
        train: ``make_train(...)`` of a learner.
        policy_tables: final train states (leading seed axis) -> policy tables (R, H, S, A).
    """
    cmdp = env.to_cmdp(params)
    best = fhc.solve(cmdp)
    keys = jax.random.split(jax.random.key(0), seeds)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
    compile_s = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(keys))
    wall = time.perf_counter() - t0
    evs = jax.vmap(lambda p: fhc.evaluate(cmdp, p))(policy_tables(out.state))
    alpha = float(cmdp.thresholds[0])
    rows = []
    for i in range(seeds):
        r, c = float(evs.reward[i]), float(evs.costs[i, 0])
        rows.append({
            "seed": i,
            "exact_reward": r,
            "exact_cost": c,
            "gap_to_optimum": best.reward - r,
            "reward_fraction_of_optimum": r / best.reward,
            "cost_ok": bool(c <= 1.02 * alpha),
        })
    return Judged(out=out, best=best, alpha=alpha, wall_s=wall, compile_s=compile_s, rows=rows)
