"""The kernel benchmark's hygiene (magicpig.harness.bench.kernel): the last-level cache it sizes the cold-cache
flush by, one streaming-bandwidth method, the memory check before anything is allocated, and what
``magicpig bench kernel`` prints."""
import csv

import pytest
import torch

from magicpig import cpu
from magicpig.harness.bench import kernel as bench_kernel

from test_cpu_common import require_module

MiB = 1 << 20


def _cache(root, cpu_id, index, level, kind, size, shared):
    d = root / f"cpu{cpu_id}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")
    (d / "shared_cpu_list").write_text(f"{shared}\n")


def test_llc_is_the_highest_level_all_instances_once(tmp_path):
    # 4 cpus, two L3 instances of 150 MiB (each seen by two cpus), private L2, a larger L1i that is ignored
    for c in range(4):
        _cache(tmp_path, c, 0, 1, "Instruction", "999999K", str(c))
        _cache(tmp_path, c, 1, 2, "Unified", "1024K", str(c))
        _cache(tmp_path, c, 3, 3, "Unified", "153600K", "0-1" if c < 2 else "2-3")
    size, source = bench_kernel.llc_bytes(tmp_path, lscpu=False)
    assert size == 300 * MiB and "L3" in source and "2 x 150 MiB" in source
    assert bench_kernel.llc_bytes(tmp_path / "none", lscpu=False) == (0, "unknown")


def test_flush_is_eight_llc_at_least_128_mib_capped_by_memory():
    # the machine that reported 300 MiB of L3: 2400 MiB, not the old fixed 128 MiB
    assert bench_kernel.flush_bytes(300 * MiB, available=64 << 30) == 2400 * MiB
    assert bench_kernel.flush_bytes(300 * MiB, available=4 << 30) == 1024 * MiB  # a quarter of the RAM
    assert bench_kernel.flush_bytes(4 * MiB, available=64 << 30) == 128 * MiB
    assert bench_kernel.stream_bytes_for(300 * MiB) == 1200 * MiB
    assert bench_kernel.stream_bytes_for(32 * MiB) == 512 * MiB


def test_streaming_bandwidth_is_the_median_of_fixed_reads(monkeypatch):
    require_module()
    mod = cpu.load()
    reads = []

    class Spy:  # the module, recording each streaming read
        def stream_read(self, buf, threads):
            reads.append((buf.numel() * 8, threads))
            return mod.stream_read(buf, threads)

    monkeypatch.setattr(cpu, "load", Spy)
    ticks = iter([0.0, 1.0, 1.0, 4.0, 4.0, 6.0])  # three timed reads of 1 s, 3 s and 2 s
    gbps = bench_kernel.stream_read_gbps(2, 8 * MiB, reps=3, clock=lambda: next(ticks))
    assert reads == [(8 * MiB, 2)] * 4  # one untimed read, then three of the whole buffer, the given threads
    assert gbps == pytest.approx(8 * MiB / 2.0 / 1e9)  # the median (2 s), not the fastest


def test_impossible_size_is_refused_before_the_csv(tmp_path):
    path = tmp_path / "k.csv"
    with pytest.raises(cpu.InsufficientMemoryError, match=r"n=50000000.*layer .*available"):
        bench_kernel.run(ns=(50_000_000,), head_dims=(128,), kls=((10, 150),), csv_path=path, echo=lambda _: None)
    assert not path.exists()
    from magicpig.harness.cli import main

    assert main(["bench", "kernel", "--n", "50000000", "--head-dim", "128", "--kl", "10,150",
                 "--csv", str(path)]) == 2
    assert not path.exists()


def test_config_bytes_grow_with_n_and_cover_the_layer():
    small = bench_kernel.config_nbytes(4096, 64, 10, 150, torch.bfloat16)
    big = bench_kernel.config_nbytes(8192, 64, 10, 150, torch.bfloat16)
    assert sum(big.values()) > 1.9 * sum(small.values())
    assert small["layer"] == cpu.estimate_nbytes(1, bench_kernel.KV_HEADS, 4096, 64, 10, 150)["total"]
    assert "torch reference" not in bench_kernel.config_nbytes(4096, 64, 10, 150, torch.bfloat16, reference=False)


def test_kernel_bench_prints_bandwidth_flush_and_gather_ceiling(tmp_path):
    require_module()
    path = tmp_path / "k.csv"
    lines = []
    rows = bench_kernel.run(ns=(2000,), head_dims=(64,), kls=((8, 75),), dists=("offset",), reps=2, dense_reps=1,
                            reference=False, stream_bytes=1 << 24, csv_path=path, echo=lines.append)
    text = "\n".join(lines)
    assert "streaming read:" in text and f"median of {bench_kernel.STREAM_REPS} reads of a 16 MiB buffer" in text
    assert "cold caches:" in text and "last-level cache" in text
    assert "gat/rd" in text and "ms/step" in text and "ratio" in text
    (r,) = rows
    llc = bench_kernel.llc_bytes()[0]
    assert r.llc_bytes == llc and r.flush_bytes == bench_kernel.flush_bytes(llc) and r.stream_bytes == 1 << 24
    with open(path) as fh:
        (row,) = list(csv.DictReader(fh))
    assert {"llc_bytes", "flush_bytes", "stream_bytes", "bandwidth_ratio"} <= set(row)


@pytest.mark.parametrize("argv,expect", [
    (["bench", "kernel", "--kl", "10x150,9x120"], "--kl: expected one (K, L) pair written K,L"),
    (["bench", "kernel", "--kl", "17,10"], "--kl: K must be an integer in [1, 16]"),
    (["estimate", "error", "--capture", "missing.pt", "--kl", "10,150,9,120"], "repeat --kl for more pairs"),
])
def test_kl_options_share_one_parser(argv, expect, capsys):
    """bench kernel and estimate read a bare (K, L) pair with magicpig.lsh.parse_kl: one form (K,L), one
    error naming it; a list in one value is refused (repeat the option instead)."""
    from magicpig.harness.cli import main

    assert main(argv) == 2
    assert expect in capsys.readouterr().err
