"""Running experiments: typed configs, chunked training with progress, exact evaluation and
checkpoints between chunks, run directories, plots, and sharded sweeps (the ``fhc-jax``
command's machinery).

Modules (imported on use; none keeps global state):

* :mod:`~fhc_jax.experiment.registry`: command-line names -> learner modules (lazy imports).
* :mod:`~fhc_jax.experiment.config_io`: TOML files and ``--set key=value`` -> a validated
  :class:`~fhc_jax.experiment.config_io.ExperimentSpec`.
* :mod:`~fhc_jax.experiment.runner`: :class:`~fhc_jax.experiment.runner.ChunkedTrainer`
  (``jax.jit(jax.vmap(chunk))`` over a sharded runs axis) and
  :func:`~fhc_jax.experiment.runner.train_seeds` (one algo, N seeds -> metrics, final
  states, policies): the piece other tools reuse.
* :mod:`~fhc_jax.experiment.checkpoint`: orbax checkpoints of the full carry; bit-identical resume.
* :mod:`~fhc_jax.experiment.rundir`, :mod:`~fhc_jax.experiment.training`: the run directory
  and ``fhc-jax train``.
* :mod:`~fhc_jax.experiment.summary`: exact judgement against ``fhc_jax.solve``.
* :mod:`~fhc_jax.experiment.plots`: figures from a run directory's files.
* :mod:`~fhc_jax.experiment.sweep`: hyperparameter grid x seeds in one sharded program.
"""

from fhc_jax.experiment.config_io import ConfigError, ExperimentSpec, load_spec
from fhc_jax.experiment.registry import ALGORITHMS, available_algorithms, load_algorithm
from fhc_jax.experiment.runner import ChunkedTrainer, ChunkState, RunResult, seed_keys, train_seeds

__all__ = [
    "ALGORITHMS",
    "ChunkState",
    "ChunkedTrainer",
    "ConfigError",
    "ExperimentSpec",
    "RunResult",
    "available_algorithms",
    "load_algorithm",
    "load_spec",
    "seed_keys",
    "train_seeds",
]
