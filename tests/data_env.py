"""A user's environment whose numbers come from a data file (``--env data_env:DataEnv --set
env.data=PATH``): ToyEnv's two lanes, the fast lane paying the file's ``fast_reward`` and
costing its ``fast_cost``. Editing the file changes the environment without changing any
setting: what the run directory's environment fingerprint must catch
(tests/test_trust_experiment.py)."""

from __future__ import annotations

import json

import numpy as np
from toy_env import ToyEnv

from fhc_jax import TabularCMDP


class DataEnv(ToyEnv):
    def __init__(self, horizon: int = 3, alpha: float = 1.0, data: str = ""):
        super().__init__(horizon, alpha)
        self._data = data

    def _static_config(self) -> tuple:
        return (self._horizon, self._alpha, self._data)

    @property
    def default_params(self) -> TabularCMDP:
        numbers = {"fast_reward": 1.0, "fast_cost": 1.0}
        if self._data:
            with open(self._data, encoding="utf-8") as f:
                numbers.update(json.load(f))
        h = self._horizon
        return TabularCMDP(
            transitions=np.repeat(np.eye(2)[None], 2, axis=0),
            rewards=np.broadcast_to([0.5, numbers["fast_reward"]], (h, 2, 2)),
            costs=np.broadcast_to([0.0, numbers["fast_cost"]], (1, h, 2, 2)),
            terminal_rewards=np.zeros(2),
            terminal_costs=np.zeros((1, 2)),
            thresholds=np.array([self._alpha]),
            initial_distribution=np.array([1.0, 0.0]),
        )
