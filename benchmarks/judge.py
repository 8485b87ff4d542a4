"""Quality runs shared by the learner benchmarks: R seeds trained in one vmapped program, each
final policy judged by ``fhc_jax.experiment.judge`` (exact evaluation with ``fhc_jax.evaluate``
against the optimum of ``fhc_jax.solve``, feasibility cost <= alpha + 0.02 |alpha|)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from fhc_jax.experiment import judge
from fhc_jax.experiment.judgement import Judgement, Optimum
from fhc_jax.experiment.rundir import machine_info


@dataclass
class Judged:
    """One quality run: ``out`` (the vmapped ``TrainResult``), the optimum ``best``
    (:class:`fhc_jax.experiment.judgement.Optimum`), the :class:`~fhc_jax.experiment.judgement.Judgement`,
    alpha, wall and compile seconds, and one row per seed (exact reward and cost, gap, fraction
    of the optimum, whether the judge finds the seed feasible: ``cost_ok``)."""

    out: Any
    best: Optimum
    judgement: Judgement
    alpha: float
    wall_s: float
    compile_s: float
    rows: list[dict]

    def summary(self) -> dict:
        """The fields every learner benchmark reports (its own fields go beside them)."""
        ex = self.out.metrics.evaluation
        return {
            "wall_s_including_compile": self.wall_s,
            "compile_s": self.compile_s,
            "alpha": self.alpha,
            "feasibility_tolerance": self.judgement.tolerance,
            "optimum_reward": self.best.reward,
            "optimum_cost": float(self.best.costs[0]),
            "optimal_multiplier": float(self.best.multipliers[0]),
            "seeds": self.rows,
            "mean_exact_reward": float(np.mean(self.judgement.reward)),
            "mean_exact_cost": float(np.mean(self.judgement.costs[:, 0])),
            "cost_ok_seeds": self.judgement.feasible_seeds,
            "min_reward_fraction": float(np.min(self.judgement.fraction_of_optimum)),
            "judgement": self.judgement.summary(),
            "exact_curve_mean": {
                "iteration": np.asarray(ex.iteration[0]).tolist(),
                "reward": np.asarray(ex.reward.mean(0)).round(3).tolist(),
                "cost": np.asarray(ex.costs[..., 0].mean(0)).round(3).tolist(),
            },
        }


def train_and_judge(
    env, params, train: Callable, policy_tables: Callable, seeds: int = 5, tolerance: float = judge.DEFAULT_TOLERANCE
) -> Judged:
    """Train ``seeds`` seeds (keys ``split(key(0), seeds)``) in one ``jax.jit(jax.vmap(train))``
    program (compiled ahead, timed apart) and judge each final policy exactly.

    Args:
        train: ``make_train(...)`` of a learner.
        policy_tables: final train states (leading seed axis) -> policy tables (R, H, S, A).
        tolerance: the judge's relative feasibility tolerance.
    """
    cmdp = env.to_cmdp(params)
    best = judge.optimum(cmdp)
    keys = jax.random.split(jax.random.key(0), seeds)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
    compile_s = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(keys))
    wall = time.perf_counter() - t0
    judged, _ = judge.judge_policies(cmdp, policy_tables(out.state), optimum=best, tolerance=tolerance)
    rows = [
        {
            "seed": i,
            "exact_reward": float(judged.reward[i]),
            "exact_cost": float(judged.costs[i, 0]),
            "gap_to_optimum": float(judged.gap[i]),
            "reward_fraction_of_optimum": float(judged.fraction_of_optimum[i]),
            "cost_ok": bool(judged.feasible[i]),
        }
        for i in range(seeds)
    ]
    return Judged(
        out=out,
        best=best,
        judgement=judged,
        alpha=float(cmdp.thresholds[0]),
        wall_s=wall,
        compile_s=compile_s,
        rows=rows,
    )


__all__ = ["Judged", "machine_info", "train_and_judge"]
