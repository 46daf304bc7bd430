"""magicpig.decode_loop: every layer of a decode step in one call of the CPU module, against the layer-by-layer
loop of ``DecodeForward`` (the same kernels in the same order: equal logits), where it applies and where not,
and its argument checks."""
from __future__ import annotations

import pytest
import torch

from magicpig import cpu, decode_loop
from magicpig.engine import Engine, GenerationConfig
from test_decode_forward import biased_llama
from tiny_models import TINY_KINDS, random_prompt, tiny_model

pytestmark = pytest.mark.skipif(not cpu.available(), reason="the CPU module cannot be built here")

STEPS = 70  # past the 64 rows of slack the decoders' buffers start with: the loop grows them mid-decode


@pytest.fixture
def loop_calls(monkeypatch):
    """Counts the steps the whole-step loop ran."""
    calls = {"n": 0}
    run = decode_loop.DecodeLoop.__call__

    def counted(self, *args):
        calls["n"] += 1
        return run(self, *args)

    monkeypatch.setattr(decode_loop.DecodeLoop, "__call__", counted)
    return calls


def decode(model, prompts, whole_step: bool, offload_dtype=None, steps: int = STEPS):
    engine = Engine(model, backend="offload", linear_impl="magicpig", decode_forward="magicpig",
                    offload_dtype=offload_dtype)
    engine.step_forward.whole_step = whole_step
    pre = engine.prefill(prompts)
    return engine.decode(pre, "magicpig:K=4,L=20", GenerationConfig(max_new_tokens=steps, ignore_eos=True,
                                                                    return_logits=True))


def assert_same_decode(ours, ref):
    for a, b in zip(ours, ref):
        assert a.layer_decoders == b.layer_decoders and "exact" in a.layer_decoders and "offload" in a.layer_decoders
        assert a.token_ids == b.token_ids
        assert len(a.logits) == len(b.logits) == STEPS
        for x, y in zip(a.logits, b.logits):
            assert torch.equal(x, y)
        assert a.cost == b.cost and a.cost1 == b.cost1 and 0 < a.cost < 1
        for key in ("hash", "cpu_retrieve", "cpu_attend", "exact"):
            assert a.timings[key] > 0, key


@pytest.mark.parametrize("kind", [*TINY_KINDS, "biased-llama"])
@pytest.mark.parametrize("batch", [1, 2])
def test_whole_step_equals_the_layer_loop(kind, batch, loop_calls):
    """Sequences of equal length (no padding): the loop runs every step, and its logits, tokens and costs
    equal the layer-by-layer route's exactly, across the growth of the decoders' buffers."""
    model = biased_llama() if kind == "biased-llama" else tiny_model(kind)
    prompts = [random_prompt(200, seed=31 + b) for b in range(batch)]
    ours = decode(model, prompts, True)
    assert loop_calls["n"] == STEPS - 1  # every forward after the prefill's first token
    loop_calls["n"] = 0
    ref = decode(model, prompts, False)
    assert loop_calls["n"] == 0
    assert_same_decode(ours, ref)


def test_whole_step_with_bfloat16_offloaded_keys(loop_calls):
    model = tiny_model("llama")
    prompts = [random_prompt(150, seed=41)]
    ours = decode(model, prompts, True, offload_dtype="bfloat16")
    assert loop_calls["n"] == STEPS - 1
    assert_same_decode(ours, decode(model, prompts, False, offload_dtype="bfloat16"))


def test_padded_batch_takes_the_layer_loop(loop_calls):
    """Left padding puts a mask on the dense layers' keys: the loop does not apply and the Python loop runs."""
    model = tiny_model("qwen2")
    res = decode(model, [random_prompt(130, seed=51), random_prompt(77, seed=52)], True, steps=3)
    assert loop_calls["n"] == 0 and res[0].forward == "magicpig"


def small_loop():
    """A one-layer DecodeLoop of B=1, D=32, H=4, H_kv=2, d=8, F=48 with random float32 weights."""
    mod = cpu.load()
    g = torch.Generator().manual_seed(0)
    D, H, Hkv, d, F = 32, 4, 2, 8, 48
    loop = mod.DecodeLoop(1, D, H, Hkv, d, F, cpu.ISA_CODES[cpu.isa()], 1)

    def w(*shape):
        return torch.randn(*shape, generator=g)

    loop.add_layer(torch.ones(D), 1e-6, [w(H * d, D), w(Hkv * d, D), w(Hkv * d, D)], [None] * 3, w(D, H * d), None,
                   torch.ones(D), 1e-6, [w(F, D), w(F, D), w(D, F)], [None] * 3, d ** -0.5)
    return loop, (D, H, Hkv, d)


def test_decode_loop_checks_its_arguments():
    loop, (D, H, Hkv, d) = small_loop()
    h, cs = torch.randn(1, D), torch.randn(1, d)
    with pytest.raises(RuntimeError, match="has no attention"):
        loop.step(h, cs, cs)
    k_buf, v_buf = torch.zeros(1, Hkv, 3, d), torch.zeros(1, Hkv, 3, d)
    with pytest.raises(RuntimeError, match="do not fit"):
        loop.set_exact(0, k_buf, v_buf, 4)
    loop.set_exact(0, k_buf, v_buf, 1)
    with pytest.raises(RuntimeError, match="h must be"):
        loop.step(torch.randn(2, D), cs, cs)
    with pytest.raises(RuntimeError, match="cos and sin"):
        loop.step(h, torch.randn(1, d + 2), cs)
    with pytest.raises(RuntimeError, match="k_buf and v_buf"):
        loop.set_buffers(0, torch.zeros(1, Hkv + 1, 8, d), torch.zeros(1, Hkv + 1, 8, d))
    with pytest.raises(RuntimeError, match="layer index"):
        loop.set_buffers(1, k_buf, v_buf)
    assert loop.room() == 2
    out, sampled, _ = loop.step(h, cs, cs)
    assert out.shape == (1, D) and bool(torch.isfinite(out).all()) and sampled.shape == (0, 1, H)
    loop.step(h, cs, cs)
    assert loop.filled(0) == 3 and loop.room() == 0
    with pytest.raises(RuntimeError, match="full"):
        loop.step(h, cs, cs)
    room = torch.zeros(1, Hkv, 5, d)
    loop.set_buffers(0, torch.cat([k_buf, room], 2), torch.cat([v_buf, room], 2))
    assert loop.room() == 5


def test_decode_loop_step_equals_the_kernels_it_chains():
    """One dense layer stepped by the loop equals kernel 6's attention_in, kernel 7 and kernel 5 and kernel
    6's mlp_residual called one by one."""
    loop, (D, H, Hkv, d) = small_loop()
    mod = cpu.load()
    g = torch.Generator().manual_seed(1)
    k_buf, v_buf = torch.randn(1, Hkv, 9, d, generator=g), torch.randn(1, Hkv, 9, d, generator=g)
    k_ref, v_ref = k_buf.clone(), v_buf.clone()
    loop.set_exact(0, k_buf, v_buf, 5)
    h, cos, sin = torch.randn(1, D, generator=g), torch.rand(1, d, generator=g), torch.rand(1, d, generator=g)
    out = loop.step(h, cos, sin)[0].clone()
    # the same layer by its kernels (small_loop's weights, drawn again from the same seed)
    gw = torch.Generator().manual_seed(0)

    def w(*shape):
        return torch.randn(*shape, generator=gw)

    qkv_w, o = [w(H * d, D), w(Hkv * d, D), w(Hkv * d, D)], w(D, H * d)
    mlp = [w(48, D), w(48, D), w(D, 48)]
    isa, ones = cpu.ISA_CODES[cpu.isa()], torch.ones(D)
    qkv = mod.attention_in(h, ones, 1e-6, qkv_w, [None] * 3, cos, sin, H, Hkv, isa, 1)
    k_new, v_new = qkv[:, H * d:(H + Hkv) * d].view(1, Hkv, 1, d), qkv[:, (H + Hkv) * d:].view(1, Hkv, 1, d)
    mod.append_kv(k_ref, v_ref, 5, k_new, v_new, None)
    q = qkv[:, :H * d].reshape(1, H, d).contiguous()
    att, _ = mod.exact_attend(q, k_ref[:, :, :6], v_ref[:, :, :6], d ** -0.5, isa, 1, None, None)
    ref = h.clone()
    mod.mlp_residual(ref, ones, 1e-6, mlp, [None] * 3, isa, 1, att, o, None)
    assert torch.equal(out, ref)
    assert torch.equal(k_buf[:, :, :6], k_ref[:, :, :6]) and torch.equal(v_buf[:, :, :6], v_ref[:, :, :6])
