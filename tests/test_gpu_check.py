"""scripts/gpu_check.sh, rehearsed on the CPU (its dry mode), so it works the first time it meets a GPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from magicpig.harness.csv_rows import load_rows

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def _run(*args, env=None, timeout=600):
    full = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=timeout)


def test_dry_run_writes_the_csv_machine_description_and_summary(tmp_path):
    out = tmp_path / "gpu"
    proc = _run(env={"MAGICPIG_GPU_CHECK_DRY": "1", "GPU_CHECK_OUT": str(out)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = load_rows(out / "decode.csv")
    measured = {(r["context"], r["batch"], r["method"], r["backend"]) for r in rows if not r["search"]}
    assert measured == {(n, b, m, be) for n in (256, 512) for b in (1, 2)
                        for m, be in (("dense", "stock"), ("magicpig", "offload"))}
    assert all(r["fits"] is True and r["shape_only"] is True and r["device"] == "cpu" for r in rows)
    assert {r["fill"] for r in rows} == {"exact", "tile(256)"}
    assert sum(1 for r in rows if r["search"].startswith("max-batch")) == 4  # 2 methods x 2 contexts
    machine = json.loads((out / "machine.json").read_text())
    for key in ("cpu_model", "cpu_cores_logical", "host_memory_gb", "torch_version", "device"):
        assert key in machine
    summary = (out / "summary.txt").read_text()
    assert "DRY" in summary and "vs stock" in summary and "dense@stock" in summary
    assert "vs stock" in proc.stdout


def test_unknown_option_is_refused():
    proc = _run("--fast", timeout=60)
    assert proc.returncode == 2 and "--dry" in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_real_mode_without_a_gpu_says_so(tmp_path):
    proc = _run(env={"GPU_CHECK_OUT": str(tmp_path / "g"), "MAGICPIG_GPU_CHECK_DRY": "0"}, timeout=120)
    assert proc.returncode == 1 and "no CUDA device" in proc.stderr


def test_the_script_installs_nothing():
    text = SCRIPT.read_text()
    assert "pip install" not in text and "HF_HUB_OFFLINE=1" in text
