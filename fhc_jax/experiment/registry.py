"""The learners the experiment tools can run, by their command-line names.

Each learner module (``fhc_jax.algos.<module>``) defines ``Config``, ``make_learner(env,
params, config) -> Learner`` and ``make_train(env, params, config)``
(:class:`fhc_jax.algos.learner.Learner`). Adding a learner is one line in :data:`LEARNERS`.
"""

from __future__ import annotations

from types import ModuleType

from fhc_jax.algos import cpo, ecop, fh_constrained, nn_constrained, ppo_lagrangian, saute

#: command-line name -> learner module (one line per learner)
LEARNERS: dict[str, ModuleType] = {
    "fh-constrained": fh_constrained,
    "nn-constrained": nn_constrained,
    "ppo-lag": ppo_lagrangian,
    "cpo": cpo,
    "e-cop": ecop,
    "saute-lag": saute,
}

#: command-line name -> module name under ``fhc_jax.algos`` (the other accepted spelling)
ALGORITHMS: dict[str, str] = {name: module.__name__.rpartition(".")[2] for name, module in LEARNERS.items()}


def canonical_name(name: str) -> str:
    """The command-line name of a learner given either form ("ppo-lag" or "ppo_lagrangian").

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    if name in ALGORITHMS:
        return name
    for cli, module in ALGORITHMS.items():
        if name == module:
            return cli
    raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(ALGORITHMS)}")


def load_algorithm(name: str) -> ModuleType:
    """The learner module of a command-line (or module) name.

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    return LEARNERS[canonical_name(name)]


def available_algorithms() -> list[str]:
    """The command-line names of every learner."""
    return list(LEARNERS)
