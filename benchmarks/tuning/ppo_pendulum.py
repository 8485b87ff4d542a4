"""PPO-Lagrangian on gymnax ``Pendulum-v1`` with the torque budget (issue 17): one config,
5 seeds in one ``jax.jit(jax.vmap(train))`` call, each final policy judged by Monte-Carlo
(100,000 episodes, 95% intervals; feasible = the cost's upper bound within 2% of alpha = 40),
through ``benchmarks/battery.py``'s ``quality``.

Usage::

    python benchmarks/tuning/ppo_pendulum.py '{"num_iterations": 1000, "pid_ki": 0.003}' OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: battery.quality

from battery import quality

from fhc_jax.algos import ppo_lagrangian
from fhc_jax.envs import gymnax_interop
from fhc_jax.experiment.rundir import write_json_atomic

SEEDS, EPISODES = 5, 100_000


def main() -> None:
    overrides, out = json.loads(sys.argv[1]), sys.argv[2]
    env = gymnax_interop.pendulum()
    config = ppo_lagrangian.Config(**overrides)  # validated before compiling
    q = quality(env, env.default_params, ppo_lagrangian, SEEDS, EPISODES, None, None, config)
    print(json.dumps(overrides), f"wall {q['wall_s']:.0f} s (compile included)")
    for r in q["seeds"]:
        print(f"  seed {r['seed']}: reward {r['exact_reward']:.1f}, cost {r['exact_costs'][0]:.2f} "
              f"(upper {r['costs_ci95'][0][1]:.2f}), feasible {r['feasible']}, nu {r['multipliers']}")
    write_json_atomic(out, {"episodes": EPISODES, **q, "config": overrides})  # the overrides given


if __name__ == "__main__":
    main()
