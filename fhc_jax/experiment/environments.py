"""The environments the experiment tools can build, by name, with typed and validated settings.

An environment is named on the command line (``fhc-jax train --env gridworld``) or in a TOML
file (``[env] name = "gridworld"``), and set with ``env.<setting>`` keys
(``--set env.size=5``). :data:`ENVIRONMENTS` maps each registered name to its constructor;
any other name of the form ``module:attribute`` is imported, so your own environment can be
trained from the command line without editing fhc_jax::

    fhc-jax train --env mypackage.envs:MyEnv --set env.horizon=8 --out runs/mine

**How an environment declares its settings.** The constructor (a class or a factory function
returning an :class:`fhc_jax.envs.Environment`) IS the declaration: every keyword parameter
with a default value is a setting of that name, with that default, and of the kind its type
annotation names (``int``, ``float``, ``bool``, ``str``, ``int | None``, ``float | None``,
``float | Sequence[float]`` for per-constraint thresholds, ``tuple[...]``); an unannotated
parameter takes the kind of its default (see :mod:`fhc_jax.experiment.settings`). Parameters
without a default, ``*args`` and ``**kwargs`` cannot be set from files: an environment whose
constructor needs one is refused with a message saying which. The environment's
``default_params`` are the params that are trained and judged. Ranges are the constructor's own
validation: whatever ``ValueError`` it raises is reported as a configuration error, before
anything is compiled. A toy example (``tests/toy_env.py``)::

    class ToyEnv(Environment[TabularState, TabularCMDP]):
        def __init__(self, horizon: int = 3, alpha: float = 0.5): ...

takes ``env.horizon`` (an integer, default 3) and ``env.alpha`` (a number, default 0.5).

**Adding an environment** is one line in :data:`ENVIRONMENTS` (name -> ``"module:attribute"``,
imported on first use) next to the environment's own file. What the experiment layer does with
an environment depends only on the capabilities it declares (``fhc_jax.envs.base``): exact
judgement against ``fhc_jax.solve`` needs ``has_exact_model``; policy maps need ``is_tabular``
and ``is_spatial`` (a rows x cols image of the most likely action, with arrows when the entry
gives the actions' displacements, :data:`ACTION_MOVES`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from typing import Any, Callable, Mapping

import numpy as np

from fhc_jax.envs.base import Environment
from fhc_jax.experiment.settings import ConfigError, Setting, coerce, kind_of_annotation, plain, unknown_key

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
ACTION_MOVES: dict[str, str] = {
    "gridworld": "fhc_jax.envs.gridworld:MOVES",
}


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
        """Every setting, defaults filled in, with the types of ``values`` checked (keys without
        the ``env.`` prefix). Nothing is constructed.

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
            ConfigError: the constructor's own validation failed (its message, prefixed ``env``),
                or it did not return an Environment.
        """
        settings = self.validate(values)
        kinds = {s.name: s.kind for s in self.settings}
        kwargs = {k: tuple(v) if kinds[k] == "tuple" else v for k, v in settings.items()}
        try:
            env = self.constructor(**kwargs)
        except (ValueError, TypeError) as err:
            raise ConfigError(f"env {self.name!r}: {err}") from None
        if not isinstance(env, Environment):
            raise ConfigError(f"env {self.name!r}: the constructor returned {type(env).__name__}, "
                              "not an fhc_jax.envs.Environment")
        return env, env.default_params

    def describe(self, values: Mapping[str, Any]) -> str:
        """A short title: the name and the settings that differ from the defaults,
        e.g. ``gridworld (size=3, horizon=4)``."""
        defaults = self.defaults
        changed = [f"{k}={short_value(v)}" for k, v in values.items() if k in defaults and plain(v) != defaults[k]]
        return self.name + (f" ({', '.join(changed)})" if changed else "")


def short_value(value: Any) -> str:
    """A setting's value as written in names and messages: floats with ``g``, lists as ``[a,b]``."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(short_value(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _import(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"env {path!r}: cannot import module {module_name!r}: {err}") from None
    try:
        return getattr(module, attribute)  # an attribute of a module, not a probe of an environment
    except AttributeError:
        raise ConfigError(f"env {path!r}: module {module_name!r} has no attribute {attribute!r}") from None


def declared_settings(name: str, constructor: Callable[..., Any]) -> tuple[Setting, ...]:
    """The settings a constructor declares (module docstring): its keyword parameters with
    defaults, each with the kind of its annotation (or of its default).

    Raises:
        ConfigError: a parameter without a default, or one whose kind cannot be told.
    """
    target = constructor.__init__ if inspect.isclass(constructor) else constructor
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # unresolvable annotations: fall back to the defaults' types
        hints = {}
    params = list(inspect.signature(constructor).parameters.values())
    out = []
    for p in params:
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
            constructor whose settings cannot be declared (see :func:`declared_settings`).
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"env.name must be a non-empty string, found {name!r}")
    if name in _ENTRIES:
        return _ENTRIES[name]
    if name in ENVIRONMENTS:
        path = ENVIRONMENTS[name]
    elif ":" in name:
        path = name
    else:
        raise ConfigError(f"unknown environment {name!r}; registered: {', '.join(ENVIRONMENTS)} "
                          "(or give module:ClassOrFactory of your own)")
    constructor = _import(path)
    if not callable(constructor):
        raise ConfigError(f"env {name!r}: {path} is not a class or function")
    moves = None
    if name in ACTION_MOVES:
        moves = np.asarray(_import(ACTION_MOVES[name]), np.int64).reshape(-1, 2)
    entry = EnvEntry(name, constructor, declared_settings(name, constructor), moves)
    _ENTRIES[name] = entry
    return entry


def make_env(name: str, values: Mapping[str, Any] | None = None) -> tuple[Environment, Any]:
    """``(env, params)`` of environment ``name`` with settings ``values`` (no ``env.`` prefix)."""
    return load_environment(name).make(values or {})
