"""What a coverage status is made of: the three statuses and ``Run``, what the checks of the paper items
(``paper_items``) read: the preset's config, the other presets, the results and the written figures."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from magicpig.harness.report.canvas import FigureResult
from magicpig.harness.results_tree import read_csv
from magicpig.shapes import model_shape

REPRODUCED = "reproduced here"
PARTIAL = "partial"
NOT_RUN = "not run in this preset"
NOT_PRODUCED = "not produced by this build (no table or figure of this report draws it yet)"


def partial(*what: str) -> str:
    return f"{PARTIAL}: " + "; ".join(w for w in what if w)


def partial_or_reproduced(*gaps: str) -> str:
    """``partial`` naming the ``gaps`` (empty ones ignored), ``reproduced here`` when there is none."""
    return partial(*gaps) if any(gaps) else REPRODUCED


def add_gaps(status: str, *gaps: str) -> str:
    """``status`` with ``gaps`` added: a reproduced status becomes partial, a partial one names them too, a not
    run one stays as it is."""
    if not any(gaps) or status.startswith(NOT_RUN):
        return status
    return partial(*gaps) if status.startswith(REPRODUCED) else partial(status.removeprefix(f"{PARTIAL}: "), *gaps)


def reproduced(*how: str) -> str:
    """``reproduced here``, with what the check compared when it says so (``reproduced here: ...``)."""
    notes = "; ".join(w for w in how if w)
    return f"{REPRODUCED}: {notes}" if notes else REPRODUCED


@dataclass(frozen=True)
class CellCheck:
    """One cell of a paper item against ours: passes when ``ours`` lies within ``tolerance`` (relative) of
    the paper's value. An item is reproduced only when every one of its cells passes (``cells_status``)."""

    row: str  # the paper's row, as its table names it
    column: str
    ours: float | None  # None: not computed or not measured here
    paper: float
    tolerance: float

    @property
    def passes(self) -> bool:
        return self.ours is not None and abs(self.ours - self.paper) <= self.tolerance * abs(self.paper)

    def text(self) -> str:
        ours = "missing" if self.ours is None else f"{self.ours:.3g}"
        return f"{self.row} {self.column}: ours {ours} vs the paper's {self.paper:g}"


def cells_status(checks: list[CellCheck], rows_expected: int, what: str) -> str:
    """Reproduced when ``rows_expected`` rows are checked and every cell is within its tolerance; else partial,
    naming the rows missing and the cells outside (``what``: how ours were obtained, said either way)."""
    rows = {c.row for c in checks}
    bad = [c for c in checks if not c.passes]
    within = "within " + ", ".join(f"{100 * t:g}%" for t in sorted({c.tolerance for c in checks})) + " of the paper's"
    if len(rows) >= rows_expected and not bad:
        return reproduced(f"all {len(rows)} rows, {len(checks)} cells {within} ({what})")
    gaps = [f"{len(rows)} of the paper's {rows_expected} rows checked" if len(rows) < rows_expected else ""]
    if bad:
        gaps.append(f"{len(bad)} of {len(checks)} cells not {within}: " + ", ".join(c.text() for c in bad))
    return partial(*gaps, what)


def not_run(*why: str) -> str:
    return f"{NOT_RUN}: " + "; ".join(w for w in why if w)


@dataclass
class Run:
    """What the coverage checks read: the preset, its config, the results root, the written figures and the GPU
    runs the report reads."""

    preset: str
    config: dict
    results: Path
    figures: dict[str, FigureResult] = field(default_factory=dict)
    accuracy: pd.DataFrame | None = None
    presets: dict[str, dict] = field(default_factory=dict)
    gpu_folders: tuple[Path, ...] = ()

    @property
    def model(self) -> str:
        return str(self.config.get("model", "?"))

    @property
    def on_gpu(self) -> bool:
        return str(self.config.get("device", "cpu")).startswith("cuda")

    def model_context(self) -> int | None:
        """The model's context window (max_position_embeddings of its stored shape), None when unknown."""
        try:
            return model_shape(self.model).max_position_embeddings or None
        except (ValueError, TypeError):
            return None

    def elsewhere(self, runs: Callable[[dict], bool]) -> str:
        """'not run by this preset (runs in `a`, `b`)', naming the other presets whose config runs it."""
        names = [n for n, p in self.presets.items() if n != self.preset and _safe(runs, p)]
        return "not run by this preset (" + (f"runs in {', '.join(f'`{n}`' for n in names)})" if names
                                             else "no preset of config/ runs it)")

    def rows(self, task: Callable[[str], bool]) -> pd.DataFrame:
        """Accuracy results (``collect_metrics``) whose task name passes ``task``."""
        acc = self.accuracy
        if acc is None or acc.empty:
            return pd.DataFrame(columns=["task", "length", "method", "status", "reason", "score"])
        return acc[acc["task"].fillna("").map(task)]

    def csv(self, relative: str) -> pd.DataFrame | None:
        return read_csv(self.results / relative)


def _safe(pred: Callable[[dict], bool], preset: dict) -> bool:
    try:
        return bool(pred(preset))
    except (KeyError, TypeError, AttributeError, ValueError):
        return False
