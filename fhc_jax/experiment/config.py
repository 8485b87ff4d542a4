"""An experiment's configuration: the learner and environment registries, and the keys of an
experiment validated into an :class:`ExperimentSpec` (:func:`load_spec`). What each key accepts
and how values are read (TOML files, ``--set key=value``) is
:mod:`fhc_jax.experiment.typed_settings`.

**One flat namespace of dotted keys** describes an experiment:

* ``algo``: the learner's command-line name (:data:`LEARNERS`; adding a learner is one line);
* ``env.name``: the environment (:data:`ENVIRONMENTS`, default ``gridworld``, or
  ``module:ClassOrFactory`` of your own), and ``env.<setting>``: the settings it declares;
* ``run.<option>``: how it runs (:data:`RUN_SETTINGS`: seeds, base seed, chunk size,
  checkpoint period, feasibility tolerance of the judge, Monte-Carlo episodes);
* every other key: a field of the learner's ``Config``, nested schedules and feature specs
  with dots (``critic_lr.init``, ``features.kind``).

A TOML file uses the same names, with tables for the dots (``[env]`` then ``size = 5`` is
``env.size``); ``--set`` values are parsed as TOML values (``--set env.alpha=[10.0, 20.0]``).

**How an environment declares its settings.** Its constructor (a class or a factory returning
an :class:`fhc_jax.envs.Environment`) IS the declaration: every keyword parameter with a default
is a setting of that name and default, of the kind its annotation names (``int``, ``float``,
``bool``, ``str``, ``int | None``, ``float | None``, ``float | Sequence[float]``,
``tuple[...]``; an unannotated parameter takes the kind of its default). A parameter without a
default cannot be set from a file and is refused. Ranges are the constructor's own validation:
its ``ValueError`` is reported as a configuration error before anything compiles. Adding an
environment shipped with fhc_jax is one line in :data:`ENVIRONMENTS`; what the experiment layer
does with it depends only on the capabilities it declares (exact judgement needs
``has_exact_model``; policy maps need ``is_spatial``, with arrows where :data:`ACTION_MOVES`
gives the actions' displacements).

Everything is checked before anything is compiled: unknown keys (the error lists the valid
ones and the nearest match), wrong types (naming the key, the expected type and the value), and
the ranges enforced by the environment's constructor and the learner's ``Config``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import sys
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from fhc_jax.algos import cpo, ecop, fh_constrained, nn_constrained, ppo_lagrangian, saute
from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.envs.base import Environment
from fhc_jax.experiment.typed_settings import (
    ConfigError,
    Setting,
    build_learner_config,
    coerce,
    flatten,
    kind_of_annotation,
    learner_schema,
    learner_settings,
    parse_assignment,
    plain,
    read_toml,
    short_value,
    unknown_key,
)

#: default relative feasibility tolerance of the judge: cost <= (1 + 0.02) alpha
DEFAULT_TOLERANCE = 0.02
#: episodes of a Monte-Carlo judgement (``run.eval_episodes``)
DEFAULT_EPISODES = 100_000
#: the most episodes of one Monte-Carlo judgement: ``fhc_jax.rollout_returns`` splits one key
#: into one key per episode, at most 2**32 - 1
MAX_EPISODES = 2**32 - 1


class EnvironmentImportError(ConfigError):
    """An environment given as ``module:attribute`` whose module cannot be imported."""


class EnvironmentFailure(RuntimeError):
    """A user's own environment (``module:attribute``) raised an error of its own while it was
    built (``fhc-jax`` exit status 1, labelled as that environment's error, not fhc_jax's)."""


# ----------------------------------------------------------------------------- learners

#: command-line name -> learner module (one line per learner); each module defines ``Config``,
#: ``make_learner(env, params, config)``, ``make_train`` and ``policy``
LEARNERS: dict[str, ModuleType] = {
    "fh-constrained": fh_constrained,
    "nn-constrained": nn_constrained,
    "ppo-lag": ppo_lagrangian,
    "cpo": cpo,
    "e-cop": ecop,
    "saute-lag": saute,
}

#: command-line name -> module name under ``fhc_jax.algos`` (the other accepted spelling)
ALGORITHMS: dict[str, str] = {name: module.__name__.rpartition(".")[2] for name, module in LEARNERS.items()}


def canonical_name(name: str) -> str:
    """The command-line name of a learner given either form ("ppo-lag" or "ppo_lagrangian").

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    for cli, module in ALGORITHMS.items():
        if name in (cli, module):
            return cli
    raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(ALGORITHMS)}")


def load_algorithm(name: str) -> ModuleType:
    """The learner module of a command-line (or module) name (ValueError if unknown)."""
    return LEARNERS[canonical_name(name)]


def available_algorithms() -> list[str]:
    """The command-line names of every learner."""
    return list(LEARNERS)


# ----------------------------------------------------------------------------- environments

#: registered names -> ``"module:attribute"`` of the constructor (one line per environment)
ENVIRONMENTS: dict[str, str] = {
    "gridworld": "fhc_jax.envs.gridworld:GridWorld",
    "battery": "fhc_jax.envs.battery:BatteryStorage",
    "gymnax:CartPole-v1": "fhc_jax.envs.gymnax_tasks:cartpole",
    "gymnax:Acrobot-v1": "fhc_jax.envs.gymnax_tasks:acrobot",
    "gymnax:MountainCar-v0": "fhc_jax.envs.gymnax_tasks:mountain_car",
    "gymnax:Pendulum-v1": "fhc_jax.envs.gymnax_tasks:pendulum",
}

#: the default environment
DEFAULT_ENV = "gridworld"

#: (d_row, d_col) of every action of registered spatial environments whose actions are moves on
#: their grid (policy maps draw these as arrows; other environments get action-index images)
ACTION_MOVES: dict[str, str] = {"gridworld": "fhc_jax.envs.gridworld:MOVES"}


@dataclasses.dataclass(frozen=True)
class EnvEntry:
    """A constructible environment: its name, constructor and declared settings.

    Attributes:
        name: the registered name or the ``module:attribute`` path.
        constructor: keyword settings -> :class:`~fhc_jax.envs.Environment`.
        settings: the declared settings, in the constructor's parameter order.
        action_moves: (A, 2) int (d_row, d_col) per action, or None (actions without geometry).
    """

    name: str
    constructor: Callable[..., Environment]
    settings: tuple[Setting, ...]
    action_moves: np.ndarray | None = None

    @property
    def defaults(self) -> dict[str, Any]:
        """Setting name -> default value."""
        return {s.name: plain(s.default) for s in self.settings}

    def validate(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Every setting, defaults filled in, with the types of ``values`` (keys without the
        ``env.`` prefix) checked; nothing is constructed.

        Raises:
            ConfigError: an unknown key (listing this environment's keys) or a wrong type.
        """
        kinds = {s.name: s.kind for s in self.settings}
        out = self.defaults
        for key, value in values.items():
            if key not in kinds:
                raise unknown_key(
                    f"env.{key}", [f"env.{k}" for k in kinds] + ["env.name"], f"environment {self.name!r}"
                )
            out[key] = plain(coerce(f"env.{key}", value, kinds[key]))
        return out

    def make(self, values: Mapping[str, Any]) -> tuple[Environment, Any]:
        """``(env, env.default_params)`` built from ``values`` (validated by :meth:`validate`).

        Raises:
            ConfigError: the constructor's own validation failed (its ``ValueError`` or
                ``TypeError``, prefixed ``env``), or it did not return an Environment.
            EnvironmentFailure: a user's own environment raised any other error.
        """
        settings = self.validate(values)
        kinds = {s.name: s.kind for s in self.settings}
        kwargs = {k: tuple(v) if kinds[k] == "tuple" else v for k, v in settings.items()}
        try:
            env = self.constructor(**kwargs)
            params = env.default_params if isinstance(env, Environment) else None
        except (ValueError, TypeError) as err:  # the constructor's own range and type checks
            raise ConfigError(f"env {self.name!r}: {err}") from None
        except Exception as err:  # noqa: BLE001 (a user's own environment failing in its own code)
            if self.name in ENVIRONMENTS:
                raise  # a registered environment: a bug of fhc_jax, reported as such
            raise EnvironmentFailure(
                f"environment {self.name!r} raised {type(err).__name__}: {err} (in its "
                "constructor or default_params; an error in that environment's code, not in "
                "fhc_jax)"
            ) from err
        if not isinstance(env, Environment):
            raise ConfigError(
                f"env {self.name!r}: the constructor returned {type(env).__name__}, not an fhc_jax.envs.Environment"
            )
        return env, params

    def describe(self, values: Mapping[str, Any]) -> str:
        """A short title: the name and the settings that differ from the defaults,
        e.g. ``gridworld (size=3, horizon=4)``."""
        defaults = self.defaults
        changed = [f"{k}={short_value(v)}" for k, v in values.items() if k in defaults and plain(v) != defaults[k]]
        return self.name + (f" ({', '.join(changed)})" if changed else "")


def importable_working_directory() -> str:
    """Put the working directory first on ``sys.path`` (as ``python -m`` does), so that
    ``--env module:Class`` finds ``module.py`` in the folder the command runs from; returns it."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    return cwd


def _import(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    cwd = importable_working_directory()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            top = module_name.split(".")[0]
            raise EnvironmentImportError(
                f"env {path!r}: no module named {missing!r}: looked in the working directory {cwd} and on the Python "
                f"path; run from the folder that holds {top}.py (or the {top}/ package), or add that folder to "
                "PYTHONPATH"
            ) from None
        raise EnvironmentImportError(
            f"env {path!r}: module {module_name!r} was found but importing it failed: {err}"
        ) from None
    except ImportError as err:
        raise EnvironmentImportError(f"env {path!r}: cannot import module {module_name!r}: {err}") from None
    try:
        return getattr(module, attribute)  # an attribute of a module, not a probe of an environment
    except AttributeError:
        raise ConfigError(f"env {path!r}: module {module_name!r} has no attribute {attribute!r}") from None


def declared_settings(name: str, constructor: Callable[..., Any]) -> tuple[Setting, ...]:
    """The settings a constructor declares (module docstring).

    Raises:
        ConfigError: a parameter without a default, or one whose kind cannot be told.
    """
    target = constructor.__init__ if inspect.isclass(constructor) else constructor
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # unresolvable annotations: fall back to the defaults' types
        hints = {}
    out = []
    for p in inspect.signature(constructor).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is p.empty:
            raise ConfigError(
                f"env {name!r}: constructor parameter {p.name!r} has no default, so it cannot be "
                "set from a config file; give every parameter a default"
            )
        if p.name == "name":
            raise ConfigError(f"env {name!r}: a setting may not be called 'name' (env.name selects the environment)")
        kind = kind_of_annotation(hints.get(p.name, p.annotation), p.default)
        if kind is None:
            raise ConfigError(
                f"env {name!r}: cannot tell the type of setting {p.name!r} (default {p.default!r}); "
                "annotate it as int, float, bool, str, int | None, float | None or "
                "float | Sequence[float]"
            )
        out.append(Setting(p.name, kind, p.default))
    return tuple(out)


_ENTRIES: dict[str, EnvEntry] = {}


def load_environment(name: str) -> EnvEntry:
    """The :class:`EnvEntry` of a registered name or a ``module:attribute`` path (cached).

    Raises:
        ConfigError: an unknown name (listing the registered ones), an import that fails, or a
            constructor whose settings cannot be declared (:func:`declared_settings`).
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"env.name must be a non-empty string, found {name!r}")
    if name in _ENTRIES:
        return _ENTRIES[name]
    if name not in ENVIRONMENTS and ":" not in name:
        raise ConfigError(
            f"unknown environment {name!r}; registered: {', '.join(ENVIRONMENTS)} "
            "(or give module:ClassOrFactory of your own)"
        )
    path = ENVIRONMENTS.get(name, name)
    if name.startswith("brax:"):  # any Brax environment by name (fhc_jax.envs.brax_interop)
        from fhc_jax.envs import brax_interop

        try:
            constructor = brax_interop.task_constructor(name[len("brax:") :])
        except ImportError as err:
            raise EnvironmentImportError(f"env {name!r}: {err}") from None
        except ValueError as err:
            raise ConfigError(f"env {name!r}: {err}") from None
    else:
        constructor = _import(path)
    if not callable(constructor):
        raise ConfigError(f"env {name!r}: {path} is not a class or function")
    moves = np.asarray(_import(ACTION_MOVES[name]), np.int64).reshape(-1, 2) if name in ACTION_MOVES else None
    _ENTRIES[name] = EnvEntry(name, constructor, declared_settings(name, constructor), moves)
    return _ENTRIES[name]


def env_repr(env: Environment) -> str:
    """``repr(env)`` where the environment defines one (``GridWorld(size=10, ...)``), else its
    name: never ``<module.Class object at 0x...>``."""
    return repr(env) if type(env).__repr__ is not object.__repr__ else env.name


def make_env(name: str, values: Mapping[str, Any] | None = None) -> tuple[Environment, Any]:
    """``(env, params)`` of environment ``name`` with settings ``values`` (no ``env.`` prefix)."""
    return load_environment(name).make(values or {})


# ----------------------------------------------------------------------------- the learner's keys

#: the largest base seed: ``jax.random.key(seed)`` keeps 32 bits, so seeds s and s + 2**32 would
#: train the same runs
MAX_SEED = 2**32 - 1
#: the largest feasibility tolerance: 1 already admits twice the threshold
MAX_TOLERANCE = 1.0

#: How an experiment runs. ``seed``: the base seed, in [0, :data:`MAX_SEED`].
#: ``chunk_size = 0``: the learner's ``eval_every`` (or 100).
#: ``checkpoint_every``: checkpoint every this many chunks (0: only at the end).
#: ``feasibility_tolerance``: the judge's relative tolerance (:mod:`fhc_jax.experiment.judge`),
#: a finite number in [0, :data:`MAX_TOLERANCE`].
#: ``eval_episodes``: episodes per seed of the final Monte-Carlo judgement, on environments
#: without a tabular exact model.
RUN_SETTINGS: tuple[Setting, ...] = (
    Setting("seeds", "int", 5, 1),
    Setting("seed", "int", 0, 0, MAX_SEED, "the base seed is one 32-bit word of jax.random.key, in [0, 2**32 - 1]"),
    Setting("chunk_size", "int", 0, 0),
    Setting("checkpoint_every", "int", 4, 0),
    Setting(
        "feasibility_tolerance",
        "float",
        DEFAULT_TOLERANCE,
        0.0,
        MAX_TOLERANCE,
        "the judge's relative tolerance, in [0, 1]: cost <= (1 + tolerance) alpha",
    ),
    Setting("eval_episodes", "int", DEFAULT_EPISODES, 2, MAX_EPISODES),
)
RUN_DEFAULTS: dict[str, Any] = {s.name: s.default for s in RUN_SETTINGS}

# ----------------------------------------------------------------------------- the experiment spec


@dataclasses.dataclass(frozen=True)
class ExperimentSpec:
    """Everything needed to (re)run an experiment; validated on construction by :func:`load_spec`.

    Attributes:
        algo: the learner's command-line name.
        env_name: the environment's registered name or ``module:attribute`` path.
        env: every setting of that environment (defaults filled in), without the ``env.`` prefix.
        learner: the learner's validated ``Config``.
        seeds: number of seeds R >= 1; seed i trains from ``fold_in(key(seed), i)``.
        seed: base seed >= 0.
        chunk_size: iterations per compiled chunk (>= 1, resolved).
        checkpoint_every: checkpoint every this many chunks (0: only at the end).
        feasibility_tolerance: the judge's relative tolerance (>= 0).
        eval_episodes: episodes per seed of a final Monte-Carlo judgement (>= 2).
    """

    algo: str
    env_name: str
    env: dict
    learner: Any
    seeds: int
    seed: int
    chunk_size: int
    checkpoint_every: int
    feasibility_tolerance: float = DEFAULT_TOLERANCE
    eval_episodes: int = DEFAULT_EPISODES

    @property
    def num_iterations(self) -> int:
        return int(self.learner.num_iterations)

    @property
    def module(self) -> ModuleType:
        """The learner module."""
        return LEARNERS[self.algo]

    def settings(self) -> dict[str, Any]:
        """Flat dotted keys of everything settable: ``load_spec(settings=...)`` rebuilds it."""
        out: dict[str, Any] = {"algo": self.algo, "env.name": self.env_name}
        out.update({f"env.{k}": plain(v) for k, v in self.env.items()})
        out.update({f"run.{s.name}": getattr(self, s.name) for s in RUN_SETTINGS})
        out.update(learner_settings(self.learner))
        return out

    def make_env(self) -> tuple[Environment, Any]:
        """``(env, params)`` of :attr:`env_name` with the settings :attr:`env`."""
        return make_env(self.env_name, self.env)

    def env_title(self) -> str:
        """The environment's name and its non-default settings, e.g. ``gridworld (size=3)``."""
        return load_environment(self.env_name).describe(self.env)


def load_spec(
    algo: str | None = None,
    *,
    config_file: str | Path | None = None,
    overrides: Iterable[str] = (),
    settings: Mapping[str, Any] | None = None,
    seeds: int | None = None,
    observation: str | None = None,
    env: str | None = None,
    lenient: Iterable[str] = (),
) -> ExperimentSpec:
    """Build and validate an :class:`ExperimentSpec` (the environment is constructed, nothing
    is compiled).

    Precedence (later wins): ``settings`` (dotted keys, e.g. a run directory's config.json) <
    ``config_file`` < ``overrides`` (``--set`` strings) < the ``algo``, ``env``, ``seeds`` and
    ``observation`` arguments (explicit flags). Learner keys named in ``lenient`` are dropped
    where this learner has no such field (settings common to a study's learners).

    Raises:
        ConfigError / ValueError: unknown keys (listing the valid ones; ``env.*`` against the
            chosen environment's settings), wrong types, values out of range (from the
            environment's constructor and the learner's ``Config``), an unknown algorithm or
            environment.
    """
    values: dict[str, Any] = flatten(settings or {})
    if config_file is not None:
        values.update(flatten(read_toml(config_file)))
    values.update(parse_assignment(text) for text in overrides)
    explicit = {"algo": algo, "env.name": env, "run.seeds": seeds}
    values.update({k: v for k, v in explicit.items() if v is not None})
    name = values.pop("algo", "fh-constrained")
    if not isinstance(name, str):
        raise ConfigError(f"algo must be a string, found {name!r}")
    name = canonical_name(name)
    schema = learner_schema(LEARNERS[name].Config())
    if observation is not None:
        if "observation" not in schema:
            raise ConfigError(
                f"--obs does not apply to {name!r} (its Config has no 'observation' field); "
                "it selects the network input of nn-constrained, ppo-lag and cpo"
            )
        values["observation"] = observation
    entry = load_environment(values.pop("env.name", DEFAULT_ENV))
    run_settings = {s.name: s for s in RUN_SETTINGS}
    env_values: dict[str, Any] = {}
    run = dict(RUN_DEFAULTS)
    learner: dict[str, Any] = {}
    lenient = set(lenient)
    for key, value in values.items():
        if key.startswith("env."):
            env_values[key[4:]] = value
        elif key.startswith("run."):
            s = run_settings.get(key[4:])
            if s is None:
                raise unknown_key(key, [f"run.{k}" for k in run_settings], "the run")
            run[s.name] = s.check(key, value)
        elif key in schema:
            learner[key] = coerce(key, value, schema[key])
        elif key not in lenient:
            valid = (
                ["algo", "env.name"]
                + [f"env.{s.name}" for s in entry.settings]
                + [f"run.{k}" for k in run_settings]
                + list(schema)
            )
            raise unknown_key(key, valid, f"algorithm {name!r} on environment {entry.name!r}")
    env_settings = entry.validate(env_values)
    env_obj, _ = entry.make(env_settings)  # the constructor's own range checks, before anything compiles
    try:
        config = build_learner_config(LEARNERS[name], learner, judged_exactly(env_obj))
    except TypeError as err:
        raise ConfigError(f"{name}: {err}") from None
    chunk = run.pop("chunk_size") or int(getattr(config, "eval_every", 0) or 100)
    return ExperimentSpec(
        algo=name,
        env_name=entry.name,
        env=env_settings,
        learner=config,
        chunk_size=min(chunk, int(config.num_iterations)),
        **run,
    )
