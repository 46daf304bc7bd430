"""The model-specific paper tables of the report: Table 1's three columns, Tables 4 / 5 beside the run's own
model (or the preset that runs them), Table 6 by set and operations; and the reference rows they read."""
import json

import pytest
import yaml

from magicpig.harness.report import build_report
from magicpig.harness.results_tree import canonical, collect_metrics, load_reference
from magicpig.harness.report.paper_tables import paper_model

from test_report import ROOT, write_metrics


def set_model(root, model):
    for path in root.rglob("metrics.json"):
        m = json.loads(path.read_text())
        m["model"] = model
        path.write_text(json.dumps(m))


def test_table1_has_three_task_columns(tmp_path):
    acc = tmp_path / "results" / "accuracy"
    write_metrics(acc, "gsm8k", 4096, "dense", 40.0, 1.0)
    write_metrics(acc, "coqa", 4096, "dense", 60.0, 1.0)
    write_metrics(acc, "mmlu_cot", 4096, "dense", 30.0, 1.0)
    write_metrics(acc, "coqa", 4096, "quest:page_size=32,ratio=0.1,local=24", None, None, status="skipped",
                  reason="coqa: MAGICPIG_OFFLINE=1 and the file is not cached")
    report = build_report(tmp_path / "results", tmp_path / "fig", "test").read_text()
    t1 = report.split("## GSM8K-CoT, COQA, MMLU-CoT (paper Table 1")[1].split("\n## ")[0]
    assert ("| method | ours gsm8k | ours coqa | ours mmlu_cot | ours avg | cost2 | cost1 | total cost | paper gsm8k_cot "
            "| paper coqa | paper mmlu_cot | paper cost1 | paper cost2 | paper total |") in t1
    assert "| `dense` | 40 | 60 | 30 | 43.3 | 100.0% | 0.00% | 100.0% | 77.6 | 78.5 | 65.2 | 0.00% | 100.0% | 100.0% |" in t1
    assert ("| `quest:page_size=32,ratio=0.1,local=24` | — | — | — | — | — | — | — | 64.5 | 65 | 48 | 3.00% | 10.0% "
            "| 13.0% |") in t1
    assert "MAGICPIG_OFFLINE=1" in t1 and "COQA token F1" in t1
    # the local-window decision, with the paper's sentence
    assert "or 24 (for lm-eval-harness) tokens as well as layer-{0, 16} are statically preserved." in t1
    assert "MagicPIG and Quest both run with `local=24`" in t1


def test_table2_costs_and_the_code_model_block(tmp_path):
    """Quest's measured cost1 (1/page_size) and total beside the paper's Cost1 / Cost_total; a CodeLlama run sits
    beside Table 2's CodeLlama-13B-16K rows (RepoBench-P and LCC only)."""
    acc = tmp_path / "results" / "accuracy"
    write_metrics(acc, "longbench/lcc", 15500, "dense", 70.0, 1.0)
    write_metrics(acc, "longbench/lcc", 15500, "quest:ratio=0.05", 69.0, 0.05)
    path = acc / "longbench/lcc/15500/quest@ratio-0.05/metrics.json"
    m = json.loads(path.read_text())
    m["cost1"] = 1 / 16
    path.write_text(json.dumps(m))
    set_model(acc, "codellama/CodeLlama-13b-hf")
    report = build_report(tmp_path / "results", tmp_path / "fig", "test").read_text()
    t2 = report.split("## LongBench (paper Table 2)")[1].split("\n## ")[0]
    assert ("| `quest:ratio=0.05` | — | — | 69 | — | — | — | 69 (1/6) | 5.00% | 6.25% | 11.2% | — | 56.4 | 74.4 | — "
            "| — | — | 65.4 | 6.00% | 5.00% | 11.0% |") in t2
    assert "| `magicpig:K=10,L=150` (paper only) | — | — | — | — | — | — | — | — | — | — | — | 56.9 | 74 |" in t2


def test_tables_4_5_6_say_what_runs_them_when_not_run(tmp_path):
    acc = tmp_path / "results" / "accuracy"
    write_metrics(acc, "ruler/vt", 4096, "dense", 80.0, 1.0)
    report = build_report(tmp_path / "results", tmp_path / "fig", "test").read_text()
    t4 = report.split("(paper Table 4)\n")[1].split("\n## ")[0]
    assert "`megabeam-mistral-7b-512k`: not run in this preset: needs a GPU, the weights of " \
           "aws-prototyping/MegaBeam-Mistral-7B-512k" in t4 and "(preset `paper-long`)" in t4
    assert "| `dense` | 91.7 | 88.1 | 83.5 | 83.7 | 83.5 | 82.5 |" in t4 and "(preset `paper-long-prolong`)" in t4
    t5 = report.split("(paper Table 5)\n")[1].split("\n## ")[0]
    assert "(preset `paper-70b`)" in t5 and "| `magicpig:K=9,L=110` | 95.7 | 93.5 | 88.4 | 79.4 |" in t5
    t6 = report.split("(paper Table 6)\n")[1].split("\n## ")[0]
    assert "Not run in this preset: needs the hub data sets YangZhoumill/infini_igsm_4k_noise_close" in t6


def test_a_megabeam_run_sits_beside_the_megabeam_rows(tmp_path):
    acc = tmp_path / "results" / "accuracy"
    for n, s in ((16384, 90.0), (262144, 80.0)):
        write_metrics(acc, "ruler/vt", n, "dense", s, 1.0)
        write_metrics(acc, "ruler/vt", n, "magicpig:K=9,L=120", s - 1, 0.04)
    set_model(acc, "aws-prototyping/MegaBeam-Mistral-7B-512k")
    report = build_report(tmp_path / "results", tmp_path / "fig", "test").read_text()
    t3, rest = report.split("(paper Table 3)\n")[1].split("(paper Table 4)\n")
    assert "| `magicpig:K=9,L=120` | 89 | 79 | 1/1 | 4.00% | 90.7 | 88.5 | 82.9 | 82.4 |" in t3  # MegaBeam's row
    assert "Paper rows: `megabeam-mistral-7b-512k`." in t3
    t4 = rest.split("\n## ")[0]
    assert "| method | ours 16K | ours 256K | tasks | cost2 | paper 16K | paper 32K | paper 64K | paper 96K | " \
           "paper 128K | paper 256K |" in t4
    assert "| `dense` | 90 | 80 | 1/1 | 100.0% | 91.7 | 88.1 | 83.5 | 83.7 | 83.5 | 82.5 |" in t4
    assert "| `quest:ratio=0.04` (paper only) | — | — | — | — | 83.3 |" in t4
    assert "llama3-8b-prolong-512k" not in t4  # only the run's model


def test_table6_by_set_and_operations(tmp_path):
    acc = tmp_path / "results" / "accuracy"
    write_metrics(acc, "infini_igsm/4k_close_op2", 7168, "dense", 50.0, 1.0)
    write_metrics(acc, "infini_igsm/4k_close_op2", 7168, "topk:budget=0.02", 25.0, 0.02)
    report = build_report(tmp_path / "results", tmp_path / "fig", "test").read_text()
    t6 = report.split("(paper Table 6)\n")[1].split("\n## ")[0]
    k4, k8 = t6.split("### 4k_close")[1].split("### 8k_close")
    assert "| `dense` | 50 | — | — | 50 (1/3) | 100.0% | 87.4 | 71.4 | 26.8 |" in k4
    assert "| `topk` | 25 | — | — | 25 (1/3) | 2.00% | 71.5 | 44 | 11.3 |" in k4  # budget 0.02 is the default
    assert "| `oracle:budget=0.3` (paper only) | — | — | — | — | — | 88.1 | 72.4 | 27.6 |" in k4
    assert "Not run in this preset" in k8 and "| `quest:ratio=0.06` | 54.8 | 30 | 11.1 |" in k8


def test_paper_model_lookup(tmp_path):
    ref = load_reference()
    acc = tmp_path / "a"
    write_metrics(acc, "ruler/vt", 4096, "dense", 1.0, 1.0)
    df = collect_metrics(acc)
    assert paper_model(df, ref) == "llama-3.1-8b-instruct"  # smollm2: compare trends with the 8B rows
    df["model"] = "/models/hub/Llama-3.1-70B-Instruct"
    assert paper_model(df, ref) == "llama-3.1-70b-instruct"
    df["model"] = "princeton-nlp/llama-3-8b-prolong-512k-instruct"
    assert paper_model(df, ref) == "llama3-8b-prolong-512k"


def test_reference_rows_agree_across_tables():
    """Table 4's first four columns repeat the same model's Table 3 rows; each preset runs its table's rows."""
    ref = load_reference()
    for model, rows in ref["ruler_table4"].items():
        if model != "lengths":
            for spec, values in rows.items():
                assert ref["ruler_table3"][model][spec] == values[:4], (model, spec)
    presets = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["presets"]
    for preset, table, model in (("paper-long", "ruler_table4", "megabeam-mistral-7b-512k"),
                                 ("paper-long-prolong", "ruler_table4", "llama3-8b-prolong-512k"),
                                 ("paper-70b", "ruler_table5", "llama-3.1-70b-instruct")):
        p = presets[preset]
        assert ref["paper_models"][p["model"]] == model
        assert {canonical(k) for k in ref[table][model]} <= {canonical(m) for m in p["ruler"]["methods"]}
        assert max(p["ruler"]["lengths"]) == max(ref[table]["lengths"])
    paper = presets["paper"]["reasoning"]
    for set_name in ref["infini_igsm_table6"]["sets"]:
        assert {canonical(k) for k in ref["infini_igsm_table6"]["llama-3.1-8b-instruct"][set_name]} == \
            {canonical(m) for m in paper["methods"]}


@pytest.mark.parametrize("model", ["megabeam-mistral-7b-512k", "llama3-8b-prolong-512k"])
def test_table3_has_every_row_of_the_long_models(model):
    ref = load_reference()
    assert len(ref["ruler_table3"][model]) == {"megabeam-mistral-7b-512k": 7, "llama3-8b-prolong-512k": 6}[model]


def test_a_setting_run_at_one_length_says_so_in_the_ruler_table(tmp_path):
    """(10,240) runs at 16K only (Table 12): its RULER row counts its tasks there and names the lengths it ran."""
    acc = tmp_path / "results" / "accuracy"
    for n in (16384, 32768):
        write_metrics(acc, "ruler/vt", n, "dense", 90.0, 1.0)
    write_metrics(acc, "ruler/vt", 16384, "magicpig:K=10,L=240", 88.0, 0.04)
    report = build_report(tmp_path / "results", tmp_path / "fig", "test").read_text()
    t3 = report.split("(paper Table 3)\n")[1].split("(paper Table 4)\n")[0]
    assert "| `magicpig:L=240` | 88 | — | 1/1 (1 of 2 lengths) |" in t3  # canonical spec (K=10 is the default)
    assert "| `dense` | 90 | 90 | 1/1 |" in t3
