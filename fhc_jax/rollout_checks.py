"""The checks of :mod:`fhc_jax.rollout` at the API boundary: what a rollout refuses, where, and
how it says so.

**What is checked** (every public path of :mod:`fhc_jax.rollout`:
:func:`~fhc_jax.rollout.rollout`, :func:`~fhc_jax.rollout.rollout_returns`,
:func:`~fhc_jax.rollout.episode`). Before anything is traced: K a positive int, the
environment's horizon, number of constraints and (discrete) number of actions positive ints,
``params`` of the environment's structure and shapes (values too when concrete:
:meth:`~fhc_jax.envs.base.Environment.check_params`). While tracing (static, free at run
time): a discrete action must be an integer scalar (a float action is refused, never
truncated), rewards () and costs (M,) of the declared shapes, a :func:`fhc_jax.softmax_policy`'s
logits of shape (A,), a policy table of shape (H, S, A). At run time, each at one reduction
per rollout, never a host transfer unless something is wrong:

* **actions of your own policy** outside [0, A): an :class:`~fhc_jax.envs.validation.
  InvalidActionError` naming the action, the stage, the episode and the valid range. Called
  eagerly it is raised directly; inside your ``jax.jit`` (e.g. ``jax.jit(lambda k:
  rollout(k, env, params, policy, 4096))``) it comes from a host callback that runs only when
  an action was out of range, and reaches you as ``jax.errors.JaxRuntimeError`` (a
  ``RuntimeError``) whose message contains the same line; under ``jax.vmap`` the batch is
  reduced first, one report per call (``fhc_jax.envs.validation``). The library's own policies
  (``softmax_policy``, ``table_policy``, ``uniform_random_policy``, the battery's reference)
  draw in range by construction and skip this check;
* **invalid action distributions**: NaN or all -inf logits of a ``softmax_policy`` (at the
  visited states; on the tabulated path at every state), or a traced policy table with a row
  without positive weight. Called eagerly: ``ValueError`` naming the stage (and state).
  Inside traced code the affected episodes' rewards and costs are NaN (all episodes' when a
  tabulated row is invalid): never a plausible number, and no host callback, so a learner whose
  parameters diverged keeps reporting the divergence through its own (non-finite) metrics;
* **non-finite rewards or costs paid by the environment**, called eagerly: ``ValueError``
  naming the environment and the stage (inside traced code they stay NaN).

Box actions are not checked: the environment clips them into its bounds.

The pieces: :class:`Plan` (how a rollout plays its policy and which per-step check it runs,
decided while tracing); :func:`check_signals` and :func:`terminal_signals` (shapes of what the
environment pays, while tracing); :func:`track_first_bad` and :func:`no_bad` (the first invalid
action of an episode, carried through the scan); :func:`report_checks` (one report per rollout
after the scan) and :func:`poisoned`; :func:`check_paid` (non-finite payments, called eagerly).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.envs.base import Environment
from fhc_jax.envs.validation import action_range, is_concrete, raise_if

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one rollout plays its policy, decided while tracing (``fhc_jax.rollout._plan``).

    Attributes:
        owner: the public function, for messages.
        actor: what acts in the loop: the policy, or its table over states (:func:`fhc_jax.rollout.tabulates`).
        fast: the one-uniform fast path (:func:`fhc_jax.rollout.uses_uniforms`).
        per_step: the per-step check: "range" (a policy of yours: actions outside [0, A) are
            reported), "no_action" (:data:`fhc_jax.rollout.NO_ACTION` marks an invalid distribution: rewards
            and costs of the step are NaN) or "" (none: in range by construction, or box actions).
        table: ``actor.table_check()``: (status (3,) int32, describe) or None.
    """

    owner: str
    actor: Any
    fast: bool
    per_step: str
    table: Any


def check_signals(env: Environment, owner: str, method: str, reward: Any, costs: Any) -> None:
    """Static shapes of what an environment pays: a reward () and costs (M,)."""
    if jnp.shape(reward) != ():
        raise ValueError(
            f"{owner}: {env.name}.{method} returned a reward of shape {tuple(jnp.shape(reward))}; "
            "expected () (one number per episode and stage)"
        )
    m = env.num_constraints
    if jnp.shape(costs) != (m,):
        raise ValueError(
            f"{owner}: {env.name}.{method} returned costs of shape {tuple(jnp.shape(costs))}; expected "
            f"(M,) = ({m},) (num_constraints = {m}; for one constraint return jnp.array([c]))"
        )


def terminal_signals(env: Environment, owner: str, state: Any, params: Any) -> tuple[Array, Array]:
    """(r_H, g_H) of a final state, shapes checked."""
    reward, costs = env.terminal_reward(state, params), env.terminal_costs(state, params)
    check_signals(env, owner, "terminal_reward/terminal_costs", reward, costs)
    return reward, costs


def track_first_bad(
    ok: Array, h: Array, action: Array, carry: tuple[Array, Array], horizon: int
) -> tuple[Array, Array]:
    """Update (first invalid stage, its action) of one episode (stage H: none so far)."""
    stage, bad_action = carry
    first = (stage == horizon) & jnp.logical_not(ok)
    return jnp.where(first, h, stage), jnp.where(first, action.astype(jnp.int32), bad_action)


def no_bad(horizon: int) -> tuple[Array, Array]:
    return jnp.asarray(horizon, jnp.int32), jnp.zeros((), jnp.int32)


def report_checks(plan: Plan, env: Environment, first_bad: tuple[Array, Array] | None) -> Array | None:
    """Report what the rollout's checks found (module docstring): ``first_bad`` (first invalid
    stage, its action), each (K,) or () for one episode. Returns the "poison" flag (bool ()),
    True where the results must be made NaN (a traced invalid table), or None."""
    horizon, owner = env.horizon, plan.owner
    poison = None
    if plan.table is not None:
        status, describe = plan.table
        if is_concrete(status):
            raise_if(status, lambda v: f"{owner}: {describe(v)}", ValueError)
        else:
            poison = status[0] > 0
    if first_bad is None or not plan.per_step:
        return poison
    stage, action = (jnp.atleast_1d(x) for x in first_bad)
    i = jnp.argmin(stage)
    status = jnp.stack([(stage[i] < horizon).astype(jnp.int32), stage[i], action[i], i.astype(jnp.int32)])
    episode = (lambda s: f" (episode {s[3]})") if jnp.ndim(first_bad[0]) else (lambda s: "")
    if plan.per_step == "range":
        raise_if(
            status,
            lambda s: (
                f"{owner}: the policy returned action {s[2]} at stage {s[1]}{episode(s)}; "
                f"{env.name} takes {action_range(env)} (Discrete({env.action_space.n}))"
            ),
        )
    elif is_concrete(status):  # "no_action": traced results carry NaN instead
        raise_if(
            status,
            lambda s: (
                f"{owner}: {_policy_name(plan.actor)} has no valid action at stage {s[1]}"
                f"{episode(s)}: its logits are NaN or all -inf"
            ),
            ValueError,
        )
    return poison


def _policy_name(policy: Any) -> str:
    return {"SoftmaxPolicy": "softmax_policy", "TablePolicy": "table_policy"}.get(
        type(policy).__name__, type(policy).__name__
    )


def poisoned(x: Array | None, poison: Array | None) -> Array | None:
    if x is None or poison is None:
        return x
    return jnp.where(poison, jnp.nan, x)


def check_paid(owner: str, env: Environment, rewards: Array, costs: Array, kind: str) -> None:
    """Called eagerly: refuse non-finite rewards or costs paid by the environment. ``kind``:
    "stage" (rewards (..., H), costs (..., H, M)), "terminal" (r_H (...), g_H (..., M)) or
    "total" (episode totals); the message names the stage and episode."""
    if not is_concrete((rewards, costs)):
        return
    r = np.asarray(rewards)
    c = np.asarray(costs).reshape(*r.shape, -1)
    bad_r, bad_c = ~np.isfinite(r), ~np.isfinite(c).all(-1)
    if not (bad_r | bad_c).any():
        return
    where = tuple(int(i) for i in np.argwhere(bad_r | bad_c)[0])
    what = "reward" if bad_r[where] else "cost"
    value = r[where] if bad_r[where] else c[where].tolist()
    episode = where[0] if (kind == "stage" and len(where) > 1) or (kind != "stage" and where) else None
    place = {
        "stage": f"at stage {where[-1] if where else 0}",
        "terminal": f"as its terminal {what} (stage H)",
        "total": "in an episode's total",
    }[kind]
    place += "" if episode is None else f" (episode {episode})"
    raise ValueError(
        f"{owner}: {env.name} paid a non-finite {what} {place}: {value}; the environment or its "
        "params produce it (not the policy, nor a step size)"
    )
