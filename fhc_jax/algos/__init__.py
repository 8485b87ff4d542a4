"""Learners for finite-horizon constrained MDPs, one module each, on one shared scaffold.

Each learner module holds only its algorithm: a frozen ``Config`` (declarative validation),
``setup``, ``init``, ``rollout``, a module-level ``update(train_state, batch, key, setup,
config)`` with the signature all learners share, and the logits of its reported policy; the
scaffold (:mod:`fhc_jax.algos.learner`) binds them into ``make_learner``, ``make_train``,
``policy_table(train_state, env, params)`` and ``policy(train_state, env, params)``.

* :mod:`fh_constrained`: FH-Constrained (paper Algorithm 1), per-stage linear critics and actors.
* :mod:`nn_constrained`: NN-Constrained (paper Section 5), per-stage MLPs stacked on a stage axis.
* :mod:`ppo_lagrangian`, :mod:`cpo`: the stationary baselines of the paper's comparison.
* :mod:`ecop`: e-COP (Agnihotri et al., NeurIPS 2024), per-stage policies for episodic CMDPs.
* :mod:`saute`: Saute-Lagrangian (Sootla et al., ICML 2022), PPO-Lagrangian on the state
  augmented with the remaining budget, judged exactly on the augmented model.

Shared pieces: :mod:`hyperparameters` (configs, schedules, :func:`stack`), :mod:`multipliers`
(one optax-style family of multiplier updates), :mod:`returns` (lambda-returns and GAE),
:mod:`tabular_rollout` (the learners' fast rollout and :class:`Batch`), :mod:`policies`,
:mod:`features` and :mod:`networks`.
"""

from fhc_jax.algos import (
    cpo,
    ecop,
    features,
    fh_constrained,
    hyperparameters,
    learner,
    multipliers,
    networks,
    nn_constrained,
    policies,
    ppo_lagrangian,
    returns,
    saute,
    tabular_rollout,
)
from fhc_jax.algos.hyperparameters import EnvDefault, PowerSchedule, resolve_env_defaults, stack
from fhc_jax.algos.tabular_rollout import Batch

__all__ = [
    "Batch",
    "PowerSchedule",
    "cpo",
    "ecop",
    "features",
    "fh_constrained",
    "hyperparameters",
    "learner",
    "multipliers",
    "networks",
    "nn_constrained",
    "policies",
    "ppo_lagrangian",
    "returns",
    "saute",
    "stack",
    "EnvDefault",
    "resolve_env_defaults",
    "tabular_rollout",
]
