"""Where two compared methods disagree: the paired samples whose scores differ, with what each method
answered (``magicpig compare --disagreements DIR``).

One CSV per (task, length), ``DIR/<task, '/' as '__'>_<length>.csv``, one row per disagreeing sample (``COLUMNS``:
the sample id, the question where the task records one in the sample meta, the gold answers, and each
method's answer, score and cost), sorted by the size of the score difference, largest first. A (task, length)
where the two agree on every sample gets a file with the header only, so a reader can tell "no disagreement"
from "not compared".
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from magicpig.atomic_io import write_text_atomic

COLUMNS = ["id", "question", "gold", "answer_a", "score_a", "cost_a", "answer_b", "score_b", "cost_b"]


@dataclass(frozen=True)
class PairedUnit:
    """The paired rows of one (task, length): ids both runs scored, the scores compared, the rows."""
    task: str
    length: int
    ids: list[str]
    scores_a: dict[str, float]
    scores_b: dict[str, float]
    rows_a: dict[str, dict]
    rows_b: dict[str, dict]


def rows(unit: PairedUnit) -> list[dict]:
    """The disagreeing samples of one unit (module docstring), largest score difference first."""
    out = []
    for i in unit.ids:
        a, b = unit.scores_a[i], unit.scores_b[i]
        if a == b:
            continue
        ra, rb = unit.rows_a[i], unit.rows_b[i]
        meta = ra.get("meta") if isinstance(ra.get("meta"), dict) else {}
        out.append({"id": i, "question": str(meta.get("question", "")),
                    "gold": " | ".join(str(x) for x in ra.get("references") or []),
                    "answer_a": str(ra.get("prediction", "")), "score_a": a, "cost_a": ra.get("cost", ""),
                    "answer_b": str(rb.get("prediction", "")), "score_b": b, "cost_b": rb.get("cost", "")})
    return sorted(out, key=lambda r: -abs(r["score_a"] - r["score_b"]))


def file_name(task: str, length: int) -> str:
    return f"{task.replace('/', '__')}_{length}.csv"


def write(units: list[PairedUnit], folder: Path) -> list[tuple[PairedUnit, Path, int]]:
    """Write one CSV per unit into ``folder``; (unit, file, disagreeing samples) per unit."""
    folder = Path(folder)
    written = []
    for unit in units:
        found = rows(unit)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(found)
        path = folder / file_name(unit.task, unit.length)
        write_text_atomic(path, buf.getvalue())
        written.append((unit, path, len(found)))
    return written
