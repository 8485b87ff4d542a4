"""Reference numbers from an independent implementation: rejax's PPO on two gymnax tasks.

What it measures: for one task, ``--seeds`` independent runs of rejax's PPO trained with rejax's
own published hyperparameters for that environment, all seeds in one ``jax.jit(jax.vmap(
algo.train))(keys)`` call (the idiom of rejax's README); the compile + train wall time of that
call; then, per seed, the mean undiscounted return of the final policy over ``--episodes``
fresh episodes and its 95% half-width (1.96 * sample std / sqrt(E)), and the median of the seeds'
means. This script does not import fhc_jax: it is the outside reference.

Tasks (gymnax default parameters, so the gymnax episode limit is the horizon):

* ``pendulum``: gymnax ``Pendulum-v1``, episodes of exactly 200 steps;
* ``cartpole``: gymnax ``CartPole-v1``, episodes end at the pole's fall or at 500 steps.

Hyperparameters: the ``ppo`` section of rejax's ``configs/gymnax/pendulum.yaml`` and
``configs/gymnax/cartpole.yaml`` at keraJLi/rejax tag v0.1.3 (commit 4587115ef246; unchanged since
commit 4954fbf6a765, "Updated configs and added test"), copied below (``CONFIGS``).

Env steps: rejax's on-policy loop runs ``ceil(total_timesteps / eval_freq)`` evaluation blocks of
``ceil(eval_freq / (num_envs * num_steps))`` iterations of ``num_envs * num_steps`` steps, so it
can take more steps than ``total_timesteps``: with the Pendulum config (``eval_freq`` 2,000 <
10,000 steps per iteration) 75 iterations take 750,000 steps for a nominal 150,000. ``env_steps``
is the count rejax's train state records (``global_step``), ``config_total_timesteps`` the
nominal one.

Evaluation: the policy is played as rejax's own evaluation plays it, through ``algo.make_act``,
which in rejax 0.1.3 *samples* from the policy (a categorical draw for CartPole; a Gaussian draw
clipped to the action bounds for Pendulum), after normalizing observations with the final
running statistics when the config normalizes them. The deterministic policy (argmax / clipped
mean) is reported alongside as ``seeds_deterministic``. Each episode starts from a gymnax reset
and sums rewards until ``done`` or the horizon.

Environment: rejax 0.1.3 declares ``gymnax>=0.0.9`` but unpacks the 5-tuple ``step`` of gymnax
0.x; gymnax 1.x returns ``terminated`` and ``truncated`` apart (6 values), so rejax's training
fails on it. Its own virtual environment, with gymnax pinned below 1.0::

    python3 -m venv /work/rejax-venv && /work/rejax-venv/bin/pip install rejax==0.1.3 "gymnax<1.0"

Usage::

    /work/rejax-venv/bin/python benchmarks/reference_rejax.py --task pendulum --seeds 5 \\
        --out benchmarks/results/reference/rejax_pendulum.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import rejax

REPO = "keraJLi/rejax"
REJAX_COMMIT = "4587115ef2462f60219b8c65efdd6f7f3e027968"  # tag v0.1.3

#: task -> (gymnax environment id, horizon, config file in the rejax repository)
TASKS: dict[str, tuple[str, int, str]] = {
    "pendulum": ("Pendulum-v1", 200, "configs/gymnax/pendulum.yaml"),
    "cartpole": ("CartPole-v1", 500, "configs/gymnax/cartpole.yaml"),
}

#: the ``ppo`` section of each config file, verbatim
CONFIGS: dict[str, dict[str, Any]] = {
    "pendulum": {
        "env": "Pendulum-v1",
        "agent_kwargs": {"activation": "swish"},
        "num_envs": 100,
        "num_steps": 100,
        "num_epochs": 10,
        "num_minibatches": 10,
        "learning_rate": 0.001,
        "max_grad_norm": 10,
        "total_timesteps": 150_000,
        "eval_freq": 2000,
        "gamma": 0.995,
        "gae_lambda": 0.95,
        "clip_eps": 0.2,
        "ent_coef": 0.0,
        "vf_coef": 0.5,
        "normalize_observations": True,
    },
    "cartpole": {
        "env": "CartPole-v1",
        "agent_kwargs": {"activation": "tanh"},
        "num_envs": 5,
        "num_steps": 100,
        "num_epochs": 5,
        "num_minibatches": 5,
        "learning_rate": 0.00075,
        "max_grad_norm": 0.5,
        "total_timesteps": 100_000,
        "eval_freq": 1000,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "clip_eps": 0.2,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
    },
}

EVALUATION = (
    "rejax's own act function (algo.make_act on the final train state): an action sampled from the "
    "policy (categorical draw / Gaussian draw clipped to the action bounds), observations normalized "
    "with the final running statistics when the config normalizes them; each episode from a gymnax "
    "reset, undiscounted rewards summed until done or the horizon."
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--seeds", type=int, default=5, help="independent training runs (seeds 0..N-1)")
    parser.add_argument(
        "--total-timesteps",
        type=int,
        default=None,
        help="override the config's total_timesteps (default: the config's)",
    )
    parser.add_argument("--episodes", type=int, default=1000, help="evaluation episodes per seed")
    parser.add_argument("--out", type=Path, required=True, help="the results JSON")
    return parser.parse_args(argv)


def make_deterministic_act(algo: rejax.PPO, ts: Any) -> Any:
    """The policy's mode: the argmax action (CartPole) or the Gaussian mean clipped to the action
    bounds (Pendulum), after the same observation normalization as ``algo.make_act``."""

    def act(obs: jax.Array, rng: jax.Array) -> jax.Array:
        del rng
        if getattr(algo, "normalize_observations", False):
            obs = algo.normalize_obs(ts.obs_rms_state, obs)
        dist_mode = lambda module, x: module._action_dist(x).mode()
        action = algo.actor.apply(ts.actor_ts.params, jnp.expand_dims(obs, 0), method=dist_mode)
        if not algo.discrete:
            space = algo.env.action_space(algo.env_params)
            action = jnp.clip(action, space.low, space.high)
        return jnp.squeeze(action)

    return act


def episode_returns(act: Any, env: Any, env_params: Any, key: jax.Array, episodes: int, horizon: int) -> jax.Array:
    """Undiscounted returns of ``episodes`` episodes of ``act`` (obs, key) -> action: a fixed
    ``horizon``-step scan per episode whose rewards count until the first ``done`` (gymnax
    auto-resets after it; those steps are masked out)."""

    def one(key: jax.Array) -> jax.Array:
        key_reset, key_run = jax.random.split(key)
        obs, state = env.reset(key_reset, env_params)

        def step(carry: tuple, key_t: jax.Array) -> tuple[tuple, None]:
            obs, state, total, done = carry
            key_act, key_step = jax.random.split(key_t)
            action = act(obs, key_act)
            obs, state, reward, step_done, _ = env.step(key_step, state, action, env_params)
            total = total + jnp.where(done, 0.0, jnp.squeeze(reward))
            return (obs, state, total, jnp.logical_or(done, step_done)), None

        carry = (obs, state, jnp.zeros(()), jnp.zeros((), dtype=bool))
        (_, _, total, _), _ = jax.lax.scan(step, carry, jax.random.split(key_run, horizon))
        return total

    return jax.vmap(one)(jax.random.split(key, episodes))


def summarize(returns: np.ndarray) -> list[dict[str, float | int]]:
    """Per seed (rows of ``returns``): mean return and its 95% half-width."""
    episodes = returns.shape[1]
    return [
        {
            "seed": i,
            "mean_return": float(r.mean()),
            "half_width": float(1.96 * r.std(ddof=1) / math.sqrt(episodes)),
        }
        for i, r in enumerate(returns)
    ]


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("rejax", "gymnax", "jax", "jaxlib", "flax", "optax", "distrax", "chex", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def hardware_line() -> str:
    model = platform.processor() or "CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip().replace("(R)", "").replace("(TM)", "")
                break
    except OSError:
        pass
    host = f"{model}, {os.cpu_count()} cores"
    device = jax.devices()[0]
    if device.platform == "cpu":
        return f"{host}, no accelerator"
    return f"{jax.device_count()} x {device.device_kind} ({host} host)"


def git_revision() -> dict[str, Any]:
    """The revision of the repository this script sits in (the results' provenance), if any."""
    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {"revision": rev.stdout.strip(), "dirty": bool(status.stdout.strip())}


def write_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> dict[str, Any]:
    env_id, horizon, config_path = TASKS[args.task]
    config = dict(CONFIGS[args.task])
    if args.total_timesteps is not None:
        config["total_timesteps"] = args.total_timesteps

    env, env_params = gymnax.make(env_id)
    if env_params.max_steps_in_episode != horizon:
        raise RuntimeError(f"{env_id}: gymnax episode limit {env_params.max_steps_in_episode}, expected {horizon}")

    # rejax.create pops from nested dicts it is given, so hand it a copy
    algo = rejax.PPO.create(**json.loads(json.dumps(config)))
    seeds = np.arange(args.seeds)
    keys = jax.vmap(lambda s: jax.random.split(jax.random.PRNGKey(s)))(seeds)
    train_keys, eval_keys = keys[:, 0], keys[:, 1]

    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(algo.train)).lower(train_keys).compile()
    t1 = time.perf_counter()
    ts, (_, internal_returns) = jax.block_until_ready(compiled(train_keys))
    t2 = time.perf_counter()
    print(f"{args.task}: compile {t1 - t0:.1f} s, train {t2 - t1:.1f} s ({args.seeds} seeds)", flush=True)

    def evaluate(ts: Any, key: jax.Array, deterministic: bool) -> jax.Array:
        act = make_deterministic_act(algo, ts) if deterministic else algo.make_act(ts)
        return episode_returns(act, env, env_params, key, args.episodes, horizon)

    t3 = time.perf_counter()
    sampled = np.asarray(jax.jit(jax.vmap(lambda t, k: evaluate(t, k, False)))(ts, eval_keys))
    deterministic = np.asarray(jax.jit(jax.vmap(lambda t, k: evaluate(t, k, True)))(ts, eval_keys))
    eval_s = time.perf_counter() - t3

    steps = np.asarray(ts.global_step)
    if not (steps == steps[0]).all():
        raise RuntimeError(f"seeds trained for different step counts: {steps}")
    rows = summarize(sampled)
    internal = np.asarray(internal_returns)[:, -1].mean(axis=-1)  # last rejax evaluation, 128 episodes
    for row, value in zip(rows, internal):
        row["rejax_internal_final_eval"] = float(value)
    rows_det = summarize(deterministic)
    ver = versions()
    return {
        "task": args.task,
        "gymnax_env": env_id,
        "horizon": horizon,
        "rejax_version": ver["rejax"],
        "versions": ver,
        "jax": ver["jax"],
        "hardware_line": hardware_line(),
        **git_revision(),
        "config_source": f"{REPO}@{REJAX_COMMIT[:12]} (tag v0.1.3): {config_path}, section ppo",
        "config": config,
        "config_total_timesteps": config["total_timesteps"],
        "env_steps": int(steps[0]),
        "env_steps_note": (
            "global_step of rejax's train state: ceil(total_timesteps / eval_freq) blocks of "
            "ceil(eval_freq / (num_envs * num_steps)) iterations of num_envs * num_steps steps"
        ),
        "wall_s": t2 - t0,
        "compile_s": t1 - t0,
        "train_s": t2 - t1,
        "eval_s": eval_s,
        "episodes": args.episodes,
        "seeds": rows,
        "median_return": float(np.median([r["mean_return"] for r in rows])),
        "seeds_deterministic": rows_det,
        "median_return_deterministic": float(np.median([r["mean_return"] for r in rows_det])),
        "evaluation": EVALUATION,
        "command": shlex.join([sys.executable, *sys.argv]),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    write_atomic(args.out, result)
    print(json.dumps({k: result[k] for k in ("task", "env_steps", "wall_s", "median_return")}))
    for row, det in zip(result["seeds"], result["seeds_deterministic"]):
        print(
            f"  seed {row['seed']}: {row['mean_return']:.2f} +- {row['half_width']:.2f} (sampled), "
            f"{det['mean_return']:.2f} +- {det['half_width']:.2f} (deterministic), "
            f"rejax's last eval {row['rejax_internal_final_eval']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
