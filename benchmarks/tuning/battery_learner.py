"""One learner on ``BatteryStorage`` (issue 12's task) with config overrides: 5 seeds in one
``jax.jit(jax.vmap(train))`` call, each final policy judged by Monte-Carlo against the
discretized reference executed in the continuous environment, through ``benchmarks/battery.py``'s
``quality`` (feasible = the cost's upper 95% bound within 2% of alpha).

Usage::

    python benchmarks/tuning/battery_learner.py LEARNER '{"trace": 1.0, "actor_step": {"init": 1.0}}' OUT.json
        [--seeds tune|heldout:N]
        [--episodes 20000] [--continuous]

A dict value changes fields of a schedule default (``PowerSchedule`` init, power, decay);
``"features": "TileCoding(6, 3)"`` (or ``"RadialBasis(7)"``, either optionally with
``, stage_inputs=False``) sets FH-Constrained's feature map.

LEARNER is one of fh_constrained, nn_constrained, ppo_lagrangian, cpo, ecop. ``--seeds tune``
(default) = ``split(key(0), 5)``; ``heldout:N`` = ``split(fold_in(key(0), N), 5)``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: battery.quality

from battery import print_quality, quality

import fhc_jax as fhc
from fhc_jax.algos import features
from fhc_jax.experiment import judge
from fhc_jax.experiment.rundir import write_json_atomic

LEARNERS = ("fh_constrained", "nn_constrained", "ppo_lagrangian", "cpo", "ecop")


def seed_key(which: str) -> jax.Array:
    if which == "tune":
        return jax.random.key(0)
    if which.startswith("heldout:") and which[8:].isdigit():
        return jax.random.fold_in(jax.random.key(0), int(which[8:]))
    raise SystemExit(f"battery_learner: --seeds must be 'tune' or 'heldout:N' (N a non-negative integer), found {which!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("learner", choices=LEARNERS)
    parser.add_argument("overrides", help="JSON dict of Config fields")
    parser.add_argument("out")
    parser.add_argument("--seeds", default="tune")
    parser.add_argument("--episodes", type=int, default=20_000)
    parser.add_argument("--continuous", action="store_true", help="BatteryStorage(continuous_actions=True)")
    args = parser.parse_args()
    key = seed_key(args.seeds)
    module = importlib.import_module(f"fhc_jax.algos.{args.learner}")
    overrides = json.loads(args.overrides)
    # a dict value changes some fields of a schedule default, e.g. {"actor_step": {"init": 1.0}}
    base = module.Config()
    fields = {k: dataclasses.replace(getattr(base, k), **v) if isinstance(v, dict) else v for k, v in overrides.items()}
    if isinstance(fields.get("features"), str):  # e.g. "TileCoding(6, 3)" or "RadialBasis(7, stage_inputs=False)"
        match = re.fullmatch(r"(RadialBasis|TileCoding)\(([\d, ]*?)(?:,\s*stage_inputs=(True|False))?\)",
                             fields["features"].strip())
        if match is None:
            raise SystemExit(f"battery_learner: features must look like 'RadialBasis(7)' or 'TileCoding(6, 3)' "
                             f"(optionally ', stage_inputs=False'), found {fields['features']!r}")
        fields["features"] = getattr(features, match[1])(*[int(x) for x in match[2].split(",") if x.strip()],
                                                         stage_inputs=match[3] != "False")
    config = module.Config(**fields)  # validated before compiling
    env = fhc.BatteryStorage(continuous_actions=args.continuous)
    params = env.default_params
    reference = judge.reference_optimum(env, params, args.episodes)
    q = quality(env, params, module, 5, args.episodes, None, reference, config, key=key)
    print(f"{args.learner} {json.dumps(overrides)} seeds {args.seeds}; reference {reference.reward:.2f} EUR/day")
    print_quality(args.learner, q)
    write_json_atomic(args.out, {"learner": args.learner, "continuous_actions": args.continuous, "seeds": args.seeds,
                                 "episodes": args.episodes, "reference": reference.as_dict(), **q, "config": overrides})


if __name__ == "__main__":
    main()
