"""Running experiments: the ``fhc-jax`` command's machinery, usable from Python. One module
per concept, in the order one ``fhc-jax train`` reads them (none keeps global state apart from
caches):

* :mod:`~fhc_jax.experiment.config`: the learner and environment registries and the flat
  dotted keys of an experiment -> a validated :class:`~fhc_jax.experiment.config.ExperimentSpec`.
* :mod:`~fhc_jax.experiment.typed_settings`: what each key accepts (kinds, checks,
  :class:`~fhc_jax.experiment.typed_settings.ConfigError`), TOML files and ``--set key=value``.
* :mod:`~fhc_jax.experiment.rundir`: the run directory: layout, format version, atomic writes,
  the machine record, and the one way to read a run back
  (:func:`~fhc_jax.experiment.rundir.read_run`).
* :mod:`~fhc_jax.experiment.writer_lock`: one writer per run directory.
* :mod:`~fhc_jax.experiment.metrics_file`: metrics.csv, written and read back.
* :mod:`~fhc_jax.experiment.runner`: the one chunked driver
  (:meth:`~fhc_jax.experiment.runner.ChunkedTrainer.drive`: ``jax.jit(jax.vmap(chunk))`` over a
  sharded runs axis, divergence detection) that train, sweep, compare and eval share;
  :func:`~fhc_jax.experiment.runner.train_seeds` is its one-call form.
* :mod:`~fhc_jax.experiment.progress`: the progress lines (a run's chunk line; the overall
  progress of a comparison's runs or a sweep's configurations).
* :mod:`~fhc_jax.experiment.distributed`: runs over several processes and hosts
  (:func:`~fhc_jax.experiment.distributed.initialize`, ``jax.distributed``).
* :mod:`~fhc_jax.experiment.checkpoint`: orbax checkpoints of the full carry with a verified
  manifest; bit-identical resume from the newest intact checkpoint.
* :mod:`~fhc_jax.experiment.fingerprint`: what a run was trained on beyond its settings (the
  environment's static configuration, params and exact model), checked on ``--resume`` and
  ``eval``.
* :mod:`~fhc_jax.experiment.training`: ``fhc-jax train`` (:func:`~fhc_jax.experiment.training.train_run`);
  :mod:`~fhc_jax.experiment.returned`: which iteration each seed returned and how it compares
  with the last iterate.
* :mod:`~fhc_jax.experiment.judge`: final policies against the exact optimum (or a Monte-Carlo
  reference), with one feasibility rule, and their summaries; what it returns
  (:class:`~fhc_jax.experiment.judgement.Judgement`, :class:`~fhc_jax.experiment.judgement.Optimum`)
  is :mod:`~fhc_jax.experiment.judgement`.
* :mod:`~fhc_jax.experiment.statistics`: statistics over seeds with 95% intervals.
* :mod:`~fhc_jax.experiment.evaluation`: :func:`~fhc_jax.experiment.evaluation.load_run` (a
  trained run's configuration, environment and final train states; ``policy(seed_index)``) and
  ``fhc-jax eval`` (the final policies judged again, also on a changed environment).
* :mod:`~fhc_jax.experiment.sweep`: hyperparameter grid x seeds in one sharded program.
* :mod:`~fhc_jax.experiment.compare`: a study of several learners, read from a TOML file by
  :mod:`~fhc_jax.experiment.study_file` (the paper's comparison is
  ``benchmarks/paper_comparison.toml``) and written out by
  :mod:`~fhc_jax.experiment.compare_report`.
* :mod:`~fhc_jax.experiment.tracking`: TensorBoard and W&B loggers.
* :mod:`~fhc_jax.experiment.plots`: figures from a run directory's files.
"""

from fhc_jax.experiment.checkpoint import CheckpointError
from fhc_jax.experiment.config import (
    ALGORITHMS,
    DEFAULT_TOLERANCE,
    ENVIRONMENTS,
    EnvironmentFailure,
    ExperimentSpec,
    available_algorithms,
    load_algorithm,
    load_environment,
    load_spec,
    make_env,
)
from fhc_jax.experiment.distributed import Cluster, ConfigurationMismatch, DistributedError
from fhc_jax.experiment.divergence import Divergence, DivergenceError
from fhc_jax.experiment.evaluation import LoadedRun, evaluate_run, load_run
from fhc_jax.experiment.judgement import Judgement
from fhc_jax.experiment.progress import parse_run_line
from fhc_jax.experiment.rundir import RunDirectoryError, machine_info
from fhc_jax.experiment.runner import ChunkedTrainer, ChunkState, RunResult, seed_keys, train_seeds
from fhc_jax.experiment.training import TrainingInterrupted
from fhc_jax.experiment.typed_settings import ConfigError
from fhc_jax.experiment.writer_lock import RunInUseError

__all__ = [
    "ALGORITHMS",
    "CheckpointError",
    "ChunkState",
    "ChunkedTrainer",
    "Cluster",
    "ConfigError",
    "ConfigurationMismatch",
    "DEFAULT_TOLERANCE",
    "DistributedError",
    "Divergence",
    "DivergenceError",
    "ENVIRONMENTS",
    "EnvironmentFailure",
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
    "machine_info",
    "make_env",
    "parse_run_line",
    "seed_keys",
    "train_seeds",
]
