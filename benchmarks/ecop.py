"""e-COP (and Saute-Lagrangian) benchmark: quality on the default gridworld, judged exactly.

Default ``GridWorld`` (10x10, H = 100, alpha = 25), default ``Config``, R seeds (default 10) in
one ``jax.jit(jax.vmap(train))`` call (wall time includes compilation, reported apart). Each
seed's final policy is evaluated exactly (``fhc_jax.evaluate``) and judged against
``fhc_jax.solve``'s optimum by ``fhc_jax.experiment.judge`` (feasible: cost <= 1.02 alpha):
per seed the exact reward, % of the optimum, cost, learned multiplier (e-COP: the mean of the
per-stage lambda_t and the effective penalty weight) and feasibility.

Seeds: ``--seeds-from split`` (default; keys ``split(key(0), R)``, the benchmarks' seeds) or
``heldout`` (keys ``fold_in(key(0), 1000 + i)``, never used while the defaults were chosen;
the tuning sweeps used ``fold_in(key(0), i)`` for small i).

Usage::

    python benchmarks/ecop.py [--seeds 10] [--seeds-from split|heldout] [--algo ecop|saute] [--obs xy|xyt]

Results go to ``benchmarks/results/ecop.json`` (``saute.json`` for ``--algo saute``; the input
and seed set are recorded, and each run is stored under its own key).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np
from judge import Judged, machine_info, train_and_judge
from timing import provenance

from fhc_jax.algos import ecop, saute
from fhc_jax.envs import GridWorld
from fhc_jax.experiment import judge


def _train_and_judge_keys(env, params, train, policy_tables, keys) -> Judged:
    """``judge.train_and_judge`` with explicit keys (the held-out seeds)."""
    cmdp = env.to_cmdp(params)
    best = judge.optimum(cmdp)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
    compile_s = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(keys))
    wall = time.perf_counter() - t0
    judged, _ = judge.judge_policies(cmdp, policy_tables(out.state), optimum=best)
    rows = [
        {
            "seed": i,
            "exact_reward": float(judged.reward[i]),
            "exact_cost": float(judged.costs[i, 0]),
            "gap_to_optimum": float(judged.gap[i]),
            "reward_fraction_of_optimum": float(judged.fraction_of_optimum[i]),
            "cost_ok": bool(judged.feasible[i]),
        }
        for i in range(keys.shape[0])
    ]
    return Judged(
        out=out,
        best=best,
        judgement=judged,
        alpha=float(cmdp.thresholds[0]),
        wall_s=wall,
        compile_s=compile_s,
        rows=rows,
    )


def quality(module, env, params, config, seeds: int, heldout: bool) -> dict:
    train = module.make_train(env, params, config)
    tables = lambda st: module.policy_table(st, env, params)
    if heldout:
        keys = jax.numpy.stack([jax.random.fold_in(jax.random.key(0), 1000 + i) for i in range(seeds)])
        j = _train_and_judge_keys(env, params, train, tables, keys)
    else:
        j = train_and_judge(env, params, train, tables, seeds)
    nu = np.asarray(j.out.state.multipliers)
    nu = nu.mean(axis=1)[:, 0] if nu.ndim == 3 else nu[:, 0]  # e-COP: mean over the stages
    weight = getattr(j.out.metrics, "penalty_weight", None)
    for i, row in enumerate(j.rows):
        row["learned_multiplier"] = float(nu[i])
        if weight is not None:
            row["penalty_weight"] = float(np.asarray(weight)[i, -1, 0])
    return {
        "observation": config.observation,
        "num_iterations": config.num_iterations,
        "episodes_per_iteration": config.episodes_per_iteration,
        "seed_set": "heldout" if heldout else "split",
        **j.summary(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--seeds-from", choices=("split", "heldout"), default="split")
    parser.add_argument("--algo", choices=("ecop", "saute"), default="ecop")
    parser.add_argument("--obs", choices=("xy", "xyt"), default=None, help="network input (default: the Config's)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    source = provenance()  # the command and the git revision, read before anything is measured

    module = ecop if args.algo == "ecop" else saute
    env = GridWorld()
    params = env.default_params
    config = module.Config() if args.obs is None else module.Config(observation=args.obs)
    q = quality(module, env, params, config, args.seeds, args.seeds_from == "heldout")
    name = f"{config.observation}/{q['seed_set']}"
    out = Path(args.out or Path(__file__).parent / "results" / f"{args.algo}.json")
    result = json.loads(out.read_text()) if out.exists() else {}
    result.update(source)
    result["machine"] = machine_info()
    result["default_config"] = {
        k: (v if isinstance(v, (int, float, str, bool)) else repr(v)) for k, v in vars(module.Config()).items()
    }
    result.setdefault("quality", {})[name] = q
    print(
        f"[{args.algo} {name}] {q['wall_s_including_compile']:.1f}s incl. {q['compile_s']:.1f}s compile; "
        f"optimum {q['optimum_reward']:.2f} (nu* {q['optimal_multiplier']:.3f}); feasible (cost <= "
        f"{1 + judge.DEFAULT_TOLERANCE:.2f} alpha) on {q['cost_ok_seeds']}/{args.seeds} seeds; worst "
        f"{100 * q['min_reward_fraction']:.1f}% of the optimum"
    )
    for r in q["seeds"]:
        extra = f" weight {r['penalty_weight']:.3f}" if "penalty_weight" in r else ""
        print(
            f"   seed {r['seed']}: reward {r['exact_reward']:.2f} ({100 * r['reward_fraction_of_optimum']:.1f}%) "
            f"cost {r['exact_cost']:.2f} nu {r['learned_multiplier']:.3f}{extra}"
            f"{'' if r['cost_ok'] else '  VIOLATES'}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print("wrote", out)


if __name__ == "__main__":
    main()
