"""Admission control for a hospital ward with a crowding budget: a tabular environment with its
own observation (a scaled count and the time), an exact model, and a cost paid as it is
realised (a crowded day costs 1 or 0) while the model holds its expectation.

**Model** (stage h = 0..H-1, the days of a planning period):

* **State**: the occupied beds b in {0, ..., B} (B = ``beds``), a :class:`TabularState` with
  ``index = b``; the period starts at b = B // 2.
* **Action**: an admission quota a in {0, ..., Q} (Q = ``max_quota``).
* **Day**: each patient leaves with probability ``discharge`` (so b - L stay, L ~
  Binomial(b, discharge)); then D ~ Binomial(``arrivals``, ``arrival_prob``) patients ask for a
  bed and min(a, D, B - (b - L)) of them are admitted; b' = b - L + admitted.
* **Reward**: one per admission.
* **Constraint**: one per day that ends with more than ``crowded`` beds occupied; the budget
  alpha counts crowded days per period.

With the defaults (H = 28, B = 14, Q = 4, 4 requests a day each with probability 0.7, a
quarter of the patients leaving each day, crowded above 10 beds, alpha = 4) the admissions
range from none to about 76 per period (the unconstrained optimum, at about 14 crowded days);
under the budget the optimum admits about 64 at the optimal multiplier nu* of about 1.5, the
threshold 28% of the way from the least crowding (none) to the unconstrained optimum's.

**Observation** (its own, not an encoder): (b / B, h / H), float32 (2,): a scaled count, as a
user who writes a ward would observe it, not a one-hot state.

**Exact model.** :meth:`WardAdmission.to_cmdp` is the same process as a stationary-in-h
:class:`~fhc_jax.cmdp.model.TabularCMDP` broadcast over the H stages: dense transitions
(H, S, A, S), the expected admissions as rewards (H, S, A) and the probability that the day
ends crowded as the cost (1, H, S, A).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.envs.base import Environment, TabularState, check_int

Array = jax.Array


@struct.dataclass
class AdmissionParams:
    """The ward's numbers (a pytree).

    Attributes:
        thresholds: alpha, crowded days per period, (1,).
        discharge: each patient's probability of leaving per day, ().
        arrival_prob: each potential arrival's probability of asking for a bed, ().
    """

    thresholds: Array
    discharge: Array
    arrival_prob: Array


def _probability(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not 0 <= value <= 1:
        raise ValueError(f"WardAdmission: {name} must be a probability in [0, 1], found {value!r}")
    return float(value)


def binomial_pmf(n: int, p: float) -> np.ndarray:
    """P(X = k) of X ~ Binomial(n, p), k = 0..n, (n + 1,) float64."""
    return np.array([math.comb(n, k) * p**k * (1.0 - p) ** (n - k) for k in range(n + 1)])


class WardAdmission(Environment[TabularState, AdmissionParams]):
    """Admission control for a ward of ``beds`` beds under a crowding budget (module docstring).

    Args (each validated: ``ValueError`` naming it, its range and the value found):
        horizon: H >= 1 days.
        beds: B >= 2 (S = B + 1 occupancy levels).
        max_quota: Q >= 1 (A = Q + 1 quotas).
        arrivals: >= 1 potential arrivals a day.
        arrival_prob: in [0, 1].
        discharge: in [0, 1].
        crowded: in [1, B - 1]: a day ending with more beds occupied is crowded.
        alpha: the budget of crowded days, a finite number >= 0.
    """

    def __init__(
        self,
        horizon: int = 28,
        beds: int = 14,
        max_quota: int = 4,
        *,
        arrivals: int = 4,
        arrival_prob: float = 0.7,
        discharge: float = 0.25,
        crowded: int = 10,
        alpha: float = 4.0,
    ):
        self._horizon = check_int("WardAdmission", "horizon", horizon, 1)
        self.beds = check_int("WardAdmission", "beds", beds, 2)
        self.max_quota = check_int("WardAdmission", "max_quota", max_quota, 1)
        self.arrivals = check_int("WardAdmission", "arrivals", arrivals, 1)
        self.crowded = check_int("WardAdmission", "crowded", crowded, 1, self.beds - 1)
        self._arrival_prob = _probability("arrival_prob", arrival_prob)
        self._discharge = _probability("discharge", discharge)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
            raise ValueError(f"WardAdmission: alpha must be a finite number >= 0, found {alpha!r}")
        if not (np.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"WardAdmission: alpha must be a finite number >= 0, found {alpha!r}")
        self.alpha = float(alpha)

    # ------------------------------------------------------------------ static configuration
    horizon = property(lambda self: self._horizon)
    num_states = property(lambda self: self.beds + 1)
    num_actions = property(lambda self: self.max_quota + 1)
    num_constraints = property(lambda self: 1)
    is_tabular = property(lambda self: True)
    has_exact_model = property(lambda self: True)
    observation_shape = property(lambda self: (2,))
    observation_dtype = property(lambda self: jnp.float32)

    def _static_config(self) -> tuple:
        return (self._horizon, self.beds, self.max_quota, self.arrivals, self.crowded)

    def __repr__(self) -> str:
        return f"WardAdmission(horizon={self._horizon}, beds={self.beds}, max_quota={self.max_quota})"

    @property
    def default_params(self) -> AdmissionParams:
        return AdmissionParams(
            thresholds=jnp.asarray([self.alpha], jnp.float32),
            discharge=jnp.asarray(self._discharge, jnp.float32),
            arrival_prob=jnp.asarray(self._arrival_prob, jnp.float32),
        )

    def thresholds(self, params: AdmissionParams) -> Array:
        return params.thresholds

    # ------------------------------------------------------------------ its own observation
    def observation(self, state: TabularState, params: AdmissionParams) -> Array:
        """(occupied / B, h / H), float32 (2,)."""
        return jnp.stack([state.index / self.beds, state.time / self._horizon]).astype(jnp.float32)

    # ------------------------------------------------------------------ dynamics
    def reset(self, key: Array, params: AdmissionParams) -> tuple[Array, TabularState]:
        state = self.state_at(self.beds // 2, 0)
        return self.observation(state, params), state

    def noise(self, key: Array, params: AdmissionParams) -> Array:
        """One uniform number per bed (who leaves) and per potential arrival, (B + arrivals,)."""
        return jax.random.uniform(key, (self.beds + self.arrivals,), jnp.float32)

    def transition(self, noise: Array, state: TabularState, action: Array, params: AdmissionParams):
        """One day (module docstring); pays the admissions as the reward and whether the day
        ends crowded as the cost, (1,)."""
        occupied = jnp.arange(self.beds) < state.index
        stay = state.index - jnp.sum((noise[: self.beds] < params.discharge) & occupied)
        asked = jnp.sum(noise[self.beds :] < params.arrival_prob)
        admitted = jnp.minimum(jnp.minimum(jnp.asarray(action, jnp.int32), asked), self.beds - stay)
        nxt = self.state_at(stay + admitted, state.time + 1)
        crowded = (nxt.index > self.crowded).astype(jnp.float32)[None]
        return self.observation(nxt, params), nxt, admitted.astype(jnp.float32), crowded, nxt.time == self._horizon, {}

    # ------------------------------------------------------------------ tabular states
    def state_index(self, state: TabularState) -> Array:
        return state.index

    def state_at(self, index: Array, time: Array) -> TabularState:
        return TabularState(index=jnp.asarray(index, jnp.int32), time=jnp.asarray(time, jnp.int32))

    # ------------------------------------------------------------------ exact model
    def to_cmdp(self, params: AdmissionParams) -> TabularCMDP:
        """The exact model (host-side numpy, float64): the same day as :meth:`transition`, with
        the expected admissions as the reward and the probability of a crowded day as the cost."""
        s, a, h = self.num_states, self.num_actions, self._horizon
        discharge, arrival_prob = float(params.discharge), float(params.arrival_prob)
        asked = binomial_pmf(self.arrivals, arrival_prob)  # (arrivals + 1,)
        p, reward = np.zeros((s, a, s)), np.zeros((s, a))
        for b in range(s):
            left = binomial_pmf(b, discharge)  # P(L = k), k = 0..b
            for act in range(a):
                for k, p_left in enumerate(left):
                    stay = b - k
                    for d, p_asked in enumerate(asked):
                        admitted = min(act, d, self.beds - stay)
                        p[b, act, stay + admitted] += p_left * p_asked
                        reward[b, act] += p_left * p_asked * admitted
        crowded = p @ (np.arange(s) > self.crowded).astype(np.float64)  # (S, A)
        initial = np.zeros(s)
        initial[self.beds // 2] = 1.0
        return TabularCMDP(
            transitions=np.broadcast_to(p, (h, s, a, s)).copy(),
            rewards=np.broadcast_to(reward, (h, s, a)).copy(),
            costs=np.broadcast_to(crowded, (1, h, s, a)).copy(),
            terminal_rewards=np.zeros(s),
            terminal_costs=np.zeros((1, s)),
            thresholds=np.asarray(params.thresholds, np.float64),
            initial_distribution=initial,
        )
