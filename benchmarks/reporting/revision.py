"""The git revision a results file was measured at, and whether the code it measures changed
since.

A results file names its revision in one of three ways (:func:`revision_of`):

* ``revision`` (full hash) with ``revision_from: "checkout"`` (or ``"BENCHMARK_REVISION"``):
  read by the benchmark script from its checkout when the measurement started
  (``benchmarks/timing.py``'s ``source_revision``), with ``dirty`` (uncommitted changes to
  fhc_jax/ or benchmarks/ at that moment; None: not checked);
* ``revision`` with ``revision_from`` starting ``"git log"``: backfilled for files written
  before the scripts recorded it, the last commit that changed the file's measurements, an
  upper bound (the measured code is that commit or older);
* ``source: {"commit", "modified"}``: what ``fhc-jax compare`` records.

:class:`Git` answers, for a revision and the paths a table declares (``reporting.code``),
which of them differ between that revision and HEAD (``git diff -M REV HEAD``: a path that did
not exist at the revision counts as changed unless git finds it renamed unchanged).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path


@dataclass(frozen=True)
class Revision:
    """Where a results file's code came from.

    Attributes:
        sha: the full commit hash, None when the file records none.
        exact: True when the script read ``sha`` from its checkout as it ran; False when ``sha``
            is the commit that recorded the file (an upper bound of the measured code).
        dirty: uncommitted changes to the measured code when it ran (None: unknown).
        dirty_paths: those changed files, where recorded.
    """

    sha: str | None
    exact: bool = True
    dirty: bool | None = False
    dirty_paths: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        """The first 7 hex digits of the hash ('?' without one)."""
        return self.sha[:7] if self.sha else "?"

    def caption(self) -> str:
        """``'revision `abc1234`'``, ``'recorded in commit `abc1234`'``, ... for a table caption."""
        if self.sha is None:
            return "revision not recorded"
        if not self.exact:
            return f"recorded in commit `{self.short}`"
        if self.dirty:
            changed = f" to {', '.join(f'`{p}`' for p in self.dirty_paths[:3])}" if self.dirty_paths else ""
            more = f" and {len(self.dirty_paths) - 3} more" if len(self.dirty_paths) > 3 else ""
            return f"revision `{self.short}` with uncommitted changes{changed}{more}"
        if self.dirty is None:
            return f"revision `{self.short}` (uncommitted changes not checked)"
        return f"revision `{self.short}`"


def revision_of(data: dict) -> Revision:
    """The revision a results file (or one run record of it) names; ``Revision(None)`` if none."""
    if isinstance(data.get("revision"), str):
        exact = not str(data.get("revision_from", "checkout")).startswith("git log")
        return Revision(
            data["revision"],
            exact=exact,
            dirty=data.get("dirty") if exact else None,
            dirty_paths=tuple(data.get("dirty_paths") or ()),
        )
    source = data.get("source")
    if isinstance(source, dict) and isinstance(source.get("commit"), str):
        modified = tuple(source.get("modified") or ())
        return Revision(source["commit"], exact=True, dirty=bool(modified), dirty_paths=modified)
    return Revision(None)


class Git:
    """Read-only git queries on the repository at ``root``, cached (one ``git diff`` per
    revision). ``problem`` says why none can be answered (no git, not a repository)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._diffs: dict[str, list[tuple[str, str, str]] | None] = {}

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True, timeout=60, check=False)

    @cached_property
    def problem(self) -> str | None:
        """None when git answers at ``root``; else the reason (one line)."""
        try:
            done = self._run("rev-parse", "--verify", "HEAD")
        except (OSError, subprocess.SubprocessError) as e:
            return f"git unavailable ({e})"
        if done.returncode != 0:
            reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "git failed"
            return f"no git history at {self.root.name} ({reason})"
        return None

    @cached_property
    def head_files(self) -> frozenset[str]:
        """Every file tracked at HEAD."""
        return frozenset(self._run("ls-tree", "-r", "--name-only", "HEAD").stdout.splitlines())

    def exists_at_head(self, path: str) -> bool:
        """Whether ``path`` (a file, or a folder ending in '/') is tracked at HEAD."""
        if path.endswith("/"):
            return any(f.startswith(path) for f in self.head_files)
        return path in self.head_files

    def _diff(self, sha: str) -> list[tuple[str, str, str]] | None:
        """``git diff -M --name-status sha HEAD`` as (status, old path, new path) rows; None when
        ``sha`` is not a commit of this repository (e.g. a shallow clone)."""
        if sha not in self._diffs:
            if self._run("cat-file", "-e", f"{sha}^{{commit}}").returncode != 0:
                self._diffs[sha] = None
            else:
                rows = []
                for line in self._run("diff", "-M", "--name-status", sha, "HEAD").stdout.splitlines():
                    status, *paths = line.split("\t")
                    rows.append((status, paths[0], paths[-1]))
                self._diffs[sha] = rows
        return self._diffs[sha]

    def known(self, sha: str) -> bool:
        """Whether ``sha`` is a commit of this repository's history."""
        return self.problem is None and self._diff(sha) is not None

    def changed(self, sha: str, paths: tuple[str, ...] | list[str]) -> list[str] | None:
        """The paths (files, or folders ending in '/') whose content at HEAD differs from
        ``sha``'s, in the order given: changed, added after ``sha`` (unless renamed unchanged
        from a path of ``sha``: git's similarity 100), or gone from HEAD. None when that cannot
        be told (git unavailable, or ``sha`` unknown here)."""
        if self.problem is not None:
            return None
        rows = self._diff(sha)
        if rows is None:
            return None

        def under(p: str, f: str) -> bool:
            return f == p or (p.endswith("/") and f.startswith(p))

        out = []
        for p in dict.fromkeys(paths):
            if not self.exists_at_head(p):
                out.append(p)
                continue
            for status, old, new in rows:
                kind = status[:1]
                if kind in "RC":
                    renamed_unchanged = status[1:] == "100"
                    if (under(p, new) and not renamed_unchanged) or (
                        kind == "R" and under(p, old) and not under(p, new)
                    ):
                        break
                elif under(p, new) or under(p, old):
                    break
            else:
                continue
            out.append(p)
        return out
