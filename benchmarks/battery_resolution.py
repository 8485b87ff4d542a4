"""BatteryStorage: how the discretized exact model's optimum approaches the continuous optimum.

For each resolution (n_soc, n_dev): ``BatteryStorage.to_cmdp`` is solved exactly
(``BatteryStorage.reference_policy``: ``fhc_jax.solve`` completed at unreached cells), and the
policy is executed in the continuous environment (``discretized_policy``: nearest grid point)
and judged by Monte-Carlo (``fhc_jax.rollout_returns``, ``--episodes`` episodes, 95% CI). The
executed policy's value is a lower bound on the continuous optimum; the model's value need not
bound it either way. Also: the unconstrained optimum (alpha = infinity) at the finest resolution,
and the best stationary policy found by gradient ascent (a local optimum) on the exact model.

Usage::

    python benchmarks/battery_resolution.py [--episodes 200000] [--num-constraints 1]

Results go to ``benchmarks/results/battery_resolution.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from timing import provenance

import fhc_jax as fhc
from fhc_jax.envs.battery import BatteryStorage
from fhc_jax.experiment.rundir import machine_info

RESOLUTIONS = ((11, 5), (21, 9), (41, 15), (81, 25), (161, 41))


def monte_carlo(env, params, table, resolution, episodes: int) -> dict:
    policy = env.discretized_policy(table, params, resolution)
    out = jax.jit(lambda k: fhc.rollout_returns(k, env, params, policy, episodes))(jax.random.key(1))
    r, c = np.asarray(out.rewards, np.float64), np.asarray(out.costs, np.float64)
    ci = lambda x: float(1.96 * x.std(ddof=1) / np.sqrt(x.size))
    return {
        "reward": float(r.mean()),
        "reward_ci": ci(r),
        "costs": c.mean(0).tolist(),
        "costs_ci": [ci(c[:, k]) for k in range(c.shape[1])],
    }


def stationary(env, params, resolution, steps: int = 1500) -> dict:
    """Primal-dual gradient ascent over stationary softmax policies of the exact model."""
    import optax

    cmdp = env.to_cmdp(params, resolution)
    alpha = jnp.asarray(cmdp.thresholds)

    def lagrangian(logits, nu):
        pi = jax.nn.softmax(logits, -1)
        e = fhc.evaluate(cmdp, jnp.broadcast_to(pi, (env.horizon, *pi.shape)))
        return e.reward - jnp.dot(nu, e.costs - alpha), (e.reward, e.costs)

    grad = jax.jit(jax.value_and_grad(lagrangian, has_aux=True))
    logits, opt = jnp.zeros((cmdp.num_states, env.num_actions)), optax.adam(0.1)
    state, nu = opt.init(logits), jnp.zeros(env.num_constraints)
    for _ in range(steps):
        (_, (reward, costs)), g = grad(logits, nu)
        updates, state = opt.update(jax.tree.map(jnp.negative, g), state)
        logits = optax.apply_updates(logits, updates)
        nu = jnp.maximum(nu + 2.0 * (costs - alpha), 0.0)
    return {"reward": float(reward), "costs": np.asarray(costs).tolist(), "resolution": list(resolution)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=200_000)
    parser.add_argument("--num-constraints", type=int, default=1)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "battery_resolution.json"))
    args = parser.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured
    env = BatteryStorage(num_constraints=args.num_constraints)
    params = env.default_params
    rows = []
    print(
        f"BatteryStorage defaults, M = {env.num_constraints}, alpha = {np.asarray(params.thresholds).tolist()}, "
        f"{args.episodes} Monte-Carlo episodes (95% CI)"
    )
    print(f"{'resolution':<11} {'S':>5} {'solve s':>7} {'model EUR':>9} {'MC reward EUR':>16} {'MC costs':>24}")
    for res in RESOLUTIONS:
        t0 = time.perf_counter()
        table, best = env.reference_policy(params, res)
        solve_s = time.perf_counter() - t0
        mc = monte_carlo(env, params, table, res, args.episodes)
        rows.append(
            {
                "resolution": list(res),
                "states": res[0] * res[1],
                "solve_s": solve_s,
                "model_reward": float(best.reward),
                "model_costs": np.asarray(best.costs).tolist(),
                "multipliers": np.asarray(best.multipliers).tolist(),
                "monte_carlo": mc,
            }
        )
        costs = ", ".join(f"{c:.3f}+-{e:.3f}" for c, e in zip(mc["costs"], mc["costs_ci"]))
        print(
            f"{res!s:<11} {res[0] * res[1]:>5} {solve_s:>7.2f} {float(best.reward):>9.2f} "
            f"{mc['reward']:>9.2f}+-{mc['reward_ci']:.2f} {costs:>24}",
            flush=True,
        )
    res = RESOLUTIONS[-2]
    free_params = params.replace(thresholds=jnp.full_like(params.thresholds, 1e9))
    table, best = env.reference_policy(free_params, res)
    free = {
        "resolution": list(res),
        "model_reward": float(best.reward),
        "model_costs": np.asarray(best.costs).tolist(),
        "monte_carlo": monte_carlo(env, free_params, table, res, args.episodes),
    }
    print(
        f"unconstrained optimum at {res}: model {free['model_reward']:.2f} EUR, costs "
        f"{np.round(free['model_costs'], 3).tolist()}; executed {free['monte_carlo']['reward']:.2f} EUR, costs "
        f"{np.round(free['monte_carlo']['costs'], 3).tolist()}"
    )
    still = stationary(env, params, RESOLUTIONS[1])
    print(
        f"best stationary policy found (gradient ascent on the {RESOLUTIONS[1]} model, no stage input): "
        f"{still['reward']:.2f} EUR, costs {np.round(still['costs'], 3).tolist()}"
    )
    out = {
        "benchmark": "battery_resolution",
        "num_constraints": env.num_constraints,
        "episodes": args.episodes,
        "thresholds": np.asarray(params.thresholds).tolist(),
        "rows": rows,
        "unconstrained": free,
        "stationary": still,
        "machine": machine_info(),
        **source,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
