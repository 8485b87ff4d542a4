"""What a run was trained on, beyond its settings: the environment's fingerprint.

The settings of a run (config.json) name the environment and its ``env.*`` values, but the same
settings build another environment once its code or data change (a user's own module edited, a
data file replaced, another version of fhc_jax). ``fhc-jax train`` therefore records, in
config.json's ``environment``, a fingerprint of the environment it built
(:func:`environment_fingerprint`):

* ``class``: the environment's class (``module.QualifiedName``);
* ``static``: a hash of its static configuration (``env._static_config()``, canonicalised:
  functions by their qualified names, arrays by their bytes, nested environments by their own
  static configuration; identities, ``id(...)`` of the environment's own attributes, are what
  they identify, which the params cover);
* ``params``: its params pytree (every numeric leaf: path, shape, dtype, and its values);
* ``model``: where it has an exact model (``has_exact_model``), the arrays of
  ``env.to_cmdp(params)``, host-side in float64, the same way.

A quantity is recorded as the SHA-256 of its float64 bytes and, per leaf, a sketch: the sums
of the values in up to 64 contiguous blocks, each value weighted by a fixed pseudo-random
weight in +-[0.5, 1]. :func:`environment_difference` compares a stored fingerprint with the
environment as it is built now: equal hashes are the same environment; different hashes whose
every block sum agrees within :data:`ROUNDING` of the block's sum of |values| are the same
values up to float rounding (an environment built on another device or CPU); anything else is a
change, named in one phrase ("its exact model (env.to_cmdp(params)): leaf transitions.probs
differs"). ``fhc-jax train --resume`` refuses a changed environment and ``fhc-jax eval`` judges
on it only when asked to (``--set env.*``), saying so; a run directory recorded before
environments were fingerprinted says that it cannot check (:data:`NOT_RECORDED`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import re
from typing import Any

import jax
import numpy as np

#: the fingerprint's layout (config.json's ``environment.version``)
VERSION = 1
#: block sums that differ by at most this fraction of the block's sum of |values| are rounding
ROUNDING = 1e-5
#: blocks of a leaf's sketch
BLOCKS = 64
#: what a run directory written before environments were fingerprinted says
NOT_RECORDED = "recorded before environments were fingerprinted: cannot check"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _as_array(leaf: Any) -> np.ndarray:
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    return np.asarray(leaf)


def _weights(n: int) -> np.ndarray:
    """Fixed pseudo-random weights in +-[0.5, 1] for a leaf of n values (seeded by n)."""
    rng = np.random.default_rng(n)
    return rng.uniform(0.5, 1.0, n) * np.where(rng.random(n) < 0.5, -1.0, 1.0)


def _block_sums(x: np.ndarray, weighted: bool) -> np.ndarray:
    v = x.reshape(-1)
    if weighted:
        v = v * _weights(v.size)
    else:
        v = np.abs(v)
    blocks = min(BLOCKS, max(v.size, 1))
    return np.asarray([b.sum() for b in np.array_split(v, blocks)], np.float64)


def _named(tree: Any) -> Any:
    """``tree`` with nodes that name their fields (named tuples, ``TabularCMDP``: ``_fields``) as
    dicts of them, so that leaf paths read ``transitions.probabilities`` rather than ``0.1``."""
    fields = getattr(tree, "_fields", None)
    if not isinstance(tree, type) and isinstance(fields, tuple) and all(isinstance(f, str) for f in fields):
        return {f: _named(getattr(tree, f)) for f in fields}
    if type(tree) in (tuple, list):
        return type(tree)(_named(v) for v in tree)
    if type(tree) is dict:
        return {k: _named(v) for k, v in tree.items()}
    return tree


def _leaves(tree: Any) -> list[tuple[str, Any]]:
    """(path, leaf) of every leaf of ``tree`` (named tuples by field name)."""
    return [
        (jax.tree_util.keystr(path, simple=True, separator=".") or "value", leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(_named(tree))[0]
    ]


def tree_fingerprint(tree: Any) -> dict[str, Any]:
    """The fingerprint of a pytree's leaves: ``sha`` (every leaf's path, shape, dtype and
    float64 bytes) and per leaf ``path``, ``shape``, ``dtype`` and ``sketch`` (module
    docstring); non-numeric leaves by their text."""
    h = hashlib.sha256()
    leaves = []
    for name, leaf in _leaves(tree):
        try:
            x = _as_array(leaf)
            numeric = x.dtype.kind in "biuf"
        except (TypeError, ValueError):
            numeric = False
        if not numeric:
            text = _ADDRESS.sub("", repr(leaf))
            h.update(f"{name}|{text}".encode())
            leaves.append({"path": name, "text": _sha(text.encode())})
            continue
        x64 = x.astype(np.float64)
        h.update(f"{name}|{x.shape}|{x.dtype}|".encode())
        h.update(np.ascontiguousarray(x64).tobytes())
        leaves.append(
            {
                "path": name,
                "shape": list(x.shape),
                "dtype": str(x.dtype),
                "sketch": [float(f"{v:.12g}") for v in _block_sums(x64, True)],
            }
        )
    return {"sha": h.hexdigest()[:32], "leaves": leaves}


def _on_host() -> contextlib.AbstractContextManager:
    """Computations on this process's CPU device (the same arithmetic wherever the run's
    accelerators are; never another process's device), where JAX has a CPU backend."""
    try:
        return jax.default_device(jax.local_devices(backend="cpu")[0])
    except RuntimeError:  # no CPU backend (JAX_PLATFORMS without cpu): the default device
        return contextlib.nullcontext()


def _canonical(x: Any, ids: set[int], depth: int = 0) -> Any:
    """A JSON-able, process-independent form of a static configuration (module docstring)."""
    from fhc_jax.envs.base import Environment

    if depth > 6:
        return type(x).__qualname__
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, np.integer)):
        return "<id>" if int(x) in ids else int(x)
    if isinstance(x, (float, np.floating)):
        return repr(float(x))
    if isinstance(x, (tuple, list)):
        return [_canonical(v, ids, depth + 1) for v in x]
    if isinstance(x, dict):
        return {str(k): _canonical(v, ids, depth + 1) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (np.ndarray, jax.Array)):
        return {"array": tree_fingerprint(x)["sha"]}
    if isinstance(x, Environment):
        return {"environment": _qualname(type(x)), "static": _canonical(x._static_config(), ids | _ids(x), depth + 1)}
    if inspect.isclass(x) or inspect.isfunction(x) or inspect.ismethod(x) or inspect.isbuiltin(x):
        return _qualname(x)
    if dataclasses.is_dataclass(x):
        return {
            "type": _qualname(type(x)),
            **{f.name: _canonical(getattr(x, f.name), ids, depth + 1) for f in dataclasses.fields(x)},
        }
    if type(x).__repr__ is not object.__repr__:
        return {"type": _qualname(type(x)), "repr": _ADDRESS.sub("", repr(x))}
    if hasattr(x, "__dict__"):
        return {
            "type": _qualname(type(x)),
            **{k: _canonical(v, ids, depth + 1) for k, v in sorted(vars(x).items()) if not k.startswith("__")},
        }
    return {"type": _qualname(type(x))}


def _qualname(x: Any) -> str:
    return f"{getattr(x, '__module__', '?')}.{getattr(x, '__qualname__', type(x).__qualname__)}"


def _ids(env: Any) -> set[int]:
    """Identities of an environment's own attributes (what ``id(...)`` in a static
    configuration can name)."""
    return {id(v) for v in vars(env).values()} if hasattr(env, "__dict__") else set()


def environment_fingerprint(env: Any, params: Any) -> dict[str, Any]:
    """The fingerprint of ``env`` with ``params`` (module docstring): ``version``, ``class``,
    ``static``, ``params`` and ``model`` (None without an exact model), JSON-ready. Host-side;
    the exact model is built once (``env.to_cmdp(params)``), on the CPU."""
    return _fingerprint(env, params)[0]


def _fingerprint(env: Any, params: Any) -> tuple[dict[str, Any], Any]:
    """(:func:`environment_fingerprint`, the exact model or None)."""
    static = json.dumps(_canonical(env._static_config(), _ids(env)), sort_keys=True, default=str)
    model = None
    if env.has_exact_model:
        with _on_host():
            model = env.to_cmdp(params)
    fp = {
        "version": VERSION,
        "class": _qualname(type(env)),
        "static": _sha(static.encode()),
        "params": tree_fingerprint(params),
        "model": None if model is None else tree_fingerprint(model),
    }
    return fp, model


def _tree_difference(stored: dict | None, now: dict | None) -> str | None:
    """None when two :func:`tree_fingerprint` s agree (equal, or equal up to rounding), else
    which leaf differs."""
    if stored is None or now is None:
        return (
            None
            if stored is None and now is None
            else ("absent before, present now" if stored is None else "present before, absent now")
        )
    if stored.get("sha") == now.get("sha"):
        return None
    old, new = stored.get("leaves", []), now.get("leaves", [])
    if [x.get("path") for x in old] != [x.get("path") for x in new]:
        return (
            "its leaves differ ("
            + ", ".join(sorted({x.get("path") for x in old} ^ {x.get("path") for x in new}) or ["their order"])
            + ")"
        )
    changed = []
    for a, b in zip(old, new):
        if a.get("shape") != b.get("shape"):
            return f"leaf {a['path']} has shape {b.get('shape')} (was {a.get('shape')})"
        if a.get("text") != b.get("text") or (
            "sketch" in a and not _sketch_close(a["sketch"], b["sketch"], b.get("_abs"))
        ):
            changed.append(a["path"])
    if not changed:
        return None
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return f"leaf {shown} differs" if len(changed) == 1 else f"leaves {shown} differ"


def _sketch_close(old: list, new: list, scale: list | None) -> bool:
    a, b = np.asarray(old, np.float64), np.asarray(new, np.float64)
    if a.shape != b.shape:
        return False
    tol = ROUNDING * (np.asarray(scale, np.float64) if scale is not None else np.abs(b))
    return bool(np.all(np.abs(a - b) <= tol))


def _with_scales(tree_fp: dict | None, tree: Any) -> dict | None:
    """A :func:`tree_fingerprint` with each leaf's block sums of |values| (the rounding scale of
    the comparison, from the values as they are now; not stored)."""
    if tree_fp is None:
        return None
    numeric = [x for x in tree_fp["leaves"] if "sketch" in x]
    arrays = [_as_array(leaf).astype(np.float64) for _, leaf in _leaves(tree) if _is_numeric(leaf)]
    for fp, x in zip(numeric, arrays):
        fp["_abs"] = _block_sums(x, False).tolist()
    return tree_fp


def _is_numeric(leaf: Any) -> bool:
    try:
        return _as_array(leaf).dtype.kind in "biuf"
    except (TypeError, ValueError):
        return False


def environment_difference(stored: dict | None, env: Any, params: Any) -> str | None:
    """How ``env`` with ``params`` differs from the environment of a stored fingerprint, in one
    phrase ("its exact model (env.to_cmdp(params)): leaf transitions.probs differs"); None when
    it is the same (up to float rounding); :data:`NOT_RECORDED` when ``stored`` is None (a run
    directory written before environments were fingerprinted)."""
    if not isinstance(stored, dict) or stored.get("version") != VERSION:
        return NOT_RECORDED
    now, model = _fingerprint(env, params)
    parts = []
    if stored.get("class") != now["class"]:
        parts.append(f"its class ({stored.get('class')} -> {now['class']})")
    if stored.get("static") != now["static"]:
        parts.append("its static configuration (env._static_config())")
    diff = _tree_difference(stored.get("params"), _with_scales(now["params"], params))
    if diff is not None:
        parts.append(f"its params ({diff})")
    diff = _tree_difference(stored.get("model"), _with_scales(now["model"], model))
    if diff is not None:
        parts.append(f"its exact model (env.to_cmdp(params): {diff})")
    return "; ".join(parts) or None
