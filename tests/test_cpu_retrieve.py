"""Kernel 2 of the CPU module: retrieval equals the reference sets exactly."""
import pytest
import torch

from magicpig import cpu

from test_cpu_common import random_layer, reference_sets, require_module


@pytest.fixture(autouse=True)
def _module():
    require_module()


@pytest.mark.parametrize("G", [1, 4, 7])
@pytest.mark.parametrize("min_collisions", [1, 2, 3])
def test_retrieve_equals_reference(G, min_collisions):
    K, L = 3, 9
    keys, values, codes, counts, q, q_codes = random_layer(2, 2, G, 203, 8, K, L, counts=[203, 150], seed=G)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L)
    got = layer.retrieve(q_codes, min_collisions)
    want = reference_sets(codes, counts, q_codes, min_collisions)
    for b in range(2):
        for h in range(2 * G):
            assert torch.equal(got[b][h], want[b][h]), (b, h)
            assert got[b][h].numel() == 0 or int(got[b][h].max()) < int(counts[b])
    bits, sampled, entries = layer.retrieve_raw(q_codes, min_collisions)
    assert sampled.tolist() == [[w.numel() for w in row] for row in want]
    # entries = sum over tables of the query's bucket size
    for b in range(2):
        for h in range(2 * G):
            c = int(counts[b])
            assert int(entries[b, h]) == int((codes[b, h // G, :c] == q_codes[b, h]).sum())


@pytest.mark.parametrize("threads", [1, 3, 5, 40])
def test_retrieve_every_thread_count(threads):
    """Any split of the 2 x 10 query heads over the threads (one thread for all, uneven shares, more
    threads than heads) gives the reference sets, with 16- and 32-bit ids, for both counting paths."""
    for n, K in ((203, 3), (65536 + 40, 6)):
        keys, values, codes, counts, q, q_codes = random_layer(2, 2, 5, n, 4, K, 9, counts=[n, n - 17],
                                                               seed=threads)
        for m in (2, 3):
            layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, 9, m).with_threads(threads)
            got, want = layer.retrieve(q_codes, m), reference_sets(codes, counts, q_codes, m)
            assert all(torch.equal(got[b][h], want[b][h]) for b in range(2) for h in range(10)), (n, m)


def test_retrieve_32bit_ids_and_repeat_calls():
    n = 65536 + 300
    K, L = 6, 4
    keys, values, codes, counts, q, q_codes = random_layer(1, 1, 2, n, 4, K, L, seed=3)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L)
    assert layer.ids.dtype == torch.int32
    want = reference_sets(codes, counts, q_codes, 2)
    for _ in range(2):  # counters are reset between calls
        got = layer.retrieve(q_codes, 2)
        assert all(torch.equal(got[0][h], want[0][h]) for h in range(2))
    assert any(int(w.max()) >= 65536 for w in want[0] if w.numel())


def test_retrieve_none_and_all():
    K, L = 4, 5
    keys, values, codes, counts, q, q_codes = random_layer(1, 1, 2, 50, 8, K, L)
    codes = torch.zeros_like(codes)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L)
    assert all(w.numel() == 0 for w in layer.retrieve(torch.ones_like(q_codes), 1)[0])
    assert all(w.numel() == 50 for w in layer.retrieve(torch.zeros_like(q_codes), 5)[0])


def test_retrieve_checks_arguments():
    keys, values, codes, counts, q, q_codes = random_layer(1, 2, 2, 30, 8, 3, 4)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, 3, 4)
    with pytest.raises(ValueError, match="min_collisions"):
        layer.retrieve(q_codes, 5)
    with pytest.raises(ValueError, match="q_codes"):
        layer.retrieve(q_codes[:, :3], 2)
    with pytest.raises(ValueError, match="q_codes"):
        layer.retrieve(q_codes + 8, 2)
