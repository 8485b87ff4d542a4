"""Typed settings: the value kinds of configuration keys and their checks.

Every settable key of an experiment (an environment setting, a ``run.*`` option, a field of a
learner's ``Config``) has a *kind*, a short string naming what it accepts:

==================  ===================================================================
kind                accepts (and converts to)
==================  ===================================================================
``int``             an integer (not a bool)
``float``           a number (an int becomes a float)
``bool``            true or false
``str``             a string
``tuple``           a list (becomes a tuple)
``int_or_none``     an integer, or absent/None
``float_or_none``   a number, or absent/None
``float_or_floats`` a number or a non-empty list of numbers (one per constraint)
``kind``            a feature-spec name (``features.kind``, checked by the caller)
``any``             anything
==================  ===================================================================

:func:`coerce` checks a value against a kind and converts it; :func:`kind_of_annotation`
derives the kind of a constructor parameter from its type annotation (or its default), which
is how environment settings are declared (:mod:`fhc_jax.experiment.environments`).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Sequence as AbcSequence
from typing import Any, Iterable

import numpy as np

KINDS = ("int", "float", "bool", "str", "tuple", "int_or_none", "float_or_none", "float_or_floats", "kind", "any")


class ConfigError(ValueError):
    """A configuration that cannot be used (unknown key, wrong type, value out of range)."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One settable key: its name, kind (module docstring) and default value."""

    name: str
    kind: str
    default: Any

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"setting {self.name!r}: unknown kind {self.kind!r}; valid: {', '.join(KINDS)}")


def kind_of_value(value: Any) -> str:
    """The kind of a default value: "bool", "int", "float", "str", "tuple" or "any"."""
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


_SIMPLE = {int: "int", float: "float", bool: "bool", str: "str"}


def kind_of_annotation(annotation: Any, default: Any) -> str | None:
    """The kind of a parameter annotated ``annotation`` with default ``default``; None when the
    annotation is not one of ``int``, ``float``, ``bool``, ``str``, ``X | None`` (X int or
    float), ``float | Sequence[float]`` or ``tuple[...]``, and the default does not tell
    (a default of None does not)."""
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


def _type_name(value: Any) -> str:
    return type(value).__name__


def coerce(key: str, value: Any, kind: str) -> Any:
    """Check ``value`` against ``kind`` and convert it (int -> float, list -> tuple).

    Raises:
        ConfigError: naming ``key``, what it accepts and the value found (with its type).
    """
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{key} must be {expected}, found {value!r} ({_type_name(value)})")

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
