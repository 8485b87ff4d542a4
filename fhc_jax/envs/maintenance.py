"""A machine-maintenance problem with a breakdown budget: the suite's rare-event tasks.

**Model** (stage h = 0..H-1, W wear levels):

* **State**: the wear w in {0, ..., W-1}, or "down" (index W) in the stage after a breakdown.
* **Action**: a in {0, ..., A-1}: 0 = maintain (the wear returns to 0, no output, reward
  ``-maintenance_cost``), k >= 1 = run at speed k.
* **Output and reward**: running at speed k produces k (1 - ``wear_loss`` w) units, sold at the
  time-varying price p_h = 1 + ``price_swing`` sin(2 pi h / H). A machine that is down is
  repaired whatever the action (reward ``-repair_cost``, next state w = 0).
* **Breakdown**: running at speed k in wear w breaks the machine with probability
  q(w, k) = ``base_rate`` k exp(w / ``wear_scale``) (next state "down"); otherwise the wear
  grows by j, drawn uniformly from {0, ..., k}, capped at W - 1. Maintenance never breaks it.
* **Cost** (M = 1), the expected number of breakdowns, two ways:

  - ``costs="probability"``: each stage pays q(w, a), the breakdown probability of its
    decision (a per-stage cost that is a small probability, never an event);
  - ``costs="events"``: each breakdown pays 1 when it happens (in the "down" stage after it,
    and at the end, g_H(down) = 1, for one in the last stage): a rare 0/1 event.

  Both have the same expected total; ``events`` is what a learner sees as a rare, noisy
  signal (most episodes cost 0).
* **Budget**: alpha = C_min + f (C_free - C_min) (``fhc_jax.envs.suite.binding_thresholds``)
  with C_min = 0 (always maintaining never breaks); the suite's tasks take f so that alpha is
  a few percent of H / 100 expected breakdowns.

Start: wear 0. The model is a :class:`~fhc_jax.cmdp.model.TabularCMDP` with dense time-varying
transitions (H, S, A, S), S = W + 1.
"""

from __future__ import annotations

import numpy as np

from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.envs.base import check_int

#: the two ways the breakdowns are paid (module docstring)
COST_KINDS = ("probability", "events")


def _positive(name: str, value: float, low: float = 0.0, high: float = np.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high):
        raise ValueError(f"maintenance: {name} must be a number in [{low:g}, {high:g}], found {value!r}")
    return float(value)


def maintenance(
    costs: str = "probability",
    *,
    horizon: int = 40,
    wear_levels: int = 10,
    num_actions: int = 4,
    base_rate: float = 4e-4,
    wear_scale: float = 2.5,
    wear_loss: float = 0.04,
    price_swing: float = 0.5,
    maintenance_cost: float = 0.3,
    repair_cost: float = 2.0,
    threshold: float = 0.0,
) -> TabularCMDP:
    """The maintenance CMDP (module docstring).

    Args:
        costs: "probability" or "events" (module docstring).
        horizon: H >= 1. wear_levels: W >= 2. num_actions: A >= 2 (maintain + A - 1 speeds).
        base_rate: q(0, 1) in (0, 1]. wear_scale: > 0. wear_loss: in [0, 1 / W).
        price_swing: in [0, 1). maintenance_cost, repair_cost: >= 0.
        threshold: alpha (>= 0); the suite sets it with ``binding_thresholds``.
    Returns:
        TabularCMDP with transitions (H, S, A, S), rewards (H, S, A), costs (1, H, S, A),
        terminal cost 1 in "down" for ``events``, start at wear 0.
    Raises:
        ValueError: an argument out of range (named), or breakdown probabilities above 1.
    """
    if costs not in COST_KINDS:
        raise ValueError(f"maintenance: costs must be one of {COST_KINDS}, found {costs!r}")
    h_ = check_int("maintenance", "horizon", horizon, 1)
    w_ = check_int("maintenance", "wear_levels", wear_levels, 2)
    a_ = check_int("maintenance", "num_actions", num_actions, 2)
    rate = _positive("base_rate", base_rate, 0.0, 1.0)
    scale = _positive("wear_scale", wear_scale, 1e-9)
    loss = _positive("wear_loss", wear_loss, 0.0, (1.0 - 1e-9) / w_)
    swing = _positive("price_swing", price_swing, 0.0, 1.0 - 1e-9)
    c_m = _positive("maintenance_cost", maintenance_cost)
    c_r = _positive("repair_cost", repair_cost)
    alpha = _positive("threshold", threshold)

    s_ = w_ + 1
    down = w_
    wear = np.arange(w_)
    speed = np.arange(a_)
    breakdown = rate * speed[None, :] * np.exp(wear[:, None] / scale)  # (W, A), q(w, 0) = 0
    if breakdown.max() > 1.0:
        raise ValueError(
            f"maintenance: the breakdown probability base_rate k exp(w / wear_scale) reaches "
            f"{breakdown.max():.3g} > 1; lower base_rate or raise wear_scale"
        )
    price = 1.0 + swing * np.sin(2.0 * np.pi * np.arange(h_) / h_)  # (H,)

    kernel = np.zeros((s_, a_, s_))
    kernel[:w_, 0, 0] = 1.0  # maintain
    for k in range(1, a_):
        for w in range(w_):
            kernel[w, k, down] = breakdown[w, k]
            for j in range(k + 1):
                kernel[w, k, min(w + j, w_ - 1)] += (1.0 - breakdown[w, k]) / (k + 1)
    kernel[down, :, 0] = 1.0  # repaired whatever the action
    transitions = np.broadcast_to(kernel, (h_, s_, a_, s_)).copy()

    output = speed[None, :] * (1.0 - loss * wear[:, None])  # (W, A)
    rewards = np.zeros((h_, s_, a_))
    rewards[:, :w_, :] = price[:, None, None] * output[None]
    rewards[:, :w_, 0] = -c_m
    rewards[:, down, :] = -c_r

    stage_costs = np.zeros((1, h_, s_, a_))
    terminal_costs = np.zeros((1, s_))
    if costs == "probability":
        stage_costs[0, :, :w_, :] = breakdown[None]
    else:
        stage_costs[0, :, down, :] = 1.0
        terminal_costs[0, down] = 1.0
    start = np.zeros(s_)
    start[0] = 1.0
    return TabularCMDP(
        transitions=transitions,
        rewards=rewards,
        costs=stage_costs,
        thresholds=np.array([alpha]),
        initial_distribution=start,
        terminal_costs=terminal_costs,
    )
