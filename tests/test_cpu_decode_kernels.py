"""Kernels 4 (the decode step's linear layers) and 5 (exact decode attention) of the CPU module equal their
torch references in every ISA variant this CPU runs, on awkward sizes; and the engine's use of them
(``magicpig.decode_linear``, ``decode_exact``) changes no decoded token."""
import pytest
import torch
import torch.nn.functional as F

from magicpig import cpu
from magicpig.decode_linear import MAX_ROWS, decode_linears, resolve_linear_impl
from magicpig.decoders import decode_exact

from test_cpu_common import isa_params, require_module, use_isa
from tiny_models import random_prompt, tiny_model

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=1e-4, atol=1e-4)}


@pytest.fixture(autouse=True)
def _module():
    require_module()


# ---- kernel 4 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("M,I,O,bias", [(1, 576, 1536, False), (3, 17, 5, True), (16, 100, 33, True),
                                        (2, 1, 9, False), (1, 64, 1, True), (5, 129, 0, False),
                                        (7, 1000, 37, True), (6, 48, 20, False)])
def test_linear_equals_torch(monkeypatch, isa, dtype, M, I, O, bias):
    use_isa(monkeypatch, isa)
    gen = torch.Generator().manual_seed(I + O)
    x, w = torch.randn(M, I, generator=gen), torch.randn(O, I, generator=gen).to(dtype)
    b = torch.randn(O, generator=gen) if bias else None
    y = cpu.load().linear(x, [w], [b], cpu.ISA_CODES[isa], 2)
    assert y.shape == (M, O) and y.dtype == torch.float32
    torch.testing.assert_close(y, F.linear(x, w.float(), b), rtol=1e-5, atol=1e-4 * I ** 0.5)


def test_linear_checks_arguments():
    lin = cpu.load().linear
    with pytest.raises(RuntimeError, match="same I"):
        lin(torch.randn(2, 5), [torch.randn(3, 6)], [None], 0, 1)
    with pytest.raises(RuntimeError, match="weight must be float32, bfloat16 or int8"):
        lin(torch.randn(2, 5), [torch.randn(3, 5).half()], [None], 0, 1)
    with pytest.raises(RuntimeError, match="int8 .q8_0. weight for inputs of width I"):
        lin(torch.randn(2, 64), [torch.zeros(3, 64, dtype=torch.int8)], [None], 0, 1)  # scales missing
    with pytest.raises(RuntimeError, match="a multiple of 32"):
        lin(torch.randn(2, 40), [torch.zeros(3, 45, dtype=torch.int8)], [None], 0, 1)
    with pytest.raises(RuntimeError, match="bias must be"):
        lin(torch.randn(2, 5), [torch.randn(3, 5)], [torch.randn(4)], 0, 1)
    with pytest.raises(RuntimeError, match="same length"):
        lin(torch.randn(2, 5), [torch.randn(3, 5)], [], 0, 1)
    with pytest.raises(RuntimeError, match="same I"):
        lin(torch.randn(2, 5), [torch.randn(3, 5), torch.randn(3, 4)], [None, None], 0, 1)


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("M,I,O,bias", [(1, 576, 1536, False), (3, 32, 5, True), (16, 96, 33, True),
                                        (5, 1024, 17, False), (7, 64, 1, True), (4, 160, 20, False)])
def test_q8_0_linear_equals_its_torch_reference(monkeypatch, isa, M, I, O, bias):
    from magicpig.decode_weights import pack, q8_0_linear, unpack

    use_isa(monkeypatch, isa)
    gen = torch.Generator().manual_seed(I * 7 + O)
    x, w = torch.randn(M, I, generator=gen), torch.randn(O, I, generator=gen)
    w[0, :32] = 0.0  # an all-zero weight block (scale 0)
    x[0, -32:] = 0.0  # and an all-zero input block
    b = torch.randn(O, generator=gen) if bias else None
    packed = pack(w, "q8_0")
    want = q8_0_linear(x, packed, b)
    for threads in (1, 2):
        y = cpu.load().linear(x, [packed], [b], cpu.ISA_CODES[isa], threads)
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5 * I ** 0.5)
    exact = F.linear(x, w, b)  # both quantizations together: within 2% of the output's scale here
    assert (want - exact).abs().max() < 0.02 * exact.abs().max()
    assert (want - F.linear(x, unpack(packed, I), b)).abs().max() > 0  # x is quantized too


def _one_hot_q8(I):
    """A q8_0 weight (I, I) whose row o picks input o: y[m, o] = q_x[m, o] * d_x exactly (one integer product
    per row), so rounding y / d_x gives back each quantized input."""
    from magicpig.decode_weights import pack

    return pack(torch.eye(I), "q8_0")


@pytest.mark.parametrize("isa", isa_params())
def test_q8_0_input_quantization_rounds_ties_to_even_in_every_variant(monkeypatch, isa):
    """Kernel 4 quantizes its input per block of 32 (d = max|x| / 127, q = round-half-even(x / d)): every
    quantized value, read back through a one-hot weight, equals the torch rule's; blocks of ties (x / d =
    k + 1/2), clamped maxima, an all-zero block and tiny values included. (Subnormal scales are left out: the torch
    rule raises them to the smallest normal float.)"""
    from magicpig.decode_weights import quantize_q8_0

    use_isa(monkeypatch, isa)
    I = 128
    x = torch.zeros(3, I)
    ties = torch.arange(-63, 64, dtype=torch.float32)[:31] + 0.5  # d = 127 / 127 = 1 with the 127 below
    x[0, :31], x[0, 31] = ties, 127.0
    x[0, 32:63], x[0, 63] = -ties, -127.0
    x[1] = torch.randn(I, generator=torch.Generator().manual_seed(3)) * torch.logspace(-30, 3, I)
    x[2, 32:64] = 1e-30 * torch.arange(32)  # a tiny scale; x[2, :32] stays all zero
    q, d = quantize_q8_0(x)
    y = cpu.load().linear(x, [_one_hot_q8(I)], [None], cpu.ISA_CODES[isa], 2)
    dx = d.repeat_interleave(32, dim=1)
    got = torch.where(dx > 0, y / dx.clamp_min(1e-45), torch.zeros(()))
    assert torch.equal(got.round().to(torch.int8), q)


def test_q8_0_input_quantization_is_the_same_bits_in_every_variant(monkeypatch):
    """NaN inputs, which the torch rule does not define, and subnormal scales quantize alike in every variant
    this CPU runs (a NaN is left out of its block's maximum and becomes 127)."""
    I = 96
    x = torch.randn(5, I, generator=torch.Generator().manual_seed(5))
    x[0, 3] = x[1, 40] = x[2, 64] = float("nan")
    x[3, :32] = float("nan")
    x[4, 32:64] = 1e-38 * torch.arange(32)
    outs = {}
    for isa in cpu.supported_isas():
        monkeypatch.setenv(cpu.ISA_ENV, isa)
        outs[isa] = cpu.load().linear(x, [_one_hot_q8(I)], [None], cpu.ISA_CODES[isa], 1)
    assert not outs["scalar"].isnan().any() and outs["scalar"][0, 3] == outs["scalar"][0].max()
    for isa, y in outs.items():
        assert torch.equal(y, outs["scalar"]), isa


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_linear_of_several_layers_is_their_outputs_side_by_side(monkeypatch, isa, threads):
    use_isa(monkeypatch, isa)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, 70, generator=gen)
    ws = [torch.randn(o, 70, generator=gen) for o in (40, 5, 17)]  # not multiples of the 16-row blocks
    ws[1] = ws[1].bfloat16()
    bs = [torch.randn(40, generator=gen), None, torch.randn(17, generator=gen)]
    y = cpu.load().linear(x, ws, bs, cpu.ISA_CODES[isa], threads)
    want = torch.cat([F.linear(x, w.float(), b) for w, b in zip(ws, bs)], -1)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-4 * 70 ** 0.5)
    # the three storages side by side in one region
    from magicpig.decode_weights import pack, q8_0_linear

    x = torch.randn(3, 64, generator=gen)
    ws = [pack(torch.randn(o, 64, generator=gen), fmt) for o, fmt in ((40, "q8_0"), (5, "bfloat16"), (17, "model"),
                                                                       (9, "q8_0"))]
    y = cpu.load().linear(x, ws, [None] * 4, cpu.ISA_CODES[isa], threads)
    want = torch.cat([q8_0_linear(x, w) if w.dtype == torch.int8 else F.linear(x, w.float()) for w in ws], -1)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-4 * 64 ** 0.5)


def test_decode_linears_routes_small_inputs_and_restores(monkeypatch):
    model = tiny_model("llama")
    proj = model.model.layers[0].mlp.up_proj
    rows = []
    module = cpu.load()

    class Counting:  # the CPU module with a counting kernel 4
        def __getattr__(self, name):
            return getattr(module, name)

        def linear(self, x, *args):
            rows.append(x.shape[0])
            return module.linear(x, *args)

    counting = Counting()
    monkeypatch.setattr(cpu, "load", lambda: counting)
    x_small = torch.randn(2, 1, proj.in_features)
    x_big = torch.randn(1, MAX_ROWS + 1, proj.in_features)
    with torch.no_grad():
        want_small, want_big = proj(x_small), proj(x_big)
        with decode_linears(model, "magicpig") as chosen:
            assert chosen == "magicpig" and "forward" in proj.__dict__
            got_small, got_big = proj(x_small), proj(x_big)
    assert rows == [2]  # the decode-sized input went to kernel 4, the prefill-sized one did not
    assert "forward" not in proj.__dict__  # restored
    torch.testing.assert_close(got_small, want_small, rtol=1e-5, atol=1e-5)
    assert torch.equal(got_big, want_big)
    with torch.enable_grad(), decode_linears(model, "magicpig"):
        y = proj(x_small.requires_grad_())
    assert y.grad_fn is not None and rows == [2]  # gradients go to torch's forward


def test_linear_impl_choice():
    assert resolve_linear_impl("torch", torch.device("cpu")) == "torch"
    assert resolve_linear_impl("auto", torch.device("cpu")) == "magicpig"
    assert resolve_linear_impl("auto", torch.device("cuda")) == "torch"
    with pytest.raises(ValueError, match="the CPU module's kernel"):
        resolve_linear_impl("magicpig", torch.device("cuda"))
    with pytest.raises(ValueError, match="linear_impl must be one of"):
        resolve_linear_impl("mkl", torch.device("cpu"))


def test_engine_tokens_do_not_depend_on_who_computes_the_linears():
    from magicpig.engine import Engine, GenerationConfig

    model = tiny_model("llama")
    prompt = random_prompt(150, seed=1)
    tokens = {}
    for impl in ("torch", "magicpig"):
        engine = Engine(model, backend="offload", linear_impl=impl)
        res = engine.generate([prompt, prompt[:90]], "magicpig:K=4,L=20",
                              GenerationConfig(max_new_tokens=8, ignore_eos=True))
        assert all(r.linear == impl for r in res)
        tokens[impl] = [r.token_ids for r in res]
    assert tokens["torch"] == tokens["magicpig"]


# ---- kernel 5 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("B,H,Hkv,n,d", [(1, 9, 3, 1000, 64), (2, 4, 4, 17, 33), (1, 14, 2, 5003, 64),
                                         (3, 8, 2, 300, 128), (1, 3, 1, 1, 8), (1, 5, 1, 77, 128),
                                         (2, 2, 2, 40, 64)])
def test_exact_attend_equals_torch(monkeypatch, isa, dtype, B, H, Hkv, n, d):
    use_isa(monkeypatch, isa)
    gen = torch.Generator().manual_seed(n + d)
    # keys / values as a decoder holds them: a narrowed view of a larger growing buffer
    kb = torch.randn(B, Hkv, n + 7, d, generator=gen).to(dtype)
    vb = torch.randn(B, Hkv, n + 7, d, generator=gen).to(dtype)
    k, v = kb.narrow(2, 0, n), vb.narrow(2, 0, n)
    q = torch.randn(B, H, d, generator=gen) * 2
    out, lse = cpu.exact_kernel()(q, k, v, 0.3)
    ref_out, ref_lse = decode_exact(q, k.float(), v.float(), 0.3)
    torch.testing.assert_close(lse, ref_lse, **TOL[dtype])
    torch.testing.assert_close(out, ref_out, **TOL[dtype])


def test_exact_attend_empty_and_non_finite():
    exact = cpu.exact_kernel()
    out, lse = exact(torch.randn(1, 4, 16), torch.randn(1, 2, 0, 16), torch.randn(1, 2, 0, 16), 0.25)
    assert torch.all(lse == float("-inf")) and torch.all(out == 0)
    q = torch.randn(1, 4, 16)
    q[0, 1, 3] = float("nan")
    out, lse = exact(q, torch.randn(1, 2, 40, 16), torch.randn(1, 2, 40, 16), 0.25)
    assert torch.isnan(out[0, 1]).all() and torch.isnan(lse[0, 1])
    assert torch.isfinite(out[0, [0, 2, 3]]).all()


def test_exact_attend_checks_arguments():
    exact = cpu.exact_kernel()
    with pytest.raises(RuntimeError, match="same shape"):
        exact(torch.randn(1, 4, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 9, 16), 0.25)
    with pytest.raises(RuntimeError, match="H / H_kv"):
        exact(torch.randn(1, 3, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), 0.25)
    with pytest.raises(RuntimeError, match="must both be float32 or both bfloat16"):
        exact(torch.randn(1, 2, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16).half(), 0.25)


def test_decode_exact_uses_the_kernel_only_where_it_applies():
    calls = []

    def kernel(q, k, v, scale):
        calls.append(k.dtype)
        return cpu.exact_kernel()(q, k, v, scale)

    q, k, v = torch.randn(1, 4, 16), torch.randn(1, 2, 30, 16), torch.randn(1, 2, 30, 16)
    torch.testing.assert_close(decode_exact(q, k, v, 0.25, kernel=kernel), decode_exact(q, k, v, 0.25),
                               rtol=1e-5, atol=1e-5)
    valid = torch.ones(1, 30, dtype=torch.bool)
    decode_exact(q, k, v, 0.25, valid=valid, kernel=kernel)  # a mask: torch's kernel
    decode_exact(q, k.half(), v.half(), 0.25, kernel=kernel)  # float16: torch's kernel
    assert calls == [torch.float32]


@pytest.mark.parametrize("n", [0, 5, 700])
def test_exact_attend_merges_a_prior_result_like_merge_attention(n):
    from magicpig.merge import merge_attention

    gen = torch.Generator().manual_seed(n)
    q = torch.randn(2, 6, 24, generator=gen)
    k, v = torch.randn(2, 3, n, 24, generator=gen), torch.randn(2, 3, n, 24, generator=gen)
    prior_out, prior_lse = torch.randn(2, 6, 24, generator=gen), torch.randn(2, 6, generator=gen) * 3
    prior_lse[1, 2] = float("-inf")  # a head whose other key set was empty
    prior_out[1, 2] = 0
    exact = cpu.exact_kernel()
    out, lse = exact(q, k, v, 0.2, (prior_out, prior_lse))
    want = merge_attention(*exact(q, k, v, 0.2), prior_out, prior_lse)
    torch.testing.assert_close(lse, want[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, want[0], rtol=1e-5, atol=1e-5)


# ---- kernel 6 ----------------------------------------------------------------------------------------
def _rms(h, w, eps):
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, cos, sin):  # x (M, heads, d), cos / sin (M, d): transformers' rotate_half convention
    half = x.shape[-1] // 2
    return x * cos[:, None] + torch.cat((-x[..., half:], x[..., :half]), -1) * sin[:, None]


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("M,D,H,Hkv,d,bias", [(1, 64, 4, 2, 16, False), (3, 70, 6, 1, 22, True),
                                              (5, 33, 2, 2, 8, True)])
def test_attention_in_is_norm_projections_and_rotary(monkeypatch, isa, M, D, H, Hkv, d, bias):
    use_isa(monkeypatch, isa)
    gen = torch.Generator().manual_seed(M * D)
    h, norm = torch.randn(M, D, generator=gen), torch.randn(D, generator=gen)
    ws = [torch.randn(o * d, D, generator=gen) for o in (H, Hkv, Hkv)]
    bs = [torch.randn(w.shape[0], generator=gen) if bias else None for w in ws]
    angle = torch.randn(M, d // 2, generator=gen) * 3
    cos, sin = torch.cat((angle.cos(), angle.cos()), -1), torch.cat((angle.sin(), angle.sin()), -1)
    got = cpu.load().attention_in(h, norm, 1e-5, ws, bs, cos, sin, H, Hkv, cpu.ISA_CODES[isa], 2)
    x = _rms(h, norm, 1e-5)
    q, k, v = (F.linear(x, w, b) for w, b in zip(ws, bs))
    want = torch.cat((_rope(q.view(M, H, d), cos, sin).reshape(M, -1), _rope(k.view(M, Hkv, d), cos, sin).reshape(M, -1),
                      v), -1)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("M,D,ffn,bias", [(1, 64, 128, False), (3, 70, 45, True), (16, 17, 300, False)])
def test_mlp_residual_adds_the_silu_mlp_in_place(monkeypatch, isa, M, D, ffn, bias):
    use_isa(monkeypatch, isa)
    gen = torch.Generator().manual_seed(M + ffn)
    h, norm = torch.randn(M, D, generator=gen), torch.randn(D, generator=gen)
    ws = [torch.randn(ffn, D, generator=gen), torch.randn(ffn, D, generator=gen).bfloat16(),
          torch.randn(D, ffn, generator=gen)]
    bs = [torch.randn(w.shape[0], generator=gen) if bias else None for w in ws]
    x = _rms(h, norm, 1e-6)
    gate, up = F.linear(x, ws[0], bs[0]), F.linear(x, ws[1].float(), bs[1])
    want = h + F.linear(F.silu(gate) * up, ws[2], bs[2])
    got = cpu.load().mlp_residual(h, norm, 1e-6, ws, bs, cpu.ISA_CODES[isa], 2)
    assert got.data_ptr() == h.data_ptr()  # in place
    torch.testing.assert_close(h, want, rtol=1e-4, atol=1e-4 * ffn ** 0.5)
    # with the attention output (M, heads, head_dim) and o_proj: h += o(attn) first, then the MLP of that
    attn, o = torch.randn(M, 3, 7, generator=gen), torch.randn(D, 21, generator=gen)
    o_b = torch.randn(D, generator=gen) if bias else None
    mid = h + F.linear(attn.reshape(M, 21), o, o_b)
    x = _rms(mid, norm, 1e-6)
    want = mid + F.linear(F.silu(F.linear(x, ws[0], bs[0])) * F.linear(x, ws[1].float(), bs[1]), ws[2], bs[2])
    cpu.load().mlp_residual(h, norm, 1e-6, ws, bs, cpu.ISA_CODES[isa], 2, attn, o, o_b)
    torch.testing.assert_close(h, want, rtol=1e-4, atol=1e-4 * ffn ** 0.5)


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("M,D,V,bias", [(1, 64, 300, False), (3, 70, 129, True)])
def test_norm_head_is_the_final_norm_then_the_head(monkeypatch, isa, M, D, V, bias):
    use_isa(monkeypatch, isa)
    gen = torch.Generator().manual_seed(M * V)
    h, norm = torch.randn(M, D, generator=gen), torch.randn(D, generator=gen)
    w = torch.randn(V, D, generator=gen)
    b = torch.randn(V, generator=gen) if bias else None
    got = cpu.load().norm_head(h, norm, 1e-5, [w], [b], cpu.ISA_CODES[isa], 2)
    torch.testing.assert_close(got, F.linear(_rms(h, norm, 1e-5), w, b), rtol=1e-4, atol=1e-4)
    assert torch.equal(h, h.clone())  # h is read, not written
    with pytest.raises(RuntimeError, match="norm must be"):
        cpu.load().norm_head(h, norm[:-1], 1e-5, [w], [b], cpu.ISA_CODES[isa], 2)
    with pytest.raises(RuntimeError, match="expected 1 weight"):
        cpu.load().norm_head(h, norm, 1e-5, [w, w], [b, b], cpu.ISA_CODES[isa], 2)


@pytest.mark.parametrize("isa", isa_params())
def test_mlp_silu_is_accurate_over_the_whole_range(monkeypatch, isa):
    """Kernel 6's SiLU (the variants' vector sigmoid from exp(-|g|)) against torch's, with identity weights so the
    MLP's output is silu(x) * x for x from -120 to 120: past the points where exp(-g) would overflow float32 and
    exp(g) underflow, at a width no vector or chunk size divides."""
    use_isa(monkeypatch, isa)
    D = 601
    h = torch.linspace(-1.0, 1.0, D)[None]
    norm = torch.full((D,), 120.0 * (D / (h ** 2).sum()).sqrt().item())  # rms(h) * norm spans -120 .. 120
    eye = torch.eye(D)
    x = _rms(h, norm, 0.0)
    want = F.silu(x) * x
    got = h.clone()
    cpu.load().mlp_residual(got, norm, 0.0, [eye, eye, eye], [None] * 3, cpu.ISA_CODES[isa], 2)
    torch.testing.assert_close(got - h, want, rtol=2e-6, atol=1e-6)
    assert x.min() < -110 and x.max() > 110 and want[0, 0] > -1e-40 and want[0, 0] <= 0


def test_layer_halves_check_arguments():
    mod = cpu.load()
    h, norm = torch.randn(2, 8), torch.ones(8)
    ws = [torch.randn(8, 8), torch.randn(4, 8), torch.randn(4, 8)]
    cs = torch.ones(2, 4)
    with pytest.raises(RuntimeError, match="norm must be"):
        mod.attention_in(h, torch.ones(7), 1e-5, ws, [None] * 3, cs, cs, 2, 1, 0, 1)
    with pytest.raises(RuntimeError, match="q / k / v weights"):
        mod.attention_in(h, norm, 1e-5, ws, [None] * 3, cs, cs, 2, 2, 0, 1)
    with pytest.raises(RuntimeError, match="cos and sin must be"):
        mod.attention_in(h, norm, 1e-5, ws, [None] * 3, torch.ones(2, 5), cs, 2, 1, 0, 1)
    with pytest.raises(RuntimeError, match="expected 3 weight matrices"):
        mod.mlp_residual(h, norm, 1e-5, ws[:2], [None] * 2, 0, 1)
    with pytest.raises(RuntimeError, match="down's input width"):
        mod.mlp_residual(h, norm, 1e-5, [torch.randn(6, 8), torch.randn(6, 8), torch.randn(8, 5)], [None] * 3, 0, 1)
    with pytest.raises(RuntimeError, match="give both attn and o"):
        mod.mlp_residual(h, norm, 1e-5, [torch.randn(6, 8), torch.randn(6, 8), torch.randn(8, 6)], [None] * 3, 0, 1,
                         torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="attn must hold"):
        mod.mlp_residual(h, norm, 1e-5, [torch.randn(6, 8), torch.randn(6, 8), torch.randn(8, 6)], [None] * 3, 0, 1,
                         torch.randn(3), torch.randn(8, 1))
    with pytest.raises(RuntimeError, match="out must be"):
        mod.linear(h, [torch.randn(3, 8)], [None], 0, 1, torch.zeros(2, 4))


# ---- kernel 7 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("src,buf", [(torch.float32, torch.float32), (torch.float32, torch.bfloat16),
                                     (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32)])
@pytest.mark.parametrize("B,Hkv,m,d,centred", [(1, 3, 1, 64, True), (2, 2, 3, 24, False), (3, 1, 2, 17, True)])
def test_append_kv_writes_centred_rows_like_torch(src, buf, B, Hkv, m, d, centred):
    gen = torch.Generator().manual_seed(B * 100 + d)
    cap, n = 11, 5
    # k and v as decode_forward passes them: strided views of one (B, (H + 2 H_kv) d) projection row
    qkv = torch.randn(B, m, (4 + 2) * Hkv * d, generator=gen).to(src)
    k = qkv[:, :, 4 * Hkv * d:5 * Hkv * d].reshape(B, m, Hkv, d).transpose(1, 2)
    v = qkv[:, :, 5 * Hkv * d:].reshape(B, m, Hkv, d).transpose(1, 2)
    k_buf, v_buf = torch.randn(B, Hkv, cap, d, generator=gen).to(buf), torch.randn(B, Hkv, cap, d).to(buf)
    k_old, v_old = k_buf.clone(), v_buf.clone()
    center = torch.randn(B, Hkv, d, generator=gen) if centred else None
    cpu.load().append_kv(k_buf, v_buf, n, k, v, center)
    want_k = (k.float() - (center[:, :, None] if centred else 0)).to(buf)
    assert torch.equal(k_buf[:, :, n:n + m], want_k) and torch.equal(v_buf[:, :, n:n + m], v.to(buf))
    for new, old in ((k_buf, k_old), (v_buf, v_old)):  # the other rows are untouched
        assert torch.equal(new[:, :, :n], old[:, :, :n]) and torch.equal(new[:, :, n + m:], old[:, :, n + m:])


def test_append_kv_keeps_nan_and_checks_arguments():
    app = cpu.load().append_kv
    k_buf, v_buf = torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8)
    k = torch.full((1, 2, 1, 8), float("nan"))
    app(k_buf, v_buf, 3, k, torch.ones(1, 2, 1, 8), None)
    assert k_buf[:, :, 3].isnan().all() and k_buf[:, :, :3].eq(0).all() and v_buf[:, :, 3].eq(1).all()
    k16, v16 = torch.zeros(1, 2, 4, 8, dtype=torch.bfloat16), torch.zeros(1, 2, 4, 8, dtype=torch.bfloat16)
    app(k16, v16, 0, k, k, None)
    assert k16[:, :, 0].isnan().all()  # NaN survives the rounding to bfloat16 too
    with pytest.raises(RuntimeError, match="do not fit"):
        app(k_buf, v_buf, 4, k, k, None)
    with pytest.raises(RuntimeError, match="k and v must be CPU"):
        app(k_buf, v_buf, 0, torch.zeros(1, 3, 1, 8), torch.zeros(1, 3, 1, 8), None)
    with pytest.raises(RuntimeError, match="center must be"):
        app(k_buf, v_buf, 0, k, k, torch.zeros(1, 2, 7))
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        app(k_buf.half(), v_buf.half(), 0, k, k, None)
