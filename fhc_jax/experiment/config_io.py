"""Typed experiment configuration: TOML files and ``--set key=value`` overrides.

One flat namespace of dotted keys describes an experiment:

* ``algo``: the learner's command-line name (:mod:`fhc_jax.experiment.registry`);
* ``env.<option>``: the :class:`fhc_jax.GridWorld` constructor options (:data:`ENV_DEFAULTS`);
* ``run.<option>``: how it runs (:data:`RUN_DEFAULTS`: seeds, base seed, chunk size,
  checkpoint period);
* every other key: a field of the learner's ``Config``, nested schedules and feature specs
  with dots (``critic_step.init``, ``features.kind``).

A TOML file uses the same names, with tables for the dots::

    algo = "fh-constrained"
    num_iterations = 400
    [critic_step]
    init = 0.5
    [env]
    size = 5
    horizon = 20
    [run]
    seeds = 3

``--set`` values are parsed as TOML values (``--set env.alpha=[10.0, 20.0]``); a bare word
that is not valid TOML is taken as a string (``--set variant=paper``).

Everything is checked before anything is compiled: unknown keys (the error lists the valid
ones and the nearest match), wrong types (naming the key, the expected type and the value),
and the value ranges enforced by ``GridWorld`` and the learner's ``Config.__post_init__``.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from fhc_jax.algos import features as feat
from fhc_jax.experiment import registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: GridWorld options and their defaults (``None`` for num_phases: min(5, H)).
ENV_DEFAULTS: dict[str, Any] = {
    "size": 10,
    "horizon": 100,
    "num_constraints": 1,
    "observation": "xy",
    "slip": 0.1,
    "alpha": 25.0,
    "layout_seed": 0,
    "num_phases": None,
    "num_hotspots": 2,
    "num_quiet": 3,
}
_ENV_TYPES: dict[str, str] = {
    "size": "int", "horizon": "int", "num_constraints": "int", "observation": "str",
    "slip": "float", "alpha": "float_or_floats", "layout_seed": "int", "num_phases": "int_or_none",
    "num_hotspots": "int", "num_quiet": "int",
}

#: How an experiment runs. ``chunk_size = 0``: the learner's ``eval_every`` (or 100).
#: ``checkpoint_every``: checkpoint every this many chunks (0: only at the end).
RUN_DEFAULTS: dict[str, Any] = {"seeds": 5, "seed": 0, "chunk_size": 0, "checkpoint_every": 4}
_RUN_RANGES: dict[str, int] = {"seeds": 1, "seed": 0, "chunk_size": 0, "checkpoint_every": 0}

#: feature-spec kinds settable through ``features.kind``
FEATURE_KINDS: dict[str, type] = {"one_hot": feat.OneHot, "radial_basis": feat.RadialBasis,
                                  "tile_coding": feat.TileCoding}


class ConfigError(ValueError):
    """A configuration that cannot be used (unknown key, wrong type, value out of range)."""


# ----------------------------------------------------------------------------- the learner's schema


def _is_schedule(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and hasattr(type(value), "_leaf_fields")


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, tuple):
        return "tuple"
    return "any"


def learner_schema(config: Any) -> dict[str, str]:
    """Flat dotted keys of a learner ``Config`` instance and the type each expects
    ("int", "float", "bool", "str", "tuple", "any", or "kind" for ``features.kind``).

    Nested hyperparameter dataclasses (``PowerSchedule``) contribute ``field.sub`` keys; a
    feature spec contributes ``features.kind`` plus the fields of every settable kind.
    """
    schema: dict[str, str] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if _is_schedule(value):
            for sub in dataclasses.fields(value):
                schema[f"{f.name}.{sub.name}"] = _kind_of(getattr(value, sub.name))
        elif isinstance(value, tuple(FEATURE_KINDS.values())):
            schema[f"{f.name}.kind"] = "kind"
            for cls in FEATURE_KINDS.values():
                default = cls()
                for sub in dataclasses.fields(cls):
                    v = getattr(default, sub.name)
                    schema.setdefault(f"{f.name}.{sub.name}", "float_or_none" if v is None else _kind_of(v))
        elif dataclasses.is_dataclass(value):
            continue  # not settable from files (e.g. a custom feature function)
        else:
            schema[f.name] = _kind_of(value)
    return schema


def learner_settings(config: Any) -> dict[str, Any]:
    """The current values of :func:`learner_schema`'s keys (JSON-friendly), for config.json."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if _is_schedule(value):
            for sub in dataclasses.fields(value):
                out[f"{f.name}.{sub.name}"] = _plain(getattr(value, sub.name))
        elif isinstance(value, tuple(FEATURE_KINDS.values())):
            kind = next(k for k, cls in FEATURE_KINDS.items() if type(value) is cls)
            out[f"{f.name}.kind"] = kind
            for sub in dataclasses.fields(value):
                out[f"{f.name}.{sub.name}"] = _plain(getattr(value, sub.name))
        elif dataclasses.is_dataclass(value):
            raise ConfigError(f"{f.name} = {type(value).__name__}(...) cannot be written to a config file")
        else:
            out[f.name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (np.generic,)):
        return value.item()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


# ----------------------------------------------------------------------------- type checks


def _type_name(value: Any) -> str:
    return type(value).__name__


def _coerce(key: str, value: Any, kind: str) -> Any:
    """Check ``value`` against ``kind`` and convert (int -> float, list -> tuple)."""
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{key} must be {expected}, found {value!r} ({_type_name(value)})")

    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        return float(value)
    if kind == "float_or_none":
        if value is None:
            return None
        return _coerce(key, value, "float")
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if kind in ("str", "kind"):
        if not isinstance(value, str):
            raise bad("a string")
        if kind == "kind" and value not in FEATURE_KINDS:
            raise ConfigError(f"{key} must be one of {', '.join(map(repr, FEATURE_KINDS))}, found {value!r}")
        return value
    if kind == "int_or_none":
        if value is None:
            return None
        return _coerce(key, value, "int")
    if kind == "float_or_floats":
        if isinstance(value, (list, tuple)):
            if not value:
                raise bad("a number or a non-empty list of numbers")
            return [_coerce(f"{key}[{i}]", v, "float") for i, v in enumerate(value)]
        return _coerce(key, value, "float")
    if kind == "tuple":
        if not isinstance(value, (list, tuple)):
            raise bad("a list")
        return tuple(value)
    return value


def _unknown(key: str, valid: Iterable[str], where: str) -> ConfigError:
    valid = sorted(valid)
    near = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return ConfigError(f"unknown key {key!r}{hint} for {where}; valid keys: {', '.join(valid)}")


# ----------------------------------------------------------------------------- parsing


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables -> dotted keys: ``{"env": {"size": 4}} -> {"env.size": 4}``."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML config file as dotted keys.

    Raises:
        ConfigError: a missing file or invalid TOML (with the parser's position).
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            return flatten(tomllib.load(f))
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {err}") from None


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
        env: complete GridWorld options (:data:`ENV_DEFAULTS` keys).
        learner: the learner's validated ``Config``.
        seeds: number of seeds R >= 1; seed i trains from ``fold_in(key(seed), i)``.
        seed: base seed >= 0.
        chunk_size: iterations per compiled chunk (>= 1, resolved).
        checkpoint_every: checkpoint every this many chunks (0: only at the end).
    """

    algo: str
    env: dict
    learner: Any
    seeds: int
    seed: int
    chunk_size: int
    checkpoint_every: int

    @property
    def num_iterations(self) -> int:
        return int(self.learner.num_iterations)

    def settings(self) -> dict[str, Any]:
        """Flat dotted keys of everything settable: ``load_spec(settings=...)`` rebuilds it."""
        out: dict[str, Any] = {"algo": self.algo}
        out.update({f"env.{k}": _plain(v) if not isinstance(v, list) else list(v) for k, v in self.env.items()})
        out.update({"run.seeds": self.seeds, "run.seed": self.seed, "run.chunk_size": self.chunk_size,
                    "run.checkpoint_every": self.checkpoint_every})
        out.update(learner_settings(self.learner))
        return out

    def make_env(self):
        """``(GridWorld, params)`` of :attr:`env`."""
        import fhc_jax as fhc

        opts = dict(self.env)
        env = fhc.GridWorld(opts.pop("size"), opts.pop("horizon"), opts.pop("num_constraints"),
                            opts.pop("observation"), **opts)
        return env, env.default_params


def _build_learner_config(module, changes: dict[str, Any]) -> Any:
    """``module.Config()`` with dotted ``changes`` applied (types already checked)."""
    default = module.Config()
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
        if isinstance(current, tuple(FEATURE_KINDS.values())):
            kind = subs.pop("kind", None)
            cls = FEATURE_KINDS[kind] if kind else type(current)
            base = {} if kind and cls is not type(current) else {f.name: getattr(current, f.name) for f in dataclasses.fields(current)}
            valid = {f.name for f in dataclasses.fields(cls)}
            wrong = sorted(set(subs) - valid)
            if wrong:
                kind_name = next(k for k, c in FEATURE_KINDS.items() if c is cls)
                raise ConfigError(f"{head}.{wrong[0]} is not an option of features.kind = {kind_name!r}; "
                                  f"its options: {', '.join(sorted(valid)) or '(none)'}")
            top[head] = cls(**{**base, **subs})
        else:
            top[head] = dataclasses.replace(current, **subs) if not _is_schedule(current) else \
                type(current)(**{**{f.name: getattr(current, f.name) for f in dataclasses.fields(current)}, **subs})
    return default.replace(**top) if top else default


def load_spec(
    algo: str | None = None,
    *,
    config_file: str | Path | None = None,
    overrides: Iterable[str] = (),
    settings: Mapping[str, Any] | None = None,
    seeds: int | None = None,
    observation: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> ExperimentSpec:
    """Build and validate an :class:`ExperimentSpec` (nothing is compiled).

    Precedence (later wins): ``defaults`` (dotted keys, e.g. the CLI's shorter default
    ``num_iterations``) < ``settings`` (dotted keys, e.g. a run directory's config.json)
    < ``config_file`` < ``overrides`` (``--set`` strings) < ``algo``, ``seeds`` and
    ``observation`` arguments (explicit flags).

    Raises:
        ConfigError / ValueError: unknown keys (listing the valid ones), wrong types, values
            out of range (from ``GridWorld`` and the learner's ``Config``), an unknown or
            unavailable algorithm.
    """
    values: dict[str, Any] = {}
    for source in (defaults or {}, settings or {}):
        values.update(flatten(source))
    if config_file is not None:
        values.update(read_toml(config_file))
    for text in overrides:
        k, v = parse_assignment(text)
        values[k] = v
    if algo is not None:
        values["algo"] = algo
    if seeds is not None:
        values["run.seeds"] = seeds
    name = values.pop("algo", "fh-constrained")
    if not isinstance(name, str):
        raise ConfigError(f"algo must be a string, found {name!r}")
    module = registry.load_algorithm(name)
    name = registry.canonical_name(name)
    default_cfg = module.Config()
    schema = learner_schema(default_cfg)
    if observation is not None:
        if "observation" not in schema:
            raise ConfigError(f"--obs does not apply to {name!r} (its Config has no 'observation' field); "
                              "it selects the network input of nn-constrained, ppo-lag and cpo")
        values["observation"] = observation

    env = dict(ENV_DEFAULTS)
    run = dict(RUN_DEFAULTS)
    learner: dict[str, Any] = {}
    defaults_keys = set(flatten(defaults or {}))
    for key, value in values.items():
        if key.startswith("env."):
            sub = key[4:]
            if sub not in ENV_DEFAULTS:
                raise _unknown(key, [f"env.{k}" for k in ENV_DEFAULTS], "the environment")
            env[sub] = _coerce(key, value, _ENV_TYPES[sub])
        elif key.startswith("run."):
            sub = key[4:]
            if sub not in RUN_DEFAULTS:
                raise _unknown(key, [f"run.{k}" for k in RUN_DEFAULTS], "the run")
            v = _coerce(key, value, "int")
            if v < _RUN_RANGES[sub]:
                raise ConfigError(f"{key} must be an integer >= {_RUN_RANGES[sub]}, found {v}")
            run[sub] = v
        elif key in schema:
            learner[key] = _coerce(key, value, schema[key])
        elif key in defaults_keys:
            continue  # a CLI default that this learner does not have
        else:
            valid = ["algo"] + [f"env.{k}" for k in ENV_DEFAULTS] + [f"run.{k}" for k in RUN_DEFAULTS] + list(schema)
            raise _unknown(key, valid, f"algorithm {name!r}")

    import fhc_jax as fhc

    opts = dict(env)
    try:
        fhc.GridWorld(opts.pop("size"), opts.pop("horizon"), opts.pop("num_constraints"), opts.pop("observation"), **opts)
    except ValueError as err:
        raise ConfigError(f"env: {err}") from None
    except TypeError as err:
        raise ConfigError(f"env: {err}") from None
    try:
        config = _build_learner_config(module, learner)
    except TypeError as err:
        raise ConfigError(f"{name}: {err}") from None
    chunk = run["chunk_size"]
    if chunk == 0:
        chunk = int(getattr(config, "eval_every", 0) or 100)
    chunk = min(chunk, int(config.num_iterations))
    return ExperimentSpec(algo=name, env=env, learner=config, seeds=run["seeds"], seed=run["seed"],
                          chunk_size=chunk, checkpoint_every=run["checkpoint_every"])


def valid_keys(algo: str) -> list[str]:
    """Every settable dotted key for ``algo`` (for help texts and error messages)."""
    module = registry.load_algorithm(algo)
    return (["algo"] + [f"env.{k}" for k in ENV_DEFAULTS] + [f"run.{k}" for k in RUN_DEFAULTS]
            + sorted(learner_schema(module.Config())))
