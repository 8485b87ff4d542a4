"""Learners for finite-horizon constrained MDPs: one module per learner, on the shared parts in
:mod:`fhc_jax.algos.core`.

Learners (each module holds its algorithm: a frozen ``Config``, ``setup``, ``init``,
``rollout``, the named update steps and ``update(train_state, batch, key, setup, config)``,
and declares itself once as an ``ALGORITHM``):

* :mod:`fh_constrained`: FH-Constrained (paper Algorithm 1), per-stage linear critics and Gibbs
  actors (its speed kernels in :mod:`fh_kernels`).
* :mod:`nn_constrained`: NN-Constrained (paper Section 5), per-stage MLPs stacked on a stage
  axis (its losses in :mod:`nn_losses`).
* :mod:`ppo_lagrangian`, :mod:`cpo`: the stationary baselines of the paper's comparison (their
  networks in :mod:`ppo_networks`, CPO's trust-region step in :mod:`trust_region`).
* :mod:`ecop`: e-COP (Agnihotri et al., NeurIPS 2024), per-stage policies for episodic CMDPs.
* :mod:`saute`: Saute-Lagrangian (Sootla et al., ICML 2022), PPO-Lagrangian on the state
  augmented with the remaining budget (its environments in :mod:`fhc_jax.envs.saute`).

Shared parts (:mod:`fhc_jax.algos.core`): the scaffold that binds a learner into
``make_train`` / ``policy_table`` / ``policy``, configs and schedules, multiplier laws,
returns, features, networks, action distributions, policies and the learners' rollouts.
``features`` and ``multipliers`` (what a ``Config`` takes), :class:`EnvDefault`,
:class:`PowerSchedule`, :func:`stack` and :class:`Batch` are also importable from here.
"""

from fhc_jax.algos import core, cpo, ecop, fh_constrained, nn_constrained, ppo_lagrangian, saute
from fhc_jax.algos.core import features, multipliers
from fhc_jax.algos.core.hyperparameters import EnvDefault, PowerSchedule, resolve_env_defaults, stack
from fhc_jax.algos.core.tabular_rollout import Batch

__all__ = [
    "Batch",
    "EnvDefault",
    "PowerSchedule",
    "core",
    "cpo",
    "ecop",
    "features",
    "fh_constrained",
    "multipliers",
    "nn_constrained",
    "ppo_lagrangian",
    "resolve_env_defaults",
    "saute",
    "stack",
]
