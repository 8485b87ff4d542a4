"""The discretized model of :class:`~fhc_jax.envs.battery.BatteryStorage` and its reference
policy played in the continuous environment (the module docstring of
:mod:`fhc_jax.envs.battery` has the model and the measured gap to the continuous optimum).

* :func:`gaussian_projection`: the law of the next price deviation, N(rho d, sigma^2) clipped
  to the grid's range, projected onto the deviation grid with linear-interpolation weights
  (closed form; means preserved exactly); the next state of charge is split between its two
  neighbouring grid points the same way (:func:`interpolation_weights`).
* :class:`DiscretizedPolicy`: a policy table of the discretized model as a policy of the
  continuous environment ((soc, d) -> the nearest grid point, then the table's action law);
  :class:`DiscretizedRatePolicy`: the same for continuous actions, playing the drawn action's
  rate as the real action.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def interpolation_weights(x: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linear-interpolation weights of x (clipped to the grid) on an increasing grid:
    (lower index, upper index, upper weight), each of x's shape."""
    if grid.size == 1:
        zero = np.zeros(x.shape, np.int64)
        return zero, zero, np.zeros(x.shape)
    x = np.clip(x, grid[0], grid[-1])
    lo = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, grid.size - 2)
    w = (x - grid[lo]) / (grid[lo + 1] - grid[lo])
    return lo, lo + 1, w


def gaussian_projection(mean: np.ndarray, sd: float, grid: np.ndarray) -> np.ndarray:
    """The law of X ~ N(mean_i, sd^2), clipped to the grid's range, projected linearly onto the
    grid: w[i, j] = E[hat_j(X_i)] with hat_j the piecewise-linear interpolation weight of grid
    point j (exact, from E[(X - a)^+] = (m - a) Phi(z) + sd phi(z), z = (m - a) / sd).

    Rows sum to 1 and sum_j w[i, j] grid[j] = E[clip(X_i)] exactly.

    Args:
        mean: (n,) means. sd: >= 0. grid: (n_grid,) increasing.
    Returns:
        (n, n_grid) probabilities.
    """
    from scipy.stats import norm

    mean = np.asarray(mean, np.float64)
    if grid.size == 1:
        return np.ones((mean.size, 1))
    if sd <= 0:
        lo, hi, w = interpolation_weights(mean, grid)
        out = np.zeros((mean.size, grid.size))
        np.add.at(out, (np.arange(mean.size), lo), 1 - w)
        np.add.at(out, (np.arange(mean.size), hi), w)
        return out
    z = (mean[:, None] - grid[None, :]) / sd
    excess = (mean[:, None] - grid[None, :]) * norm.cdf(z) + sd * norm.pdf(z)  # E[(X - g_j)^+], (n, n_grid)
    ramp = (excess[:, :-1] - excess[:, 1:]) / np.diff(grid)  # E[clip((X - g_j) / step_j, 0, 1)], (n, n_grid - 1)
    w = np.zeros((mean.size, grid.size))
    w[:, 0] = 1.0 - ramp[:, 0]
    w[:, 1:-1] = ramp[:, :-1] - ramp[:, 1:]
    w[:, -1] = ramp[:, -1]
    w = np.clip(w, 0.0, None)
    return w / w.sum(1, keepdims=True)


class DiscretizedPolicy:
    """``policy(key, obs, h)`` from a discretized model's table (see
    :meth:`~fhc_jax.envs.battery.BatteryStorage.discretized_policy`); hashable by identity, so a valid static
    argument of ``jax.jit``. Implements the rollouts' fast protocol ``action_from_uniform``."""

    def __init__(self, cdf: Array, soc_grid: Array, dev_grid: Array):
        self.cdf, self.soc_grid, self.dev_grid = cdf, soc_grid, dev_grid  # (H, S, A), (n_soc,), (n_dev,) in sd units

    def check_actions(self, env, observation: Any, h: Array) -> None:
        """Its actions are indices of the table's A rates: refuse, while tracing, an environment
        with another number of discrete actions (or box actions: use
        :class:`DiscretizedRatePolicy`)."""
        a = self.cdf.shape[-1]
        if env.has_box_actions or env.action_space.n != a:
            raise ValueError(
                f"BatteryStorage.discretized_policy: the table draws {a} discrete actions; {env.name} "
                f"takes {env.action_space}"
            )

    def cell(self, obs: Array) -> Array:
        """Grid index (int32) of the grid point nearest to the observation's (soc, d)."""
        i = jnp.argmin(jnp.abs(self.soc_grid - obs[0]))
        j = jnp.argmin(jnp.abs(self.dev_grid - obs[1]))
        return (i * self.dev_grid.shape[0] + j).astype(jnp.int32)

    def action_from_uniform(self, u: Array, obs: Array, h: Array) -> Array:
        cdf = self.cdf[h, self.cell(obs)]
        return jnp.minimum(jnp.sum(cdf <= u * cdf[-1]), cdf.shape[0] - 1).astype(jnp.int32)

    def __call__(self, key: Array, obs: Array, h: Array) -> Array:
        return self.action_from_uniform(jax.random.uniform(key, (), jnp.float32), obs, h)


class DiscretizedRatePolicy:
    """``policy(key, obs, h)`` of the continuous-action battery from a discretized model's table
    (see :meth:`~fhc_jax.envs.battery.BatteryStorage.discretized_policy`): the
    :class:`DiscretizedPolicy` ``index`` draws an action index a of the discrete ``rates`` as it
    would in the discrete environment, and the real action is ``rates[a]``, float32 (1,). No
    ``action_from_uniform``: rollouts with box actions draw from a key. Hashable by identity (a valid static argument
    of ``jax.jit``)."""

    def __init__(self, cdf: Array, soc_grid: Array, dev_grid: Array, rates: Array):
        self.index = DiscretizedPolicy(cdf, soc_grid, dev_grid)
        self.rates = rates  # (A,) float32

    def __call__(self, key: Array, obs: Array, h: Array) -> Array:
        return self.rates[self.index(key, obs, h)][None]
