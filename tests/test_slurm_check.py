"""scripts/slurm_check.py's readers of a run (`make slurm-check` itself needs a cluster: CI runs it)."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("slurm_check", ROOT / "scripts" / "slurm_check.py")
slurm_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slurm_check)


def test_accuracy_rows_are_the_tables_of_the_accuracy_sections_only(tmp_path):
    report = tmp_path / "REPORT.md"
    report.write_text("# Report\n| preset | smoke |\n## RULER (paper Table 3)\ntext\n| method | ours 1024 |\n|---|---|\n"
                      "| dense | 100.0 |\n## Ablations\n| magicpig | 50.0 |\n## Throughput and latency\n"
                      "| dense@stock | 12.3 tok/s |\n")
    assert slurm_check._accuracy_rows(report) == ["| method | ours 1024 |", "|---|---|", "| dense | 100.0 |",
                                                  "| magicpig | 50.0 |"]


def test_submissions_name_each_jobs_rule_slurm_id_and_log(tmp_path):
    logs = tmp_path / ".snakemake" / "log"
    logs.mkdir(parents=True)
    slurm_logs = tmp_path / ".snakemake" / "slurm_logs"
    (logs / "2026-01-01T000000.snakemake.log").write_text(
        f"Job 9 has been submitted with SLURM jobid 1 (log: {slurm_logs}/rule_estimation_capture/1.log).\n"
        "other line\n"
        f"Job 3 has been submitted with SLURM jobid 12 (log: {slurm_logs}/rule_eval_ruler/vt_1024/12.log).\n")
    jobs = slurm_check._submissions(tmp_path)
    assert [(j["rule"], j["slurm_job"]) for j in jobs] == [("estimation_capture", "1"), ("eval_ruler", "12")]
    assert jobs[1]["log"] == f"{slurm_logs}/rule_eval_ruler/vt_1024/12.log"


def test_metrics_of_an_eval_job_come_from_its_logged_command(tmp_path):
    base = tmp_path / "results/smoke/accuracy/ruler/vt/1024"
    for method in ("dense", "magicpig@K-10+L-150"):
        (base / method).mkdir(parents=True)
        (base / method / "metrics.json").write_text(json.dumps({"machine": {"threads": 2}}))
    log = ("rule eval_ruler:\nShell command: /x/python -m magicpig eval --model smollm2 --method dense "
           "--task ruler/vt --length 1024 --samples 1 --out results/smoke/accuracy > results/smoke/logs/x.log 2>&1\n")
    found = slurm_check._metrics_of(tmp_path, log)
    assert sorted(p.parent.name for p in found) == ["dense", "magicpig@K-10+L-150"]
    assert slurm_check._metrics_of(tmp_path, "rule bench_kernel:\nShell command: python -m magicpig bench kernel") == []


def test_every_eval_rule_of_the_job_table_counts_as_a_resumable_eval_job():
    """The cancelled job may be any `magicpig eval` job; the check must know every rule of the job table (the
    paper preset's table runs every family, the ablations, the sweeps and RULER settings at some lengths only)."""
    import yaml
    from test_contributing import job_table

    from magicpig.harness.pipeline_config import validate_pipeline_config

    config = validate_pipeline_config(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()) |
                                      {"preset": "paper"}, warn=lambda m: None)
    rules = set(job_table(config["presets"]["paper"]))
    assert len(rules) >= 9 and any(r.startswith("eval_ruler_") for r in rules)
    assert all(slurm_check.is_eval_rule(r) for r in rules), sorted(r for r in rules if not slurm_check.is_eval_rule(r))
    assert set(slurm_check.EVAL_RULES) <= rules  # none of its names is stale
    assert not slurm_check.is_eval_rule("bench_kernel") and not slurm_check.is_eval_rule("eval_rulerx")