"""A trained run rebuilt from its directory (:func:`load_run`) and its final policies judged
again, on the environment it was trained on or on a changed one (``fhc-jax eval``).

:func:`load_run` reads a run directory written by ``fhc-jax train`` through
:func:`fhc_jax.experiment.rundir.read_run` (the configuration exactly as config.json holds it,
the environment through the registry) and restores the final train state of every seed from the
run's final checkpoint (``checkpoints/<num_iterations>/``), verified against its manifest
(:mod:`fhc_jax.experiment.checkpoint`). ``LoadedRun.policy(r)`` is seed r's final policy as
``policy(key, obs, h)`` for :func:`fhc_jax.rollout` / :func:`fhc_jax.rollout_returns` (the
learner's own ``policy(train_state, env, params)``). Nothing is written.

:func:`evaluate_run` judges those policies with the one judge (:mod:`fhc_jax.experiment.judge`):
exactly where the learner's policy is a table over a tabular exact model
(:func:`fhc_jax.algos.core.paths.judged_exactly`, as training judged it), with the gap to the
optimum of ``fhc_jax.solve``; otherwise by Monte-Carlo with 95% intervals against the
environment's reference policy. A changed environment (``--set env.slip=0.2``,
:func:`target_environment`) judges the same policies elsewhere (robustness): every change is
validated like ``fhc-jax train``'s ``--set`` before anything is compiled, and a change the
policies cannot follow (another horizon, number of actions, state space for a tabular policy,
observation shape) is refused.

``fhc-jax eval RUN`` (:func:`eval_run`) writes ``RUN/eval/<name>.json``
atomically and touches nothing else (config.json, metrics.csv, summary.json, policy.npz and
checkpoints stay as they are); it holds the run directory's writer lock
(:func:`fhc_jax.experiment.writer_lock.locked`) while it reads the checkpoint and writes, so it never
reads a run that ``fhc-jax train --resume`` or ``--overwrite`` is changing, and a second writer
is refused the way every ``fhc-jax`` command refuses one.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.algos.core.scaffold import play_environment
from fhc_jax.envs.base import Environment
from fhc_jax.experiment import checkpoint, config, fingerprint, judge, rundir, writer_lock
from fhc_jax.experiment.judgement import Judgement
from fhc_jax.experiment.rundir import RunFiles
from fhc_jax.experiment.runner import ChunkedTrainer, ChunkState, seed_keys
from fhc_jax.experiment.typed_settings import ConfigError, parse_assignment, plain, short_value

Array = jax.Array

#: the folder of a run directory that ``fhc-jax eval`` writes into
EVAL_DIR = "eval"
#: what to do when another process writes the run directory
IN_USE = "wait for it to finish, then run fhc-jax eval again"
#: ``--episodes``: the range of ``run.eval_episodes``
EPISODES = next(s for s in config.RUN_SETTINGS if s.name == "eval_episodes")
#: largest |difference| from summary.json's values that goes without a note (same code, same
#: machine: 0)
SUMMARY_TOLERANCE = 1e-6


# ----------------------------------------------------------------------------- the loaded run


def final_checkpoint(files: RunFiles) -> Path:
    """``checkpoints/<num_iterations>/`` of a read run directory.

    Raises:
        RunDirectoryError: it does not exist (an incomplete or diverged run, or a deleted
            checkpoint), saying how to finish the run or what to do.
    """
    n = files.spec.num_iterations
    final = files.path / rundir.CHECKPOINTS / str(n)
    if final.is_dir():
        return final
    head = f"{final} does not exist (the final checkpoint, iteration {n}, holds the trained policies)"
    s = files.summary or {}
    if s.get("complete") is False and "divergence" in s:
        raise rundir.RunDirectoryError(
            f"{head}: the run diverged at iteration {s.get('stopped_at_iteration', '?')}, so it has no final policy; "
            f"retrain with smaller step sizes ({s.get('reason', '')})".rstrip(" ()")
        )
    latest = checkpoint.latest_iteration(final.parent)
    if latest is not None and latest < n:
        raise rundir.RunDirectoryError(
            f"{head}: the run stopped at iteration {latest} of {n}; finish it with: "
            f"fhc-jax train --resume --out {files.path}"
        )
    raise rundir.RunDirectoryError(f"{head}; restore the run directory from a copy or retrain: {files.rerun}")


@dataclasses.dataclass(frozen=True)
class LoadedRun(RunFiles):
    """A trained run rebuilt from its directory (:func:`load_run`): the
    :class:`~fhc_jax.experiment.rundir.RunFiles` of the directory and

    Attributes:
        iteration: the final checkpoint's iteration (= ``spec.num_iterations``).
        train_states: the final train state of every seed, leading axis R (device arrays).
        multipliers: the learned multipliers of the last iteration, (R, M), or None.
        verification: how the final checkpoint was verified: "manifest" (CRC-32 of every array and
            the configuration hash checked).
    """

    iteration: int
    train_states: Any
    multipliers: np.ndarray | None
    trainer: ChunkedTrainer = dataclasses.field(repr=False)
    state: ChunkState = dataclasses.field(repr=False)
    verification: str = "manifest"

    @property
    def num_seeds(self) -> int:
        """R."""
        return self.spec.seeds

    def _seed(self, seed_index: int) -> int:
        if (
            isinstance(seed_index, bool)
            or not isinstance(seed_index, (int, np.integer))
            or not 0 <= seed_index < self.num_seeds
        ):
            raise ValueError(
                f"seed_index must be an integer in [0, {self.num_seeds - 1}] ({self.num_seeds} seeds), "
                f"found {seed_index!r}"
            )
        return int(seed_index)

    def train_state(self, seed_index: int) -> Any:
        """Seed ``seed_index``'s final train state (no leading axis)."""
        r = self._seed(seed_index)
        return jax.tree.map(lambda x: x[r], self.train_states)

    def policy(self, seed_index: int) -> Callable[[Array, Array, Array], Array]:
        """Seed ``seed_index``'s final policy, ``act(key, obs, h) -> action`` for
        :func:`fhc_jax.rollout` / :func:`fhc_jax.rollout_returns` in :attr:`env` (or an
        environment with the same observations), from the learner's ``policy``."""
        return self.module.policy(self.train_state(seed_index), self.env, self.params)

    def policy_tables(self) -> np.ndarray:
        """Every seed's final policy table, (R, H, S, A) float32: what training evaluated and
        wrote to policy.npz (tabular exact models only).

        Raises:
            ValueError: the environment has no tabular exact model.
        """
        if not self.exact:
            raise ValueError(
                f"policy_tables: {self.env.name} has no tabular exact model; use policy(seed_index) "
                "with fhc_jax.rollout_returns"
            )
        return self.trainer.policy_tables(self.state)


def load_run(path: str | Path) -> LoadedRun:
    """Rebuild a trained run from its directory (module docstring); only reads.

    Args:
        path: a run directory written by ``fhc-jax train`` (complete: its final checkpoint exists).
    Returns:
        :class:`LoadedRun`.
    Raises:
        RunDirectoryError: missing or damaged files, naming the file.
        CheckpointError: the final checkpoint is damaged or belongs to another configuration.
    """
    return restore_run(rundir.read_run(path))


def restore_run(files: RunFiles) -> LoadedRun:
    """:func:`load_run` of already read :class:`~fhc_jax.experiment.rundir.RunFiles`: the
    chunked driver started from the verified final checkpoint (nothing left to train)."""
    spec, n = files.spec, files.spec.num_iterations
    ckpt_dir = final_checkpoint(files).parent
    trainer = ChunkedTrainer(
        spec.module.make_learner(files.env, files.params, spec.learner), spec.seeds, spec.chunk_size
    )

    def restore(template: ChunkState) -> ChunkState:
        try:
            return checkpoint.restore(ckpt_dir, trainer, template, n, config_hash=files.config_hash, num_iterations=n)
        except checkpoint.CheckpointError as err:
            raise checkpoint.CheckpointError(
                f"{err}; restore the run directory from a copy or retrain: {files.rerun}"
            ) from None

    state = trainer.drive(seed_keys(spec.seed, spec.seeds), restore=restore)
    multipliers = state.metrics.get("multipliers")
    return LoadedRun(
        **{f.name: getattr(files, f.name) for f in dataclasses.fields(RunFiles)},
        iteration=state.iteration,
        train_states=state.carry.selection.state,
        multipliers=None if multipliers is None else np.asarray(multipliers[:, -1], np.float64),
        trainer=trainer,
        state=state,
    )


# ----------------------------------------------------------------------------- the judged environment


@dataclasses.dataclass(frozen=True)
class Target:
    """The environment a run's policies are judged on.

    Attributes:
        name: the environment's registered name. settings: every setting (defaults filled in).
        changes: the settings that differ from the trained environment's, name -> value.
        env, params: the environment and its params. title: e.g. ``gridworld (slip=0.2)``.
        exact: judged exactly (tables on the exact model) or by Monte-Carlo.
        episodes: Monte-Carlo episodes per seed (None when exact).
        environment_change: how the environment built from the run's settings now differs from
            the one the run was trained on (its code or data changed,
            :func:`fhc_jax.experiment.fingerprint.environment_difference`), None when it does
            not, or :data:`~fhc_jax.experiment.fingerprint.NOT_RECORDED`.
    """

    name: str
    settings: dict
    changes: dict
    env: Environment
    params: Any
    title: str
    exact: bool
    episodes: int | None
    environment_change: str | None = None

    @property
    def as_trained(self) -> bool:
        """No setting changed and the environment is the one the run was trained on (or could
        not be checked: :attr:`environment_change` says so)."""
        return not self.changes and self.environment_change in (None, fingerprint.NOT_RECORDED)

    def where(self) -> str:
        """The environment judged on, for the table: its title and ``[as trained]``, or what
        changed (settings, and the environment itself where its code or data changed)."""
        parts = [", ".join(f"{k}={short_value(v)}" for k, v in self.changes.items())] if self.changes else []
        if self.environment_change == fingerprint.NOT_RECORDED:
            return self.title + (
                f" [changed: {parts[0]}]"
                if parts
                else " [settings as trained; the environment "
                "was not fingerprinted when the run was trained: cannot check that it is the same]"
            )
        if self.environment_change is not None:
            parts.append(f"the environment itself differs from the trained one: {self.environment_change}")
        return self.title + (f" [changed: {'; '.join(parts)}]" if parts else " [as trained]")


def parse_env_sets(assignments: Iterable[str]) -> dict[str, Any]:
    """``["env.slip=0.2", ...]`` -> ``{"slip": 0.2}`` (values parsed as TOML, like ``--set``).

    Raises:
        ConfigError: an assignment that is not ``env.KEY=VALUE`` (``env.name`` included: the
            environment itself cannot change).
    """
    out: dict[str, Any] = {}
    for text in assignments:
        key, value = parse_assignment(text)
        if key == "env.name":
            raise ConfigError(
                "fhc-jax eval: env.name cannot change (the policies were trained on that environment); "
                "change its settings, e.g. --set env.slip=0.2"
            )
        if not key.startswith("env.") or len(key) <= 4:
            raise ConfigError(f"fhc-jax eval takes only env.* settings (the environment to judge on), found {key!r}")
        out[key[4:]] = value
    return out


def target_environment(
    files: RunFiles | LoadedRun,
    changes: Mapping[str, Any] | None = None,
    episodes: int | None = None,
    *,
    asked: bool | None = None,
) -> Target:
    """The environment to judge ``files``' policies on: the trained one with ``changes``
    (setting name without ``env.`` -> value), validated and checked for transfer; nothing is
    compiled. The environment the run's settings build now is compared with the fingerprint
    the run recorded (:mod:`fhc_jax.experiment.fingerprint`): one whose code or data changed is
    judged on only when a change was asked for.

    Args:
        episodes: Monte-Carlo episodes per seed (default the run's ``run.eval_episodes``);
            ignored when the policies are judged exactly.
        asked: whether the caller asked to judge on a changed environment (``fhc-jax eval``
            with ``--set env.*``); default: whether ``changes`` is given.
    Raises:
        RunDirectoryError: the environment differs from the trained one (its code or data
            changed) and no change was asked for.
        ConfigError: an unknown key (listing the environment's keys), a wrong type, a value
            the environment's constructor refuses, ``episodes`` outside [2,
            :data:`~fhc_jax.experiment.config.MAX_EPISODES`], or a change the policies cannot
            follow (another observation encoder, horizon or number of actions, another state
            space for tabular policies, another observation shape).
    """
    spec = files.spec
    entry = config.load_environment(spec.env_name)
    changes = dict(changes or {})
    settings = entry.validate({**spec.env, **changes})
    env, params = entry.make(settings)
    changed = {k: v for k, v in settings.items() if plain(v) != plain(spec.env.get(k))}
    _check_transfer(files.env, env, spec.env, changed, judged_exactly(files.env))
    exact = judged_exactly(files.env) and judged_exactly(env)
    episodes = EPISODES.check("--episodes", spec.eval_episodes if episodes is None else episodes)
    drift = fingerprint.environment_difference(files.config.get("environment"), files.env, files.params)
    if drift not in (None, fingerprint.NOT_RECORDED) and not (bool(changes) if asked is None else asked):
        raise rundir.RunDirectoryError(
            f"the environment {spec.env_name!r} built from {files.path / rundir.CONFIG}'s settings differs from the "
            "one "
            f"the run was trained on: {drift} (its code or data changed since), so it would not be judged as trained; "
            "restore that environment, or judge the policies on this one on purpose by naming a setting with --set "
            "env.KEY=VALUE (the record then says the environment changed)"
        )
    return Target(
        name=entry.name,
        settings=settings,
        changes=changed,
        env=env,
        params=params,
        title=entry.describe(settings),
        exact=exact,
        episodes=None if exact else int(episodes),
        environment_change=drift,
    )


def _check_transfer(trained: Environment, env: Environment, before: dict, changed: dict, tabular: bool) -> None:
    if not changed:
        return
    keys = ", ".join(f"env.{k}" for k in changed)
    head = f"--set {keys}: the changed environment"
    hint = "change only settings that keep the horizon, actions and states (e.g. env.slip, env.alpha)"
    if "observation" in changed:  # the encoder: what a policy reads (a table policy reads none)
        was, now = before.get("observation"), changed["observation"]
        raise ConfigError(
            f"--set env.observation: the policies were trained on {was!r} observations and cannot "
            f"follow a change of the observation encoder to {now!r}; judge them on {was!r}, or train "
            f"a run on {now!r}"
        )
    if env.horizon != trained.horizon:
        raise ConfigError(f"{head} has horizon {env.horizon}, the policies act over {trained.horizon} stages; {hint}")
    if env.action_space != trained.action_space:
        raise ConfigError(
            f"{head} takes actions {env.action_space}, the policies choose from {trained.action_space}; {hint}"
        )
    if tabular:
        if not judged_exactly(env):
            raise ConfigError(
                f"{head} has no tabular exact model, and the policies are tables over the trained "
                f"environment's states; {hint}"
            )
        if env.num_states != trained.num_states:
            raise ConfigError(
                f"{head} has {env.num_states} states, the policies are tables over "
                f"{trained.num_states} states (a tabular policy cannot transfer to another state "
                f"space); {hint}"
            )
    elif tuple(env.observation_shape) != tuple(trained.observation_shape):
        raise ConfigError(
            f"{head} has observations of shape {tuple(env.observation_shape)}, the policies read "
            f"{tuple(trained.observation_shape)}; {hint}"
        )


# ----------------------------------------------------------------------------- judging


@dataclasses.dataclass(frozen=True)
class RunEvaluation:
    """What :func:`evaluate_run` found.

    Attributes:
        judgement: the :class:`~fhc_jax.experiment.judgement.Judgement` of every seed on the target.
        target: the :class:`Target`.
        record: the JSON record (``fhc-jax eval`` writes it to ``RUN/eval/<name>.json``).
    """

    judgement: Judgement
    target: Target
    record: dict


def evaluate_run(
    run: LoadedRun, target: Target | None = None, *, say: Callable[[str], None] | None = None
) -> RunEvaluation:
    """Judge every seed's final policy on ``target`` (default: the trained environment).

    Exactly (``fhc_jax.evaluate`` of the policy tables, gap to ``fhc_jax.solve``'s optimum of
    the target) where :attr:`Target.exact`; otherwise by Monte-Carlo (``target.episodes``
    episodes per seed of :func:`fhc_jax.rollout_returns`, 95% intervals, against the target's
    reference policy where it has one). The run's feasibility tolerance applies.
    """
    say = say or (lambda msg: None)
    target = target_environment(run) if target is None else target
    t0 = time.perf_counter()
    thresholds = np.asarray(target.env.thresholds(target.params), np.float64).reshape(-1)
    nu = run.multipliers if run.multipliers is not None and run.multipliers.shape[-1] == thresholds.size else None
    tol = run.spec.feasibility_tolerance
    record: dict[str, Any] = {}
    if target.exact:
        cmdp = target.env.to_cmdp(target.params)
        say(f"judging {run.num_seeds} seeds exactly on {target.title}")
        opt, err = judge.solve_optimum(cmdp)
        judged, _ = judge.judge_policies(cmdp, run.policy_tables(), optimum=opt, multipliers=nu, tolerance=tol)
        record["feasibility"] = judge.feasibility(err)
        if err is not None:
            say(f"warning: {err}; no policy can meet the threshold")
    else:
        say(f"judging {run.num_seeds} seeds by Monte-Carlo on {target.title} ({target.episodes} episodes each)")
        # played where the learner plays it (the task's rewards and costs; fhc_jax.algos.core.scaffold.play_environment)
        env, params = play_environment(run.module, run.train_state(0), target.env, target.params)
        policies = [run.module.policy(run.train_state(r), env, params) for r in range(run.num_seeds)]
        judged = judge.judge_monte_carlo(env, params, policies, target.episodes, multipliers=nu, tolerance=tol)
    record = {
        "run": str(run.path),
        "algo": run.spec.algo,
        "iteration": run.iteration,
        "checkpoint_verified_by": run.verification,
        "env": {"name": target.name, **target.settings},
        "env_title": target.title,
        "trained_env": {"name": run.spec.env_name, **run.spec.env},
        "changes": target.changes,
        "environment_change": target.environment_change,
        "judged_by": judged.method,
        "episodes": target.episodes,
        **record,
        **judge.judgement_fields(judged),
    }
    as_trained = target.as_trained and (target.exact or target.episodes == run.spec.eval_episodes)
    if as_trained and run.summary and run.summary.get("complete") and run.summary.get("seeds"):
        record["summary_difference"] = _difference(run.summary, judged)
    record["machine"] = rundir.machine_info()
    record["timing"] = {"judge_s": time.perf_counter() - t0}
    return RunEvaluation(judgement=judged, target=target, record=record)


def _difference(summary: dict, judged: Judgement) -> dict[str, Any] | None:
    """Largest |difference| between summary.json's per-seed reward and costs and ``judged``'s."""
    try:
        reward = np.asarray([row["exact_reward"] for row in summary["seeds"]], np.float64)
        costs = np.asarray([row["exact_costs"] for row in summary["seeds"]], np.float64)
        if reward.shape != judged.reward.shape or costs.shape != judged.costs.shape:
            return None
        return {
            "reward": float(np.max(np.abs(reward - judged.reward))),
            "costs": float(np.max(np.abs(costs - judged.costs))),
        }
    except (KeyError, TypeError, ValueError):
        return None


def format_evaluation(evaluation: RunEvaluation) -> str:
    """:func:`fhc_jax.experiment.judge.format_table` of the evaluation, naming the environment
    judged on and whether summary.json's values were reproduced."""
    t = evaluation.target
    text = judge.format_table(evaluation.judgement, where=t.where())
    diff = evaluation.record.get("summary_difference")
    if diff:
        largest = max(diff.values())
        cause = (
            "another version of fhc_jax, another machine (float32 rounding), or a changed environment: this run "
            "was trained before environments were fingerprinted"
            if t.environment_change is not None
            else "it was written by another version of fhc_jax or on another machine: float32 rounding"
        )
        text += (
            f"\nsummary.json's values reproduced (largest difference {largest:.3g})"
            if largest <= SUMMARY_TOLERANCE
            else f"\nnote: these values differ from summary.json's by up to {largest:.3g} ({cause})"
        )
    return text


# ----------------------------------------------------------------------------- fhc-jax eval


def output_name(target: Target, run_episodes: int, name: str | None = None) -> str:
    """The file stem of ``RUN/eval/<stem>.json``: ``name`` (checked: a plain file name, an
    optional ``.json`` dropped) or one derived from the changes (``trained`` when none;
    ``environment_changed`` when only the environment's code or data changed;
    ``slip=0.2``, ``slip=0.2_alpha=20``; ``_episodes=N`` when a Monte-Carlo judgement uses
    another number of episodes than the run did).

    Raises:
        ConfigError: a ``name`` that is not a plain file name.
    """
    if name is not None:
        stem = name.removesuffix(".json")
        if not stem or stem in (".", "..") or stem.startswith(".") or "/" in stem or "\\" in stem or "\0" in stem:
            raise ConfigError(f"--out must be a plain file name (written to RUN/{EVAL_DIR}/NAME.json), found {name!r}")
        return stem
    parts = [f"{k}={short_value(v)}" for k, v in target.changes.items()]
    if target.episodes is not None and target.episodes != run_episodes:
        parts.append(f"episodes={target.episodes}")
    if not parts and not target.as_trained:  # no setting changed, but the environment's code or data did
        parts.append("environment_changed")
    stem = "_".join(parts) or "trained"
    return re.sub(r"[^A-Za-z0-9._=,+-]", "", stem)[:200] or "changed"


def _same_evaluation(path: Path, record: Mapping[str, Any]) -> bool:
    try:
        old = rundir.read_json(path)
    except rundir.RunDirectoryError:
        return True  # unreadable: nothing usable is lost by rewriting it
    if not isinstance(old, dict):
        return True
    return (
        rundir.jsonable(old.get("env")) == rundir.jsonable(record["env"]) and old.get("episodes") == record["episodes"]
    )


def eval_run(
    run: str | Path,
    env_sets: Iterable[str] = (),
    *,
    episodes: int | None = None,
    name: str | None = None,
    say: Callable[[str], None] | None = None,
    note: Callable[[str], None] | None = None,
    command: str = "fhc-jax eval",
) -> tuple[RunEvaluation, Path]:
    """``fhc-jax eval``: check the run directory, the ``--set env.*`` changes, ``--episodes``
    and that ``RUN/eval/NAME.json`` can be written (and does not hold an evaluation under other
    settings) before compiling anything; then, under the run directory's writer lock, load the
    run, judge it and write that file atomically. Nothing else in the run directory changes.

    Args:
        say: progress messages; note: remarks on the request (default: stderr).
    Returns:
        (the :class:`RunEvaluation`, the file written).
    Raises:
        RunDirectoryError / ConfigError (both ValueError): a usage error, naming the file or key.
        RunInUseError: another process writes the run directory (e.g. still trains it).
        CheckpointError: the final checkpoint is damaged or foreign.
    """
    say = say or (lambda msg: None)
    t0 = time.perf_counter()
    env_sets = list(env_sets)
    changes = parse_env_sets(env_sets)
    files = rundir.read_run(run)
    busy = writer_lock.holder(files.path)
    if busy is not None:  # e.g. still training: its final checkpoint is not there yet
        raise writer_lock.RunInUseError(f"{files.path} is in use by {busy}; {IN_USE}")
    final_checkpoint(files)
    target = target_environment(files, changes, episodes, asked=bool(env_sets))
    if target.environment_change == fingerprint.NOT_RECORDED:
        (note or (lambda msg: print(msg, file=sys.stderr)))(
            f"{command}: note: {files.path / rundir.CONFIG} was {fingerprint.NOT_RECORDED} that the environment is "
            "the one the run was trained on"
        )
    out = files.path / EVAL_DIR / f"{output_name(target, files.spec.eval_episodes, name)}.json"
    rundir.check_writable_file(out)
    if out.is_file() and not _same_evaluation(
        out, {"env": {"name": target.name, **target.settings}, "episodes": target.episodes}
    ):
        raise rundir.RunDirectoryError(
            f"--out: {out} holds an evaluation under other settings; choose another --out (or delete that file)"
        )
    if target.exact and episodes is not None:
        (note or (lambda msg: print(msg, file=sys.stderr)))(
            f"{command}: note: --episodes applies to Monte-Carlo judgements; this run is judged exactly"
        )
    with writer_lock.locked(files.path, f"{command} {files.path}", advice=IN_USE):
        files = rundir.read_run(files.path)  # again under the lock: what we load is what no one is writing
        if target_environment(files, changes, episodes, asked=bool(env_sets)).settings != target.settings:
            raise rundir.RunDirectoryError(
                f"{files.path / rundir.CONFIG} changed while fhc-jax eval started; run it again"
            )
        say(
            f"loading {files.path} ({files.spec.algo}, {files.spec.seeds} seeds, iteration {files.spec.num_iterations})"
        )
        evaluation = evaluate_run(restore_run(files), target, say=say)
        evaluation.record["timing"]["wall_s"] = time.perf_counter() - t0
        rundir.write_json_atomic(out, evaluation.record)
    return evaluation, out
