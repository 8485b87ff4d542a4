"""A seasonal inventory problem with a lost-sales budget: a tabular environment written the way
a user would write their own, with its own observation (no encoder) and a terminal reward.

**Model** (stage h = 0..H-1, e.g. the months of two years or the hours of a day):

* **State**: the stock s in {0, ..., N} (N = ``max_stock``), a :class:`TabularState` with
  ``index = s``.
* **Action**: an order of a in {0, ..., Q} units (Q = ``max_order``), delivered at once; only
  what fits is ordered, q = min(a, N - s), and the stock on hand is y = s + q.
* **Demand** D_h: Poisson with the seasonal mean ``mean_demand + seasonal_amplitude *
  sin(2 pi h / H)``, its tail beyond ``max_demand`` lumped on ``max_demand``. Sales are
  min(y, D_h), the rest of the demand is lost, and s' = y - min(y, D_h).
* **Reward**: ``price`` per unit sold, minus ``unit_cost`` per unit ordered, ``fixed_cost`` per
  order placed (q > 0) and ``holding_cost`` per unit left in stock after the stage:
  r_h(s, a, s') = price (y - s') - unit_cost q - fixed_cost [q > 0] - holding_cost s'
  (a function of s' because the units sold are y - s'). **Terminal reward**: the stock left at
  the end is sold off at ``salvage`` per unit, r_H(s) = salvage s.
* **Constraint**: the lost sales, max(D_h - y, 0) per stage, summed over the episode; the
  budget alpha defaults to ``lost_sales_fraction`` (60%) of the lost sales of the
  unconstrained optimum (computed by backward induction when the environment is built), so
  the constraint binds: the optimal policy must keep more stock than pays.

With the defaults (H = 24, N = 20, Q = 5, seasonal mean 1..6 against an order capacity of 5)
the expected lost sales range from about 2.4 (the policy that minimises them) to about 11.0
(the unconstrained optimum, which earns about 107), alpha is about 6.6, and the constrained
optimum earns about 102 at the optimal multiplier nu* of about 2.8.

**Observation** (its own, not an encoder): (s / N, h / H), float32 (2,).

**Exact model.** :meth:`InventoryEnv.to_cmdp` is the same process as a
:class:`~fhc_jax.cmdp.model.TabularCMDP`: time-varying dense transitions (H, S, A, S), rewards
per next state (H, S, A, S), the expected lost sales as costs (1, H, S, A) (the environment
pays the realised lost sales; both have the same expectation), the salvage as terminal reward.

A step draws one uniform number (the demand by inverse CDF), so rollouts take their
one-uniform fast path (``has_uniform_noise``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.envs.base import Environment, TabularState, check_int, sample_index

Array = jax.Array


@struct.dataclass
class InventoryParams:
    """Everything numeric about the inventory problem (a pytree).

    Attributes (H stages, S = N + 1 stock levels, D = ``max_demand``):
        demand: P(D_h = d), (H, D + 1).
        price, unit_cost, fixed_cost, holding_cost, salvage: (), money per unit (per order for
            ``fixed_cost``).
        thresholds: alpha, the lost-sales budget, (1,).
        initial_distribution: law of the initial stock, (S,).
    """

    demand: Array
    price: Array
    unit_cost: Array
    fixed_cost: Array
    holding_cost: Array
    salvage: Array
    thresholds: Array
    initial_distribution: Array


def seasonal_demand(horizon: int, mean: float, amplitude: float, max_demand: int) -> np.ndarray:
    """P(D_h = d) of the Poisson demand with mean ``mean + amplitude sin(2 pi h / H)``, the
    tail beyond ``max_demand`` lumped on ``max_demand``, (H, max_demand + 1) float64."""
    rates = mean + amplitude * np.sin(2 * np.pi * np.arange(horizon) / horizon)
    d = np.arange(max_demand + 1)
    log_fact = np.array([math.lgamma(k + 1) for k in d])
    pmf = np.exp(d[None] * np.log(rates[:, None]) - rates[:, None] - log_fact[None])
    pmf[:, -1] += 1.0 - pmf.sum(axis=1)
    return pmf


def _real(name: str, value: Any, low: float, high: float = np.inf) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not np.isfinite(value)
        or not low <= value <= high
    ):
        raise ValueError(f"InventoryEnv: {name} must be a finite number in [{low}, {high}], found {value!r}")
    return float(value)


class InventoryEnv(Environment[TabularState, InventoryParams]):
    """Seasonal inventory control with a lost-sales budget (module docstring has the model).

    Args (each validated: ``ValueError`` naming it, its range and the value found):
        horizon: H >= 1 stages.
        max_stock: N >= 1 (S = N + 1 stock levels).
        max_order: Q >= 1 (A = Q + 1 order sizes).
        mean_demand: > 0, the demand's mean over the season.
        seasonal_amplitude: in [0, mean_demand), the amplitude of its seasonal swing.
        max_demand: >= 1, where the Poisson tail is cut.
        price: >= 0, per unit sold.
        unit_cost: >= 0, per unit ordered.
        fixed_cost: >= 0, per order placed.
        holding_cost: >= 0, per unit in stock after a stage.
        salvage: >= 0, per unit left at the end.
        initial_stock: in [0, N].
        lost_sales_fraction: in (0, 1]: alpha = this fraction of the unconstrained optimum's
            expected lost sales (used when ``alpha`` is None).
        alpha: an explicit lost-sales budget >= 0, or None.
    """

    def __init__(
        self,
        horizon: int = 24,
        max_stock: int = 20,
        max_order: int = 5,
        *,
        mean_demand: float = 3.5,
        seasonal_amplitude: float = 2.5,
        max_demand: int = 15,
        price: float = 4.0,
        unit_cost: float = 2.0,
        fixed_cost: float = 2.0,
        holding_cost: float = 0.5,
        salvage: float = 1.0,
        initial_stock: int = 5,
        lost_sales_fraction: float = 0.6,
        alpha: float | None = None,
    ):
        self._horizon = check_int("InventoryEnv", "horizon", horizon, 1)
        self.max_stock = check_int("InventoryEnv", "max_stock", max_stock, 1)
        self.max_order = check_int("InventoryEnv", "max_order", max_order, 1)
        self.max_demand = check_int("InventoryEnv", "max_demand", max_demand, 1)
        mean = _real("mean_demand", mean_demand, 1e-9)
        amplitude = _real("seasonal_amplitude", seasonal_amplitude, 0.0, mean * (1 - 1e-9))
        money = {
            k: _real(k, v, 0.0)
            for k, v in dict(
                price=price, unit_cost=unit_cost, fixed_cost=fixed_cost, holding_cost=holding_cost, salvage=salvage
            ).items()
        }
        stock0 = check_int("InventoryEnv", "initial_stock", initial_stock, 0, self.max_stock)
        fraction = _real("lost_sales_fraction", lost_sales_fraction, 1e-9, 1.0)
        self._settings = dict(
            mean_demand=mean,
            seasonal_amplitude=amplitude,
            initial_stock=stock0,
            lost_sales_fraction=fraction,
            alpha=alpha,
            **money,
        )
        beta = np.eye(self.max_stock + 1)[stock0]
        self._numbers = dict(
            demand=seasonal_demand(self._horizon, mean, amplitude, self.max_demand),
            initial_distribution=beta,
            thresholds=np.zeros(1),
            **money,
        )
        if alpha is None:  # fraction of the unconstrained optimum's lost sales (backward induction)
            alpha = fraction * unconstrained_lost_sales(self.to_cmdp(self._params(np)))
        self._numbers["thresholds"] = np.array([_real("alpha", alpha, 0.0)])

    # ------------------------------------------------------------------ static configuration
    horizon = property(lambda self: self._horizon)
    num_states = property(lambda self: self.max_stock + 1)
    num_actions = property(lambda self: self.max_order + 1)
    num_constraints = property(lambda self: 1)
    # declared capabilities (fhc_jax.envs.base)
    is_tabular = property(lambda self: True)
    has_exact_model = property(lambda self: True)
    has_uniform_noise = property(lambda self: True)

    def _static_config(self) -> tuple:
        return (self._horizon, self.max_stock, self.max_order, self.max_demand, tuple(sorted(self._settings.items())))

    def __repr__(self) -> str:
        return f"InventoryEnv(horizon={self._horizon}, max_stock={self.max_stock}, max_order={self.max_order})"

    def _params(self, xp) -> InventoryParams:
        return InventoryParams(**{k: xp.asarray(v) for k, v in self._numbers.items()})

    @property
    def default_params(self) -> InventoryParams:
        return self._params(jnp)

    def thresholds(self, params: InventoryParams) -> Array:
        return params.thresholds

    # ------------------------------------------------------------------ its own observation
    def observation(self, state: TabularState, params: InventoryParams) -> Array:
        """(stock / N, h / H), float32 (2,)."""
        return jnp.stack([state.index / self.max_stock, state.time / self._horizon]).astype(jnp.float32)

    observation_shape = property(lambda self: (2,))
    observation_dtype = property(lambda self: jnp.float32)

    # ------------------------------------------------------------------ dynamics
    def reset(self, key: Array, params: InventoryParams) -> tuple[Array, TabularState]:
        state = self.state_at(sample_index(key, params.initial_distribution), 0)
        return self.observation(state, params), state

    def noise(self, key: Array, params: InventoryParams) -> Array:
        return jax.random.uniform(key, (), jnp.float32)

    def noise_from_uniform(self, u: Array, params: InventoryParams) -> Array:
        return u

    def transition(self, noise: Array, state: TabularState, action: Array, params: InventoryParams):
        """One stage with the demand drawn by inverse CDF from the uniform ``noise``; pays the
        reward of the module docstring and the realised lost sales as the cost, (1,)."""
        s, h = state.index, state.time
        ordered = jnp.minimum(jnp.asarray(action, jnp.int32), self.max_stock - s)
        on_hand = s + ordered
        cdf = jnp.cumsum(params.demand[h])
        demand = jnp.minimum(jnp.sum(cdf <= noise * cdf[-1]), self.max_demand).astype(jnp.int32)
        sold = jnp.minimum(on_hand, demand)
        nxt = self.state_at(on_hand - sold, h + 1)
        reward = (
            params.price * sold
            - params.unit_cost * ordered
            - params.fixed_cost * (ordered > 0)
            - params.holding_cost * nxt.index
        )
        lost = (demand - sold).astype(jnp.float32)[None]
        return self.observation(nxt, params), nxt, reward.astype(jnp.float32), lost, nxt.time == self._horizon, {}

    def terminal_reward(self, state: TabularState, params: InventoryParams) -> Array:
        """r_H(s) = salvage * s."""
        return (params.salvage * state.index).astype(jnp.float32)

    # ------------------------------------------------------------------ tabular states
    def state_index(self, state: TabularState) -> Array:
        return state.index

    def state_at(self, index: Array, time: Array) -> TabularState:
        return TabularState(index=jnp.asarray(index, jnp.int32), time=jnp.asarray(time, jnp.int32))

    # ------------------------------------------------------------------ exact model
    def to_cmdp(self, params: InventoryParams) -> TabularCMDP:
        """The exact model (host-side numpy, float64 arithmetic): the same process as
        :meth:`transition`, with the expected lost sales as the cost."""
        p = {f.name: np.asarray(getattr(params, f.name), np.float64) for f in dataclasses.fields(params)}
        n, num_actions, horizon = self.max_stock, self.num_actions, self._horizon
        stock, order, demand = np.arange(n + 1), np.arange(num_actions), np.arange(self.max_demand + 1)
        ordered = np.minimum(order[None, :], n - stock[:, None])  # (S, A)
        on_hand = stock[:, None] + ordered
        nxt = np.maximum(on_hand[..., None] - demand, 0)  # (S, A, D+1)
        hit = nxt[..., None] == stock  # (S, A, D+1, S')
        transitions = np.einsum("hd,sadt->hsat", p["demand"], hit)
        lost = np.maximum(demand - on_hand[..., None], 0)  # (S, A, D+1)
        costs = np.einsum("hd,sad->hsa", p["demand"], lost)[None]
        sold = on_hand[..., None] - stock  # (S, A, S'): units sold to end at s'
        rewards = (
            p["price"] * sold
            - p["unit_cost"] * ordered[..., None]
            - p["fixed_cost"] * (ordered[..., None] > 0)
            - p["holding_cost"] * stock
        )
        rewards = np.where(sold >= 0, rewards, 0.0)  # s' > y is never reached
        return TabularCMDP(
            transitions=transitions,
            rewards=np.broadcast_to(rewards, (horizon,) + rewards.shape),
            costs=costs,
            terminal_rewards=p["salvage"] * stock,
            terminal_costs=np.zeros((1, n + 1)),
            thresholds=p["thresholds"],
            initial_distribution=p["initial_distribution"],
        )


def unconstrained_lost_sales(cmdp: TabularCMDP) -> float:
    """Expected total cost (constraint 0) of the reward-maximising deterministic policy of a
    CMDP with dense transitions, by backward induction in float64 numpy (host-side; ties go to
    the lowest action index, as in ``fhc_jax.solve_unconstrained``)."""
    p = np.asarray(cmdp.dense_transitions(), np.float64)
    p = np.broadcast_to(p, (cmdp.horizon,) + p.shape[-3:])
    r = np.asarray(cmdp.expected_rewards(), np.float64)
    c = np.asarray(cmdp.expected_costs(), np.float64)[0]
    v = np.asarray(cmdp.terminal_rewards, np.float64)
    w = np.asarray(cmdp.terminal_costs, np.float64)[0]
    for h in range(cmdp.horizon - 1, -1, -1):
        q = r[h] + p[h] @ v
        act = q.argmax(-1)[:, None]
        v = q.max(-1)
        w = np.take_along_axis(c[h] + p[h] @ w, act, -1)[:, 0]
    return float(w @ np.asarray(cmdp.initial_distribution, np.float64))
