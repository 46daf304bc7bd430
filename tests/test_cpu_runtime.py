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
    code = ("import magicpig, magicpig.cpu, magicpig.harness.bench.kernel, magicpig.harness.commands.build, "
            "magicpig.harness.commands.bench")
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
    monkeypatch.delenv(cpu.THREADS_ENV, raising=False)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert cpu.num_threads() == 1
    finally:
        torch.set_num_threads(old)
    assert cpu.available() is True


def test_build_command_self_checks(capsys):
    require_module()
    from magicpig.harness.cli import main

    assert main(["build"]) == 0
    out = capsys.readouterr().out
    assert "isa:" in out and "threads:" in out and "self-check: ok" in out


class _BrokenModule:
    """The compiled module with one kernel wrong (in the scalar variant only, where the kernel has one)."""

    def __init__(self, real, kernel):
        self.real, self.kernel = real, kernel

    def __getattr__(self, name):
        return getattr(self.real, name)

    def attend(self, *args):  # (kv, q, bits, scale, table, limit, K, L, m, isa, threads, prefetch, split)
        out, lse = self.real.attend(*args)
        wrong = self.kernel == "attend" and args[9] == cpu.ISA_CODES["scalar"]
        return (out + 1e-2, lse) if wrong else (out, lse)

    def retrieve(self, *args):
        bits, sampled, entries = self.real.retrieve(*args)
        return bits, (sampled + 1 if self.kernel == "retrieve" else sampled), entries

    def hash_keys(self, *args):  # (rows, center, proj, lo, count, m, K, L, table_major, isa, threads)
        codes = self.real.hash_keys(*args)
        queries = not args[8]  # the decoder hashes its queries row-major, the prefill keys table-major
        wrong = self.kernel == "hash_keys" and queries and args[9] == cpu.ISA_CODES["scalar"]
        return codes ^ 1 if wrong else codes


@pytest.mark.parametrize("kernel,names", [("attend", "scalar"), ("hash_keys", "scalar"), ("retrieve", None)])
def test_self_check_drives_the_decoder_and_fails_on_a_wrong_kernel(monkeypatch, capsys, kernel, names):
    """``self_check`` runs a real OffloadDecoder once per ISA variant, and a wrong kernel (output, query
    hashing, retrieval) fails it, naming the variant where the fault is variant-specific; ``magicpig build``
    then exits 1."""
    require_module()
    from magicpig import decoders
    from magicpig.harness.cli import main

    built = []
    real_init = decoders.OffloadDecoder.__init__

    def spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        built.append(self.cpu_layer.isa)

    monkeypatch.setattr(decoders.OffloadDecoder, "__init__", spy)
    assert set(cpu.self_check()) == set(cpu.supported_isas()) == set(built)
    saved = os.environ.get(cpu.ISA_ENV)
    monkeypatch.setattr(cpu.extension, "load", lambda real=cpu.load(): _BrokenModule(real, kernel))
    with pytest.raises(RuntimeError, match=names or "sampled") as err:
        cpu.self_check()
    assert "sampled" in str(err.value) or "differs" in str(err.value)
    assert os.environ.get(cpu.ISA_ENV) == saved  # restored after the failure
    assert main(["build"]) == 1
    assert "self-check FAILED" in capsys.readouterr().out


def test_kernel_bench_writes_csv(tmp_path):
    require_module()
    from magicpig.harness.bench import kernel as bench_kernel

    path = tmp_path / "k.csv"
    lines = []
    rows = bench_kernel.run(ns=(3000,), head_dims=(64,), kls=((8, 75),), dists=("offset", "random"), reps=2,
                            dense_reps=1, stream_bytes=1 << 24, csv_path=path, echo=lines.append)
    assert len(rows) == 2 and len(lines) >= 5
    with open(path) as fh:
        table = list(csv.DictReader(fh))
    need = {"n", "head_dim", "K", "L", "sampled_fraction", "ms_per_step", "gb_per_s", "read_gb_per_s",
            "bandwidth_ratio", "speedup_vs_dense", "speedup_vs_reference", "gather_ms",
            "gather_gb_per_s", "step_vs_gather", "roofline_ms", "speedup_vs_roofline"}
    assert need <= set(table[0]) and len(table) == 2
    for r in table:
        assert int(r["n"]) == 3000 and 0 < float(r["sampled_fraction"]) < 1
        assert float(r["ms_per_step"]) > 0 and float(r["speedup_vs_dense"]) > 0
        assert float(r["bandwidth_ratio"]) == pytest.approx(float(r["gb_per_s"]) / float(r["read_gb_per_s"]))
        assert float(r["gather_ms"]) > 0 and float(r["step_vs_gather"]) == pytest.approx(
            float(r["gather_ms"]) / float(r["ms_per_step"]))
        # roofline: 2 (K and V) x 8 kv-heads x 3000 tokens x 64 x 2 bytes at the measured read bandwidth
        assert float(r["roofline_ms"]) == pytest.approx(2 * 8 * 3000 * 64 * 2 / float(r["read_gb_per_s"]) / 1e6)


def _xor_words(t: torch.Tensor) -> int:
    want = 0
    for w in t.reshape(-1).tolist():
        want ^= w
    return want


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_gather_probe_reads_the_listed_rows(isa):
    """Every variant's probe reads exactly the listed rows, whatever the row size: rows of 48 bytes (no
    whole vector), 200 (a 128-byte vector block, a 64-byte one and 8-byte tails) and 1032 (several
    256-byte blocks and a tail), misaligned as they follow each other."""
    require_module()
    if isa not in cpu.supported_isas():
        pytest.skip(f"this CPU does not run {isa}")
    mod = cpu.load()
    code = cpu.ISA_CODES[isa]
    for row_bytes in (48, 200, 1032):
        data = torch.randint(-2**62, 2**62, (50, row_bytes // 8), dtype=torch.int64)
        rows = torch.tensor([3, 7, 7, 20, 49, 0], dtype=torch.int64)
        want = _xor_words(data[rows])
        for threads in (1, 3):
            for prefetch in (0, 2):
                assert mod.gather_rows(data, row_bytes, rows, prefetch, threads, code) == want
        assert mod.gather_rows(data, row_bytes, rows[:0], 2, 2, code) == 0
    with pytest.raises(RuntimeError, match="rows must lie"):
        mod.gather_rows(data, 1032, torch.tensor([50]), 2, 1, code)


def test_stream_probe_reads_every_word():
    """The streaming probe's xor is that of every word, whatever the size and the threads."""
    require_module()
    mod = cpu.load()
    for words in (1, 5, 8195):
        data = torch.randint(-2**62, 2**62, (words,), dtype=torch.int64)
        for threads in (1, 2, 5):
            assert mod.stream_read(data, threads) == _xor_words(data)


def test_union_rows_are_the_tokens_the_kernel_reads():
    require_module()
    from magicpig.harness.bench import kernel as bench_kernel
    from test_cpu_common import random_layer

    keys, values, codes, counts, q, q_codes = random_layer(2, 3, 4, 130, 8, 3, 5, seed=2)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, 3, 5)
    bits, _, _ = layer.retrieve_raw(q_codes, 2)
    sets = layer.retrieve(q_codes, 2)
    want = []
    for b in range(2):
        for kvh in range(3):
            union = torch.unique(torch.cat([sets[b][kvh * 4 + g] for g in range(4)]))
            want.append(union + (b * 3 + kvh) * 130)
    assert torch.equal(bench_kernel.union_rows(layer, bits), torch.cat(want))


def test_empty_huge_is_aligned_and_shaped():
    require_module()
    mod = cpu.load()
    big = mod.empty_huge([3, 5, 70000], torch.bfloat16)  # 2.1 MB: 2 MiB-aligned, padded storage
    assert big.shape == (3, 5, 70000) and big.dtype == torch.bfloat16 and big.is_contiguous()
    assert big.data_ptr() % (1 << 21) == 0
    big.fill_(1.5)
    assert float(big.float().sum()) == 1.5 * 3 * 5 * 70000
    small = mod.empty_huge([4, 4], torch.int16)  # plain allocation below 1 MiB
    assert small.shape == (4, 4) and small.dtype == torch.int16
