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
    with pytest.raises(RuntimeError, match="weight must be float32 or bfloat16"):
        lin(torch.randn(2, 5), [torch.randn(3, 5).half()], [None], 0, 1)
    with pytest.raises(RuntimeError, match="bias must be"):
        lin(torch.randn(2, 5), [torch.randn(3, 5)], [torch.randn(4)], 0, 1)
    with pytest.raises(RuntimeError, match="same length"):
        lin(torch.randn(2, 5), [torch.randn(3, 5)], [], 0, 1)
    with pytest.raises(RuntimeError, match="same I"):
        lin(torch.randn(2, 5), [torch.randn(3, 5), torch.randn(3, 4)], [None, None], 0, 1)


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
                                         (3, 8, 2, 300, 128), (1, 3, 1, 1, 8)])
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
