"""The paper's gridworld with moving fares and congestion (Section 5, "taxi" story).

Semantics (exact; ``to_cmdp`` builds the same model):

* **States.** A ``size x size`` grid; the cell in row ``r`` and column ``c`` has the state index
  ``s = r * size + c`` (row-major; S = size^2). Observations use x = column, y = row.
* **Actions.** 9 moves (d_row, d_col) in {-1, 0, 1}^2, ``a = 3 * (d_row + 1) + (d_col + 1)``::

      a:      0        1       2        3       4       5       6       7       8
      d_row: -1       -1      -1        0       0       0      +1      +1      +1
      d_col: -1        0      +1       -1       0      +1      -1       0      +1

  Action 4 is "stay". With (dx, dy) = (d_col, d_row) this is dy-major order.
* **Slip.** With probability ``1 - slip`` the chosen move is executed; otherwise one of the
  OTHER 8 moves, uniformly at random (probability ``slip / 8`` each). Paper: slip = 0.1.
* **Walls.** A move whose target cell lies outside the grid is cancelled as a whole: the agent
  stays where it is (no per-axis clipping; a diagonal move at an edge does not slide along it).
* **Rewards and costs on arrival.** Moving at stage h from s to s' (staying and blocked moves
  included) pays r_h(s, a, s') = ``reward_map[h, s']`` and g_h^(k)(s, a, s') =
  ``cost_map[k, h, s']``; the final state X_H pays ``terminal_rewards`` and ``terminal_costs``.
* **Moving layouts.** The default maps change every H / ``num_phases`` stages (5 layouts over
  H = 100 by default), so the optimal policy is non-stationary. Each layout has *fare
  hotspots* (reward in [0.8, 1]) sitting in *congested* 3x3 blocks (cost 1 per arrival on the
  hotspot and its 8 neighbours) and a few *quiet fares* (reward in [0.3, 0.5], no cost) away
  from congestion: fares are worth the most where traffic is worst, so the cost threshold
  alpha (paper: 25) binds. With the defaults (10x10, H = 100, layout_seed = 0) the exact
  unconstrained optimum incurs an expected cost of 3.7 x alpha; see ``make_params``.

A step draws ONE float32 uniform number u (it decides both whether the move slips and which
other move happens): ``noise`` is ``jax.random.uniform(key)`` and ``noise_from_uniform`` is the
identity, so rollouts can feed it bulk-drawn uniforms (see ``fhc_jax.rollout``). The state is
the cell index itself and a step is one lookup in :func:`next_state_table`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.cmdp import transitions as tr
from fhc_jax.cmdp.model import TabularCMDP, probability_tolerance
from fhc_jax.cmdp.transitions import SparseTransitions
from fhc_jax.envs.base import Environment, check_int, sample_index

Array = jax.Array

NUM_MOVES = 9
STAY = 4
#: (d_row, d_col) of each action, (9, 2)
MOVES = np.array([(a // 3 - 1, a % 3 - 1) for a in range(NUM_MOVES)], dtype=np.int32)


@struct.dataclass
class GridState:
    """Position and stage, int32 scalars: cell ``index`` s = row * size + col in [0, S) and
    ``time`` h in [0, H] (``GridWorld.row_col`` recovers (row, col))."""

    index: Array
    time: Array


@struct.dataclass
class GridParams:
    """Everything numeric about a gridworld (a pytree: ``vmap`` over it freely).

    Attributes (H stages, S = size^2 states, M constraints):
        reward_map: R[h, s'], reward for arriving in s' at stage h, (H, S).
        cost_map: G[k, h, s'], cost k for arriving in s' at stage h, (M, H, S).
        terminal_rewards: r_H(s), (S,).
        terminal_costs: g_H^(k)(s), (M, S).
        thresholds: alpha^(k), (M,).
        initial_distribution: beta, (S,).
        slip: probability that the chosen move is replaced by another one, ().
    """

    reward_map: Array
    cost_map: Array
    terminal_rewards: Array
    terminal_costs: Array
    thresholds: Array
    initial_distribution: Array
    slip: Array


def next_state_table(size: int) -> np.ndarray:
    """``table[s, m]``: the cell reached from s by move m (s itself if it would leave), (S, 9)."""
    s = np.arange(size * size)
    r, c = np.divmod(s, size)
    r2, c2 = r[:, None] + MOVES[None, :, 0], c[:, None] + MOVES[None, :, 1]
    inside = (r2 >= 0) & (r2 < size) & (c2 >= 0) & (c2 < size)
    return np.where(inside, r2 * size + c2, s[:, None]).astype(np.int32)


def _pick(rng: np.random.Generator, cells: np.ndarray, fallback: np.ndarray) -> int:
    pool = cells if cells.size else fallback
    return int(rng.choice(pool))


def make_layout(
    size: int,
    horizon: int,
    num_constraints: int,
    layout_seed: int,
    num_phases: int,
    num_hotspots: int,
    num_quiet: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Host-side numpy generator of the moving fare/congestion layouts.

    The H stages are split into ``num_phases`` contiguous phases (``np.array_split``); each
    phase draws a new layout: for every constraint k, ``num_hotspots`` fare hotspots (reward
    U[0.8, 1]) whose 3x3 block (Chebyshev radius 1, hotspot included) costs 1 for constraint k;
    hotspots of a phase are >= 3 cells apart when the grid allows it. Then ``num_quiet`` quiet
    fares (reward U[0.3, 0.5]) on uncongested cells, >= 2 cells from every hotspot when possible.

    Returns:
        reward_map (H, S) and cost_map (M, H, S), float64.
    """
    rng = np.random.default_rng(layout_seed)
    n = size * size
    r, c = np.divmod(np.arange(n), size)
    cheb = np.maximum(np.abs(r[:, None] - r[None]), np.abs(c[:, None] - c[None]))  # (S, S)
    reward = np.zeros((horizon, n))
    cost = np.zeros((num_constraints, horizon, n))
    for stages in np.array_split(np.arange(horizon), num_phases):
        rew, cst = np.zeros(n), np.zeros((num_constraints, n))
        centres: list[int] = []
        for k in range(num_constraints):
            for _ in range(num_hotspots):
                free = np.setdiff1d(np.arange(n), centres)
                far = free[np.all(cheb[np.ix_(free, centres)] >= 3, axis=1)] if centres else free
                centre = _pick(rng, far, free if free.size else np.arange(n))
                centres.append(centre)
                rew[centre] = rng.uniform(0.8, 1.0)
                cst[k, cheb[centre] <= 1] = 1.0
        calm = np.flatnonzero(cst.max(axis=0) == 0)
        away = calm[np.all(cheb[np.ix_(calm, centres)] >= 2, axis=1)]
        pool = away if away.size >= num_quiet else calm
        quiet = rng.choice(pool, size=min(num_quiet, pool.size), replace=False)
        rew[quiet] = rng.uniform(0.3, 0.5, size=quiet.size)
        reward[stages] = rew
        cost[:, stages] = cst[:, None]
    return reward, cost


def _float_array(owner: str, name: str, value: Any, shape: tuple[int, ...], names: str) -> Array:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{owner}: {name} must be a numeric array of shape {names} = {shape}") from err
    if arr.shape != shape:
        raise ValueError(f"{owner}: {name} must have shape {names} = {shape}, found {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{owner}: {name} must be finite, found non-finite entries")
    return arr


def _real(owner: str, name: str, value: Any, low: float, high: float | None = None) -> float:
    valid = f"a number >= {low:g}" if high is None else f"a number in [{low:g}, {high:g}]"
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: {name} must be {valid}, found {value!r}") from None
    if not np.isfinite(x) or x < low or (high is not None and x > high):
        raise ValueError(f"{owner}: {name} must be {valid}, found {value!r}")
    return x


class GridWorld(Environment[GridState, GridParams]):
    """The paper's gridworld (module docstring has the exact semantics).

    Args:
        size: grid side (>= 2); S = size^2 states.
        horizon: H (>= 1).
        num_constraints: M (>= 1).
        observation: "xy" (paper Env 1), "xyt" (Env 2), "one_hot" or "index".
        slip: probability in [0, 1] that a move is replaced by another one. This and the
            five below are the arguments of :meth:`make_params` that build ``default_params``.
        alpha: threshold(s) alpha^(k) >= 0, scalar or (M,).
        layout_seed: seed of the layout generator, >= 0.
        num_phases: number of layouts over the horizon, in [1, H]; default min(5, H).
        num_hotspots: fare hotspots per constraint and phase (>= 1).
        num_quiet: quiet (cost-free, lower) fares per phase (>= 0).
    Raises:
        ValueError: naming the bad argument, its valid range and the value found.
    """

    supported_observations = ("xy", "xyt", "one_hot", "index")

    def __init__(
        self,
        size: int = 10,
        horizon: int = 100,
        num_constraints: int = 1,
        observation: str = "xy",
        *,
        slip: float = 0.1,
        alpha: float | Sequence[float] = 25.0,
        layout_seed: int = 0,
        num_phases: int | None = None,
        num_hotspots: int = 2,
        num_quiet: int = 3,
    ):
        self.size = check_int("GridWorld", "size", size, 2)
        self._horizon = check_int("GridWorld", "horizon", horizon, 1)
        self._num_constraints = check_int("GridWorld", "num_constraints", num_constraints, 1)
        self._init_encoder(observation)
        alpha = tuple(np.atleast_1d(np.asarray(alpha, dtype=object)).tolist())
        self._defaults = dict(
            slip=slip,
            alpha=alpha,
            layout_seed=layout_seed,
            num_phases=num_phases,
            num_hotspots=num_hotspots,
            num_quiet=num_quiet,
        )
        self._make_numpy_params(**self._defaults)  # validate now, before any JIT

    # ------------------------------------------------------------------ static config
    @property
    def horizon(self) -> int:
        return self._horizon

    @property
    def num_states(self) -> int:
        return self.size * self.size

    @property
    def num_actions(self) -> int:
        return NUM_MOVES

    @property
    def num_constraints(self) -> int:
        return self._num_constraints

    # declared capabilities (see fhc_jax.envs.base)
    has_exact_model = property(lambda self: True)
    is_tabular = property(lambda self: True)
    has_uniform_noise = property(lambda self: True)
    pays_on_arrival = property(lambda self: True)
    is_spatial = property(lambda self: True)

    @property
    def grid_shape(self) -> tuple[int, int]:
        """(size, size)."""
        return (self.size, self.size)

    def thresholds(self, params: GridParams) -> Array:
        """alpha^(k), (M,)."""
        return params.thresholds

    def arrival_signals(self, params: GridParams) -> tuple[Array, Array]:
        """(``params.reward_map`` (H, S), ``params.cost_map`` (M, H, S)): paid on arrival."""
        return params.reward_map, params.cost_map

    def _static_config(self) -> tuple:
        return (
            self.size,
            self._horizon,
            self._num_constraints,
            self._encoder.name,
            tuple(sorted(self._defaults.items())),
        )

    def __repr__(self) -> str:
        return (
            f"GridWorld(size={self.size}, horizon={self.horizon}, num_constraints="
            f"{self.num_constraints}, observation={self._encoder.name!r})"
        )

    # ------------------------------------------------------------------ params
    @property
    def default_params(self) -> GridParams:
        """``make_params`` with the constructor's defaults (fresh arrays, current JAX dtype)."""
        return self.make_params(**self._defaults)

    def make_params(
        self,
        layout_seed: int = 0,
        alpha: float | Sequence[float] = 25.0,
        slip: float = 0.1,
        num_phases: int | None = None,
        num_hotspots: int = 2,
        num_quiet: int = 3,
        initial_distribution: Any = None,
    ) -> GridParams:
        """Params with moving fare/congestion layouts drawn from ``layout_seed``.

        Args:
            layout_seed: seed of the host-side layout generator (:func:`make_layout`), >= 0.
            alpha: threshold(s) alpha^(k) >= 0, scalar or (M,). Paper: 25.
            slip: probability in [0, 1] that a move is replaced by another one. Paper: 0.1.
            num_phases: number of layouts over the horizon, in [1, H]; default min(5, H).
            num_hotspots: fare hotspots per constraint and phase (>= 1).
            num_quiet: quiet (cost-free, lower) fares per phase (>= 0).
            initial_distribution: beta, (S,); default uniform over all cells.
        Returns:
            :class:`GridParams` (floating arrays in JAX's default float dtype).

        With the defaults (10x10, H = 100, M = 1, seed 0, alpha = 25) the exact optima
        (``fhc_jax.solve``) are: unconstrained reward 73.12 at expected cost 92.29
        (3.7 x alpha); constrained reward 45.88 (37% lower) at cost 25.00, multiplier 0.469.
        Freezing the constrained optimum's stage-0 rule for all stages earns only 10.1: the
        optimal policy is non-stationary.
        """
        return self.params_from_maps(
            **self._make_numpy_params(
                layout_seed, alpha, slip, num_phases, num_hotspots, num_quiet, initial_distribution
            )
        )

    def _make_numpy_params(
        self,
        layout_seed=0,
        alpha=25.0,
        slip=0.1,
        num_phases=None,
        num_hotspots=2,
        num_quiet=3,
        initial_distribution=None,
    ) -> dict:
        own = "GridWorld.make_params"
        h, m = self.horizon, self.num_constraints
        layout_seed = check_int(own, "layout_seed", layout_seed, 0)
        num_phases = min(5, h) if num_phases is None else check_int(own, "num_phases", num_phases, 1, h)
        num_hotspots = check_int(own, "num_hotspots", num_hotspots, 1)
        num_quiet = check_int(own, "num_quiet", num_quiet, 0)
        alpha_arr = np.atleast_1d(np.asarray(alpha, dtype=object))
        if alpha_arr.shape not in ((1,), (m,)):
            raise ValueError(
                f"{own}: alpha must be a scalar or have shape (M,) = ({m},), found shape {alpha_arr.shape}"
            )
        thresholds = np.array([_real(own, "alpha", a, 0.0) for a in alpha_arr.tolist()])
        slip = _real(own, "slip", slip, 0.0, 1.0)
        reward_map, cost_map = make_layout(self.size, h, m, layout_seed, num_phases, num_hotspots, num_quiet)
        return dict(
            reward_map=reward_map,
            cost_map=cost_map,
            thresholds=np.broadcast_to(thresholds, (m,)),
            initial_distribution=initial_distribution,
            slip=slip,
        )

    def params_from_maps(
        self,
        reward_map: Any,
        cost_map: Any,
        thresholds: Any,
        terminal_rewards: Any = None,
        terminal_costs: Any = None,
        initial_distribution: Any = None,
        slip: float = 0.1,
    ) -> GridParams:
        """Validated :class:`GridParams` from explicit maps (shapes as in :class:`GridParams`).

        ``terminal_*`` default to zero, ``initial_distribution`` to uniform over all cells.
        Raises ``ValueError`` naming the field, the expected shape or range and what was found.
        """
        own = "GridWorld.params"
        h, s, m = self.horizon, self.num_states, self.num_constraints
        reward_map = _float_array(own, "reward_map", reward_map, (h, s), "(H, S)")
        cost_map = _float_array(own, "cost_map", cost_map, (m, h, s), "(M, H, S)")
        terminal_rewards = _float_array(
            own, "terminal_rewards", np.zeros(s) if terminal_rewards is None else terminal_rewards, (s,), "(S,)"
        )
        terminal_costs = _float_array(
            own, "terminal_costs", np.zeros((m, s)) if terminal_costs is None else terminal_costs, (m, s), "(M, S)"
        )
        thresholds = _float_array(
            own,
            "thresholds",
            np.broadcast_to(thresholds, (m,)) if np.ndim(thresholds) == 0 else thresholds,
            (m,),
            "(M,)",
        )
        if np.any(thresholds < 0):
            raise ValueError(f"{own}: thresholds (alpha) must be >= 0, found {thresholds.tolist()}")
        beta = _float_array(
            own,
            "initial_distribution",
            np.full(s, 1.0 / s) if initial_distribution is None else initial_distribution,
            (s,),
            "(S,)",
        )
        if np.any(beta < 0) or abs(beta.sum() - 1.0) > 1e-6:
            raise ValueError(
                f"{own}: initial_distribution must be non-negative and sum to 1, found min {beta.min():.3g}, sum "
                f"{beta.sum():.9g}"
            )
        slip = _real(own, "slip", slip, 0.0, 1.0)
        f = jnp.result_type(float)
        return GridParams(
            reward_map=jnp.asarray(reward_map, f),
            cost_map=jnp.asarray(cost_map, f),
            terminal_rewards=jnp.asarray(terminal_rewards, f),
            terminal_costs=jnp.asarray(terminal_costs, f),
            thresholds=jnp.asarray(thresholds, f),
            initial_distribution=jnp.asarray(beta, f),
            slip=jnp.asarray(slip, f),
        )

    def _check_param_values(self, params: GridParams, owner: str) -> None:
        """Maps finite, thresholds >= 0, slip in [0, 1], initial_distribution a distribution."""
        for name in ("reward_map", "cost_map", "terminal_rewards", "terminal_costs", "thresholds"):
            value = np.asarray(getattr(params, name), np.float64)
            if not np.all(np.isfinite(value)):
                raise ValueError(
                    f"{owner}: params.{name} must be finite, found {int(np.sum(~np.isfinite(value)))} "
                    "non-finite entries"
                )
        thresholds = np.asarray(params.thresholds, np.float64)
        if np.any(thresholds < 0):
            raise ValueError(f"{owner}: params.thresholds (alpha) must be >= 0, found {thresholds.tolist()}")
        slip = float(np.asarray(params.slip, np.float64))
        if not 0.0 <= slip <= 1.0:  # NaN fails too
            raise ValueError(f"{owner}: params.slip must be a probability in [0, 1], found {slip}")
        beta = np.asarray(params.initial_distribution)
        tol = probability_tolerance(beta.dtype, beta.size)
        values = beta.astype(np.float64)
        if not np.all(np.isfinite(values)) or np.any(values < 0) or abs(values.sum() - 1.0) > tol:
            raise ValueError(
                f"{owner}: params.initial_distribution must be non-negative and sum to 1 (tolerance "
                f"{tol:.3g}), found min {np.min(values):.3g}, sum {values.sum():.9g}"
            )

    # ------------------------------------------------------------------ dynamics
    def reset(self, key: Array, params: GridParams) -> tuple[Array, GridState]:
        """X_0 ~ ``params.initial_distribution`` (``params`` checked: :meth:`check_params`)."""
        self.check_params(params, "GridWorld.reset")
        state = GridState(index=sample_index(key, params.initial_distribution), time=jnp.zeros((), jnp.int32))
        return self.observation(state, params), state

    def noise(self, key: Array, params: GridParams) -> Array:
        """The step's single uniform number u in [0, 1), float32 ()."""
        return jax.random.uniform(key, (), jnp.float32)

    def noise_from_uniform(self, u: Array, params: GridParams) -> Array:
        """The noise is u itself (``noise(key) == noise_from_uniform(uniform(key))``)."""
        return u

    def transition(self, noise: Array, state: GridState, action: Array, params: GridParams):
        """One stage given u = ``noise``; see the module docstring. u < 1 - slip executes
        ``action``; otherwise (u - (1 - slip)) / slip in [0, 1) picks one of the 8 other moves.

        Returns (obs, next_state, reward (), costs (M,), done (), info) where ``info`` has
        ``"move"``: the executed move (int32, differs from ``action`` after a slip).
        """
        action, u = jnp.asarray(action, jnp.int32), noise
        keep = 1.0 - params.slip
        scale = (NUM_MOVES - 1) / jnp.where(params.slip > 0, params.slip, 1.0)
        j = jnp.clip(jnp.floor((u - keep) * scale).astype(jnp.int32), 0, NUM_MOVES - 2)
        move = jnp.where(u < keep, action, j + (j >= action))
        table = jnp.asarray(next_state_table(self.size).reshape(-1))  # (S * 9,) constant
        s_next = table.at[state.index * NUM_MOVES + move].get(mode="clip")
        h = state.time
        reward = params.reward_map[h, s_next]
        costs = params.cost_map[:, h, s_next]
        next_state = GridState(index=s_next, time=h + 1)
        done = next_state.time == self.horizon
        return self.observation(next_state, params), next_state, reward, costs, done, {"move": move}

    def state_at(self, index: Array, time: Array) -> GridState:
        return GridState(index=jnp.asarray(index, jnp.int32), time=jnp.asarray(time, jnp.int32))

    def state_index(self, state: GridState) -> Array:
        """s = row * size + col, int32."""
        return jnp.asarray(state.index, jnp.int32)

    def row_col(self, state: GridState) -> tuple[Array, Array]:
        """(row, col) of the state's cell, int32."""
        return jnp.divmod(self.state_index(state), self.size)

    def coordinates(self, state: GridState) -> Array:
        """(x, y) = (col, row) / (size - 1), (2,) float32 in [0, 1]."""
        row, col = np.divmod(np.arange(self.num_states), self.size)
        table = np.stack([col, row], axis=1).astype(np.float32) / np.float32(self.size - 1)  # (S, 2)
        return jnp.asarray(table)[self.state_index(state)]

    def terminal_reward(self, state: GridState, params: GridParams) -> Array:
        return params.terminal_rewards[self.state_index(state)]

    def terminal_costs(self, state: GridState, params: GridParams) -> Array:
        return params.terminal_costs[:, self.state_index(state)]

    # ------------------------------------------------------------------ exact model
    def transition_kernel(self, params: GridParams) -> SparseTransitions:
        """Time-invariant sparse kernel: successor j of (s, a) is the target of move j.

        ``next_states`` (S, A, 9) int32, ``probabilities`` (S, A, 9): 1 - slip for j = a and
        slip / 8 otherwise (blocked moves have target s itself).
        """
        s, a = self.num_states, self.num_actions
        nxt = np.broadcast_to(next_state_table(self.size)[:, None, :], (s, a, NUM_MOVES))
        slip = jnp.asarray(params.slip)
        same = jnp.eye(a, NUM_MOVES, dtype=bool)
        probs = jnp.where(same, 1.0 - slip, slip / (NUM_MOVES - 1)).astype(slip.dtype)
        return SparseTransitions(next_states=jnp.asarray(nxt), probabilities=jnp.broadcast_to(probs, (s, a, NUM_MOVES)))

    def to_cmdp(self, params: GridParams) -> TabularCMDP:
        """Exact :class:`TabularCMDP`: sparse kernel (S, 9, 9), expected rewards
        r_h(s, a) = sum_j p(s, a, j) R[h, s'_j], (H, S, A), and costs (M, H, S, A).

        Raises:
            ValueError: params that do not fit this gridworld (:meth:`check_params`)."""
        self.check_params(params, "GridWorld.to_cmdp")
        kernel = self.transition_kernel(params)
        return TabularCMDP(
            transitions=kernel,
            rewards=tr.expect_next(kernel, params.reward_map),
            costs=tr.expect_next(kernel, params.cost_map),
            terminal_rewards=params.terminal_rewards,
            terminal_costs=params.terminal_costs,
            thresholds=params.thresholds,
            initial_distribution=params.initial_distribution,
        )
