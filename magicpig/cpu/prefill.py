"""Kernel 8 from Python: exact causal attention of a bfloat16 prefill block (``csrc/prefill.cpp``).

A bfloat16 prefill (``magicpig.prefill_dtype``) on a CPU with AVX512-BF16 computes its attention here
instead of torch's SDPA, whose CPU kernel multiplies bfloat16 no faster than float32: the logits and the
output accumulate in float32 from bfloat16 products, the softmax weights meet the values in bfloat16, as in
torch's bfloat16 SDPA. ``magicpig.attention.exact_attention`` calls ``prefill_attention`` for a block
without a mask (plain causal) and keeps SDPA when it returns None.

>>> import torch
>>> q, k, v = (torch.randn(1, h, 40, 64, dtype=torch.bfloat16) for h in (4, 2, 2))
>>> out = prefill_attention(q, k, v, 0.125)  # (1, 40, 4, 64) float32, or None without the kernel
>>> out is None or tuple(out.shape) == (1, 40, 4, 64)
True
"""
from __future__ import annotations

import functools
import os

import torch

from magicpig.cpu.env import ISA_ENV, isa_name, num_threads
from magicpig.cpu.extension import available, load

KERNEL = "kernel 8"  # what an eval's settings record for a bfloat16 prefill attended here


@functools.lru_cache(maxsize=1)
def _cpu_runs_kernel() -> bool:
    return available() and bool(load().prefill_supported())


def prefill_kernel_usable() -> bool:
    """Whether bfloat16 prefill blocks are attended by kernel 8 here: the module builds, the CPU has
    AVX512-BF16 and ``$MAGICPIG_ISA`` does not ask for a narrower variant (scalar, avx2)."""
    return isa_name(os.environ.get(ISA_ENV, "auto")) in ("auto", "avx512") and _cpu_runs_kernel()


def prefill_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      scale: float | None) -> torch.Tensor | None:
    """Causal attention of q query rows over kv >= q keys, row i at position kv - q + i: query (B, H, q, d),
    key and value (B, H_kv, kv, d), all bfloat16 on the CPU -> (B, q, H, d) float32; None where kernel 8
    does not apply (another dtype or device, a head dim that is not a multiple of 32 up to 256, or
    ``prefill_kernel_usable()`` false)."""
    if not all(t.dtype == torch.bfloat16 and t.device.type == "cpu" for t in (query, key, value)):
        return None
    d = query.shape[-1]
    if d % 32 or d > 256 or query.shape[2] > key.shape[2] or not prefill_kernel_usable():
        return None
    scale = float(d ** -0.5 if scale is None else scale)
    return load().prefill_attend(query.contiguous(), key.contiguous(), value.contiguous(), scale, num_threads())
