"""The coverage table: one row per table and figure of the paper, each with a computed status and reason; the
registry, the figure list and the report agree. Table 7 from decode rows and Table 8 from model shapes."""
import re
from pathlib import Path

import pandas as pd
import pytest
from test_report_figures import synthetic_tree

from magicpig.harness.overhead import overhead
from magicpig.harness.report import build_report
from magicpig.harness.results_tree import load_reference
from magicpig.harness.report.coverage import NOT_RUN, PARTIAL, REPRODUCED, anchor, headings_of, section_of
from magicpig.harness.report import figures, paper_items
from magicpig.harness.report.coverage_run import Run
from magicpig.harness.report.sections import report_sections
from magicpig.harness.report.tables_system import TABLE8_TOLERANCE, kl_throughput, table8_cells
from magicpig.harness.result_files import ERROR_SUMMARY_CSV

PAPER_ITEMS = [f"Table {i}" for i in range(1, 14)] + [f"Figure {i}" for i in range(1, 12)]
CPU_CONFIG = {"model": "smollm2", "ruler": {"tasks": ["cwe"], "lengths": [1024], "samples": 1, "methods": ["dense"]},
              "longbench": {"tasks": [], "samples": 0}, "gsm8k": {"samples": 0},
              "ablations": {"kl_grid": ["magicpig:K=8,L=75"], "centering_methods": ["magicpig"]},
              "estimation": {"length": 1024}, "decode_bench": {"lengths": [2048], "methods": ["dense"]},
              "sweeps": {"tasks": ["cwe", "fwe"], "length": 1024, "topk_budgets": [32]}}


def coverage_rows(report: str) -> dict[str, list[str]]:
    section = report.split("## Coverage of the paper")[1].split("\n## ")[0]
    rows = [re.split(r"(?<!\\)\|", line.strip().strip("|")) for line in section.splitlines()
            if line.startswith("| ")][1:]
    assert all(len(r) == 4 for r in rows), rows  # a '|' inside a cell is escaped
    return {r[0].strip(): [c.strip() for c in r] for r in rows}


def test_registry_declares_every_figure_and_only_figures_of_the_list():
    declared = {f for item in paper_items.ITEMS for f in item.figures}
    assert declared == set(figures.FIGURES), (declared ^ set(figures.FIGURES))


def test_registry_has_every_table_and_figure_of_the_paper():
    labels = [item.label for item in paper_items.ITEMS]
    assert len(labels) == len(set(labels))
    for label in PAPER_ITEMS:
        assert any(re.fullmatch(re.escape(label) + "[a-c]?", x) for x in labels), label


@pytest.mark.parametrize("tree", ["synthetic", "empty"])
def test_every_item_has_a_row_with_a_status_and_its_links_resolve(tmp_path, tree):
    root = tmp_path / "results"
    synthetic_tree(root) if tree == "synthetic" else root.mkdir()
    report = build_report(root, tmp_path / "fig", "t", CPU_CONFIG).read_text()
    rows = coverage_rows(report)
    assert list(rows) == [item.label for item in paper_items.ITEMS]
    anchors = {anchor(h) for h in headings_of([report])}
    for item in paper_items.ITEMS:
        label, shows, where, status = rows[item.label]
        assert shows, label
        assert re.fullmatch(f"{REPRODUCED}(: \\S.*)?", status) or re.match(f"({PARTIAL}|{NOT_RUN}): \\S", status), \
            (label, status)
        for target in re.findall(r"\]\(([^)]+)\)", where):
            assert (target[1:] in anchors) if target.startswith("#") else target in figures.FIGURES, (label, target)
        if status.startswith(REPRODUCED) and section_of(item, report_sections()):
            assert "(#" in where, (label, where)  # an item this run reproduced links to its section
    for label in ("Figure 1", "Figure 2a", "Figure 5a", "Figure 6c", "Figure 9b", "Figure 10", "Figure 11"):
        assert "not produced by this build" not in rows[label][3], (label, rows[label][3])
        assert ".png](" in rows[label][2], (label, rows[label][2])  # links its figure


def test_status_follows_the_config_and_the_results(tmp_path):
    root = synthetic_tree(tmp_path / "results")
    rows = coverage_rows(build_report(root, tmp_path / "fig", "t", CPU_CONFIG).read_text())
    assert rows["Table 8"][3] == ("reproduced here: all 6 rows, 18 cells within 3% of the paper's (computed from "
                                  "model shapes by formula, no measurement)")
    # the synthetic tree has decode rows of dense and magicpig on a CPU: Table 7 is partial, saying why
    assert rows["Table 7"][3].startswith("partial: 1 of the paper's 6 (K, L) settings measured (preset `paper` "
                                         "measures all 6)")
    assert "needs a GPU" in rows["Table 7"][3]
    # RULER ran at 1024 tokens on smollm2: partial, naming the context the model lacks
    assert "needs a longer context than `smollm2` has: 8192" in rows["Table 3"][3]
    assert rows["Table 2"][3].startswith("not run in this preset: not run by this preset (runs in `")
    # infini_igsm: this config has no `reasoning` block, the `cpu` preset of config/ has one
    assert rows["Table 6"][3].startswith("not run in this preset: needs hub data (infini_igsm); not run by this "
                                         "preset (runs in `cpu`")
    with_reasoning = {**CPU_CONFIG, "reasoning": {"tasks": ["4k_close_op2"], "samples": 3, "methods": ["dense"]}}
    rows6 = coverage_rows(build_report(root, tmp_path / "fig6", "t", with_reasoning).read_text())
    assert rows6["Table 6"][3] == "partial: no infini_igsm results in this run yet"
    # Figure 9a: one L unless the sweeps vary it
    assert "at one (K, L); the paper varies L" in rows["Figure 9a"][3]
    swept = {**CPU_CONFIG, "sweeps": {**CPU_CONFIG["sweeps"], "centering": {"K": 10, "L": [100, 300]}}}
    rows9 = coverage_rows(build_report(root, tmp_path / "fig9", "t", swept).read_text())
    assert "varies L" not in rows9["Figure 9a"][3] and rows9["Figure 9a"][3].startswith("partial: on `smollm2`")
    no_bench = {k: v for k, v in CPU_CONFIG.items() if k != "decode_bench"}
    (root / "throughput" / "decode.csv").unlink()
    rows = coverage_rows(build_report(root, tmp_path / "fig2", "t", no_bench).read_text())
    assert rows["Table 7"][3].startswith("not run in this preset: not run by this preset (runs in `")
    rows = coverage_rows(build_report(root, tmp_path / "fig3", "t", CPU_CONFIG).read_text())
    assert rows["Table 7"][3] == ("partial: no `throughput/decode.csv` in this run yet; `cpu_baselines.png` lacks "
                                  "`throughput/decode.csv (CPU rows)`")


def test_table8_formula_reproduces_the_papers_numbers():
    """Hash tables: layers x kv heads x L x tokens x id bytes, in GiB (16-bit ids up to 64K tokens, 32-bit
    beyond), the projector d x K*L in 16 bits, CO over WQ, WK, WV and the MLP (the projections the paper's
    caption lists): every cell of the paper's six rows within 3%; counting WO too would put Llama-3.1-8B's CO
    at 3.52%, outside it."""
    t8 = load_reference()["overhead_table8"]["rows"]
    assert len(t8) == paper_items.TABLE8_ROWS == 6
    checks = table8_cells(load_reference())
    assert len(checks) == 18 and all(c.passes for c in checks), [c.text() for c in checks if not c.passes]
    o = overhead("llama-3.1-8b", 10, 150, 98304)
    assert o.projector_bytes == 384_000 and o.tables_int16_bytes is None  # 16-bit ids end at 65536
    assert o.projection_flops_share == pytest.approx(7_680_000 / (218_103_808 - 4096 * 4096))
    assert abs(7_680_000 / 218_103_808 - 0.038) > TABLE8_TOLERANCE * 0.038  # with WO: outside the tolerance
    with pytest.raises(ValueError, match="model"):
        overhead("no-such-model", 10, 150, 1024)


def test_table8_is_partial_until_its_six_rows_and_cells_pass(monkeypatch):
    """The old transcription (two rows) or a cell off by more than the tolerance leaves Table 8 partial,
    naming what is missing; all six rows within it make it reproduced, saying what was compared."""
    from magicpig.harness import results_tree

    full = load_reference()
    run = Run("t", {}, Path("."))
    assert paper_items.table8(run).startswith("reproduced here: all 6 rows")
    two = {**full, "overhead_table8": {"rows": full["overhead_table8"]["rows"][:2]}}
    monkeypatch.setattr(results_tree, "load_reference", lambda: two)
    assert paper_items.table8(run).startswith("partial: 2 of the paper's 6 rows checked")
    off = [dict(r) for r in full["overhead_table8"]["rows"]]
    off[0]["co_pct"] = 3.52  # what counting WO too gives
    monkeypatch.setattr(results_tree, "load_reference", lambda: {**full, "overhead_table8": {"rows": off}})
    status = paper_items.table8(run)
    assert status.startswith("partial: 1 of 18 cells not within 3% of the paper's: llama-3.1-8b (10, 150) 96K CO (%)")


def test_table7_reads_latency_and_throughput_under_the_limit():
    rows = [{"context": 4096, "batch": b, "method": m, "backend": "offload", "fits": f, "ms_per_token": ms,
             "tokens_per_s": 1000 * b / ms if ms else ""}
            for m, b, ms, f in [("magicpig:K=10,L=150", 1, 50.0, True), ("magicpig:K=10,L=150", 4, 150.0, True),
                                ("magicpig:K=10,L=150", 16, 400.0, True), ("magicpig:K=10,L=150", 64, "", False),
                                ("dense", 1, 300.0, True)]]
    t = kl_throughput(pd.DataFrame(rows), 200).set_index("method")
    mp = t.loc["magicpig"]
    assert mp.ms_batch1 == 50.0 and mp.max_batch == 16 and mp.max_tokens_per_s == pytest.approx(40.0)
    assert mp.limit_batch == 4 and mp.limit_tokens_per_s == pytest.approx(1000 * 4 / 150)
    assert pd.isna(t.loc["dense"].limit_tokens_per_s)  # its only row is above the limit


def test_table7_section_shows_which_numbers_ran_under_load(tmp_path):
    """The bench's under_load flag reaches Table 7's cells: the batch-1 latency measured while another process
    shared the CPU reads '(under load)', the others do not."""
    from magicpig.harness.report.tables_system import table7_section

    rows = [{"context": 4096, "batch": b, "method": "magicpig:K=10,L=150", "backend": "offload", "fits": True,
             "ms_per_token": ms, "tokens_per_s": 1000 * b / ms, "under_load": load}
            for b, ms, load in [(1, 50.0, True), (4, 150.0, False)]]
    (tmp_path / "throughput").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "throughput" / "decode.csv", index=False)
    t = kl_throughput(pd.DataFrame(rows), 200).iloc[0]
    assert t.ms_batch1_under_load and not t.max_under_load and not t.limit_under_load
    text = "\n".join(table7_section(tmp_path, load_reference()))
    row = next(line for line in text.splitlines() if line.startswith("| 4096 |"))
    assert row.count("(under load)") == 1 and "50 (under load)" in row


SUB_PANELS = ([f"Table {i}" for i in range(1, 14)] + ["Figure 1", "Figure 2a", "Figure 2b", "Figure 2c", "Figure 3",
              "Figure 4"] + [f"Figure {i}{p}" for i in (5, 6) for p in "abc"] + ["Figure 7a", "Figure 7b"]
              + [f"Figure {i}{p}" for i in (8, 9) for p in "abc"] + ["Figure 10", "Figure 11"])


def test_the_registry_has_a_row_per_sub_panel_in_the_papers_order():
    """Every sub-panel the paper labels (2a-c, 5a-c, 6a-c, 7a-b, 8a-c, 9a-c) has its own row; Figure 3 is the
    paper's TopK vs oracle sampling error (drawn by error_vs_budget.png), Figure 2c and 7 are diagrams."""
    items = {item.label: item for item in paper_items.ITEMS}
    assert list(items) == SUB_PANELS
    fig3 = items["Figure 3"]
    assert "4x" in fig3.shows and "sink" not in fig3.shows and fig3.figures == ("error_vs_budget.png",)
    run = Run("t", {}, Path("."))
    for label in ("Figure 2c", "Figure 7a", "Figure 7b"):
        assert items[label].check(run).startswith("not run in this preset: a diagram, no data"), label
    assert "32 random inputs" in items["Figure 5a"].shows and "-0.9 and -0.8" in items["Figure 5c"].shows


ATTENTION_ITEMS = ("Figure 2a", "Figure 3", "Figure 4", "Figure 5c", "Figure 6a", "Figure 6b", "Figure 10", "Figure 11")


def test_attention_level_items_say_the_length_their_captures_ran_at(tmp_path):
    """The length comes from the capture files (or the tables' prompt column, their stems), else the preset's
    estimation.length, said as such; at the paper's 16K no length is missing."""
    root = synthetic_tree(tmp_path / "results")
    rows = coverage_rows(build_report(root, tmp_path / "fig", "t", CPU_CONFIG).read_text())
    for label in ATTENTION_ITEMS:
        assert re.search(r"at (1024|2048) tokens.*, the paper at 16384", rows[label][3]), (label, rows[label][3])
    assert "at 1024 tokens (the preset's `estimation.length`; no capture file found)" in rows["Figure 4"][3]
    captures = root / "estimation" / "captures"
    captures.mkdir()
    (captures / "capture_16384_p0.safetensors").write_bytes(b"")
    check = paper_items.estimation(ERROR_SUMMARY_CSV)
    run16 = Run("t", {"model": "meta-llama/Llama-3.1-8B-Instruct"}, root)
    status = check(run16)
    assert "16384" not in status.split("from")[0] and status.startswith("partial: from 1 capture"), status
    (captures / "capture_16384_p1.safetensors").write_bytes(b"")
    for name in ("error_summary.csv",):
        df = pd.read_csv(root / "estimation" / name).assign(prompts=2)
        df.to_csv(root / "estimation" / name, index=False)
    assert check(run16) == "reproduced here: at 16384 tokens, the paper's length"
