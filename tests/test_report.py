"""The report is built from results files only, beside the paper's numbers, and says what is missing."""
import json
from pathlib import Path

import pytest
import yaml

from magicpig.harness.report import build_report
from magicpig.harness.report.build import table9
from magicpig.harness.results_tree import canonical, load_reference

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
    # Table 2 with its cost columns: ours (cost2, cost1, total), then the paper's scores and costs
    assert ("| `quest:ratio=0.05` | — | — | — | — | 50 | — | 50 (1/6) | 5.00% | 0.00% | 5.00% | 45.7 | 49.7 | 64.9 "
            "| 100 | 71.7 | 91.5 | 70.6 | 6.00% | 5.00% | 11.0% |") in longbench
    assert "| `magicpig:K=8,L=75` (paper only) | — | — | — | — | — | — | — | — | — | — | 43.5 |" in longbench
    # Table 1: our GSM8K / COQA / MMLU-CoT columns, average, cost2, then the paper's three columns
    assert ("| `magicpig:L=220` | 30 | — | — | 30 (1/3) | 3.00% | 0.00% | 3.00% | 72.7 | 78.1 | 62.7 | 0.00% | 3.00% "
            "| 3.00% |") in gsm8k  # ran with local=24
    assert "| `magicpig:K=8,L=90,local=24` (paper only) | — | — | — | — | — | — | — | 71 | 78 | 61.3 |" in gsm8k
    assert "| `dense` (paper only) | — | — | — | — | — | — | — | 77.6 | 78.5 | 65.2 |" in gsm8k
    # Quest keeps the lm-eval 24-token window too (Sec. 5.1), so the paper's Quest rows carry local=24
    assert ("| `quest:page_size=32,ratio=0.1,local=24` (paper only) | — | — | — | — | — | — | — | 64.5 | 65 | 48 "
            "| 3.00% | 10.0% | 13.0% |") in gsm8k


@pytest.mark.parametrize("table,block", [("ruler_table3", "ruler"), ("longbench_table2", "longbench"),
                                         ("lm_eval_table1", "gsm8k"), ("lm_eval_table1", "lm_eval")])
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


def test_tune_kl_result_is_printed_once_per_target(tmp_path):
    """The command writes tune_kl_<target>.json: one table per target cost, from the command's own file (a
    tune_kl.json left by an older pipeline, which kept the command's stdout, is not read)."""
    est = tmp_path / "results" / "estimation"
    est.mkdir(parents=True)
    t = {"target_cost": 0.02, "K": 11, "L": 220, "measured_cost": 0.0204, "relative_error": 0.234,
         "baseline": {"K": 10, "L": 150, "measured_cost": 0.0276, "relative_error": 0.212}}
    (est / "tune_kl.json").write_text(json.dumps(t))
    (est / "tune_kl_0.02.json").write_text(json.dumps(t))
    (est / "tune_kl_0.05.json").write_text(json.dumps({**t, "target_cost": 0.05}))
    report = build_report(tmp_path / "results", tmp_path / "fig", "test").read_text()
    assert report.count("### Automatic (K, L) for a target cost of 2.00%") == 1
    assert "(`tune_kl_0.02.json`)" in report
    assert report.count("### Automatic (K, L) for a target cost of 5.00%") == 1


def test_accuracy_numbers_carry_bootstrap_intervals_and_counts(tmp_path):
    acc = tmp_path / "results" / "accuracy"
    write_metrics(acc, "ruler/vt", 4096, "dense", 50.0, 1.0)
    folder = next((acc / "ruler/vt/4096").iterdir())
    (folder / "predictions.jsonl").write_text(
        "".join(json.dumps({"id": f"s{i}", "score": s}) + "\n" for i, s in enumerate([100.0, 0.0] * 5)))
    write_metrics(acc, "ruler/cwe", 4096, "dense", 80.0, 1.0)  # no predictions.jsonl
    report = build_report(tmp_path / "results", tmp_path / "fig", "test").read_text()
    ruler = report.split("## LongBench")[0]
    row = next(line for line in ruler.splitlines() if line.startswith("| `dense` | 4096 |"))
    assert "50.0 [" in row and "(n=10)" in row and "80.0 (no samples)" in row and "(1/2 tasks)" in row
