"""Diagnosis for issue 13: does an exploratory behaviour policy lift NN-Constrained's worst seed?

NN-Constrained's default loses most of its gap at (stage, state) cells visited less than once
per batch, where the coordinate network has made the policy near-deterministic without ever
trying the optimal action (docs/algorithms/nn_constrained.md). This script tests the remedy the
diagnosis proposed: each update also rolls out ``KE`` episodes of the exploratory behaviour
policy b_h(s) = (1 - eps) pi_h(s) + eps / A and feeds their advantages to the actor only.

* The critics and the multiplier still learn from the K on-policy episodes alone, so they
  evaluate pi, not b.
* The exploratory episodes give TD(0) advantages c_h + V_{h+1}(s_{h+1}) - V_h(s_h) at the
  (h, s, a) they visit, with c_h = r_h - nu g_h (``batch_targets`` with trace 0). Given the
  critic, such an advantage estimates Q^pi - V^pi whatever policy chose a. These are added
  to the per-cell sums that the improved actor's targets average (``cell_stats``).

The learner is NN-Constrained's own code. The script wraps its rollout and update, and for
the duration of one update swaps in a ``cell_stats`` that adds the exploratory samples. KE = 0
runs the same wrapper with no exploration, as the control: its episodes come from a split
key, so they differ from the default run's.

Default gridworld, default ``Config``, 5 seeds in one vmapped program, judged exactly.

Usage::

    python benchmarks/tuning/nn_exploration.py OUT.json KE:EPS[:FORM] ...   (e.g. 0:0 128:0.2 128:0.5:untried)

FORM "uniform" (default) explores with eps / A at every cell; "untried" is the count-based
form, :func:`untried_behaviour`: it spends eps only on the actions that the update's on-policy
batch did not try at the cell, so the exploratory episodes follow pi wherever every action was
already sampled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: judge

from judge import machine_info, train_and_judge

import fhc_jax as fhc
from fhc_jax.algos import learner, nn_losses
from fhc_jax.algos import nn_constrained as nc
from fhc_jax.algos.tabular_rollout import Batch, rollout_policy_table
from fhc_jax.experiment.rundir import write_json_atomic

SEEDS = 5


def _concat(on: Batch, ex: Batch) -> Batch:
    time_major = lambda a, b: jnp.concatenate([a, b], axis=1)
    return Batch(states=time_major(on.states, ex.states), actions=time_major(on.actions, ex.actions),
                 rewards=time_major(on.rewards, ex.rewards), costs=time_major(on.costs, ex.costs),
                 terminal_rewards=jnp.concatenate([on.terminal_rewards, ex.terminal_rewards]),
                 terminal_costs=jnp.concatenate([on.terminal_costs, ex.terminal_costs]))


def _split(batch: Batch, k: int) -> tuple[Batch, Batch]:
    def part(lo, hi):
        t = lambda x: x[:, lo:hi]
        return Batch(states=t(batch.states), actions=t(batch.actions), rewards=t(batch.rewards),
                     costs=t(batch.costs), terminal_rewards=batch.terminal_rewards[lo:hi],
                     terminal_costs=batch.terminal_costs[lo:hi])
    return part(0, k), part(k, batch.actions.shape[1])


@contextlib.contextmanager
def _with_exploratory_advantages(states, actions, advantages):
    """NN-Constrained's ``cell_stats`` with the exploratory samples' advantages added to the
    actor's per-(h, s, a) sums and counts (its critic statistics unchanged), while tracing one
    update."""
    original = nc.cell_stats

    def cell_stats(s, a, fixed, num_states, num_actions, counts_sa=False):
        st = original(s, a, fixed, num_states, num_actions, counts_sa)
        if not counts_sa:
            return st
        h1 = states.shape[0]
        hh = jnp.arange(h1 - 1, dtype=jnp.int32)[:, None]
        cells = states[:-1] * num_actions + actions
        rows = jnp.stack([advantages, jnp.ones_like(advantages)], -1)
        add = jnp.zeros((h1 - 1, num_states * num_actions, 2), advantages.dtype).at[hh, cells].add(rows)
        shape = (h1 - 1, num_states, num_actions)
        return st.replace(advantage_counts=st.advantage_counts + add[..., 1].reshape(shape),
                          advantage_sums=st.advantage_sums + add[..., 0].reshape(shape))

    nc.cell_stats = cell_stats
    try:
        yield
    finally:
        nc.cell_stats = original


def untried_behaviour(table: jax.Array, states: jax.Array, actions: jax.Array, eps: float) -> jax.Array:
    """The count-based behaviour policy, (H, S, A): at each (h, s) where some action was not
    tried in the on-policy batch (``states`` (H+1, K), ``actions`` (H, K)), b = (1 - eps) pi +
    eps u with u uniform over those untried actions; b = pi where every action was tried."""
    num_stages, num_states, num_actions = table.shape
    hh = jnp.arange(num_stages, dtype=jnp.int32)[:, None]
    counts = jnp.zeros((num_stages, num_states * num_actions)).at[hh, states[:-1] * num_actions + actions].add(1.0)
    untried = (counts.reshape(table.shape) == 0).astype(table.dtype)
    n_untried = jnp.sum(untried, axis=-1, keepdims=True)
    e = eps * (n_untried > 0)
    return (1.0 - e) * table + e * untried / jnp.maximum(n_untried, 1.0)


def algorithm(extra: int, eps: float, form: str = "uniform") -> learner.Algorithm:
    """NN-Constrained with ``extra`` exploratory episodes per update: of b = (1 - eps) pi +
    eps / A (``form="uniform"``), or of :func:`untried_behaviour` (``form="untried"``: the
    exploration goes only to the actions the on-policy batch did not try at each cell)."""

    def rollout(key, ts, setup, config):
        k_on, k_ex = jax.random.split(key)
        on = nc.rollout(k_on, ts, setup, config)
        if extra == 0:
            return on
        table = nc._table(setup.nets, ts.actor, setup.obs_table)  # pi, (H, S, A)
        if form == "untried":
            behaviour = untried_behaviour(table, on.states, on.actions, eps)
        else:
            behaviour = (1.0 - eps) * table + eps / table.shape[-1]
        return _concat(on, rollout_policy_table(k_ex, setup.model, behaviour, extra))

    def update(ts, batch, key, setup, config):
        if extra == 0:
            return nc.update(ts, batch, key, setup, config)
        on, ex = _split(batch, config.episodes_per_iteration)
        values = nc._values_at(setup.nets, ts, setup.obs_table, ex.states, "table", None)
        fixed = nn_losses.batch_targets(values, ex, ts.multipliers, setup.thresholds, config.variant, 0.0)
        with _with_exploratory_advantages(ex.states, ex.actions, fixed.advantages):
            return nc.update(ts, on, key, setup, config)

    return dataclasses.replace(nc.ALGORITHM, rollout=rollout, update=update)


def main() -> None:
    out, specs = sys.argv[1], sys.argv[2:]
    env = fhc.GridWorld()
    params = env.default_params
    config = nc.Config()
    result = {"benchmark": "nn_exploration", "seeds": SEEDS, "config": "nn_constrained.Config()", "runs": [],
              "machine": machine_info()}
    for spec in specs:
        parts = spec.split(":")
        extra, eps, form = int(parts[0]), float(parts[1]), parts[2] if len(parts) > 2 else "uniform"
        if form not in ("uniform", "untried"):
            raise SystemExit(f"nn_exploration: the form in KE:EPS:FORM must be 'uniform' or 'untried', found {form!r}")
        _, make_train, policy_table, _ = learner.interface(algorithm(extra, eps, form))
        j = train_and_judge(env, params, make_train(env, params, config),
                            lambda st, pt=policy_table: pt(st, env, params), SEEDS)
        fractions = [r["reward_fraction_of_optimum"] for r in j.rows]
        row = {"exploratory_episodes": extra, "eps": eps, "form": form, "rows": j.rows, "worst_fraction": min(fractions),
               "mean_fraction": float(np.mean(fractions)), "cost_ok_seeds": sum(r["cost_ok"] for r in j.rows),
               "learned_multipliers": np.asarray(j.out.metrics.multipliers[:, -1, 0]).round(4).tolist(),
               "wall_s": j.wall_s}
        result["runs"].append(row)
        print(f"KE={extra} eps={eps} {form}: worst {100 * row['worst_fraction']:.1f}% mean {100 * row['mean_fraction']:.1f}% "
              f"cost ok {row['cost_ok_seeds']}/{SEEDS} costs {[round(r['exact_cost'], 2) for r in j.rows]} "
              f"nu {row['learned_multipliers']} wall {j.wall_s:.0f} s", flush=True)
        write_json_atomic(out, result)


if __name__ == "__main__":
    main()
