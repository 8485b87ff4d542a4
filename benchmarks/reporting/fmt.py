"""Numbers and markdown tables for the generated benchmarks page."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def _three(x: float) -> str:
    """Three significant digits, trailing zeros kept (``16.0``, ``117``, ``4.41``)."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def si(x: float | None) -> str:
    """``57804528.7 -> '57.8M'``; None -> '-'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{_three(x / scale)}{suffix}"
    return _three(x)


def pct(fraction: float | None) -> str:
    """A fraction as a percentage with one decimal (``0.9658 -> '96.6'``)."""
    return "-" if fraction is None else f"{100 * fraction:.1f}"


def num(x: float | None, digits: int = 2) -> str:
    """``x`` with ``digits`` decimals; None -> '-'."""
    return "-" if x is None else f"{x:.{digits}f}"


def secs(x: float | None) -> str:
    """Seconds as ``'117 ms'`` below one second, ``'4.41 s'`` above."""
    if x is None:
        return "-"
    return f"{_three(x * 1e3)} ms" if x < 1 else f"{_three(x)} s"


def span(values: list[float], fmt: Callable[[float], str] = num) -> str:
    """``'lo-hi'`` of the values (one value alone when they agree)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    lo, hi = fmt(min(vals)), fmt(max(vals))
    return lo if lo == hi else f"{lo} to {hi}" if lo.startswith("-") or hi.startswith("-") else f"{lo}-{hi}"


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table: one header line, the separator, one line per row."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out
