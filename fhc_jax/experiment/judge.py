"""The judge: final policies of R seeds against the exact constrained optimum, with ONE
feasibility rule.

**Feasibility.** A policy with exact expected costs c^(k) (``fhc_jax.evaluate``) is feasible
when, for every constraint k,

    c^(k) <= alpha^(k) + tolerance * |alpha^(k)| + 1e-6 * max(|alpha^(k)|, C^(k)),

with ``tolerance`` relative to the threshold (default :data:`DEFAULT_TOLERANCE` = 0.02: cost
<= 1.02 alpha; ``run.feasibility_tolerance`` / ``--set run.feasibility_tolerance=0.0`` changes
it). The relative term uses ``|alpha|`` so a negative threshold is loosened, not tightened, by a
positive tolerance. The last term (:data:`ROUNDING`) is the float32 rounding of the values the
judge receives, relative to the task's **cost scale** C^(k) (:func:`cost_scale`: a bound on
the total cost of an episode, H max|g_h| + max|g_H| on an exact model; H times the typical step
cost otherwise), so the rule means the same in any units: nothing in it is absolute.
**alpha = 0** means "no cost at all": only rounding, 1e-6 C^(k), is admitted beyond 0, whatever
the tolerance; without a cost scale (a caller that knows none) no positive cost is.
Summaries, ``fhc-jax compare``, sweeps, ``fhc-jax eval`` and the benchmarks all use this rule
(:func:`cost_limits`) with the cost scale of their task.

**Exact or Monte-Carlo.** Where the environment has a tabular exact model the values are
exact. Elsewhere (:func:`monte_carlo`) they are means over a stated number of episodes N
(``run.eval_episodes``, default :data:`DEFAULT_EPISODES`) of ``fhc_jax.rollout_returns``, and
a seed meets the constraint when the UPPER end of its cost interval does (the point estimate
is not enough). The upper end is the mean plus

    1.96 sd / sqrt(N)  +  ln(20) max(c_max, u) / N,

the normal 95% half-width and the rule of three the learners use for their own estimates
(:func:`fhc_jax.algos.core.multipliers.upper_bound_excess`, here in float64 and the
environment's units): with no cost event in N episodes an event's probability per episode is
below ln(20) / N at 95%, and an event costs at most the largest episode cost seen, c_max, or one
typical step cost u (:func:`fhc_jax.envs.wrappers.signal_scales`), so a sample that saw no
cost is never taken for a certificate of zero cost. The yardstick is the environment's
reference policy (``env.reference``, e.g. the optimum of a discretized exact model executed in
the environment) judged the same way.

**What is judged.** :func:`judge` takes the exact reward and costs of each seed's final policy
(computed during training, or by :func:`judge_policies` from the (R, H, S, A) policy tables)
and the optimum (:func:`optimum`, ``fhc_jax.solve``), and returns a
:class:`~fhc_jax.experiment.judgement.Judgement`: per seed the exact reward and costs, the
feasibility flag, the slack alpha - c, the gap to the optimum J* - J and the fraction J / J*,
learned vs optimal multipliers (:meth:`~fhc_jax.experiment.judgement.Judgement.rows`); and over
seeds the number of feasible seeds, the worst seed's reward and cost, means
(:meth:`~fhc_jax.experiment.judgement.Judgement.summary`). Configurations are ranked by the
number of feasible seeds, then the worst seed's reward
(:meth:`~fhc_jax.experiment.judgement.Judgement.rank_key`): a default must hold on every seed.

**Summaries.** :func:`judgement_fields` is a judgement as summary.json's fields (per seed, over
seeds, statistics with 95% intervals, the optimum); :func:`format_table` prints it.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from fhc_jax.experiment import statistics
from fhc_jax.experiment.config import DEFAULT_EPISODES, DEFAULT_TOLERANCE  # noqa: F401 (judge.DEFAULT_*)
from fhc_jax.experiment.judgement import Judgement, Optimum

#: the rounding the feasibility rule admits, relative to max(|alpha|, the task's cost scale):
#: float32 values (the in-training evaluations) carry a relative rounding of a few 1e-7
ROUNDING = 1e-6
#: two-sided 95% normal quantile
Z95 = 1.959963984540054
#: ln(20): with no event in N episodes, its probability per episode is below ln(20) / N at 95%
RULE_OF_THREE = float(np.log(20.0))


def cost_limits(thresholds: Any, tolerance: float = DEFAULT_TOLERANCE, cost_scale: Any | None = None) -> np.ndarray:
    """The largest feasible cost per constraint (module docstring), (M,) float64:

        alpha + tolerance |alpha| + ROUNDING max(|alpha|, C),

    with C the task's cost scale (:func:`cost_scale`; None: |alpha| alone, so that alpha = 0
    admits no positive cost).

    Args:
        thresholds: alpha, (M,) (or a scalar).
        tolerance: relative tolerance, a finite number >= 0.
        cost_scale: C, (M,) (or a scalar), finite and >= 0, or None.
    Raises:
        ValueError: a negative or non-finite tolerance, or a negative or non-finite cost scale.
    """
    if (
        not isinstance(tolerance, (int, float, np.integer, np.floating))
        or isinstance(tolerance, bool)
        or not np.isfinite(tolerance)
        or tolerance < 0
    ):
        raise ValueError(f"feasibility tolerance must be a finite number >= 0, found {tolerance!r}")
    alpha = np.asarray(thresholds, np.float64).reshape(-1)
    scale = np.abs(alpha)
    if cost_scale is not None:
        c = np.broadcast_to(np.asarray(cost_scale, np.float64).reshape(-1), alpha.shape)
        if not np.all(np.isfinite(c)) or np.any(c < 0):
            raise ValueError(f"cost_scale must hold finite numbers >= 0, found {c.tolist()}")
        scale = np.maximum(scale, c)
    return alpha + tolerance * np.abs(alpha) + ROUNDING * scale


def cost_scale(cmdp) -> np.ndarray:
    """The cost scale C^(k) of an exact model: H max|g^(k)_h| + max|g^(k)_H|, a bound on the
    total cost of any episode (the units ``fhc_jax.solve`` measures each constraint in),
    (M,) float64 (host-side, one pass over the cost tables)."""
    m, h = cmdp.num_constraints, cmdp.horizon
    if not m:
        return np.zeros(0)
    stage = np.abs(np.asarray(cmdp.expected_costs(), np.float64).reshape(m, -1)).max(axis=1)
    final = np.abs(np.asarray(cmdp.terminal_costs, np.float64).reshape(m, -1)).max(axis=1)
    return h * stage + final


def step_cost_units(env, params) -> np.ndarray:
    """u^(k): the typical magnitude of one step's cost k in ``env`` (the units the learners
    train in, :func:`fhc_jax.envs.wrappers.signal_scales`: episodes of the uniform policy),
    (M,) float64; the cost scale of a Monte-Carlo judgement is H u."""
    from fhc_jax.envs.wrappers import signal_scales

    return np.asarray(signal_scales(env, params)[1], np.float64).reshape(-1)


def upper_bound_excess(episode_costs: np.ndarray, unit: Any, z: float = Z95) -> np.ndarray:
    """How far the upper end of a Monte-Carlo cost interval lies above the mean of N episode
    costs (N, M) (float64 mirror of :func:`fhc_jax.algos.core.multipliers.upper_bound_excess`,
    in the environment's units): z sd / sqrt(N) + ln(20) max(c_max, u) / N, (M,).

    Args:
        episode_costs: (N, M) episode totals (N >= 2).
        unit: u, one typical step cost per constraint, (M,) (or a scalar).
        z: the normal quantile (default two-sided 95%).
    """
    c = np.asarray(episode_costs, np.float64)
    n = c.shape[0]
    largest = np.maximum(np.max(np.abs(c), axis=0), np.asarray(unit, np.float64))
    return z * c.std(0, ddof=1) / np.sqrt(n) + RULE_OF_THREE * largest / n


def optimum(cmdp) -> Optimum | None:
    """The exact constrained optimum of ``cmdp`` (``fhc_jax.solve``), None if infeasible."""
    return solve_optimum(cmdp)[0]


def solve_optimum(cmdp) -> tuple[Optimum | None, Any]:
    """(the :class:`~fhc_jax.experiment.judgement.Optimum`, None), or (None, the
    ``fhc_jax.InfeasibleConstraintError``, whose message lists the minimum achievable cost per
    constraint, as ``fhc-jax solve`` prints it)."""
    import fhc_jax as fhc

    try:
        sol = fhc.solve(cmdp)
    except fhc.InfeasibleConstraintError as err:
        return None, err
    ev = sol.evaluation if sol.evaluation is not None else fhc.evaluate(cmdp, sol.policy)
    return Optimum(
        reward=float(sol.reward),
        costs=np.asarray(sol.costs, np.float64),
        multipliers=np.asarray(sol.multipliers, np.float64),
        policy=np.asarray(sol.policy),
        stage_costs=np.asarray(ev.stage_costs, np.float64),
        stage_rewards=np.asarray(ev.stage_rewards, np.float64),
        solve_time_s=float(sol.solve_time),
    ), None


def evaluate_policies(cmdp, policies: np.ndarray) -> dict[str, np.ndarray]:
    """Exact evaluation of R policy tables (R, H, S, A) in one vmapped program: reward (R,),
    costs (R, M), stage_costs (R, M, H+1), stage_rewards (R, H+1)."""
    import fhc_jax as fhc

    ev = jax.jit(jax.vmap(lambda p: fhc.evaluate(cmdp, p)))(jax.numpy.asarray(policies))
    return {
        "reward": np.asarray(ev.reward),
        "costs": np.asarray(ev.costs),
        "stage_costs": np.asarray(ev.stage_costs),
        "stage_rewards": np.asarray(ev.stage_rewards),
    }


def feasibility(infeasible: Any) -> dict[str, Any]:
    """summary.json's ``feasibility`` record of :func:`solve_optimum`'s error (None: feasible)."""
    if infeasible is None:
        return {"feasible": True}
    return {
        "feasible": False,
        "min_costs": np.asarray(infeasible.min_costs, np.float64).tolist(),
        "message": str(infeasible),
    }


def judge(
    reward: Any,
    costs: Any,
    thresholds: Any,
    *,
    optimum: Optimum | None = None,
    multipliers: Any | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    episodes: int | None = None,
    reward_half_width: Any | None = None,
    cost_half_width: Any | None = None,
    cost_scale: Any | None = None,
) -> Judgement:
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
        cost_half_width: for Monte-Carlo values, how far the upper end of each cost interval
            lies above the mean, (R, M) (:func:`monte_carlo`: with the rule-of-three term).
        cost_scale: the task's cost scale C, (M,) (:func:`cost_scale` of the exact model, or H
            times :func:`step_cost_units`), or None (module docstring: what alpha = 0 means then).
    Raises:
        ValueError: a negative tolerance or cost scale, or inconsistent shapes.
    """
    reward = np.asarray(reward, np.float64).reshape(-1)
    costs = np.asarray(costs, np.float64).reshape(reward.shape[0], -1)
    thresholds = np.asarray(thresholds, np.float64).reshape(-1)
    if thresholds.shape[0] != costs.shape[1]:
        raise ValueError(f"judge: {costs.shape[1]} costs per seed but {thresholds.shape[0]} thresholds")
    limits = cost_limits(thresholds, tolerance, cost_scale)
    nu = None if multipliers is None else np.asarray(multipliers, np.float64).reshape(reward.shape[0], -1)
    hr = np.zeros_like(reward) if reward_half_width is None else np.asarray(reward_half_width, np.float64).reshape(-1)
    hc = (
        np.zeros_like(costs)
        if cost_half_width is None
        else np.asarray(cost_half_width, np.float64).reshape(costs.shape)
    )
    scale = (
        None
        if cost_scale is None
        else np.broadcast_to(np.asarray(cost_scale, np.float64).reshape(-1), thresholds.shape).copy()
    )
    return Judgement(
        reward=reward,
        costs=costs,
        thresholds=thresholds,
        tolerance=float(tolerance),
        limits=limits,
        feasible=np.all(costs + hc <= limits, axis=1),
        optimum=optimum,
        multipliers=nu,
        episodes=None if episodes is None else int(episodes),
        reward_half_width=None if episodes is None else hr,
        cost_half_width=None if episodes is None else hc,
        cost_scale=scale,
    )


def monte_carlo(
    env, params, policies: list[Any], episodes: int = DEFAULT_EPISODES, seed: int = 1, cost_units: Any | None = None
) -> dict[str, np.ndarray]:
    """Monte-Carlo values of R policies ``policy(key, obs, h)`` in ``env``: ``episodes``
    episodes each of ``fhc_jax.rollout_returns`` (key ``seed``: common random numbers across
    the policies), means and how far the upper ends of their 95% intervals lie above them:
    reward (R,), reward_half_width (R,) (1.96 sd / sqrt(N)), costs (R, M), cost_half_width
    (R, M) (:func:`upper_bound_excess`: with the rule-of-three term, module docstring).

    Args:
        cost_units: u, one typical step cost per constraint, (M,) (default
            :func:`step_cost_units` of ``env``).
    Raises:
        ValueError: ``episodes`` < 2.
    """
    import fhc_jax as fhc

    if episodes < 2:
        raise ValueError(f"monte_carlo: episodes must be >= 2, found {episodes}")
    unit = step_cost_units(env, params) if cost_units is None else np.asarray(cost_units, np.float64)
    out: dict[str, list] = {"reward": [], "reward_half_width": [], "costs": [], "cost_half_width": []}
    for policy in policies:
        ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
            jax.random.key(seed), env, params, policy, episodes
        )
        r = np.asarray(ret.rewards, np.float64)
        c = np.asarray(ret.costs, np.float64).reshape(episodes, -1)
        out["reward"].append(r.mean())
        out["reward_half_width"].append(Z95 * r.std(ddof=1) / np.sqrt(episodes))
        out["costs"].append(c.mean(0))
        out["cost_half_width"].append(upper_bound_excess(c, unit))
    return {k: np.asarray(v) for k, v in out.items()}


def judge_monte_carlo(
    env,
    params,
    policies: list[Any],
    episodes: int = DEFAULT_EPISODES,
    *,
    multipliers: Any | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Judgement:
    """:func:`judge` R policies ``policy(key, obs, h)`` by :func:`monte_carlo` in ``env``, against
    its :func:`reference_optimum` (where it has a reference), with the cost scale H u
    (:func:`step_cost_units`)."""
    unit = step_cost_units(env, params)
    mc = monte_carlo(env, params, policies, episodes, cost_units=unit)
    return judge(
        mc["reward"],
        mc["costs"],
        env.thresholds(params),
        optimum=reference_optimum(env, params, episodes),
        multipliers=multipliers,
        tolerance=tolerance,
        episodes=episodes,
        reward_half_width=mc["reward_half_width"],
        cost_half_width=mc["cost_half_width"],
        cost_scale=env.horizon * unit,
    )


def reference_optimum(env, params, episodes: int = DEFAULT_EPISODES) -> Optimum | None:
    """The yardstick of a Monte-Carlo judgement: the environment's reference policy
    (``env.reference``, where ``env.has_reference``) judged by :func:`monte_carlo`, as an
    :class:`~fhc_jax.experiment.judgement.Optimum` (no policy table or stage values); None
    without a reference."""
    if not env.has_reference:
        return None
    import time

    t0 = time.perf_counter()
    policy, nu = env.reference(params)
    mc = monte_carlo(env, params, [policy], episodes)
    return Optimum(
        reward=float(mc["reward"][0]),
        costs=mc["costs"][0],
        multipliers=np.asarray(nu, np.float64),
        policy=None,
        stage_costs=None,
        stage_rewards=None,
        solve_time_s=time.perf_counter() - t0,
    )


def judge_policies(
    cmdp,
    policies: Any,
    *,
    optimum: Optimum | None = None,
    multipliers: Any | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> tuple[Judgement, dict[str, np.ndarray]]:
    """Evaluate R policy tables (R, H, S, A) exactly on ``cmdp`` and :func:`judge` them.

    Returns:
        (the :class:`~fhc_jax.experiment.judgement.Judgement`, :func:`evaluate_policies`' arrays
        incl. stage costs).
    """
    ev = evaluate_policies(cmdp, policies)
    return judge(
        ev["reward"],
        ev["costs"],
        np.asarray(cmdp.thresholds),
        optimum=optimum,
        multipliers=multipliers,
        tolerance=tolerance,
        cost_scale=cost_scale(cmdp),
    ), ev


# ----------------------------------------------------------------------------- summaries


def judgement_fields(judged: Judgement) -> dict[str, Any]:
    """summary.json's judgement: ``seeds`` (:meth:`~fhc_jax.experiment.judgement.Judgement.rows`),
    ``aggregate`` (:meth:`~fhc_jax.experiment.judgement.Judgement.summary`), ``statistics`` (over
    seeds, with 95% intervals: :func:`fhc_jax.experiment.statistics.seed_statistics`), ``thresholds``,
    ``feasibility_tolerance``, ``cost_scale`` (the task's C of the feasibility rule, or None),
    ``cost_limits`` (the largest feasible cost per constraint) and ``optimum`` (reward, costs,
    multipliers, solve time; None when infeasible)."""
    return {
        "seeds": judged.rows(),
        "aggregate": judged.summary(),
        "statistics": statistics.seed_statistics(judged),
        "thresholds": judged.thresholds.tolist(),
        "feasibility_tolerance": judged.tolerance,
        "cost_scale": None if judged.cost_scale is None else judged.cost_scale.tolist(),
        "cost_limits": judged.limits.tolist(),
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
    lines = [
        f"{'seed':>4} {kind + ' reward':>18} {'gap to ' + name:>11} {'% of ' + name:>18} {kind + ' cost':>22} "
        f"{'feasible':>9} {'nu':>14}"
    ]
    for r in range(judged.num_seeds):
        reward = f"{judged.reward[r]:.4f}" + (f" ± {judged.reward_half_width[r]:.4f}" if mc else "")
        costs = _joined(judged.costs[r]) + (" ± " + _joined(judged.cost_half_width[r]) if mc else "")
        g = "-" if gap is None else f"{gap[r]:.4f}"
        # an infeasible seed's share of the constrained optimum is no achievement: marked as such
        pct = "-" if frac is None else f"{100 * frac[r]:.1f}%" + ("" if judged.feasible[r] else " (infeasible)")
        nu = "-" if judged.multipliers is None else _joined(judged.multipliers[r], ".3f")
        lines.append(
            f"{r:>4} {reward:>18} {g:>11} {pct:>18} {costs:>22} {'yes' if judged.feasible[r] else 'NO':>9} {nu:>14}"
        )
    if opt is not None:
        lines.append(
            f"{name:>4} {opt.reward:>18.4f} {'':>11} {'-' if frac is None else '100.0%':>18} "
            f"{_joined(opt.costs):>22} {'':>9} {_joined(opt.multipliers, '.3f'):>14}"
        )
    rule = "upper end of the 95% interval of the cost" if mc else "cost"
    lines.append(
        ("" if where is None else f"{where}; ") + f"alpha = {_joined(judged.thresholds, 'g')}; feasible: "
        f"{rule} <= alpha + {judged.tolerance:g} |alpha| (= {_joined(judged.limits, '.6g')}) "
        f"({judged.feasible_seeds}/{judged.num_seeds} seeds; {judged.method})"
    )
    if stats is not None:
        lines.append("over seeds: " + statistics.format_line(stats, digits=3))
    return "\n".join(lines)
