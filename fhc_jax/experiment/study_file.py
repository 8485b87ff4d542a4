"""The study file of ``fhc-jax compare``: which learners a comparison trains, with which settings.

**A study** is a TOML file of rows, one run each: the learner (``algo``, a command-line name),
the settings that differ from its defaults (``set``, dotted keys as with ``--set``) and the
row's ``label``; optionally settings common to every row (a top-level ``set`` table: learner
keys apply where the learner has them), ``notes`` printed under the table, and ``name``, the
default stem of the output files::

    name = "my_study"
    notes = ["..."]
    [set]
    num_iterations = 400
    [[run]]
    label = "FH-Constrained"
    algo = "fh-constrained"
    [[run]]
    label = "PPO-Lagrangian (xy)"
    algo = "ppo-lag"
    set = { observation = "xy" }

The paper's comparison (FH-Constrained against NN-Constrained, PPO-Lagrangian, CPO, e-COP and
Saute-Lagrangian with both network inputs where they apply) is the study
``benchmarks/paper_comparison.toml`` (:data:`DEFAULT_STUDY`), which ``fhc-jax compare`` runs when
no file is given.

:func:`load_study` reads and checks a study file, :func:`select_runs` picks rows (``--algos``,
``--inputs``), and :func:`build_specs` turns the rows, with ``--set`` overrides
(:func:`split_overrides`), into validated specs
(:class:`~fhc_jax.experiment.config.ExperimentSpec`) before anything is compiled. Running them
is :mod:`fhc_jax.experiment.compare`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fhc_jax.experiment import config
from fhc_jax.experiment.typed_settings import (
    ConfigError,
    flatten,
    learner_schema,
    parse_assignment,
    read_toml,
    unknown_key,
)

#: the study ``fhc-jax compare`` runs without a file: the paper's comparison
DEFAULT_STUDY = Path(__file__).resolve().parents[2] / "benchmarks" / "paper_comparison.toml"

#: display names of the learners (the table's Algorithm column)
LABELS: dict[str, str] = {
    "fh-constrained": "FH-Constrained",
    "nn-constrained": "NN-Constrained",
    "ppo-lag": "PPO-Lagrangian",
    "cpo": "CPO",
    "e-cop": "e-COP",
    "saute-lag": "Saute-Lagrangian",
}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One row of a study: its label, the learner's command-line name and the row's settings
    (dotted keys -> values)."""

    name: str
    algo: str
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def observation(self) -> str | None:
        """The network input the row sets (None: none set)."""
        return self.settings.get("observation")


@dataclasses.dataclass(frozen=True)
class Study:
    """A study file, read and checked (:func:`load_study`): its rows, the settings common to
    them, the notes under the table and the default output stem."""

    runs: tuple[RunSpec, ...]
    settings: Mapping[str, Any]
    notes: tuple[str, ...]
    name: str


def load_study(path: str | Path | None = None) -> Study:
    """Read a study file (module docstring; default :data:`DEFAULT_STUDY`).

    Raises:
        ConfigError: a missing or invalid file, an unknown key, a row without ``algo`` or with
            an unknown one, two rows with the same label, or no row.
    """
    path = Path(DEFAULT_STUDY if path is None else path)
    data = read_toml(path, "study file")
    where = f"study file {str(path)!r}"
    unknown = sorted(set(data) - {"name", "notes", "set", "run"})
    if unknown:
        raise unknown_key(unknown[0], ["name", "notes", "set", "run"], where)
    rows, runs = data.get("run", []), []
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ConfigError(f"{where} has no [[run]] rows; each names an algo (and a label and set)")
    for i, row in enumerate(rows):
        bad = sorted(set(row) - {"label", "algo", "set"})
        if bad:
            raise unknown_key(f"run[{i}].{bad[0]}", ["label", "algo", "set"], where)
        algo = row.get("algo")
        if not isinstance(algo, str) or (algo not in config.ALGORITHMS and algo not in config.ALGORITHMS.values()):
            raise ConfigError(f"{where}: run[{i}] needs algo = one of {', '.join(config.LEARNERS)}, found {algo!r}")
        algo = config.canonical_name(algo)
        settings = flatten(row.get("set", {}))
        label = row.get(
            "label", LABELS.get(algo, algo) + (f" ({settings['observation']})" if "observation" in settings else "")
        )
        runs.append(RunSpec(str(label), algo, settings))
    labels = [r.name for r in runs]
    if len(set(labels)) < len(labels):
        twice = next(x for x in labels if labels.count(x) > 1)
        raise ConfigError(f"{where}: two runs are labelled {twice!r}; give each run its own label")
    notes = data.get("notes", [])
    return Study(
        runs=tuple(runs),
        settings=flatten(data.get("set", {})),
        notes=tuple(notes) if isinstance(notes, list) else (str(notes),),
        name=str(data.get("name", path.stem)),
    )


def select_runs(
    algos: Iterable[str] | None = None, inputs: Iterable[str] | None = None, study: Study | None = None
) -> list[RunSpec]:
    """The runs of ``study`` (default: :func:`load_study` of :data:`DEFAULT_STUDY`) whose learner
    is in ``algos`` (either name form; None: all) and whose input is in ``inputs`` (runs that set
    no input are always kept).

    Raises:
        ValueError: an unknown algorithm or input, or a selection that leaves no run.
    """
    study = load_study() if study is None else study
    wanted = None if algos is None else {config.canonical_name(a) for a in algos}
    ins = None if inputs is None else set(inputs)
    bad = sorted((ins or set()) - {"xy", "xyt"})
    if bad:
        raise ValueError(f"unknown input {bad[0]!r}; valid: 'xy', 'xyt'")
    runs = [
        r
        for r in study.runs
        if (wanted is None or r.algo in wanted) and (ins is None or r.observation is None or r.observation in ins)
    ]
    if not runs:
        raise ValueError("the selection of algorithms and inputs leaves no run")
    return runs


# ----------------------------------------------------------------------------- the rows' specs


def split_overrides(assignments: Iterable[str]) -> tuple[list[str], dict[str, list[str]]]:
    """``--set`` strings -> (common, per-algorithm).

    ``ALGO.key=value`` (``cpo.num_iterations=50``, ``ppo_lagrangian.clip_eps=0.1``) applies to
    one learner; ``env.*`` and ``run.*`` keys to every run; any other ``key=value`` to every
    learner whose ``Config`` has that key.

    Raises:
        ConfigError: a malformed assignment.
    """
    common: list[str] = []
    per_algo: dict[str, list[str]] = {}
    for text in assignments:
        head, dot, rest = parse_assignment(text)[0].partition(".")
        algo = next((cli for cli, module in config.ALGORITHMS.items() if dot and head in (cli, module)), None)
        if algo is None:
            common.append(text)
        else:
            per_algo.setdefault(algo, []).append(rest + text[text.index("=") :])
    return common, per_algo


def build_specs(
    runs: Sequence[RunSpec],
    seeds: int,
    overrides: Iterable[str] = (),
    *,
    seed: int = 0,
    env: str | None = None,
    common: Mapping[str, Any] | None = None,
) -> list[config.ExperimentSpec]:
    """One validated :class:`~fhc_jax.experiment.config.ExperimentSpec` per run (nothing
    compiled). Precedence (later wins): ``common`` (a study's common settings) < the row's
    settings < ``overrides`` (``--set`` strings, :func:`split_overrides`) < ``env`` (the
    environment's name). Learner keys of ``common`` and of the common overrides apply where the
    learner has them.

    Raises:
        ConfigError / ValueError: invalid settings, a learner key that no selected learner has,
            an algorithm-specific key for a learner that is not selected, an input the
            environment does not support, or runs on different environments.
    """
    common_sets, per_algo = split_overrides(overrides)
    selected = {r.algo for r in runs}
    extra = sorted(set(per_algo) - selected)
    if extra:
        raise ConfigError(f"--set {extra[0]}.*: {extra[0]!r} is not among the selected algorithms")
    values = dict(parse_assignment(t) for t in common_sets)
    learner_keys = {k for k in values if not k.startswith(("env.", "run."))}
    known = set().union(*(learner_schema(config.LEARNERS[a].Config()) for a in selected))
    unknown = sorted(learner_keys - known)
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r}: no selected learner has it (use env.*, run.*, "
            "a learner's Config field, or ALGO.key for one learner)"
        )
    if "observation" in learner_keys | {t.partition("=")[0].strip() for ts in per_algo.values() for t in ts}:
        raise ConfigError("observation is chosen per run; select inputs with --inputs instead")
    common = dict(common or {})
    lenient = learner_keys | {k for k in common if not k.startswith(("env.", "run."))}
    specs = [
        config.load_spec(
            r.algo,
            settings={"run.seed": seed, **common, **r.settings, **values},
            overrides=per_algo.get(r.algo, []),
            lenient=lenient - set(r.settings),
            seeds=seeds,
            env=env,
        )
        for r in runs
    ]
    if len({(s.env_name, str(sorted(s.env.items()))) for s in specs}) != 1:
        raise ConfigError("the runs of a comparison must share one environment; set env.* for all of them")
    environment, _ = specs[0].make_env()
    if not environment.has_exact_model:
        raise ConfigError(
            f"compare: environment {specs[0].env_name!r} has no exact model "
            "(has_exact_model is False); the comparison judges every run exactly"
        )
    for r in runs:
        if r.observation is not None and r.observation not in environment.supported_observations:
            raise ConfigError(
                f"input {r.observation!r} of {r.name} is not supported by environment {specs[0].env_name!r} "
                f"(its observations: {', '.join(environment.supported_observations)}); choose --inputs or --algos"
            )
    return specs
