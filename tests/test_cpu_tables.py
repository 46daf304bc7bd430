"""Kernel 1 of the CPU module: hash tables (CSR buckets of token ids) and memory accounting."""
import pytest
import torch

from magicpig import cpu

from test_cpu_common import random_layer, require_module


@pytest.fixture(autouse=True)
def _module():
    require_module()


def check_tables(layer, codes, counts):
    B, Hkv, n_max, L = codes.shape
    nb = 1 << layer.K
    for b in range(B):
        c = int(counts[b])
        for h in range(Hkv):
            for j in range(L):
                off = layer.offsets[b, h, j]
                assert int(off[0]) == 0 and int(off[-1]) == c
                ids = layer.ids[b, h, j].to(torch.int64) & 0xFFFFFFFF if layer.ids.dtype == torch.int32 \
                    else layer.ids[b, h, j].to(torch.int64) & 0xFFFF
                for code in range(nb):
                    got = ids[int(off[code]):int(off[code + 1])]
                    want = (codes[b, h, :c, j] == code).nonzero().squeeze(1)
                    assert torch.equal(got, want), (b, h, j, code)


def test_tables_match_codes_awkward_sizes():
    keys, values, codes, counts, _, _ = random_layer(2, 3, 1, 77, 8, K=3, L=5, counts=[77, 40])
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K=3, L=5)
    assert layer.ids.dtype == torch.int16
    check_tables(layer, codes, counts)


def test_tables_32bit_ids_beyond_65536():
    n = 65536 + 37
    keys, values, codes, counts, _, _ = random_layer(1, 1, 1, n, 4, K=2, L=2, counts=[n - 5])
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K=2, L=2)
    assert layer.ids.dtype == torch.int32
    check_tables(layer, codes, counts)


def test_bad_codes_and_shapes_are_refused():
    keys, values, codes, counts, _, _ = random_layer(1, 2, 1, 20, 8, K=3, L=4)
    bad = codes.clone()
    bad[0, 1, 5, 2] = 8  # 2**K
    with pytest.raises(ValueError, match="codes"):
        cpu.OffloadedLayer.build(keys, values, bad, counts, K=3, L=4)
    with pytest.raises(ValueError, match="codes"):
        cpu.OffloadedLayer.build(keys, values, codes.long(), counts, K=3, L=4)
    with pytest.raises(ValueError, match="values"):
        cpu.OffloadedLayer.build(keys, values[:, :1], codes, counts, K=3, L=4)
    with pytest.raises(ValueError, match="counts"):
        cpu.OffloadedLayer.build(keys, values, codes, torch.tensor([21]), K=3, L=4)


def test_nbytes_and_memory_refusal(monkeypatch):
    keys, values, codes, counts, _, _ = random_layer(1, 2, 1, 100, 16, K=4, L=6, dtype=torch.bfloat16)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K=4, L=6)
    nb = layer.nbytes
    assert nb["keys"] == nb["values"] == 2 * 100 * 16 * 2
    assert nb["tables"] == cpu.table_nbytes(1, 2, 100, 4, 6) == 2 * 6 * (17 * 4 + 100 * 2)
    assert nb["total"] == sum(v for k, v in nb.items() if k != "total")
    assert cpu.estimate_nbytes(1, 2, 100, 16, 4, 6, torch.bfloat16) == nb

    import psutil

    class Tiny:
        available = 1000

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Tiny())
    with pytest.raises(cpu.InsufficientMemoryError, match="bytes"):
        cpu.OffloadedLayer.build(keys, values, codes, counts, K=4, L=6)
