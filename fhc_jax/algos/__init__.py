"""Learners. Each module exposes ``Config``, ``init``, ``update``, ``make_learner``,
``make_train`` and ``policy_table``; :mod:`fhc_jax.algos.common`, :mod:`fhc_jax.algos.features`
and :mod:`fhc_jax.algos.networks` hold the shared pieces.

* :mod:`fh_constrained`: FH-Constrained (paper Algorithm 1), per-stage linear critics and actors.
* :mod:`nn_constrained`: NN-Constrained (paper Section 5), per-stage MLPs stacked on a stage axis.
* :mod:`ppo_lagrangian`, :mod:`cpo`: the stationary baselines of the paper's comparison.
"""

from fhc_jax.algos import common, cpo, features, fh_constrained, networks, nn_constrained, ppo_lagrangian

__all__ = ["common", "cpo", "features", "fh_constrained", "networks", "nn_constrained", "ppo_lagrangian"]
