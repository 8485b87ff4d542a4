"""Why does NN-Constrained stop short of the constrained optimum? Exact diagnosis on the
default gridworld.

Everything below is exact (float64 backward induction and forward occupancy on the
``TabularCMDP`` arrays), except the learner's own estimates it is compared with.

1. **Final policy.** NN-Constrained (default ``Config``) is trained on one seed in chunks of
   ``eval_every`` updates with ``make_learner`` (the same ``lax.scan`` of ``step`` that
   ``make_train`` runs, so the same final state), and its reported policy pi
   (``policy_table``) is compared with pi* of ``fhc_jax.solve`` through the Lagrangian
   L_nu(pi) = E[sum_h (r_h - nu . g_h) + (r_H - nu . g_H)]:

   * the performance-difference decomposition at nu*,
     L(pi*) - L(pi) = sum_h E_{s ~ d_h^{pi*}} [sum_a pi*_h(a|s) Q^pi_h(s, a) - V^pi_h(s)]
     (per stage; asserted to sum to the exact gap), split by how often the learner's batch
     visits each (h, s) (K d_h^pi(s)) and how often it tries pi*'s action there
     (K d_h^pi(s) pi_h(a*|s));
   * the greedy gap per stage, sum_s d_h^pi(s) (max_a Q^pi_h(s, a) - V^pi_h(s));
   * entropies per stage (pi under d^pi, pi under d^{pi*}, pi* under d^{pi*});
   * the best response (backward induction at a fixed nu) to the learned multiplier and to
     nu* -/+ eps: its reward and cost. A best response to the learned nu with cost > alpha
     means the low multiplier is the actor's doing (it is not a best response).

2. **Over training.** At each chunk end: the exact Lagrangian gap at nu* of the reported
   (Polyak) policy and of the current actor, the greedy gap, the learned multiplier and the
   fraction of the optimal reward; and a probe of the NEXT update (the batch the learner
   would draw, then its update, without changing the run):

   * critic: the learner's visit-averaged advantages A_hat_h(s, a) against the exact
     advantages of the behaviour policy at the learner's nu, A_h(s, a) = Q_h(s, a) -
     sum_a' f_h(a'|s) Q_h(s, a') (f: the batch's action frequencies in (h, s)), over the
     sampled (h, s, a), weighted by their visits: correlation and mean abs error, and the
     same error split into the critic's bias (the exact expectation of the lambda-return
     given the learner's critic V, :func:`lambda_q`) and the sampling noise;
   * actor: how much of the target step q = softmax(z + eta A_hat) the network realises
     (slope and correlation of the realised log-policy change on the target change at the
     visited (h, s)), and the exact change of L_nu (learner's nu) of: the realised update,
     the target table (q at the visited (h, s), pi elsewhere), and the same mirror-descent
     step with the exact advantages (all (h, s), and only the visited ones).

3. **FH-Constrained** (tabular, default ``Config``) on the same seed: the analysis of 1 for
   its final policy.

Usage::

    python benchmarks/nn_diagnosis.py [--seeds 0] [--iterations 1500] [--fh] [--set field=value ...]

Writes ``benchmarks/results/nn_diagnosis.json`` (``--out``) and prints a report.
"""

from __future__ import annotations

import argparse
import ast
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import fhc_jax as fhc
from fhc_jax.algos import fh_constrained as fc
from fhc_jax.algos import nn_constrained as nc
from fhc_jax.algos.hyperparameters import PowerSchedule
from fhc_jax.algos.nn_losses import advantage_targets, batch_targets, cell_stats
from fhc_jax.algos.returns import visit_averaged_advantages
from fhc_jax.envs import GridWorld
from fhc_jax.experiment.machine import machine_info
from fhc_jax.experiment.rundir import write_json_atomic

# --------------------------------------------------------------------------- exact tools (numpy, float64)


class Model:
    """The TabularCMDP as float64 numpy arrays (dense kernel).

    Attributes (H stages, S states, A actions, M constraints):
        P: p(s, a, s'), (S, A, S) or (H, S, A, S). r: (H, S, A). g: (M, H, S, A).
        rT: (S,). gT: (M, S). beta: (S,). alpha: (M,).
    """

    def __init__(self, cmdp: fhc.TabularCMDP):
        with jax.enable_x64(True):
            c64 = cmdp.astype(jnp.float64)
            self.P = np.asarray(c64.dense_transitions(), np.float64)
            self.r = np.asarray(c64.expected_rewards(), np.float64)
            self.g = np.asarray(c64.expected_costs(), np.float64)
        self.rT = np.asarray(cmdp.terminal_rewards, np.float64)
        self.gT = np.asarray(cmdp.terminal_costs, np.float64)
        self.beta = np.asarray(cmdp.initial_distribution, np.float64)
        self.alpha = np.asarray(cmdp.thresholds, np.float64)
        self.H, self.S, self.A = self.r.shape

    def kernel(self, h: int) -> np.ndarray:
        return self.P[h] if self.P.ndim == 4 else self.P

    def lagrangian(self, nu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(c (H, S, A), cT (S,)) = r - nu . g, r_H - nu . g_H (as ``fhc_jax.solve`` scalarises)."""
        nu = np.asarray(nu, np.float64).reshape(-1)
        return self.r - np.einsum("m,mhsa->hsa", nu, self.g), self.rT - nu @ self.gT

    def next_value(self, h: int, v: np.ndarray) -> np.ndarray:
        """sum_s' p_h(s, a, s') v(s'), (S, A)."""
        return np.einsum("sat,t->sa", self.kernel(h), v)

    def q_values(self, pi: np.ndarray, c: np.ndarray, cT: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Q^pi_h(s, a) (H, S, A) and V^pi_h(s) (H+1, S) of the signal (c, cT)."""
        q = np.empty((self.H, self.S, self.A))
        v = np.empty((self.H + 1, self.S))
        v[self.H] = cT
        for h in range(self.H - 1, -1, -1):
            q[h] = c[h] + self.next_value(h, v[h + 1])
            v[h] = np.sum(pi[h] * q[h], axis=-1)
        return q, v

    def occupancy(self, pi: np.ndarray) -> np.ndarray:
        """d_h(s), (H+1, S)."""
        d = np.empty((self.H + 1, self.S))
        d[0] = self.beta
        for h in range(self.H):
            d[h + 1] = np.einsum("sa,sat->t", d[h][:, None] * pi[h], self.kernel(h))
        return d

    def value(self, pi: np.ndarray, nu: np.ndarray | None = None) -> dict[str, float]:
        """Exact reward J, cost S (constraint 0) and, with nu, the Lagrangian L_nu."""
        d = self.occupancy(pi)
        x = d[:-1, :, None] * pi
        j = float(np.sum(x * self.r) + d[-1] @ self.rT)
        costs = np.einsum("hsa,mhsa->m", x, self.g) + self.gT @ d[-1]
        out = {"reward": j, "cost": float(costs[0]), "costs": costs}
        if nu is not None:
            out["lagrangian"] = j - float(np.asarray(nu).reshape(-1) @ costs)
        return out

    def best_response(self, nu: np.ndarray) -> np.ndarray:
        """A deterministic optimal policy for the Lagrangian reward at fixed nu, (H, S, A)."""
        c, cT = self.lagrangian(nu)
        pi = np.zeros((self.H, self.S, self.A))
        v = cT
        for h in range(self.H - 1, -1, -1):
            q = c[h] + self.next_value(h, v)
            a = np.argmax(q, axis=-1)
            pi[h, np.arange(self.S), a] = 1.0
            v = q[np.arange(self.S), a]
        return pi

    def lambda_q(self, pi: np.ndarray, c: np.ndarray, cT: np.ndarray, critic: np.ndarray, lam: float) -> np.ndarray:
        """The exact expectation of the learner's lambda-return given (h, s, a), with its
        critic V (H+1, S) in the bootstrap: G_h = c_h + (1 - lam) V_{h+1}(s') + lam G_{h+1},
        G_H = c_H (``fhc_jax.algos.returns.lagrangian_targets``), (H, S, A)."""
        q = np.empty((self.H, self.S, self.A))
        g_next = cT  # E[G_{h+1} | s_{h+1}]
        for h in range(self.H - 1, -1, -1):
            u = (1.0 - lam) * critic[h + 1] + lam * g_next
            q[h] = c[h] + self.next_value(h, u)
            g_next = np.sum(pi[h] * q[h], axis=-1)
        return q


def entropy(pi: np.ndarray) -> np.ndarray:
    """-sum_a pi log pi, (..., )."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(pi > 0, pi * np.log(pi), 0.0), axis=-1)


def wstats(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, float]:
    """Weighted correlation, mean abs error |x - y|, and weighted std of y (the signal)."""
    w = w / np.sum(w)
    mx, my = np.sum(w * x), np.sum(w * y)
    cov = np.sum(w * (x - mx) * (y - my))
    sx, sy = np.sqrt(np.sum(w * (x - mx) ** 2)), np.sqrt(np.sum(w * (y - my) ** 2))
    return {"corr": float(cov / max(sx * sy, 1e-300)), "mae": float(np.sum(w * np.abs(x - y))),
            "signal_std": float(sy), "estimate_std": float(sx)}


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


VISIT_BINS = (0.0, 1.0, 10.0, 100.0, np.inf)


def analyse_policy(model: Model, pi: np.ndarray, nu_learned: float, sol: Any, k: int) -> dict[str, Any]:
    """Part 1 for one policy pi (H, S, A) with the learner's final multiplier."""
    nu_star = np.asarray(sol.multipliers, np.float64)
    pi_star = np.asarray(sol.policy, np.float64)
    c, cT = model.lagrangian(nu_star)
    q, v = model.q_values(pi, c, cT)
    d_pi, d_star = model.occupancy(pi), model.occupancy(pi_star)
    val = model.value(pi, nu_star)
    val_star = model.value(pi_star, nu_star)
    gap = val_star["lagrangian"] - val["lagrangian"]

    # performance difference: per (h, s), then per stage
    per_hs = d_star[:-1] * (np.sum(pi_star * q, -1) - v[:-1])  # (H, S)
    per_stage = per_hs.sum(-1)
    assert abs(per_stage.sum() - gap) <= 1e-8 * max(1.0, abs(gap)), (per_stage.sum(), gap)
    greedy = np.sum(d_pi[:-1] * (q.max(-1) - v[:-1]), -1)  # (H,)
    # where the loss sits: expected batch visits of (h, s), and of pi*'s action there
    a_star = np.argmax(pi_star, -1)
    visits = k * d_pi[:-1]
    tries = visits * np.take_along_axis(pi, a_star[..., None], -1)[..., 0]

    def binned(x: np.ndarray) -> list[dict[str, float]]:
        rows = []
        for lo, hi in zip(VISIT_BINS[:-1], VISIT_BINS[1:]):
            m = (x >= lo) & (x < hi)
            rows.append({"range": [lo, None if np.isinf(hi) else hi], "loss": float(per_hs[m].sum()),
                         "share_of_gap": float(per_hs[m].sum() / gap) if gap > 0 else None,
                         "d_star_mass": float(d_star[:-1][m].sum() / model.H), "cells": int(m.sum())})
        return rows

    # how deterministic pi is where pi* goes, and whether it still tries a*
    p_astar = np.take_along_axis(pi, a_star[..., None], -1)[..., 0]
    w_star = d_star[:-1] / model.H
    collapse = {
        "d_star_weighted_pi_of_a_star": float(np.sum(w_star * p_astar)),
        "d_star_mass_pi_a_star_below_0.05": float(np.sum(w_star * (p_astar < 0.05))),
        "loss_where_pi_a_star_below_0.05": float(per_hs[p_astar < 0.05].sum()),
        "d_star_mass_pi_max_above_0.95": float(np.sum(w_star * (pi.max(-1) > 0.95))),
        "d_pi_mass_pi_max_above_0.95": float(np.sum(d_pi[:-1] / model.H * (pi.max(-1) > 0.95))),
        "d_star_mass_greedy_action_is_a_star": float(np.sum(w_star * (np.argmax(q, -1) == a_star))),
    }
    rare = visits < 1.0  # (h, s) the batch reaches less than once on average
    if (w_star * rare).sum() > 0:
        wr = w_star * rare / (w_star * rare).sum()
        collapse["rarely_visited_d_star_mass"] = float((w_star * rare).sum())
        collapse["rarely_visited_entropy_under_d_star"] = float(np.sum(wr * entropy(pi)))
        collapse["rarely_visited_pi_of_a_star_under_d_star"] = float(np.sum(wr * p_astar))
        collapse["rarely_visited_median_pi_of_a_star"] = float(np.median(p_astar[rare & (w_star > 1e-4 / model.H)]))

    # best responses: to the learned multiplier and just below/above nu*
    br = {}
    for name, nu in (("learned", np.array([nu_learned])), ("nu_star_minus", nu_star - 1e-6), ("nu_star_plus", nu_star + 1e-6)):
        b = model.value(model.best_response(nu), nu)
        br[name] = {"nu": float(nu[0]), "reward": b["reward"], "cost": b["cost"], "lagrangian": b["lagrangian"]}
    at_learned = model.value(pi, np.array([nu_learned]))
    c_l, cT_l = model.lagrangian(np.array([nu_learned]))
    q_l, v_l = model.q_values(pi, c_l, cT_l)
    return {
        "reward": val["reward"], "cost": val["cost"], "fraction_of_optimum": val["reward"] / sol.reward,
        "learned_multiplier": float(nu_learned), "optimal_multiplier": float(nu_star[0]),
        "lagrangian_gap_at_nu_star": float(gap),
        "reward_gap": float(sol.reward - val["reward"]),
        "reward_gap_from_unused_budget": float(nu_star[0] * (float(sol.costs[0]) - val["cost"])),
        "pdl_per_stage": per_stage.tolist(),
        "greedy_gap_per_stage": greedy.tolist(),
        "greedy_gap_total": float(greedy.sum()),
        "loss_by_expected_batch_visits": binned(visits),
        "loss_by_expected_tries_of_a_star": binned(tries),
        "collapse": collapse,
        "entropy_per_stage": {
            "pi_under_d_pi": np.sum(d_pi[:-1] * entropy(pi), -1).tolist(),
            "pi_under_d_star": np.sum(d_star[:-1] * entropy(pi), -1).tolist(),
            "pi_star_under_d_star": np.sum(d_star[:-1] * entropy(pi_star), -1).tolist(),
        },
        "best_response": br,
        "at_learned_multiplier": {"lagrangian_gap_to_best_response": br["learned"]["lagrangian"] - at_learned["lagrangian"],
                                  "greedy_gap_total": float(np.sum(d_pi[:-1] * (q_l.max(-1) - v_l[:-1])))},
    }


# --------------------------------------------------------------------------- learner probes


def make_probe(setup: nc.Setup, cfg: nc.Config):
    """carry -> what the NEXT update sees and does (the run itself is not advanced)."""
    nets, obs = setup.nets, setup.obs_table
    s_count, a_count = setup.num_states, setup.num_actions

    @jax.jit
    def probe(carry):
        state = carry.state
        keys = jax.random.split(carry.key, 2)  # as learner.step (update_keys = 0)
        batch = nc.rollout(keys[1], state, setup, cfg)
        hh = jnp.arange(batch.states.shape[0])[:, None]
        v_tab = nets.critic.apply(state.critic, obs)
        w_tab = nets.cost_critic.apply(state.cost_critic, obs)
        values = jnp.concatenate([v_tab, w_tab], -1)[hh, batch.states]
        fixed = batch_targets(values, batch, state.multipliers, setup.thresholds, cfg.variant, cfg.trace)
        stats = cell_stats(batch.states, batch.actions, fixed, s_count, a_count, counts_sa=True)
        z_old = nets.actor.apply(state.actor, obs[:-1])
        q, _ = advantage_targets(z_old, stats, cfg.logit_step)
        new_state, _ = nc.update(state, batch, None, setup, cfg)
        return {
            "counts_sa": stats.advantage_counts,
            "adv_hat": visit_averaged_advantages(stats.advantage_counts, stats.advantage_sums),
            "z_old": z_old, "z_new": nets.actor.apply(new_state.actor, obs[:-1]), "q": q,
            "critic": v_tab[..., 0], "nu": state.multipliers,
            "reported": jax.nn.softmax(nc.logits(state, setup), -1),
        }

    return probe


def probe_report(model: Model, out: dict, sol: Any, cfg: nc.Config) -> dict[str, Any]:
    """Part 2 at one chunk end (numpy; see the module docstring)."""
    f64 = lambda x: np.asarray(x, np.float64)
    counts, adv_hat, z_old, z_new, qt = (f64(out[k]) for k in ("counts_sa", "adv_hat", "z_old", "z_new", "q"))
    nu = f64(out["nu"])
    nu_star = np.asarray(sol.multipliers, np.float64)
    pi_old, pi_new, reported = softmax(z_old), softmax(z_new), f64(out["reported"])
    pi_old = pi_old / pi_old.sum(-1, keepdims=True)
    c, cT = model.lagrangian(nu)
    q_ex, v_ex = model.q_values(pi_old, c, cT)
    n_s = counts.sum(-1)  # (H, S)
    visited = n_s > 0
    freq = counts / np.maximum(n_s, 1.0)[..., None]
    adv_ex = q_ex - np.sum(freq * q_ex, -1, keepdims=True)  # against the batch's action mix
    q_lam = model.lambda_q(pi_old, c, cT, f64(out["critic"]), float(cfg.trace))
    adv_lam = q_lam - np.sum(freq * q_lam, -1, keepdims=True)  # E[A_hat | critic] (to first order)
    m = counts > 0
    w = counts[m]
    # (h, s) where the batch tried >= 2 actions: the only cells where A_hat is not 0 by construction
    contested = m.sum(-1) >= 2
    mc = m & contested[..., None]
    critic = {
        "estimate_vs_exact": wstats(adv_hat[m], adv_ex[m], w),
        "contested_estimate_vs_exact": wstats(adv_hat[mc], adv_ex[mc], counts[mc]),
        "contested_critic_bias_vs_exact": wstats(adv_lam[mc], adv_ex[mc], counts[mc]),
        "contested_estimate_vs_critic_expectation": wstats(adv_hat[mc], adv_lam[mc], counts[mc]),
        "contested_sign_agreement": float(np.sum(counts[mc] * (np.sign(adv_hat[mc]) == np.sign(adv_ex[mc])))
                                          / counts[mc].sum()),
        "critic_bias_vs_exact": wstats(adv_lam[m], adv_ex[m], w),
        "estimate_vs_critic_expectation": wstats(adv_hat[m], adv_lam[m], w),
        "sampled_cells": int(m.sum()), "visited_states": int(visited.sum()),
        "contested_share_of_visits": float(n_s[contested].sum() / n_s.sum()),
        "singleton_states_share": float(np.mean(n_s[visited] == 1)),
        "states_with_one_action_share": float(np.mean((m.sum(-1) == 1)[visited])),
    }
    # critic V against exact V^pi at visited (h, s)
    vv = f64(out["critic"])[:-1]
    critic["value_vs_exact"] = wstats(vv[visited], v_ex[:-1][visited], n_s[visited])

    # actor: realised vs target log-policy change at visited (h, s), centred under pi_old
    lp_old, lp_new = np.log(pi_old), np.log(pi_new)
    tgt = np.log(np.maximum(qt, 1e-30)) - lp_old
    real = lp_new - lp_old
    centre = lambda x: x - np.sum(pi_old * x, -1, keepdims=True)
    tgt_c, real_c = centre(tgt), centre(real)
    ws = n_s[..., None] * pi_old
    num = np.sum((ws * tgt_c * real_c)[visited])
    den = np.sum((ws * tgt_c * tgt_c)[visited])
    nrm_r = np.sum((ws * real_c * real_c)[visited])
    unvisited_change = float(np.sqrt(np.mean(np.sum(pi_old * real_c ** 2, -1)[~visited]))) if (~visited).any() else 0.0
    kl = lambda p, r: np.sum(p * (np.log(np.maximum(p, 1e-30)) - np.log(r)), -1)

    # exact improvement of L_nu for the realised update vs the tabular steps
    base = model.value(pi_old, nu)["lagrangian"]
    q_table = np.where(visited[..., None], qt, pi_old)
    md_exact = softmax(z_old + cfg.logit_step * (q_ex - v_ex[:-1][..., None]))
    md_exact_visited = np.where(visited[..., None], md_exact, pi_old)
    step = lambda adv: np.where(visited[..., None], softmax(z_old + cfg.logit_step * adv), pi_old)
    gain = lambda p: model.value(p, nu)["lagrangian"] - base
    actor = {
        "realised_fraction_of_target_step": float(num / den) if den > 0 else None,
        "realised_target_corr": float(num / np.sqrt(den * nrm_r)) if den > 0 and nrm_r > 0 else None,
        "rms_change_unvisited": unvisited_change,
        "kl_target_old": float(np.sum(n_s * kl(qt, pi_old) * visited) / n_s.sum()),
        "kl_target_new": float(np.sum(n_s * kl(qt, pi_new) * visited) / n_s.sum()),
        "gain_realised": gain(pi_new),
        "gain_target_table": gain(q_table),
        "gain_exact_step_sampled_cells": gain(step(np.where(m, adv_ex, 0.0))),
        "gain_critic_expectation_step_sampled_cells": gain(step(np.where(m, adv_lam, 0.0))),
        "gain_exact_step_visited": gain(md_exact_visited),
        "gain_exact_step_all": gain(md_exact),
    }
    # the policy itself
    c_s, cT_s = model.lagrangian(nu_star)
    star_l = model.value(np.asarray(sol.policy), nu_star)["lagrangian"]
    cur, rep = model.value(pi_old, nu_star), model.value(reported, nu_star)
    qs, vs = model.q_values(reported, c_s, cT_s)
    d_rep = model.occupancy(reported)
    d_cur = model.occupancy(pi_old)
    return {
        "multiplier": float(nu[0]),
        "reported": {"reward": rep["reward"], "cost": rep["cost"], "fraction_of_optimum": rep["reward"] / sol.reward,
                     "lagrangian_gap_at_nu_star": star_l - rep["lagrangian"],
                     "greedy_gap_at_nu_star": float(np.sum(d_rep[:-1] * (qs.max(-1) - vs[:-1]))),
                     "entropy": float(np.sum(d_rep[:-1] * entropy(reported)) / model.H)},
        "current": {"reward": cur["reward"], "cost": cur["cost"], "fraction_of_optimum": cur["reward"] / sol.reward,
                    "lagrangian_gap_at_nu_star": star_l - cur["lagrangian"],
                    "greedy_gap_at_learner_nu": float(np.sum(d_cur[:-1] * (q_ex.max(-1) - v_ex[:-1]))),
                    "entropy": float(np.sum(d_cur[:-1] * entropy(pi_old)) / model.H)},
        "critic": critic,
        "actor": actor,
    }


# --------------------------------------------------------------------------- runs


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``field=value`` overrides of nn_constrained.Config (``actor_step.init=0.1`` for schedules)."""
    out: dict[str, Any] = {}
    for item in items:
        key, _, raw = item.partition("=")
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def build_config(base: Any, sets: dict[str, Any]) -> Any:
    plain = {k: v for k, v in sets.items() if "." not in k}
    cfg = base.replace(**plain) if plain else base
    for key, value in sets.items():
        if "." in key:
            field, sub = key.split(".", 1)
            sched = getattr(cfg, field)
            if not isinstance(sched, PowerSchedule):
                raise ValueError(f"--set {key}: {field} is not a schedule")
            cfg = cfg.replace(**{field: PowerSchedule(**{**vars(sched), sub: float(value)})})
    return cfg


def train_nn(env, params, cfg: nc.Config, seed: int, model: Model, sol: Any, chunk: int) -> tuple[Any, list[dict]]:
    learner = nc.make_learner(env, params, cfg)
    setup = nc.setup(env, params, cfg)
    probe = make_probe(setup, cfg)

    @jax.jit
    def run_chunk(carry):
        return jax.lax.scan(lambda c, _: learner.step(c, cfg), carry, None, length=chunk)[0]

    carry = jax.jit(lambda k: learner.init(k, cfg))(jax.random.key(seed))
    track = []
    n = 0
    t0 = time.perf_counter()
    while True:
        rep = probe_report(model, jax.device_get(probe(carry)), sol, cfg)
        rep["iteration"] = n
        track.append(rep)
        print(f"  [{time.perf_counter() - t0:6.0f}s] n={n:5d} nu={rep['multiplier']:.3f} "
              f"reported {100 * rep['reported']['fraction_of_optimum']:.1f}% cost {rep['reported']['cost']:.2f} "
              f"Lgap* {rep['reported']['lagrangian_gap_at_nu_star']:.2f} | current Lgap* "
              f"{rep['current']['lagrangian_gap_at_nu_star']:.2f} greedy(nu) {rep['current']['greedy_gap_at_learner_nu']:.2f} "
              f"H {rep['current']['entropy']:.2f} | contested A corr {rep['critic']['contested_estimate_vs_exact']['corr']:.2f} "
              f"(critic {rep['critic']['contested_critic_bias_vs_exact']['corr']:.2f}) | dL step: learner "
              f"{rep['actor']['gain_target_table']:.3f} exact@sampled {rep['actor']['gain_exact_step_sampled_cells']:.3f} "
              f"realised {rep['actor']['gain_realised']:.3f}", flush=True)
        if n >= cfg.num_iterations:
            break
        if n + chunk > cfg.num_iterations:
            raise ValueError(f"num_iterations ({cfg.num_iterations}) must be a multiple of the chunk ({chunk})")
        carry = run_chunk(carry)
        n += chunk
    return carry.state, track


def stage_blocks(x: list[float], size: int = 10) -> list[float]:
    a = np.asarray(x)
    return [float(a[i:i + size].sum()) for i in range(0, len(a), size)]


def print_analysis(name: str, a: dict, model: Model) -> None:
    print(f"\n== {name}: reward {a['reward']:.3f} ({100 * a['fraction_of_optimum']:.1f}% of optimum), cost {a['cost']:.2f}, "
          f"nu {a['learned_multiplier']:.3f} (nu* {a['optimal_multiplier']:.3f})")
    print(f"   reward gap {a['reward_gap']:.3f} = Lagrangian gap at nu* {a['lagrangian_gap_at_nu_star']:.3f} "
          f"+ unused budget {a['reward_gap_from_unused_budget']:.3f}")
    print(f"   PDL per 10 stages:    " + " ".join(f"{x:6.3f}" for x in stage_blocks(a["pdl_per_stage"])))
    print(f"   greedy gap /10 stages:" + " ".join(f"{x:6.3f}" for x in stage_blocks(a["greedy_gap_per_stage"])))
    ent = a["entropy_per_stage"]
    mean10 = lambda x: [v / 10 for v in stage_blocks(x)]
    print(f"   entropy pi|d_pi /10:  " + " ".join(f"{x:6.3f}" for x in mean10(ent["pi_under_d_pi"])))
    print(f"   entropy pi|d* /10:    " + " ".join(f"{x:6.3f}" for x in mean10(ent["pi_under_d_star"])))
    print(f"   entropy pi*|d* /10:   " + " ".join(f"{x:6.3f}" for x in mean10(ent["pi_star_under_d_star"])))
    for key, label in (("loss_by_expected_batch_visits", "K d_pi(h,s)"), ("loss_by_expected_tries_of_a_star", "K d_pi pi(a*)")):
        print(f"   loss by {label}: " + "; ".join(
            f"[{r['range'][0]:g},{'inf' if r['range'][1] is None else format(r['range'][1], 'g')}) {r['loss']:.3f} "
            f"({100 * (r['share_of_gap'] or 0):.0f}%, d* {r['d_star_mass']:.2f})" for r in a[key]))
    print(f"   collapse: {', '.join(f'{k} {v:.3f}' for k, v in a['collapse'].items())}")
    br = a["best_response"]
    print("   best responses: " + "; ".join(f"{k} (nu {v['nu']:.3f}): reward {v['reward']:.2f} cost {v['cost']:.2f}"
                                         for k, v in br.items()))
    print(f"   at the learned nu: Lagrangian gap to its best response {a['at_learned_multiplier']['lagrangian_gap_to_best_response']:.3f}, "
          f"greedy gap {a['at_learned_multiplier']['greedy_gap_total']:.3f}")


def self_check(model: Model, cmdp: fhc.TabularCMDP, sol: Any) -> None:
    """The numpy tools against ``fhc_jax.evaluate`` and ``fhc_jax.solve`` (raises on mismatch)."""
    pi = np.random.default_rng(0).dirichlet(np.ones(model.A), size=(model.H, model.S))
    mine = model.value(pi)
    with jax.enable_x64(True):
        ev = fhc.evaluate(cmdp.astype(jnp.float64), jnp.asarray(pi))
        ref_r, ref_c = float(ev.reward), float(ev.costs[0])
    nu = np.asarray(sol.multipliers, np.float64)
    star = model.value(np.asarray(sol.policy, np.float64), nu)
    q, v = model.q_values(pi, *model.lagrangian(nu))
    checks = {
        "random policy reward vs fhc_jax.evaluate": (mine["reward"], ref_r),
        "random policy cost vs fhc_jax.evaluate": (mine["cost"], ref_c),
        "random policy V_0 vs Lagrangian": (float(v[0] @ model.beta), model.value(pi, nu)["lagrangian"]),
        "optimal policy reward vs fhc_jax.solve": (star["reward"], float(sol.reward)),
        "best response at nu* vs L(pi*)": (model.value(model.best_response(nu + 1e-9), nu)["lagrangian"], star["lagrangian"]),
    }
    for name, (a, b) in checks.items():
        if abs(a - b) > 1e-6 * max(1.0, abs(b)):
            raise AssertionError(f"self-check failed: {name}: {a} != {b}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=lambda v: [int(x) for x in v.split(",")], default=[0])
    parser.add_argument("--iterations", type=int, default=None, help="override num_iterations (multiple of --chunk)")
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--fh", action="store_true", help="also FH-Constrained (default Config) on each seed")
    parser.add_argument("--set", action="append", default=[], help="nn_constrained.Config override field=value")
    parser.add_argument("--label", default="default")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "nn_diagnosis.json"))
    args = parser.parse_args()

    env = GridWorld()
    params = env.default_params
    cmdp = env.to_cmdp(params)
    model = Model(cmdp)
    sol = fhc.solve(cmdp)
    self_check(model, cmdp, sol)
    sets = parse_sets(args.set)
    if args.iterations is not None:
        sets["num_iterations"] = args.iterations
    cfg = build_config(nc.Config(), sets)
    print(f"optimum: reward {sol.reward:.4f}, cost {float(sol.costs[0]):.3f}, nu* {float(sol.multipliers[0]):.4f}; "
          f"config overrides {sets or 'none'}")
    result: dict[str, Any] = {"machine": machine_info(), "label": args.label, "overrides": sets,
                              "optimum": {"reward": sol.reward, "cost": float(sol.costs[0]),
                                          "multiplier": float(sol.multipliers[0])},
                              "seeds": []}
    out_path = Path(args.out)
    for seed in args.seeds:
        print(f"\n### seed {seed}: NN-Constrained, {cfg.num_iterations} updates at K = {cfg.episodes_per_iteration}")
        t0 = time.perf_counter()
        state, track = train_nn(env, params, cfg, seed, model, sol, args.chunk)
        wall = time.perf_counter() - t0
        pi = np.asarray(nc.policy_table(state, env, params), np.float64)
        pi /= pi.sum(-1, keepdims=True)
        entry = {"seed": seed, "wall_s": wall,
                 "nn_constrained": analyse_policy(model, pi, float(state.multipliers[0]), sol, cfg.episodes_per_iteration),
                 "track": track}
        print_analysis(f"NN-Constrained seed {seed}", entry["nn_constrained"], model)
        if args.fh:
            fcfg = fc.Config()
            t1 = time.perf_counter()
            out = jax.jit(fc.make_train(env, params, fcfg))(jax.random.key(seed))
            pf = np.asarray(fc.policy_table(out.state, env, params), np.float64)
            pf /= pf.sum(-1, keepdims=True)
            entry["fh_constrained"] = analyse_policy(model, pf, float(out.state.multipliers[0]), sol,
                                                     fcfg.episodes_per_iteration)
            entry["fh_wall_s"] = time.perf_counter() - t1
            print_analysis(f"FH-Constrained seed {seed}", entry["fh_constrained"], model)
        result["seeds"].append(entry)
        write_json_atomic(out_path, result)  # after each seed: a partial result is still a valid file
    print(f"\nwrote {out_path}")


if __name__ == "__main__":
    main()
