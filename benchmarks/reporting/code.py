"""Which code each results file measures: the one place that says so.

Each table of the generated page declares the modules whose changes can change its numbers: the
learners' own modules (``LEARNER_CODE``), the environments' modules (``ENV_CODE``) and, for the
tables that measure something else, those modules (``MEASURES``). A table whose declared code
changed after its revision is marked stale on the page (``reporting.revision.Git.changed``).
The shared parts every learner builds on (``fhc_jax/algos/core/``: the scaffold, the candidates'
selection, multipliers, networks, returns) are every learner's code too: a change there can move
any learner's numbers (the multiplier's safety margin does), so it marks every learner's tables.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

#: the shared parts of every learner (a folder; the training units' wrapper is in ``LEARNER_CODE``)
CORE_CODE = "fhc_jax/algos/core/"

#: the wrapper every learner trains in (the training units, ``fhc_jax.envs.wrappers.training_scales``)
UNITS_CODE = "fhc_jax/envs/wrappers.py"

#: learner (its ``fhc_jax.algos`` module name) -> its own modules and the shared core (Saute-Lagrangian
#: is PPO-Lagrangian on an augmented state: PPO-Lagrangian's modules are its code too)
LEARNER_CODE: dict[str, tuple[str, ...]] = {
    "fh_constrained": (
        "fhc_jax/algos/fh_constrained.py",
        "fhc_jax/algos/fh_kernels.py",
        CORE_CODE,
        UNITS_CODE,
    ),
    "nn_constrained": (
        "fhc_jax/algos/nn_constrained.py",
        "fhc_jax/algos/nn_losses.py",
        "fhc_jax/algos/nn_setup.py",
        CORE_CODE,
        UNITS_CODE,
    ),
    "ppo_lagrangian": (
        "fhc_jax/algos/ppo_lagrangian.py",
        "fhc_jax/algos/ppo_losses.py",
        "fhc_jax/algos/ppo_networks.py",
        CORE_CODE,
        UNITS_CODE,
    ),
    "cpo": ("fhc_jax/algos/cpo.py", "fhc_jax/algos/trust_region.py", CORE_CODE, UNITS_CODE),
    "ecop": (  # ppo_lagrangian.py: its Metrics are e-COP's base class
        "fhc_jax/algos/ecop.py",
        "fhc_jax/algos/ecop_losses.py",
        "fhc_jax/algos/ecop_setup.py",
        "fhc_jax/algos/ppo_lagrangian.py",
        CORE_CODE,
        UNITS_CODE,
    ),
    "saute": (
        "fhc_jax/algos/saute.py",
        "fhc_jax/algos/saute_setup.py",
        "fhc_jax/envs/saute.py",
        "fhc_jax/algos/ppo_lagrangian.py",
        "fhc_jax/algos/ppo_losses.py",
        "fhc_jax/algos/ppo_networks.py",
        CORE_CODE,
        UNITS_CODE,
    ),
}

#: the names results files give learners -> the learner
LEARNER_ALIASES: dict[str, str] = {
    **{name: name for name in LEARNER_CODE},
    "fh-constrained": "fh_constrained",
    "nn-constrained": "nn_constrained",
    "ppo-lag": "ppo_lagrangian",
    "e-cop": "ecop",
    "saute-lag": "saute",
    "FH-Constrained": "fh_constrained",
    "NN-Constrained": "nn_constrained",
    "PPO-Lagrangian": "ppo_lagrangian",
    "CPO": "cpo",
    "e-COP": "ecop",
    "Saute-Lagrangian": "saute",
}

#: environment -> its modules (the suite's tasks by name pattern, fnmatch)
ENV_CODE: dict[str, tuple[str, ...]] = {
    "gridworld*": ("fhc_jax/envs/gridworld.py",),
    "garnet*": ("fhc_jax/envs/suite.py", "fhc_jax/envs/tabular.py"),
    "inventory*": ("fhc_jax/envs/inventory.py",),
    "battery*": ("fhc_jax/envs/battery.py", "fhc_jax/envs/battery_reference.py"),
    "pendulum": ("fhc_jax/envs/gymnax_interop.py",),
    "maintenance*": ("fhc_jax/envs/maintenance.py", "fhc_jax/envs/suite.py", "fhc_jax/envs/tabular.py"),
    "admission*": ("fhc_jax/envs/admission.py", "fhc_jax/envs/suite.py", "fhc_jax/envs/tabular.py"),
}

ALL_LEARNERS = tuple(LEARNER_CODE)
FROM_DATA = "from the file"  # the learners a file names (its speed / quality / rows / learners keys)


@dataclass(frozen=True)
class Measures:
    """The code one results file measures: learners (or ``FROM_DATA``), environments (keys of
    ``ENV_CODE``, or task names) and other modules or folders (ending in '/')."""

    learners: tuple[str, ...] | str = ()
    envs: tuple[str, ...] = ()
    other: tuple[str, ...] = ()


#: results file pattern (relative to benchmarks/results, fnmatch) -> the code it measures; the
#: first matching pattern wins (``robustness.json`` is judged cell by cell: ``cell_code``)
MEASURES: dict[str, Measures] = {
    "reproduce_paper.json": Measures(ALL_LEARNERS, ("gridworld",)),
    "robustness.json": Measures(ALL_LEARNERS, ("gridworld", "garnet", "inventory", "battery", "pendulum")),
    "stationary_margin.json": Measures(
        (),
        ("gridworld", "garnet", "inventory", "maintenance", "admission"),
        ("fhc_jax/cmdp/stationary.py", "fhc_jax/cmdp/evaluate.py"),
    ),
    "fh_constrained.json": Measures(("fh_constrained",), ("gridworld",)),
    "nn_constrained.json": Measures(("nn_constrained",), ("gridworld",)),
    "ppo_lagrangian.json": Measures(("ppo_lagrangian",), ("gridworld",)),
    "cpo.json": Measures(("cpo",), ("gridworld",)),
    "ecop*.json": Measures(("ecop",), ("gridworld",)),
    "saute*.json": Measures(("saute",), ("gridworld",)),
    "solver.json": Measures((), ("gridworld",), ("fhc_jax/cmdp/solve.py", "fhc_jax/cmdp/evaluate.py")),
    "env_throughput.json": Measures(
        (), ("gridworld",), ("fhc_jax/rollout.py", "fhc_jax/random_bits.py", "fhc_jax/algos/core/policies.py")
    ),
    "sampled_path.json": Measures(FROM_DATA, ("gridworld",)),
    "scaling.json": Measures(FROM_DATA, ("gridworld",), ("fhc_jax/cmdp/solve.py",)),
    "battery.json": Measures(FROM_DATA, ("battery",)),
    "continuous_battery*.json": Measures(FROM_DATA, ("battery",)),
    "continuous_pendulum*.json": Measures(FROM_DATA, ("pendulum",)),
    "battery_resolution*.json": Measures((), ("battery",), ("fhc_jax/cmdp/solve.py",)),
    "gymnax_interop.json": Measures((), ("pendulum",), ("fhc_jax/rollout.py",)),
    "deep_reference.json": Measures(("nn_constrained", "ecop", "ppo_lagrangian", "saute"), ("pendulum",)),
    "reference/rejax_*.json": Measures((), (), ("benchmarks/reference_rejax.py",)),
    "brax_interop.json": Measures(("ppo_lagrangian",), (), ("fhc_jax/envs/brax_interop.py", "fhc_jax/rollout.py")),
    "chunked_training.json": Measures(("fh_constrained",), ("gridworld",), ("fhc_jax/experiment/training.py",)),
    "tracking_overhead.json": Measures(("fh_constrained",), ("gridworld",), ("fhc_jax/experiment/tracking.py",)),
    "validation_overhead.json": Measures(
        ("fh_constrained",), ("gridworld",), ("fhc_jax/envs/validation.py", "fhc_jax/rollout.py")
    ),
    "distributed.json": Measures(("fh_constrained",), ("gridworld",), ("fhc_jax/experiment/runner.py",)),
    "gpu_*/env_throughput.json": Measures(
        (), ("gridworld",), ("fhc_jax/rollout.py", "fhc_jax/random_bits.py", "fhc_jax/algos/core/policies.py")
    ),
    "gpu_*/fh_constrained.json": Measures(("fh_constrained",), ("gridworld",)),
    "gpu_*/nn_constrained.json": Measures(("nn_constrained",), ("gridworld",)),
    "gpu_*/battery*.json": Measures(FROM_DATA, ("battery",)),
}


def measures_for(name: str) -> Measures | None:
    """The declaration of results file ``name`` (relative to benchmarks/results); None if none."""
    return next((m for pattern, m in MEASURES.items() if fnmatch.fnmatch(name, pattern)), None)


def learners_in(data: dict) -> tuple[str, ...]:
    """The learners a results file names in its ``speed``, ``quality``, ``rows`` or ``learners``
    mappings (names no learner is known by are ignored)."""
    names: list[str] = []
    for key in ("speed", "quality", "rows", "learners"):
        if isinstance(data.get(key), dict):
            names += [LEARNER_ALIASES[k] for k in data[key] if k in LEARNER_ALIASES]
    return tuple(dict.fromkeys(names))


def env_code(env: str) -> tuple[str, ...]:
    """The modules of an environment or suite task (``ENV_CODE``'s first matching pattern)."""
    for pattern, paths in ENV_CODE.items():
        if fnmatch.fnmatch(env, pattern):
            return paths
    raise KeyError(f"no module declared for environment {env!r} in reporting/code.py ENV_CODE")


def code_paths(learners: tuple[str, ...], envs: tuple[str, ...], other: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The declared paths of learners, environments and other modules, each once, in order."""
    paths = [p for lr in learners for p in LEARNER_CODE[lr]] + [p for e in envs for p in env_code(e)] + list(other)
    return tuple(dict.fromkeys(paths))


def measured_code(name: str, data: dict) -> tuple[str, ...] | None:
    """The paths results file ``name`` declares it measures; None when ``MEASURES`` has no
    pattern for it."""
    m = measures_for(name)
    if m is None:
        return None
    learners = learners_in(data) if m.learners == FROM_DATA else m.learners
    return code_paths(tuple(learners), m.envs, m.other)


def cell_code(learner: str, task: str) -> tuple[str, ...]:
    """The paths one robustness cell (a learner on a suite task) measures."""
    return code_paths((LEARNER_ALIASES.get(learner, learner),), (task,))


def all_declared_paths() -> tuple[str, ...]:
    """Every path the mapping names (to check that each exists)."""
    paths = [p for ps in LEARNER_CODE.values() for p in ps] + [p for ps in ENV_CODE.values() for p in ps]
    paths += [p for m in MEASURES.values() for p in m.other]
    return tuple(dict.fromkeys(paths))
