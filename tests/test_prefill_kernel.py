"""Kernel 8 (``csrc/prefill.cpp``, ``magicpig.cpu.prefill``): exact causal attention of a bfloat16 prefill
block against float32 SDPA on awkward sizes, the engine's bfloat16 prefill reaching it for every chunk, the
mask hook that lets later chunks through, the fallbacks, and the eval settings that keep its rows apart."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tiny_models import random_prompt, tiny_model
from magicpig.cpu import prefill as kernel8
from magicpig.engine import Engine

needs_kernel = pytest.mark.skipif(
    not kernel8.prefill_kernel_usable(),
    reason="kernel 8 needs the CPU module, a CPU with AVX512-BF16 and MAGICPIG_ISA auto or avx512")


def _reference(q, k, v, scale):
    """float32 SDPA of the same bfloat16 inputs, query i at position kv - q + i -> (B, q, H, d)."""
    G, nq, kv = q.shape[1] // k.shape[1], q.shape[2], k.shape[2]
    mask = torch.arange(kv)[None, :] <= torch.arange(nq)[:, None] + (kv - nq)
    return F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(G, 1),
                                          v.float().repeat_interleave(G, 1), attn_mask=mask,
                                          scale=scale).transpose(1, 2)


@needs_kernel
@pytest.mark.parametrize("B,H,Hkv,nq,kv,d", [(1, 9, 3, 37, 37, 64), (2, 4, 2, 50, 83, 32), (1, 14, 2, 1, 130, 64),
                                             (1, 8, 8, 17, 17, 128), (2, 6, 3, 129, 300, 96),
                                             (1, 2, 1, 16, 16, 256), (1, 3, 1, 33, 1000, 64)])
def test_kernel_matches_float32_sdpa_within_bfloat16_precision(B, H, Hkv, nq, kv, d):
    g = torch.Generator().manual_seed(B * 1000 + nq + kv + d)
    q, k, v = (torch.randn(B, h, n, d, generator=g).bfloat16() for h, n in ((H, nq), (Hkv, kv), (Hkv, kv)))
    scale = d ** -0.5
    out = kernel8.prefill_attention(q, k, v, scale)
    ref = _reference(q, k, v, scale)
    torch_bf16 = F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.arange(kv)[None, :] <= torch.arange(nq)[:, None] + (kv - nq), scale=scale,
        enable_gqa=True).transpose(1, 2).float()
    assert out.shape == (B, nq, H, d) and out.dtype == torch.float32
    err, torch_err = (out - ref).abs().max().item(), (torch_bf16 - ref).abs().max().item()
    assert err <= max(2 * torch_err, 4e-3), (err, torch_err)
    # the first query row of a block sees exactly kv - q + 1 keys: its output is the average the weights give
    first = _reference(q[:, :, :1], k[:, :, :kv - nq + 1], v[:, :, :kv - nq + 1], scale)
    assert (out[:, :1] - first).abs().max().item() <= max(2 * torch_err, 4e-3)


@needs_kernel
def test_kernel_is_stable_for_large_logits_and_refuses_bad_input_by_name():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 40, 64, generator=g).bfloat16() for _ in range(3))
    out = kernel8.prefill_attention(q * 60, k * 60, v, 1.0)  # logits in the thousands
    assert torch.isfinite(out).all()
    assert (out - _reference(q * 60, k * 60, v, 1.0)).abs().max().item() < 0.05
    mod = kernel8.load()
    with pytest.raises(RuntimeError, match="head dim must be a multiple of 32"):
        mod.prefill_attend(q[..., :48].contiguous(), k[..., :48].contiguous(), v[..., :48].contiguous(), 1.0, 1)
    with pytest.raises(RuntimeError, match="k must be BFloat16, got Float"):
        mod.prefill_attend(q, k.float(), v, 1.0, 1)
    with pytest.raises(RuntimeError, match=r"q's length must be in \[1, kv\]"):
        mod.prefill_attend(q, k[:, :, :10].contiguous(), v[:, :, :10].contiguous(), 1.0, 1)
    # where the kernel does not apply the wrapper says so with None, and the caller keeps SDPA
    assert kernel8.prefill_attention(q.float(), k.float(), v.float(), 1.0) is None
    assert kernel8.prefill_attention(q[..., :48], k[..., :48], v[..., :48], 1.0) is None


def test_a_plain_later_chunk_gets_no_mask_and_padding_or_a_window_keep_theirs():
    from transformers.masking_utils import sdpa_mask

    from magicpig.attention import _mask_for

    mask = _mask_for(sdpa_mask)
    assert mask(batch_size=1, q_length=4, kv_length=10, q_offset=6) is None  # a later prefill chunk
    assert mask(batch_size=1, q_length=4, kv_length=10, q_offset=6,
                attention_mask=torch.ones(1, 10, dtype=torch.bool)) is None
    padded = torch.ones(1, 10, dtype=torch.bool)
    padded[0, 0] = False
    got = mask(batch_size=1, q_length=4, kv_length=10, q_offset=6, attention_mask=padded)
    want = sdpa_mask(batch_size=1, q_length=4, kv_length=10, q_offset=6, attention_mask=padded)
    assert got is not None and torch.equal(got, want)
    assert mask(batch_size=1, q_length=4, kv_length=10, q_offset=6, local_size=3) is not None


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_bfloat16_prefill_attends_every_chunk_with_the_kernel_and_stays_close(monkeypatch, kind):
    calls = []
    real = kernel8.prefill_attention

    def counted(*args):
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(kernel8, "prefill_attention", counted)
    model = tiny_model(kind, layers=2, hidden=128, heads=4, kv_heads=2)  # head dim 32
    prompt = random_prompt(300, seed=7)
    exact = Engine(model, None, prefill_chunk=128).prefill(prompt)
    assert calls == []  # the float32 prefill never asks for kernel 8
    fast = Engine(model, None, prefill_chunk=128, prefill_dtype="bfloat16").prefill(prompt)
    # 2 layers x 3 chunks (128, 128, 44), none of them masked; where the kernel is not usable it is not asked
    # (no bfloat16 copies made for nothing)
    assert calls == [True] * (2 * 3 if kernel8.prefill_kernel_usable() else 0)
    diff = (exact.logits - fast.logits).abs().max().item()
    assert 0 < diff < 0.05 * exact.logits.abs().max().item()
    assert int(exact.logits.argmax()) == int(fast.logits.argmax())
    assert all(k.dtype == torch.float32 for k in fast.keys + fast.values)


def test_a_narrower_isa_turns_the_kernel_off_and_eval_settings_name_it(monkeypatch):
    from magicpig.harness.evaluate import EvalConfig, run_settings
    from magicpig.methods.exact import Dense

    monkeypatch.setenv("MAGICPIG_ISA", "scalar")
    assert not kernel8.prefill_kernel_usable()
    q = torch.randn(1, 2, 40, 64).bfloat16()
    assert kernel8.prefill_attention(q, q[:, :1], q[:, :1], 1.0) is None

    class Task:
        def describe(self):
            return {"task": "t"}

    def settings(dtype):
        cfg = EvalConfig(model="m", methods=["dense"], tasks=["t"], lengths=[64], samples=1, out=Path("unused"),
                         backend="reference", prefill_dtype=dtype, device="cpu")
        return run_settings(cfg, "t", Task(), 64, Dense())

    assert "prefill_attention" not in settings("bfloat16")
    monkeypatch.delenv("MAGICPIG_ISA")
    usable = kernel8.prefill_kernel_usable()
    assert (settings("bfloat16").get("prefill_attention") == kernel8.KERNEL) == usable
    assert "prefill_attention" not in settings("float32") and "prefill_dtype" not in settings("float32")
