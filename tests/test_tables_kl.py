"""The (K, L) ablation tables (paper Tables 10-13) beside ours, from a small results tree."""
import json

from magicpig.harness.results_tree import kl_grid_averages, load_reference
from magicpig.harness.report.coverage_run import Run
from magicpig.harness.report.tables_kl import kl_table_status, kl_tables_section, paper_columns


def _metrics(root, folder, task, length, method, score, cost):
    path = root / folder / task / str(length) / method.replace(":", "_").replace(",", "_") / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": task, "length": length, "method": method, "score": score, "cost": cost,
                                "status": "ok"}), encoding="utf-8")


def _tree(tmp_path):
    for task, s in (("ruler/niah_single_2", 100.0), ("ruler/fwe", 60.0)):
        _metrics(tmp_path, "ablations/kl_grid", task, 4096, "magicpig:K=9,L=120", s - 10, 0.04)
        _metrics(tmp_path, "ablations/kl_grid", task, 4096, "magicpig:K=10,L=150", s - 20, 0.02)
        _metrics(tmp_path, "accuracy/ruler", task, 4096, "dense", s, 1.0)
        _metrics(tmp_path, "accuracy/ruler", task, 8192, "dense", 0.0, 1.0)  # another length: not averaged in
    _metrics(tmp_path, "accuracy/ruler", "ruler/cwe", 4096, "dense", 0.0, 1.0)  # not a grid task
    return tmp_path


def test_ours_average_the_grid_tasks_and_take_dense_from_the_same_tasks_and_length(tmp_path):
    ours = kl_grid_averages(_tree(tmp_path)).set_index("method")
    assert ours.loc["dense", "score"] == 80.0 and ours.loc["dense", "tasks"] == 2
    assert ours.loc["magicpig:K=9,L=120", "score"] == 70.0
    assert ours.loc["magicpig", "score"] == 60.0  # (10, 150) is the default spec, written canonically
    assert set(ours["length"]) == {4096}


def test_every_paper_table_reads_and_shows_our_measured_settings_beside_it(tmp_path):
    ref = load_reference()
    for key, block in ref["kl_ablation_tables"].items():
        settings, cols, values = paper_columns(block)
        assert len(settings) == len(values) and all(len(v) == len(cols) for v in values), key
    text = "\n".join(kl_tables_section(_tree(tmp_path), ref))
    assert "| 9,120 | 84.7 | 88.8 | 70 (2) | 0.04 |" in text  # Table 11's row with ours beside it
    assert "| 8,65 | 92.3 | — | — |" in text  # Table 12's (8, 65) is not measured here


def test_status_counts_the_settings_measured_and_says_not_run_without_a_grid(tmp_path):
    config = {"ablations": {"kl_grid": ["magicpig:K=9,L=120"]}}
    run = Run("x", config, _tree(tmp_path), presets={"x": config})
    status = kl_table_status(run, "table12", "")
    assert status.startswith("partial") and "2 of the paper's 5 settings" in status  # full and (9, 120)
    empty = Run("x", {"ablations": {"kl_grid": []}}, tmp_path, presets={"x": {}, "paper": config})
    assert kl_table_status(empty, "table13", "").startswith("not run") and "`paper`" in kl_table_status(
        empty, "table13", "")


def test_ruler_runs_at_the_tables_lengths_fill_their_own_columns(tmp_path):
    """The paper presets run Tables 11-13's settings in the 13-task RULER runs at 64K / 16K: those averages sit
    in the table's `ours <length>` columns, and a table whose settings all ran there says so in its status."""
    for task, s in (("ruler/vt", 90.0), ("ruler/cwe", 70.0)):
        for spec, drop in (("dense", 0), ("magicpig:K=10,L=240", 1), ("magicpig:K=9,L=120", 2),
                           ("magicpig:K=8,L=65", 3), ("magicpig:K=7,L=35", 4)):
            _metrics(tmp_path, "accuracy/ruler", task, 16384, spec, s - drop, 0.04)
    text = "\n".join(kl_tables_section(tmp_path, load_reference()))
    assert "| (K, L) | paper accuracy (llama-3.1-8b 16K) | ours grid | ours grid cost2 | ours 16K |" in text
    assert "| 8,65 | 92.3 | — | — | 77 (2) |" in text  # Table 12's (8, 65): the RULER average at 16K
    assert "| 10,135 | 83.6 | 86.7 | — | — | — |" in text  # Table 11 at 64K: not run here
    run = Run("x", {"ablations": {"kl_grid": []}}, tmp_path, presets={"x": {}})
    status = kl_table_status(run, "table12", "")
    assert status.startswith("partial") and "every setting measured at 16K" in status
    assert "over 2 of the paper's 13 tasks" in status
    assert "2 of the paper's 5 settings" in kl_table_status(run, "table13", "")  # full and (9, 120) only
