"""The learners the experiment tools can run, by their command-line names.

Modules are imported lazily (``importlib``), so a learner that is not written yet, or whose
optional dependencies are missing, fails only when it is asked for, with a clear message.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: command-line name -> module name under ``fhc_jax.algos``
ALGORITHMS: dict[str, str] = {
    "fh-constrained": "fh_constrained",
    "nn-constrained": "nn_constrained",
    "ppo-lag": "ppo_lagrangian",
    "cpo": "cpo",
}

#: the functions and classes every learner module must define (see ``fhc_jax.algos.common.Learner``)
PROTOCOL = ("Config", "make_learner", "make_train")


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
    """Import the learner module ``fhc_jax.algos.<module>`` of a command-line name.

    Raises:
        ValueError: an unknown name, a module that does not exist yet (or fails to import),
            or one that lacks part of the learner protocol (``Config``, ``make_learner``,
            ``make_train``).
    """
    cli = canonical_name(name)
    module_name = f"fhc_jax.algos.{ALGORITHMS[cli]}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name == module_name:
            raise ValueError(f"algorithm {cli!r} is not available in this version of fhc_jax "
                             f"(module {module_name} does not exist)") from None
        raise ValueError(f"algorithm {cli!r}: importing {module_name} failed: {err}") from err
    except ImportError as err:
        raise ValueError(f"algorithm {cli!r}: importing {module_name} failed: {err}") from err
    missing = [n for n in PROTOCOL if not hasattr(module, n)]
    if missing:
        raise ValueError(f"algorithm {cli!r}: {module_name} does not implement the learner protocol "
                         f"yet (missing {', '.join(missing)})")
    return module


def available_algorithms() -> list[str]:
    """The command-line names whose modules import and implement the protocol now."""
    out = []
    for cli in ALGORITHMS:
        try:
            load_algorithm(cli)
        except ValueError:
            continue
        out.append(cli)
    return out
