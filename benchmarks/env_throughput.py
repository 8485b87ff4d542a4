"""Environment throughput: JAX rollouts of the default GridWorld versus plain numpy.

Uniformly random policy, default gridworld (10x10, H = 100, slip 0.1, "xy" observations),
K episodes per batch. The JAX side is ``jax.jit(rollout)`` (vmap over episodes, scan over
stages) materialising the full ``Trajectory``; the uniform policy and the gridworld take the
rollout's fast path (one threefry block, i.e. two 32-bit random words, per step). Compile time
is measured apart (``jax.jit(f).lower(...).compile()``) and run times are medians of several
``jax.block_until_ready`` calls, each with a fresh key built before the timed region. The
numpy references implement the same semantics from scratch (next-state lookup table, one
uniform per step for the slip):

* ``numpy (K at once)``: a per-step Python loop that vectorises over the K episodes only,
  about as lean as plain numpy gets;
* ``numpy (1 episode)``: one episode at a time, scalar operations per step.

Both record the same trajectory arrays as ``fhc_jax.Trajectory`` (states,
observations, actions, rewards, costs, next states, terminal terms). A second table times
Monte-Carlo evaluation, ``fhc_jax.rollout_returns`` (episode totals accumulated in the loop
carry, no trajectory arrays written), against the numpy loop that does the same
(``numpy_returns``).

A third table (``policies`` in the JSON) times policies as users write them, each through
``rollout`` and ``rollout_returns`` at K = ``--policy-batch-size`` (default 4096), called as
users call them (``jax.jit(lambda k: fhc.rollout(k, env, params, policy, K))``, fresh
outputs every call, ``jax.block_until_ready``, median of ``--policy-repeats`` (default 7)
runs, compilation excluded):

* ``uniform (fast path)``: ``fhc.uniform_random_policy(A)`` (one uniform per step);
* ``randint lambda``: ``lambda k, o, h: jax.random.randint(k, (), 0, A)`` (a key per step);
* ``softmax via categorical``: a per-stage linear softmax of the observation,
  logits = o @ W[h] + b[h], sampled with ``jax.random.categorical``;
* ``softmax via fhc.softmax_policy``: the same logits through ``fhc.softmax_policy``; on this
  tabular gridworld with K >= 2 S the rollout plays it from its table over (stage, state)
  (``fhc_jax.rollout.tabulates``);
* ``softmax_policy, per step``: the same policy called at every step (wrapped so that it
  offers no table), which is what every environment without tabular states gets;

plus the uniform policy through ``rollout(..., record=...)`` with compact records, and the
ratio of the softmax helper to the uniform fast path.

Usage::

    python benchmarks/env_throughput.py [--quick] [--devices N] [--repeats R] [--batch-sizes 1,256,4096]
        [--policy-batch-size 4096] [--policy-repeats 7]

``--devices N`` (N > 1) splits the host CPU into N XLA devices and adds a row where the
episodes are sharded over them (one thread each). Results go to
``benchmarks/results/env_throughput.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer batch sizes and repetitions")
    parser.add_argument("--devices", type=int, default=1, help="XLA host devices for a sharded row")
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed runs per row, after one warm-up (default 21; --quick: 5)"
    )
    parser.add_argument(
        "--batch-sizes",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        help="comma-separated K values (default 1,256,4096,16384; --quick: 1,256,4096)",
    )
    parser.add_argument("--policy-batch-size", type=int, default=4096, help="K of the policies table (default 4096)")
    parser.add_argument("--policy-repeats", type=int, default=7, help="timed runs per policies row (default 7)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "env_throughput.json"))
    return parser.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None and ARGS.devices > 1:  # must happen before JAX initialises its backend
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={ARGS.devices}"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from timing import provenance  # noqa: E402

import fhc_jax as fhc  # noqa: E402
from fhc_jax.cmdp.evaluate import evaluate  # noqa: E402
from fhc_jax.envs import GridWorld  # noqa: E402
from fhc_jax.experiment.rundir import (  # noqa: E402
    machine_info,
    write_json_atomic,
)
from fhc_jax.rollout import episode, rollout, rollout_returns, uniform_random_policy  # noqa: E402

# ----------------------------------------------------------------------------- numpy references


def numpy_tables(params, size: int) -> dict:
    """Host copies of the params plus the lookup tables a numpy implementation would use."""
    s = np.arange(size * size)
    row, col = np.divmod(s, size)
    d_row, d_col = np.divmod(np.arange(9), 3)
    r2, c2 = row[:, None] + d_row - 1, col[:, None] + d_col - 1
    inside = (r2 >= 0) & (r2 < size) & (c2 >= 0) & (c2 < size)
    p = {k: np.asarray(v) for k, v in vars(params).items()}
    return dict(
        p,
        next_state=np.where(inside, r2 * size + c2, s[:, None]).astype(np.int32),  # (S, 9)
        coords=(np.stack([col, row], axis=1) / (size - 1)).astype(np.float32),  # (S, 2)
        cdf=np.cumsum(p["initial_distribution"]),
        slip=float(p["slip"]),
    )


def numpy_rollout(rng: np.random.Generator, t: dict, num_episodes: int) -> dict:
    """K episodes, stepping all of them at once per stage (no vectorisation over time)."""
    k = num_episodes
    horizon, n = t["reward_map"].shape
    m = t["cost_map"].shape[0]
    keep, scale = 1.0 - t["slip"], (8.0 / t["slip"] if t["slip"] > 0 else 0.0)
    states = np.empty((horizon, k), np.int32)
    obs = np.empty((horizon, k, 2), np.float32)
    actions = np.empty((horizon, k), np.int32)
    rewards = np.empty((horizon, k), np.float32)
    costs = np.empty((horizon, m, k), np.float32)
    next_states = np.empty((horizon, k), np.int32)
    s = np.minimum(np.searchsorted(t["cdf"], rng.random(k) * t["cdf"][-1], side="right"), n - 1)
    for h in range(horizon):
        a = (rng.random(k, dtype=np.float32) * 9).astype(np.int32)  # uniform random policy
        u = rng.random(k, dtype=np.float32)  # one number decides slip and the other move
        j = np.clip(((u - keep) * scale).astype(np.int32), 0, 7)
        move = np.where(u < keep, a, j + (j >= a))
        s2 = t["next_state"][s, move]
        states[h], obs[h], actions[h], next_states[h] = s, t["coords"][s], a, s2
        rewards[h] = t["reward_map"][h, s2]
        costs[h] = t["cost_map"][:, h, s2]
        s = s2
    return dict(
        states=states.T,
        observations=obs.transpose(1, 0, 2),
        actions=actions.T,
        rewards=rewards.T,
        costs=costs.transpose(2, 0, 1),
        next_states=next_states.T,
        terminal_rewards=t["terminal_rewards"][s],
        terminal_costs=t["terminal_costs"][:, s].T,
    )


def numpy_one_episode(rng: np.random.Generator, t: dict) -> tuple:
    """One episode with scalar operations per step (the classic gym-style loop)."""
    horizon, n = t["reward_map"].shape
    keep, scale = 1.0 - t["slip"], (8.0 / t["slip"] if t["slip"] > 0 else 0.0)
    table, coords, rmap, cmap = t["next_state"], t["coords"], t["reward_map"], t["cost_map"]
    states, obs, actions, rewards, costs, next_states = [], [], [], [], [], []
    s = min(int(np.searchsorted(t["cdf"], rng.random() * t["cdf"][-1], side="right")), n - 1)
    for h in range(horizon):
        a = int(rng.random() * 9)
        u = rng.random()
        if u < keep:
            move = a
        else:
            j = min(int((u - keep) * scale), 7)
            move = j + (j >= a)
        s2 = int(table[s, move])
        states.append(s), obs.append(coords[s]), actions.append(a), next_states.append(s2)
        rewards.append(rmap[h, s2]), costs.append(cmap[:, h, s2])
        s = s2
    return states, obs, actions, rewards, costs, next_states, t["terminal_rewards"][s], t["terminal_costs"][:, s]


def numpy_returns(rng: np.random.Generator, t: dict, num_episodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Episode totals only (reward (K,), costs (K, M)) of K episodes stepped together: the
    numpy counterpart of ``fhc_jax.rollout_returns``."""
    k = num_episodes
    horizon, n = t["reward_map"].shape
    keep, scale = 1.0 - t["slip"], (8.0 / t["slip"] if t["slip"] > 0 else 0.0)
    total_r = np.zeros(k, np.float32)
    total_c = np.zeros((t["cost_map"].shape[0], k), np.float32)
    s = np.minimum(np.searchsorted(t["cdf"], rng.random(k) * t["cdf"][-1], side="right"), n - 1)
    for h in range(horizon):
        a = (rng.random(k, dtype=np.float32) * 9).astype(np.int32)
        u = rng.random(k, dtype=np.float32)
        j = np.clip(((u - keep) * scale).astype(np.int32), 0, 7)
        s = t["next_state"][s, np.where(u < keep, a, j + (j >= a))]
        total_r += t["reward_map"][h, s]
        total_c += t["cost_map"][:, h, s]
    return total_r + t["terminal_rewards"][s], (total_c + t["terminal_costs"][:, s]).T


# ----------------------------------------------------------------------------- timing


def median_time(fn, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), times


def bench_jax(env, params, k: int, repeats: int, sharding=None, returns_only: bool = False) -> dict:
    policy = uniform_random_policy(env.num_actions)
    if returns_only:
        fn = jax.jit(lambda key, p: rollout_returns(key, env, p, policy, k))
    elif sharding is None:
        fn = jax.jit(lambda key, p: rollout(key, env, p, policy, k))
    else:  # episodes sharded over the host devices: each device runs K / D of them

        def fn_(key, p):
            keys = jax.lax.with_sharding_constraint(jax.random.split(key, k), sharding)
            return jax.vmap(lambda e: episode(e, env, p, policy))(keys)

        fn = jax.jit(fn_)
    t0 = time.perf_counter()
    compiled = fn.lower(jax.random.key(0), params).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(jax.random.key(0), params))  # warm-up
    keys = iter(jax.block_until_ready([jax.random.key(seed) for seed in range(1, repeats + 1)]))  # built untimed
    med, runs = median_time(lambda: jax.block_until_ready(compiled(next(keys), params)), repeats)
    return dict(compile_s=compile_s, median_s=med, runs_s=runs, steps_per_s=k * env.horizon / med)


def time_call(fn, key_arg, repeats: int) -> dict:
    """Compile ``jax.jit(fn)`` (timed apart), one warm-up call, then ``repeats`` timed calls with
    fresh keys built before the timed region; every call returns fresh output buffers."""
    jitted = jax.jit(fn)
    t0 = time.perf_counter()
    compiled = jitted.lower(key_arg(0)).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(key_arg(0)))
    keys = iter(jax.block_until_ready([key_arg(seed) for seed in range(1, repeats + 1)]))
    med, runs = median_time(lambda: jax.block_until_ready(compiled(next(keys))), repeats)
    return dict(compile_s=compile_s, median_s=med, runs_s=runs)


def linear_softmax_logits(env, seed: int = 0):
    """A per-stage linear softmax of the observation: ``logits_fn(o, h) = o @ W[h] + b[h]``,
    W (H, D, A) and b (H, A) standard normal (fixed seed)."""
    d = int(np.prod(env.observation_shape))
    k_w, k_b = jax.random.split(jax.random.key(seed))
    weights = jax.random.normal(k_w, (env.horizon, d, env.num_actions))
    biases = jax.random.normal(k_b, (env.horizon, env.num_actions))
    return lambda o, h: jnp.reshape(o, (-1,)) @ weights[h] + biases[h]


class PerStep:
    """A fast-protocol policy without ``on_states``: the rollout calls it at every step, as on
    an environment without tabular states."""

    def __init__(self, policy):
        self.policy = policy

    def action_from_uniform(self, u, observation, h):
        return self.policy.action_from_uniform(u, observation, h)

    def __call__(self, key, observation, h):
        return self.policy(key, observation, h)


def policy_rows(env, params, k: int, repeats: int) -> list[dict]:
    """The policies table: each policy through ``rollout`` and ``rollout_returns`` as users call
    them, plus compact records of the uniform policy."""
    a = env.num_actions
    logits_fn = linear_softmax_logits(env)
    policies = {
        "uniform (fast path)": fhc.uniform_random_policy(a),
        "randint lambda": lambda key, o, h: jax.random.randint(key, (), 0, a),
        "softmax via categorical": lambda key, o, h: jax.random.categorical(key, logits_fn(o, h)),
        "softmax via fhc.softmax_policy": fhc.softmax_policy(logits_fn),
        "softmax_policy, per step": PerStep(fhc.softmax_policy(logits_fn)),
    }
    rows = []
    for name, policy in policies.items():
        for kind in ("rollout", "rollout_returns"):
            if kind == "rollout":
                fn = lambda key, policy=policy: fhc.rollout(key, env, params, policy, k)
            else:
                fn = lambda key, policy=policy: fhc.rollout_returns(key, env, params, policy, k)
            t = time_call(fn, jax.random.key, repeats)
            rows.append(
                dict(
                    policy=name,
                    call=kind,
                    record="all" if kind == "rollout" else None,
                    K=k,
                    **t,
                    steps_per_s=k * env.horizon / t["median_s"],
                )
            )
    uniform = policies["uniform (fast path)"]
    for record in (("states", "actions", "rewards", "costs"), ("states", "actions")):
        fn = lambda key, record=record: fhc.rollout(key, env, params, uniform, k, record=record)
        t = time_call(fn, jax.random.key, repeats)
        rows.append(
            dict(
                policy="uniform (fast path)",
                call="rollout",
                record=list(record),
                K=k,
                **t,
                steps_per_s=k * env.horizon / t["median_s"],
            )
        )
    return rows


def policy_ratios(rows: list[dict]) -> dict:
    """Throughput of the softmax helper (and of categorical) relative to the uniform fast path."""
    rate = {(r["policy"], r["call"]): r["steps_per_s"] for r in rows if r["record"] in ("all", None)}
    out = {}
    for call in ("rollout", "rollout_returns"):
        base = rate[("uniform (fast path)", call)]
        out[call] = {
            "softmax_helper_vs_uniform": rate[("softmax via fhc.softmax_policy", call)] / base,
            "softmax_helper_per_step_vs_uniform": rate[("softmax_policy, per step", call)] / base,
            "softmax_categorical_vs_uniform": rate[("softmax via categorical", call)] / base,
            "softmax_helper_vs_categorical": rate[("softmax via fhc.softmax_policy", call)]
            / rate[("softmax via categorical", call)],
        }
    return out


def main(args: argparse.Namespace) -> dict:
    source = provenance()  # the command and the git revision, read before anything is measured
    env = GridWorld()
    params = env.default_params
    tables = numpy_tables(params, env.size)
    horizon = env.horizon
    batch_sizes = args.batch_sizes or ([1, 256, 4096] if args.quick else [1, 256, 4096, 16384])
    repeats = args.repeats or (5 if args.quick else 21)
    rng = np.random.default_rng(0)

    # one episode at a time (scalar numpy): time a fixed number of episodes
    n_single = 20 if args.quick else 50
    single_s, _ = median_time(lambda: [numpy_one_episode(rng, tables) for _ in range(n_single)], repeats)
    single_rate = n_single * horizon / single_s

    rows = []
    for k in batch_sizes:
        jx = bench_jax(env, params, k, repeats)
        numpy_rollout(rng, tables, k)  # warm-up
        np_s, np_runs = median_time(lambda: numpy_rollout(rng, tables, k), repeats)
        rows.append(
            dict(
                K=k,
                **jx,
                numpy_median_s=np_s,
                numpy_runs_s=np_runs,
                numpy_steps_per_s=k * horizon / np_s,
                ratio_vs_numpy=jx["steps_per_s"] / (k * horizon / np_s),
                ratio_vs_numpy_one_episode=jx["steps_per_s"] / single_rate,
            )
        )
    # Monte-Carlo evaluation: episode totals only (fhc_jax.rollout_returns), no trajectory arrays
    returns_rows = []
    for k in batch_sizes:
        jx = bench_jax(env, params, k, repeats, returns_only=True)
        numpy_returns(rng, tables, k)  # warm-up
        np_s, np_runs = median_time(lambda: numpy_returns(rng, tables, k), repeats)
        returns_rows.append(
            dict(
                K=k,
                **jx,
                numpy_median_s=np_s,
                numpy_runs_s=np_runs,
                numpy_steps_per_s=k * horizon / np_s,
                ratio_vs_numpy=jx["steps_per_s"] / (k * horizon / np_s),
                ratio_vs_numpy_one_episode=jx["steps_per_s"] / single_rate,
            )
        )
    # the numpy reference has the same semantics: compare mean episode rewards and costs
    k = 4096
    traj = jax.jit(lambda key: rollout(key, env, params, uniform_random_policy(9), k))(jax.random.key(99))
    ref = numpy_rollout(rng, tables, k)
    exact = evaluate(env.to_cmdp(params), jnp.full((horizon, env.num_states, env.num_actions), 1 / env.num_actions))
    check = {}
    for name, a, b, m in (
        ("reward", np.asarray(traj.episode_rewards), ref["rewards"].sum(1) + ref["terminal_rewards"], exact.reward),
        (
            "cost",
            np.asarray(traj.episode_costs[:, 0]),
            ref["costs"][:, :, 0].sum(1) + ref["terminal_costs"][:, 0],
            exact.costs[0],
        ),
    ):
        se = float(np.sqrt(a.var() / a.size + b.var() / b.size))
        check[name] = dict(
            jax=float(a.mean()),
            numpy=float(b.mean()),
            se=se,
            z=float((a.mean() - b.mean()) / se),
            exact=float(m),
            z_jax_exact=float((a.mean() - m) / np.sqrt(a.var() / a.size)),
            z_numpy_exact=float((b.mean() - m) / np.sqrt(b.var() / b.size)),
        )

    # policies as users write them (rollout and rollout_returns), and compact records
    policies = policy_rows(env, params, args.policy_batch_size, args.policy_repeats)
    ratios = policy_ratios(policies)

    sharded = []
    if args.devices > 1 and len(jax.devices()) >= args.devices:
        mesh = jax.make_mesh((args.devices,), ("episodes",), axis_types=(jax.sharding.AxisType.Auto,))
        spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("episodes"))
        for k in [b for b in batch_sizes if b % args.devices == 0 and b >= 256]:
            sharded.append(dict(K=k, devices=args.devices, **bench_jax(env, params, k, repeats, spec)))

    header = (
        f"{'K':>6} {'compile s':>10} {'run ms':>10} {'env-steps/s':>13} {'numpy ms':>10} {'numpy steps/s':>14} "
        f"{'vs numpy':>9} {'vs 1-ep':>8}"
    )
    print(f"GridWorld {env.size}x{env.size}, H={horizon}, uniform random policy; median of {repeats} runs")
    print(header)
    for r in rows:
        print(
            f"{r['K']:>6} {r['compile_s']:>10.2f} {r['median_s'] * 1e3:>10.2f} {r['steps_per_s']:>13.3g} "
            f"{r['numpy_median_s'] * 1e3:>10.2f} {r['numpy_steps_per_s']:>14.3g} {r['ratio_vs_numpy']:>8.2f}x "
            f"{r['ratio_vs_numpy_one_episode']:>7.1f}x"
        )
    print("episode totals only (fhc_jax.rollout_returns vs numpy_returns):")
    print(header)
    for r in returns_rows:
        print(
            f"{r['K']:>6} {r['compile_s']:>10.2f} {r['median_s'] * 1e3:>10.2f} {r['steps_per_s']:>13.3g} "
            f"{r['numpy_median_s'] * 1e3:>10.2f} {r['numpy_steps_per_s']:>14.3g} {r['ratio_vs_numpy']:>8.2f}x "
            f"{r['ratio_vs_numpy_one_episode']:>7.1f}x"
        )
    print(f"numpy one episode at a time: {single_rate:.3g} env-steps/s")
    print(
        "same semantics (K=4096, mean episode totals): "
        + ", ".join(
            f"{n} jax {c['jax']:.3f} vs numpy {c['numpy']:.3f} (z = {c['z']:+.2f}), exact {c['exact']:.3f} "
            f"(z jax {c['z_jax_exact']:+.2f}, numpy {c['z_numpy_exact']:+.2f})"
            for n, c in check.items()
        )
    )
    for r in sharded:
        print(
            f"sharded over {r['devices']} host devices, K={r['K']}: compile {r['compile_s']:.2f} s, "
            f"run {r['median_s'] * 1e3:.2f} ms, {r['steps_per_s']:.3g} env-steps/s"
        )
    print(f"policies as users call them, K={args.policy_batch_size}, median of {args.policy_repeats} runs:")
    print(f"{'policy':<32} {'call':<16} {'record':<32} {'compile s':>9} {'run ms':>9} {'env-steps/s':>12}")
    for r in policies:
        record = "-" if r["record"] is None else ("all" if r["record"] == "all" else ",".join(r["record"]))
        print(
            f"{r['policy']:<32} {r['call']:<16} {record:<32} {r['compile_s']:>9.2f} {r['median_s'] * 1e3:>9.2f} "
            f"{r['steps_per_s']:>12.3g}"
        )
    for call, rr in ratios.items():
        print(
            f"{call}: softmax_policy / uniform = {rr['softmax_helper_vs_uniform']:.2f} (per step: "
            f"{rr['softmax_helper_per_step_vs_uniform']:.2f}), categorical / uniform = "
            f"{rr['softmax_categorical_vs_uniform']:.3f}, softmax_policy / categorical = "
            f"{rr['softmax_helper_vs_categorical']:.1f}x"
        )

    result = dict(
        benchmark="env_throughput",
        env=dict(name="GridWorld", size=env.size, horizon=horizon, observation="xy", slip=float(params.slip)),
        policy="uniform random",
        repeats=repeats,
        quick=args.quick,
        **source,
        machine=machine_info(),
        jax=rows,
        jax_returns_only=returns_rows,
        jax_sharded=sharded,
        policies=dict(
            K=args.policy_batch_size,
            repeats=args.policy_repeats,
            logits="o @ W[h] + b[h], W, b ~ N(0, 1)",
            rows=policies,
            ratios=ratios,
        ),
        semantics_check=check,
        numpy_one_episode=dict(episodes=n_single, median_s=single_s, steps_per_s=single_rate),
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, result)
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main(ARGS)
