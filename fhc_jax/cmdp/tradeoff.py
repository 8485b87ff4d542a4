"""The exact trade-off curve: the constrained optimum's reward as a function of the threshold.

For one constraint k (the others, if any, held at their thresholds) the curve

    V(alpha) = max_pi J(pi)  s.t.  S^(k)(pi) <= alpha  (and S^(j)(pi) <= alpha^(j), j != k)

is the value of a parametric linear program over occupancy measures: non-decreasing and concave
in alpha, finite from the cheapest achievable cost C_min (below it no policy meets alpha) and
constant from the unconstrained optimum's cost C_free on (above it the constraint does not
bind). Its slope at alpha is the optimal multiplier nu*(alpha): the reward one more unit of
budget buys.

For M = 1 the curve is piecewise linear and its breakpoints are the (cost, reward) points of the
deterministic Lagrangian-optimal policies (maximisers of J - nu S for some nu >= 0): V is their
upper concave envelope. :func:`tradeoff` searches that envelope exactly, but only where the
requested alphas fall (the default gridworld has about 6,600 breakpoints): every alpha starts
with the bracket [C_min, C_free]; the backward induction at the slope of a bracket either
certifies it as an edge of the envelope (no policy lies above it) or returns a new breakpoint
above it, which splits it. All alphas share one set of breakpoints, so each oracle call serves
every alpha whose bracket it refines. On an edge, V is the linear interpolation of its two ends
and nu* its slope; these are the numbers :func:`~fhc_jax.cmdp.solve.solve` finds at that alpha
(the same search, one alpha at a time). For M > 1 each point is a separate ``solve``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.cmdp.evaluate import _evaluate, require_cmdp
from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.cmdp.solve import (
    InfeasibleConstraintError,
    _cost_tolerance,
    _dual_tolerance,
    _Oracle,
    _units,
    solve,
)


@dataclass(frozen=True)
class TradeOff:
    """The exact trade-off curve of one constraint (:func:`tradeoff`).

    Attributes (N points, M constraints):
        alphas: the thresholds alpha of constraint ``constraint``, evenly spaced from
            ``cheapest_cost`` to ``unconstrained_cost``, (N,).
        rewards: the constrained optimum's reward V(alpha) at each, (N,).
        multipliers: its optimal multipliers nu* (all M constraints; that of ``constraint`` is
            the slope of the curve, reward per unit of budget), (N, M). At a breakpoint of the
            curve every value between its left and right slopes is optimal; the right slope is
            given (what the next unit of budget buys).
        costs: the expected costs of the constrained optimum's policy, as
            :func:`~fhc_jax.cmdp.solve.solve` returns it at each alpha, (N, M).
        constraint: k, the constraint swept.
        threshold: the model's own alpha^(k).
        cheapest_cost: C_min, the least expected total cost k achievable (M > 1: subject to the
            other constraints at their thresholds); below it no policy meets alpha.
        unconstrained_cost: C_free, the expected total cost k of the unconstrained optimum
            (:func:`~fhc_jax.cmdp.solve.solve_unconstrained`; M > 1: of the optimum with
            constraint k removed, the others kept); from it on the constraint does not bind.
        unconstrained_reward: that optimum's reward, the curve's value from C_free on.
        oracle_calls: backward inductions (M = 1) or solves (M > 1) used.
        solve_time: wall time in seconds (compilation included on the first call).
    """

    alphas: np.ndarray
    rewards: np.ndarray
    multipliers: np.ndarray
    costs: np.ndarray
    constraint: int
    threshold: float
    cheapest_cost: float
    unconstrained_cost: float
    unconstrained_reward: float
    oracle_calls: int = 0
    solve_time: float = 0.0

    @property
    def reward_lost(self) -> np.ndarray:
        """J_free - V(alpha): the reward the constraint costs at each alpha (>= 0), (N,)."""
        return self.unconstrained_reward - self.rewards

    def _tolerance(self) -> float:
        scale = max(abs(self.cheapest_cost), abs(self.unconstrained_cost), abs(self.threshold))
        return 1e-9 * scale if scale > 0 else 1e-300

    def position(self, alpha: float) -> str:
        """Where ``alpha`` lies: ``"infeasible"`` (below ``cheapest_cost``: no policy meets it),
        ``"binding"`` (in [``cheapest_cost``, ``unconstrained_cost``): the optimum spends the
        budget, cost = alpha) or ``"not binding"`` (at or above ``unconstrained_cost``: the
        unconstrained optimum meets it)."""
        alpha = float(alpha)
        if alpha < self.cheapest_cost - self._tolerance():
            return "infeasible"
        if alpha < self.unconstrained_cost - self._tolerance():
            return "binding"
        return "not binding"

    def describe(self, alpha: float) -> str:
        """One sentence on ``alpha`` against the curve's range (:meth:`position`), in words."""
        alpha = float(alpha)
        where = self.position(alpha)
        single = self.multipliers.shape[1] == 1
        cost = "expected total cost" if single else f"expected total cost of constraint {self.constraint}"
        others = "" if single else " (the other constraints at their thresholds)"
        if where == "infeasible":
            return (
                f"alpha = {alpha:.6g} is infeasible: it is below {self.cheapest_cost:.6g}, the least {cost} any "
                f"policy achieves{others}, so no policy meets it"
            )
        if where == "not binding":
            return (
                f"alpha = {alpha:.6g} does not bind: it is at or above {self.unconstrained_cost:.6g}, the {cost} "
                f"of the optimum without this constraint{others}, which meets it (multiplier 0, reward "
                f"{self.unconstrained_reward:.6g})"
            )
        return (
            f"alpha = {alpha:.6g} binds: it lies between {self.cheapest_cost:.6g}, the cheapest policy's {cost}, "
            f"and {self.unconstrained_cost:.6g}, the unconstrained optimum's{others}: the optimum spends the "
            f"whole budget (its {cost} equals alpha)"
        )

    def table(self) -> str:
        """The curve as a text table: alpha, reward, multiplier of the swept constraint and
        the reward lost against the unconstrained optimum, one row per point."""
        k = self.constraint
        lines = [f"{'alpha':>14}{'reward':>14}{f'multiplier {k}':>16}{'reward lost':>14}"]
        for a, r, nu, lost in zip(self.alphas, self.rewards, self.multipliers[:, k], self.reward_lost):
            lines.append(f"{a:>14.6g}{r:>14.6g}{nu:>16.6g}{lost:>14.6g}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """JSON-ready: every field as lists and floats."""
        return {
            "constraint": self.constraint,
            "threshold": self.threshold,
            "cheapest_cost": self.cheapest_cost,
            "unconstrained_cost": self.unconstrained_cost,
            "unconstrained_reward": self.unconstrained_reward,
            "alphas": self.alphas.tolist(),
            "rewards": self.rewards.tolist(),
            "multipliers": self.multipliers.tolist(),
            "costs": self.costs.tolist(),
            "reward_lost": self.reward_lost.tolist(),
            "position_of_threshold": self.position(self.threshold),
            "oracle_calls": self.oracle_calls,
            "solve_time_s": self.solve_time,
        }


def tradeoff(cmdp: TabularCMDP, num: int = 21, *, constraint: int = 0, max_iterations: int = 1000) -> TradeOff:
    """The exact trade-off curve of constraint ``constraint``: the constrained optimum's reward
    and multipliers at ``num`` thresholds evenly spaced from the cheapest policy's cost to the
    unconstrained optimum's (module docstring).

    V(alpha) = max_pi J(pi) s.t. S^(k)(pi) <= alpha (the other constraints, if any, at their
    thresholds): non-decreasing and concave; its slope is nu*^(k)(alpha). For M = 1 one search
    of the Lagrangian breakpoints serves every alpha (each point equals ``solve`` at that
    alpha); for M > 1 each point is a ``solve``. Scale-free like ``solve`` (float64, rewards
    and costs each in their own units).

    Args:
        cmdp: the model (M >= 1; its threshold of ``constraint`` is ignored except to report it).
        num: N >= 2 points.
        constraint: k in [0, M).
        max_iterations: cap on the rounds of the breakpoint search (M = 1), or on each
            ``solve``'s iterations (M > 1).
    Returns:
        :class:`TradeOff` with alphas and rewards (N,), multipliers and costs (N, M).
    Raises:
        TypeError: ``cmdp`` is not a ``TabularCMDP``; ``num``, ``constraint`` or
            ``max_iterations`` not an integer.
        ValueError: M = 0, ``num`` < 2, ``constraint`` outside [0, M), ``max_iterations`` < 1.
        InfeasibleConstraintError: (M > 1) the other constraints cannot be met.
    """
    require_cmdp("tradeoff", cmdp)
    for name, value in (("num", num), ("constraint", constraint), ("max_iterations", max_iterations)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"tradeoff: {name} must be an integer, found {type(value).__name__}")
    m = cmdp.num_constraints
    if m == 0:
        raise ValueError("tradeoff: the model has no constraint (M = 0); the curve needs one")
    if num < 2:
        raise ValueError(f"tradeoff: num must be >= 2 points, found {num}")
    if not 0 <= constraint < m:
        raise ValueError(f"tradeoff: constraint must lie in [0, {m - 1}], found {constraint}")
    if max_iterations < 1:
        raise ValueError(f"tradeoff: max_iterations must be >= 1, found {max_iterations}")
    t0 = time.perf_counter()
    with jax.enable_x64(True):
        c64 = cmdp.astype(jnp.float64)
        if m == 1:
            curve = _single(c64, int(num), int(max_iterations))
        else:
            curve = _multi(c64, int(num), int(constraint), int(max_iterations))
    return TradeOff(
        **curve,
        constraint=int(constraint),
        threshold=float(np.asarray(cmdp.thresholds, np.float64)[constraint]),
        solve_time=time.perf_counter() - t0,
    )


def _single(c64: TabularCMDP, num: int, max_iterations: int) -> dict:
    """M = 1: the upper concave envelope of the Lagrangian breakpoints, searched where the
    ``num`` alphas fall (module docstring). Works in the normalised units of ``solve``."""
    units = _units(c64)
    oracle = _Oracle(c64, units)
    free = oracle(np.zeros(1))  # nu = 0: the unconstrained optimum
    cheap = oracle(np.ones(1), reward_weight=0.0)  # the least cost
    c_min, c_free = cheap[2][0], free[2][0]
    tol_c = float(_cost_tolerance(np.array([max(abs(c_min), abs(c_free))]))[0])
    # breakpoints (cost, reward), kept sorted by cost; a later one at the same cost (within
    # tol_c) replaces an earlier one with a lower reward
    if c_free <= c_min + tol_c:  # the unconstrained optimum is a cheapest policy: a single point
        points = [(c_min, max(cheap[1], free[1]))]
    else:
        points = [(c_min, cheap[1]), (c_free, free[1])]
    alphas = np.linspace(c_min, max(c_min, c_free), num)
    certified: set[tuple[tuple[float, float], tuple[float, float]]] = set()

    def bracket(alpha: float) -> tuple[int, int | None]:
        left = max([i for i, p in enumerate(points) if p[0] <= alpha + tol_c], default=0)
        return left, (left + 1 if left + 1 < len(points) else None)

    def insert(p: tuple[float, float]) -> None:
        for i, q in enumerate(points):
            if abs(q[0] - p[0]) <= tol_c:
                if p[1] > q[1]:
                    points[i] = p
                return
        points.append(p)
        points.sort()

    for _ in range(max_iterations):
        pending = {}
        for alpha in alphas:
            i, j = bracket(alpha)
            if j is None or (points[i], points[j]) in certified:
                continue
            (c_a, j_a), (c_b, j_b) = points[i], points[j]
            pending[(points[i], points[j])] = max(0.0, (j_b - j_a) / (c_b - c_a))
        if not pending:
            break
        for (a, b), nu in pending.items():
            _, j_p, c_p = oracle(np.array([nu]))
            if j_p - nu * c_p[0] <= a[1] - nu * a[0] + _dual_tolerance(np.array([nu]), np.ones(1)):
                certified.add((a, b))  # an edge of the envelope: nothing above it
            else:
                insert((c_p[0], j_p))
    else:
        raise RuntimeError(f"tradeoff: the breakpoint search did not converge in {max_iterations} rounds")

    rewards, slopes = np.empty(num), np.zeros(num)
    for n, alpha in enumerate(alphas):
        i, j = bracket(alpha)
        (c_a, j_a) = points[i]
        if j is None:
            rewards[n] = j_a
            continue
        c_b, j_b = points[j]
        slopes[n] = max(0.0, (j_b - j_a) / (c_b - c_a))
        rewards[n] = j_a + slopes[n] * float(np.clip(alpha - c_a, 0.0, c_b - c_a))
    c_r, c_k = units.reward, float(units.costs[0])
    return {
        "alphas": alphas * c_k,
        "rewards": rewards * c_r,
        "multipliers": (slopes * c_r / c_k)[:, None],
        "costs": np.minimum(alphas, c_free)[:, None] * c_k,
        "cheapest_cost": c_min * c_k,
        "unconstrained_cost": c_free * c_k,
        "unconstrained_reward": free[1] * c_r,
        "oracle_calls": oracle.calls,
    }


def _multi(c64: TabularCMDP, num: int, k: int, max_iterations: int) -> dict:
    """M > 1: the range from two solves of derived models (constraint k's cost as the reward,
    and constraint k removed, the others at their thresholds), then one solve per alpha."""
    m = c64.num_constraints
    others = [j for j in range(m) if j != k]
    alpha = np.asarray(c64.thresholds, np.float64)
    kept = {
        "costs": c64.costs[jnp.asarray(others)],
        "terminal_costs": c64.terminal_costs[jnp.asarray(others)],
        "thresholds": alpha[others],
    }
    least = c64.replace(rewards=-c64.expected_costs()[k], terminal_rewards=-c64.terminal_costs[k], **kept)
    try:
        cheap = solve(least, max_iterations=max_iterations)
    except InfeasibleConstraintError as err:
        raise InfeasibleConstraintError(
            f"tradeoff: constraint {k} cannot be swept: the other constraints cannot be "
            f"met at their thresholds ({err})",
            err.min_costs,
        ) from None
    free = solve(c64.replace(**kept), max_iterations=max_iterations)
    c_min = -cheap.reward
    c_free = float(jax.device_get(_evaluate(c64, jnp.asarray(free.policy), fused=True).costs)[k])
    alphas = np.linspace(c_min, max(c_min, c_free), num)
    rewards, multipliers, costs = np.empty(num), np.empty((num, m)), np.empty((num, m))
    for n, a in enumerate(alphas):
        sol = solve(c64.replace(thresholds=np.where(np.arange(m) == k, a, alpha)), max_iterations=max_iterations)
        rewards[n], multipliers[n], costs[n] = sol.reward, sol.multipliers, sol.costs
    return {
        "alphas": alphas,
        "rewards": rewards,
        "multipliers": multipliers,
        "costs": costs,
        "cheapest_cost": c_min,
        "unconstrained_cost": c_free,
        "unconstrained_reward": free.reward,
        "oracle_calls": 2 + num,
    }
