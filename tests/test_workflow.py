"""The Snakemake pipeline: the DAG resolves for every preset and a bad config is refused early."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or shutil.which("snakemake")


def dry_run(*args, cwd=ROOT):
    return subprocess.run([SNAKEMAKE, "-n", "--forceall", "--cores", "2", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("args", [[], ["--configfile", "config/smoke.yaml"], ["--config", "preset=paper"]])
def test_dry_run_resolves(args):
    r = dry_run(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    for rule in ("build_cpu_module", "eval_ruler", "bench_kernel", "estimation_capture", "report"):
        assert rule in r.stdout


def job_counts(stdout: str) -> dict[str, int]:
    counts = {}
    for line in stdout.split("Job stats:", 1)[1].splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def test_paper_preset_runs_the_papers_grid():
    counts = job_counts(dry_run("--config", "preset=paper").stdout)
    assert counts["eval_ruler"] == 13 * 4  # 13 tasks x 16K/32K/64K/96K
    assert counts["eval_longbench"] == 6
    assert counts["ablation_setup"] == 2


def test_unknown_preset_is_refused(tmp_path):
    r = dry_run("--config", "preset=nope")
    assert r.returncode != 0 and "preset 'nope'" in (r.stdout + r.stderr)


def test_schema_rejects_a_bad_field(tmp_path):
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg["presets"]["smoke"]["ruler"]["samples"] = -1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    r = dry_run("--configfile", str(bad))
    assert r.returncode != 0 and "samples" in (r.stdout + r.stderr)
