"""The report's "Where methods disagree" section: for each pair of methods the claims compare, the samples on
which the two score differently, with the question, the gold answer and each method's answer, score and cost.

The pairs are read from the claims of ``config/paper_reference.yaml`` (``claims.items``): a claim with a
``method`` and a ``baseline`` gives that pair; one with a ``family`` (quest, topk) pairs its method with every
run of that family in the results (all of them, whatever their cost: the claim's own cost filter decides
which enter its test, this section shows them all); a claim's ``tasks`` narrows its pair to those tasks.
Every (task, length) where both methods of a pair have an ``ok`` run gets one CSV written by
``magicpig.harness.disagreements`` (the same files ``magicpig compare --disagreements`` writes) under
``<report folder>/disagreements/<A>__vs__<B>/``, and a table in the report of its first ``ROWS_SHOWN`` rows,
largest score difference first, with a link to the CSV.

The block is collapsed: ``<details>`` / ``<summary>`` lines of their own, which GitHub renders in REPORT.md
and ``report.html`` turns into the live tags (``html.collapsible``). Answers, questions and gold answers are
model output or data: every cell is cut to ``CELL_CHARS`` characters, its line breaks shown as ``⏎`` and
every ASCII punctuation character backslash-escaped, so a cell can neither end the table row (``|``), start
a line, nor carry a tag, an entity, a link or emphasis into the page.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd

from magicpig.harness.disagreements import PairedUnit, rows as disagreeing, write
from magicpig.harness.results_tree import prediction_rows, sample_scores
from magicpig.harness.report.markdown import fmt, table
from magicpig.harness.report.claims_context import family, of_method

ROWS_SHOWN = 10  # rows of one (pair, task, length) shown in the report; the CSV has them all
CELL_CHARS = 120  # characters of an answer, question or gold answer shown in a cell
FOLDER = "disagreements"
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character


def claim_pairs(ref: dict, acc: pd.DataFrame) -> dict[tuple[str, str], set[str] | None]:
    """(method A as the claim writes it, method B) -> the tasks the pair is limited to (None: every task), for
    every pair the claims compare that has runs in ``acc`` (module docstring)."""
    ok = acc[acc["status"] == "ok"]
    pairs: dict[tuple[str, str], set[str] | None] = {}
    for claim in (ref.get("claims") or {}).get("items") or []:
        method = claim.get("method")
        if not method or of_method(ok, method).empty:
            continue
        if claim.get("baseline"):
            others = [claim["baseline"]]
        elif claim.get("family"):
            others = sorted({m for m in ok["method"] if family(m) == claim["family"]})
        else:
            continue
        tasks = set(claim["tasks"]) if claim.get("tasks") else None
        for other in others:
            if of_method(ok, other).empty:
                continue
            old = pairs.get((method, other), tasks)  # a pair of several claims: the union of their tasks
            pairs[(method, other)] = None if old is None or tasks is None else old | tasks
    return pairs


def slug(method: str) -> str:
    """A method spec as a folder name: 'magicpig:K=10,L=150' -> 'magicpig_K=10_L=150'."""
    return re.sub(r"[^A-Za-z0-9=.+-]+", "_", method).strip("_") or "method"


def paired_units(acc: pd.DataFrame, a: str, b: str, tasks: set[str] | None) -> list[PairedUnit]:
    """One ``PairedUnit`` per (task, length) where both ``a`` and ``b`` have an ok run, ids of both paired."""
    ok = acc[acc["status"] == "ok"]
    runs_a = {(r.task, int(r.length)): Path(r.path) for r in of_method(ok, a).itertuples()}
    runs_b = {(r.task, int(r.length)): Path(r.path) for r in of_method(ok, b).itertuples()}
    units = []
    for task, length in sorted(set(runs_a) & set(runs_b)):
        if tasks is not None and task not in tasks:
            continue
        (sa, rows_a), (sb, rows_b) = _scored(runs_a[(task, length)]), _scored(runs_b[(task, length)])
        units.append(PairedUnit(task, length, [i for i in sa if i in sb], sa, sb, rows_a, rows_b))
    return units


def _scored(run: Path) -> tuple[dict, dict]:
    """(score by sample id, prediction row by sample id) of one run, only the samples with a prediction row."""
    rows = prediction_rows(run, warn=lambda _: None)
    return {i: s for i, s in sample_scores(run).items() if i in rows}, rows


def cell(text) -> str:
    """Untrusted text as an inert Markdown table cell (module docstring)."""
    text = str(text)
    cut = len(text) > CELL_CHARS
    text = re.sub(r"\r\n|\r|\n", "⏎", text[:CELL_CHARS])
    text = "".join(ch for ch in text if ch.isprintable() or ch == " ")
    return _PUNCTUATION.sub(r"\\\1", text) + ("…" if cut else "")


def _plain(spec: str) -> str:
    """A method spec for the summary line (GitHub shows it without Markdown): only a spec's characters kept."""
    return re.sub(r"[^A-Za-z0-9=.,:+-]", "", str(spec))[:CELL_CHARS] or "?"


def disagreements_section(acc: pd.DataFrame, ref: dict, out: Path) -> list[str]:
    """The section (module docstring); writes the CSVs under ``out/disagreements`` (rebuilt every time)."""
    parts = ["## Where methods disagree"]
    folder = Path(out) / FOLDER
    if folder.is_dir():
        shutil.rmtree(folder)
    pairs = claim_pairs(ref, acc)
    if not pairs:
        return parts + ["No pair of methods the claims compare has results in this run."]
    parts.append(f"For each pair of methods the claims compare (A - B), the samples on which their scores differ, "
                 f"largest difference first: the first {ROWS_SHOWN} per task and length here, every one in the "
                 f"linked CSV (under `{FOLDER}/`). Answers are cut to {CELL_CHARS} characters; ⏎ marks a line "
                 "break.")
    for (a, b), tasks in sorted(pairs.items()):
        units = paired_units(acc, a, b, tasks)
        if not units:
            continue
        written = write(units, folder / f"{slug(a)}__vs__{slug(b)}")
        total = sum(k for _, _, k in written)
        paired = sum(len(u.ids) for u, _, _ in written)
        parts.append(f"<details><summary>A = {_plain(a)}, B = {_plain(b)}: {total} of {paired} paired samples "
                     f"disagree over {len(written)} task-length unit{'s' * (len(written) != 1)}</summary>")
        for unit, path, count in written:
            link = path.relative_to(Path(out)).as_posix()
            parts.append(f"**{cell(unit.task)} @ {unit.length}**: {count} of {len(unit.ids)} paired samples "
                         f"disagree ([CSV]({link}))")
            if count:
                parts.append(_table(unit))
        parts.append("</details>")
    return parts


def _table(unit: PairedUnit) -> str:
    shown = disagreeing(unit)[:ROWS_SHOWN]
    header = ["id", "question", "gold", "answer A", "score A", "cost A", "answer B", "score B", "cost B"]
    return table(header, [[cell(r["id"]), cell(r["question"]), cell(r["gold"]), cell(r["answer_a"]),
                           fmt(r["score_a"]), _cost(r["cost_a"]), cell(r["answer_b"]), fmt(r["score_b"]),
                           _cost(r["cost_b"])] for r in shown])


def _cost(value) -> str:
    return fmt(value, pct=True) if isinstance(value, (int, float)) and not isinstance(value, bool) else cell(value)
