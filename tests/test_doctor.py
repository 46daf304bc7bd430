"""``magicpig doctor``: hand-made configs (data offline, data given, a missing model, every task skipped, an
unknown preset, a CPU module that does not build) give the right findings, summary and exit code."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from magicpig.harness import doctor
from magicpig.harness.cli import main

CONFIG = Path(__file__).resolve().parent.parent / "config" / "config.yaml"


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("MAGICPIG_OFFLINE", "1")
    monkeypatch.setenv("MAGICPIG_DATA", str(tmp_path / "cache"))


def write_config(tmp_path: Path, edit=None, data: dict | None = None) -> Path:
    """The repository's config with only its cpu preset, edited by ``edit(preset)``."""
    config = yaml.safe_load(CONFIG.read_text())
    preset = config["presets"]["cpu"]
    config["presets"] = {"cpu": preset}
    config["preset"] = "cpu"
    for block in ("lm_eval", "reasoning"):
        preset.pop(block, None)
    if edit:
        edit(preset)
    if data:
        config["data"] = data
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def by_name(findings, area):
    return {f.name: f for f in findings if f.area == area}


def test_offline_hub_data_is_skipped_with_what_to_give(tmp_path, offline, capsys):
    path = write_config(tmp_path)
    assert main(["doctor", "--config", str(path), "--no-build"]) == 0
    out = capsys.readouterr().out
    assert "[skip] data       longbench/trec: not cached and offline (MAGICPIG_OFFLINE=1)" in out
    assert "hub dataset THUDM/LongBench" in out and "--data longbench/trec=PATH" in out
    assert "[ok  ] model      smollm2:" in out and "context 8192 tokens" in out
    assert "ruler: runs 4 of 4 tasks" in out and "longbench: runs 0 of 6 tasks; skips longbench/qasper" in out
    assert "preset cpu can run" in out


def test_a_configured_data_file_counts_as_present(tmp_path, offline):
    trec = tmp_path / "trec.jsonl"
    trec.write_text('{"context": "c", "input": "q", "answers": ["a"]}\n')
    path = write_config(tmp_path, data={"longbench/trec": str(trec)})
    _, findings, summary = doctor.diagnose(path, None, build=False)
    data = by_name(findings, "data")
    assert data["longbench/trec"].status == doctor.OK and data["longbench/qasper"].status == doctor.SKIP
    assert any(s.startswith("longbench: runs 1 of 6 tasks") for s in summary)


def test_every_task_skipped_means_the_preset_cannot_run(tmp_path, offline, capsys):
    def only_hub_data(p):
        p["ruler"].update(samples=0, task_samples={})
        p["gsm8k"]["samples"] = 0

    path = write_config(tmp_path, only_hub_data)
    assert main(["doctor", "--config", str(path), "--no-build"]) == 1
    assert "preset cpu cannot run: every accuracy task it lists is skipped" in capsys.readouterr().out


def test_a_missing_model_fails(tmp_path, capsys):
    def missing(p):
        p["model"] = str(tmp_path / "nowhere.gguf")

    path = write_config(tmp_path, missing)
    assert main(["doctor", "--config", str(path), "--no-build"]) == 1
    out = capsys.readouterr().out
    assert "[fail]" in out and "nowhere.gguf does not exist" in out and "preset cpu cannot run" in out


def test_an_unknown_preset_fails_naming_the_presets(tmp_path, capsys):
    path = write_config(tmp_path)
    assert main(["doctor", "--config", str(path), "--preset", "gpu9", "--no-build"]) == 1
    assert "preset 'gpu9' is not one of ['cpu']" in capsys.readouterr().out


def test_a_cpu_module_that_does_not_build_is_a_warning_with_the_reason(monkeypatch):
    from magicpig import cpu

    def broken():
        raise RuntimeError("g++: error: unrecognized option '-mavx512f'\nmore")

    monkeypatch.setattr(cpu, "load", broken)
    (f,) = doctor.cpu_module(build=True)
    assert f.status == doctor.WARN and "unrecognized option '-mavx512f'" in f.detail
    assert "pure-torch twin" in f.detail and "more" not in f.detail


def test_hub_ids_of_dataset_urls():
    assert doctor._hub_id("https://huggingface.co/datasets/openai/gsm8k/resolve/main/x.parquet") == "openai/gsm8k"
    assert doctor._hub_id("https://nlp.stanford.edu/data/coqa/coqa-dev-v1.0.json") == ""


def test_job_time_from_the_last_run_s_benchmark_files(tmp_path, offline):
    bench = tmp_path / "results" / "benchmarks" / "eval_ruler"
    bench.mkdir(parents=True)
    (bench / "a.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n1800\t0:30:00\t900\t1700\n")
    (bench / "b.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n5400\t1:30:00\t900\t5000\n")
    path = write_config(tmp_path)
    _, findings, _ = doctor.diagnose(path, None, build=False, results=tmp_path / "results")
    (t,) = [f for f in findings if f.area == "time"]
    assert t.detail.startswith("2.00 h over 2 jobs") and "longest job 90 min" in t.detail
    _, findings, _ = doctor.diagnose(path, None, build=False, results=tmp_path / "fresh",
                                     reference_root=tmp_path / "no-references")
    assert [f.detail for f in findings if f.area == "time"][0].startswith("no measured job times yet")


def test_a_config_that_is_not_a_mapping_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text("- just\n- a list\n")
    assert main(["doctor", "--config", str(path), "--no-build"]) == 2
    assert "holds a YAML list, not a mapping" in capsys.readouterr().err


@pytest.mark.skipif(__import__("shutil").which("make") is None, reason="needs make")
def test_make_reproduce_runs_doctor_first_with_the_config_preset_and_stops_on_its_failure():
    """`make -n reproduce` (nothing runs): the doctor line comes before snakemake, takes the preset CONFIG names
    (or none: the config's own), and its non-zero exit ends the recipe with a message."""
    import subprocess

    root = CONFIG.parent.parent

    def recipe(*args: str) -> str:
        r = subprocess.run(["make", "-n", "reproduce", *args], cwd=root, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout[r.stdout.index("magicpig doctor"):]

    named = recipe("CONFIG=foo=1 preset=cpu-long")
    assert "magicpig doctor --preset cpu-long" in named
    assert named.index("magicpig doctor") < named.index("snakemake --cores")
    assert "|| {" in named and "exit 1" in named.split("snakemake --cores")[0]
    plain = recipe()
    assert "magicpig doctor --preset" not in plain and "magicpig doctor" in plain


@pytest.mark.skipif(__import__("shutil").which("make") is None, reason="needs make")
def test_make_reproduce_doctor_step_stops_on_a_preset_that_cannot_run():
    """The doctor step of the recipe, as `make -n` prints it, run for an unknown preset: exit 1, the doctor's
    summary and the recipe's message, and the snakemake line never reached."""
    import subprocess
    import sys

    root = CONFIG.parent.parent
    r = subprocess.run(["make", "-n", "reproduce", "CONFIG=preset=nosuch", "DOCTOR_ARGS=--no-build",
                        f"VENV={sys.prefix}"], cwd=root, capture_output=True, text=True, timeout=60)
    text = r.stdout[r.stdout.index(f"{sys.prefix}/bin/magicpig doctor"):]
    step = text[:text.index(f"{sys.prefix}/bin/snakemake")] + "echo SNAKEMAKE-REACHED"
    done = subprocess.run(["bash", "-c", step], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "preset nosuch cannot run" in done.stdout and "SNAKEMAKE-REACHED" not in done.stdout
    assert "make reproduce: stopped" in done.stderr


def test_ruler_runs_when_any_task_has_samples():
    from magicpig.harness.doctor import preset_tasks

    p = {"ruler": {"tasks": ["niah_single_1", "fwe"], "samples": 0, "task_samples": {"fwe": 3}}}
    assert preset_tasks(p) == {"ruler": ["ruler/fwe"]}
    p["ruler"]["task_samples"] = {}
    assert preset_tasks(p) == {}
