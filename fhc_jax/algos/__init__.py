"""Learners. Each module exposes ``Config``, ``init``, ``update``, ``make_train`` and
``policy_table``; :mod:`fhc_jax.algos.common` and :mod:`fhc_jax.algos.features` hold the
shared pieces."""

from fhc_jax.algos import common, features, fh_constrained

__all__ = ["common", "features", "fh_constrained"]
