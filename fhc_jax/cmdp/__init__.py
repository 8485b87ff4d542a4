"""The exact model: tabular finite-horizon CMDPs, exact evaluation and exact optima."""

from fhc_jax.cmdp.evaluate import Evaluation, evaluate
from fhc_jax.cmdp.model import CMDPTypeError, TabularCMDP
from fhc_jax.cmdp.solve import InfeasibleConstraintError, Solution, solve, solve_unconstrained
from fhc_jax.cmdp.stationary import StationaryFloor, stationary_cost_floor
from fhc_jax.cmdp.tradeoff import TradeOff, tradeoff
from fhc_jax.cmdp.transitions import SparseTransitions

__all__ = [
    "TabularCMDP",
    "CMDPTypeError",
    "SparseTransitions",
    "Evaluation",
    "evaluate",
    "InfeasibleConstraintError",
    "Solution",
    "solve",
    "solve_unconstrained",
    "TradeOff",
    "tradeoff",
    "StationaryFloor",
    "stationary_cost_floor",
]
