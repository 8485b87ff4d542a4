"""Judging learned policies exactly: the optimum, per-seed results, versions and devices."""

from __future__ import annotations

import platform
from typing import Any

import jax
import numpy as np


def versions() -> dict[str, str]:
    """Versions of the software that produced a result."""
    import fhc_jax

    out = {"fhc_jax": fhc_jax.__version__, "jax": jax.__version__, "python": platform.python_version(),
           "numpy": np.__version__}
    try:
        import jaxlib

        out["jaxlib"] = jaxlib.__version__
    except Exception:  # pragma: no cover
        pass
    return out


def device_info() -> dict[str, Any]:
    """The devices a run used."""
    devs = jax.devices()
    return {"platform": devs[0].platform, "kind": devs[0].device_kind, "count": len(devs),
            "process_count": jax.process_count()}


def optimum(cmdp) -> dict[str, Any] | None:
    """The exact constrained optimum (``fhc_jax.solve``) as plain data, None if infeasible.

    Returns: reward (), costs (M,), multipliers (M,), policy (H, S, A), stage_costs (M, H+1),
    stage_rewards (H+1,), solve_time_s.
    """
    import fhc_jax as fhc

    try:
        sol = fhc.solve(cmdp)
    except fhc.InfeasibleConstraintError:
        return None
    ev = sol.evaluation if sol.evaluation is not None else fhc.evaluate(cmdp, sol.policy)
    return {
        "reward": float(sol.reward),
        "costs": np.asarray(sol.costs, np.float64),
        "multipliers": np.asarray(sol.multipliers, np.float64),
        "policy": np.asarray(sol.policy),
        "stage_costs": np.asarray(ev.stage_costs, np.float64),
        "stage_rewards": np.asarray(ev.stage_rewards, np.float64),
        "solve_time_s": float(sol.solve_time),
    }


def evaluate_policies(cmdp, policies: np.ndarray) -> dict[str, np.ndarray]:
    """Exact evaluation of R policy tables (R, H, S, A): reward (R,), costs (R, M),
    stage_costs (R, M, H+1), stage_rewards (R, H+1)."""
    import fhc_jax as fhc

    ev = jax.jit(jax.vmap(lambda p: fhc.evaluate(cmdp, p)))(jax.numpy.asarray(policies))
    return {"reward": np.asarray(ev.reward), "costs": np.asarray(ev.costs),
            "stage_costs": np.asarray(ev.stage_costs), "stage_rewards": np.asarray(ev.stage_rewards)}


def seed_results(reward: np.ndarray, costs: np.ndarray, thresholds: np.ndarray,
                 opt: dict[str, Any] | None, multipliers: np.ndarray | None = None) -> list[dict[str, Any]]:
    """Per-seed judgement of final policies.

    Args:
        reward: exact J per seed, (R,). costs: exact S^(k), (R, M). thresholds: alpha, (M,).
        opt: :func:`optimum` (or None). multipliers: learned nu, (R, M), if the learner has them.
    Returns:
        one dict per seed: exact_reward, exact_costs, violation = max(0, cost - alpha),
        feasible, reward_gap = J* - J and relative_gap = (J* - J) / |J*|, multipliers and
        optimal_multipliers.
    """
    out = []
    for r in range(len(reward)):
        c = np.asarray(costs[r], np.float64)
        row: dict[str, Any] = {
            "seed": r,
            "exact_reward": float(reward[r]),
            "exact_costs": c.tolist(),
            "violation": np.maximum(0.0, c - thresholds).tolist(),
            "feasible": bool(np.all(c <= thresholds + 1e-9)),
        }
        if opt is not None:
            gap = opt["reward"] - float(reward[r])
            row["reward_gap"] = gap
            row["relative_gap"] = gap / abs(opt["reward"]) if opt["reward"] else None
            row["optimal_multipliers"] = opt["multipliers"].tolist()
        if multipliers is not None:
            row["multipliers"] = np.asarray(multipliers[r], np.float64).tolist()
        out.append(row)
    return out


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean / std / min / max over seeds of the exact reward, costs and relative gap."""
    rew = np.array([r["exact_reward"] for r in rows])
    cost = np.array([r["exact_costs"] for r in rows])
    out = {"exact_reward": _stats(rew), "exact_costs": {k: v.tolist() for k, v in _stats_axis(cost).items()},
           "feasible_seeds": int(sum(r["feasible"] for r in rows)), "seeds": len(rows)}
    if rows and rows[0].get("relative_gap") is not None:
        out["relative_gap"] = _stats(np.array([r["relative_gap"] for r in rows]))
    return out


def _stats(x: np.ndarray) -> dict[str, float]:
    return {"mean": float(np.mean(x)), "std": float(np.std(x)), "min": float(np.min(x)), "max": float(np.max(x))}


def _stats_axis(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"mean": np.mean(x, 0), "std": np.std(x, 0), "min": np.min(x, 0), "max": np.max(x, 0)}


def format_table(rows: list[dict[str, Any]], thresholds: np.ndarray, opt: dict[str, Any] | None) -> str:
    """A plain-text table of :func:`seed_results`."""
    lines = [f"{'seed':>4} {'exact reward':>13} {'% of optimum':>13} {'exact cost':>16} {'violation':>10} {'nu':>14}"]
    for r in rows:
        pct = f"{100 * r['exact_reward'] / opt['reward']:.1f}%" if opt and opt["reward"] else "-"
        nu = "/".join(f"{v:.3f}" for v in r.get("multipliers", [])) or "-"
        lines.append(f"{r['seed']:>4} {r['exact_reward']:>13.4f} {pct:>13} "
                     f"{'/'.join(f'{c:.3f}' for c in r['exact_costs']):>16} {max(r['violation']):>10.3f} {nu:>14}")
    if opt is not None:
        lines.append(f"{'opt':>4} {opt['reward']:>13.4f} {'100.0%':>13} "
                     f"{'/'.join(f'{c:.3f}' for c in opt['costs']):>16} {0.0:>10.3f} "
                     f"{'/'.join(f'{v:.3f}' for v in opt['multipliers']):>14}")
    lines.append(f"alpha = {'/'.join(f'{a:g}' for a in thresholds)}")
    return "\n".join(lines)
