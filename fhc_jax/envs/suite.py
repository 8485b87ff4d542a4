"""The robustness suite: finite-horizon constrained tasks nobody tuned a learner for, each with
its referee.

A :class:`Task` has a name, a one-line description, a factory ``make() -> (env, params)`` (built
once and cached, so repeated calls return the same objects and share ``jax.jit`` caches) and its
judgement:

* ``"exact"``: the environment has a tabular exact model, ``cmdp = env.to_cmdp(params)``;
  ``fhc_jax.solve(cmdp)`` gives the optimum J* and the optimal multipliers nu*, and
  ``fhc_jax.evaluate(cmdp, table)`` judges a learner's policy table exactly;
* ``"reference"``: Monte-Carlo (``fhc_jax.rollout_returns``) against ``env.reference(params)``,
  the optimum of a discretized exact model executed in the environment (the battery);
* ``"budget"``: Monte-Carlo, the budget only (no yardstick for the reward; Pendulum).

**Thresholds bind.** For the exactly judged tasks built here, each threshold is problem data
computed once when the task is built, from the exact model (learners never see it):
alpha^(k) = C_min^(k) + f (C_free^(k) - C_min^(k)) (:func:`binding_thresholds`), where C_min^(k)
is the expected cost k of the policy that minimises it (backward induction on the cost alone)
and C_free^(k) the cost k of the unconstrained reward optimum (``fhc_jax.solve_unconstrained``),
with a fraction f in (0, 1) per task, so that C_min < alpha < C_free: every threshold binds
(nu* > 0). The paper gridworld keeps its alpha = 25; the inventory problem sets alpha to 60% of
the unconstrained optimum's lost sales (:mod:`fhc_jax.envs.inventory`).

**Tasks** (``TASKS``; H horizon, S states, A actions, M constraints):

====================  =========  ==========================================================
name                  judged     what
====================  =========  ==========================================================
gridworld             exact      the paper's gridworld ``GridWorld()``: 10x10, H = 100, alpha = 25
gridworld5_tight      exact      5x5 gridworld, H = 20, f = 0.3
gridworld5_loose      exact      the same grid, f = 0.7
garnet_s20            exact      Garnet CMDP, S = 20, A = 4, H = 10, 3 successors, f = 0.5
garnet_s50            exact      Garnet CMDP, S = 50, A = 5, H = 20, 4 successors, f = 0.4
garnet_s100           exact      Garnet CMDP, S = 100, A = 6, H = 30, 5 successors, f = 0.6
garnet_m2             exact      Garnet CMDP with two correlated costs (M = 2), S = 30, A = 5, H = 15,
                                 f = 0.5 for each constraint; both bind
inventory             exact      seasonal inventory with a lost-sales budget (H = 24, S = 21, A = 6)
                                 as a ``TabularEnv`` of its model (one-hot observation)
inventory_own         exact      the same problem as its own environment ``InventoryEnv``
                                 (observation (stock / 20, h / H))
inventory_r100_c0.01  exact      ``inventory`` with rewards x 100, costs and alpha x 0.01 (nu* x 10^4)
inventory_r0.01_c100  exact      ``inventory`` with rewards x 0.01, costs and alpha x 100 (nu* x 10^-4)
admission             exact      hospital-ward admission control with a crowding budget (H = 28,
                                 S = 15, A = 5, alpha = 4 crowded days, f = 0.28) as a
                                 ``TabularEnv`` of its model (one-hot observation)
admission_own         exact      the same ward as its own environment ``WardAdmission``
                                 (observation (occupied / B, h / H); a crowded day costs 0 or 1)
battery               reference  ``BatteryStorage()``: one day of arbitrage, one cycle a day
battery_continuous    reference  ``BatteryStorage(continuous_actions=True)``: the rate in [-1, 1]
pendulum              budget     gymnax Pendulum-v1, H = 200, torque-energy budget alpha = 40
maintenance           exact      machine maintenance (H = 40, 10 wear levels, 4 actions), the cost is
                                 each stage's breakdown probability, budget 0.029 expected
                                 breakdowns (7% of H / 100; f = 0.15, nu* about 1200)
maintenance_events    exact      the same machine, each breakdown paid as a 0/1 event (most
                                 episodes cost nothing): a rare-event budget
garnet_s20_negative   exact      ``garnet_s20`` with every reward lowered by 1 (all rewards negative)
<task>_f15, _f50,     exact      the exact tasks at other thresholds: f = 0.15, 0.5, 0.85 of the way
_f85                             from the least cost to the unconstrained optimum's (``gridworld5``,
                                 each Garnet and ``inventory``; tight thresholds give large nu*;
                                 ``garnet_m2`` at 0.3 for 0.15, where its two budgets cannot
                                 be met together)
====================  =========  ==========================================================

**Garnet CMDPs** (:func:`garnet`; "Generic Average Reward Non-stationary Environment Test-bench",
after Archibald et al., 1995): each stage h, state s and action a moves to ``branching``
distinct successors drawn uniformly, with Dirichlet(1) probabilities; a new kernel at every
stage (time-varying). Costs g^(k)_h(s, a) ~ U(0, 1) independently; the reward is
``correlation`` times the mean of the costs plus (1 - ``correlation``) times an independent
U(0, 1), so the rewarding actions cost more and the constraints bind. The start state is
uniform.

**Rescaled copies** (:func:`rescale`): rewards x c_r and costs with their thresholds x c_c leave
the optimal policy unchanged and scale nu* by c_r / c_c; with (c_r, c_c) = (100, 0.01) and
(0.01, 100) the optimal multipliers of the suite span more than four orders of magnitude.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.cmdp.solve import solve_unconstrained
from fhc_jax.cmdp.transitions import SparseTransitions
from fhc_jax.envs.base import Environment, check_int

#: the ways a task is judged (module docstring)
JUDGEMENTS = ("exact", "reference", "budget")


# ----------------------------------------------------------------------------- thresholds


def cost_range(cmdp: TabularCMDP) -> tuple[np.ndarray, np.ndarray]:
    """(C_min, C_free): for each constraint k, the least expected total cost k any policy
    achieves (backward induction on the cost alone) and the expected total cost k of the
    unconstrained reward optimum (``fhc_jax.solve_unconstrained``), each (M,) float64.

    Args:
        cmdp: the model (its thresholds are ignored).
    """
    free = np.asarray(solve_unconstrained(cmdp).costs, np.float64)
    least = np.array(
        [-solve_unconstrained(_cost_as_reward(cmdp, k)).reward for k in range(cmdp.num_constraints)], np.float64
    )
    return least, free


def _cost_as_reward(cmdp: TabularCMDP, k: int) -> TabularCMDP:
    """The CMDP whose reward is minus cost k, stored in the shape of ``cmdp.rewards`` (so the
    solver's programs compiled for ``cmdp`` are reused)."""
    cost = jnp.asarray(cmdp.costs[k])
    if cmdp.rewards.ndim == 4 and cost.ndim == 3:  # per-next-state storage: constant over s'
        cost = jnp.broadcast_to(cost[..., None], cmdp.rewards.shape)
    elif cmdp.rewards.ndim == 3 and cost.ndim == 4:
        cost = cmdp.expected_costs()[k]
    return cmdp.replace(rewards=-cost, terminal_rewards=-cmdp.terminal_costs[k])


def binding_thresholds(cmdp: TabularCMDP, fraction: float | tuple[float, ...]) -> np.ndarray:
    """alpha^(k) = C_min^(k) + f_k (C_free^(k) - C_min^(k)) (:func:`cost_range`), (M,) float64:
    thresholds strictly between the cheapest policy's cost and the unconstrained optimum's,
    so each constraint on its own binds.

    Args:
        cmdp: the model.
        fraction: f in (0, 1), one for all constraints or one per constraint (M,).
    Raises:
        ValueError: a fraction outside (0, 1) or of the wrong length, or a constraint that the
            unconstrained optimum already meets at its least cost (C_free <= C_min: nothing to
            bind).
    """
    m = cmdp.num_constraints
    f = np.broadcast_to(np.asarray(fraction, np.float64).reshape(-1), (m,)) if np.size(fraction) in (1, m) else None
    if f is None or not np.all((f > 0) & (f < 1)):
        raise ValueError(
            f"binding_thresholds: fraction must be a number in (0, 1) or M = {m} of them, found {fraction!r}"
        )
    least, free = cost_range(cmdp)
    if np.any(free <= least + 1e-9 * np.maximum(1.0, np.abs(least))):
        k = int(np.argmax(free - least <= 1e-9 * np.maximum(1.0, np.abs(least))))
        raise ValueError(
            f"binding_thresholds: constraint {k} cannot bind: the unconstrained optimum's cost "
            f"{free[k]:.6g} is already the least achievable {least[k]:.6g}"
        )
    return least + f * (free - least)


def rescale(cmdp: TabularCMDP, reward_scale: float, cost_scale: float) -> TabularCMDP:
    """The same CMDP in other units: rewards (stage and terminal) x ``reward_scale``, costs
    (stage and terminal) and thresholds x ``cost_scale``. The optimal policy is unchanged and
    the optimal multipliers are multiplied by ``reward_scale / cost_scale``.

    Args:
        cmdp: the model.
        reward_scale: c_r, a finite number > 0.
        cost_scale: c_c, a finite number > 0.
    Raises:
        ValueError: a scale that is not a finite number > 0, or one that takes a nonzero value
            below the smallest normal number of the model's dtype or beyond its largest
            (``TabularCMDP`` names the field).
    """
    for name, value in (("reward_scale", reward_scale), ("cost_scale", cost_scale)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float, np.integer, np.floating))
            or not np.isfinite(value)
            or value <= 0
        ):
            raise ValueError(f"rescale: {name} must be a finite number > 0, found {value!r}")

    def scaled(x, c):
        # the model's own arithmetic, unless it flushed a nonzero product to zero (subnormal) or
        # overflowed: then the exact float64 products, which TabularCMDP refuses by name
        product = x * c
        exact = np.asarray(x, np.float64) * c
        stored = np.asarray(product)
        lost = ((exact != 0) & (stored == 0)) | ~np.isfinite(stored)
        return exact if lost.any() else product

    return cmdp.replace(
        rewards=scaled(cmdp.rewards, reward_scale),
        terminal_rewards=scaled(cmdp.terminal_rewards, reward_scale),
        costs=scaled(cmdp.costs, cost_scale),
        terminal_costs=scaled(cmdp.terminal_costs, cost_scale),
        thresholds=scaled(cmdp.thresholds, cost_scale),
    )


# ----------------------------------------------------------------------------- Garnet CMDPs


def garnet(
    num_states: int,
    num_actions: int,
    horizon: int,
    branching: int,
    seed: int,
    *,
    num_constraints: int = 1,
    fraction: float | tuple[float, ...] = 0.5,
    correlation: float = 0.6,
) -> TabularCMDP:
    """A random Garnet CMDP with time-varying sparse kernels and binding thresholds (module
    docstring), drawn with ``numpy.random.default_rng(seed)``.

    Args:
        num_states: S >= 2.
        num_actions: A >= 2.
        horizon: H >= 1.
        branching: successors per (h, s, a), in [1, S].
        seed: >= 0.
        num_constraints: M >= 1.
        fraction: f in (0, 1) of :func:`binding_thresholds` (one, or one per constraint).
        correlation: weight in [0, 1] of the mean cost in the reward.
    Returns:
        :class:`~fhc_jax.cmdp.model.TabularCMDP` with ``SparseTransitions`` (H, S, A, branching),
        rewards (H, S, A), costs (M, H, S, A), zero terminal signals, uniform start.
    Raises:
        ValueError: an argument out of range (named), or a constraint that cannot bind.
    """
    own = "garnet"
    s = check_int(own, "num_states", num_states, 2)
    a = check_int(own, "num_actions", num_actions, 2)
    h = check_int(own, "horizon", horizon, 1)
    b = check_int(own, "branching", branching, 1, s)
    m = check_int(own, "num_constraints", num_constraints, 1)
    seed = check_int(own, "seed", seed, 0)
    if isinstance(correlation, bool) or not isinstance(correlation, (int, float)) or not 0 <= correlation <= 1:
        raise ValueError(f"{own}: correlation must be a number in [0, 1], found {correlation!r}")
    rng = np.random.default_rng(seed)
    successors = np.argsort(rng.random((h, s, a, s)), axis=-1)[..., :b].astype(np.int32)
    probabilities = rng.dirichlet(np.ones(b), size=(h, s, a))
    costs = rng.random((m, h, s, a))
    rewards = correlation * costs.mean(axis=0) + (1.0 - correlation) * rng.random((h, s, a))
    cmdp = TabularCMDP(
        transitions=SparseTransitions(next_states=successors, probabilities=probabilities),
        rewards=rewards,
        costs=costs,
        thresholds=np.zeros(m),
        initial_distribution=np.full(s, 1.0 / s),
    )
    return cmdp.replace(thresholds=binding_thresholds(cmdp, fraction))


# ----------------------------------------------------------------------------- the registry


@dataclasses.dataclass(frozen=True)
class Task:
    """One task of the suite.

    Attributes:
        name: its name in ``TASKS`` and on the benchmark's command line.
        description: one line.
        judgement: "exact", "reference" or "budget" (module docstring).
        factory: builds ``(env, params)``; :meth:`make` calls it once.
    """

    name: str
    description: str
    judgement: str
    factory: Callable[[], tuple[Environment, Any]] = dataclasses.field(repr=False, compare=False)

    def __post_init__(self):
        if self.judgement not in JUDGEMENTS:
            raise ValueError(f"Task {self.name!r}: judgement must be one of {JUDGEMENTS}, found {self.judgement!r}")

    @property
    def exact(self) -> bool:
        """Whether the task is judged exactly (``fhc_jax.evaluate`` against ``fhc_jax.solve``)."""
        return self.judgement == "exact"

    def make(self) -> tuple[Environment, Any]:
        """``(env, params)``, built on the first call (thresholds included) and cached."""
        return _build(self.name)

    def cmdp(self) -> TabularCMDP:
        """The exact model ``env.to_cmdp(params)`` of an exactly judged task.

        Raises:
            ValueError: a task judged by Monte-Carlo.
        """
        if not self.exact:
            raise ValueError(f"task {self.name!r} is judged by Monte-Carlo ({self.judgement}); it has no exact model")
        env, params = self.make()
        return env.to_cmdp(params)


@functools.cache
def _build(name: str) -> tuple[Environment, Any]:
    return TASKS[name].factory()


def _with_params(env: Environment) -> tuple[Environment, Any]:
    return env, env.default_params


def _tabular(cmdp: TabularCMDP) -> tuple[Environment, Any]:
    from fhc_jax.envs.tabular import TabularEnv

    env = TabularEnv(cmdp)
    return env, env.default_params


def _small_grid(fraction: float) -> tuple[Environment, Any]:
    from fhc_jax.envs.gridworld import GridWorld

    settings = dict(size=5, horizon=20)
    probe = GridWorld(**settings, alpha=0.0)
    alpha = binding_thresholds(probe.to_cmdp(probe.default_params), fraction)
    return _with_params(GridWorld(**settings, alpha=float(alpha[0])))


@functools.cache
def _inventory() -> tuple[Environment, Any]:
    from fhc_jax.envs.inventory import InventoryEnv

    return _with_params(InventoryEnv())


def _inventory_model(reward_scale: float = 1.0, cost_scale: float = 1.0) -> tuple[Environment, Any]:
    env, params = _inventory()
    cmdp = env.to_cmdp(params)
    return _tabular(cmdp if (reward_scale, cost_scale) == (1.0, 1.0) else rescale(cmdp, reward_scale, cost_scale))


@functools.cache
def _ward() -> tuple[Environment, Any]:
    from fhc_jax.envs.admission import WardAdmission

    return _with_params(WardAdmission())


def _ward_model() -> tuple[Environment, Any]:
    env, params = _ward()
    return _tabular(env.to_cmdp(params))


def _battery(continuous: bool) -> tuple[Environment, Any]:
    from fhc_jax.envs.battery import BatteryStorage

    return _with_params(BatteryStorage(continuous_actions=continuous))


def _pendulum() -> tuple[Environment, Any]:
    from fhc_jax.envs.gymnax_tasks import pendulum

    return _with_params(pendulum())


def _paper_grid() -> tuple[Environment, Any]:
    from fhc_jax.envs.gridworld import GridWorld

    return _with_params(GridWorld())


_GARNETS = {  # name: (S, A, H, branching, seed, M, fraction)
    "garnet_s20": (20, 4, 10, 3, 1, 1, 0.5),
    "garnet_s50": (50, 5, 20, 4, 2, 1, 0.4),
    "garnet_s100": (100, 6, 30, 5, 3, 1, 0.6),
    "garnet_m2": (30, 5, 15, 3, 4, 2, 0.5),
}


def _garnet_model(name: str, fraction: float | None = None) -> TabularCMDP:
    s, a, h, b, seed, m, f = _GARNETS[name]
    return garnet(s, a, h, b, seed, num_constraints=m, fraction=f if fraction is None else fraction)


def _negative(cmdp: TabularCMDP) -> tuple[Environment, Any]:
    """``cmdp`` with every stage reward lowered by 1 (all negative for rewards in [0, 1))."""
    return _tabular(cmdp.replace(rewards=cmdp.rewards - 1.0))


def _maintenance(costs: str) -> tuple[Environment, Any]:
    from fhc_jax.envs.maintenance import maintenance

    cmdp = maintenance(costs)
    return _tabular(cmdp.replace(thresholds=binding_thresholds(cmdp, MAINTENANCE_FRACTION)))


def _at_fraction(base: str, fraction: float) -> tuple[Environment, Any]:
    """The exact task ``base`` with its thresholds at ``fraction`` of the way from the least
    cost to the unconstrained optimum's (:func:`binding_thresholds`)."""
    if base == "gridworld5":
        return _small_grid(fraction)
    if base == "inventory":
        env, params = _inventory()
        cmdp = env.to_cmdp(params)
        return _tabular(cmdp.replace(thresholds=binding_thresholds(cmdp, fraction)))
    return _tabular(_garnet_model(base, fraction))


#: the fraction f of the maintenance tasks' budget (alpha = 0.029 expected breakdowns, H = 40)
MAINTENANCE_FRACTION = 0.15
#: the threshold fractions of the grown suite (module docstring) and the tasks grown with them
THRESHOLD_FRACTIONS = {"f15": 0.15, "f30": 0.3, "f50": 0.5, "f85": 0.85}
_GROWN = {
    "gridworld5": ("f15", "f50", "f85"),
    "garnet_s20": ("f15", "f85"),
    "garnet_s50": ("f15", "f50", "f85"),
    "garnet_s100": ("f15", "f85"),
    "garnet_m2": ("f30", "f85"),  # at f = 0.15 the two budgets cannot be met together
    "inventory": ("f15", "f50", "f85"),
}


def _fraction_task(base: str, suffix: str) -> Task:
    f = THRESHOLD_FRACTIONS[suffix]
    return Task(
        f"{base}_{suffix}",
        f"{base} with alpha at f = {f} between the least and the unconstrained cost",
        "exact",
        lambda: _at_fraction(base, f),
    )


def threshold_fractions(cmdp: TabularCMDP) -> np.ndarray:
    """Where each threshold lies between the least cost and the unconstrained optimum's cost,
    f^(k) = (alpha^(k) - C_min^(k)) / (C_free^(k) - C_min^(k)) (:func:`cost_range`), (M,)
    float64: in (0, 1) for a binding threshold, >= 1 for a slack one, <= 0 for an infeasible
    one (nan where C_free = C_min)."""
    least, free = cost_range(cmdp)
    span = free - least
    alpha = np.asarray(cmdp.thresholds, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.abs(span) > 0, (alpha - least) / span, np.nan)


def _garnet_task(name: str) -> Task:
    s, a, h, b, seed, m, f = _GARNETS[name]
    what = "two correlated costs (M = 2), " if m == 2 else ""
    return Task(
        name,
        f"Garnet CMDP, {what}S = {s}, A = {a}, H = {h}, {b} successors, time-varying kernel, "
        f"alpha at f = {f} between the least and the unconstrained cost",
        "exact",
        lambda: _tabular(_garnet_model(name)),
    )


#: every task of the suite by name, in the order of the module docstring's table
TASKS: dict[str, Task] = {
    t.name: t
    for t in [
        Task(
            "gridworld",
            "the paper's gridworld: 10x10, H = 100, 9 moves with slip 0.1, alpha = 25",
            "exact",
            _paper_grid,
        ),
        Task(
            "gridworld5_tight",
            "5x5 gridworld, H = 20, alpha at f = 0.3 between the least and the unconstrained cost",
            "exact",
            lambda: _small_grid(0.3),
        ),
        Task(
            "gridworld5_loose",
            "5x5 gridworld, H = 20, alpha at f = 0.7 between the least and the unconstrained cost",
            "exact",
            lambda: _small_grid(0.7),
        ),
        *[_garnet_task(name) for name in _GARNETS],
        Task(
            "inventory",
            "seasonal inventory (H = 24, stock 0..20, orders 0..5), lost-sales budget at 60% of the "
            "unconstrained optimum's, as a TabularEnv of its model",
            "exact",
            _inventory_model,
        ),
        Task(
            "inventory_own",
            "the inventory problem as its own environment InventoryEnv (observation (stock/20, h/H))",
            "exact",
            _inventory,
        ),
        Task(
            "inventory_r100_c0.01",
            "inventory in other units: rewards x 100, costs and alpha x 0.01",
            "exact",
            lambda: _inventory_model(100.0, 0.01),
        ),
        Task(
            "inventory_r0.01_c100",
            "inventory in other units: rewards x 0.01, costs and alpha x 100",
            "exact",
            lambda: _inventory_model(0.01, 100.0),
        ),
        Task(
            "admission",
            "hospital-ward admission control (H = 28, 14 beds, quotas 0..4), a budget of 4 crowded "
            "days, as a TabularEnv of its model",
            "exact",
            _ward_model,
        ),
        Task(
            "admission_own",
            "the ward as its own environment WardAdmission (observation (occupied/B, h/H); a crowded day costs 0 or 1)",
            "exact",
            _ward,
        ),
        Task(
            "battery",
            "BatteryStorage(): one day of arbitrage in 48 half-hours, one cycle a day; Monte-Carlo "
            "against the discretized optimum",
            "reference",
            lambda: _battery(False),
        ),
        Task(
            "battery_continuous",
            "BatteryStorage(continuous_actions=True): the charge rate in [-1, 1]; Monte-Carlo "
            "against the discretized optimum",
            "reference",
            lambda: _battery(True),
        ),
        Task(
            "pendulum",
            "gymnax Pendulum-v1 with cost u^2 per step, H = 200, torque-energy budget alpha = 40; "
            "Monte-Carlo, budget only",
            "budget",
            _pendulum,
        ),
        Task(
            "maintenance",
            "machine maintenance (H = 40), the cost is each stage's breakdown probability, budget "
            "0.029 expected breakdowns (f = 0.15, nu* about 1200)",
            "exact",
            lambda: _maintenance("probability"),
        ),
        Task(
            "maintenance_events",
            "the maintenance task with each breakdown paid as a 0/1 event: a rare-event budget",
            "exact",
            lambda: _maintenance("events"),
        ),
        Task(
            "garnet_s20_negative",
            "garnet_s20 with every reward lowered by 1: all rewards negative",
            "exact",
            lambda: _negative(_garnet_model("garnet_s20")),
        ),
        *[_fraction_task(base, suffix) for base, suffixes in _GROWN.items() for suffix in suffixes],
    ]
}


def task(name: str) -> Task:
    """The task called ``name``.

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[name]


def task_names(judgement: str | None = None) -> list[str]:
    """Names of the tasks, all or those judged ``judgement`` ("exact", "reference", "budget").

    Raises:
        ValueError: an unknown judgement.
    """
    if judgement is not None and judgement not in JUDGEMENTS:
        raise ValueError(f"task_names: judgement must be one of {JUDGEMENTS} or None, found {judgement!r}")
    return [name for name, t in TASKS.items() if judgement is None or t.judgement == judgement]
