"""Refactors keep numbers: a short run of every learner (and its main variants) with a fixed
key, compared with values recorded before the learners shared one scaffold.

The recorded arrays live in ``tests/data/pinned_learners.npz`` (written by running this file
as a script: ``python tests/test_pinned_learners.py --record``; only do that for a deliberate,
documented change of behaviour). On the jax version and the CPU vector extensions that
recorded them (:func:`cpu_isa`: XLA compiles for the host's extensions, and AVX2 and AVX-512
round the last bits of a reduction differently) the comparison is bit-for-bit; elsewhere float
rounding may differ, so it is to 1e-4.

Re-record only for a deliberate change of behaviour, in a commit that says which arrays moved
and why (the history of the recordings is in git).
"""

from __future__ import annotations

import pathlib
import platform
import sys

import jax
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.algos import cpo, ecop, saute
from fhc_jax.algos import fh_constrained as fc
from fhc_jax.algos import nn_constrained as nc
from fhc_jax.algos import ppo_lagrangian as pl
from fhc_jax.algos.core import features

DATA = pathlib.Path(__file__).parent / "data" / "pinned_learners.npz"

ENV = fhc.GridWorld(size=5, horizon=12)


def cpu_isa() -> str:
    """The machine and the CPU's vector extensions XLA compiles for, e.g. ``"x86_64 avx avx2
    fma"`` (from ``/proc/cpuinfo``; the machine alone where it cannot be read)."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        pass
    vector = sorted(x for x in flags if x.startswith(("avx", "amx")) or x in ("fma", "f16c"))
    return " ".join([platform.machine(), *vector])


def _cases():
    small = dict(num_iterations=6, episodes_per_iteration=16, eval_every=3)
    return {
        "fh_improved_table": (fc, fc.Config(**small, update_form="table")),
        "fh_improved_samples": (fc, fc.Config(**small, update_form="samples")),
        "fh_paper": (fc, fc.Config(**small, variant="paper")),
        "fh_rbf_mean": (fc, fc.Config(**small, features=features.RadialBasis(3), combine="mean")),
        "nn_improved": (nc, nc.Config(**small)),
        "nn_paper_samples": (nc, nc.Config(**small, variant="paper", update_form="samples")),
        "ppo_pid_xy": (pl, pl.Config(**small, multiplier_method="pid")),
        "ppo_geometric_xy": (pl, pl.Config(**small)),
        "ppo_lagrangian_xyt": (pl, pl.Config(**small, observation="xyt", multiplier_method="lagrangian")),
        "cpo_xy": (cpo, cpo.Config(**small)),
        "cpo_xyt": (cpo, cpo.Config(**small, observation="xyt")),
        "ecop": (ecop, ecop.Config(**small, multiplier_method="paper", multiplier_max=20.0)),
        "saute": (saute, saute.Config(**small, multiplier_method="pid", observation="xy")),
        "saute_geometric": (saute, saute.Config(**small)),  # the default observation: "xyt" here
    }


def _run(module, config) -> dict[str, np.ndarray]:
    params = ENV.default_params
    out = jax.jit(module.make_train(ENV, params, config))(jax.random.key(7))
    values = {
        "policy": module.policy_table(out.state, ENV, params),
        "final_policy": module.policy_table(out.final_state, ENV, params),
        "selected_iteration": out.selection.iteration,
        "multipliers": out.state.multipliers,
        "reward": out.metrics.reward,
        "costs": out.metrics.costs,
        "exact_reward": out.metrics.evaluation.reward,
        "exact_costs": out.metrics.evaluation.costs,
    }
    return {k: np.asarray(v) for k, v in values.items()}


def record() -> None:
    arrays = {}
    for name, (module, config) in _cases().items():
        for k, v in _run(module, config).items():
            arrays[f"{name}/{k}"] = v
    arrays["__jax_version__"] = np.array(jax.__version__)
    arrays["__cpu_isa__"] = np.array(cpu_isa())
    np.savez(DATA, **arrays)
    print(f"recorded {len(arrays) - 2} arrays with jax {jax.__version__} on {cpu_isa()} to {DATA}")


@pytest.mark.slow
@pytest.mark.as_users_compile  # the numbers users get (tests/conftest.py)
@pytest.mark.parametrize("name", list(_cases()))
def test_learner_numbers_pinned(name):
    pinned = np.load(DATA)
    module, config = _cases()[name]
    got = _run(module, config)
    same_isa = "__cpu_isa__" in pinned and str(pinned["__cpu_isa__"]) == cpu_isa()
    exact = str(pinned["__jax_version__"]) == jax.__version__ and same_isa
    for key, value in got.items():
        want = pinned[f"{name}/{key}"]
        assert value.shape == want.shape, (name, key)
        if exact:
            np.testing.assert_array_equal(value, want, err_msg=f"{name}/{key} changed")
        else:
            np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-4, err_msg=f"{name}/{key} changed")


if __name__ == "__main__":
    if "--record" in sys.argv:
        record()
