"""Tiny Markdown table writer (no extra dependency)."""
from __future__ import annotations

import math


def fmt(value, pct: bool = False, digits: int = 1) -> str:
    """A number for a table cell: '—' when missing, percent with ``pct``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if pct:
            return f"{100 * value:.{2 if abs(value) < 0.1 else digits}f}%"
        if isinstance(value, int) or float(value).is_integer():
            return str(int(value))
        return f"{value:.{digits}f}" if abs(value) >= 1 else f"{value:.3g}"
    return str(value)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)
