"""The parts every learner shares, bottom to top (each module imports only those above it):

* :mod:`paths`: which path a learner takes on an environment (tabular or sampled) and which
  input its networks read;
* :mod:`hyperparameters`: ``@hyperparameters`` configs with declarative validation,
  :class:`~fhc_jax.algos.core.hyperparameters.PowerSchedule` (step sizes of Assumption 3),
  :class:`~fhc_jax.algos.core.hyperparameters.EnvDefault` and ``stack``;
* :mod:`policies`, :mod:`distributions`, :mod:`networks`, :mod:`features`: fast sampling
  policies, action heads (categorical, diagonal Gaussian), MLPs stacked on the stage axis,
  feature maps phi_h(s);
* :mod:`tabular_rollout` (:class:`~fhc_jax.algos.core.tabular_rollout.Batch` and the learners'
  rollout from a policy table), :mod:`sampled_inputs` (network inputs on the sampled path),
  :mod:`returns` (lambda-returns, GAE, Lagrangian targets), :mod:`multipliers` (one family of
  multiplier laws on the relative violation);
* :mod:`evaluation` (evaluations during a run), :mod:`selection` (the returned policy and the
  run's status), :mod:`scaffold` (``Algorithm`` -> ``make_train``, ``policy_table``,
  ``policy``).
"""
