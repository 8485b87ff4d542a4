"""Feature maps phi_h(s) for the linear critics and the Gibbs actor (paper Section 2-3).

The paper approximates V_h(s) ~ v_h^T phi_h(s) and W_h^(k)(s) ~ w_h^(k)T phi_h(s) with
features phi_h(s) in R^{x_h} (Assumption 2: linearly independent columns, x_h <= |S_h|), and
uses a Gibbs policy mu_{theta_h}(s, .) = softmax(phi_h(s)^T theta_h) with theta_h of shape
(x_h, A) here, so the compatible features are psi = grad log mu = phi_h(s) (e_a - mu_h(s, .))^T.

A feature *spec* is a small frozen (hashable) dataclass: it can live in a static config
field. :func:`build` turns a spec into a :class:`FeatureTable` for one environment: the values
phi_h(s) for every tabular state index s (the learners are tabular-state learners; exact
evaluation needs every state anyway), either time-invariant (S, X) or per stage (H+1, S, X).

===================== ============================== ======================================
spec                  X (features)                   notes
===================== ============================== ======================================
``OneHot()``          S                              tabular case; handled without tables
``RadialBasis(n, w)`` n*n (+1 with ``bias``)         Gaussian bumps on an n x n grid of
                                                     centres over the grid coordinates,
                                                     normalised to sum to one per state
``TileCoding(t, k)``  k*t*t                          k offset tilings of t x t tiles over
                                                     the coordinates, binary, scaled 1/k
``Custom(fn, X) ``     X                              ``fn(h, s) -> (X,)``, may depend on h
``Auto(max_features)`` that of the map it chooses     raw observations only: a tile coding
                                                     or radial basis sized by the number of
                                                     components (:class:`Auto`)
===================== ============================== ======================================

On tabular environments coarse maps (radial basis, tile coding) need grid coordinates: they
support spatial environments (``env.is_spatial``: row-major cells of ``env.grid_shape``, like
:class:`fhc_jax.envs.GridWorld`); use ``Custom`` otherwise. On environments without tabular
states they are maps of the raw observation (:class:`ObservationFeatures`), rescaled to [0, 1]
by the box that a sample of uniform-policy episodes spans.

Stage inputs: an observation may carry components that are functions of the stage alone, such
as ``BatteryStorage``'s h / H. The learners' weights are per stage, so such a component tells
them nothing that the stage index does not, while a coarse map over it multiplies the features
by its resolution (t x for tile coding) and leaves each stage only the slice near its own value:
``RadialBasis(5)`` of (soc, d, h / H) has 125 features of which a stage uses an effective 25.
``stage_inputs=False`` drops the components that are constant within every stage of that sample
(:func:`stage_determined`), so the map spans only the components that vary within a stage. The
default ``True`` keeps them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

Array = jax.Array


def _check_bool(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{owner}.{name} must be True or False, found {value!r}")


@dataclasses.dataclass(frozen=True)
class OneHot:
    """phi_h(s) = e_s in R^S: the tabular (exact-representation) case, X = S."""

    def num_features(self, env) -> int:
        return int(env.num_states)


@dataclasses.dataclass(frozen=True)
class RadialBasis:
    """Normalised Gaussian radial basis functions over grid coordinates in [0, 1]^2.

    Centres on a ``num_centers x num_centers`` lattice covering [0, 1]^2; ``width`` is the
    Gaussian standard deviation in coordinate units (default: the lattice spacing). Each
    state's activations are divided by their sum (a partition of unity, so ||phi|| <= 1,
    which keeps critic step sizes <= 1 stable). ``bias`` appends a constant feature 1.

    X = num_centers**2 (+1). Choose X < S for real function approximation (Assumption 2).

    On raw observations (:func:`observation_features`) the lattice spans the D observation
    components the map reads: all of them, or with ``stage_inputs=False`` only those that vary
    within a stage (module docstring, "Stage inputs"); X = num_centers**D (+1).
    """

    num_centers: int = 4
    width: float | None = None
    bias: bool = False
    stage_inputs: bool = True

    def __post_init__(self):
        _check_bool("RadialBasis", "stage_inputs", self.stage_inputs)
        if (
            isinstance(self.num_centers, bool)
            or not isinstance(self.num_centers, (int, np.integer))
            or self.num_centers < 1
        ):
            raise ValueError(f"RadialBasis.num_centers must be an integer >= 1, found {self.num_centers!r}")
        if self.width is not None and not (np.isfinite(self.width) and self.width > 0):
            raise ValueError(f"RadialBasis.width must be a number > 0 (or None), found {self.width!r}")

    def num_features(self, env) -> int:
        return self.num_centers**2 + int(self.bias)


@dataclasses.dataclass(frozen=True)
class TileCoding:
    """Binary tile coding over grid coordinates: ``num_tilings`` tilings of
    ``tiles x tiles`` tiles, each offset by a fraction of a tile along both axes.
    Every state activates exactly one tile per tiling; values are 1/num_tilings, so
    sum_j phi_j(s) = 1. X = num_tilings * tiles**2; on raw observations X = num_tilings *
    tiles**D over the D components the map reads (``stage_inputs`` as in :class:`RadialBasis`)."""

    tiles: int = 3
    num_tilings: int = 2
    stage_inputs: bool = True

    def __post_init__(self):
        _check_bool("TileCoding", "stage_inputs", self.stage_inputs)
        for name in ("tiles", "num_tilings"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"TileCoding.{name} must be an integer >= 1, found {v!r}")

    def num_features(self, env) -> int:
        return self.num_tilings * self.tiles**2


@dataclasses.dataclass(frozen=True)
class Auto:
    """A coarse map of raw observations chosen by their size: FH-Constrained's default on
    environments without tabular states.

    Of the D' observation components the map reads (those that vary within a stage, or all D
    with ``stage_inputs=True``; module docstring, "Stage inputs"), the first of
    :data:`AUTO_LADDER` = TileCoding(6, 3), RadialBasis(5), RadialBasis(4), RadialBasis(3),
    RadialBasis(2) with at most ``max_features`` features (the last if none has):
    D' <= 3 gives TileCoding(6, 3) (3 x 6^D' <= 648 features), D' = 4 RadialBasis(5) (625),
    D' = 5, 6 RadialBasis(3) (243, 729). Tile coding is the sharper map at a given size (a
    per-stage softmax policy linear in it, theta within +-4, imitates BatteryStorage's reference
    to 96.6% where RadialBasis(5) reaches 90.8%), but its 3 x 6^D' features outgrow any budget
    beyond D' = 3. The choice is made where the features are built (from the same fixed-key
    sample each time) and the learner's train state records the map chosen. Needs raw
    observations: on tabular environments choose a map explicitly.
    """

    max_features: int = 1000
    stage_inputs: bool = False

    def __post_init__(self):
        _check_bool("Auto", "stage_inputs", self.stage_inputs)
        v = self.max_features
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"Auto.max_features must be an integer >= 1, found {v!r}")

    def choose(self, num_components: int) -> RadialBasis | TileCoding:
        """The map for ``num_components`` = D' components (its ``stage_inputs`` this one's)."""
        for spec in AUTO_LADDER:
            if _size(spec, num_components) <= self.max_features:
                break
        return dataclasses.replace(spec, stage_inputs=self.stage_inputs)


def _size(spec: RadialBasis | TileCoding, dim: int) -> int:
    """X of a coarse map over ``dim`` components."""
    if isinstance(spec, TileCoding):
        return spec.num_tilings * spec.tiles**dim
    return spec.num_centers**dim + int(spec.bias)


#: the maps :class:`Auto` chooses from, finest first
AUTO_LADDER: tuple = (TileCoding(6, 3), RadialBasis(5), RadialBasis(4), RadialBasis(3), RadialBasis(2))


@dataclasses.dataclass(frozen=True)
class Custom:
    """A user-supplied feature function ``fn(h, s) -> (num_features,)``.

    ``h`` is the stage (int32 scalar, 0..H; H is the terminal stage) and ``s`` the tabular
    state index (int32 scalar); ``fn`` must be traceable by JAX (it is vmapped over all (h, s)
    once, when the learner is built). Set ``per_stage=False`` if ``fn`` ignores ``h``: a
    single (S, X) table is then stored instead of (H+1, S, X).
    """

    fn: Callable[[Array, Array], Array]
    dim: int
    per_stage: bool = True

    def __post_init__(self):
        if not callable(self.fn):
            raise ValueError(f"Custom.fn must be callable (h, s) -> (X,), found {type(self.fn).__name__}")
        n = self.dim
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"Custom.dim must be an integer >= 1, found {n!r}")

    def num_features(self, env) -> int:
        return int(self.dim)


FeatureSpec = OneHot | RadialBasis | TileCoding | Custom | Auto


@struct.dataclass
class FeatureTable:
    """phi_h(s) for every stage and state.

    Attributes:
        table: (S, X) time-invariant or (H+1, S, X) per stage; ``None`` for one-hot features
            (phi_h(s) = e_s is never materialised: v_h^T phi_h(s) = v[h, s]).
        one_hot: static flag.
        per_stage: static flag, True when ``table`` has a leading H+1 axis.
        num_features: static X.
    """

    table: Any
    one_hot: bool = struct.field(pytree_node=False, default=False)
    per_stage: bool = struct.field(pytree_node=False, default=False)
    num_features: int = struct.field(pytree_node=False, default=0)

    def all_stages(self, horizon: int) -> Array:
        """(H+1, S, X) table (broadcast if time-invariant; not for one-hot)."""
        if self.per_stage:
            return self.table
        return jnp.broadcast_to(self.table, (horizon + 1,) + self.table.shape)

    def values(self, weights: Array) -> Array:
        """Per-stage linear values phi_h(s)^T weights_h for all s.

        Args:
            weights: (L, X, ...) per-stage weights for stages 0..L-1 (L = H or H+1).
        Returns:
            (L, S, ...).
        """
        if self.one_hot:
            return weights
        if self.per_stage:
            return jnp.einsum("lsx,lx...->ls...", self.table[: weights.shape[0]], weights)
        return jnp.einsum("sx,lx...->ls...", self.table, weights)

    def project(self, stats: Array) -> Array:
        """Phi_h^T stats_h: per-state statistics (L, S, ...) to per-feature ones (L, X, ...)."""
        if self.one_hot:
            return stats
        if self.per_stage:
            return jnp.einsum("lsx,ls...->lx...", self.table[: stats.shape[0]], stats)
        return jnp.einsum("sx,ls...->lx...", self.table, stats)

    def project_active(self, counts: Array) -> Array:
        """sum_s counts[l, s] 1[phi_l(s)_j != 0]: (L, S) -> (L, X) (identity for one-hot)."""
        if self.one_hot:
            return counts
        active = (self.table != 0).astype(counts.dtype)
        if self.per_stage:
            return jnp.einsum("lsx,ls->lx", active[: counts.shape[0]], counts)
        return jnp.einsum("sx,ls->lx", active, counts)


def grid_coordinates(env) -> np.ndarray:
    """(S, 2) coordinates (x, y) = (col / (cols - 1), row / (rows - 1)) of a spatial environment
    (``env.is_spatial``: row-major cells of ``env.grid_shape``)."""
    if not env.is_spatial:
        raise ValueError(
            f"features: coarse coordinate features need a spatial environment (is_spatial, like "
            f"GridWorld); {env.name} is not. Use features.Custom(fn, dim) instead."
        )
    rows, cols = env.grid_shape
    row, col = np.divmod(np.arange(env.num_states), cols)
    return np.stack([col / max(cols - 1, 1), row / max(rows - 1, 1)], axis=1).astype(np.float64)


def _centres(n: int, dim: int, xp=np) -> Any:
    """The n^dim lattice of centres in [0, 1]^dim, the first coordinate varying fastest."""
    grid = xp.linspace(0.0, 1.0, n) if n > 1 else xp.array([0.5])
    mesh = xp.meshgrid(*([grid] * dim), indexing="ij")
    return xp.stack([mesh[dim - 1 - d].ravel() for d in range(dim)], axis=1)  # (n**dim, dim)


def _radial_basis(spec: RadialBasis, coords: Any, xp=np) -> Any:
    """Normalised Gaussian activations of points ``coords`` (N, D) in [0, 1]^D, (N, X)."""
    n = spec.num_centers
    centres = _centres(n, coords.shape[1], xp)
    width = spec.width if spec.width is not None else (1.0 / (n - 1) if n > 1 else 1.0)
    d2 = xp.sum((coords[:, None, :] - centres[None]) ** 2, axis=-1)
    act = xp.exp(-0.5 * d2 / width**2)
    act = act / act.sum(axis=1, keepdims=True)
    if spec.bias:
        act = xp.concatenate([act, xp.ones((coords.shape[0], 1), act.dtype)], axis=1)
    return act


def _tile_coding(spec: TileCoding, coords: Any, xp=np) -> Any:
    """Binary tile activations (scaled 1/k) of points ``coords`` (N, D) in [0, 1]^D, (N, k t^D)."""
    t, k = spec.tiles, spec.num_tilings
    n, dim = coords.shape
    place = t ** xp.arange(dim)  # the first coordinate varies fastest
    blocks = []
    for i in range(k):
        offset = i / (k * t)  # shift by a fraction of one tile
        idx = xp.clip(xp.floor((coords + offset) * t * (1 - 1e-9)).astype(int), 0, t - 1)
        cell = xp.sum(idx * place, axis=1)
        blocks.append((cell[:, None] == xp.arange(t**dim)[None]) / k)
    return xp.concatenate(blocks, axis=1).astype(coords.dtype)


@struct.dataclass
class ObservationFeatures:
    """phi(o) of raw observations o (D,) for environments without tabular states: a coarse map
    (:class:`RadialBasis`, :class:`TileCoding`) on the observation rescaled to [0, 1]^D by
    the box [low, high] (clipped outside it). Time-invariant (the learners' per-stage weights
    make the policy non-stationary).

    Attributes:
        low, high: the box of the components read, (D',). spec: the coarse map (static).
        num_features: X (static). components: the indices of the D' observation components the
            map reads (static; all D unless the spec drops stage inputs).
    """

    low: Array
    high: Array
    spec: Any = struct.field(pytree_node=False, default=None)
    num_features: int = struct.field(pytree_node=False, default=0)
    components: tuple[int, ...] | None = struct.field(pytree_node=False, default=None)
    one_hot = False
    per_stage = False

    def __call__(self, observation: Array) -> Array:
        """phi(o), (..., D) -> (..., X)."""
        shape = observation.shape[:-1]
        if self.components is not None:
            observation = observation[..., jnp.asarray(self.components)]
        u = jnp.clip((observation.reshape(-1, observation.shape[-1]) - self.low) / (self.high - self.low), 0.0, 1.0)
        fn = _radial_basis if isinstance(self.spec, RadialBasis) else _tile_coding
        return fn(self.spec, u.astype(jnp.float32), jnp).reshape(shape + (self.num_features,))


def stage_determined(observations: Any, tolerance: float = 1e-6) -> np.ndarray:
    """Which observation components are functions of the stage alone, (D,) bool.

    Args:
        observations: (N, H', D) observations of N episodes at the stages 0..H'-1 (any policy).
        tolerance: a component is stage-determined when its range within every stage is at most
            ``tolerance`` times max(1, its range over the whole sample).
    """
    obs = np.asarray(observations, np.float64)
    within = np.max(obs.max(axis=0) - obs.min(axis=0), axis=0)  # (D,) largest within-stage range
    overall = np.ptp(obs.reshape(-1, obs.shape[-1]), axis=0)
    return within <= tolerance * np.maximum(overall, 1.0)


def observation_features(
    spec: FeatureSpec, low: Array, high: Array, stage_determined_components: Any = None
) -> ObservationFeatures:
    """:class:`ObservationFeatures` of a coarse ``spec`` on the box [low, high] (D,).

    Args:
        spec: :class:`RadialBasis` or :class:`TileCoding`.
        low, high: (D,) the box of the observations.
        stage_determined_components: (D,) bool, the components that are functions of the stage
            alone (:func:`stage_determined`); read only when ``spec.stage_inputs`` is False, which
            drops them (all D are kept if every component is stage-determined).
    Raises:
        ValueError: a spec that needs tabular states (``OneHot``, ``Custom``).
    """
    if not isinstance(spec, (RadialBasis, TileCoding, Auto)):
        raise ValueError(
            f"features: {type(spec).__name__} needs tabular states; on observations use "
            "Auto(), RadialBasis(...) or TileCoding(...)"
        )
    components = None
    if not spec.stage_inputs and stage_determined_components is not None:
        keep = np.flatnonzero(~np.asarray(stage_determined_components, bool))
        if 0 < keep.size < np.size(low):
            components = tuple(int(i) for i in keep)
            low, high = np.asarray(low)[keep], np.asarray(high)[keep]
    if isinstance(spec, Auto):
        spec = spec.choose(int(np.size(low)))
    low, high = jnp.asarray(low, jnp.float32), jnp.asarray(high, jnp.float32)
    high = jnp.where(high > low, high, low + 1.0)
    return ObservationFeatures(
        low=low, high=high, spec=spec, num_features=_size(spec, int(low.shape[0])), components=components
    )


def build(spec: FeatureSpec, env, dtype=jnp.float32) -> FeatureTable:
    """Materialise ``spec`` for ``env`` (host-side; call outside ``jit``).

    Args:
        spec: a feature spec (:class:`OneHot`, :class:`RadialBasis`, :class:`TileCoding`,
            :class:`Custom`).
        env: the environment (needs ``num_states``, ``horizon``; coordinates for coarse maps).
        dtype: table dtype (learners use float32).
    Returns:
        :class:`FeatureTable`.
    Raises:
        ValueError: unknown spec, a coarse map on a non-grid environment, or a custom function
            returning the wrong shape or non-finite values.
    """
    s = int(env.num_states)
    if isinstance(spec, Auto):
        raise ValueError(
            f"features: Auto() chooses a map of raw observations; {env.name} has tabular states, so "
            "choose OneHot(), RadialBasis(...), TileCoding(...) or Custom(...)"
        )
    if isinstance(spec, OneHot):
        return FeatureTable(table=None, one_hot=True, per_stage=False, num_features=s)
    if isinstance(spec, RadialBasis):
        table = _radial_basis(spec, grid_coordinates(env))
        return FeatureTable(
            table=jnp.asarray(table, dtype), one_hot=False, per_stage=False, num_features=table.shape[1]
        )
    if isinstance(spec, TileCoding):
        table = _tile_coding(spec, grid_coordinates(env))
        return FeatureTable(
            table=jnp.asarray(table, dtype), one_hot=False, per_stage=False, num_features=table.shape[1]
        )
    if isinstance(spec, Custom):
        stages = np.arange(env.horizon + 1) if spec.per_stage else np.zeros(1, dtype=np.int64)
        hh, ss = np.meshgrid(stages, np.arange(s), indexing="ij")
        fn = jax.vmap(jax.vmap(lambda h, x: jnp.asarray(spec.fn(h, x), dtype)))
        table = np.asarray(fn(jnp.asarray(hh, jnp.int32), jnp.asarray(ss, jnp.int32)))
        x = spec.num_features(env)
        if table.shape != (len(stages), s, x):
            raise ValueError(f"features.Custom: fn(h, s) must return shape (dim,) = ({x},), found {table.shape[2:]}")
        if not np.all(np.isfinite(table)):
            raise ValueError("features.Custom: fn returned non-finite values")
        table = table if spec.per_stage else table[0]
        return FeatureTable(table=jnp.asarray(table, dtype), one_hot=False, per_stage=spec.per_stage, num_features=x)
    raise ValueError(
        "features: expected one of OneHot(), RadialBasis(...), TileCoding(...), Custom(...), "
        f"found {type(spec).__name__}"
    )
