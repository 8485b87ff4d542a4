"""Typed settings: the kind of value each key accepts, the checks with errors that name the key,
and where values come from (TOML files, ``--set key=value``). The keys themselves and what they
configure are :mod:`fhc_jax.experiment.config`'s.

**Kinds.** Every settable key has a kind naming what it accepts: ``int``, ``float`` (an int
becomes a float), ``bool``, ``str``, ``tuple`` (a list), ``int_or_none``, ``float_or_none``,
``float_or_floats`` (a number or a non-empty list of numbers, one per constraint), ``kind`` (a
feature-spec name, :data:`FEATURE_KINDS`) or ``any``. :class:`Setting` is one key with its kind,
default and range; :func:`coerce` checks and converts a value; :func:`kind_of_annotation`
reads the kind of a constructor parameter from its annotation.

**Sources.** A TOML file (:func:`read_toml`) uses the dotted names, with tables for the dots
(:func:`flatten` turns them back into dotted keys)::

    algo = "fh-constrained"
    num_iterations = 400
    [critic_lr]
    init = 0.5
    [env]
    name = "gridworld"
    size = 5
    [run]
    seeds = 3

``--set`` values (:func:`parse_assignment`) are parsed as TOML values (``--set
env.alpha=[10.0, 20.0]``); a bare word that is not valid TOML is taken as a string (``--set
variant=paper``).

**A learner's keys.** :func:`learner_schema` lists the flat dotted keys of a learner's
``Config`` and their kinds (nested schedules ``critic_lr.init``, feature specs
``features.kind``); :func:`learner_settings` reads their values back (for config.json);
:func:`build_learner_config` builds a ``Config`` from changed keys.

Every error is a :class:`ConfigError` naming the key, what it accepts and the value found; an
unknown key (:func:`unknown_key`) lists the valid ones and the nearest match.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from collections.abc import Sequence as AbcSequence
from pathlib import Path
from typing import Any

import numpy as np

from fhc_jax.algos.core import features as feat
from fhc_jax.algos.core.hyperparameters import EnvDefault, resolve_env_defaults

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(ValueError):
    """A configuration that cannot be used (unknown key, wrong type, value out of range)."""


# ----------------------------------------------------------------------------- typed settings


@dataclasses.dataclass(frozen=True)
class Setting:
    """One settable key: its name, kind (module docstring), default, smallest and largest
    values (None: none), and why the range is what it is (``note``, added to the error)."""

    name: str
    kind: str
    default: Any
    low: float | None = None
    high: float | None = None
    note: str = ""

    def check(self, key: str, value: Any) -> Any:
        """``value`` coerced to this setting's kind and checked against its range (a float
        setting takes finite numbers only).

        Raises:
            ConfigError: naming ``key``, the kind and the bound it breaks, and the value.
        """
        v = coerce(key, value, self.kind)
        what = "an integer" if self.kind == "int" else "a number"
        why = f" ({self.note})" if self.note else ""
        if self.kind == "float" and not np.isfinite(v):
            raise ConfigError(f"{key} must be a finite number, found {v}{why}")
        if self.low is not None and v < self.low:
            raise ConfigError(f"{key} must be {what} >= {short_value(self.low)}, found {v}{why}")
        if self.high is not None and v > self.high:
            raise ConfigError(f"{key} must be {what} <= {short_value(self.high)}, found {v}{why}")
        return v


def kind_of_value(value: Any) -> str:
    """The kind of a default value: "bool", "int", "float", "str", "tuple" or "any"."""
    for kind, types_ in (
        ("bool", bool),
        ("int", (int, np.integer)),
        ("float", (float, np.floating)),
        ("str", str),
        ("tuple", tuple),
    ):
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


# ----------------------------------------------------------------------------- the learner's keys

#: feature-spec kinds settable through ``features.kind``
FEATURE_KINDS: dict[str, type] = {
    "one_hot": feat.OneHot,
    "radial_basis": feat.RadialBasis,
    "tile_coding": feat.TileCoding,
    "auto": feat.Auto,
}


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
            raise ConfigError(
                f"{name} still holds its environment-dependent default ({value}); resolve it for "
                "the environment first (fhc_jax.algos.resolve_env_defaults)"
            )
        if isinstance(value, tuple(FEATURE_KINDS.values())):
            out[f"{name}.kind"] = next(k for k, cls in FEATURE_KINDS.items() if type(value) is cls)
        if _is_schedule(value) or isinstance(value, tuple(FEATURE_KINDS.values())):
            out.update({f"{name}.{sub}": plain(v) for sub, v in _fields(value).items()})
        elif dataclasses.is_dataclass(value):
            raise ConfigError(f"{name} = {type(value).__name__}(...) cannot be written to a config file")
        else:
            out[name] = plain(value)
    return out


def build_learner_config(module, changes: dict[str, Any], tabular: bool) -> Any:
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
            raise ConfigError(
                f"{head}.{wrong[0]} is not an option of features.kind = {kind_name!r}; "
                f"its options: {', '.join(sorted(valid)) or '(none)'}"
            )
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
        raise ConfigError(
            f"{what} {str(path)!r} is not UTF-8 text (byte {err.start}); TOML files must be UTF-8"
        ) from None
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
