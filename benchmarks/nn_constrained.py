"""NN-Constrained benchmark: quality on the default gridworld (judged exactly) and speed.

1. **Quality.** Default ``GridWorld`` (10x10, H = 100, alpha = 25), default ``Config`` (the
   paper's 2 x 10 tanh networks on the coordinates, "Env 1"), 5 seeds in one
   ``jax.jit(jax.vmap(train))`` call (wall time includes compilation); optionally also the
   paper variant. Each seed's final policy is evaluated exactly and compared with
   ``fhc_jax.solve``'s optimum (reward, cost, multiplier).
2. **Capacity.** The same stacked actor fitted by imitation (occupancy-weighted cross-entropy
   to the optimal policy of ``fhc_jax.solve``), then evaluated exactly: what the architecture
   can represent, separating representation from learning.
3. **Speed.** Training env-steps/s (rollout + update in one jit, compile excluded via
   ``jit(...).lower().compile()``, median of several runs) at K = 256 and 4096.

Usage::

    python benchmarks/nn_constrained.py [--quick] [--paper] [--skip-quality] [--skip-speed]

Results go to ``benchmarks/results/nn_constrained.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from judge import machine_info, train_and_judge
from timing import compile_and_time, provenance

import fhc_jax as fhc
from fhc_jax.algos import nn_constrained as nc
from fhc_jax.algos import nn_losses as nl
from fhc_jax.algos.core.networks import NetworkSpec
from fhc_jax.envs import GridWorld


def quality(env, params, config: nc.Config, seeds: int = 5) -> dict:
    j = train_and_judge(
        env, params, nc.make_train(env, params, config), lambda st: nc.policy_table(st, env, params), seeds
    )
    for row, nu in zip(j.rows, np.asarray(j.out.state.multipliers[:, 0])):
        row["learned_multiplier"] = float(nu)
    return {
        "variant": config.variant,
        "observation": config.observation,
        "num_iterations": config.num_iterations,
        **j.summary(),
    }


def capacity(env, params, config: nc.Config, steps: int = 4000) -> dict:
    """Fit the stacked actor to the optimal policy by occupancy-weighted cross-entropy."""
    cmdp = env.to_cmdp(params)
    best = fhc.solve(cmdp)
    target = jnp.asarray(best.policy, jnp.float32)
    occ = jnp.asarray(fhc.evaluate(cmdp, target).occupancy[:-1], jnp.float32)
    nets = nl.Networks.build(
        env.horizon, env.num_actions, env.num_constraints, NetworkSpec.of(config), config.output_scale
    )
    table = nc.setup(env, params, config).obs_table
    actor = nets.actor.init(jax.random.key(0), table[0, 0])
    opt = optax.adam(1e-2)

    def loss(p):
        return -jnp.sum(occ[..., None] * target * jax.nn.log_softmax(nets.actor.apply(p, table[:-1]), -1))

    @jax.jit
    def fit(p):
        def body(c, _):
            p, s = c
            u, s = opt.update(jax.grad(loss)(p), s, p)
            return (optax.apply_updates(p, u), s), None

        return jax.lax.scan(body, (p, opt.init(p)), None, length=steps)[0][0]

    pol = jax.nn.softmax(nets.actor.apply(fit(actor), table[:-1]), -1)
    ev = fhc.evaluate(cmdp, pol)
    return {
        "observation": config.observation,
        "width": config.width,
        "depth": config.depth,
        "imitation_reward": float(ev.reward),
        "imitation_cost": float(ev.costs[0]),
        "fraction_of_optimum": float(ev.reward) / best.reward,
    }


def steps_per_second(env, params, k: int, iterations: int, repeats: int = 3) -> dict:
    cfg = nc.Config(num_iterations=iterations, episodes_per_iteration=k, eval_every=0)
    compile_s, t = compile_and_time(nc.make_train(env, params, cfg), repeats)
    return {
        "K": k,
        "iterations": iterations,
        "update_form": nc.resolve_update_form(cfg, env.num_states),
        "compile_s": compile_s,
        "run_s": t,
        "env_steps_per_s": iterations * k * env.horizon / t,
        "updates_per_s": iterations / t,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--paper", action="store_true", help="also run variant='paper'")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument(
        "--batch-sizes",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[256, 4096],
        help="comma-separated K values of the speed table (default 256,4096)",
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "nn_constrained.json"))
    args = parser.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured

    env = GridWorld()
    params = env.default_params
    result: dict = {
        **source,
        "machine": machine_info(),
        "default_config": {
            k: (repr(v) if not isinstance(v, (int, float, str, bool)) else v) for k, v in vars(nc.Config()).items()
        },
    }
    if not args.skip_quality:
        cfg = nc.Config()
        runs = {"improved": quality(env, params, cfg)}
        if args.paper:
            runs["paper"] = quality(env, params, cfg.replace(variant="paper"))
        result["quality"] = runs
        for name, q in runs.items():
            print(
                f"[quality/{name}] {q['wall_s_including_compile']:.1f}s incl. compile; optimum "
                f"{q['optimum_reward']:.2f} "
                f"(cost {q['optimum_cost']:.2f}, nu* {q['optimal_multiplier']:.3f}); cost <= 1.02 alpha on "
                f"{q['cost_ok_seeds']}/5 seeds"
            )
            for r in q["seeds"]:
                print(
                    f"   seed {r['seed']}: reward {r['exact_reward']:.2f} "
                    f"({100 * r['reward_fraction_of_optimum']:.1f}%) "
                    f"cost {r['exact_cost']:.2f} nu {r['learned_multiplier']:.3f}"
                )
        result["capacity"] = [capacity(env, params, nc.Config(), steps=1000 if args.quick else 4000)]
        for c in result["capacity"]:
            print(
                f"[capacity] {c['observation']} {c['depth']}x{c['width']}: imitation of the optimum earns "
                f"{c['imitation_reward']:.2f} ({100 * c['fraction_of_optimum']:.1f}%) at cost {c['imitation_cost']:.2f}"
            )
    if not args.skip_speed:
        rows = []
        for k in args.batch_sizes:
            iters = 100 if k <= 256 else 10
            row = steps_per_second(env, params, k, iters if not args.quick else max(iters // 2, 5))
            rows.append(row)
            print(
                f"[speed] K={k:5d} ({row['update_form']}): {row['env_steps_per_s'] / 1e6:.2f}M env-steps/s, "
                f"{row['updates_per_s']:.1f} updates/s; compile {row['compile_s']:.1f}s"
            )
        result["speed"] = rows
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
