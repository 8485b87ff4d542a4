"""Functional (gymnax-style) finite-horizon constrained environments.

``Environment`` (typed generic base), ``GridWorld`` (the paper's Section 5 gridworld),
``TabularEnv`` (any ``TabularCMDP``), ``InventoryEnv`` (a tabular environment with its own
observation), the observation encoders, ``fhc_jax.envs.suite`` (the robustness suite's tasks),
the adapters of other libraries' environments (``from_gymnax``, ``to_gymnax``, ``from_brax``;
gymnax and brax are optional and imported only when used) and the boundary checks' errors
(``InvalidActionError``).
"""

from fhc_jax.envs.base import Environment, TabularState, sample_index
from fhc_jax.envs.battery import BatteryParams, BatteryState, BatteryStorage
from fhc_jax.envs.brax_interop import BraxEnv, from_brax
from fhc_jax.envs.encoders import (
    ENCODERS,
    Encoder,
    IndexEncoder,
    OneHotEncoder,
    OwnObservation,
    XYEncoder,
    XYTEncoder,
    make_encoder,
)
from fhc_jax.envs.gridworld import MOVES, GridParams, GridState, GridWorld, make_layout, next_state_table
from fhc_jax.envs.gymnax_interop import GymnaxEnv, from_gymnax, to_gymnax
from fhc_jax.envs.inventory import InventoryEnv, InventoryParams
from fhc_jax.envs.spaces import ActionSpace, Box, Discrete
from fhc_jax.envs.tabular import TabularEnv
from fhc_jax.envs.validation import InvalidActionError

__all__ = [
    "ActionSpace",
    "Box",
    "Discrete",
    "BatteryParams",
    "BatteryState",
    "BatteryStorage",
    "BraxEnv",
    "from_brax",
    "GymnaxEnv",
    "from_gymnax",
    "to_gymnax",
    "ENCODERS",
    "Encoder",
    "Environment",
    "GridParams",
    "GridState",
    "GridWorld",
    "IndexEncoder",
    "InvalidActionError",
    "InventoryEnv",
    "InventoryParams",
    "MOVES",
    "OneHotEncoder",
    "OwnObservation",
    "TabularEnv",
    "TabularState",
    "XYEncoder",
    "XYTEncoder",
    "make_encoder",
    "make_layout",
    "next_state_table",
    "sample_index",
]
