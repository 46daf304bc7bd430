"""Shared drawing helpers of the report's figures (matplotlib, Agg backend, PNG).

A panel whose data file is missing still gets drawn: it carries a large "no data: <file>" across it, and the
saved PNG records the missing files in its ``Description`` text chunk, so tests (and readers of the file)
can tell an empty figure from a drawn one without looking at pixels.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from magicpig.harness.result_files import ResultFile
from magicpig.harness.results_tree import read_table


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


def legend_below(ax, ncol: int = 2, fontsize: float = 7, right: bool = False) -> None:
    """The panel's legend under it (``right``: beside it, for panels with rotated tick labels), outside the
    plotting area, so it never covers data (nothing when no artist is labelled)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    place = ({"loc": "upper left", "bbox_to_anchor": (1.02, 1)} if right
             else {"loc": "upper center", "bbox_to_anchor": (0.5, -0.3), "ncol": ncol})
    ax.legend(handles, labels, fontsize=fontsize, frameon=False, **place)


def readable_log(ax, axis: str = "y") -> None:
    """``axis`` on a log scale with plain tick labels at 1, 2, 5 x 10^k (and 3 x 10^k under 1.5 decades: matplotlib's
    minor labels such as 3x10^1 and 4x10^1 run into each other). Call it after plotting: it reads the limits."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    a = ax.yaxis if axis == "y" else ax.xaxis
    lo, hi = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
    narrow = lo > 0 and hi / lo < 10 ** 1.5
    a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0) if narrow else (1.0, 2.0, 5.0)))
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(NullFormatter())


def log_if_wide(ax, values) -> None:
    """Switch the y axis to log scale when its positive ``values`` span at least a decade (a linear axis
    flattens the small ones to its floor)."""
    v = np.asarray([x for x in np.asarray(values, dtype=float).ravel() if np.isfinite(x) and x > 0])
    if len(v) and v.max() / v.min() >= 10:
        readable_log(ax, "y")


def fit_single(ax, values, log: bool = False) -> None:
    """With one distinct value on the x axis: one tick at it and a span around it (matplotlib's default,
    value +- 4%, prints ticks like 0.96 ... 1.04 for a batch of 1)."""
    vals = sorted({float(x) for x in np.asarray(values, dtype=float).ravel() if np.isfinite(x)})
    if len(vals) != 1:
        return
    v = vals[0]
    lo, hi = (v / 2, v * 2) if log and v > 0 else ((v - 1, v + 1) if abs(v) < 16 else (0.5 * v, 1.5 * v))
    ax.set_xlim(lo, hi)
    ax.set_xticks([v], [f"{v:g}"])
    ax.set_xticks([], minor=True)


def bar_values(ax, xs, values) -> None:
    """Each bar's value printed on top of it, so a bar of height 0 still reads as a result, not a gap."""
    for x, v in zip(xs, values):
        if np.isfinite(v):
            ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=6)


def zero_marks(ax, xs, values, color: str, text: str = "") -> list:
    """Each value of exactly 0 as a marker on the panel's floor (in axes coordinates: a log axis has no 0), with
    ``text`` above it: a bar of height 0 is otherwise invisible. Returns the markers drawn."""
    from matplotlib.transforms import blended_transform_factory

    floor = blended_transform_factory(ax.transData, ax.transAxes)
    marks = []
    for x, v in zip(xs, values):
        if np.isfinite(v) and v == 0:
            marks += ax.plot([x], [0.015], "^", color=color, mec="k", ms=6, transform=floor, clip_on=False)
            if text:
                ax.text(x, 0.05, text, transform=floor, ha="center", va="bottom", fontsize=6, color=color)
    return marks


def no_data(ax, what: str) -> None:
    """Mark a panel as empty: big red text naming the missing file, which the figure records (``lacks``)."""
    ax.set(xticks=[], yticks=[])
    lines = [textwrap.fill(line, 28) for line in f"no data: {what}".splitlines()]
    ax.text(0.5, 0.5, "\n".join(lines), ha="center", va="center", fontsize=13, color="crimson",
            transform=ax.transAxes)
    lacks(ax.figure, what)


def panel_table(results: Path, file: ResultFile, *axes, what: str = "") -> pd.DataFrame | None:
    """The result table ``file`` under ``results``; None when it is absent, its panels ``axes`` then marked
    "no data: <what>" (default: the file's path under the results)."""
    df = read_table(file.under(results))
    if df is None:
        for ax in axes:
            no_data(ax, what or file.rel)
    return df


def lacks(fig, *what: str) -> None:
    """Record the data files ``what`` that ``fig`` could not draw (each once): ``save`` writes them into the
    PNG's Description and the ``FigureResult``."""
    missing = fig.__dict__.setdefault("_missing", [])
    missing.extend(w for w in dict.fromkeys(what) if w not in missing)


def note(ax, text: str) -> None:
    """The paper's number or shape for this panel: printed as a caption under the figure (at the bottom, so
    it never hides data or legends)."""
    if text:
        notes = ax.figure.__dict__.setdefault("_paper_notes", [])
        if text not in notes:
            notes.append(text)


def paper_note(ax, ref: dict, figure: str) -> None:
    """The caption of ``figure`` from the paper reference (its ``figures: <figure>: note:``), if it has one."""
    note(ax, (ref.get("figures", {}).get(figure, {}) or {}).get("note", ""))


def save_noted(fig, ref: dict, figure: str, path: Path, title: str) -> FigureResult:
    """``save`` with the paper's caption of ``figure`` (``paper_note``) under the figure."""
    paper_note(fig.axes[0], ref, figure)
    return save(fig, path, title)


def no_data_figure(fig, axes, what: str, path: Path, title: str) -> FigureResult:
    """Save ``fig`` with every panel marked "no data: <what>" (``what`` recorded once as missing)."""
    for ax in axes:
        no_data(ax, what)
    return save(fig, path, title)


def loglog(ax) -> None:
    """Both axes on a log scale with plain tick labels (``readable_log``)."""
    readable_log(ax, "x")
    readable_log(ax, "y")


def save(fig, path: Path, title: str) -> FigureResult:
    """Write ``fig`` to ``path`` (PNG; the missing files it records, ``lacks``, in its Description); close it."""
    missing = fig.__dict__.get("_missing", [])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    desc = ("no data: " + "; ".join(missing)) if missing else "complete"
    width, height = fig.get_size_inches()
    text = "\n".join(textwrap.fill(t, max(40, int(width * 15))) for t in fig.__dict__.get("_paper_notes", []))
    bottom = 0
    if text:  # the captions in a box along the bottom, the panels above it
        bottom = min(0.4, 0.045 * (text.count("\n") + 1) * 4.0 / height) + 0.02
        fig.text(0.01, 0.005, text, fontsize=7.5, va="bottom", ha="left",
                 bbox={"boxstyle": "round", "facecolor": "lightyellow", "alpha": 0.9, "edgecolor": "0.6"})
    fig.tight_layout(rect=(0, bottom, 1, 0.95))
    # bbox "tight": the legends under the panels stay inside the picture
    fig.savefig(path, dpi=100, metadata={"Title": title, "Description": desc}, bbox_inches="tight")
    plt().close(fig)
    return FigureResult(path, title, list(missing))
