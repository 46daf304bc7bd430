"""The report's "Where methods disagree" section: hand-built results where two methods disagree on exactly k
samples give a CSV of exactly those k, a collapsed block with min(k, ROWS_SHOWN) rows and the CSV's link, and a
hostile model answer stays inert text in REPORT.html."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from magicpig.harness.report import build_report
from magicpig.harness.results_tree import collect_metrics, load_reference
from magicpig.harness.report.disagreements_section import ROWS_SHOWN, cell, disagreements_section
from magicpig.harness.report.html import render_html
from magicpig.harness.results_paths import method_dir

MAGICPIG, TASK, LENGTH = "magicpig:K=10,L=150", "ruler/cwe", 4096
HOSTILE = "</details><img src=x onerror=alert(1)> a | b\nnext line"


def write_run(root: Path, spec: str, scores: dict[str, float], answers: dict[str, str] | None = None) -> None:
    """One method's metrics.json and predictions.jsonl under ``root/accuracy``."""
    folder = method_dir(root / "accuracy", TASK, LENGTH, spec)
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": i, "prediction": (answers or {}).get(i, f"answer of {spec} to {i}"), "references": [f"gold {i}"],
             "score": s, "cost": 0.04, "cost1": 0.0, "meta": {"question": f"question {i}"}}
            for i, s in scores.items()]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    metrics = {"task": TASK, "length": LENGTH, "model": "m", "method": spec, "status": "ok", "setup": "A",
               "score": sum(scores.values()) / len(scores), "cost": 0.04, "cost1": 0.0,
               "counts": {"samples": len(scores), "scored": len(scores)}}
    (folder / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")


def two_methods(root: Path, n: int, k: int, answers: dict[str, str] | None = None) -> set[str]:
    """dense right on all n samples, MagicPIG wrong on the first k: the ids they disagree on."""
    ids = [f"{TASK}/{LENGTH}/{i}" for i in range(n)]
    write_run(root, "dense", {i: 100.0 for i in ids})
    write_run(root, MAGICPIG, {i: (0.0 if j < k else 100.0) for j, i in enumerate(ids)}, answers)
    return set(ids[:k])


def section(root: Path, out: Path) -> str:
    return "\n\n".join(disagreements_section(collect_metrics(root / "accuracy"), load_reference(), out))


@pytest.mark.parametrize("k", [3, ROWS_SHOWN + 4])
def test_csv_lists_exactly_the_disagreeing_samples_and_the_section_a_bounded_table(tmp_path, k):
    wrong = two_methods(tmp_path / "results", 25, k)
    out = tmp_path / "fig"
    md = section(tmp_path / "results", out)
    csv_path = out / "disagreements" / "magicpig_K=10_L=150__vs__dense" / "ruler__cwe_4096.csv"
    with csv_path.open(encoding="utf-8") as f:
        got = list(csv.DictReader(f))
    assert {r["id"] for r in got} == wrong and len(got) == k
    assert all(float(r["score_a"]) == 0.0 and float(r["score_b"]) == 100.0 for r in got)
    assert got[0]["question"].startswith("question ") and got[0]["gold"].startswith("gold ")
    assert f"{k} of 25 paired samples disagree" in md
    assert "(disagreements/magicpig_K=10_L=150__vs__dense/ruler__cwe_4096.csv)" in md
    block = md.split("<details>", 1)[1].split("</details>", 1)[0]
    body_rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| id |")]
    assert len(body_rows) == min(k, ROWS_SHOWN)
    page = render_html(md, out)
    assert page.count("<details><summary>") == 1 and page.count("</details>") == 1
    assert 'href="disagreements/magicpig_K=10_L=150__vs__dense/ruler__cwe_4096.csv"' in page


def test_every_quest_run_pairs_with_magicpig_and_agreeing_runs_get_a_header_only_csv(tmp_path):
    root = tmp_path / "results"
    two_methods(root, 6, 0)
    write_run(root, "quest:page_size=32", {f"{TASK}/{LENGTH}/{i}": 100.0 for i in range(6)})
    md = section(root, tmp_path / "fig")
    pairs = sorted(p.name for p in (tmp_path / "fig" / "disagreements").iterdir())
    assert pairs == ["magicpig_K=10_L=150__vs__dense", "magicpig_K=10_L=150__vs__quest_page_size=32"]
    csv_text = (tmp_path / "fig" / "disagreements" / pairs[0] / "ruler__cwe_4096.csv").read_text()
    assert csv_text.splitlines() == ["id,question,gold,answer_a,score_a,cost_a,answer_b,score_b,cost_b"]
    assert md.count("0 of 6 paired samples disagree ([CSV]") == 2 and "| id |" not in md


def test_no_pair_of_the_claims_says_so(tmp_path):
    write_run(tmp_path / "results", "dense", {"a": 100.0})
    assert "No pair of methods the claims compare" in section(tmp_path / "results", tmp_path / "fig")


def test_hostile_answer_is_inert_in_report_html(tmp_path):
    root = tmp_path / "results"
    first = f"{TASK}/{LENGTH}/0"
    two_methods(root, 5, 2, answers={first: HOSTILE})
    path = build_report(root, tmp_path / "fig", "t")
    md = path.read_text(encoding="utf-8")
    page = path.with_suffix(".html").read_text(encoding="utf-8")
    row = next(line for line in md.splitlines() if line.startswith(f"| {cell(first)} |"))
    assert row.count(" | ") == 8  # nine cells: the answer's '|' is escaped, its newline shown as ⏎
    assert "next line" in row and "⏎" in row
    assert "<img src=x" not in page and "onerror=alert(1)>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("<details>") == page.count("</details>") == 1  # the answer's </details> closes nothing
    cells = re.findall(r"<td>([^<]*?&lt;/details&gt;[^<]*)</td>", page)
    assert len(cells) == 1 and "a | b" in cells[0]


def test_render_html_turns_only_whole_marker_paragraphs_into_tags():
    md = ("<details><summary>pair *x*</summary>\n\nbody `</details>`\n\n| a |\n|---|\n| </details> |\n\n"
          "</details>\n\n</details>\n\n<details><summary>open</summary>")
    page = render_html(md, ".")
    assert page.count("<details><summary>") == 2
    assert "<summary>pair <em>x</em></summary>" in page  # the summary as the parser rendered it
    assert page.count("</details>") == 2  # the block's own close and the one left open; the stray one is text
    assert "<p>&lt;/details&gt;</p>" in page and "<td>&lt;/details&gt;</td>" in page
