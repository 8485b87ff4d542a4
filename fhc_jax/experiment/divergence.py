"""Divergence detection between the chunks of a run: which runs produced non-finite values, when,
and what to change (a step size, named).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import jax.numpy as jnp

from fhc_jax.experiment.config import ExperimentSpec, load_spec

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Divergence:
    """Runs whose metrics, parameters or exact evaluation became non-finite (NaN or inf).

    Attributes (R runs):
        seeds: indices of the diverged runs (for ``train_seeds``: the seeds), sorted.
        iterations: per diverged run, the first iteration (updates done) at which a non-finite
            value was seen: the iteration of the first non-finite metric, else the end of the
            chunk in which the parameters were found non-finite.
        quantities: per diverged run, the first quantity found non-finite (``"metric reward"``,
            ``"parameter theta"``, ``"exact evaluation"``), in the order they were checked.
        detected_at: the iteration (chunk end) at which the divergence was detected.
        all_quantities: every non-finite quantity at detection, over the diverged runs.
    """

    seeds: tuple[int, ...]
    iterations: tuple[int, ...]
    quantities: tuple[str, ...]
    detected_at: int
    all_quantities: tuple[str, ...]

    @property
    def iteration(self) -> int:
        """The first iteration at which any run diverged."""
        return min(self.iterations)

    def merge(self, other: Divergence | None) -> Divergence:
        """This record updated with a later chunk's (first detection per run wins)."""
        if other is None:
            return self
        first = {s: (i, q) for s, i, q in zip(self.seeds, self.iterations, self.quantities)}
        for s, i, q in zip(other.seeds, other.iterations, other.quantities):
            first.setdefault(s, (i, q))
        seeds = tuple(sorted(first))
        quantities = tuple(dict.fromkeys(self.all_quantities + other.all_quantities))
        return Divergence(
            seeds=seeds,
            iterations=tuple(first[s][0] for s in seeds),
            quantities=tuple(first[s][1] for s in seeds),
            detected_at=self.detected_at,
            all_quantities=quantities,
        )

    def describe(self, what: str = "seed") -> str:
        """One line: which runs diverged, where first and in what."""
        parts = [f"{what} {s} at iteration {i} ({q})" for s, i, q in zip(self.seeds, self.iterations, self.quantities)]
        head = f"training diverged: non-finite values (NaN/inf) in {len(self.seeds)} {what}(s): " + ", ".join(parts)
        return head + f"; non-finite at detection (iteration {self.detected_at}): " + ", ".join(self.all_quantities)

    def as_dict(self) -> dict[str, Any]:
        """JSON fields (summary.json's ``divergence``)."""
        return {
            "seeds": list(self.seeds),
            "iterations": list(self.iterations),
            "quantities": list(self.quantities),
            "first_iteration": self.iteration,
            "detected_at": self.detected_at,
            "all_quantities": list(self.all_quantities),
        }


class DivergenceError(RuntimeError):
    """Training stopped because a seed's values became non-finite (``fhc-jax`` exit status 1);
    ``divergence`` is the :class:`Divergence`."""

    def __init__(self, message: str, divergence: Divergence):
        super().__init__(message)
        self.divergence = divergence


_STEP_SIZE = re.compile(r"(_lr\.init|_lr|^logit_step)$")


def divergence_hint(spec: ExperimentSpec) -> str:
    """The likely cause of a divergence of the experiment ``spec``: its step sizes, changed
    ones first."""
    now = spec.settings()
    base = load_spec(spec.algo, env=spec.env_name).settings()
    keys = [
        k for k in now if _STEP_SIZE.search(k) and isinstance(now[k], (int, float)) and not isinstance(now[k], bool)
    ]
    changed = [k for k in keys if base.get(k) != now[k]]
    shown = [f"{k} = {now[k]:g} (default {base.get(k):g})" for k in changed] or [f"{k} = {now[k]:g}" for k in keys]
    if not shown:
        return "likely cause: a step size too large for this problem"
    which = "the changed step size(s)" if changed else "the step sizes"
    return (
        f"likely cause: a step size too large for this problem; {which}: {', '.join(shown)}. "
        "Start a new run with smaller step sizes"
    )


def float_leaves(tree: Any) -> list[tuple[str, Any]]:
    """(name, leaf) of the floating-point leaves of a train state."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.inexact):
            out.append((jax.tree_util.keystr(path, simple=True, separator=".") if path else "state", leaf))
    return out


def chunk_health(carry: Any, metrics: dict[str, Array] | None, exact: tuple[Array, Array]) -> dict[str, Any]:
    """Per run (inside vmap): first non-finite iteration of each metric in the chunk (-1: none),
    finiteness of each floating leaf of the train state, and of the exact evaluation."""
    out: dict[str, Any] = {}
    if metrics is not None:
        first = {}
        for k, v in metrics.items():
            if not jnp.issubdtype(v.dtype, jnp.inexact):
                continue
            bad = ~jnp.all(jnp.isfinite(v.reshape(v.shape[0], -1)), axis=1)
            first[k] = jnp.where(jnp.any(bad), jnp.argmax(bad), -1).astype(jnp.int32)
        out["metrics"] = first
    leaves = [leaf for _, leaf in float_leaves(carry.state)]
    out["state"] = jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]) if leaves else jnp.ones((0,), bool)
    out["exact"] = jnp.all(jnp.isfinite(exact[0])) & jnp.all(jnp.isfinite(exact[1]))
    return out
