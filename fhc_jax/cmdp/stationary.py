"""How close to its thresholds a *stationary* policy must stay: the cheapest stationary policy a
search finds, judged exactly.

The optimal policies of a finite-horizon CMDP are non-stationary (paper Section 2); a learner
whose policy does not depend on the stage (PPO-Lagrangian and CPO on the paper's Env 1, or on
any observation without h) can only meet a threshold some stationary Markov policy
pi(a | s) meets. Whether one does, and with how much room, is a non-convex question: the
expected cost of a stationary policy is a polynomial of degree H in its probabilities. This
module answers it from above: projected descent from several starts on the exact costs
(:func:`fhc_jax.evaluate`'s backward induction, differentiated by JAX) finds a stationary
policy and reports its exact costs. A found ratio below 1 proves that the thresholds leave a
stationary policy that much room; a ratio above 1 says that none was found (the true floor may
lie lower, though every start ending at the same value is good evidence).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from fhc_jax.cmdp.evaluate import _evaluate, require_cmdp
from fhc_jax.cmdp.model import TabularCMDP

Array = jax.Array

#: the temperature of the smooth maximum over constraints the search descends on
#: (log-sum-exp of T ratios, divided by T); the reported ratio is the exact maximum
SMOOTH_MAX_TEMPERATURE = 50.0


@struct.dataclass
class StationaryFloor:
    """The cheapest stationary policy found (M constraints, S states, A actions).

    Attributes:
        ratio: max_k S^(k)(pi) / alpha^(k) of the policy below, exact, (). Below 1: a
            stationary policy meets every threshold with 1 - ratio of room.
        costs: its exact expected total costs S^(k)(pi), (M,).
        policy: pi(a | s), the same at every stage, (S, A).
        start_ratios: the ratio each start ended at, (starts,) (their spread says how rugged
            the search was).
    """

    ratio: Array
    costs: Array
    policy: Array
    start_ratios: Array


def stationary_cost_floor(
    cmdp: TabularCMDP, starts: int = 8, steps: int = 1000, learning_rate: float = 0.1, seed: int = 0
) -> StationaryFloor:
    """The stationary policy pi(a | s) with the least max_k S^(k)(pi) / alpha^(k) that a search
    finds: Adam on softmax logits theta (S, A) from ``starts`` starts (the uniform policy and
    random logits of scale 2), descending the smooth maximum over constraints of the exact cost
    ratios (paper eq. (2) through backward induction, :func:`fhc_jax.evaluate`), keeping the
    best iterate of every start by its exact ratio.

    Args:
        cmdp: the model; every threshold alpha^(k) > 0.
        starts: >= 1 independent starts (vmapped). steps: >= 1 Adam steps per start.
        learning_rate: > 0. seed: the key of the random starts.
    Returns:
        :class:`StationaryFloor` (float arrays in the model's dtype).
    Raises:
        TypeError: ``cmdp`` is not a :class:`TabularCMDP`.
        ValueError: a threshold <= 0 (the ratio has no meaning), or ``starts``, ``steps`` or
            ``learning_rate`` out of range; before any compilation.
    """
    require_cmdp("stationary_cost_floor", cmdp)
    alpha = np.asarray(cmdp.thresholds, np.float64).reshape(-1)
    if not np.all(np.isfinite(alpha) & (alpha > 0)):
        raise ValueError(
            "stationary_cost_floor: cmdp.thresholds must be finite and > 0 (the ratio S / alpha), "
            f"found {alpha.tolist()}"
        )
    for name, value in (("starts", starts), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"stationary_cost_floor: {name} must be an integer >= 1, found {value!r}")
    if not (isinstance(learning_rate, (int, float)) and np.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"stationary_cost_floor: learning_rate must be a finite number > 0, found {learning_rate!r}")
    return _search(cmdp, int(starts), int(steps), float(learning_rate), int(seed))


def _ratios(cmdp: TabularCMDP, theta: Array) -> Array:
    """The exact cost ratios S^(k)(pi) / alpha^(k) of the stationary pi = softmax(theta), (M,)."""
    policy = jnp.broadcast_to(jax.nn.softmax(theta, axis=-1), (cmdp.horizon, *theta.shape))
    return _evaluate(cmdp, policy).costs / cmdp.thresholds


def _search(cmdp: TabularCMDP, starts: int, steps: int, learning_rate: float, seed: int) -> StationaryFloor:
    s, a = cmdp.num_states, cmdp.num_actions
    dtype = jnp.result_type(cmdp.thresholds.dtype, jnp.float32)
    noise = 2.0 * jax.random.normal(jax.random.key(seed), (starts, s, a), dtype)
    thetas = noise.at[0].set(0.0)  # start 0: the uniform policy
    tx = optax.adam(learning_rate)

    def smooth_max(theta: Array) -> Array:
        r = _ratios(cmdp, theta)
        return jax.nn.logsumexp(SMOOTH_MAX_TEMPERATURE * r) / SMOOTH_MAX_TEMPERATURE

    def one_start(theta0: Array) -> tuple[Array, Array]:
        def step(carry: Any, _: Any) -> tuple[Any, None]:
            theta, opt, best_theta, best = carry
            exact = jnp.max(_ratios(cmdp, theta))
            better = exact < best
            best_theta = jnp.where(better, theta, best_theta)
            best = jnp.where(better, exact, best)
            grad = jax.grad(smooth_max)(theta)
            updates, opt = tx.update(grad, opt, theta)
            return (optax.apply_updates(theta, updates), opt, best_theta, best), None

        init = (theta0, tx.init(theta0), theta0, jnp.asarray(jnp.inf, dtype))
        (theta, _, best_theta, best), _ = jax.lax.scan(step, init, None, length=steps)
        last = jnp.max(_ratios(cmdp, theta))
        return jnp.where(last < best, theta, best_theta), jnp.minimum(last, best)

    best_thetas, ratios = jax.jit(jax.vmap(one_start))(thetas)
    i = int(jnp.argmin(ratios))
    policy = jax.nn.softmax(best_thetas[i], axis=-1)
    costs = _evaluate(cmdp, jnp.broadcast_to(policy, (cmdp.horizon, s, a))).costs
    return StationaryFloor(ratio=ratios[i], costs=costs, policy=policy, start_ratios=ratios)
