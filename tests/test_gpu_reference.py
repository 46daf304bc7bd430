"""The committed GPU run (figures/reference/gpu-check-*) and how reports read GPU runs: which folders
(``results_tree.gpu_run_folders``), the GPU section's rows beside the H200 projection
(``tables_system.gpu_section``, ``fit_policy.gpu_check_predictions``)."""
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from magicpig.harness.projection.fit_policy import gpu_check_predictions
from magicpig.harness.projection.hardware import HARDWARE, project_gpu_row
from magicpig.harness.report.tables_system import gpu_section
from magicpig.harness.results_tree import gpu_run_folders
from magicpig.shapes import model_shape

REPO = Path(__file__).resolve().parents[1]
COMMITTED = sorted((REPO / "figures" / "reference").glob("gpu-check-*"))


def test_the_committed_gpu_run_holds_both_methods_at_every_context():
    assert COMMITTED, "no committed GPU run under figures/reference/gpu-check-*"
    for folder in COMMITTED:
        df = pd.read_csv(folder / "decode.csv")
        measured = df[(df["fits"].astype(str).str.lower() == "true") & df["device"].str.startswith("cuda")]
        for context in (16384, 65536, 98304):
            at = measured[measured["context"] == context]
            assert {"dense", "magicpig"} <= set(at["method"]), (folder, context)
            assert set(at[at["method"] == "dense"]["backend"]) == {"stock"}
            assert (at["ms_per_token"] > 0).all() and at["ms_per_token"].notna().all()
        assert "passed" in (folder / "tests.log").read_text() and "failed" not in (folder / "tests.log").read_text()
        assert df["run_id"].notna().all()


def _gpu_run(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    shutil.copy(COMMITTED[0] / "decode.csv", folder / "decode.csv")
    return folder


def test_reports_read_results_gpu_and_the_committed_runs_unless_one_folder_is_given(tmp_path):
    results = tmp_path / "results" / "cpu"
    results.mkdir(parents=True)
    assert gpu_run_folders(results) == []
    local = _gpu_run(tmp_path / "results" / "gpu", "nvidia-h200")
    committed = _gpu_run(tmp_path / "figures" / "reference", "gpu-check-nvidia-h200-2026-12-04")
    _gpu_run(tmp_path / "figures" / "reference", "cpu-2026-12-04")  # a preset's reference run is no GPU run
    (tmp_path / "figures" / "reference" / "gpu-check-empty-2026-12-05").mkdir()  # no decode.csv: not a run
    assert gpu_run_folders(results) == [local, committed]
    assert gpu_run_folders(results, tmp_path / "results" / "gpu") == [local]
    assert gpu_run_folders(results, tmp_path / "elsewhere") == []


def test_gpu_section_sets_each_row_beside_its_h200_projection(tmp_path):
    results = tmp_path / "results" / "cpu"
    results.mkdir(parents=True)
    text = "\n".join(gpu_section([COMMITTED[0]], results))
    assert "sparse CPU efficiency of 50% (the model default" in text  # no projection_h200.csv in this preset
    assert "estimate: needs 190.67 GB of host memory" in text  # the refused row says why
    # one row by hand: dense@stock at 16K, batch 8, against the projection of the same setting
    df = pd.read_csv(COMMITTED[0] / "decode.csv")
    row = df[(df["context"] == 16384) & (df["batch"] == 8) & (df["method"] == "dense")].iloc[0]
    shape = model_shape("llama-3.1-8b").with_dtype(2)
    projected = 1e3 * project_gpu_row(shape, "dense@stock", 16384, 8, HARDWARE["H200"])
    line = next(ln for ln in text.splitlines() if ln.startswith("| 16384 | 8 | dense@stock |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert float(cells[4]) == pytest.approx(row["ms_per_token"], abs=0.05)
    assert float(cells[6]) == pytest.approx(projected, abs=0.05)
    assert float(cells[7].rstrip("%")) == pytest.approx(100 * (projected / row["ms_per_token"] - 1), abs=0.05)
    assert "None: no" in "\n".join(gpu_section([], results))


def test_gpu_check_predictions_projects_only_what_the_model_says_fits():
    pred = gpu_check_predictions(COMMITTED[0] / "decode.csv", cpu_efficiency=0.3)
    dense = pred[pred["method"] == "dense"]
    assert dense["predicted_ms_per_token"].map(math.isfinite).all()
    mp = pred[(pred["method"] == "magicpig") & (pred["context"] == 98304) & (pred["batch"] == 1)]
    assert len(mp) == 2 and mp["predicted_ms_per_token"].notna().all()
    # the efficiency given is the one projected with: a faster CPU part, a shorter step
    slower = gpu_check_predictions(COMMITTED[0] / "decode.csv", cpu_efficiency=0.1)
    at = (slower["method"] == "magicpig") & (slower["context"] == 98304) & (slower["batch"] == 1)
    assert (slower.loc[at, "predicted_ms_per_token"].to_numpy() > mp["predicted_ms_per_token"].to_numpy()).all()


def test_the_speedup_figure_draws_the_gpu_runs(tmp_path):
    from magicpig.harness.report.plots_throughput import speedup_paper_hardware
    from magicpig.harness.results_tree import load_reference

    results = tmp_path / "results" / "cpu"
    results.mkdir(parents=True)
    none = speedup_paper_hardware(results, load_reference(), tmp_path / "none.png")
    assert any("rows on a GPU" in m for m in none.missing)
    _gpu_run(tmp_path / "figures" / "reference", "gpu-check-nvidia-h200-2026-12-04")
    drawn = speedup_paper_hardware(results, load_reference(), tmp_path / "drawn.png")
    assert not any("rows on a GPU" in m for m in drawn.missing), drawn.missing


def test_a_report_given_one_gpu_folder_reads_it_alone_in_every_section_and_figure(tmp_path):
    """build_report resolves the GPU runs once: with ``gpu_results`` naming a folder without runs, neither the
    claims, the GPU section, the speed-up figure nor the coverage row reads the committed run beside it."""
    from magicpig.harness.report.sections import build_report
    from magicpig.harness.result_files import DECODE_CSV

    results = tmp_path / "results" / "cpu"
    results.mkdir(parents=True)
    _gpu_run(tmp_path / "figures" / "reference", "gpu-check-nvidia-h200-2026-12-04")
    (results / DECODE_CSV.rel).parent.mkdir(parents=True)
    cpu_rows = pd.read_csv(COMMITTED[0] / "decode.csv").assign(device="cpu")  # the coverage row reads decode rows
    cpu_rows.to_csv(results / DECODE_CSV.rel, index=False)
    default = build_report(results, tmp_path / "default", "cpu").read_text()
    alone = build_report(results, tmp_path / "alone", "cpu", gpu_results=tmp_path / "empty").read_text()
    for text, has_run in ((default, True), (alone, False)):
        assert ("gpu-check-nvidia-h200-2026-12-04" in text) == has_run
        assert ("GPU runs shown" in text) == has_run
        assert ("rows on a GPU" in text) != has_run  # the speed-up figure's missing-data line
