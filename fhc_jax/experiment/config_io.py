"""Typed experiment configuration: TOML files and ``--set key=value`` overrides.

One flat namespace of dotted keys describes an experiment:

* ``algo``: the learner's command-line name (:mod:`fhc_jax.experiment.registry`);
* ``env.name``: the environment (:mod:`fhc_jax.experiment.environments`; default
  ``gridworld``), and ``env.<setting>``: the settings that environment declares;
* ``run.<option>``: how it runs (:data:`RUN_SETTINGS`: seeds, base seed, chunk size,
  checkpoint period, feasibility tolerance of the judge);
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
    horizon = 20
    [run]
    seeds = 3

``--set`` values are parsed as TOML values (``--set env.alpha=[10.0, 20.0]``); a bare word
that is not valid TOML is taken as a string (``--set variant=paper``).

Everything is checked before anything is compiled: unknown keys (the error lists the valid
ones and the nearest match; ``env.*`` keys against the chosen environment's settings), wrong
types (naming the key, the expected type and the value), and the value ranges enforced by the
environment's constructor and the learner's ``Config.__post_init__``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping


from fhc_jax.algos import features as feat
from fhc_jax.algos.hyperparameters import EnvDefault, resolve_env_defaults
from fhc_jax.algos.learner import judged_exactly
from fhc_jax.experiment import environments, registry
from fhc_jax.experiment.judge import DEFAULT_EPISODES, DEFAULT_TOLERANCE
from fhc_jax.experiment.settings import ConfigError, Setting, coerce, kind_of_value, plain, unknown_key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: How an experiment runs. ``chunk_size = 0``: the learner's ``eval_every`` (or 100).
#: ``checkpoint_every``: checkpoint every this many chunks (0: only at the end).
#: ``feasibility_tolerance``: the judge's relative tolerance (:mod:`fhc_jax.experiment.judge`).
#: ``eval_episodes``: episodes per seed of the final Monte-Carlo judgement, on environments
#: without a tabular exact model.
RUN_SETTINGS: tuple[Setting, ...] = (
    Setting("seeds", "int", 5), Setting("seed", "int", 0), Setting("chunk_size", "int", 0),
    Setting("checkpoint_every", "int", 4), Setting("feasibility_tolerance", "float", DEFAULT_TOLERANCE),
    Setting("eval_episodes", "int", DEFAULT_EPISODES),
)
RUN_DEFAULTS: dict[str, Any] = {s.name: s.default for s in RUN_SETTINGS}
_RUN_MINIMA: dict[str, float] = {"seeds": 1, "seed": 0, "chunk_size": 0, "checkpoint_every": 0,
                                 "feasibility_tolerance": 0.0, "eval_episodes": 2}

#: feature-spec kinds settable through ``features.kind``
FEATURE_KINDS: dict[str, type] = {"one_hot": feat.OneHot, "radial_basis": feat.RadialBasis,
                                  "tile_coding": feat.TileCoding, "auto": feat.Auto}


# ----------------------------------------------------------------------------- the learner's schema


def _is_schedule(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and hasattr(type(value), "_leaf_fields")


def learner_schema(config: Any) -> dict[str, str]:
    """Flat dotted keys of a learner ``Config`` instance and the type each expects
    ("int", "float", "bool", "str", "tuple", "any", or "kind" for ``features.kind``).

    Nested hyperparameter dataclasses (``PowerSchedule``) contribute ``field.sub`` keys; a
    feature spec contributes ``features.kind`` plus the fields of every settable kind.
    """
    schema: dict[str, str] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, EnvDefault):  # both values have the field's type
            value = value.tabular
        if _is_schedule(value):
            for sub in dataclasses.fields(value):
                schema[f"{f.name}.{sub.name}"] = kind_of_value(getattr(value, sub.name))
        elif isinstance(value, tuple(FEATURE_KINDS.values())):
            schema[f"{f.name}.kind"] = "kind"
            for cls in FEATURE_KINDS.values():
                default = cls()
                for sub in dataclasses.fields(cls):
                    v = getattr(default, sub.name)
                    schema.setdefault(f"{f.name}.{sub.name}", "float_or_none" if v is None else kind_of_value(v))
        elif dataclasses.is_dataclass(value):
            continue  # not settable from files (e.g. a custom feature function)
        else:
            schema[f.name] = kind_of_value(value)
    return schema


def learner_settings(config: Any) -> dict[str, Any]:
    """The current values of :func:`learner_schema`'s keys (JSON-friendly), for config.json."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, EnvDefault):
            raise ConfigError(f"{f.name} still holds its environment-dependent default ({value}); resolve it for "
                              "the environment first (fhc_jax.algos.resolve_env_defaults)")
        if _is_schedule(value):
            for sub in dataclasses.fields(value):
                out[f"{f.name}.{sub.name}"] = plain(getattr(value, sub.name))
        elif isinstance(value, tuple(FEATURE_KINDS.values())):
            kind = next(k for k, cls in FEATURE_KINDS.items() if type(value) is cls)
            out[f"{f.name}.kind"] = kind
            for sub in dataclasses.fields(value):
                out[f"{f.name}.{sub.name}"] = plain(getattr(value, sub.name))
        elif dataclasses.is_dataclass(value):
            raise ConfigError(f"{f.name} = {type(value).__name__}(...) cannot be written to a config file")
        else:
            out[f.name] = plain(value)
    return out


def _check(key: str, value: Any, kind: str) -> Any:
    """:func:`~fhc_jax.experiment.settings.coerce`, plus the names of ``features.kind``."""
    value = coerce(key, value, kind)
    if kind == "kind" and value not in FEATURE_KINDS:
        raise ConfigError(f"{key} must be one of {', '.join(map(repr, FEATURE_KINDS))}, found {value!r}")
    return value


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
    except IsADirectoryError:
        raise ConfigError(f"config file {str(path)!r} is a directory; give a TOML file") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text (byte {err.start}); TOML files must be "
                          "UTF-8") from None
    except OSError as err:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {err.strerror or err}") from None


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

    def settings(self) -> dict[str, Any]:
        """Flat dotted keys of everything settable: ``load_spec(settings=...)`` rebuilds it."""
        out: dict[str, Any] = {"algo": self.algo, "env.name": self.env_name}
        out.update({f"env.{k}": plain(v) for k, v in self.env.items()})
        out.update({"run.seeds": self.seeds, "run.seed": self.seed, "run.chunk_size": self.chunk_size,
                    "run.checkpoint_every": self.checkpoint_every,
                    "run.feasibility_tolerance": self.feasibility_tolerance,
                    "run.eval_episodes": self.eval_episodes})
        out.update(learner_settings(self.learner))
        return out

    def make_env(self):
        """``(env, params)`` of :attr:`env_name` with the settings :attr:`env`
        (:mod:`fhc_jax.experiment.environments`)."""
        return environments.make_env(self.env_name, self.env)

    def env_title(self) -> str:
        """The environment's name and its non-default settings, e.g. ``gridworld (size=3)``."""
        return environments.load_environment(self.env_name).describe(self.env)


def _build_learner_config(module, changes: dict[str, Any], tabular: bool) -> Any:
    """``module.Config()``, its environment-dependent defaults resolved for an environment with
    (``tabular``) or without a tabular exact model, with dotted ``changes`` applied (types
    already checked)."""
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
        if isinstance(current, tuple(FEATURE_KINDS.values())):
            kind = subs.pop("kind", None)
            cls = FEATURE_KINDS[kind] if kind else type(current)
            # another kind starts from its own defaults, but keeps the options both kinds have
            # (``stage_inputs``: the environment's default choice holds for either coarse map)
            valid = {f.name for f in dataclasses.fields(cls)}
            base = {f.name: getattr(current, f.name) for f in dataclasses.fields(current)
                    if not (kind and cls is not type(current)) or f.name in valid}
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
    env: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> ExperimentSpec:
    """Build and validate an :class:`ExperimentSpec` (the environment is constructed, nothing
    is compiled).

    Precedence (later wins): ``defaults`` (dotted keys that apply only where the learner has
    them, e.g. ``fhc-jax compare``'s settings common to every learner) < ``settings`` (dotted
    keys, e.g. a run directory's config.json) < ``config_file`` < ``overrides`` (``--set``
    strings) < the ``algo``, ``env``, ``seeds`` and ``observation`` arguments (explicit flags).

    Raises:
        ConfigError / ValueError: unknown keys (listing the valid ones; ``env.*`` against the
            chosen environment's settings), wrong types, values out of range (from the
            environment's constructor and the learner's ``Config``), an unknown algorithm or
            environment.
    """
    values: dict[str, Any] = dict(flatten(defaults or {}))
    values.update(flatten(settings or {}))
    if config_file is not None:
        values.update(read_toml(config_file))
    for text in overrides:
        k, v = parse_assignment(text)
        values[k] = v
    if algo is not None:
        values["algo"] = algo
    if env is not None:
        values["env.name"] = env
    if seeds is not None:
        values["run.seeds"] = seeds
    name = values.pop("algo", "fh-constrained")
    if not isinstance(name, str):
        raise ConfigError(f"algo must be a string, found {name!r}")
    module = registry.load_algorithm(name)
    name = registry.canonical_name(name)
    schema = learner_schema(module.Config())
    if observation is not None:
        if "observation" not in schema:
            raise ConfigError(f"--obs does not apply to {name!r} (its Config has no 'observation' field); "
                              "it selects the network input of nn-constrained, ppo-lag and cpo")
        values["observation"] = observation
    entry = environments.load_environment(values.pop("env.name", environments.DEFAULT_ENV))

    env_values: dict[str, Any] = {}
    run = dict(RUN_DEFAULTS)
    run_kinds = {s.name: s.kind for s in RUN_SETTINGS}
    learner: dict[str, Any] = {}
    defaults_keys = set(flatten(defaults or {}))
    for key, value in values.items():
        if key.startswith("env."):
            env_values[key[4:]] = value
        elif key.startswith("run."):
            sub = key[4:]
            if sub not in run_kinds:
                raise unknown_key(key, [f"run.{k}" for k in run_kinds], "the run")
            v = coerce(key, value, run_kinds[sub])
            if v < _RUN_MINIMA[sub]:
                what = "an integer" if run_kinds[sub] == "int" else "a number"
                raise ConfigError(f"{key} must be {what} >= {_RUN_MINIMA[sub]:g}, found {v}")
            run[sub] = v
        elif key in schema:
            learner[key] = _check(key, value, schema[key])
        elif key in defaults_keys:
            continue  # a common default that this learner does not have
        else:
            valid = (["algo", "env.name"] + [f"env.{s.name}" for s in entry.settings]
                     + [f"run.{k}" for k in run_kinds] + list(schema))
            raise unknown_key(key, valid, f"algorithm {name!r} on environment {entry.name!r}")
    env_settings = entry.validate(env_values)
    env_obj, _ = entry.make(env_settings)  # the constructor's own range checks, before anything compiles
    try:
        config = _build_learner_config(module, learner, judged_exactly(env_obj))
    except TypeError as err:
        raise ConfigError(f"{name}: {err}") from None
    chunk = run["chunk_size"]
    if chunk == 0:
        chunk = int(getattr(config, "eval_every", 0) or 100)
    chunk = min(chunk, int(config.num_iterations))
    return ExperimentSpec(algo=name, env_name=entry.name, env=env_settings, learner=config, seeds=run["seeds"],
                          seed=run["seed"], chunk_size=chunk, checkpoint_every=run["checkpoint_every"],
                          feasibility_tolerance=run["feasibility_tolerance"], eval_episodes=run["eval_episodes"])
