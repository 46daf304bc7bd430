"""The decode benchmark's host allocator (magicpig.harness.bench.memory)."""
import ctypes
import platform

import pytest

from magicpig.harness.bench import memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the policy acts on glibc only")


IS_MMAPPED = 0x2  # glibc: bit 1 of a chunk's size word, which sits just before the pointer malloc returns


def _from_heap(libc, nbytes: int) -> bool:
    """Whether malloc(nbytes) is served from an arena (else: a chunk of its own, mapped from the OS)."""
    libc.malloc.restype = ctypes.c_void_p
    ptr = libc.malloc(ctypes.c_size_t(nbytes))
    assert ptr
    try:
        return not ctypes.c_size_t.from_address(ptr - ctypes.sizeof(ctypes.c_size_t)).value & IS_MMAPPED
    finally:
        libc.free(ctypes.c_void_p(ptr))


@glibc
def test_converged_policy_serves_below_32_mib_from_the_heap_and_above_from_fresh_pages():
    assert memory.converge_allocator() == "converged"
    libc = memory._libc()
    # glibc's start-up threshold is 128 KiB: 24 MiB would be a fresh mapping without the policy (and with
    # it turned off by an unrelated mallopt)
    assert _from_heap(libc, 24 * 2**20)
    assert not _from_heap(libc, 40 * 2**20)
    memory.free_memory(trim=True)  # callable at any time; the next allocation still works
    assert _from_heap(libc, 1 * 2**20)


def test_without_glibc_nothing_is_set(monkeypatch):
    monkeypatch.setattr(memory, "_libc", lambda: None)
    assert memory.converge_allocator() == "default (not glibc)"
    memory.free_memory(trim=True)


def test_a_refused_threshold_is_an_error(monkeypatch):
    monkeypatch.setattr(memory, "_libc", lambda: type("L", (), {"mallopt": lambda *a: 0})())
    with pytest.raises(RuntimeError, match="mallopt"):
        memory.converge_allocator()


def test_the_estimate_adds_up_the_decoders_estimates():
    """Llama-3.1-8B in bf16, two sequences of 96K keys, 160 steps: the bytes each backend's row holds, as the
    decoder classes (and the CPU layer's estimate) count them. The numbers are pinned: a change to any part's
    count shows here, and changes which rows fit."""
    import torch

    from magicpig.shapes import ModelShape, model_shape

    s = ModelShape.of_config(model_shape("llama-3.1-8b").config(), torch.bfloat16)
    row = {(spec, backend): memory.estimate_row(s, spec, backend, 98304, 2, 160)
           for spec, backend in (("dense", "stock"), ("dense", "reference"), ("magicpig:K=10,L=150", "reference"),
                                 ("magicpig:K=10,L=150", "offload"))}
    assert {r["kv"] for r in row.values()} == {2 * 98304 * 2 * 32 * 8 * 128 * 2}
    assert row["dense", "stock"] == {"device": 26687842816, "host": 0, "kv": 25769803776, "tables": 0}
    assert row["dense", "reference"]["device"] == 28300298752
    assert row["magicpig:K=10,L=150", "reference"]["device"] == 80771041792  # codes + float32 keys per layer
    assert row["magicpig:K=10,L=150", "offload"] == {"device": 8497179136, "host": 54478248160,
                                                     "kv": 25769803776, "tables": 28587168000}
