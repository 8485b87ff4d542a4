"""How a learner's reported policy is evaluated during training: exactly (``fhc_jax.evaluate``) on
environments with a tabular exact model, by Monte-Carlo rollouts with a fixed key elsewhere, at
the evaluation marks of a run (every ``eval_every`` updates, without ``lax.cond``).

* :class:`EvaluationMetrics`: the evaluations of one run (iteration, reward, costs);
* :func:`scan_with_evaluation`: the training loop's ``lax.scan`` with evaluations at the marks;
* :func:`monte_carlo_evaluator` and :func:`observation_policy`: the Monte-Carlo estimate of a
  policy acting on observations (common random numbers: :data:`EVALUATION_KEY`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.algos.core.policies import softmax_policy
from fhc_jax.rollout import rollout_returns

Array = jax.Array

#: the key of every Monte-Carlo evaluation (common random numbers across iterations and seeds;
#: independent of the training stream)
EVALUATION_KEY = 20_240_601


@struct.dataclass
class EvaluationMetrics:
    """Evaluation of the learner's reported policy at a few iterations: exact
    (``fhc_jax.evaluate``) on environments with a tabular exact model, else the Monte-Carlo mean
    of ``eval_episodes`` episodes (:func:`monte_carlo_evaluator`).

    Attributes (E evaluations, M constraints):
        iteration: number of updates done when evaluated, int32 (E,) (0 = initial policy).
        reward: J(pi), (E,).
        costs: S^(k)(pi), (E, M).
    """

    iteration: Array
    reward: Array
    costs: Array


def evaluation_iterations(num_iterations: int, eval_every: int) -> np.ndarray:
    """Iterations (updates done) at which :func:`scan_with_evaluation` evaluates: 0, E, 2E,
    ..., and always the final one ``num_iterations``. ``eval_every = 0``: 0 and the final."""
    if eval_every <= 0 or eval_every >= num_iterations:
        return np.array([0, num_iterations], dtype=np.int32)
    marks = list(range(0, num_iterations + 1, eval_every))
    if marks[-1] != num_iterations:
        marks.append(num_iterations)
    return np.array(marks, dtype=np.int32)


def scan_with_evaluation(
    step_fn: Callable[[Any, Any], tuple[Any, Any]],
    carry: Any,
    num_iterations: int,
    eval_every: int,
    evaluate_fn: Callable[[Any], tuple[Array, Array]],
    mark_fn: Callable[[Any], Any] | None = None,
) -> tuple[Any, Any, EvaluationMetrics]:
    """Run ``step_fn`` ``num_iterations`` times with ``lax.scan``, evaluating the policy every
    ``eval_every`` iterations, without ``lax.cond`` (which ``vmap`` turns into evaluating
    every iteration): an outer scan over blocks of ``eval_every`` iterations, an inner scan
    inside each block, then a scan over the remainder.

    Args:
        step_fn: ``(carry, None) -> (carry, metrics)``; per-iteration metrics must be small
            (they are stacked: memory O(num_iterations), independent of K and H).
        carry: initial carry.
        num_iterations: static N >= 1.
        eval_every: static E; 0 evaluates only the initial and final carries.
        evaluate_fn: ``carry -> (reward (), costs (M,))``, e.g. exact evaluation of the policy.
        mark_fn: ``carry -> carry`` applied at every mark after the start, before
            ``evaluate_fn`` (e.g. :attr:`Learner.mark`, the selection of the returned policy).
    Returns:
        (final carry, stacked per-iteration metrics with leading axis N, :class:`EvaluationMetrics`).
    """
    marks = evaluation_iterations(num_iterations, eval_every)
    block = int(marks[1] - marks[0]) if len(marks) > 2 else num_iterations
    num_blocks = num_iterations // block
    rem = num_iterations - num_blocks * block

    r0, c0 = evaluate_fn(carry)
    mark_fn = (lambda c: c) if mark_fn is None else mark_fn

    def run_block(c, _):
        c, m = jax.lax.scan(step_fn, c, None, length=block)
        c = mark_fn(c)
        return c, (m, evaluate_fn(c))

    carry, (metrics, (rs, cs)) = jax.lax.scan(run_block, carry, None, length=num_blocks)
    metrics = jax.tree.map(lambda x: x.reshape((num_blocks * block,) + x.shape[2:]), metrics)
    rewards, costs = [r0[None], rs], [c0[None], cs]
    if rem:
        carry, m_rem = jax.lax.scan(step_fn, carry, None, length=rem)
        carry = mark_fn(carry)
        metrics = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), metrics, m_rem)
        r_f, c_f = evaluate_fn(carry)
        rewards.append(r_f[None])
        costs.append(c_f[None])
    evaluations = EvaluationMetrics(
        iteration=jnp.asarray(marks),
        reward=jnp.concatenate(rewards),
        costs=jnp.concatenate(costs),
    )
    return carry, metrics, evaluations


def observation_policy(
    logits_of: Callable[[Array, Array], Array], head: Any = None
) -> Callable[[Array, Array, Array], Array]:
    """``act(key, observation, h)`` sampling the distribution of ``logits_of(observation, h)``:
    ``head.policy`` (``fhc_jax.algos.core.distributions``), or without a head softmax(logits) with
    one uniform per call (:func:`fhc_jax.softmax_policy`, the fast protocol of
    :func:`fhc_jax.rollout`)."""
    return softmax_policy(logits_of) if head is None else head.policy(logits_of)


def monte_carlo_evaluator(
    env, params, num_episodes: int, head: Any = None
) -> Callable[[Callable], tuple[Array, Array]]:
    """``logits_of -> (mean episode reward (), mean episode costs (M,))`` over ``num_episodes``
    episodes of :func:`fhc_jax.rollout_returns` with the fixed :data:`EVALUATION_KEY`
    (traceable; the estimate of what ``fhc_jax.evaluate`` gives exactly on tabular models);
    ``head`` as in :func:`observation_policy`."""

    def fn(logits_of: Callable[[Array, Array], Array]) -> tuple[Array, Array]:
        returns = rollout_returns(
            jax.random.key(EVALUATION_KEY), env, params, observation_policy(logits_of, head), num_episodes
        )
        return jnp.mean(returns.rewards), jnp.mean(returns.costs, axis=0)

    return fn
