"""``magicpig compare``: results folders built by hand (a known difference, a tie, a mismatch of prompts,
samples that do not pair) give the claims table's intervals, the right verdicts, and clear refusals."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from magicpig.harness.cli import main
from magicpig.harness.compare import Side, compare
from magicpig.harness.provenance import prompt_hash
from magicpig.harness.results_paths import method_dir
from magicpig.harness.stats.paired import task_difference


def write_run(out: Path, spec: str, scores: dict[str, float], *, task: str = "ruler/cwe", length: int = 4096,
              template: str = "tokenizer", prompt_offset: int = 0, model: str = "smollm2") -> Path:
    """One method folder of a results tree: metrics.json and predictions.jsonl with provenance."""
    folder = method_dir(out, task, length, spec)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for k, (sid, score) in enumerate(scores.items()):
        prov = {"prompt_sha256": prompt_hash([1, 2, k + prompt_offset]), "chat_template": template,
                "truncation": {"side": "none", "length": length, "truncated": False},
                "decoding": {"greedy": True, "max_new_tokens": 32, "stop": [], "setup": "A"}}
        rows.append({"id": sid, "prediction": "x", "references": ["x"], "score": score, "cost": 0.1, "cost1": 0.0,
                     "provenance": prov})
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    metrics = {"task": task, "length": length, "model": model, "method": spec, "method_effective": spec,
               "setup": "A", "metric": "string_match", "task_settings": {"chat_template": template},
               "status": "ok", "score": sum(scores.values()) / len(scores), "cost": 0.1, "cost1": 0.0,
               "counts": {"samples": len(scores), "scored": len(scores)}}
    (folder / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    return folder


def binary(n: int, right: int, prefix: str = "ruler/cwe/") -> dict[str, float]:
    return {f"{prefix}{i}": (100.0 if i < right else 0.0) for i in range(n)}


def test_known_difference_matches_claims_interval_and_verdicts(tmp_path):
    a, b = binary(40, 36), binary(40, 12)
    write_run(tmp_path / "a", "dense", a)
    write_run(tmp_path / "b", "magicpig:K=10,L=150", b)
    c = compare(Side(tmp_path / "a"), Side(tmp_path / "b"), margin=5.0)
    (row,) = c.rows
    ref = task_difference("ruler/cwe", a, b)
    assert row["n"] == 40 and row["how"] == "Newcombe"
    assert row["difference"] == pytest.approx(60.0)
    assert (row["lower"], row["upper"]) == pytest.approx((ref.lo, ref.hi))
    assert row["mean_a"] == pytest.approx(90.0) and row["mean_b"] == pytest.approx(30.0)
    assert row["verdict"] == "A non-inferior"
    assert 0 < row["mde"] < row["upper"] - row["lower"]
    sup = compare(Side(tmp_path / "a"), Side(tmp_path / "b"), margin=5.0, superiority=True)
    assert sup.rows[0]["verdict"] == "A superior"
    back = compare(Side(tmp_path / "b"), Side(tmp_path / "a"), margin=5.0)
    assert back.rows[0]["verdict"] == "A inferior"
    assert back.rows[0]["difference"] == pytest.approx(-60.0)


def test_tie_is_inconclusive_for_superiority_and_non_inferior_at_a_wide_margin(tmp_path):
    scores = binary(40, 20)
    write_run(tmp_path / "a", "dense", scores)
    write_run(tmp_path / "b", "topk:budget=64", scores)
    sup = compare(Side(tmp_path / "a"), Side(tmp_path / "b"), margin=0.0, superiority=True)
    row = sup.rows[0]
    assert row["difference"] == 0.0 and row["lower"] < 0 < row["upper"]  # no disagreement, still a width
    assert row["verdict"].startswith("inconclusive")
    wide = compare(Side(tmp_path / "a"), Side(tmp_path / "b"), margin=-row["lower"] + 0.5)
    assert wide.rows[0]["verdict"] == "A non-inferior"
    narrow = compare(Side(tmp_path / "a"), Side(tmp_path / "b"), margin=-row["lower"] - 0.5)
    assert narrow.rows[0]["verdict"].startswith("inconclusive")


def test_two_methods_of_one_folder_and_task_average(tmp_path):
    for task in ("ruler/cwe", "ruler/fwe"):
        write_run(tmp_path, "dense", binary(30, 27, f"{task}/"), task=task)
        write_run(tmp_path, "quest:ratio=0.04", binary(30, 15, f"{task}/"), task=task)
    c = compare(Side(tmp_path, "dense"), Side(tmp_path, "quest:ratio=0.04"), margin=2.0)
    tasks = [r["task"] for r in c.rows]
    assert tasks == ["ruler/cwe", "ruler/fwe", "average of 2 tasks"]
    avg = c.rows[-1]
    assert avg["n"] == 60 and avg["difference"] == pytest.approx(40.0) and avg["how"] == "MOVER"
    assert avg["lower"] > c.rows[0]["lower"]  # two tasks narrow the average's interval
    with pytest.raises(ValueError, match="holds 2 methods"):
        compare(Side(tmp_path), Side(tmp_path, "dense"))
    with pytest.raises(ValueError, match="method 'streaming' has no results.*dense"):
        compare(Side(tmp_path, "streaming"), Side(tmp_path, "dense"))


def test_prompt_mismatch_is_refused_naming_the_field_or_warned(tmp_path):
    scores = binary(20, 10)
    write_run(tmp_path / "a", "dense", scores)
    write_run(tmp_path / "b", "dense", scores, prompt_offset=1000, template="none")
    with pytest.raises(ValueError) as err:
        compare(Side(tmp_path / "a"), Side(tmp_path / "b"))
    text = str(err.value)
    assert "prompt_sha256 differs on 20 of 20 pairs" in text
    assert "chat_template differs on 20 of 20 pairs" in text
    assert "task_settings differs" in text
    c = compare(Side(tmp_path / "a"), Side(tmp_path / "b"), allow_mismatch=True)
    assert any("MISMATCH" in w and "prompt_sha256" in w for w in c.warnings)
    assert c.rows[0]["n"] == 20


def test_samples_that_do_not_pair_are_refused(tmp_path):
    write_run(tmp_path / "a", "dense", binary(20, 10))
    other = {f"ruler/cwe/{i}": 100.0 for i in range(5, 25)}
    write_run(tmp_path / "b", "dense", other)
    with pytest.raises(ValueError, match=r"do not pair by id: 5 only in A .*5 only in B"):
        compare(Side(tmp_path / "a"), Side(tmp_path / "b"))
    c = compare(Side(tmp_path / "a"), Side(tmp_path / "b"), allow_mismatch=True)
    assert c.rows[0]["n"] == 15


def test_old_rows_without_provenance_are_compared_with_a_warning(tmp_path):
    folder_a = write_run(tmp_path / "a", "dense", binary(10, 5))
    write_run(tmp_path / "b", "dense", binary(10, 5))
    rows = [json.loads(line) for line in (folder_a / "predictions.jsonl").read_text().splitlines()]
    (folder_a / "predictions.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "provenance"}) + "\n" for r in rows))
    c = compare(Side(tmp_path / "a"), Side(tmp_path / "b"))
    assert any("10 pair(s) have no provenance" in w for w in c.warnings)


def test_cli_prints_markdown_writes_csv_and_refuses_in_one_line(tmp_path, capsys):
    write_run(tmp_path / "a", "dense", binary(30, 27))
    write_run(tmp_path / "b", "dense", binary(30, 9))
    out_csv = tmp_path / "cmp.csv"
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--margin", "3", "--superiority",
                 "--csv", str(out_csv)]) == 0
    text = capsys.readouterr().out
    assert "| ruler/cwe | 4096 | 30 | 90.0 | 30.0 | 60.0 |" in text and "A superior" in text
    rows = list(csv.DictReader(out_csv.open()))
    assert rows[0]["task"] == "ruler/cwe" and float(rows[0]["difference"]) == pytest.approx(60.0)
    assert main(["compare", str(tmp_path / "a")]) == 2
    assert "give both --method-a and --method-b" in capsys.readouterr().err
    write_run(tmp_path / "c", "dense", binary(30, 9), model="llama-3.1-8b")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "c")]) == 2
    assert "model differs" in capsys.readouterr().err


def test_disagreement_csvs_list_exactly_the_disagreeing_samples(tmp_path, capsys):
    a = binary(20, 15)
    b = dict(a)
    flipped = ["ruler/cwe/0", "ruler/cwe/3", "ruler/cwe/17"]
    for i in flipped:
        b[i] = 100.0 - b[i]
    write_run(tmp_path / "a", "dense", a)
    write_run(tmp_path / "b", "dense", b)
    write_run(tmp_path / "a", "dense", binary(20, 5, "ruler/fwe/"), task="ruler/fwe")
    write_run(tmp_path / "b", "dense", binary(20, 5, "ruler/fwe/"), task="ruler/fwe")
    out = tmp_path / "dis"
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--disagreements", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"| ruler/cwe | 4096 | 3 of 20 | {out / 'ruler__cwe_4096.csv'} |" in text
    rows = list(csv.DictReader((out / "ruler__cwe_4096.csv").open()))
    assert sorted(r["id"] for r in rows) == sorted(flipped)
    assert all(float(r["score_a"]) != float(r["score_b"]) and r["gold"] == "x" for r in rows)
    agree = (out / "ruler__fwe_4096.csv").read_text().splitlines()
    assert agree == [",".join(["id", "question", "gold", "answer_a", "score_a", "cost_a", "answer_b", "score_b",
                               "cost_b"])]


def test_graded_scores_use_the_claims_bootstrap_and_the_level_narrows_it(tmp_path):
    a = {f"ruler/cwe/{i}": float((i * 37) % 101) for i in range(30)}
    b = {k: max(0.0, v - (i % 3) * 10.0) for i, (k, v) in enumerate(a.items())}
    write_run(tmp_path / "a", "dense", a)
    write_run(tmp_path / "b", "dense", b)
    wide = compare(Side(tmp_path / "a"), Side(tmp_path / "b")).rows[0]
    ref = task_difference("ruler/cwe", a, b)
    assert wide["how"] == ref.how == "bootstrap"
    assert (wide["difference"], wide["lower"], wide["upper"]) == pytest.approx((ref.value, ref.lo, ref.hi))
    narrow = compare(Side(tmp_path / "a"), Side(tmp_path / "b"), level=0.8).rows[0]
    assert wide["lower"] < narrow["lower"] <= narrow["upper"] < wide["upper"]
    with pytest.raises(ValueError, match="margin: expected a number of points >= 0"):
        compare(Side(tmp_path / "a"), Side(tmp_path / "b"), margin=-1.0)
