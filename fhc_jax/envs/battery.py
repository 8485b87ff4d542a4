"""BatteryStorage: one day of grid-battery energy arbitrage under a cycling budget.

**Dynamics** (H = 48 half-hour stages, dt = 0.5 h; stage h covers hh:mm = h * 30 min):

* **State** (continuous): state of charge ``soc`` in [0, 1] (fraction of the capacity E) and
  price deviation ``d`` (EUR/MWh). The price of stage h is ``p_h = base[h] + d_h``.
* **Price.** ``base`` is a time-of-day profile shaped like a continental day-ahead market day
  (stylised on the typical 2023 shape of EPEX SPOT DE-LU hourly prices on a spring weekday: a
  night plateau, a morning peak around 08:00, a midday solar dip, the evening peak around
  19:00; the numbers are rounded, not one particular day's data), in EUR/MWh per hour
  (:data:`HOURLY_PRICE`; both half-hours of an hour share its price, as hourly day-ahead
  products do). The deviation is AR(1): d_{h+1} = rho d_h + sigma eps_h, eps_h ~ N(0, 1),
  d_0 drawn from the stationary law N(0, sigma^2 / (1 - rho^2)); defaults rho = 0.9, sigma = 8
  (stationary sd 18.4 EUR/MWh, of the size of day-ahead forecast errors).
* **Actions**: grid-side power ``rates[a] * power`` (MW, > 0 charges), default rates
  (-1, -0.5, 0, 0.5, 1) of a 0.5 MW / 1 MWh battery (a 2-hour battery). Charging e MWh from the
  grid stores eta e; discharging x MWh from the battery delivers eta x, eta = sqrt(0.85) (round-
  trip efficiency 0.85, typical of Li-ion). A rate that would over-fill or over-drain is cut
  at the limit (the energy exchanged shrinks accordingly).
* **Reward** = arbitrage revenue p_h * (exported - imported MWh), EUR (the price is known when
  acting). **Terminal reward**: -penalty * E * max(0, initial_soc - soc_H), EUR (energy missing
  at the end of the day is bought back at 200 EUR/MWh, above every hour's expected price).
* **Constraint 1** (always): throughput in equivalent full cycles, per stage |delta soc| / 2
  (charged plus discharged energy at the battery over 2 E), budget ``cycle_budget`` = 1 cycle
  per day (the usual warranty / degradation budget). **Constraint 2** (``num_constraints=2``):
  energy imported from the grid in the network tariff's peak period 07:00-23:00 (MWh; a
  day/night time-of-use network tariff: importing by day loads the distribution network at
  its busy hours), budget ``peak_import_budget`` = 0.25 MWh. It rules out most of the
  cheapest charging, in the midday solar dip.
* **Observations**: "sdt" (default) = (soc, d / sd_stationary, h / H), (3,) float32;
  "sd" = (soc, d / sd_stationary), (2,) float32 (no stage: a stationary learner's input).

A step draws one standard normal eps = ndtri(u + 2^-24) from one float32 uniform u, so the
rollouts' one-uniform fast path applies (``has_uniform_noise``).

**Continuous actions** (``continuous_actions=True``): the action is the grid-side rate itself,
a real number in [-1, 1] (fraction of ``power``; ``action_space = Box((-1,), (1,))``, float32
(1,)), clipped into [-1, 1] by the environment; the physics is the same function of the rate,
so the step at action ``rates[a]`` equals the discrete environment's step at action index a
(same noise). There is no tabular model with box actions, so ``has_exact_model`` is False
(learners judge by Monte-Carlo and ``to_cmdp`` raises; ``env.discrete()`` is the discrete twin
with the same settings, whose ``to_cmdp`` is the model of the ``rates``), but ``has_reference``
stays True: :meth:`BatteryStorage.reference` is the discretized optimum computed on the discrete
``rates`` (the same table as the discrete environment's reference), executed in the continuous
environment by playing the chosen rate as the real action
(:class:`~fhc_jax.envs.battery_reference.DiscretizedRatePolicy`; drawn from the same key, it
takes the same action as the discrete reference, so with key-drawn policies both environments
run the same episodes). A continuous policy may do better (it can
use any rate). Measured (M = 1, 2 x 10^4 episodes each, +- 95% CI; the discrete reference on
the one-uniform fast path, so independent episodes): at resolution (81, 25) the reference
earns 77.10 +- 0.35 EUR at 0.996 +- 0.004 cycles in the continuous environment and
76.99 +- 0.35 EUR at 0.995 +- 0.004 in the discrete one; at (21, 9) 76.27 +- 0.34 and
76.15 +- 0.34 EUR (cycles 0.999 and 0.998 +- 0.004).

**Exact model (discretized).** ``to_cmdp(params, resolution=(n_soc, n_dev))``: states are the
grid points soc_i = i / (n_soc - 1) times d_j (n_dev points evenly over +-3 stationary sd;
n_dev = 1: d = 0), S = n_soc * n_dev, state index i * n_dev + j. At a grid point the reward,
costs and next soc are exact; the next soc is split between its two neighbouring grid points
with linear-interpolation weights, and the law of the next deviation N(rho d_j, sigma^2)
(clipped to the grid's range) is projected likewise: cell k gets E[hat_k(d')], the expected
interpolation weight, in closed form
(:func:`~fhc_jax.envs.battery_reference.gaussian_projection`; the initial N(0, sd^2) too). So
every transition preserves E[soc'] and E[clip(d')] exactly, and the projected law agrees
with the continuous one to second order in the grid step. The kernel is sparse and
time-invariant, (S, A, 2 n_dev) successors; the stage enters through the rewards (price profile)
and constraint 2's peak hours. :meth:`BatteryStorage.discretized_policy` runs a policy table
of that model in the continuous environment by mapping (soc, d) to the nearest grid point.

**Measured** (``python benchmarks/battery_resolution.py``; defaults, M = 1, alpha = 1 cycle;
"model" = ``fhc_jax.solve`` of the discretized model, "executed" = its policy
(:meth:`BatteryStorage.reference_policy`) run in the continuous environment, 2 x 10^5
episodes, +- 95% CI). The executed value is a lower bound on the continuous optimum and rises
with the resolution; the model's value falls towards it (coarse grids are optimistic):

============  =====  =========  ================  ================
resolution    S      model EUR  executed EUR      executed cycles
============  =====  =========  ================  ================
(11, 5)          55  85.12      74.73 +- 0.10     0.994 +- 0.001
(21, 9)         189  79.58      76.19 +- 0.11     1.000 +- 0.001
(41, 15)        615  77.88      76.75 +- 0.11     0.994 +- 0.001
(81, 25)       2025  77.48      77.01 +- 0.11     0.996 +- 0.001
(161, 41)      6601  77.40      77.26 +- 0.11     1.000 +- 0.001
============  =====  =========  ================  ================

The constraint binds: the unconstrained optimum earns 116.2 EUR at 2.14 cycles a day (model
(81, 25); executed 115.8 EUR at 2.13). A stationary policy is far from optimal: the best one
found on the (21, 9) model without the stage (primal-dual gradient ascent over stationary
softmax policies, a local optimum) earns 1.25 EUR at 0.39 cycles, and every stage rule of the
optimum frozen over the day earns nothing. With ``num_constraints=2`` (alpha = (1, 0.25)) the
optimum is 73.10 EUR (model (161, 41); executed 72.91 +- 0.10 at costs (0.999, 0.249)); the
1-constraint optimum imports 0.68 MWh in the peak period, so constraint 2 binds too. The default
``resolution`` of :meth:`to_cmdp` is (81, 25).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.cmdp.transitions import SparseTransitions
from fhc_jax.envs.base import Environment, check_int
from fhc_jax.envs.battery_reference import (
    DiscretizedPolicy,
    DiscretizedRatePolicy,
    gaussian_projection,
    interpolation_weights,
)
from fhc_jax.envs.encoders import Encoder
from fhc_jax.envs.spaces import ActionSpace, Box, Discrete

Array = jax.Array

HORIZON = 48
STAGE_HOURS = 0.5
#: base price per hour of the day 00..23, EUR/MWh (module docstring)
HOURLY_PRICE = np.array(
    [95, 88, 84, 82, 84, 92, 110, 135, 145, 128, 105, 88, 75, 70, 74, 88, 110, 140, 170, 185, 160, 130, 112, 100],
    np.float64,
)
#: peak period of constraint 2 (network tariff): [07:00, 23:00)
PEAK_HOURS = (range(7, 23),)
DEVIATION_SPAN = 3.0  # the deviation grid covers +- 3 stationary standard deviations
_HALF_ULP = 2.0**-24


@struct.dataclass
class BatteryState:
    """``soc`` () float32 in [0, 1], ``deviation`` () float32 (EUR/MWh), ``time`` () int32 h."""

    soc: Array
    deviation: Array
    time: Array


@struct.dataclass
class BatteryParams:
    """Numbers of a battery day (a pytree; A rates, M constraints).

    Attributes:
        base_price: base[h], EUR/MWh, (H,). peak: 1 in the peak hours of constraint 2, (H,).
        rates: grid-side power of each action as a fraction of ``power`` (> 0 charges), (A,).
        capacity: E, MWh. power: MW. eta: one-way efficiency (sqrt of the round trip).
        initial_soc: soc_0, also the end-of-day target. ar_coef: rho. noise_sd: sigma, EUR/MWh.
        penalty: EUR/MWh of energy missing below ``initial_soc`` at the end.
        thresholds: alpha^(k), (M,).
    """

    base_price: Array
    peak: Array
    rates: Array
    capacity: Array
    power: Array
    eta: Array
    initial_soc: Array
    ar_coef: Array
    noise_sd: Array
    penalty: Array
    thresholds: Array

    @property
    def stationary_sd(self) -> Array:
        """sd of the stationary deviation, sigma / sqrt(1 - rho^2)."""
        return self.noise_sd / jnp.sqrt(1.0 - self.ar_coef**2)


def physics(soc: Array, rate: Array, p: BatteryParams) -> tuple[Array, Array, Array, Array]:
    """One stage of the battery (broadcasts; shared by the environment and ``to_cmdp``).

    Args:
        soc: state of charge in [0, 1]. rate: grid-side power fraction in [-1, 1].
    Returns:
        (next soc, imported MWh, exported MWh, equivalent full cycles |delta soc| / 2).
    """
    e = rate * p.power * STAGE_HOURS
    stored = jnp.minimum(jnp.maximum(e, 0.0) * p.eta, (1.0 - soc) * p.capacity)
    drawn = jnp.minimum(jnp.maximum(-e, 0.0) / p.eta, soc * p.capacity)
    soc_next = jnp.clip(soc + (stored - drawn) / p.capacity, 0.0, 1.0)
    return soc_next, stored / p.eta, drawn * p.eta, (stored + drawn) / (2.0 * p.capacity)


@dataclasses.dataclass(frozen=True)
class BatteryObservation(Encoder):
    """(soc, d / sd_stationary[, h / H]) float32: "sdt" with the stage, "sd" without."""

    name: str = "sdt"

    def __call__(self, env, state) -> Array:
        """The observation under ``env.default_params`` (:meth:`BatteryStorage.observation`
        takes the params)."""
        return env.observation(state, env.default_params)

    def shape(self, env) -> tuple[int, ...]:
        return (3,) if self.name == "sdt" else (2,)


def _real(
    own: str, name: str, value: Any, low: float, high: float, low_open: bool = False, high_open: bool = False
) -> float:
    valid = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{own}: {name} must be {valid}, found {value!r}") from None
    bad = not np.isfinite(x) or x < low or x > high or (low_open and x == low) or (high_open and x == high)
    if bad or isinstance(value, bool):
        raise ValueError(f"{own}: {name} must be {valid}, found {value!r}")
    return x


class BatteryStorage(Environment[BatteryState, BatteryParams]):
    """One day of battery arbitrage with a throughput budget (module docstring has the model).

    Args (every one validated: ``ValueError`` naming it, its range and the value found):
        num_constraints: 1 (cycles) or 2 (cycles, peak-hour import).
        observation: "sdt" or "sd".
        capacity_mwh: E > 0. power_mw: > 0. round_trip_efficiency: in (0, 1].
        rates: grid-side power fractions of the actions, each in [-1, 1], >= 2 distinct.
        initial_soc: in [0, 1]. ar_coef: rho in [0, 1). price_noise_sd: sigma >= 0, EUR/MWh.
        cycle_budget: alpha_1 >= 0, cycles per day. peak_import_budget: alpha_2 >= 0, MWh.
        terminal_penalty: >= 0, EUR/MWh missing below ``initial_soc`` at the end.
        resolution: default (n_soc >= 2, n_dev >= 1) of :meth:`to_cmdp`.
        continuous_actions: a bool; True: the action is the rate itself, a float32 (1,) in
            [-1, 1] (clipped; module docstring), ``rates`` then only define the discretized
            model behind :meth:`reference`.
    """

    supported_observations = ("sdt", "sd")

    def __init__(
        self,
        num_constraints: int = 1,
        observation: str = "sdt",
        *,
        capacity_mwh: float = 1.0,
        power_mw: float = 0.5,
        round_trip_efficiency: float = 0.85,
        rates: tuple[float, ...] = (-1.0, -0.5, 0.0, 0.5, 1.0),
        initial_soc: float = 0.5,
        ar_coef: float = 0.9,
        price_noise_sd: float = 8.0,
        cycle_budget: float = 1.0,
        peak_import_budget: float = 0.25,
        terminal_penalty: float = 200.0,
        resolution: tuple[int, int] = (81, 25),
        continuous_actions: bool = False,
    ):
        own = "BatteryStorage"
        if not isinstance(continuous_actions, (bool, np.bool_)):
            raise ValueError(f"{own}: continuous_actions must be a bool (True or False), found {continuous_actions!r}")
        self._continuous = bool(continuous_actions)
        self._num_constraints = check_int(own, "num_constraints", num_constraints, 1, 2)
        if observation not in self.supported_observations:
            raise ValueError(f"{own}: observation must be one of 'sdt', 'sd', found {observation!r}")
        self._encoder = BatteryObservation(observation)
        if not isinstance(rates, (tuple, list)) or len(rates) < 2:
            raise ValueError(f"{own}: rates must be a sequence of >= 2 numbers in [-1, 1], found {rates!r}")
        rates = tuple(_real(own, "rates", r, -1.0, 1.0) for r in rates)
        if len(set(rates)) != len(rates):
            raise ValueError(f"{own}: rates must be distinct numbers in [-1, 1], found {rates!r}")
        self._settings = dict(
            capacity_mwh=_real(own, "capacity_mwh", capacity_mwh, 0.0, np.inf, low_open=True, high_open=True),
            power_mw=_real(own, "power_mw", power_mw, 0.0, np.inf, low_open=True, high_open=True),
            round_trip_efficiency=_real(own, "round_trip_efficiency", round_trip_efficiency, 0.0, 1.0, low_open=True),
            rates=rates,
            initial_soc=_real(own, "initial_soc", initial_soc, 0.0, 1.0),
            ar_coef=_real(own, "ar_coef", ar_coef, 0.0, 1.0, high_open=True),
            price_noise_sd=_real(own, "price_noise_sd", price_noise_sd, 0.0, np.inf, high_open=True),
            cycle_budget=_real(own, "cycle_budget", cycle_budget, 0.0, np.inf, high_open=True),
            peak_import_budget=_real(own, "peak_import_budget", peak_import_budget, 0.0, np.inf, high_open=True),
            terminal_penalty=_real(own, "terminal_penalty", terminal_penalty, 0.0, np.inf, high_open=True),
        )
        self.resolution = self._check_resolution(own, resolution)

    @staticmethod
    def _check_resolution(own: str, resolution: Any) -> tuple[int, int]:
        if not isinstance(resolution, (tuple, list)) or len(resolution) != 2:
            raise ValueError(f"{own}: resolution must be (n_soc >= 2, n_dev >= 1), found {resolution!r}")
        return (
            check_int(own, "resolution[0] (n_soc)", resolution[0], 2),
            check_int(own, "resolution[1] (n_dev)", resolution[1], 1),
        )

    # ------------------------------------------------------------------ static configuration
    horizon = property(lambda self: HORIZON)
    num_constraints = property(lambda self: self._num_constraints)
    has_exact_model = property(lambda self: not self._continuous)
    has_uniform_noise = property(lambda self: True)
    has_reference = property(lambda self: True)

    @property
    def continuous_actions(self) -> bool:
        """Whether the action is the real rate in [-1, 1] (a Box) rather than an index of ``rates``."""
        return self._continuous

    @property
    def num_rates(self) -> int:
        """The number of discrete ``rates`` (the actions of the discrete version and of the
        discretized model behind :meth:`reference`)."""
        return len(self._settings["rates"])

    @property
    def num_actions(self) -> int:
        """A = the number of ``rates`` (discrete actions); raises with continuous actions."""
        if self._continuous:
            raise self.box_actions_error()
        return self.num_rates

    @property
    def action_space(self) -> ActionSpace:
        """``Discrete(len(rates))``, or ``Box((-1,), (1,))`` with continuous actions."""
        return Box((-1.0,), (1.0,)) if self._continuous else Discrete(self.num_rates)

    def discrete(self) -> BatteryStorage:
        """The discrete-action version with the same settings (``self`` when already discrete):
        its ``to_cmdp`` is the discretized model of the ``rates`` behind :meth:`reference`."""
        if not self._continuous:
            return self
        return BatteryStorage(
            self._num_constraints,
            self._encoder.name,
            **self._settings,
            resolution=self.resolution,
            continuous_actions=False,
        )

    def _static_config(self) -> tuple:
        return (
            self._num_constraints,
            self._encoder.name,
            self.resolution,
            tuple(sorted(self._settings.items())),
            self._continuous,
        )

    def __repr__(self) -> str:
        extra = ", continuous_actions=True" if self._continuous else ""
        return f"BatteryStorage(num_constraints={self._num_constraints}, observation={self._encoder.name!r}{extra})"

    @property
    def default_params(self) -> BatteryParams:
        s = self._settings
        f = jnp.float32
        peak = np.zeros(HORIZON)
        for hours in PEAK_HOURS:
            for hour in hours:
                peak[2 * hour : 2 * hour + 2] = 1.0
        alpha = [s["cycle_budget"], s["peak_import_budget"]][: self._num_constraints]
        return BatteryParams(
            base_price=jnp.asarray(np.repeat(HOURLY_PRICE, 2), f),
            peak=jnp.asarray(peak, f),
            rates=jnp.asarray(s["rates"], f),
            capacity=jnp.asarray(s["capacity_mwh"], f),
            power=jnp.asarray(s["power_mw"], f),
            eta=jnp.asarray(np.sqrt(s["round_trip_efficiency"]), f),
            initial_soc=jnp.asarray(s["initial_soc"], f),
            ar_coef=jnp.asarray(s["ar_coef"], f),
            noise_sd=jnp.asarray(s["price_noise_sd"], f),
            penalty=jnp.asarray(s["terminal_penalty"], f),
            thresholds=jnp.asarray(alpha, f),
        )

    def thresholds(self, params: BatteryParams) -> Array:
        """alpha^(k) = (cycle budget[, peak-period import budget]), ``params.thresholds``, (M,)."""
        return params.thresholds

    def _check_param_values(self, params: BatteryParams, owner: str) -> None:
        """The ranges of the constructor's arguments, on the params themselves: capacity > 0,
        power > 0, one-way efficiency eta in (0, 1], |ar_coef| < 1, noise_sd >= 0,
        initial_soc in [0, 1], penalty >= 0, thresholds >= 0, rates in [-1, 1], prices finite."""
        p = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
        for name in ("base_price", "peak", "rates", "thresholds"):
            value = getattr(p, name)
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{owner}: params.{name} must be finite, found {value.tolist()}")

        def scalar(name: str, ok: Callable[[float], bool], valid: str, unit: str = "") -> None:
            x = float(getattr(p, name))
            if not (np.isfinite(x) and ok(x)):
                raise ValueError(f"{owner}: params.{name} must be {valid}{unit}, found {x:g}")

        scalar("capacity", lambda x: x > 0, "> 0", " (MWh)")
        scalar("power", lambda x: x > 0, "> 0", " (MW)")
        scalar("eta", lambda x: 0 < x <= 1, "in (0, 1]", " (one-way efficiency, the square root of the round trip)")
        scalar("ar_coef", lambda x: abs(x) < 1, "in (-1, 1) (|ar_coef| < 1: a stationary AR(1) price deviation)")
        scalar("noise_sd", lambda x: x >= 0, ">= 0", " (EUR/MWh)")
        scalar("initial_soc", lambda x: 0 <= x <= 1, "in [0, 1]")
        scalar("penalty", lambda x: x >= 0, ">= 0", " (EUR/MWh)")
        if np.any(p.thresholds < 0):
            raise ValueError(f"{owner}: params.thresholds (alpha) must be >= 0, found {p.thresholds.tolist()}")
        if np.any(np.abs(p.rates) > 1):
            raise ValueError(
                f"{owner}: params.rates must lie in [-1, 1] (fractions of the power), found {p.rates.tolist()}"
            )

    # ------------------------------------------------------------------ dynamics
    def observation(self, state: BatteryState, params: BatteryParams) -> Array:
        """(soc, d / sd_stationary, h / H) ("sdt") or its first two entries ("sd"), float32."""
        sd = jnp.maximum(params.stationary_sd, 1e-12)
        parts = [state.soc, state.deviation / sd]
        if self._encoder.name == "sdt":
            parts.append(state.time / HORIZON)
        return jnp.stack([jnp.asarray(x, jnp.float32) for x in parts])

    def reset(self, key: Array, params: BatteryParams) -> tuple[Array, BatteryState]:
        """soc_0 = ``initial_soc``, d_0 ~ N(0, sd_stationary^2) (``params`` checked: :meth:`check_params`)."""
        self.check_params(params, "BatteryStorage.reset")
        d0 = params.stationary_sd * jax.random.normal(key, (), jnp.float32)
        state = BatteryState(
            soc=jnp.asarray(params.initial_soc, jnp.float32), deviation=d0, time=jnp.zeros((), jnp.int32)
        )
        return self.observation(state, params), state

    def noise(self, key: Array, params: BatteryParams) -> Array:
        """eps ~ N(0, 1), float32 (), as ``noise_from_uniform(uniform(key))``."""
        return self.noise_from_uniform(jax.random.uniform(key, (), jnp.float32), params)

    def noise_from_uniform(self, u: Array, params: BatteryParams) -> Array:
        """eps = ndtri(u + 2^-24): u in [0, 1) is a multiple of 2^-23, so u + 2^-24 is inside (0, 1)."""
        return jax.scipy.special.ndtri(u + jnp.float32(_HALF_ULP))

    def transition(self, noise: Array, state: BatteryState, action: Array, params: BatteryParams):
        """One half hour given eps = ``noise``; ``action`` an int32 index of ``params.rates``, or
        with continuous actions the rate, float32 (1,), clipped into [-1, 1]. Returns (obs, next
        state, reward () EUR, costs (M,): cycles and peak import MWh, done, info with "price",
        "imported", "exported")."""
        h = state.time
        if self._continuous:
            rate = self.action_space.clip(action)[0]
        else:
            rate = params.rates[jnp.asarray(action, jnp.int32)]
        soc_next, imported, exported, cycles = physics(state.soc, rate, params)
        price = params.base_price[h] + state.deviation
        reward = price * (exported - imported)
        costs = jnp.stack([cycles, imported * params.peak[h]])[: self._num_constraints]
        d_next = params.ar_coef * state.deviation + params.noise_sd * noise
        next_state = BatteryState(soc=soc_next, deviation=d_next, time=h + 1)
        done = next_state.time == HORIZON
        info = {"price": price, "imported": imported, "exported": exported}
        return self.observation(next_state, params), next_state, reward, costs, done, info

    def terminal_reward(self, state: BatteryState, params: BatteryParams) -> Array:
        """-penalty * E * max(0, initial_soc - soc_H), EUR."""
        return -params.penalty * params.capacity * jnp.maximum(params.initial_soc - state.soc, 0.0)

    # ------------------------------------------------------------------ discretized exact model
    def grids(self, params: BatteryParams, resolution: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(soc grid (n_soc,), deviation grid (n_dev,)) of the discretized model, float64
        (``params`` checked: :meth:`check_params`)."""
        self.check_params(params, "BatteryStorage.grids")
        n_soc, n_dev = self._check_resolution(
            "BatteryStorage.grids", self.resolution if resolution is None else resolution
        )
        sd = float(np.asarray(params.stationary_sd))
        dev = np.zeros(1) if n_dev == 1 else np.linspace(-DEVIATION_SPAN * sd, DEVIATION_SPAN * sd, n_dev)
        return np.linspace(0.0, 1.0, n_soc), dev

    def to_cmdp(self, params: BatteryParams, resolution: tuple[int, int] | None = None) -> TabularCMDP:
        """The discretized exact model (module docstring) at ``resolution`` = (n_soc, n_dev),
        default the constructor's. Host-side (``params`` concrete). Shapes: S = n_soc * n_dev,
        sparse kernel (S, A, 2 n_dev), rewards (H, S, A), costs (M, H, S, A).

        Requires ``has_exact_model`` (discrete actions); with continuous actions use
        ``env.discrete().to_cmdp(params)``, the model of the discrete ``rates``."""
        if self._continuous:
            raise NotImplementedError(
                "BatteryStorage(continuous_actions=True) has no exact tabular model (to_cmdp): its has_exact_model "
                "is False; env.discrete().to_cmdp(params) is the discretized model of the discrete rates"
            )
        return self._discretized_model(params, resolution)

    def _discretized_model(self, params: BatteryParams, resolution: tuple[int, int] | None) -> TabularCMDP:
        """:meth:`to_cmdp` of the discrete ``rates``, whichever the action space."""
        self.check_params(params, "BatteryStorage.to_cmdp")
        soc_grid, dev_grid = self.grids(params, resolution)
        p = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
        n_s, n_d, a, m = soc_grid.size, dev_grid.size, self.num_rates, self.num_constraints
        soc_next, imported, exported, cycles = (
            np.asarray(x, np.float64) for x in physics(soc_grid[:, None], p.rates[None, :], p)
        )  # (n_soc, A)
        s_lo, s_hi, s_w = interpolation_weights(soc_next, soc_grid)
        dev_w = gaussian_projection(p.ar_coef * dev_grid, float(p.noise_sd), dev_grid)  # (n_dev, n_dev)
        # successors (soc side, next deviation cell): index and probability, (n_soc, n_dev, A, 2, n_dev)
        soc_idx = np.stack([s_lo, s_hi], -1)[:, None, :, :, None]
        soc_p = np.stack([1 - s_w, s_w], -1)[:, None, :, :, None]
        shape = (n_s, n_d, a, 2, n_d)
        nxt = np.broadcast_to(soc_idx * n_d + np.arange(n_d), shape).reshape(n_s * n_d, a, -1)
        prob = np.broadcast_to(soc_p * dev_w[None, :, None, None, :], shape).reshape(n_s * n_d, a, -1)
        price = p.base_price[:, None] + dev_grid[None, :]  # (H, n_dev)
        net = (exported - imported)[None, :, None, :]  # (1, n_soc, 1, A)
        rewards = (price[:, None, :, None] * net).reshape(HORIZON, n_s * n_d, a)
        costs = [
            np.broadcast_to(cycles[None, :, None, :], (HORIZON, n_s, n_d, a)),
            np.broadcast_to(p.peak[:, None, None, None] * imported[None, :, None, :], (HORIZON, n_s, n_d, a)),
        ]
        costs = np.stack(costs[:m]).reshape(m, HORIZON, n_s * n_d, a)
        terminal = -p.penalty * p.capacity * np.maximum(p.initial_soc - soc_grid, 0.0)
        i_lo, i_hi, i_w = interpolation_weights(np.asarray(p.initial_soc), soc_grid)
        beta_soc = np.zeros(n_s)
        np.add.at(beta_soc, [int(i_lo), int(i_hi)], [1 - float(i_w), float(i_w)])
        sd = float(np.sqrt(p.noise_sd**2 / (1 - p.ar_coef**2)))
        beta_dev = gaussian_projection(np.zeros(1), sd, dev_grid)[0]
        return TabularCMDP(
            transitions=SparseTransitions(next_states=jnp.asarray(nxt, jnp.int32), probabilities=jnp.asarray(prob)),
            rewards=rewards,
            costs=costs,
            terminal_rewards=np.repeat(terminal, n_d),
            terminal_costs=np.zeros((m, n_s * n_d)),
            thresholds=p.thresholds,
            initial_distribution=np.outer(beta_soc, beta_dev).reshape(-1),
        )

    def reference_policy(
        self, params: BatteryParams, resolution: tuple[int, int] | None = None
    ) -> tuple[np.ndarray, Any]:
        """The reference policy: ``fhc_jax.solve`` of ``to_cmdp(params, resolution)``, completed.

        ``solve``'s policy is uniform at (h, s) the model never reaches under it, but the
        continuous environment does reach them (e.g. deviation cells between those the
        quadrature nodes feed). There the table takes the action of the Lagrangian-optimal
        deterministic policy at the optimal multipliers nu* (a backward induction on
        r - nu* . g over all states): what the dual solution prices as optimal. Without this
        completion the executed policy ran 1.31 cycles a day at (81, 25) instead of 1.0.

        With continuous actions the table is the same: that of the discrete ``rates``' model
        (A = ``num_rates``).

        Returns:
            (table (H, S, A) float64, the :class:`fhc_jax.cmdp.solve.Solution`).
        """
        from fhc_jax.cmdp.solve import solve

        cmdp = self._discretized_model(params, resolution)
        best = solve(cmdp)
        nu = np.asarray(best.multipliers, np.float64)
        nxt = np.asarray(cmdp.transitions.next_states)
        prob = np.asarray(cmdp.transitions.probabilities, np.float64)
        r = np.asarray(cmdp.rewards, np.float64) - np.einsum("k,khsa->hsa", nu, np.asarray(cmdp.costs, np.float64))
        v = np.asarray(cmdp.terminal_rewards, np.float64) - nu @ np.asarray(cmdp.terminal_costs, np.float64)
        acts = np.zeros(r.shape[:2], np.int64)
        for h in range(HORIZON - 1, -1, -1):
            q = r[h] + (prob * v[nxt]).sum(-1)  # (S, A)
            acts[h], v = q.argmax(-1), q.max(-1)
        reached = np.asarray(best.evaluation.occupancy)[:-1, :, None] > 0
        return np.where(reached, np.asarray(best.policy), np.eye(self.num_rates)[acts]), best

    def reference(self, params: BatteryParams) -> tuple[DiscretizedPolicy | DiscretizedRatePolicy, Array]:
        """The completed optimal policy of the default-resolution discretized model executed in
        the continuous environment (:meth:`reference_policy`), and its multipliers nu*. With
        continuous actions the policy plays the chosen discrete rate as the real action."""
        table, best = self.reference_policy(params)
        return self.discretized_policy(table, params), jnp.asarray(best.multipliers)

    def discretized_policy(
        self, table: Any, params: BatteryParams, resolution: tuple[int, int] | None = None
    ) -> DiscretizedPolicy | DiscretizedRatePolicy:
        """A policy table of ``to_cmdp(params, resolution)`` as a ``policy(key, obs, h)`` of the
        continuous environment: (soc, d) -> the nearest grid point, then the table's action law.
        With continuous actions the policy returns the drawn action's rate ``params.rates[a]``
        as a float32 (1,) action (:class:`~fhc_jax.envs.battery_reference.DiscretizedRatePolicy`);
        otherwise its index.

        Args:
            table: (H, S, A) probabilities (e.g. ``fhc_jax.solve(cmdp).policy``), A = ``num_rates``.
        Raises:
            ValueError: a table of the wrong shape.
        """
        soc_grid, dev_grid = self.grids(params, resolution)
        want = (HORIZON, soc_grid.size * dev_grid.size, self.num_rates)
        table = np.asarray(table, np.float64)
        if table.shape != want:
            raise ValueError(
                f"BatteryStorage.discretized_policy: table must have shape (H, S, A) = {want}, found {table.shape}"
            )
        cdf = np.cumsum(table / table.sum(-1, keepdims=True), -1)
        sd = float(np.asarray(params.stationary_sd))
        pieces = (
            jnp.asarray(cdf, jnp.float32),
            jnp.asarray(soc_grid, jnp.float32),
            jnp.asarray(dev_grid / max(sd, 1e-12), jnp.float32),
        )
        if self._continuous:
            return DiscretizedRatePolicy(*pieces, rates=jnp.asarray(params.rates, jnp.float32))
        return DiscretizedPolicy(*pieces)
