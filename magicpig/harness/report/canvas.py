"""Shared drawing helpers of the report's figures (matplotlib, Agg backend, PNG).

A panel whose data file is missing still gets drawn: it carries a large "no data: <file>" across it, and the
saved PNG records the missing files in its ``Description`` text chunk, so tests (and readers of the file)
can tell an empty figure from a drawn one without looking at pixels.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class FigureResult:
    """A written figure: its path, title and the data files it lacked (empty: fully drawn)."""
    path: Path
    title: str
    missing: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name


def plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def subplots(n: int, title: str, width: float = 5.5, height: float = 4.0):
    """A figure of ``n`` side-by-side panels with a suptitle; returns (fig, list of axes)."""
    fig, axes = plt().subplots(1, n, figsize=(width * n, height), squeeze=False)
    fig.suptitle(title, fontsize=11)
    return fig, list(axes[0])


def no_data(ax, what: str, missing: list[str]) -> None:
    """Mark a panel as empty: big red text naming the missing file; records ``what`` in ``missing``."""
    ax.set_xticks([])
    ax.set_yticks([])
    lines = [textwrap.fill(line, 28) for line in f"no data: {what}".splitlines()]
    ax.text(0.5, 0.5, "\n".join(lines), ha="center", va="center", fontsize=13, color="crimson",
            transform=ax.transAxes)
    missing.append(what)


def note(ax, text: str, where: str = "bottom") -> None:
    """The paper's number or shape for this panel: printed as a caption under the figure (``where`` is
    kept for callers; captions always go at the bottom so they never hide data or legends)."""
    if text:
        notes = ax.figure.__dict__.setdefault("_paper_notes", [])
        if text not in notes:
            notes.append(text)


def save(fig, path: Path, title: str, missing: list[str]) -> FigureResult:
    """Write ``fig`` to ``path`` (PNG, with the missing files in its Description) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    desc = ("no data: " + "; ".join(missing)) if missing else "complete"
    width_in = fig.get_size_inches()[0]
    lines = [textwrap.fill(t, max(40, int(width_in * 15))) for t in fig.__dict__.get("_paper_notes", [])]
    text = "\n".join(lines)
    n = text.count("\n") + 1 if text else 0
    bottom = min(0.4, 0.045 * n * 4.0 / fig.get_size_inches()[1]) if n else 0
    if text:
        fig.text(0.01, 0.005, text, fontsize=7.5, va="bottom", ha="left",
                 bbox={"boxstyle": "round", "facecolor": "lightyellow", "alpha": 0.9, "edgecolor": "0.6"})
    fig.tight_layout(rect=(0, bottom + (0.02 if n else 0), 1, 0.95))
    fig.savefig(path, dpi=100, metadata={"Title": title, "Description": desc})
    plt().close(fig)
    return FigureResult(path, title, list(missing))


def read(path: Path) -> pd.DataFrame | None:
    """A CSV as a frame; None when it is absent, empty or has no rows."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    return df if len(df) else None


def rel(path: Path, root: Path) -> str:
    """``path`` relative to the results root, for the "no data" text."""
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)


def truthy(series: pd.Series) -> pd.Series:
    """A CSV boolean column (True/False, 'true'/'false', 1/0) as bools."""
    return series.map(lambda v: str(v).strip().lower() in ("true", "1", "yes"))
