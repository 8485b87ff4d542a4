"""An experiment's configuration: the learner and environment registries, typed settings, TOML
files and ``--set key=value`` overrides, validated into an :class:`ExperimentSpec`.

**One flat namespace of dotted keys** describes an experiment:

* ``algo``: the learner's command-line name (:data:`LEARNERS`; adding a learner is one line);
* ``env.name``: the environment (:data:`ENVIRONMENTS`, default ``gridworld``, or
  ``module:ClassOrFactory`` of your own), and ``env.<setting>``: the settings it declares;
* ``run.<option>``: how it runs (:data:`RUN_SETTINGS`: seeds, base seed, chunk size,
  checkpoint period, feasibility tolerance of the judge, Monte-Carlo episodes);
* every other key: a field of the learner's ``Config``, nested schedules and feature specs
  with dots (``critic_step.init``, ``features.kind``).

A TOML file uses the same names, with tables for the dots::

    algo = "fh-constrained"
    num_iterations = 400
    [critic_step]
    init = 0.5
    [env]
    name = "gridworld"
    size = 5
    [run]
    seeds = 3

``--set`` values are parsed as TOML values (``--set env.alpha=[10.0, 20.0]``); a bare word
that is not valid TOML is taken as a string (``--set variant=paper``).

**Kinds.** Every settable key has a kind naming what it accepts: ``int``, ``float`` (an int
becomes a float), ``bool``, ``str``, ``tuple`` (a list), ``int_or_none``, ``float_or_none``,
``float_or_floats`` (a number or a non-empty list of numbers, one per constraint), ``kind`` (a
feature-spec name) or ``any``.

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
import difflib
import importlib
import inspect
import sys
import types
import typing
from collections.abc import Sequence as AbcSequence
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from fhc_jax.algos import cpo, ecop, fh_constrained, nn_constrained, ppo_lagrangian, saute
from fhc_jax.algos import features as feat
from fhc_jax.algos.hyperparameters import EnvDefault, resolve_env_defaults
from fhc_jax.algos.learner import judged_exactly
from fhc_jax.envs.base import Environment

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: default relative feasibility tolerance of the judge: cost <= (1 + 0.02) alpha
DEFAULT_TOLERANCE = 0.02
#: episodes of a Monte-Carlo judgement (``run.eval_episodes``)
DEFAULT_EPISODES = 100_000
#: the most episodes of one Monte-Carlo judgement: ``fhc_jax.rollout_returns`` splits one key
#: into one key per episode, at most 2**32 - 1
MAX_EPISODES = 2**32 - 1


class ConfigError(ValueError):
    """A configuration that cannot be used (unknown key, wrong type, value out of range)."""


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


# ----------------------------------------------------------------------------- typed settings


@dataclasses.dataclass(frozen=True)
class Setting:
    """One settable key: its name, kind (module docstring), default, and smallest and largest
    values (None: none)."""

    name: str
    kind: str
    default: Any
    low: float | None = None
    high: float | None = None

    def check(self, key: str, value: Any) -> Any:
        """``value`` coerced to this setting's kind and checked against its range.

        Raises:
            ConfigError: naming ``key``, the kind and the bound it breaks, and the value.
        """
        v = coerce(key, value, self.kind)
        what = "an integer" if self.kind == "int" else "a number"
        if self.low is not None and v < self.low:
            raise ConfigError(f"{key} must be {what} >= {short_value(self.low)}, found {v}")
        if self.high is not None and v > self.high:
            raise ConfigError(f"{key} must be {what} <= {short_value(self.high)}, found {v}")
        return v


def kind_of_value(value: Any) -> str:
    """The kind of a default value: "bool", "int", "float", "str", "tuple" or "any"."""
    for kind, types_ in (("bool", bool), ("int", (int, np.integer)), ("float", (float, np.floating)),
                         ("str", str), ("tuple", tuple)):
        if isinstance(value, types_):
            return kind
    return "any"


_SIMPLE = {int: "int", float: "float", bool: "bool", str: "str"}


def kind_of_annotation(annotation: Any, default: Any) -> str | None:
    """The kind of a parameter annotated ``annotation`` with default ``default``; None when
    neither the annotation (module docstring) nor the default (None does not) tells."""
    if annotation in _SIMPLE:
        return _SIMPLE[annotation]
    origin = typing.get_origin(annotation)
    if origin is tuple:
        return "tuple"
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        rest = [a for a in args if a is not type(None)]
        if len(rest) < len(args) and len(rest) == 1 and rest[0] in (int, float):
            return f"{_SIMPLE[rest[0]]}_or_none"
        seq = [a for a in rest if typing.get_origin(a) in (AbcSequence, list, tuple)]
        if float in rest and seq and all(a in (float, int) or a in seq for a in rest):
            return "float_or_floats"
    kind = kind_of_value(default)
    return None if kind == "any" else kind


def coerce(key: str, value: Any, kind: str) -> Any:
    """Check ``value`` against ``kind`` and convert it (int -> float, list -> tuple).

    Raises:
        ConfigError: naming ``key``, what it accepts and the value found (with its type).
    """
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{key} must be {expected}, found {value!r} ({type(value).__name__})")

    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise bad("an integer")
        return int(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise bad("a number")
        return float(value)
    if kind in ("int_or_none", "float_or_none"):
        return None if value is None else coerce(key, value, kind[: -len("_or_none")])
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise bad("true or false")
        return bool(value)
    if kind in ("str", "kind"):
        if not isinstance(value, str):
            raise bad("a string")
        if kind == "kind" and value not in FEATURE_KINDS:
            raise ConfigError(f"{key} must be one of {', '.join(map(repr, FEATURE_KINDS))}, found {value!r}")
        return value
    if kind == "float_or_floats":
        if isinstance(value, (list, tuple)):
            if not value:
                raise bad("a number or a non-empty list of numbers")
            return [coerce(f"{key}[{i}]", v, "float") for i, v in enumerate(value)]
        return coerce(key, value, "float")
    if kind == "tuple":
        if not isinstance(value, (list, tuple)):
            raise bad("a list")
        return tuple(value)
    return value


def unknown_key(key: str, valid: Iterable[str], where: str) -> ConfigError:
    """The error for an unknown key: the nearest valid key (if any) and all valid keys."""
    valid = sorted(valid)
    near = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return ConfigError(f"unknown key {key!r}{hint} for {where}; valid keys: {', '.join(valid) or '(none)'}")


def plain(value: Any) -> Any:
    """A setting's value as plain JSON data (numpy scalars -> Python, tuples -> lists)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


def short_value(value: Any) -> str:
    """A setting's value as written in names and messages: floats with ``g``, lists as ``[a,b]``."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(short_value(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


# ----------------------------------------------------------------------------- environments

#: registered names -> ``"module:attribute"`` of the constructor (one line per environment)
ENVIRONMENTS: dict[str, str] = {
    "gridworld": "fhc_jax.envs.gridworld:GridWorld",
    "battery": "fhc_jax.envs.battery:BatteryStorage",
    "gymnax:CartPole-v1": "fhc_jax.envs.gymnax_interop:cartpole",
    "gymnax:Acrobot-v1": "fhc_jax.envs.gymnax_interop:acrobot",
    "gymnax:MountainCar-v0": "fhc_jax.envs.gymnax_interop:mountain_car",
    "gymnax:Pendulum-v1": "fhc_jax.envs.gymnax_interop:pendulum",
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
                raise unknown_key(f"env.{key}", [f"env.{k}" for k in kinds] + ["env.name"],
                                  f"environment {self.name!r}")
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
            raise EnvironmentFailure(f"environment {self.name!r} raised {type(err).__name__}: {err} (in its "
                                     "constructor or default_params; an error in that environment's code, not in "
                                     "fhc_jax)") from err
        if not isinstance(env, Environment):
            raise ConfigError(f"env {self.name!r}: the constructor returned {type(env).__name__}, "
                              "not an fhc_jax.envs.Environment")
        return env, params

    def describe(self, values: Mapping[str, Any]) -> str:
        """A short title: the name and the settings that differ from the defaults,
        e.g. ``gridworld (size=3, horizon=4)``."""
        defaults = self.defaults
        changed = [f"{k}={short_value(v)}" for k, v in values.items() if k in defaults and plain(v) != defaults[k]]
        return self.name + (f" ({', '.join(changed)})" if changed else "")


def _import(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
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
            raise ConfigError(f"env {name!r}: constructor parameter {p.name!r} has no default, so it cannot be "
                              "set from a config file; give every parameter a default")
        if p.name == "name":
            raise ConfigError(f"env {name!r}: a setting may not be called 'name' (env.name selects the environment)")
        kind = kind_of_annotation(hints.get(p.name, p.annotation), p.default)
        if kind is None:
            raise ConfigError(f"env {name!r}: cannot tell the type of setting {p.name!r} (default {p.default!r}); "
                              "annotate it as int, float, bool, str, int | None, float | None or "
                              "float | Sequence[float]")
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
        raise ConfigError(f"unknown environment {name!r}; registered: {', '.join(ENVIRONMENTS)} "
                          "(or give module:ClassOrFactory of your own)")
    path = ENVIRONMENTS.get(name, name)
    if name.startswith("brax:"):  # any Brax environment by name (fhc_jax.envs.brax_interop)
        from fhc_jax.envs import brax_interop
        try:
            constructor = brax_interop.task_constructor(name[len("brax:"):])
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

#: How an experiment runs. ``chunk_size = 0``: the learner's ``eval_every`` (or 100).
#: ``checkpoint_every``: checkpoint every this many chunks (0: only at the end).
#: ``feasibility_tolerance``: the judge's relative tolerance (:mod:`fhc_jax.experiment.judge`).
#: ``eval_episodes``: episodes per seed of the final Monte-Carlo judgement, on environments
#: without a tabular exact model.
RUN_SETTINGS: tuple[Setting, ...] = (
    Setting("seeds", "int", 5, 1), Setting("seed", "int", 0, 0), Setting("chunk_size", "int", 0, 0),
    Setting("checkpoint_every", "int", 4, 0), Setting("feasibility_tolerance", "float", DEFAULT_TOLERANCE, 0.0),
    Setting("eval_episodes", "int", DEFAULT_EPISODES, 2, MAX_EPISODES),
)
RUN_DEFAULTS: dict[str, Any] = {s.name: s.default for s in RUN_SETTINGS}

#: feature-spec kinds settable through ``features.kind``
FEATURE_KINDS: dict[str, type] = {"one_hot": feat.OneHot, "radial_basis": feat.RadialBasis,
                                  "tile_coding": feat.TileCoding, "auto": feat.Auto}


def _is_schedule(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and hasattr(type(value), "_leaf_fields")


def _fields(value: Any) -> dict[str, Any]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


def learner_schema(config: Any) -> dict[str, str]:
    """Flat dotted keys of a learner ``Config`` instance and the kind each expects: nested
    schedules contribute ``field.sub`` keys; a feature spec ``features.kind`` plus the fields of
    every settable kind; other nested dataclasses (a custom feature function) none."""
    schema: dict[str, str] = {}
    for name, value in _fields(config).items():
        value = value.tabular if isinstance(value, EnvDefault) else value  # both values have the field's type
        if _is_schedule(value):
            schema.update({f"{name}.{sub}": kind_of_value(v) for sub, v in _fields(value).items()})
        elif isinstance(value, tuple(FEATURE_KINDS.values())):
            schema[f"{name}.kind"] = "kind"
            for cls in FEATURE_KINDS.values():
                for sub, v in _fields(cls()).items():
                    schema.setdefault(f"{name}.{sub}", "float_or_none" if v is None else kind_of_value(v))
        elif not dataclasses.is_dataclass(value):
            schema[name] = kind_of_value(value)
    return schema


def learner_settings(config: Any) -> dict[str, Any]:
    """The current values of :func:`learner_schema`'s keys (JSON-friendly), for config.json."""
    out: dict[str, Any] = {}
    for name, value in _fields(config).items():
        if isinstance(value, EnvDefault):
            raise ConfigError(f"{name} still holds its environment-dependent default ({value}); resolve it for "
                              "the environment first (fhc_jax.algos.resolve_env_defaults)")
        if isinstance(value, tuple(FEATURE_KINDS.values())):
            out[f"{name}.kind"] = next(k for k, cls in FEATURE_KINDS.items() if type(value) is cls)
        if _is_schedule(value) or isinstance(value, tuple(FEATURE_KINDS.values())):
            out.update({f"{name}.{sub}": plain(v) for sub, v in _fields(value).items()})
        elif dataclasses.is_dataclass(value):
            raise ConfigError(f"{name} = {type(value).__name__}(...) cannot be written to a config file")
        else:
            out[name] = plain(value)
    return out


def _build_learner_config(module, changes: dict[str, Any], tabular: bool) -> Any:
    """``module.Config()``, its environment-dependent defaults resolved for an environment with
    (``tabular``) or without a tabular exact model, with dotted ``changes`` (checked) applied."""
    default = resolve_env_defaults(module.Config(), tabular)
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        head, _, sub = key.partition(".")
        if sub:
            nested.setdefault(head, {})[sub] = value
        else:
            top[key] = value
    for head, subs in nested.items():
        current = getattr(default, head)
        if not isinstance(current, tuple(FEATURE_KINDS.values())):
            top[head] = type(current)(**{**_fields(current), **subs})
            continue
        kind = subs.pop("kind", None)
        cls = FEATURE_KINDS[kind] if kind else type(current)
        # another kind starts from its own defaults, but keeps the options both kinds have
        # (``stage_inputs``: the environment's default choice holds for either coarse map)
        valid = {f.name for f in dataclasses.fields(cls)}
        base = {k: v for k, v in _fields(current).items() if cls is type(current) or k in valid}
        wrong = sorted(set(subs) - valid)
        if wrong:
            kind_name = next(k for k, c in FEATURE_KINDS.items() if c is cls)
            raise ConfigError(f"{head}.{wrong[0]} is not an option of features.kind = {kind_name!r}; "
                              f"its options: {', '.join(sorted(valid)) or '(none)'}")
        top[head] = cls(**{**base, **subs})
    return default.replace(**top) if top else default


# ----------------------------------------------------------------------------- parsing


def flatten(mapping: Mapping[str, Any], prefix: str = "", sep: str = ".") -> dict[str, Any]:
    """Nested tables -> dotted keys: ``{"env": {"size": 4}} -> {"env.size": 4}`` (``sep``
    between the parts)."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}{sep}", sep))
        else:
            out[f"{prefix}{k}"] = v
    return out


def read_toml(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """A TOML file as nested tables (``what`` names it in errors).

    Raises:
        ConfigError: a missing file, a directory, invalid TOML (with the parser's position), text
            that is not UTF-8, or a file that cannot be read.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{what} {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {str(path)!r} is a directory; give a TOML file") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{what} {str(path)!r} is not valid TOML: {err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what} {str(path)!r} is not UTF-8 text (byte {err.start}); TOML files must be "
                          "UTF-8") from None
    except OSError as err:
        raise ConfigError(f"{what} {str(path)!r} cannot be read: {err.strerror or err}") from None


def parse_assignment(text: str) -> tuple[str, Any]:
    """``"key=value"`` -> (key, value); the value is parsed as TOML, else kept as a string.

    Raises:
        ConfigError: no ``=`` or an empty key.
    """
    key, sep, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, found {text!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


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
            raise ConfigError(f"--obs does not apply to {name!r} (its Config has no 'observation' field); "
                              "it selects the network input of nn-constrained, ppo-lag and cpo")
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
            valid = (["algo", "env.name"] + [f"env.{s.name}" for s in entry.settings]
                     + [f"run.{k}" for k in run_settings] + list(schema))
            raise unknown_key(key, valid, f"algorithm {name!r} on environment {entry.name!r}")
    env_settings = entry.validate(env_values)
    env_obj, _ = entry.make(env_settings)  # the constructor's own range checks, before anything compiles
    try:
        config = _build_learner_config(LEARNERS[name], learner, judged_exactly(env_obj))
    except TypeError as err:
        raise ConfigError(f"{name}: {err}") from None
    chunk = run.pop("chunk_size") or int(getattr(config, "eval_every", 0) or 100)
    return ExperimentSpec(algo=name, env_name=entry.name, env=env_settings, learner=config,
                          chunk_size=min(chunk, int(config.num_iterations)), **run)
