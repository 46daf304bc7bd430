"""Data files in the config: passed to the eval jobs, a task skipped for missing data reruns once its file
appears, and the report lists every skipped item with its reason."""
import shutil
import time

import pytest
import yaml

from magicpig.harness.pipeline_config import validate_pipeline_config
from magicpig.harness.report import build_report

from test_report import write_metrics
from test_workflow import ROOT, _plan, _touch_results, dry_run, dry_run_jobs

FIXTURE = ROOT / "tests/fixtures/squad_dev_v2_tiny.json"


def workflow_copy(tmp_path, data_path):
    for name in ("Snakefile", "workflow", "config"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    (tmp_path / "extra.yaml").write_text(yaml.safe_dump({
        "data": {"ruler/qa_1": str(data_path)},
        "presets": {"smoke": {"ruler": {"tasks": ["qa_1", "vt"]}}}}))
    return ("--configfile", "config/smoke.yaml", "extra.yaml")


def eval_commands(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("Shell command: ") and " eval " in line]


def test_a_skipped_task_reruns_when_its_data_file_appears(tmp_path):
    data = tmp_path / "data" / "dev-v2.0.json"
    args = workflow_copy(tmp_path, data)
    [qa] = [c for c in eval_commands(dry_run("-p", *args, cwd=tmp_path).stdout) if "ruler/qa_1" in c]
    assert "--data" not in qa  # no file yet: the task is skipped (hub unreachable), the job still finishes
    _touch_results(tmp_path, *args)  # the finished run, with qa_1 skipped
    assert _plan(tmp_path, *args) == {}
    time.sleep(1)
    data.parent.mkdir()
    shutil.copy(FIXTURE, data)  # the data appears: exactly qa_1's job and the report rerun
    assert _plan(tmp_path, *args) == {"eval_ruler": 1, "report": 1, "all": 1}
    [qa] = [c for c in eval_commands(dry_run("-p", *args, cwd=tmp_path).stdout) if "ruler/qa_1" in c]
    assert f"--data ruler/qa_1={data}" in qa
    assert not [c for c in eval_commands(dry_run("-p", *args, cwd=tmp_path).stdout)
                if "ruler/vt" in c and "--data" in c]


def test_every_eval_job_has_its_data_files_as_inputs(tmp_path):
    """Ablation and sweep jobs on a task with a data file pass it and list it as an input, as the accuracy jobs do
    (so each of them reruns when the file changes)."""
    data = tmp_path / "data" / "dev-v2.0.json"
    data.parent.mkdir()
    shutil.copy(FIXTURE, data)
    args = workflow_copy(tmp_path, data)
    (tmp_path / "more.yaml").write_text(yaml.safe_dump({"presets": {"smoke": {
        "ablations": {"tasks": ["qa_1"]}, "sweeps": {"tasks": ["qa_1"]}}}}))
    jobs = [j for j in dry_run_jobs(dry_run("-p", *args, "more.yaml", cwd=tmp_path).stdout)
            if j["shell"] and " eval " in j["shell"] and "ruler/qa_1" in j["shell"]]
    assert {j["rule"] for j in jobs} == {"eval_ruler", "ablation_centering", "ablation_kl_grid", "ablation_setup",
                                         "sweep_ruler"}
    for job in jobs:
        assert str(data) in job["input"] and f"--data ruler/qa_1={data}" in job["shell"], job["rule"]


def test_config_data_keys_must_be_tasks_with_data(tmp_path):
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["data"] = {"longbench/qaspr": "x.jsonl", "ruler/vt": "y.json", "gsm8k": str(tmp_path / "missing.jsonl")}
    warnings = []
    with pytest.raises(ValueError) as err:
        validate_pipeline_config(config, warn=warnings.append)
    assert "data.longbench/qaspr: task 'longbench/qaspr' takes no data file (did you mean 'longbench/qasper'?)" in str(err.value)
    assert "data.ruler/vt: task 'ruler/vt' takes no data file" in str(err.value)
    assert any("data.gsm8k:" in w and "skipped until it does" in w for w in warnings)


def test_report_lists_every_skipped_item_with_its_reason(tmp_path):
    acc = tmp_path / "results" / "accuracy"
    write_metrics(acc, "ruler/vt", 1024, "dense", 80.0, 1.0)
    write_metrics(acc, "ruler/qa_1", 1024, "dense", None, None, status="skipped", reason="SQuAD not reachable")
    write_metrics(acc, "gsm8k", 4096, "dense", None, None, status="skipped", reason="hub not reachable")
    write_metrics(acc, "ruler/cwe", 1024, "dense", 50.0, 1.0, status="partial")
    report = build_report(tmp_path / "results", tmp_path / "fig", "test").read_text()
    section = report.split("## Skipped or incomplete", 1)[1].split("\n## ", 1)[0]
    assert "- `ruler/qa_1` @ 1024: **skipped** — SQuAD not reachable. Give its file under `data:`" in section
    assert "- `gsm8k` @ 4096: **skipped** — hub not reachable. Give its file" in section
    assert "- `ruler/cwe` @ 1024: **partial**." in section and "ruler/vt" not in section
