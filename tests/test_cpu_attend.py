"""Kernel 3 of the CPU module: importance-weighted sparse attention equals the torch reference, in every
ISA variant this CPU runs (the scalar fallback always, forced through MAGICPIG_ISA)."""
import pytest
import torch

from magicpig import KeyLayout, cpu, lsh
from magicpig.merge import merge_attention
from magicpig.methods import MagicPIG
from magicpig.methods.base import attend_logits

from test_cpu_common import compact_reference, isa_params, random_layer, reference_attend, require_module, use_isa

TOL = {torch.float32: dict(rtol=1e-4, atol=2e-5), torch.bfloat16: dict(rtol=2e-3, atol=1e-3)}


@pytest.fixture(autouse=True)
def _module():
    require_module()


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("G,d,n,min_collisions", [(1, 64, 1001, 2), (4, 40, 333, 2), (7, 19, 515, 1),
                                                   (2, 128, 700, 3), (32, 16, 200, 2), (33, 16, 150, 1)])
def test_attend_equals_reference(monkeypatch, isa, dtype, G, d, n, min_collisions):
    use_isa(monkeypatch, isa)
    K, L = 4, 12
    keys, values, codes, counts, q, q_codes = random_layer(2, 2, G, n, d, K, L, counts=[n, n // 3 + 1],
                                                           seed=d + G, offset=0.5, dtype=dtype)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L, min_collisions)
    out, lse, sampled = layer.attend(q, q_codes, min_collisions)
    r_out, r_lse, r_sampled = reference_attend(keys, values, counts, codes, q, q_codes, K, L, min_collisions)
    assert out.dtype == lse.dtype == torch.float32 and sampled.dtype == torch.int32
    assert torch.equal(sampled, r_sampled)
    assert (sampled > 0).all() and (sampled < torch.tensor([[n], [n // 3 + 1]])).any()
    torch.testing.assert_close(lse, r_lse, **TOL[dtype])
    torch.testing.assert_close(out, r_out, **TOL[dtype])


@pytest.mark.parametrize("isa", isa_params())
def test_zero_and_all_sampled(monkeypatch, isa):
    use_isa(monkeypatch, isa)
    K, L = 5, 6
    keys, values, codes, counts, q, q_codes = random_layer(1, 2, 3, 90, 24, K, L)
    codes = torch.zeros_like(codes)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L)
    # nobody collides: output 0, lse -inf, no NaN
    out, lse, sampled = layer.attend(q, torch.ones_like(q_codes), 2)
    assert (sampled == 0).all() and torch.isneginf(lse).all() and (out == 0).all()
    # everybody collides in all tables: exact softmax over all keys with the same correction
    out, lse, sampled = layer.attend(q, torch.zeros_like(q_codes), 2)
    r_out, r_lse, _ = reference_attend(keys, values, counts, codes, q, torch.zeros_like(q_codes), K, L, 2)
    assert (sampled == 90).all()
    torch.testing.assert_close(out, r_out, rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(lse, r_lse, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("L", [255, 256, 300])
def test_min_collisions_two_counts_past_a_byte(L):
    """Kernel 2 counts min_collisions = 2 in a byte per token up to L = 255 tables and in two bitsets beyond (a token in
    all 256 tables would wrap a byte to 0): the sampled sets equal the reference's either side, where some tokens
    collide in every table and others in exactly one or two."""
    K, n = 2, 200
    keys, values, codes, counts, q, q_codes = random_layer(1, 1, 2, n, 16, K, L, seed=L)
    codes[..., :5, :] = q_codes[0, 0]  # tokens 0-4 share query head 0's bucket in every table
    codes[..., 5:8, :] = (q_codes[0, 0] + 1) % (1 << K)  # tokens 5-7 in none of them, ...
    codes[..., 6, 0] = q_codes[0, 0, 0]  # ... then 6 in one and 7 in two
    codes[..., 7, :2] = q_codes[0, 0, :2]
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L)
    out, lse, sampled = layer.attend(q, q_codes, 2)
    r_out, r_lse, r_sampled = reference_attend(keys, values, counts, codes, q, q_codes, K, L, 2)
    assert torch.equal(sampled, r_sampled)
    torch.testing.assert_close(out, r_out, rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(lse, r_lse, rtol=1e-4, atol=2e-5)
    head0 = set(layer.retrieve(q_codes, 2)[0][0].tolist())
    assert {0, 1, 2, 3, 4, 7} <= head0 and not {5, 6} & head0


@pytest.mark.parametrize("isa", isa_params())
def test_32bit_ids_and_parallel_splits(monkeypatch, isa):
    use_isa(monkeypatch, isa)
    n, K, L = 65536 + 123, 7, 10
    keys, values, codes, counts, q, q_codes = random_layer(1, 1, 3, n, 16, K, L, seed=5, dtype=torch.bfloat16)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L)
    assert layer.ids.dtype == torch.int32
    out, lse, sampled = layer.attend(q, q_codes, 2)
    r_out, r_lse, r_sampled = reference_attend(keys, values, counts, codes, q, q_codes, K, L, 2)
    assert torch.equal(sampled, r_sampled)
    torch.testing.assert_close(out, r_out, **TOL[torch.bfloat16])
    torch.testing.assert_close(lse, r_lse, **TOL[torch.bfloat16])
    assert layer.threads >= 1  # planned at build
    out7, lse7, _ = layer.with_threads(7).attend(q, q_codes, 2)  # more threads than groups: token splits
    torch.testing.assert_close(out7, out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse7, lse, rtol=1e-5, atol=1e-6)


def test_exact_correction_matches_lsh():
    mod = cpu.load()
    cos = torch.cat([torch.linspace(-1, 1, 2001), torch.tensor([-1.5, 1.5, 0.9999, -0.9999])])
    for K, L, m in [(10, 150, 2), (4, 10, 1), (1, 8, 2), (8, 75, 3)]:
        want = lsh.importance_log_weight(lsh.collision_probability(cos, K, L, m))
        torch.testing.assert_close(mod.exact_correction(cos.contiguous(), K, L, m), want, rtol=1e-5, atol=1e-5)
        table = cpu.correction_table(K, L, m)
        assert table.shape == (cpu.TABLE_INTERVALS + 1,)


def test_attend_checks_arguments():
    keys, values, codes, counts, q, q_codes = random_layer(1, 2, 2, 30, 8, 3, 4)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, 3, 4)
    with pytest.raises(ValueError, match="q"):
        layer.attend(q[..., :4], q_codes)
    with pytest.raises(ValueError, match="heads"):
        layer.attend(q[:, :2], q_codes)
    with pytest.raises(ValueError, match="min_collisions"):
        layer.attend(q, q_codes, 0)


def test_the_layer_is_planned_when_built(monkeypatch):
    """Plan and run: ISA variant, threads and correction table are fixed when the layer is built, so
    attend reads no environment variable and builds no table; a layer built later reads the new setting."""
    K, L = 4, 10
    keys, values, codes, counts, q, q_codes = random_layer(2, 2, 3, 300, 24, K, L, seed=6)
    monkeypatch.setenv(cpu.ISA_ENV, "scalar")
    monkeypatch.setenv(cpu.THREADS_ENV, "2")
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L, min_collisions=1)
    assert (layer.isa, layer.isa_code, layer.threads, layer.min_collisions) == ("scalar", 0, 2, 1)
    assert torch.equal(layer.table, cpu.correction_table(K, L, 1))
    single = layer.with_threads(1)
    assert single.threads == 1 and single.kv is layer.kv and single.isa == "scalar"
    want = layer.attend(q, q_codes)  # min_collisions: the plan's
    monkeypatch.setenv(cpu.ISA_ENV, "sse9")  # either would raise if read
    monkeypatch.setenv(cpu.THREADS_ENV, "two")
    monkeypatch.setattr(cpu.layer, "correction_table", lambda *a: pytest.fail("attend built a correction table"))
    for got in (layer.attend(q, q_codes), layer.attend(q, q_codes, 1), single.attend(q, q_codes)):
        torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-7)
        assert torch.equal(got[2], want[2])
    assert torch.equal(layer.retrieve_raw(q_codes, 2)[1], reference_sets_count(codes, counts, q_codes, 2))
    with pytest.raises(ValueError, match="planned"):  # the table is min_collisions=1's
        layer.attend(q, q_codes, 2)
    with pytest.raises(ValueError, match=cpu.ISA_ENV):  # a new layer reads the environment at its build
        cpu.OffloadedLayer.build(keys, values, codes, counts, K, L)


def reference_sets_count(codes, counts, q_codes, min_collisions):
    from test_cpu_common import reference_sets

    sets = reference_sets(codes, counts, q_codes, min_collisions)
    return torch.tensor([[w.numel() for w in row] for row in sets], dtype=torch.int32)


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_merge_with_static_part_equals_magicpig_attend(monkeypatch, isa, dtype):
    """CPU part (offloaded keys) merged by LSE with exact attention over the static part equals the torch
    reference MagicPIG.attend -- the combination the offload engine relies on."""
    use_isa(monkeypatch, isa)
    B, Hkv, G, d, n = 2, 2, 3, 32, 600
    method = MagicPIG(K=4, L=16, sinks=4, local=32)
    gen = torch.Generator().manual_seed(11)
    k = torch.randn(B, Hkv, n, d, generator=gen) + 1.0
    v = torch.randn(B, Hkv, n, d, generator=gen)
    if dtype == torch.bfloat16:  # the reference sees the same rounded keys the CPU holds
        k, v = k.bfloat16().float(), v.bfloat16().float()
    q = torch.randn(B, Hkv * G, d, generator=gen) * 2
    layout = KeyLayout(n, torch.tensor([0, 57]), torch.tensor([n - 20, n - 5]))  # padding + generated keys
    state = method.prepare(k, v, layout)
    ref = method.attend(q, k, v, layout, state=state)

    keys, values, codes, counts = compact_reference(k, v, state, dtype)  # bf16: centered keys rounded once more
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, method.K, method.L)
    q_codes = lsh.hash_codes(q.reshape(B, Hkv, G, d), state.projections, method.K, method.L).reshape(B, -1, method.L)
    out_cpu, lse_cpu, sampled = layer.attend(q, q_codes, method.min_collisions)

    static = layout.valid() & ~state.offloaded
    kc = k - state.center[:, :, None]
    logits = (q.reshape(B, Hkv, G, d) @ kc.transpose(-1, -2)) * d ** -0.5
    logits = logits.masked_fill(~static[:, None, None, :], float("-inf"))
    out_dev, lse_dev = attend_logits(logits, v)
    out, lse = merge_attention(out_cpu, lse_cpu, out_dev, lse_dev)
    assert torch.equal(sampled.float(), ref.used)
    # bf16: the CPU holds the centered keys rounded to bf16 (logits move by ~|q||k|/256), the reference
    # centers in float32, hence the storage tolerance; float32 must agree to rounding
    tol = TOL[torch.float32] if dtype == torch.float32 else dict(rtol=3e-2, atol=5e-3)
    torch.testing.assert_close(out, ref.output, **tol)
    torch.testing.assert_close(lse, ref.lse, **tol)


@pytest.mark.parametrize("isa", isa_params())
def test_extreme_cosines_use_exact_correction(monkeypatch, isa):
    """Keys (anti)parallel to the query (|cos| beyond the interpolation table) and zero keys."""
    use_isa(monkeypatch, isa)
    K, L, d, n = 3, 8, 16, 60
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, d, generator=gen)
    sign = torch.where(torch.arange(n) % 2 == 0, 1.0, -1.0)[:, None]
    keys = (sign * q[0, 0] + 0.01 * torch.randn(n, d, generator=gen))[None, None]
    keys[0, 0, :3] = 0.0  # zero keys: cosine 0, as magicpig.lsh.cosine
    values = torch.randn(1, 1, n, d, generator=gen)
    codes = torch.zeros(1, 1, n, L, dtype=torch.int32)
    q_codes = torch.zeros(1, 2, L, dtype=torch.int32)
    counts = torch.tensor([n])
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L)
    out, lse, sampled = layer.attend(q, q_codes, 2)
    r_out, r_lse, _ = reference_attend(keys, values, counts, codes, q, q_codes, K, L, 2)
    assert (sampled == n).all() and torch.isfinite(out).all()
    torch.testing.assert_close(out, r_out, rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(lse, r_lse, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("rising", [True, False])
def test_online_softmax_across_blocks(monkeypatch, isa, rising):
    """All keys sampled, logits that rise (or fall) steeply with the token id: the running maximum of
    every head changes in most blocks of the single-pass kernel (or only in the first), and the rescaled
    result must still equal the reference."""
    use_isa(monkeypatch, isa)
    K, L, n, d = 3, 4, 389, 24
    keys, values, codes, counts, q, q_codes = random_layer(1, 2, 4, n, d, K, L, seed=11)
    ramp = torch.linspace(-6.0, 6.0, n) if rising else torch.linspace(6.0, -6.0, n)
    keys = keys + ramp[None, None, :, None] * q.reshape(1, 2, 4, d).mean(2, keepdim=True) / d ** 0.5
    codes = torch.zeros_like(codes)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L)
    zero = torch.zeros_like(q_codes)
    out, lse, sampled = layer.attend(q, zero, 2)
    r_out, r_lse, _ = reference_attend(keys, values, counts, codes, q, zero, K, L, 2)
    assert (sampled == n).all()
    torch.testing.assert_close(out, r_out, rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(lse, r_lse, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("isa", isa_params())
def test_non_finite_query_gives_nan_like_the_reference(monkeypatch, isa):
    """A query head holding NaN / inf is a caller bug: both backends return NaN output and lse for that
    head (not 0 / -inf while keys were sampled), and leave the other heads as they were."""
    use_isa(monkeypatch, isa)
    K, L, n, d = 3, 8, 200, 16
    keys, values, codes, counts, q, q_codes = random_layer(1, 2, 2, n, d, K, L, seed=4)
    layer = cpu.OffloadedLayer.build(keys, values, codes, counts, K, L)
    bad = q.clone()
    bad[0, 1, 3] = float("nan")
    bad[0, 2, 0] = float("inf")
    out, lse, sampled = layer.attend(bad, q_codes, 2)
    r_out, r_lse, r_sampled = reference_attend(keys, values, counts, codes, q, q_codes, K, L, 2)
    assert torch.equal(sampled, r_sampled) and (sampled[0, 1:3] > 0).all()
    for h in (1, 2):
        assert torch.isnan(out[0, h]).all() and torch.isnan(lse[0, h])
    for h in (0, 3):
        torch.testing.assert_close(out[0, h], r_out[0, h], rtol=1e-4, atol=2e-5)
        torch.testing.assert_close(lse[0, h], r_lse[0, h], rtol=1e-4, atol=2e-5)
    # a NaN query whose head sampled nothing is NaN as well (not the empty 0 / -inf)
    empty = cpu.OffloadedLayer.build(keys, values, torch.zeros_like(codes), counts, K, L)
    out, lse, sampled = empty.attend(bad, torch.ones_like(q_codes), 2)
    assert (sampled == 0).all() and torch.isnan(lse[0, 1:3]).all() and torch.isneginf(lse[0, [0, 3]]).all()
    assert torch.isnan(out[0, 1:3]).all() and (out[0, [0, 3]] == 0).all()

    # the torch reference backend, same contract
    B, Hkv, G = 1, 2, 2
    method = MagicPIG(K=K, L=L, sinks=4, local=16)
    gen = torch.Generator().manual_seed(9)
    k = torch.randn(B, Hkv, n, d, generator=gen)
    v = torch.randn(B, Hkv, n, d, generator=gen)
    ref = method.attend(bad, k, v, KeyLayout.simple(B, n))
    assert torch.isnan(ref.output[0, 1:3]).all() and torch.isnan(ref.lse[0, 1:3]).all()
    assert torch.isfinite(ref.output[0, [0, 3]]).all() and torch.isfinite(ref.lse[0, [0, 3]]).all()
