"""Hyperparameter pytrees with declarative validation, and step-size schedules.

A learner's ``Config`` is a frozen dataclass decorated with :func:`hyperparameters`. Each
field declares its kind and valid range once, next to its default:

* :func:`static` fields set shapes or code paths (integers, strings, booleans, feature specs):
  pytree auxiliary data, part of the ``jax.jit`` cache key;
* :func:`numeric` fields and :func:`schedule` fields are pytree leaves, so ``jax.vmap`` runs
  over them (seeds x hyperparameters in one program) without recompiling.

A field's default may depend on the environment (:class:`EnvDefault`: one value for
environments with a tabular exact model, another for all others); ``make_learner`` resolves
such defaults for its environment (:func:`resolve_env_defaults`), while a value set explicitly
is always used as given.

Construction validates every field (values may be arrays of vmapped settings: every element
is checked) and raises ``ValueError`` naming the field, the valid range and the value found;
pytree reconstruction inside JAX transformations bypasses validation (leaves may be tracers).
Schedules are validated together, fastest first, against the paper's Assumption 3.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.algos.core.paths import judged_exactly

Array = jax.Array

_SPEC = "fhc_jax"


@dataclasses.dataclass(frozen=True)
class _Spec:
    """How one field is validated (see :func:`static`, :func:`numeric`, :func:`schedule`)."""

    static: bool
    kind: str  # "int", "bool", "choice", "type", "real", "schedule"
    low: float | None = None
    high: float | str | None = None  # a number, or the name of another numeric field
    low_open: bool = False
    high_open: bool = False
    choices: tuple = ()
    types: tuple = ()
    description: str = ""


def static(
    default: Any,
    *,
    low: int | None = None,
    choices: Sequence[str] | None = None,
    types: tuple[type, ...] | None = None,
    description: str = "",
) -> Any:
    """A static field: an integer >= ``low``, one of ``choices``, an instance of ``types``
    (described as ``description`` in errors), or a boolean (``default`` is a bool)."""
    if isinstance(default, bool):
        spec = _Spec(True, "bool")
    elif choices is not None:
        spec = _Spec(True, "choice", choices=tuple(choices))
    elif types is not None:
        spec = _Spec(True, "type", types=tuple(types), description=description)
    else:
        spec = _Spec(True, "int", low=low)
    return dataclasses.field(default=default, metadata={_SPEC: spec})


def numeric(
    default: float,
    *,
    low: float | None = None,
    high: float | str | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> Any:
    """A numeric leaf in the interval from ``low`` to ``high`` (open ends with ``low_open`` /
    ``high_open``; ``high`` may name another numeric field of the same config)."""
    return dataclasses.field(default=default, metadata={_SPEC: _Spec(False, "real", low, high, low_open, high_open)})


def schedule(default: PowerSchedule) -> Any:
    """A :class:`PowerSchedule` leaf. A config's schedules, in declaration order, run from the
    fastest timescale to the slowest (Assumption 3 is checked in that order)."""
    return dataclasses.field(default=default, metadata={_SPEC: _Spec(False, "schedule")})


@dataclasses.dataclass(frozen=True)
class EnvDefault:
    """A default that depends on the environment the learner trains on.

    Attributes:
        tabular: the value on environments with a tabular exact model (finite states, judged
            exactly; the learners' tabular fast paths).
        non_tabular: the value on every other environment (continuous or unenumerated states:
            the sampled path, judged by Monte-Carlo).

    A ``Config`` field holding an ``EnvDefault`` is resolved by ``make_learner`` /
    ``make_train`` (:func:`resolve_env_defaults`) and by the experiment layer once the
    environment is known; setting the field explicitly replaces it on every environment. Both
    values are validated like the field. As a pytree it has no leaves (its values are auxiliary
    data), so stacking configs that keep the default keeps it.
    """

    tabular: Any
    non_tabular: Any

    def resolve(self, tabular: bool) -> Any:
        """The value for an environment with (``tabular=True``) or without a tabular exact model."""
        return self.tabular if tabular else self.non_tabular


jax.tree_util.register_pytree_node(
    EnvDefault, lambda d: ((), (d.tabular, d.non_tabular)), lambda aux, _: EnvDefault(*aux)
)


def _with_fields(config: Any, changes: dict[str, Any]) -> Any:
    """A copy of the dataclass ``config`` with some fields replaced, without validation (its
    leaves may be tracers, as in pytree reconstruction)."""
    obj = object.__new__(type(config))
    for f in dataclasses.fields(config):
        object.__setattr__(obj, f.name, changes.get(f.name, getattr(config, f.name)))
    return obj


def has_env_defaults(config: Any) -> bool:
    """Whether some field of ``config`` still holds an unresolved :class:`EnvDefault`."""
    return any(isinstance(getattr(config, f.name), EnvDefault) for f in dataclasses.fields(config))


def resolve_env_defaults(config: Any, tabular: bool) -> Any:
    """``config`` with every :class:`EnvDefault` field replaced by its value for an environment
    with (``tabular=True``) or without a tabular exact model (``fhc_jax.algos.core.paths.
    judged_exactly``); other fields unchanged (numeric leaves may be arrays or tracers)."""
    changes = {
        f.name: v.resolve(tabular)
        for f in dataclasses.fields(config)
        if isinstance(v := getattr(config, f.name), EnvDefault)
    }
    return _with_fields(config, changes) if changes else config


# ----------------------------------------------------------------------------- checks of values


def _real(owner: str, name: str, value: Any) -> np.ndarray | None:
    """Concrete values as a float64 array (None when traced); ValueError if not numeric/finite."""
    if isinstance(value, jax.core.Tracer):
        return None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}.{name} must be a real number, found {value!r}") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{owner}.{name} must be finite, found {value!r}")
    return arr


def _fmt(arr: np.ndarray) -> str:
    return f"{float(arr):g}" if arr.ndim == 0 else str(arr.tolist())


def check_interval(
    owner: str,
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    high_name: str | None = None,
) -> None:
    """Raise ``ValueError`` unless every element of ``value`` lies in the interval (a missing
    end is unbounded). Messages: "must be > 0", "must be >= 0", "must lie in [0, 1)", ...;
    ``high_name`` names the field the upper end comes from."""
    arr = _real(owner, name, value)
    if arr is None:
        return
    bad_low = low is not None and (np.any(arr <= low) if low_open else np.any(arr < low))
    bad_high = high is not None and (np.any(arr >= high) if high_open else np.any(arr > high))
    if not (bad_low or bad_high):
        return
    if high is None:
        rule = f"be {'>' if low_open else '>='} {low:g}"
    else:
        top = f"{high_name} = {_fmt(np.asarray(high))}" if high_name else f"{high:g}"
        rule = f"lie in {'(' if low_open else '['}{low:g}, {top}{')' if high_open else ']'}"
    raise ValueError(f"{owner}.{name} must {rule}, found {_fmt(arr)}")


def check_positive(owner: str, name: str, value: Any, *, allow_zero: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` (scalar or array of vmapped values) is > 0 (>= 0)."""
    check_interval(owner, name, value, 0.0, low_open=not allow_zero)


def check_integer(owner: str, name: str, value: Any, low: int) -> None:
    """Raise ``ValueError`` unless ``value`` is an integer (not a bool) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{owner}.{name} must be an integer >= {low}, found {value!r}")


# ----------------------------------------------------------------------------- step sizes


def _pytree_dataclass(cls: type, static_names: Sequence[str]) -> type:
    """Make a frozen dataclass a pytree: ``static_names`` are auxiliary data, the rest leaves."""
    names = [f.name for f in dataclasses.fields(cls)]
    leaves = tuple(n for n in names if n not in static_names)
    statics = tuple(n for n in names if n in static_names)

    def flatten_with_keys(obj):
        children = tuple((jax.tree_util.GetAttrKey(n), getattr(obj, n)) for n in leaves)
        return children, tuple(getattr(obj, n) for n in statics)

    def unflatten(aux, children):
        obj = object.__new__(cls)
        for n, v in zip(leaves, children):
            object.__setattr__(obj, n, v)
        for n, v in zip(statics, aux):
            object.__setattr__(obj, n, v)
        return obj

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten)
    cls._leaf_fields = leaves
    cls._static_fields = statics
    return cls


@dataclasses.dataclass(frozen=True)
class PowerSchedule:
    """Step size x(n) = init / (1 + n / decay) ** power at update n = 0, 1, 2, ...

    Assumption 3 of the paper holds for such schedules exactly when 1/2 < power <= 1
    (sum x(n) = inf, sum x(n)^2 < inf); the ratio of two of them tends to zero exactly when
    the faster one has the strictly smaller power. ``decay`` (> 0, in updates) sets how long
    the schedule stays near ``init``. All three fields are numeric pytree leaves.
    """

    init: float
    power: float = 0.6
    decay: float = 100.0

    def __call__(self, n: Array) -> Array:
        n = jnp.asarray(n, jnp.float32)
        return self.init / (1.0 + n / self.decay) ** self.power


_pytree_dataclass(PowerSchedule, ())


def check_schedules(owner: str, schedules: dict[str, PowerSchedule], assumption3: bool = True) -> None:
    """Validate step-size schedules, ordered fastest first (e.g. ``{"critic_lr": a,
    "actor_lr": b, "multiplier_lr": c}``); elementwise on vmapped (array) values.

    Always: each is a :class:`PowerSchedule` with init > 0 and decay > 0. With
    ``assumption3`` (the paper's Assumption 3): 1/2 < power <= 1 (the sum of step sizes
    diverges, the sum of their squares converges) and each slower schedule has a strictly
    larger power (b(n)/a(n) -> 0, c(n)/b(n) -> 0). Without it: power >= 0 (e.g. constant
    step sizes, outside the paper's theory).

    Raises:
        ValueError: naming the field and the violated condition.
    """
    powers = {}
    for name, sched in schedules.items():
        if not isinstance(sched, PowerSchedule):
            raise ValueError(f"{owner}.{name} must be a PowerSchedule, found {type(sched).__name__}")
        check_positive(owner, f"{name}.init", sched.init)
        check_positive(owner, f"{name}.decay", sched.decay)
        if not assumption3:
            check_positive(owner, f"{name}.power", sched.power, allow_zero=True)
            continue
        p = _real(owner, f"{name}.power", sched.power)
        if p is not None and (np.any(p <= 0.5) or np.any(p > 1.0)):
            cond = "sum of squared step sizes must converge" if np.any(p <= 0.5) else "sum of step sizes must diverge"
            raise ValueError(f"{owner}.{name}.power must lie in (0.5, 1] (Assumption 3: {cond}), found {_fmt(p)}")
        powers[name] = p
    names = list(powers)
    for fast, slow in zip(names, names[1:]):
        pf, ps = powers[fast], powers[slow]
        if pf is not None and ps is not None and np.any(ps <= pf):
            raise ValueError(
                f"{owner}.{slow}.power must be > {owner}.{fast}.power (Assumption 3: "
                f"{slow}(n) / {fast}(n) -> 0), found {_fmt(ps)} <= {_fmt(pf)}"
            )


# ----------------------------------------------------------------------------- configs


def _validate(config: Any) -> None:
    if not has_env_defaults(config):
        _validate_values(config)
        return
    defaults = {f.name for f in dataclasses.fields(config) if isinstance(getattr(config, f.name), EnvDefault)}
    for tabular in (True, False):  # the values every environment would get
        try:
            _validate_values(resolve_env_defaults(config, tabular))
        except ValueError as err:
            named = re.search(r"Config\.(\w+)", str(err))
            if named is None or named.group(1) not in defaults:
                raise
            kind = "with" if tabular else "without"
            raise ValueError(f"{err} (its default on environments {kind} a tabular exact model)") from None


def _validate_values(config: Any) -> None:
    own = "Config"
    specs = {f.name: f.metadata.get(_SPEC) for f in dataclasses.fields(config)}
    schedules = {}
    for name, spec in specs.items():
        if spec is None:
            continue
        if isinstance(getattr(config, name), EnvDefault):
            raise ValueError(f"{own}.{name}: an EnvDefault must hold plain values, not another EnvDefault")
        v = getattr(config, name)
        if spec.kind == "int":
            check_integer(own, name, v, spec.low if spec.low is not None else 0)
        elif spec.kind == "bool" and not isinstance(v, bool):
            raise ValueError(f"{own}.{name} must be True or False, found {v!r}")
        elif spec.kind == "choice" and v not in spec.choices:
            raise ValueError(f"{own}.{name} must be one of {', '.join(map(repr, spec.choices))}, found {v!r}")
        elif spec.kind == "type" and not isinstance(v, spec.types):
            raise ValueError(f"{own}.{name} must be {spec.description}, found {type(v).__name__}")
        elif spec.kind == "schedule":
            schedules[name] = v
        elif spec.kind == "real":
            high, high_name = spec.high, None
            if isinstance(high, str):
                high_name, high = high, _real(own, high, getattr(config, high))
                if high is None:
                    continue
            check_interval(
                own, name, v, spec.low, high, low_open=spec.low_open, high_open=spec.high_open, high_name=high_name
            )
    if schedules:
        check_schedules(own, schedules, getattr(config, "check_step_sizes", True))


def hyperparameters(cls: type) -> type:
    """Class decorator: a frozen, validated dataclass that is a pytree (module docstring).

    Fields declared with :func:`static` are auxiliary data, all others leaves. Adds
    ``replace(**changes)`` (a validated copy) and ``_leaf_fields`` / ``_static_fields``.
    """
    user_post_init = cls.__dict__.get("__post_init__")

    def __post_init__(self):
        _validate(self)
        if user_post_init is not None:
            user_post_init(self)

    def replace(self, **changes):
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    cls.__post_init__ = __post_init__
    cls.replace = replace
    cls = dataclasses.dataclass(frozen=True)(cls)
    statics = [
        f.name for f in dataclasses.fields(cls) if f.metadata.get(_SPEC) is not None and f.metadata[_SPEC].static
    ]
    return _pytree_dataclass(cls, statics)


def stack(configs: Sequence[Any], env: Any = None) -> Any:
    """Stack hyperparameter pytrees (same static fields) along a new leading axis, for
    ``jax.vmap(train, in_axes=(None, 0))(key, stacked)``.

    Args:
        configs: learner ``Config`` s (or other hyperparameter pytrees).
        env: the environment ``train`` was built for; when given, environment-dependent
            defaults (:class:`EnvDefault`) are resolved for it first, so configs that set a
            field may be stacked with configs that leave it at its default.

    Raises:
        ValueError: empty sequence, static fields that differ (they set shapes), or (without
            ``env``) a field that some configs set and others leave at its :class:`EnvDefault`.
    """
    configs = list(configs)
    if not configs:
        raise ValueError("stack: expected at least one config, found none")
    if env is not None:
        configs = [resolve_env_defaults(c, judged_exactly(env)) if dataclasses.is_dataclass(c) else c for c in configs]
    treedef = jax.tree.structure(configs[0])
    for i, c in enumerate(configs[1:], 1):
        if jax.tree.structure(c) != treedef:
            mixed = [
                f.name
                for f in dataclasses.fields(c)
                if dataclasses.is_dataclass(configs[0])
                and isinstance(getattr(c, f.name), EnvDefault) != isinstance(getattr(configs[0], f.name), EnvDefault)
            ]
            if mixed:
                raise ValueError(
                    f"stack: config {i} and config 0 differ in whether {mixed[0]} is set: one keeps its "
                    "environment-dependent default (EnvDefault), the other sets a value; pass the environment, "
                    "stack(configs, env=env), to resolve the defaults for it, or set the field in every config"
                )
            raise ValueError(
                f"stack: config {i} differs from config 0 in a static field (static fields set "
                "shapes and cannot be vmapped); only numeric hyperparameters may differ"
            )
    return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x, jnp.float32) for x in xs]), *configs)


def resolve_hyperparameters(config: Any, hparams: Any | None, batch_shape: tuple[int, ...] = ()) -> Any:
    """``hparams`` if given (numeric leaves possibly traced or vmapped), else ``config``.

    ``config`` is the one ``make_train`` resolved for its environment; a field that ``hparams``
    leaves at an environment-dependent default (:class:`EnvDefault`) takes ``config``'s value,
    broadcast to ``batch_shape`` (the leading runs axis of hparams from :func:`stack`).

    Raises:
        ValueError: ``hparams`` whose static fields differ from ``config``'s (they set shapes
            and code paths, so they cannot change without recompiling).
    """
    if hparams is None:
        return config
    if dataclasses.is_dataclass(hparams) and has_env_defaults(hparams):
        # a default left unset in hparams takes the value config has for this environment
        statics = getattr(type(config), "_static_fields", ())
        value = lambda name, v: v if not batch_shape or name in statics else np.full(batch_shape, v, np.float32)
        hparams = _with_fields(
            hparams,
            {
                f.name: value(f.name, getattr(config, f.name))
                for f in dataclasses.fields(hparams)
                if isinstance(getattr(hparams, f.name), EnvDefault)
            },
        )
    if jax.tree.structure(hparams) != jax.tree.structure(config):
        statics = ", ".join(type(config)._static_fields)
        raise ValueError(
            f"train: the hyperparameters passed to train(key, hparams) must have the same static "
            f"fields ({statics}) as the {type(config).__module__}.{type(config).__name__} given to make_train"
        )
    return hparams


#: rollout paths of every learner: "tabular" (the exact model's fast rollout), "sampled"
#: (``fhc_jax.rollout``, any environment) or "auto" ("tabular" where there is a tabular model)
PATHS = ("auto", "tabular", "sampled")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The ``Config`` fields every learner shares (static), declared once; a learner's
    ``Config`` derives from it and may redeclare a field to change its default.

    Attributes:
        eval_every: exact evaluation (and a candidate for the returned policy) every this
            many updates (0: initial and final only).
        eval_episodes: episodes of each Monte-Carlo estimate (the returned policy's
            selection; the evaluation on environments without a tabular exact model).
        eval_chunks_max: the most chunks of ``eval_episodes`` episodes a candidate's estimate
            for the selection takes: it grows until the safety margin of its cost is within 5%
            of alpha (a rare-event budget; ``fhc_jax.algos.core.multipliers.estimate_chunks``),
            and the multiplier aims below alpha by the margin of that many episodes (1: never
            grows).
        path: "tabular", "sampled" or "auto" (:data:`PATHS`).
    """

    eval_every: int = static(25, low=0)
    eval_episodes: int = static(4096, low=1)
    eval_chunks_max: int = static(32, low=1)
    path: str = static("auto", choices=PATHS)

    def for_environment(self, env: Any) -> Any:
        """This config with its environment-dependent defaults (:class:`EnvDefault`) set to their
        values for ``env`` (with or without a tabular exact model); ``make_train`` does this."""
        return resolve_env_defaults(self, judged_exactly(env))
