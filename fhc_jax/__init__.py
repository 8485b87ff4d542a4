"""fhc_jax: finite-horizon constrained reinforcement learning in JAX.

Layers (data flows top to bottom): ``fhc_jax.cmdp`` (the exact model and solvers),
``fhc_jax.envs`` (functional environments), ``fhc_jax.rollout`` (batched episodes),
``fhc_jax.algos`` (learners). See docs/ARCHITECTURE.md.
"""

from fhc_jax import algos, cmdp, envs
from fhc_jax.algos.core.policies import softmax_policy, table_policy
from fhc_jax.cmdp import (
    Evaluation,
    InfeasibleConstraintError,
    Solution,
    SparseTransitions,
    StationaryFloor,
    TabularCMDP,
    TradeOff,
    evaluate,
    solve,
    solve_unconstrained,
    stationary_cost_floor,
    tradeoff,
)
from fhc_jax.envs import BatteryStorage, Environment, GridWorld, TabularEnv
from fhc_jax.rollout import random_policy, rollout, rollout_returns, trajectory_observations, uniform_random_policy
from fhc_jax.trajectory import Returns, Trajectory

#: the release (PEP 440); pyproject.toml reads it from here, CHANGELOG.md says what each one changed
__version__ = "0.2.0"

__all__ = [
    "BatteryStorage",
    "Environment",
    "GridWorld",
    "TabularEnv",
    "Trajectory",
    "rollout",
    "rollout_returns",
    "Returns",
    "uniform_random_policy",
    "random_policy",
    "softmax_policy",
    "table_policy",
    "trajectory_observations",
    "algos",
    "cmdp",
    "envs",
    "Evaluation",
    "InfeasibleConstraintError",
    "Solution",
    "SparseTransitions",
    "TabularCMDP",
    "evaluate",
    "solve",
    "solve_unconstrained",
    "TradeOff",
    "tradeoff",
    "StationaryFloor",
    "stationary_cost_floor",
]
