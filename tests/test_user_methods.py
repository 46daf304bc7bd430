"""A method from the user's own file (outside the package) runs through the config check, `magicpig eval`, the
pipeline's commands and the report (config `methods_module`, `--methods-module`)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from magicpig.harness.pipeline_config import validate_pipeline_config
from magicpig.methods import METHODS, parse_method

from test_reliability_cli import tiny_model_dir  # noqa: F401  (fixture: a random 2-layer Llama folder)
from test_workflow import ROOT, dry_run

TOY = '''
from dataclasses import dataclass

from magicpig.methods import register
from magicpig.methods.exact import Streaming


@register
@dataclass(kw_only=True)
class RecentOnly(Streaming):
    """The last `local` keys only: no attention sinks."""

    name = "toy_recent"
    sinks: int = 0
    local: int = 32
'''


@pytest.fixture
def toy_file(tmp_path):
    """The toy method's file in a folder of its own; the registry and sys.modules are restored afterwards."""
    folder = tmp_path / "my_methods"
    folder.mkdir()
    path = folder / "toy_methods.py"
    path.write_text(TOY)
    before, modules = dict(METHODS), set(sys.modules)
    yield path
    METHODS.clear()
    METHODS.update(before)
    for name in set(sys.modules) - modules:
        if name.startswith("magicpig_user_methods_"):
            del sys.modules[name]


def config_with(methods_module: list[str]) -> dict:
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["presets"]["cpu"]["ruler"]["methods"].append("toy_recent:local=16")
    config["methods_module"] = methods_module
    return config


def test_config_check_loads_the_users_methods(toy_file, tmp_path):
    with pytest.raises(ValueError, match=r"presets\.cpu\.ruler\.methods\[\d+\]: unknown attention method 'toy_recent'"):
        validate_pipeline_config(config_with([]), warn=lambda m: None)
    with pytest.raises(ValueError, match=r"methods_module: '.*nothere\.py' does not exist"):
        validate_pipeline_config(config_with([str(tmp_path / "nothere.py")]), warn=lambda m: None)
    validate_pipeline_config(config_with([str(toy_file)]), warn=lambda m: None)
    assert parse_method("toy_recent:local=16").spec() == "toy_recent:local=16"
    validate_pipeline_config(config_with([str(toy_file)]), warn=lambda m: None)  # a second load: no re-register


def test_pipeline_passes_the_module_to_every_eval_job_and_the_report(toy_file, tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({"methods_module": [str(toy_file)],
                                     "presets": {"smoke": {"ruler": {"methods": ["dense", "toy_recent"]}}}}))
    out = dry_run("-p", "--configfile", "config/smoke.yaml", str(extra)).stdout
    commands = [line for line in out.splitlines() if line.startswith("Shell command: ")]
    evals = [c for c in commands if " -m magicpig eval " in c]
    assert evals and all(f"--methods-module {toy_file}" in c for c in evals)
    assert any("--method toy_recent" in c for c in evals)
    [report] = [c for c in commands if "workflow/scripts/report.py" in c]
    assert f"--methods-module {toy_file}" in report


@pytest.mark.slow
def test_eval_and_report_run_the_users_method(toy_file, tmp_path, tiny_model_dir):  # noqa: F811
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "magicpig", "eval", "--model", str(tiny_model_dir), "--device", "cpu",
           "--task", "ruler/niah_single_1", "--length", "256", "--samples", "2", "--max-new-tokens", "8",
           "--method", "dense", "--method", "toy_recent:local=16", "--methods-module", str(toy_file),
           "--out", str(results / "accuracy")]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    metrics = json.loads((results / "accuracy/ruler/niah_single_1/256/toy_recent@local-16/metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["method_name"] == "toy_recent"
    assert metrics["counts"]["scored"] == 2 and 0 < metrics["cost"] < 1  # 16 of ~256 keys
    r = subprocess.run([sys.executable, str(ROOT / "workflow/scripts/report.py"), "--results", str(results),
                        "--out", str(tmp_path / "fig"), "--preset", "toy", "--methods-module", str(toy_file)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    report = (tmp_path / "fig/REPORT.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| `toy_recent:local=16` |"))
    assert "—" not in row.split("|")[2]  # its score is in the RULER table
    without = cmd[:cmd.index("--methods-module")] + ["--out", str(tmp_path / "without")]
    r = subprocess.run(without, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 2 and "unknown attention method 'toy_recent'" in r.stderr  # without the module
