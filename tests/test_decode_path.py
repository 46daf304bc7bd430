"""The system decode path (backend ``offload``): the decoder set-up's hashing and table build (kernel 0 and
the table-major build), the fused exact parts, bf16 offloading, the staged (GPU-style) host-buffer path
run on the CPU, the CPU threads setting and the timings the engine reports."""
import pytest
import torch

from tiny_models import random_prompt, tiny_model
from magicpig import cache, decoders, lsh
from magicpig.cpu.torch_twin import offload_layer_class
from magicpig.engine import Engine, GenerationConfig
from magicpig.methods import KeyLayout, MagicPIG, split_static_offloaded
from magicpig.methods.exact import Dense

from test_cpu_common import compact_reference, require_module

METHOD = "magicpig:K=4,L=24,local=16"


def _codes_agree(got: torch.Tensor, ref: torch.Tensor, x: torch.Tensor, proj: torch.Tensor, K: int, L: int):
    """Codes equal, except (in principle) where a projection is within rounding of 0."""
    bad = got != ref
    if bad.any():
        near = ((x @ proj).abs() < 1e-4).reshape(*x.shape[:-1], L, K).any(-1)
        assert not (bad & ~near).any(), "codes differ away from a zero projection"


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_hash_keys_equals_torch_reference(isa, monkeypatch):
    require_module()
    from magicpig import cpu

    if isa not in cpu.supported_isas():
        pytest.skip(f"CPU lacks {isa}")
    monkeypatch.setenv(cpu.ISA_ENV, isa)
    gen = torch.Generator().manual_seed(0)
    B, Hkv, n, d, K, L = 2, 3, 500, 48, 5, 21  # K*L = 105: not a multiple of the column tile
    k = torch.randn(B, Hkv, n, d, generator=gen) + 0.5
    center = torch.randn(B, Hkv, d, generator=gen) * 0.2
    lo, count = torch.tensor([3, 40]), torch.tensor([490, 431])
    for proj in (lsh.make_projections(d, K, L, num_sets=Hkv), lsh.make_projections(d, K, L, num_sets=1)):
        for tiled in (False, True):
            p = cpu.tile_projections(proj) if tiled else proj
            codes = cpu.hash_keys(k, center, p, K, L, lo, count, m=495)
            tm = cpu.hash_keys(k, center, p, K, L, lo, count, m=495, table_major=True)
            assert codes.shape == (B, Hkv, 495, L) and tm.shape == (B, Hkv, L, 495)
            assert torch.equal(tm.transpose(2, 3), codes)
            for b in range(B):
                c, s = int(count[b]), int(lo[b])
                x = k[b:b + 1, :, s:s + c] - center[b:b + 1, :, None]
                ref = lsh.hash_codes(x, proj, K, L)[0]
                _codes_agree(codes[b, :, :c], ref, x[0], proj if proj.shape[0] == Hkv else proj[0], K, L)
                assert not codes[b, :, c:].any()  # padding rows are 0
    with pytest.raises(RuntimeError, match="row range"):
        cpu.hash_keys(k, center, proj, K, L, torch.tensor([0, 100]), torch.tensor([10, 450]), m=450)


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
@pytest.mark.parametrize("threads", [1, 2, 3, 7])
@pytest.mark.parametrize("n", [1, 3, 4, 7])
def test_hash_keys_of_a_few_rows_splits_tables_over_threads(isa, threads, n, monkeypatch):
    """A decode step's queries: fewer kv-heads than twice the threads, so each kv-head's tables are split
    over work items (boundaries inside a column tile: K*L = 105, K = 5); up to 3 rows per kv-head take the
    kernel's small row tile (1 row: 2 padding rows), more the usual one (4 and 7: 2 and 5 padding rows)."""
    require_module()
    from magicpig import cpu

    if isa not in cpu.supported_isas():
        pytest.skip(f"CPU lacks {isa}")
    gen = torch.Generator().manual_seed(threads)
    B, Hkv, d, K, L = 1, 2, 48, 5, 21
    q = torch.randn(B, Hkv, n, d, generator=gen)
    proj = lsh.make_projections(d, K, L, num_sets=Hkv)
    ref = lsh.hash_codes(q, proj, K, L)
    tiled = cpu.tile_projections(proj)
    for table_major in (False, True):
        got = cpu.hash_keys(q, None, tiled, K, L, table_major=table_major, isa_name=isa, threads=threads)
        got = got.transpose(2, 3) if table_major else got
        _codes_agree(got[0], ref[0], q[0], proj, K, L)


def test_tiled_projections_layout_and_the_kernel_refuses_an_untiled_matrix():
    """Column tile t of set s is the contiguous (d, 32) block tiled[s, t]; padding columns are 0. Kernel 0
    reads only that layout, and a row-major (S, d, P) matrix handed to it directly is an error that says
    how to make the right one (read as tiles, its columns would be other columns: wrong codes, silently)."""
    require_module()
    from magicpig import cpu

    S, d, K, L = 2, 48, 5, 21  # K*L = 105 -> P = 128, 4 tiles
    proj = lsh.make_projections(d, K, L, num_sets=S)
    tiled = cpu.tile_projections(proj)
    assert tiled.shape == (S, 4, d, 32) and tiled.is_contiguous()
    for t in range(4):
        cols = proj[:, :, t * 32:(t + 1) * 32]
        assert torch.equal(tiled[:, t, :, :cols.shape[2]], cols)
        assert not tiled[:, t, :, cols.shape[2]:].any()
    q = torch.randn(1, S, 3, d)
    zero, row0, count = torch.zeros(1, S, d), torch.zeros(1, dtype=torch.int64), torch.full((1,), 3, dtype=torch.int64)
    untiled = torch.zeros(S, d, 128)
    untiled[:, :, :K * L] = proj
    with pytest.raises(RuntimeError, match="tile_projections"):
        cpu.load().hash_keys(q, zero, untiled, row0, count, 3, K, L, False, cpu.ISA_CODES["scalar"], 1)
    with pytest.raises(RuntimeError, match="tile_projections"):  # too few tiles for K*L columns
        cpu.load().hash_keys(q, zero, tiled[:, :3].contiguous(), row0, count, 3, K, L, False,
                             cpu.ISA_CODES["scalar"], 1)


def test_table_major_build_equals_row_major():
    require_module()
    from magicpig import cpu

    gen = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 2**6, (2, 2, 300, 20), generator=gen, dtype=torch.int32)
    counts = torch.tensor([300, 170])
    mod = cpu.load()
    off_a, ids_a = mod.build_tables(codes, counts, 6, 2)
    off_b, ids_b = mod.build_tables_table_major(codes.transpose(2, 3).contiguous(), counts, 6, 2)
    assert torch.equal(off_a, off_b)
    for b, c in enumerate(counts.tolist()):  # slots past a sequence's count are never read
        assert torch.equal(ids_a[b, ..., :c], ids_b[b, ..., :c])
    with pytest.raises(RuntimeError, match="codes must lie"):
        mod.build_tables_table_major(torch.full((1, 1, 2, 5), 64, dtype=torch.int32), torch.tensor([5]), 6, 1)


def _state(B=2, Hkv=2, n=400, d=32, seed=2):
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(B, Hkv, n, d, generator=gen) + 0.6
    v = torch.randn(B, Hkv, n, d, generator=gen)
    layout = KeyLayout(n, torch.tensor([0, 57]), torch.tensor([n, n]))
    return k, v, layout


@pytest.mark.parametrize("impl", ["compiled", "torch"])
def test_from_prefill_equals_build_from_reference_state(impl):
    if impl == "compiled":
        require_module()
    from magicpig import cpu

    k, v, layout = _state()
    method = MagicPIG(K=5, L=20, sinks=4, local=16)
    state = method.prepare(k, v, layout)
    off_keys, off_values, off_codes, off_counts = compact_reference(k, v, state)
    _, offloaded = split_static_offloaded(layout, method.sinks, method.local)
    lo, counts = decoders.row_ranges(offloaded)
    center = decoders.offload_center(k, layout, offloaded, True)
    assert torch.equal(center, state.center)
    cls = offload_layer_class(impl)
    layer = cls.from_prefill(k, v, center, state.projections, lo, counts, method.K, method.L)
    if impl == "torch":
        assert torch.equal(layer.codes, off_codes) and torch.equal(layer.keys, off_keys)
        return
    ref = cpu.OffloadedLayer.build(off_keys, off_values, off_codes, off_counts, method.K, method.L)
    assert torch.equal(layer.kv, ref.kv) and torch.equal(layer.counts, ref.counts)
    # the same tables (codes equal the reference's on these inputs)
    assert torch.equal(layer.offsets, ref.offsets)
    for b, c in enumerate(counts.tolist()):
        assert torch.equal(layer.ids[b, ..., :c], ref.ids[b, ..., :c])
    half = cpu.OffloadedLayer.from_prefill(k, v, center, state.projections, lo, counts, method.K, method.L,
                                           torch.bfloat16)
    assert half.kv.dtype == torch.bfloat16 and torch.equal(half.kv, ref.kv.to(torch.bfloat16))
    with pytest.raises(ValueError, match="offload_dtype"):
        cpu.OffloadedLayer.from_prefill(k, v, center, state.projections, lo, counts, 5, 20, torch.float16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_exact_matches_dense_reference(dtype):
    k, v, layout = _state(n=300)
    q = torch.randn(2, 6, 32)
    ref = Dense().attend(q, k, v, layout, scale=0.2)
    valid = layout.valid()
    out, lse = decoders.decode_exact(q.to(dtype), k.to(dtype), v.to(dtype), 0.2, valid)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out, ref.output, atol=tol, rtol=tol)
    torch.testing.assert_close(lse, ref.lse, atol=tol, rtol=tol)
    assert out.dtype == lse.dtype == torch.float32
    # a row with no valid key: output 0 and lse -inf, never NaN (the fused kernel itself returns lse 0)
    none = valid.clone()
    none[1] = False
    out, lse = decoders.decode_exact(q, k, v, 0.2, none)
    assert torch.isfinite(out).all() and not out[1].any() and torch.isneginf(lse[1]).all()
    out0, lse0 = decoders.decode_exact(q[:1], k[:1], v[:1], 0.2)  # no mask
    torch.testing.assert_close(out0, Dense().attend(q[:1], k[:1], v[:1], KeyLayout.simple(1, 300), scale=0.2).output)


def test_bf16_model_keeps_exact_parts_in_bf16():
    """The system path never holds float32 copies of a bf16 cache (static part, dense layers)."""
    k, v, layout = _state()
    kb, vb = k.bfloat16(), v.bfloat16()
    dec = decoders.OffloadDecoder(MagicPIG(K=5, L=20, local=16), kb, vb, layout, 0, offload_layer_class("torch"))
    assert dec.k_static.data.dtype == dec.v_static.data.dtype == torch.bfloat16
    assert dec.cpu_layer.keys.dtype == torch.bfloat16  # default store follows the model
    ex = decoders.ExactDecoder(kb, vb, layout, 0)
    assert ex.k.data.dtype == torch.bfloat16
    q = torch.randn(2, 4, 32).bfloat16()
    res = ex.attend(q, None)
    ref = Dense().attend(q.float(), kb.float(), vb.float(), layout)
    torch.testing.assert_close(res.output, ref.output, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("impl", ["compiled", "torch"])
def test_bf16_offload_close_to_fp32(impl):
    """bf16 storage of the offloaded keys/values: per-layer output within 2% (relative L2) of float32
    storage; the same keys are sampled (codes come from float32 keys either way)."""
    if impl == "compiled":
        require_module()
    k, v, layout = _state(n=600)
    method = MagicPIG(K=4, L=30, sinks=4, local=16)
    q = torch.randn(2, 6, 32) * 2
    cls = offload_layer_class(impl)
    full = decoders.OffloadDecoder(method, k, v, layout, 0, cls, offload_dtype=torch.float32).attend(q, None)
    half = decoders.OffloadDecoder(method, k, v, layout, 0, cls, offload_dtype=torch.bfloat16).attend(q, None)
    assert torch.equal(full.used, half.used)
    err = (half.output - full.output).norm() / full.output.norm()
    assert 0 < err < 2e-2
    with pytest.raises(ValueError, match="offload_dtype"):
        Engine(tiny_model("llama"), None, backend="offload", offload_dtype="float16")


@pytest.mark.parametrize("concurrent", [True, False])
def test_staged_host_path_equals_direct(concurrent):
    """The GPU route (queries hashed on the model's device, staged through host buffers, results copied
    back) run on the CPU gives the direct CPU route's result. host_buffer pins only beside CUDA."""
    require_module()
    k, v, layout = _state()
    method = MagicPIG(K=5, L=20, sinks=4, local=16)
    q = torch.randn(2, 4, 32)
    cls = offload_layer_class("compiled")
    direct = decoders.OffloadDecoder(method, k, v, layout, 0, cls)
    staged = decoders.OffloadDecoder(method, k, v, layout, 0, cls, concurrent=concurrent, stage_through_host=True)
    # the direct route of a compiled layer is one module call per step (hash, retrieve, attend, static part);
    # a third decoder runs the same route call by call, merging in torch
    unfused = decoders.OffloadDecoder(method, k, v, layout, 0, cls)
    unfused._fused = None
    assert direct._hash_on_cpu and not staged._hash_on_cpu
    assert direct._fused is not None and staged._fused is None
    for step in range(3):
        a, b, c = direct.attend(q, None), staged.attend(q, None), unfused.attend(q, None)
        torch.testing.assert_close(a.output, b.output, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(a.output, c.output, atol=1e-6, rtol=1e-6)
        assert torch.equal(a.used, b.used) and torch.equal(a.used, c.used)
        kn, vn = torch.randn(2, 2, 1, 32), torch.randn(2, 2, 1, 32)
        direct.append(kn, vn)
        staged.append(kn, vn)
        unfused.append(kn, vn)
    assert set(staged._host) == {"q", "codes", "out", "lse"}
    assert all(not t.is_pinned() for t in staged._host.values())
    assert decoders.host_buffer((2,), torch.float32, torch.device("cpu")).is_pinned() is False


def test_fused_steps_of_layers_of_different_shapes_interleaved():
    """The one-call step keeps its intermediate arrays between calls: layers of other batch sizes, head
    counts and lengths, called in turn (larger after smaller and back), each still equal the call-by-call
    route of their own layer."""
    require_module()
    cls = offload_layer_class("compiled")
    pairs = []
    for B, Hkv, G, n, d, seed in ((2, 2, 2, 400, 32, 3), (1, 3, 3, 1111, 64, 4), (2, 1, 5, 257, 48, 5)):
        k, v, _ = _state(B, Hkv, n, d, seed)
        layout = KeyLayout(n, torch.tensor([0, 57][:B]), torch.full((B,), n))
        method = MagicPIG(K=5, L=20, sinks=4, local=16)
        fused = decoders.OffloadDecoder(method, k, v, layout, 0, cls)
        unfused = decoders.OffloadDecoder(method, k, v, layout, 0, cls)
        unfused._fused = None
        assert fused._fused is not None
        pairs.append((fused, unfused, torch.Generator().manual_seed(seed), (B, Hkv * G, Hkv, d)))
    for step in range(3):
        for fused, unfused, gen, (B, H, Hkv, d) in pairs:
            q = torch.randn(B, H, d, generator=gen) * 2
            a, c = fused.attend(q, None), unfused.attend(q, None)
            torch.testing.assert_close(a.output, c.output, atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(a.lse, c.lse, atol=1e-6, rtol=1e-6)
            assert torch.equal(a.used, c.used) and bool((a.used > 0).any())
            kn, vn = torch.randn(B, Hkv, 1, d, generator=gen), torch.randn(B, Hkv, 1, d, generator=gen)
            fused.append(kn, vn)
            unfused.append(kn, vn)


def test_threads_env(monkeypatch):
    from magicpig import cpu

    monkeypatch.delenv(cpu.THREADS_ENV, raising=False)
    assert cpu.num_threads() == torch.get_num_threads()
    assert cpu.num_threads(gpu=True) == max(1, cpu.physical_cores() - 1)
    monkeypatch.setenv(cpu.THREADS_ENV, " 3 ")
    assert cpu.num_threads() == cpu.num_threads(gpu=True) == 3
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv(cpu.THREADS_ENV, bad)
        with pytest.raises(ValueError, match=cpu.THREADS_ENV):
            cpu.num_threads()


def test_timings_reported():
    model = tiny_model("llama")
    engine = Engine(model, None, backend="reference")  # the reference decode below: no CPU part
    pre = engine.prefill(random_prompt(200, seed=3))
    cfg = GenerationConfig(max_new_tokens=4, ignore_eos=True)
    off = Engine(model, None, backend="offload").decode(pre, METHOD, cfg)[0]
    keys = {"setup", *decoders.TIMING_KEYS}
    assert set(off.timings) == keys and all(t >= 0 for t in off.timings.values())
    assert off.timings["setup"] == off.setup_seconds > 0
    for key in ("hash", "cpu_attend", "exact"):
        assert off.timings[key] > 0, key
    assert off.timings["cpu_attend"] >= off.timings["cpu_retrieve"]
    ref = engine.decode(pre, METHOD, cfg)[0]
    assert set(ref.timings) == keys and ref.timings["cpu_attend"] == 0


def test_offload_decoders_are_system_decoders():
    """Backend offload: dense layers use the fused ExactDecoder, sparse layers the OffloadDecoder."""
    model = tiny_model("llama")
    c = cache.MagicPIGCache(model, METHOD, "offload", offload_impl="torch")
    k, v, layout = _state(B=1, Hkv=model.config.num_key_value_heads,
                          d=model.config.hidden_size // model.config.num_attention_heads)
    layout = KeyLayout.simple(1, k.shape[2])
    c.start_decoding([k] * c.num_layers, [v] * c.num_layers, layout)
    kinds = {type(l.decoder).__name__ for i, l in enumerate(c.layers) if not c.is_sparse(i)}
    assert kinds == {"ExactDecoder"}
    assert {type(l.decoder).__name__ for i, l in enumerate(c.layers) if c.is_sparse(i)} == {"OffloadDecoder"}
    assert c.layer_decoders == ["exact" if not c.is_sparse(i) else "offload" for i in range(c.num_layers)]


@pytest.mark.parametrize("backend,method,want", [
    ("reference", METHOD, {"dense": "reference", "sparse": "reference"}),
    ("offload", METHOD, {"dense": "exact", "sparse": "offload"}),
    ("offload", "topk:budget=0.1", {"dense": "reference", "sparse": "reference"}),  # no system path
])
def test_each_method_chooses_its_decoders(backend, method, want):
    """The decoder of a layer is the method's choice (``make_decoder``), and the records name it: the cache's
    ``layer_decoders`` and every GenerationResult's ``layer_decoders``, one name per layer."""
    model = tiny_model("llama")
    engine = Engine(model, None, backend=backend, offload_impl="torch")
    res = engine.generate(random_prompt(120, seed=4), method, GenerationConfig(max_new_tokens=2, ignore_eos=True))
    dense = engine.check_method(method).dense_layer_set(model.config.num_hidden_layers)
    expect = [want["dense"] if i in dense else want["sparse"] for i in range(model.config.num_hidden_layers)]
    assert dense and len(dense) < len(expect)  # both kinds of layer occur
    assert res[0].layer_decoders == expect
    assert set(expect) <= set(decoders.DECODER_KINDS)
    c = cache.MagicPIGCache(model, method, backend, offload_impl="torch")
    assert c.layer_decoders == [""] * c.num_layers  # nothing decodes before prefill ends


def test_dense_reference_layers_are_float32_dense():
    """Backend reference: a dense layer decodes with the Dense method (no generator), a sparse one with the
    method and the cache's generator."""
    model = tiny_model("llama")
    gen = torch.Generator().manual_seed(0)
    c = cache.MagicPIGCache(model, "oracle:budget=8", "reference", generator=gen)
    k, v, _ = _state(B=1, Hkv=model.config.num_key_value_heads,
                     d=model.config.hidden_size // model.config.num_attention_heads)
    c.start_decoding([k] * c.num_layers, [v] * c.num_layers, KeyLayout.simple(1, k.shape[2]))
    for i, layer in enumerate(c.layers):
        if c.is_sparse(i):
            assert layer.decoder.method is c.method and layer.decoder.generator is gen
        else:
            assert isinstance(layer.decoder.method, Dense) and layer.decoder.generator is None


def test_offload_decoder_steps_read_no_environment(monkeypatch):
    """The CPU layer of an OffloadDecoder is planned when the decoder is built ($MAGICPIG_ISA and
    $MAGICPIG_THREADS read then); its steps (query hashing, retrieval, attention) read neither."""
    require_module()
    from magicpig import cpu

    k, v, layout = _state()
    method = MagicPIG(K=5, L=20, sinks=4, local=16, min_collisions=3)
    q = torch.randn(2, 4, 32)
    monkeypatch.setenv(cpu.ISA_ENV, "scalar")
    monkeypatch.setenv(cpu.THREADS_ENV, "1")
    dec = decoders.OffloadDecoder(method, k, v, layout, 0, cpu.OffloadedLayer)
    layer = dec.cpu_layer
    assert (layer.isa, layer.threads, layer.min_collisions) == ("scalar", 1, 3)
    want = dec.attend(q, None)
    ref = method.attend(q, k, v, layout)
    assert torch.equal(want.used, ref.used)
    monkeypatch.setenv(cpu.ISA_ENV, "sse9")  # would raise if read
    monkeypatch.setenv(cpu.THREADS_ENV, "two")
    got = dec.attend(q, None)
    assert torch.equal(got.output, want.output) and torch.equal(got.used, want.used)


def test_appended_rows_reach_the_fused_step_however_the_calls_interleave():
    """A compiled layer's decoder leaves the step's new key / value to the fused step call (kernel 7 inside
    it); two appends in a row, a memory query between, or the torch twin's tensor appends give the same
    attention. The static buffers also grow past their slack."""
    require_module()
    k, v, layout = _state()
    method = MagicPIG(K=5, L=20, sinks=4, local=16)
    gen = torch.Generator().manual_seed(5)
    fused = decoders.OffloadDecoder(method, k, v, layout, 0, offload_layer_class("compiled"))
    twin = decoders.OffloadDecoder(method, k, v, layout, 0, offload_layer_class("torch"))
    assert fused._fused is not None and fused._append is not None and twin._append is None
    capacity = fused.k_static.data.shape[2]
    slack = capacity - fused.k_static.n
    for step in range(slack + 3):
        for _ in range(1 + step % 3):  # 1 to 3 appends before the next attention
            kn, vn = torch.randn(2, 2, 1, 32, generator=gen), torch.randn(2, 2, 1, 32, generator=gen)
            fused.append(kn, vn)
            twin.append(kn, vn)
        if step % 4 == 1:
            assert fused.nbytes()["device"] == twin.nbytes()["device"]  # writes what is pending first
        q = torch.randn(2, 4, 32, generator=gen)
        a, b = fused.attend(q, None), twin.attend(q, None)
        assert fused.n == twin.n and fused.k_static.n == twin.k_static.n
        torch.testing.assert_close(a.output, b.output, atol=1e-5, rtol=1e-5)
    assert fused.k_static.data.shape[2] > capacity  # grew
    torch.testing.assert_close(fused.k_static.view(), twin.k_static.view(), atol=0, rtol=0)
