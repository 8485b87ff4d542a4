"""What the judge returns: :class:`Judgement` (the values of R seeds' final policies, their
feasibility, their gap to the optimum, and the summaries of summary.json) and :class:`Optimum`
(the exact constrained optimum, or a Monte-Carlo reference, as numpy data).

The judging itself (the feasibility rule, exact and Monte-Carlo values, summary fields and
tables) is :mod:`fhc_jax.experiment.judge`; statistics with intervals over the seeds of a
judgement are :mod:`fhc_jax.experiment.statistics`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def relative_excess(costs: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """(c - alpha) / |alpha| elementwise, (..., M); for alpha = 0: 0 if c <= 0, else inf."""
    c = np.asarray(costs, np.float64)
    alpha = np.broadcast_to(np.asarray(thresholds, np.float64), c.shape)
    safe = np.where(alpha != 0, np.abs(alpha), 1.0)
    return np.where(alpha != 0, (c - alpha) / safe, np.where(c <= 0, 0.0, np.inf))


def fraction_of_optimum(reward: Any, optimum: float) -> Any:
    """The fraction of the optimum a policy of expected reward J reaches, 1 - (J* - J) / |J*|
    (one minus the relative gap): J / J* when J* > 0, and 2 - J / J* when J* < 0 (all-negative
    rewards: 1 at the optimum, 0 at twice its loss), increasing in J either way; None when
    J* = 0 (no scale to measure the gap in).

    Args:
        reward: J, a number or an array (R,). optimum: J*.
    """
    if not np.isfinite(optimum) or optimum == 0:
        return None
    return 1.0 - (optimum - np.asarray(reward, np.float64)) / abs(optimum)


@dataclasses.dataclass(frozen=True)
class Optimum:
    """The exact constrained optimum of a CMDP (``fhc_jax.solve``), as numpy data.

    Attributes (H stages, S states, A actions, M constraints):
        reward: J*, float. costs: (M,). multipliers: optimal nu* >= 0, (M,).
        policy: (H, S, A). stage_costs: (M, H+1). stage_rewards: (H+1,). solve_time_s: float.
        For a reference judged by Monte-Carlo (:func:`~fhc_jax.experiment.judge.reference_optimum`) the reward and costs
        are estimates and policy / stage values are None.
    """

    reward: float
    costs: np.ndarray
    multipliers: np.ndarray
    policy: np.ndarray | None
    stage_costs: np.ndarray | None
    stage_rewards: np.ndarray | None
    solve_time_s: float

    def as_dict(self) -> dict[str, Any]:
        """The JSON fields: reward, costs, multipliers, solve_time_s."""
        return {
            "reward": self.reward,
            "costs": self.costs.tolist(),
            "multipliers": self.multipliers.tolist(),
            "solve_time_s": self.solve_time_s,
        }


def stats(x: Any, per_seed: bool = False) -> dict[str, Any]:
    """mean / std (population, over seeds) / min / max of a (R,) array, and with ``per_seed``
    its values."""
    x = np.asarray(x, np.float64)
    out = {"mean": float(np.mean(x)), "std": float(np.std(x)), "min": float(np.min(x)), "max": float(np.max(x))}
    return {**out, "per_seed": x.tolist()} if per_seed else out


@dataclasses.dataclass(frozen=True)
class Judgement:
    """R seeds judged (:func:`fhc_jax.experiment.judge.judge`). Arrays are float64 numpy.

    Attributes:
        reward: exact J per seed, (R,). costs: exact c^(k), (R, M).
        thresholds: alpha, (M,). tolerance: the relative feasibility tolerance.
        limits: :func:`~fhc_jax.experiment.judge.cost_limits`, (M,). feasible: (R,) bool.
        optimum: the :class:`Optimum` or None (infeasible, or not computed).
        multipliers: learned nu per seed, (R, M), or None.
        episodes: None for exact values, else the number of Monte-Carlo episodes per seed.
        reward_half_width, cost_half_width: how far the upper ends of the 95% intervals lie
            above the means, (R,) and (R, M) (the costs' with the rule-of-three term,
            :func:`~fhc_jax.experiment.judge.upper_bound_excess`); None for exact values.
            ``feasible`` uses ``costs + cost_half_width``.
        cost_scale: the task's cost scale C of the feasibility rule, (M,), or None
            (:func:`~fhc_jax.experiment.judge.cost_limits`).
    """

    reward: np.ndarray
    costs: np.ndarray
    thresholds: np.ndarray
    tolerance: float
    limits: np.ndarray
    feasible: np.ndarray
    optimum: Optimum | None
    multipliers: np.ndarray | None
    episodes: int | None = None
    reward_half_width: np.ndarray | None = None
    cost_half_width: np.ndarray | None = None
    cost_scale: np.ndarray | None = None

    @property
    def method(self) -> str:
        """ "exact" or "monte-carlo (N episodes)"."""
        return "exact" if self.episodes is None else f"monte-carlo ({self.episodes} episodes)"

    @property
    def num_seeds(self) -> int:
        return int(self.reward.shape[0])

    @property
    def feasible_seeds(self) -> int:
        return int(np.sum(self.feasible))

    @property
    def gap(self) -> np.ndarray | None:
        """J* - J per seed, (R,), or None without an optimum."""
        return None if self.optimum is None else self.optimum.reward - self.reward

    @property
    def fraction_of_optimum(self) -> np.ndarray | None:
        """The fraction of the optimum per seed, (R,) (:func:`fraction_of_optimum`: J / J* for
        J* > 0, 1 - (J* - J) / |J*| for any J* != 0), or None without a nonzero optimum."""
        if self.optimum is None:
            return None
        return fraction_of_optimum(self.reward, self.optimum.reward)

    def take(self, index: Any) -> Judgement:
        """The judgement of a subset of the seeds (``index`` into the R axis)."""
        pick = lambda x: None if x is None else x[index]
        return dataclasses.replace(
            self,
            reward=self.reward[index],
            costs=self.costs[index],
            feasible=self.feasible[index],
            multipliers=pick(self.multipliers),
            reward_half_width=pick(self.reward_half_width),
            cost_half_width=pick(self.cost_half_width),
        )

    def rank_key(self) -> tuple[int, float]:
        """(feasible seeds, worst seed's reward): larger is better; a non-finite (diverged)
        seed's reward counts as -inf."""
        reward = np.where(np.isfinite(self.reward), self.reward, -np.inf)
        return self.feasible_seeds, float(np.min(reward))

    def rows(self) -> list[dict[str, Any]]:
        """One dict per seed: seed, exact_reward, exact_costs, violation = max(0, c - alpha),
        slack = alpha - c, feasible; with an optimum reward_gap = J* - J, relative_gap =
        (J* - J) / |J*|, fraction_of_optimum = 1 - (J* - J) / |J*| (J / J* for J* > 0; None
        when J* = 0), optimal_multipliers; multipliers (learned)."""
        out = []
        for r in range(self.num_seeds):
            c = self.costs[r]
            row: dict[str, Any] = {
                "seed": r,
                "exact_reward": float(self.reward[r]),
                "exact_costs": c.tolist(),
                "violation": np.maximum(0.0, c - self.thresholds).tolist(),
                "slack": (self.thresholds - c).tolist(),
                "feasible": bool(self.feasible[r]),
            }
            if self.episodes is not None:  # Monte-Carlo: the values are estimates with 95% intervals
                row["judged_by"] = self.method
                hr, hc = float(self.reward_half_width[r]), self.cost_half_width[r]
                row["reward_ci95"] = [row["exact_reward"] - hr, row["exact_reward"] + hr]
                row["costs_ci95"] = np.stack([c - hc, c + hc], -1).tolist()
            if self.optimum is not None:
                j_star = self.optimum.reward
                row["reward_gap"] = j_star - float(self.reward[r])
                row["relative_gap"] = row["reward_gap"] / abs(j_star) if j_star else None
                frac = fraction_of_optimum(float(self.reward[r]), j_star)
                row["fraction_of_optimum"] = None if frac is None else float(frac)
                row["optimal_multipliers"] = self.optimum.multipliers.tolist()
            if self.multipliers is not None:
                row["multipliers"] = self.multipliers[r].tolist()
            out.append(row)
        return out

    def summary(self) -> dict[str, Any]:
        """Over seeds: seeds, feasible_seeds, tolerance, limits; exact_reward and exact_costs
        statistics (mean, std, min, max); worst seed (lowest reward, fraction of the optimum,
        highest cost per constraint, largest relative excess over alpha); relative_gap stats."""
        excess = relative_excess(self.costs, self.thresholds)
        out: dict[str, Any] = {
            "seeds": self.num_seeds,
            "judged_by": self.method,
            "feasible_seeds": self.feasible_seeds,
            "tolerance": self.tolerance,
            "limits": self.limits.tolist(),
            "cost_scale": None if self.cost_scale is None else self.cost_scale.tolist(),
            "exact_reward": stats(self.reward),
            "exact_costs": {k: getattr(np, k)(self.costs, 0).tolist() for k in ("mean", "std", "min", "max")},
            "worst": {
                "reward": float(np.min(self.reward)),
                "costs": np.max(self.costs, 0).tolist(),
                "relative_excess": float(np.max(excess)),
            },
        }
        frac = self.fraction_of_optimum
        if frac is not None:
            out["worst"]["fraction_of_optimum"] = float(np.min(frac))
            out["relative_gap"] = stats(self.gap / abs(self.optimum.reward))
        return out
