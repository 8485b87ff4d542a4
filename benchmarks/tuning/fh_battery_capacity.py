"""Capacity check for FH-Constrained on ``BatteryStorage`` (issue 12): how much of the reference
can FH-Constrained's policy class represent?

FH-Constrained's actor on an environment without tabular states is a per-stage Gibbs policy,
linear in a coarse feature map of the observation: pi_h(a | o) = softmax(phi(o)^T theta_h),
theta_h (X, A), with phi the learner's own ``ObservationFeatures`` (default ``RadialBasis(5)``
of (soc, d / sd, h / H), X = 125) and theta clipped to +-``theta_bound`` (default 4). This
script fits theta by imitation of the reference policy (the completed optimum of the discretized
model, ``BatteryStorage.reference``) and judges the fitted policy by Monte-Carlo in the
continuous environment, as every learner is judged. If the fitted policy is far below the
reference, the feature map (not the learning dynamics) bounds what FH-Constrained can reach.

Fit: observations of ``--episodes`` episodes of the reference policy, the reference's action
probabilities at each, and ``--steps`` full-batch Adam steps on the mean cross-entropy of all H
stages at once (one ``jax.jit``), with and without the theta bound.

Usage::

    python benchmarks/tuning/fh_battery_capacity.py OUT.json [--features rbf5,rbf7,tile4x4]
        [--episodes 4096] [--steps 3000] [--judge-episodes 20000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

import fhc_jax as fhc
from fhc_jax.algos import features as feat
from fhc_jax.algos import fh_constrained as fc
from fhc_jax.experiment import judge
from fhc_jax.experiment.rundir import write_json_atomic

SPECS = {
    "rbf5": feat.RadialBasis(5),
    "rbf7": feat.RadialBasis(7),
    "rbf9": feat.RadialBasis(9),
    "tile4x2": feat.TileCoding(4, 2),
    "tile6x3": feat.TileCoding(6, 3),
    "tile8x4": feat.TileCoding(8, 4),
    "tile10x4": feat.TileCoding(10, 4),
    "tile12x6": feat.TileCoding(12, 6),
}


def reference_samples(env, params, policy, episodes: int, key) -> tuple[np.ndarray, np.ndarray]:
    """Observations (H, N, D) visited by the reference policy and its action probabilities there
    (H, N, A)."""
    traj = jax.jit(lambda k: fhc.rollout(k, env, params, policy, episodes))(key)
    obs = jnp.swapaxes(traj.observations, 0, 1)  # (H, N, D)
    hs = jnp.arange(env.horizon)[:, None]
    cells = jax.vmap(jax.vmap(policy.cell))(obs)  # (H, N)
    cdf = policy.cdf[hs, cells]  # (H, N, A)
    probs = jnp.diff(cdf, axis=-1, prepend=0.0)
    return obs, probs / probs.sum(-1, keepdims=True)


def fit(phi: jax.Array, probs: jax.Array, steps: int, bound: float | None) -> jax.Array:
    """theta (H, X, A) minimising the mean cross-entropy of softmax(phi theta_h) to ``probs``."""
    h, _, x = phi.shape
    a = probs.shape[-1]
    opt = optax.adam(0.05)

    def loss(theta):
        logits = jnp.einsum("hnx,hxa->hna", phi, theta)
        return -jnp.mean(jnp.sum(probs * jax.nn.log_softmax(logits), -1))

    def step(carry, _):
        theta, s = carry
        g = jax.grad(loss)(theta)
        upd, s = opt.update(g, s)
        theta = optax.apply_updates(theta, upd)
        if bound is not None:
            theta = jnp.clip(theta, -bound, bound)
        return (theta, s), None

    theta0 = jnp.zeros((h, x, a), jnp.float32)
    (theta, _), _ = jax.lax.scan(step, (theta0, opt.init(theta0)), None, length=steps)
    return theta, loss(theta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--features", default="rbf5,tile6x3,rbf7")
    parser.add_argument("--episodes", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--judge-episodes", type=int, default=20_000)
    parser.add_argument("--observation", default="sdt", choices=("sdt", "sd"),
                        help="the battery's observation: with the stage (default) or without")
    args = parser.parse_args()
    env = fhc.BatteryStorage(observation=args.observation)
    params = env.default_params
    policy, _ = env.reference(params)
    ref = judge.monte_carlo(env, params, [policy], args.judge_episodes)
    print(f"reference: {ref['reward'][0]:.2f} EUR at {ref['costs'][0][0]:.3f} cycles", flush=True)
    obs, probs = reference_samples(env, params, policy, args.episodes, jax.random.key(7))
    result = {"reference_reward": float(ref["reward"][0]), "reference_cost": float(ref["costs"][0][0]),
              "observation": args.observation, "episodes": args.episodes, "steps": args.steps, "judge_episodes": args.judge_episodes, "rows": []}
    for name in args.features.split(","):
        spec = SPECS[name]
        features = fc._features(spec, env, params)
        phi = features(obs)  # (H, N, X)
        for bound in (4.0, None):
            t0 = time.perf_counter()
            theta, ce = jax.jit(fit, static_argnums=(2, 3))(phi, probs, args.steps, bound)
            logits_fn = lambda o, h, theta=theta, features=features: features(o) @ theta[h]
            mc = judge.monte_carlo(env, params, [fhc.softmax_policy(logits_fn)], args.judge_episodes)
            row = {"features": name, "num_features": features.num_features, "theta_bound": bound,
                   "cross_entropy": float(ce), "reward": float(mc["reward"][0]),
                   "reward_half_width": float(mc["reward_half_width"][0]), "cost": float(mc["costs"][0][0]),
                   "fraction_of_reference": float(mc["reward"][0] / ref["reward"][0]),
                   "max_abs_theta": float(jnp.max(jnp.abs(theta))), "wall_s": time.perf_counter() - t0}
            result["rows"].append(row)
            print(f"{name:8s} X={row['num_features']:4d} bound={bound}: CE {row['cross_entropy']:.3f} "
                  f"reward {row['reward']:.2f} ({100 * row['fraction_of_reference']:.1f}%) cost {row['cost']:.3f} "
                  f"max|theta| {row['max_abs_theta']:.1f}", flush=True)
    write_json_atomic(Path(args.out), result)
    print("wrote", args.out)


if __name__ == "__main__":
    sys.exit(main())
