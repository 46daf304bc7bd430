"""magicpig.decode_weights: the storages kernel 4 reads, against their definitions, and the decode with them."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from magicpig import cpu
from magicpig.decode_weights import Q8_BLOCK, WEIGHT_FORMATS, check_weight_format, decode_weight, pack, unpack
from magicpig.engine import Engine, GenerationConfig
from tiny_models import random_prompt, tiny_model


@pytest.mark.parametrize("O,I", [(1, 32), (7, 96), (33, 576)])
def test_q8_0_is_gguf_rule_with_half_a_step_of_error(O, I):
    gen = torch.Generator().manual_seed(O + I)
    w = torch.randn(O, I, generator=gen) * torch.logspace(-3, 1, I)  # blocks of very different scales
    w[0, :Q8_BLOCK] = 0.0
    packed = pack(w, "q8_0")
    assert packed.dtype == torch.int8 and packed.shape == (O, I + I // 8)
    scale = packed[:, I:].contiguous().view(torch.float32)
    blocks = w.reshape(O, I // Q8_BLOCK, Q8_BLOCK)
    torch.testing.assert_close(scale, blocks.abs().amax(-1) / 127, rtol=0, atol=0)
    q = packed[:, :I].reshape(O, -1, Q8_BLOCK).float()
    assert q.abs().max() <= 127 and (q.abs().amax(-1)[scale > 0] == 127).all()  # the largest maps to +-127
    err = (unpack(packed, I) - w).abs().reshape(O, -1, Q8_BLOCK)
    assert (err <= scale[..., None] / 2 * (1 + 1e-5) + 1e-12).all()
    assert unpack(packed, I)[0, :Q8_BLOCK].eq(0).all() and torch.isfinite(unpack(packed, I)).all()


def test_other_storages_and_unpackable_widths():
    w = torch.randn(5, 40)
    assert pack(w, "model").data_ptr() == w.data_ptr()
    assert pack(w, "bfloat16").dtype == torch.bfloat16
    assert pack(w, "q8_0").dtype == torch.float32  # 40 is not a multiple of 32: the model's tensor
    assert WEIGHT_FORMATS == ("model", "bfloat16", "q8_0")
    with pytest.raises(ValueError, match="weights must be one of model, bfloat16, q8_0"):
        check_weight_format("q4")


def test_copies_are_cached_until_the_weight_changes():
    lin = nn.Linear(64, 8)
    a = decode_weight(lin, "q8_0")
    assert decode_weight(lin, "q8_0") is a
    with torch.no_grad():
        lin.weight.mul_(2)
    b = decode_weight(lin, "q8_0")
    assert b is not a
    torch.testing.assert_close(unpack(b, 64), 2 * unpack(a, 64), rtol=1e-6, atol=1e-6)
    assert decode_weight(lin, "model").data_ptr() == lin.weight.data_ptr()


def test_weight_bytes_counts_each_storage():
    """The bytes per weight the bytes-limit and the projection charge are the packed tensors' sizes."""
    from magicpig.harness.projection import weight_elem_bytes

    w = torch.randn(10, 64)
    for fmt in ("bfloat16", "q8_0"):
        packed = pack(w, fmt)
        assert packed.numel() * packed.element_size() == weight_elem_bytes(fmt) * w.numel()
    assert pack(w, "bfloat16").numel() * 2 == 640 * 2 and pack(w, "q8_0").numel() == 10 * (64 + 8)
    assert weight_elem_bytes("model") is None  # the model's own tensors: its dtype's size


@pytest.mark.skipif(not cpu.available(), reason="the CPU module cannot be built here")
@pytest.mark.parametrize("forward", ["transformers", "magicpig"])
def test_decode_with_stored_weights(forward):
    """bfloat16: the decode of a model whose weights ARE the bfloat16 copies (from the same prefill: prefill
    runs the model's own weights), through both layer loops. q8_0 (which quantizes the step's input too): the
    first step's logits within 2% of the float32 decode's range, and not equal to them (later steps drift
    further: a random tiny model amplifies differences)."""
    model = tiny_model("llama")
    prompt = random_prompt(100, seed=5)
    cfg = GenerationConfig(max_new_tokens=4, ignore_eos=True, return_logits=True)
    continuation = [random_prompt(4, seed=6)]  # forced tokens: every decode sees the same inputs
    pre = Engine(model).prefill(prompt)

    def logits(net, fmt="model"):
        res = Engine(net, linear_impl="magicpig", decode_forward=forward, decode_weights=fmt).decode(
            pre, "dense", cfg, continuation_ids=continuation)[0]
        assert res.linear == "magicpig" and res.forward == forward
        return torch.stack(res.logits)

    exact = logits(model)
    twin = tiny_model("llama")
    with torch.no_grad():
        for m, m2 in zip(model.modules(), twin.modules()):
            if isinstance(m, nn.Linear):
                m2.weight.copy_(unpack(pack(m.weight, "bfloat16"), m.in_features))
    torch.testing.assert_close(logits(model, "bfloat16"), logits(twin), rtol=1e-4, atol=1e-4)
    q8 = logits(model, "q8_0")
    assert 0 < (q8[0] - exact[0]).abs().max() < 0.02 * (exact[0].max() - exact[0].min())
