"""The sweep figures read the sweeps tree and the accuracy tree's RULER runs at the same (task, length), and
name what they lack on themselves."""
from magicpig.harness.report import plots_sweeps
from magicpig.harness.results_tree import load_reference, sweep_runs
from synthetic_sweeps import SWEEP_LENGTH, write_sweep_runs
from test_report_figures import description, write_run


def test_sweep_runs_prefer_the_sweep_and_add_the_accuracy_runs(tmp_path):
    root = tmp_path / "results"
    write_sweep_runs(root, write_run)
    write_run(root / "accuracy", "ruler/cwe", SWEEP_LENGTH, "topk:budget=32", [0, 0, 0], 0.5)  # same run: sweep wins
    write_run(root / "accuracy", "ruler/cwe", SWEEP_LENGTH, "topk:budget=0.5", [100, 100, 100], 0.5)  # only here
    runs = sweep_runs(root)
    cwe = runs[(runs.task == "ruler/cwe") & (runs.family == "topk")].set_index("method")
    assert cwe.loc["topk:budget=32", "source"] == "sweeps" and cwe.loc["topk:budget=0.5", "source"] == "accuracy"
    mp = runs[(runs.family == "magicpig") & (runs.task == "ruler/fwe")]
    assert set(mp["centering"]) == {True, False} and set(mp["K"]) == {8, 10}


def test_a_missing_task_is_named_on_the_figure(tmp_path):
    root = tmp_path / "results"
    write_sweep_runs(root, write_run)
    for p in (root / "sweeps" / "ruler" / "cwe").rglob("*"):
        if p.is_file():
            p.unlink()
    ref = load_reference()
    r = plots_sweeps.topk_budget_sweep(root, ref, tmp_path / "f1.png")
    assert r.missing == [f"sweeps/ruler/cwe*/{SWEEP_LENGTH}/topk@*"]
    assert description(r.path) == f"no data: sweeps/ruler/cwe*/{SWEEP_LENGTH}/topk@*"
    r = plots_sweeps.magicpig_vs_topk_cost(root, ref, tmp_path / "f9.png")
    assert r.missing == ["sweeps/ruler/cwe/*/{magicpig,topk}@*"]
    assert plots_sweeps.centering_sweep(root, ref, tmp_path / "f9a.png").missing == []


def test_centering_sweep_leaves_out_tasks_with_no_uncentered_run(tmp_path):
    root = tmp_path / "results"
    write_sweep_runs(root, write_run)
    # a RULER run of the accuracy tree: centered only, so not a panel of Fig. 9a and not reported missing
    write_run(root / "accuracy", "ruler/niah_multikey_3", SWEEP_LENGTH, "magicpig:K=10,L=150", [100, 0, 100], 0.03)
    assert plots_sweeps.centering_sweep(root, load_reference(), tmp_path / "f9a.png").missing == []
