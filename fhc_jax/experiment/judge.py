"""The judge: final policies of R seeds against the exact constrained optimum, with ONE
feasibility rule.

**Feasibility.** A policy with exact expected costs c^(k) (``fhc_jax.evaluate``) is feasible
when, for every constraint k,

    c^(k) <= alpha^(k) + tolerance * |alpha^(k)| + 1e-9,

with ``tolerance`` relative to the threshold (default :data:`DEFAULT_TOLERANCE` = 0.02: cost
<= 1.02 alpha; ``run.feasibility_tolerance`` / ``--set run.feasibility_tolerance=0.0`` changes
it). The relative term uses ``|alpha|`` so a negative threshold is loosened, not tightened, by a
positive tolerance; a zero threshold admits no cost beyond the absolute 1e-9 (floating-point
rounding of an exactly zero cost), whatever the tolerance. Summaries, ``fhc-jax compare``,
sweeps and the benchmarks all use this rule (:func:`cost_limits`).

**Exact or Monte-Carlo.** Where the environment has a tabular exact model the values are
exact. Elsewhere (:func:`monte_carlo`) they are means over a stated number of episodes
(``run.eval_episodes``, default :data:`DEFAULT_EPISODES`) of ``fhc_jax.rollout_returns``, with
95% confidence half-widths 1.96 sd / sqrt(N); a seed then meets the constraint when the
UPPER end of its cost interval satisfies the rule above (the point estimate is not enough),
and the yardstick is the environment's reference policy (``env.reference``, e.g. the optimum
of a discretized exact model executed in the environment) judged the same way.

**What is judged.** :func:`judge` takes the exact reward and costs of each seed's final policy
(computed during training, or by :func:`judge_policies` from the (R, H, S, A) policy tables)
and the optimum (:func:`optimum`, ``fhc_jax.solve``), and returns a :class:`Judgement`: per
seed the exact reward and costs, the feasibility flag, the slack alpha - c, the gap to the
optimum J* - J and the fraction J / J*, learned vs optimal multipliers (:meth:`Judgement.rows`);
and over seeds the number of feasible seeds, the worst seed's reward and cost, means
(:meth:`Judgement.summary`). Configurations are ranked by the number of feasible seeds, then
the worst seed's reward (:meth:`Judgement.rank_key`): a default must hold on every seed.

**Summaries.** :func:`judgement_fields` is a judgement as summary.json's fields (per seed, over
seeds, statistics with 95% intervals, the optimum); :func:`format_table` prints it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from fhc_jax.experiment import statistics
from fhc_jax.experiment.config import DEFAULT_EPISODES, DEFAULT_TOLERANCE  # noqa: F401 (judge.DEFAULT_*)

#: absolute slack of the feasibility rule (rounding of an exact zero)
ABSOLUTE_SLACK = 1e-9
#: two-sided 95% normal quantile
Z95 = 1.959963984540054


def cost_limits(thresholds: Any, tolerance: float = DEFAULT_TOLERANCE) -> np.ndarray:
    """The largest feasible cost per constraint, alpha + tolerance |alpha| + 1e-9, (M,) float64.

    Raises:
        ValueError: a negative or non-finite tolerance.
    """
    if not np.isfinite(tolerance) or tolerance < 0:
        raise ValueError(f"feasibility tolerance must be a number >= 0, found {tolerance!r}")
    alpha = np.asarray(thresholds, np.float64).reshape(-1)
    return alpha + tolerance * np.abs(alpha) + ABSOLUTE_SLACK


def relative_excess(costs: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """(c - alpha) / |alpha| elementwise, (..., M); for alpha = 0: 0 if c <= 0, else inf."""
    c = np.asarray(costs, np.float64)
    alpha = np.broadcast_to(np.asarray(thresholds, np.float64), c.shape)
    safe = np.where(alpha != 0, np.abs(alpha), 1.0)
    return np.where(alpha != 0, (c - alpha) / safe, np.where(c <= 0, 0.0, np.inf))


@dataclasses.dataclass(frozen=True)
class Optimum:
    """The exact constrained optimum of a CMDP (``fhc_jax.solve``), as numpy data.

    Attributes (H stages, S states, A actions, M constraints):
        reward: J*, float. costs: (M,). multipliers: optimal nu* >= 0, (M,).
        policy: (H, S, A). stage_costs: (M, H+1). stage_rewards: (H+1,). solve_time_s: float.
        For a reference judged by Monte-Carlo (:func:`reference_optimum`) the reward and costs
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
        return {"reward": self.reward, "costs": self.costs.tolist(), "multipliers": self.multipliers.tolist(),
                "solve_time_s": self.solve_time_s}


def optimum(cmdp) -> Optimum | None:
    """The exact constrained optimum of ``cmdp`` (``fhc_jax.solve``), None if infeasible."""
    return solve_optimum(cmdp)[0]


def solve_optimum(cmdp) -> tuple[Optimum | None, Any]:
    """(the :class:`Optimum`, None), or (None, the ``fhc_jax.InfeasibleConstraintError``, whose
    message lists the minimum achievable cost per constraint, as ``fhc-jax solve`` prints it)."""
    import fhc_jax as fhc

    try:
        sol = fhc.solve(cmdp)
    except fhc.InfeasibleConstraintError as err:
        return None, err
    ev = sol.evaluation if sol.evaluation is not None else fhc.evaluate(cmdp, sol.policy)
    return Optimum(reward=float(sol.reward), costs=np.asarray(sol.costs, np.float64),
                   multipliers=np.asarray(sol.multipliers, np.float64), policy=np.asarray(sol.policy),
                   stage_costs=np.asarray(ev.stage_costs, np.float64),
                   stage_rewards=np.asarray(ev.stage_rewards, np.float64),
                   solve_time_s=float(sol.solve_time)), None


def evaluate_policies(cmdp, policies: np.ndarray) -> dict[str, np.ndarray]:
    """Exact evaluation of R policy tables (R, H, S, A) in one vmapped program: reward (R,),
    costs (R, M), stage_costs (R, M, H+1), stage_rewards (R, H+1)."""
    import fhc_jax as fhc

    ev = jax.jit(jax.vmap(lambda p: fhc.evaluate(cmdp, p)))(jax.numpy.asarray(policies))
    return {"reward": np.asarray(ev.reward), "costs": np.asarray(ev.costs),
            "stage_costs": np.asarray(ev.stage_costs), "stage_rewards": np.asarray(ev.stage_rewards)}


def stats(x: Any, per_seed: bool = False) -> dict[str, Any]:
    """mean / std (population, over seeds) / min / max of a (R,) array, and with ``per_seed``
    its values."""
    x = np.asarray(x, np.float64)
    out = {"mean": float(np.mean(x)), "std": float(np.std(x)), "min": float(np.min(x)), "max": float(np.max(x))}
    return {**out, "per_seed": x.tolist()} if per_seed else out


def feasibility(infeasible: Any) -> dict[str, Any]:
    """summary.json's ``feasibility`` record of :func:`solve_optimum`'s error (None: feasible)."""
    if infeasible is None:
        return {"feasible": True}
    return {"feasible": False, "min_costs": np.asarray(infeasible.min_costs, np.float64).tolist(),
            "message": str(infeasible)}


@dataclasses.dataclass(frozen=True)
class Judgement:
    """R seeds judged (:func:`judge`). Arrays are float64 numpy.

    Attributes:
        reward: exact J per seed, (R,). costs: exact c^(k), (R, M).
        thresholds: alpha, (M,). tolerance: the relative feasibility tolerance.
        limits: :func:`cost_limits`, (M,). feasible: (R,) bool.
        optimum: the :class:`Optimum` or None (infeasible, or not computed).
        multipliers: learned nu per seed, (R, M), or None.
        episodes: None for exact values, else the number of Monte-Carlo episodes per seed.
        reward_half_width, cost_half_width: 95% confidence half-widths, (R,) and (R, M)
            (zeros for exact values). ``feasible`` uses ``costs + cost_half_width``.
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

    @property
    def method(self) -> str:
        """"exact" or "monte-carlo (N episodes)"."""
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
        """J / J* per seed, (R,), or None without a positive optimum (with J* <= 0 the ratio
        grows as J gets worse: a pendulum's returns are negative; read the gap instead)."""
        if self.optimum is None or not self.optimum.reward > 0:
            return None
        return self.reward / self.optimum.reward

    def take(self, index: Any) -> "Judgement":
        """The judgement of a subset of the seeds (``index`` into the R axis)."""
        pick = lambda x: None if x is None else x[index]
        return dataclasses.replace(self, reward=self.reward[index], costs=self.costs[index],
                                   feasible=self.feasible[index], multipliers=pick(self.multipliers),
                                   reward_half_width=pick(self.reward_half_width),
                                   cost_half_width=pick(self.cost_half_width))

    def rank_key(self) -> tuple[int, float]:
        """(feasible seeds, worst seed's reward): larger is better; a non-finite (diverged)
        seed's reward counts as -inf."""
        reward = np.where(np.isfinite(self.reward), self.reward, -np.inf)
        return self.feasible_seeds, float(np.min(reward))

    def rows(self) -> list[dict[str, Any]]:
        """One dict per seed: seed, exact_reward, exact_costs, violation = max(0, c - alpha),
        slack = alpha - c, feasible; with an optimum reward_gap = J* - J, relative_gap =
        (J* - J) / |J*|, fraction_of_optimum = J / J* (None unless J* > 0), optimal_multipliers;
        multipliers (learned)."""
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
                row["fraction_of_optimum"] = float(self.reward[r]) / j_star if j_star > 0 else None
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
            "exact_reward": stats(self.reward),
            "exact_costs": {k: getattr(np, k)(self.costs, 0).tolist() for k in ("mean", "std", "min", "max")},
            "worst": {"reward": float(np.min(self.reward)), "costs": np.max(self.costs, 0).tolist(),
                      "relative_excess": float(np.max(excess))},
        }
        frac = self.fraction_of_optimum
        if frac is not None:
            out["worst"]["fraction_of_optimum"] = float(np.min(frac))
            out["relative_gap"] = stats(self.gap / abs(self.optimum.reward))
        return out


def judge(reward: Any, costs: Any, thresholds: Any, *, optimum: Optimum | None = None,
          multipliers: Any | None = None, tolerance: float = DEFAULT_TOLERANCE, episodes: int | None = None,
          reward_half_width: Any | None = None, cost_half_width: Any | None = None) -> Judgement:
    """Judge R seeds' final policies from their values (module docstring).

    Args:
        reward: J of each seed's final policy (exact, or a Monte-Carlo mean), (R,).
        costs: c^(k), (R, M) (or (R,) for M = 1).
        thresholds: alpha, (M,) (or a scalar).
        optimum: :func:`optimum` of the same CMDP (or the reference's estimate), or None.
        multipliers: learned nu per seed, (R, M), or None (learners without multipliers).
        tolerance: relative feasibility tolerance >= 0.
        episodes: for Monte-Carlo values (:func:`monte_carlo`), the number of episodes;
            feasibility is then judged on the upper end of each cost interval.
        reward_half_width: for Monte-Carlo values, the 95% half-widths of the rewards, (R,).
        cost_half_width: for Monte-Carlo values, the 95% half-widths of the costs, (R, M).
    Raises:
        ValueError: a negative tolerance or inconsistent shapes.
    """
    reward = np.asarray(reward, np.float64).reshape(-1)
    costs = np.asarray(costs, np.float64).reshape(reward.shape[0], -1)
    thresholds = np.asarray(thresholds, np.float64).reshape(-1)
    if thresholds.shape[0] != costs.shape[1]:
        raise ValueError(f"judge: {costs.shape[1]} costs per seed but {thresholds.shape[0]} thresholds")
    limits = cost_limits(thresholds, tolerance)
    nu = None if multipliers is None else np.asarray(multipliers, np.float64).reshape(reward.shape[0], -1)
    hr = np.zeros_like(reward) if reward_half_width is None else np.asarray(reward_half_width, np.float64).reshape(-1)
    hc = np.zeros_like(costs) if cost_half_width is None else np.asarray(cost_half_width, np.float64).reshape(costs.shape)
    return Judgement(reward=reward, costs=costs, thresholds=thresholds, tolerance=float(tolerance), limits=limits,
                     feasible=np.all(costs + hc <= limits, axis=1), optimum=optimum, multipliers=nu,
                     episodes=None if episodes is None else int(episodes),
                     reward_half_width=None if episodes is None else hr, cost_half_width=None if episodes is None else hc)


def monte_carlo(env, params, policies: list[Any], episodes: int = DEFAULT_EPISODES, seed: int = 1) -> dict[str, np.ndarray]:
    """Monte-Carlo values of R policies ``policy(key, obs, h)`` in ``env``: ``episodes``
    episodes each of ``fhc_jax.rollout_returns`` (key ``seed``: common random numbers across
    the policies), means and 95% half-widths: reward (R,), reward_half_width (R,),
    costs (R, M), cost_half_width (R, M).

    Raises:
        ValueError: ``episodes`` < 2.
    """
    import fhc_jax as fhc

    if episodes < 2:
        raise ValueError(f"monte_carlo: episodes must be >= 2, found {episodes}")
    out: dict[str, list] = {"reward": [], "reward_half_width": [], "costs": [], "cost_half_width": []}
    for policy in policies:
        ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(jax.random.key(seed), env, params, policy, episodes)
        r, c = np.asarray(ret.rewards, np.float64), np.asarray(ret.costs, np.float64)
        out["reward"].append(r.mean())
        out["reward_half_width"].append(Z95 * r.std(ddof=1) / np.sqrt(episodes))
        out["costs"].append(c.mean(0))
        out["cost_half_width"].append(Z95 * c.std(0, ddof=1) / np.sqrt(episodes))
    return {k: np.asarray(v) for k, v in out.items()}


def judge_monte_carlo(env, params, policies: list[Any], episodes: int = DEFAULT_EPISODES, *,
                      multipliers: Any | None = None, tolerance: float = DEFAULT_TOLERANCE) -> Judgement:
    """:func:`judge` R policies ``policy(key, obs, h)`` by :func:`monte_carlo` in ``env``, against
    its :func:`reference_optimum` (where it has a reference)."""
    mc = monte_carlo(env, params, policies, episodes)
    return judge(mc["reward"], mc["costs"], env.thresholds(params), optimum=reference_optimum(env, params, episodes),
                 multipliers=multipliers, tolerance=tolerance, episodes=episodes,
                 reward_half_width=mc["reward_half_width"], cost_half_width=mc["cost_half_width"])


def reference_optimum(env, params, episodes: int = DEFAULT_EPISODES) -> Optimum | None:
    """The yardstick of a Monte-Carlo judgement: the environment's reference policy
    (``env.reference``, where ``env.has_reference``) judged by :func:`monte_carlo`, as an
    :class:`Optimum` (no policy table or stage values); None without a reference."""
    if not env.has_reference:
        return None
    import time

    t0 = time.perf_counter()
    policy, nu = env.reference(params)
    mc = monte_carlo(env, params, [policy], episodes)
    return Optimum(reward=float(mc["reward"][0]), costs=mc["costs"][0], multipliers=np.asarray(nu, np.float64),
                   policy=None, stage_costs=None, stage_rewards=None, solve_time_s=time.perf_counter() - t0)


def judge_policies(cmdp, policies: Any, *, optimum: Optimum | None = None, multipliers: Any | None = None,
                   tolerance: float = DEFAULT_TOLERANCE) -> tuple[Judgement, dict[str, np.ndarray]]:
    """Evaluate R policy tables (R, H, S, A) exactly on ``cmdp`` and :func:`judge` them.

    Returns:
        (the :class:`Judgement`, :func:`evaluate_policies`' arrays incl. stage costs).
    """
    ev = evaluate_policies(cmdp, policies)
    return judge(ev["reward"], ev["costs"], np.asarray(cmdp.thresholds), optimum=optimum, multipliers=multipliers,
                 tolerance=tolerance), ev


# ----------------------------------------------------------------------------- summaries


def judgement_fields(judged: Judgement) -> dict[str, Any]:
    """summary.json's judgement: ``seeds`` (:meth:`Judgement.rows`), ``aggregate``
    (:meth:`Judgement.summary`), ``statistics`` (over seeds, with 95% intervals:
    :func:`fhc_jax.experiment.statistics.seed_statistics`), ``thresholds``,
    ``feasibility_tolerance`` and ``optimum`` (reward, costs, multipliers, solve time; None when
    infeasible)."""
    return {
        "seeds": judged.rows(),
        "aggregate": judged.summary(),
        "statistics": statistics.seed_statistics(judged),
        "thresholds": judged.thresholds.tolist(),
        "feasibility_tolerance": judged.tolerance,
        "optimum": None if judged.optimum is None else judged.optimum.as_dict(),
    }


def _joined(values, fmt: str = ".4f") -> str:
    return "/".join(f"{v:{fmt}}" for v in values)


def format_table(judged: Judgement, stats: dict[str, Any] | None = None, where: str | None = None) -> str:
    """One line per seed (reward, gap to the optimum and % of it, costs, feasibility, learned
    multipliers), the optimum's (or Monte-Carlo reference's) line, the feasibility rule (after
    ``where``, e.g. the environment judged on) and, with ``stats`` (:func:`judgement_fields`'
    ``statistics``), a line of statistics over seeds with their 95% intervals."""
    opt, gap, frac = judged.optimum, judged.gap, judged.fraction_of_optimum
    mc = judged.episodes is not None
    kind, name = ("mean", "ref") if mc else ("exact", "opt")
    lines = [f"{'seed':>4} {kind + ' reward':>18} {'gap to ' + name:>11} {'% of ' + name:>18} {kind + ' cost':>22} "
             f"{'feasible':>9} {'nu':>14}"]
    for r in range(judged.num_seeds):
        reward = f"{judged.reward[r]:.4f}" + (f" ± {judged.reward_half_width[r]:.4f}" if mc else "")
        costs = _joined(judged.costs[r]) + (" ± " + _joined(judged.cost_half_width[r]) if mc else "")
        g = "-" if gap is None else f"{gap[r]:.4f}"
        # an infeasible seed's share of the constrained optimum is no achievement: marked as such
        pct = "-" if frac is None else f"{100 * frac[r]:.1f}%" + ("" if judged.feasible[r] else " (infeasible)")
        nu = "-" if judged.multipliers is None else _joined(judged.multipliers[r], ".3f")
        lines.append(f"{r:>4} {reward:>18} {g:>11} {pct:>18} {costs:>22} {'yes' if judged.feasible[r] else 'NO':>9} "
                     f"{nu:>14}")
    if opt is not None:
        lines.append(f"{name:>4} {opt.reward:>18.4f} {'':>11} {'-' if frac is None else '100.0%':>18} "
                     f"{_joined(opt.costs):>22} {'':>9} {_joined(opt.multipliers, '.3f'):>14}")
    rule = "upper end of the 95% interval of the cost" if mc else "cost"
    lines.append(("" if where is None else f"{where}; ") + f"alpha = {_joined(judged.thresholds, 'g')}; feasible: "
                 f"{rule} <= alpha + {judged.tolerance:g} |alpha| ({judged.feasible_seeds}/{judged.num_seeds} seeds; "
                 f"{judged.method})")
    if stats is not None:
        lines.append("over seeds: " + statistics.format_line(stats, digits=3))
    return "\n".join(lines)
