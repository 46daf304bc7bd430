"""The storage of the linear layers' weights that kernel 4 reads in a CPU decode step.

Why: at batch 1 a decode step reads every weight matrix once, so the bytes of the weights set its time at
short contexts (SmolLM2-135M: 0.54 GB in float32 against 3 MB of keys and values per 1K tokens). Kernel 4
reads three storages (``magicpig_cpu.h``: ``WeightFormat``):

- ``model``: the model's own tensors (float32 or bfloat16), no copy: the decode equals transformers' up to
  float32 summation order.
- ``bfloat16``: a bfloat16 copy (half the bytes of float32; 8 bits of mantissa).
- ``q8_0``: GGUF's Q8_0 rule, per block of 32 weights of a row a float32 scale ``d = max|w| / 127`` and int8
  values ``round(w / d)`` (9 bits a weight, 28% of float32); the error of a weight is at most ``d / 2``.
  Kernel 4 quantizes the step's input by the same rule and sums each block's int8 products exactly, as
  llama.cpp's Q8_0 dot product does (``q8_0_linear`` is the torch reference). Layers whose input width is
  not a multiple of 32 keep ``model``.

The copies are made once per weight (and again only when the weight changes: its tensor version) and held
in a weak cache keyed by the module, so prefill and every other use of the model keep its own weights.

>>> import torch
>>> w = torch.randn(64, 96)
>>> packed = pack(w, "q8_0")
>>> tuple(packed.shape), packed.dtype  # 96 int8 values + 3 float32 scales per row
((64, 108), torch.int8)
>>> bool((unpack(packed, 96) - w).abs().max() <= w.abs().max() / 254 + 1e-6)
True
"""
from __future__ import annotations

import weakref

import torch
from torch import nn

WEIGHT_FORMATS = ("model", "bfloat16", "q8_0")
Q8_BLOCK = 32
_cache: "weakref.WeakKeyDictionary[nn.Module, tuple]" = weakref.WeakKeyDictionary()


def check_weight_format(fmt: str, field: str = "weights") -> str:
    if fmt not in WEIGHT_FORMATS:
        raise ValueError(f"{field} must be one of {', '.join(WEIGHT_FORMATS)} (how the decode step's linear "
                         f"weights are stored for kernel 4), got {fmt!r}")
    return fmt


def packable(weight: torch.Tensor, fmt: str) -> bool:
    """Whether ``weight`` (O, I) can be stored as ``fmt`` (q8_0 needs I a multiple of 32)."""
    return fmt != "q8_0" or weight.shape[-1] % Q8_BLOCK == 0


def pack(weight: torch.Tensor, fmt: str) -> torch.Tensor:
    """``weight`` (O, I) float -> the tensor kernel 4 reads for ``fmt``: the weight itself (``model``),
    (O, I) bfloat16, or (O, I + I / 8) int8 holding I int8 values then I / 32 float32 scales per row."""
    check_weight_format(fmt)
    w = weight.detach()
    if fmt == "model" or not packable(w, fmt):
        return w.contiguous()
    if fmt == "bfloat16":
        return w.to(torch.bfloat16).contiguous()
    q, scale = quantize_q8_0(w)
    return torch.cat([q, scale.contiguous().view(torch.int8)], dim=1).contiguous()


def quantize_q8_0(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, I) float -> int8 values (R, I) and float32 scales (R, I / 32): per block ``d = max|x| / 127``,
    ``q = round-half-even(x / d)`` (0 where d = 0)."""
    R, I = x.shape
    blocks = x.float().reshape(R, I // Q8_BLOCK, Q8_BLOCK)
    scale = blocks.abs().amax(-1) / 127.0
    q = torch.where(scale[..., None] > 0, blocks / scale.clamp_min(torch.finfo(torch.float32).tiny)[..., None],
                    torch.zeros((), dtype=torch.float32))
    return q.round().clamp_(-127, 127).to(torch.int8).reshape(R, I), scale


def unpack(packed: torch.Tensor, in_features: int) -> torch.Tensor:
    """The float32 (O, I) weight a packed tensor stands for (the reference of kernel 4's q8_0 path)."""
    if packed.dtype != torch.int8:
        return packed.float()
    O, I = packed.shape[0], in_features
    q = packed[:, :I].float().reshape(O, I // Q8_BLOCK, Q8_BLOCK)
    scale = packed[:, I:].contiguous().view(torch.float32)  # (O, I / 32)
    return (q * scale[..., None]).reshape(O, I)


def q8_0_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """What kernel 4 computes for x (M, I) float32 and a q8_0 weight: x quantized by the same rule, per
    block the integer sum of the int8 products times both scales, summed over the blocks."""
    M, I = x.shape
    qx, dx = quantize_q8_0(x)
    qw, dw = packed[:, :I], packed[:, I:].contiguous().view(torch.float32)
    blocks = I // Q8_BLOCK
    dots = torch.einsum("mbi,obi->mob", qx.reshape(M, blocks, Q8_BLOCK).double(),
                        qw.reshape(-1, blocks, Q8_BLOCK).double())  # exact integers
    y = (dots * (dw[None] * dx[:, None]).double()).sum(-1).float()
    return y if bias is None else y + bias


def decode_weight(module: nn.Linear, fmt: str) -> torch.Tensor:
    """``module.weight`` stored as ``fmt`` for kernel 4, made once and cached while the weight is unchanged."""
    w = module.weight
    if fmt == "model" or not packable(w, fmt):
        return w.detach()
    key = (fmt, w.data_ptr(), w._version)
    hit = _cache.get(module)
    if hit is not None and hit[0] == key:
        return hit[1]
    packed = pack(w, fmt)
    _cache[module] = (key, packed)
    return packed

