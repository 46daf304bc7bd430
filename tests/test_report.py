"""The report is built from results files only, beside the paper's numbers, and says what is missing."""
import json
from pathlib import Path

import pytest
import yaml

from magicpig.harness.report import build_report
from magicpig.harness.report.build import table9
from magicpig.harness.report.collect import canonical, load_reference

ROOT = Path(__file__).resolve().parents[1]


def write_metrics(root, task, length, method, score, cost, status="ok", reason="", effective=None):
    folder = root / task / str(length) / method.replace(":", "@").replace(",", "+").replace("=", "-")
    folder.mkdir(parents=True)
    m = {"task": task, "length": length, "method": method, "score": score, "cost": cost, "cost1": 0.0,
         "status": status, "reason": reason, "setup": "A", "model": "smollm2", "counts": {"scored": 5}}
    if effective:
        m["method_effective"] = effective
    (folder / "metrics.json").write_text(json.dumps(m))


def test_report_tables_show_ours_beside_the_paper(tmp_path):
    res = tmp_path / "results"
    acc = res / "accuracy"
    write_metrics(acc, "ruler/cwe", 4096, "dense", 61.0, 1.0)
    write_metrics(acc, "ruler/vt", 4096, "dense", 80.0, 1.0)
    write_metrics(acc, "ruler/cwe", 4096, "magicpig:K=10,L=150", 55.0, 0.021)
    write_metrics(acc, "ruler/vt", 4096, "magicpig:K=10,L=150", 79.0, 0.019)
    write_metrics(acc, "ruler/qa_1", 4096, "dense", None, None, status="skipped", reason="SQuAD not reachable")
    write_metrics(acc, "longbench/trec", 0, "dense", None, None, status="skipped", reason="hub not reachable")
    report = build_report(res, tmp_path / "fig", "test").read_text()
    # paper Table 3 rows beside ours; (10,150) is the default spec, written `magicpig` in canonical form
    assert "| `dense` | 70.5 | 2/2 | 100.0% | 94.2 | 91.5 | 86.1 | 83 |" in report
    assert "| `magicpig` | 67 | 2/2 | 2.00% | 91.8 | 88.9 | 84.8 | 80 |" in report
    assert "2.00%" in report  # (10,150) measured cost: mean of 2.1% and 1.9%
    assert "SQuAD not reachable" in report and "hub not reachable" in report
    assert (tmp_path / "fig" / "ruler_per_task.png").stat().st_size > 1000
    assert "## Throughput and latency\n\nNot run." in report


def test_each_table_lists_the_papers_settings_beside_ours(tmp_path):
    """Our rows sit beside the paper's row of the same setting (canonical spec, the effective one for GSM8K's
    local=24 override), and the paper's settings we did not run are listed too."""
    acc = tmp_path / "results" / "accuracy"
    write_metrics(acc, "ruler/vt", 4096, "magicpig:L=150,K=10", 79.0, 0.02)
    write_metrics(acc, "longbench/trec", 7680, "quest:page_size=16,ratio=0.05", 50.0, 0.05)
    write_metrics(acc, "gsm8k", 4096, "magicpig:K=10,L=220", 30.0, 0.03, effective="magicpig:K=10,L=220,local=24")
    report = build_report(tmp_path / "results", tmp_path / "fig", "test").read_text()
    ruler, rest = report.split("## LongBench")
    longbench, gsm8k = rest.split("## GSM8K")
    assert "| `magicpig` | 79 | 1/1 | 2.00% | 91.8 | 88.9 | 84.8 | 80 |" in ruler
    assert "| `magicpig:K=9,L=120` (paper only) | — | — | — | 93.4 | 90.6 | 84.7 | 81.5 |" in ruler
    assert "| `quest:ratio=0.04` (paper only) | — | — | — | 86.3 |" in ruler
    assert "| `dense` (paper only) | — | — | — | 94.2 |" in ruler
    assert "| `quest:ratio=0.05` | — | — | — | — | 50 | — | 50 (1/6) | 5.00% | 45.7 | 49.7 |" in longbench
    assert "| `magicpig:K=8,L=75` (paper only) | — | — | — | — | — | — | — | — | 43.5 |" in longbench
    assert "| `magicpig:L=220` | 30 | 3.00% | 72.7 |" in gsm8k  # (10, 220) ran with GSM8K's local=24
    assert "| `magicpig:K=8,L=90,local=24` (paper only) | — | — | 71 |" in gsm8k
    assert "| `dense` (paper only) | — | — | 77.6 |" in gsm8k


@pytest.mark.parametrize("table,block", [("ruler_table3", "ruler"), ("longbench_table2", "longbench"),
                                         ("lm_eval_table1", "gsm8k")])
def test_paper_preset_runs_every_setting_of_its_table(table, block):
    """config/paper_reference.yaml has a row for every paper setting the `paper` preset runs on that benchmark,
    and the preset runs every row (the extra RULER baselines TopK / oracle / StreamingLLM have no paper row)."""
    preset = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["presets"]["paper"]
    ours = {canonical(m) for m in preset[block]["methods"]}
    paper = {canonical(k) for k in load_reference()[table]["llama-3.1-8b-instruct"]}
    assert paper <= ours
    assert {m.partition(":")[0] for m in ours - paper} <= {"topk", "oracle", "streaming"}


def test_table9_lookup():
    ref = load_reference()
    assert table9(ref, "magicpig:K=10,L=150") == 0.02
    assert table9(ref, "magicpig:K=9,L=120") == 0.04
    assert table9(ref, "magicpig:K=10,L=170") is None
    assert table9(ref, "dense") is None
