"""The CPU module as a runtime: ISA selection, threads, lazy building, `magicpig build` and the kernel
benchmark's CSV."""
import csv
import os
import subprocess
import sys

import pytest
import torch

from magicpig import cpu

from test_cpu_common import require_module


def test_import_compiles_nothing(tmp_path):
    env = dict(os.environ, MAGICPIG_BUILD_DIR=str(tmp_path / "build"))
    code = ("import magicpig, magicpig.cpu, magicpig.bench_kernel, magicpig.commands.build, "
            "magicpig.commands.bench")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=600)
    assert not (tmp_path / "build").exists()


def test_isa_selection_and_threads(monkeypatch):
    require_module()
    supported = cpu.supported_isas()
    assert supported[-1] == "scalar"
    monkeypatch.delenv(cpu.ISA_ENV, raising=False)
    assert cpu.isa() == supported[0]
    monkeypatch.setenv(cpu.ISA_ENV, "scalar")
    assert cpu.isa() == "scalar"
    monkeypatch.setenv(cpu.ISA_ENV, "sse9")
    with pytest.raises(ValueError, match=cpu.ISA_ENV):
        cpu.isa()
    for name in ("avx2", "avx512"):
        if name not in supported:  # forcing a variant the CPU lacks is refused, not an Illegal instruction
            monkeypatch.setenv(cpu.ISA_ENV, name)
            with pytest.raises(RuntimeError, match=name):
                cpu.isa()
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert cpu.num_threads() == 1
    finally:
        torch.set_num_threads(old)
    assert cpu.available() is True


def test_build_command_self_checks(capsys):
    require_module()
    from magicpig.cli import main

    assert main(["build"]) == 0
    out = capsys.readouterr().out
    assert "isa:" in out and "threads:" in out and "self-check: ok" in out


def test_kernel_bench_writes_csv(tmp_path):
    require_module()
    from magicpig import bench_kernel

    path = tmp_path / "k.csv"
    lines = []
    rows = bench_kernel.run(ns=(3000,), head_dims=(64,), kls=((8, 75),), dists=("offset", "random"), reps=2,
                            dense_reps=1, stream_bytes=1 << 24, csv_path=path, echo=lines.append)
    assert len(rows) == 2 and len(lines) >= 5
    with open(path) as fh:
        table = list(csv.DictReader(fh))
    need = {"n", "head_dim", "K", "L", "sampled_fraction", "ms_per_step", "gb_per_s", "read_gb_per_s",
            "bandwidth_ratio", "speedup_vs_dense", "speedup_vs_reference", "cpu1_ms_per_step"}
    assert need <= set(table[0]) and len(table) == 2
    for r in table:
        assert int(r["n"]) == 3000 and 0 < float(r["sampled_fraction"]) < 1
        assert float(r["ms_per_step"]) > 0 and float(r["speedup_vs_dense"]) > 0
        assert float(r["bandwidth_ratio"]) == pytest.approx(float(r["gb_per_s"]) / float(r["read_gb_per_s"]))
