"""Rebuilding a trained run from its directory: :func:`load_run` (used by ``fhc-jax eval``,
:mod:`fhc_jax.experiment.evaluation`).

:func:`load_run` reads a run directory written by ``fhc-jax train``
(:mod:`fhc_jax.experiment.rundir`): the configuration exactly as ``config.json`` holds it, the
environment and its params through the environment registry
(:mod:`fhc_jax.experiment.config`), and the final train state of every seed from the
run's final checkpoint (``checkpoints/<num_iterations>/``), verified against its manifest
(:mod:`fhc_jax.experiment.checkpoint`). ``LoadedRun.policy(r)`` is seed r's final policy as
``policy(key, obs, h)`` for :func:`fhc_jax.rollout` / :func:`fhc_jax.rollout_returns` (the
learner's own ``policy(train_state, env, params)``). Nothing is written.

A run directory of another format version (:data:`fhc_jax.experiment.rundir.FORMAT_VERSION`)
is refused with the command that trains it again; a missing or damaged file is refused with one
line naming it and what to do.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import jax
import numpy as np

from fhc_jax.algos.learner import judged_exactly
from fhc_jax.envs.base import Environment
from fhc_jax.experiment import checkpoint, rundir
from fhc_jax.experiment.config import ExperimentSpec, load_spec
from fhc_jax.experiment.config import load_algorithm
from fhc_jax.experiment.runner import ChunkedTrainer, ChunkState, seed_keys

Array = jax.Array


# ----------------------------------------------------------------------------- reading a run


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """What a run directory declares, read and validated without compiling anything.

    Attributes:
        path: the run directory.
        config: config.json as written.
        spec: the :class:`~fhc_jax.experiment.config.ExperimentSpec` rebuilt from its settings.
        module: the learner module.
        env, params: the trained environment (through the registry) and its params.
        final_checkpoint: ``checkpoints/<num_iterations>/``.
        summary: summary.json, or None when absent or unreadable.
    """

    path: Path
    config: dict
    spec: ExperimentSpec
    module: ModuleType
    env: Environment
    params: Any
    final_checkpoint: Path
    summary: dict | None

    @property
    def exact(self) -> bool:
        """Whether the policies are tables judged exactly (as training judged them)."""
        return judged_exactly(self.env)

    @property
    def rerun(self) -> str:
        """The command that trains this run again (config.json's ``rerun``, ``--out`` filled in)."""
        return rundir.rerun_command(self.config, self.path)


def read_run(path: str | Path) -> RunFiles:
    """Read and check a run directory's files (config.json, the final checkpoint's presence,
    summary.json if any) and rebuild its environment; nothing is compiled or written.

    Raises:
        RunDirectoryError: not a run directory, a missing or damaged config.json, settings this
            fhc_jax no longer accepts, a sweep directory, or no final checkpoint (an
            incomplete or diverged run), each naming the file and what to do.
    """
    path = Path(path)
    if not path.is_dir():
        raise rundir.RunDirectoryError(f"{path} is not a run directory (no such directory)")
    config_path = path / rundir.CONFIG
    if not config_path.is_file():
        raise rundir.RunDirectoryError(f"{config_path} does not exist: {path} is not a run directory written by "
                                       "fhc-jax train (or its config.json was deleted: restore it from a copy)")
    config = rundir.read_json(config_path)
    if not isinstance(config, dict):
        raise rundir.RunDirectoryError(f"{config_path} is not a run's configuration (not a JSON object); restore it "
                                       "from a copy or retrain")
    if config.get("kind") == "sweep":
        raise rundir.RunDirectoryError(f"{path} is a sweep directory (fhc-jax sweep); evaluate a run written by "
                                       "fhc-jax train")
    rundir.check_format(config, path)
    settings = config.get("settings")
    if not isinstance(settings, dict):
        raise rundir.RunDirectoryError(f"{config_path} has no 'settings': it is damaged or not written by fhc-jax "
                                       "train; restore it from a copy or retrain")
    try:
        spec = load_spec(settings=settings)
        module = load_algorithm(spec.algo)
        env, params = spec.make_env()
    except ValueError as err:
        raise rundir.RunDirectoryError(f"{config_path}: its settings are not valid for this version of fhc_jax "
                                       f"({err}); retrain the run with this version") from None
    try:  # only compared with, never needed: a missing or damaged summary.json does not stop a load
        summary = rundir.read_json(path / rundir.SUMMARY)
    except rundir.RunDirectoryError:
        summary = None
    summary = summary if isinstance(summary, dict) else None
    ckpt_dir = path / rundir.CHECKPOINTS
    final = ckpt_dir / str(spec.num_iterations)
    files = RunFiles(path=path, config=config, spec=spec, module=module, env=env, params=params,
                     final_checkpoint=final, summary=summary)
    if not final.is_dir():
        raise rundir.RunDirectoryError(_missing_final(files, ckpt_dir))
    return files


def _missing_final(files: RunFiles, ckpt_dir: Path) -> str:
    n = files.spec.num_iterations
    head = f"{files.final_checkpoint} does not exist (the final checkpoint, iteration {n}, holds the trained policies)"
    s = files.summary or {}
    if s.get("complete") is False and "divergence" in s:
        return f"{head}: the run diverged at iteration {s.get('stopped_at_iteration', '?')}, so it has no final " \
               f"policy; retrain with smaller step sizes ({s.get('reason', '')})".rstrip(" ()")
    latest = checkpoint.latest_iteration(ckpt_dir)
    if latest is not None and latest < n:
        return f"{head}: the run stopped at iteration {latest} of {n}; finish it with: fhc-jax train --resume --out " \
               f"{files.path}"
    return f"{head}; restore the run directory from a copy or retrain: {files.rerun}"


# ----------------------------------------------------------------------------- the loaded run


@dataclasses.dataclass
class LoadedRun:
    """A trained run rebuilt from its directory (:func:`load_run`).

    Attributes:
        path: the run directory. config: config.json as written. spec: its
            :class:`~fhc_jax.experiment.config.ExperimentSpec`. module: the learner module.
        env, params: the environment it was trained on and its params.
        iteration: the final checkpoint's iteration (= ``spec.num_iterations``).
        train_states: the final train state of every seed, leading axis R (device arrays).
        multipliers: the learned multipliers of the last iteration, (R, M), or None.
        verification: how the final checkpoint was verified: "manifest" (CRC-32 of every array and
            the configuration hash checked).
        summary: summary.json, or None.
    """

    path: Path
    config: dict
    spec: ExperimentSpec
    module: ModuleType
    env: Environment
    params: Any
    iteration: int
    train_states: Any
    multipliers: np.ndarray | None
    verification: str
    summary: dict | None
    _trainer: ChunkedTrainer = dataclasses.field(repr=False)
    _state: ChunkState = dataclasses.field(repr=False)

    @property
    def num_seeds(self) -> int:
        """R."""
        return self.spec.seeds

    @property
    def exact(self) -> bool:
        """Whether the policies are tables over a tabular exact model (judged exactly)."""
        return judged_exactly(self.env)

    def _seed(self, seed_index: int) -> int:
        if isinstance(seed_index, bool) or not isinstance(seed_index, (int, np.integer)) \
                or not 0 <= seed_index < self.num_seeds:
            raise ValueError(f"seed_index must be an integer in [0, {self.num_seeds - 1}] ({self.num_seeds} seeds), "
                             f"found {seed_index!r}")
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
            raise ValueError(f"policy_tables: {self.env.name} has no tabular exact model; use policy(seed_index) "
                             "with fhc_jax.rollout_returns")
        return self._trainer.policy_tables(self._state)


def load_run(path: str | Path) -> LoadedRun:
    """Rebuild a trained run from its directory (module docstring); only reads.

    Args:
        path: a run directory written by ``fhc-jax train`` (complete: its final checkpoint exists).
    Returns:
        :class:`LoadedRun`.
    Raises:
        RunDirectoryError: missing or damaged files (:func:`read_run`), naming the file.
        CheckpointError: the final checkpoint is damaged or belongs to another configuration.
    """
    return restore_run(read_run(path))


def restore_run(files: RunFiles) -> LoadedRun:
    """:func:`load_run` of already checked :class:`RunFiles` (compiles the learner's init)."""
    spec, env, params = files.spec, files.env, files.params
    learner = files.module.make_learner(env, params, spec.learner)
    trainer = ChunkedTrainer(learner, spec.seeds, spec.chunk_size)
    template = _template(learner, seed_keys(spec.seed, spec.seeds))
    ckpt_dir = files.path / rundir.CHECKPOINTS
    n = spec.num_iterations
    advice = f"restore the run directory from a copy or retrain: {files.rerun}"
    try:
        state = checkpoint.restore(ckpt_dir, trainer, template, n,
                                   config_hash=rundir.settings_hash(files.config["settings"]), num_iterations=n)
    except checkpoint.CheckpointError as err:
        raise checkpoint.CheckpointError(f"{err}; {advice}") from None
    multipliers = state.metrics.get("multipliers")
    return LoadedRun(path=files.path, config=files.config, spec=spec, module=files.module, env=env, params=params,
                     iteration=state.iteration, train_states=state.carry.state,
                     multipliers=None if multipliers is None else np.asarray(multipliers[:, -1], np.float64),
                     verification="manifest", summary=files.summary, _trainer=trainer, _state=state)


def _template(learner: Any, keys: Array) -> ChunkState:
    """A :class:`ChunkState` whose carry has the structure, shapes and dtypes of the runs' initial
    carries (what a checkpoint is restored into), built from ``jax.eval_shape`` of the learner's
    init without compiling it (``ChunkedTrainer.init`` would also compile an evaluation)."""
    shapes = jax.eval_shape(jax.vmap(lambda k: learner.init(k, learner.config)), keys)
    key = keys[0]

    def leaf(s):
        if jax.dtypes.issubdtype(s.dtype, jax.dtypes.prng_key):
            k = jax.random.split(key, s.shape) if s.shape else key
            if k.dtype != s.dtype:  # another key implementation: build it the slow way
                raise TypeError
            return k
        return jax.numpy.zeros(s.shape, s.dtype)

    try:
        carry = jax.tree.map(leaf, shapes)
    except TypeError:
        carry = jax.jit(jax.vmap(lambda k: learner.init(k, learner.config)))(keys)
    r = int(keys.shape[0])
    return ChunkState(carry=carry, iteration=0, metrics={}, exact_iterations=np.zeros(1, np.int64),
                      exact_reward=np.zeros((r, 1)), exact_costs=np.zeros((r, 1, 1)))
