"""Running experiments: typed configs, chunked training with progress, exact evaluation and
checkpoints between chunks, run directories, plots, and sharded sweeps (the ``fhc-jax``
command's machinery).

Modules (none keeps global state apart from caches):

* :mod:`~fhc_jax.experiment.config`: the learner and environment registries, typed settings,
  TOML files and ``--set key=value`` -> a validated
  :class:`~fhc_jax.experiment.config.ExperimentSpec`.
* :mod:`~fhc_jax.experiment.runner`: :class:`~fhc_jax.experiment.runner.ChunkedTrainer`
  (``jax.jit(jax.vmap(chunk))`` over a sharded runs axis) and
  :func:`~fhc_jax.experiment.runner.train_seeds` (one algo, N seeds -> metrics, final
  states, policies; ``RunResult.divergence`` reports seeds that became non-finite): the piece
  other tools reuse.
* :mod:`~fhc_jax.experiment.checkpoint`: orbax checkpoints of the full carry with a verified
  manifest (hashes of every array and of the configuration); bit-identical resume from the newest
  intact checkpoint.
* :mod:`~fhc_jax.experiment.rundir`, :mod:`~fhc_jax.experiment.training`: the run directory
  and ``fhc-jax train``.
* :mod:`~fhc_jax.experiment.judge`: final policies against the exact optimum, with one
  feasibility rule; :mod:`~fhc_jax.experiment.summary`: its summary.json fields and table.
* :mod:`~fhc_jax.experiment.machine`: versions, devices, CPU and load for every result file.
* :mod:`~fhc_jax.experiment.plots`: figures from a run directory's files.
* :mod:`~fhc_jax.experiment.sweep`: hyperparameter grid x seeds in one sharded program.
* :mod:`~fhc_jax.experiment.compare`: the paper's comparison of the four learners.
* :mod:`~fhc_jax.experiment.loading`: :func:`~fhc_jax.experiment.loading.load_run` (a trained
  run's configuration, environment and final train states; ``policy(seed_index)``);
  :mod:`~fhc_jax.experiment.evaluation`: ``fhc-jax eval`` (the final policies judged again,
  also on a changed environment).
"""

from fhc_jax.experiment.config import (ALGORITHMS, ENVIRONMENTS, ConfigError, ExperimentSpec, available_algorithms,
                                       load_algorithm, load_environment, load_spec, make_env)
from fhc_jax.experiment.judge import DEFAULT_TOLERANCE, Judgement
from fhc_jax.experiment.checkpoint import CheckpointError
from fhc_jax.experiment.rundir import RunDirectoryError, RunInUseError, machine_info
from fhc_jax.experiment.runner import (ChunkedTrainer, ChunkState, Divergence, DivergenceError, RunResult, parse_run_line,
                                       seed_keys, train_seeds)
from fhc_jax.experiment.training import TrainingInterrupted
from fhc_jax.experiment.evaluation import LoadedRun, evaluate_run, load_run

__all__ = [
    "ALGORITHMS",
    "CheckpointError",
    "ChunkState",
    "ChunkedTrainer",
    "ConfigError",
    "DEFAULT_TOLERANCE",
    "Divergence",
    "DivergenceError",
    "ENVIRONMENTS",
    "ExperimentSpec",
    "Judgement",
    "LoadedRun",
    "RunDirectoryError",
    "RunInUseError",
    "RunResult",
    "TrainingInterrupted",
    "available_algorithms",
    "evaluate_run",
    "load_algorithm",
    "load_environment",
    "load_run",
    "load_spec",
    "parse_run_line",
    "machine_info",
    "make_env",
    "seed_keys",
    "train_seeds",
]
