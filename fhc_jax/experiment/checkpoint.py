"""Checkpoints of chunked runs with orbax (``orbax.checkpoint.CheckpointManager``).

A checkpoint holds the full carry of every run (train state: parameters, critics, optimizer
states, multipliers, step counter; and the loop's PRNG keys, stored as raw key data) plus
everything measured so far (per-iteration metrics, exact evaluations), so a resumed run
continues bit-identically and loses nothing. The carry is stored as a flat dict of its leaves
(``"carry/0"``, ``"carry/1"``, ...); the tree structure (including static fields such as the
feature spec) comes back from a template carry built by the same learner. Orbax writes each
checkpoint into a temporary directory and renames it when complete, so an interrupted write
never leaves a checkpoint that looks finished.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fhc_jax.experiment.runner import ChunkState, ChunkedTrainer


def _manager(directory: Path, max_to_keep: int = 2):
    import orbax.checkpoint as ocp

    logging.getLogger("absl").setLevel(logging.ERROR)  # orbax logs every save at INFO/WARNING
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False)
    return ocp.CheckpointManager(Path(directory).absolute(), options=options)


def _payload(trainer: ChunkedTrainer, state: ChunkState) -> dict[str, Any]:
    leaves = jax.tree.leaves(trainer.host_carry(state.carry))
    return {
        "carry": {str(i): np.asarray(x) for i, x in enumerate(leaves)},
        "metrics": {k: np.asarray(v) for k, v in state.metrics.items()},
        "exact_iterations": np.asarray(state.exact_iterations, np.int64),
        "exact_reward": np.asarray(state.exact_reward),
        "exact_costs": np.asarray(state.exact_costs),
        "iteration": np.asarray(state.iteration, np.int64),
        "elapsed_s": np.asarray(state.elapsed_s, np.float64),
    }


def save(directory: str | Path, trainer: ChunkedTrainer, state: ChunkState, max_to_keep: int = 2) -> Path:
    """Write a checkpoint of ``state`` as step ``state.iteration`` under ``directory``
    (synchronously; keeps the newest ``max_to_keep``). Returns the checkpoint's directory."""
    import orbax.checkpoint as ocp

    mngr = _manager(Path(directory), max_to_keep)
    try:
        mngr.save(state.iteration, args=ocp.args.StandardSave(_payload(trainer, state)), force=True)
        mngr.wait_until_finished()
    finally:
        mngr.close()
    return Path(directory) / str(state.iteration)


def latest_iteration(directory: str | Path) -> int | None:
    """The iteration of the newest complete checkpoint, or None."""
    if not Path(directory).is_dir():
        return None
    mngr = _manager(Path(directory))
    try:
        return mngr.latest_step()
    finally:
        mngr.close()


def restore(directory: str | Path, trainer: ChunkedTrainer, template: ChunkState,
            iteration: int | None = None) -> ChunkState:
    """The :class:`ChunkState` saved at ``iteration`` (default: the newest), placed on the
    devices like ``template.carry`` (e.g. ``trainer.init(keys)``).

    Raises:
        FileNotFoundError: no checkpoint. ValueError: a checkpoint whose carry does not match
            the template (another learner or config).
    """
    import orbax.checkpoint as ocp

    mngr = _manager(Path(directory))
    try:
        step = mngr.latest_step() if iteration is None else iteration
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {directory}")
        data = mngr.restore(step, args=ocp.args.StandardRestore())
    finally:
        mngr.close()
    template_leaves, treedef = jax.tree.flatten(template.carry)
    stored = data["carry"]
    if len(stored) != len(template_leaves):
        raise ValueError(f"checkpoint {directory}/{step} holds {len(stored)} arrays, the learner's carry "
                         f"has {len(template_leaves)}: it was written by another learner or config")
    host = [np.asarray(stored[str(i)]) for i in range(len(template_leaves))]
    for i, (x, t) in enumerate(zip(host, template_leaves)):
        t_shape = np.shape(jax.random.key_data(t)) if jax.dtypes.issubdtype(t.dtype, jax.dtypes.prng_key) else t.shape
        if x.shape[1:] != tuple(t_shape[1:]):
            raise ValueError(f"checkpoint {directory}/{step}: array {i} has shape {x.shape[1:]} per run, "
                             f"the learner expects {tuple(t_shape[1:])}")
    carry = trainer.put_carry(jax.tree.unflatten(treedef, host), template.carry)
    return ChunkState(
        carry=carry,
        iteration=int(data["iteration"]),
        metrics={k: np.asarray(v) for k, v in data.get("metrics", {}).items()},
        exact_iterations=np.asarray(data["exact_iterations"]),
        exact_reward=np.asarray(data["exact_reward"]),
        exact_costs=np.asarray(data["exact_costs"]),
        elapsed_s=float(data["elapsed_s"]),
    )
