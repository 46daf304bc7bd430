"""`snakemake --lint` finds nothing in the pipeline, for every preset (a preset's values can raise a finding,
e.g. a param that equals an output's prefix). Runs in `make test`; one finding fails it."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or shutil.which("snakemake")


@pytest.mark.parametrize("args", [[], ["--configfile", "config/smoke.yaml"], ["--config", "preset=paper"]])
def test_snakemake_lint_is_clean(args):
    r = subprocess.run([SNAKEMAKE, "--lint", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Lints for" not in out, out
