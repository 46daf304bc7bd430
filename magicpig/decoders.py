"""Decoders: how one layer of a ``magicpig.cache.MagicPIGCache`` attends a decode query after prefill.

At the end of prefill each layer gets a decoder, chosen by the method (``AttentionMethod.make_decoder``,
given a ``DecoderContext``):

* ``ReferenceDecoder`` (``kind = "reference"``; backend ``reference``, every method without a system
  path, and their dense layers): all keys/values stay on the device; ``method.prepare`` runs once,
  ``method.attend(..., state=...)`` every step.
* ``ExactDecoder`` (``"exact"``; backend ``offload``, the dense layers of MagicPIG): keys/values on the
  device in the model's dtype, attended with the device's fused kernel (``decode_exact``), never copied
  to float32.
* ``OffloadDecoder`` (``"offload"``; backend ``offload``, MagicPIG's sparse layers): the paper's
  heterogeneous split. Keys are centred (c = mean of the offloaded keys) and hashed (CPU model: the CPU
  module's kernel 0; GPU model: on the GPU); sinks, the last ``local`` prompt keys and every generated
  key (centred with the same c) stay on the device, in the model's dtype, and are attended exactly by
  the fused kernel; the offloaded keys/values and their hash tables move to CPU memory and are attended
  by the CPU layer (``magicpig.cpu.OffloadedLayer`` or its torch twin
  ``magicpig.cpu.torch_twin.TorchOffloadedLayer``); the two partial results merge by log-sum-exp. On a GPU
  the query and its codes go to pinned host buffers with non-blocking copies, the static part is queued
  on the GPU before the CPU part runs (so the two overlap; a CUDA event, not a device synchronize, tells
  the CPU part when its inputs have arrived), and the CPU results come back the same way. On a CPU model
  with the compiled layer, a step of the layer is one call of the CPU module (``decode_step``: query
  hashing, retrieval, sampled attention, the static part by kernel 5 and the merge); the exact dense
  layers use kernel 5 as well (``decode_exact``'s ``kernel``).

Timings: every decoder adds seconds to a shared ``timings`` dict (keys ``TIMING_KEYS``, see
``MagicPIGCache``), read by ``Engine.decode`` into ``GenerationResult.timings``.

Decoders never modify the prefill tensors they are built from, so one prefill can be decoded with many
methods (``magicpig.engine.Engine.decode``).

Imports: this module knows the CPU layer only by its protocol (``OffloadDecoder``), and the methods call
it only through the ``DecoderContext`` they are handed, so neither the methods nor ``magicpig.cpu`` (whose
``self_check`` drives an ``OffloadDecoder``) are imported back.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import torch
import torch.nn.functional as F

from magicpig import lsh
from magicpig.merge import merge_attention
from magicpig.methods import AttentionResult, KeyLayout, MagicPIG
from magicpig.methods.base import AttentionMethod, default_scale, masked_keys
from magicpig.methods.exact import Dense
from magicpig.methods.magicpig import split_static_offloaded

OFFLOAD_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # the CPU module's key/value storages
OFFLOAD_DTYPE_CHOICES = ("auto",) + tuple(OFFLOAD_DTYPES)  # auto: the model's dtype when bfloat16, else float32
TIMING_KEYS = ("hash", "cpu_attend", "cpu_retrieve", "cpu_wait", "transfer", "exact")
DECODER_KINDS = ("reference", "exact", "offload")
_NEG_INF = float("-inf")


# ---- small helpers -----------------------------------------------------------------------------------
class GrowBuffer:
    """A tensor that grows along ``dim`` by appending, with amortised doubling of its storage."""

    def __init__(self, initial: torch.Tensor, dim: int, slack: int = 64):
        self.dim = dim
        self.n = initial.shape[dim]
        shape = list(initial.shape)
        shape[dim] = self.n + slack
        self.data = torch.empty(shape, dtype=initial.dtype, device=initial.device)
        self.data.narrow(dim, 0, self.n).copy_(initial)

    def reserve(self, extra: int) -> torch.Tensor:
        """Room for ``extra`` more entries (the storage doubles when it runs out); returns the storage."""
        if self.n + extra > self.data.shape[self.dim]:
            shape = list(self.data.shape)
            shape[self.dim] = max(2 * shape[self.dim], self.n + extra)
            grown = torch.empty(shape, dtype=self.data.dtype, device=self.data.device)
            grown.narrow(self.dim, 0, self.n).copy_(self.view())
            self.data = grown
        return self.data

    def append(self, x: torch.Tensor) -> None:
        extra = x.shape[self.dim]
        self.reserve(extra).narrow(self.dim, self.n, extra).copy_(x)
        self.n += extra

    def view(self) -> torch.Tensor:
        return self.data.narrow(self.dim, 0, self.n)


def append_kv_fn(k_buffer: GrowBuffer, v_buffer: GrowBuffer, valid: GrowBuffer | None, kernel: Callable | None):
    """``kernel`` (the CPU module's kernel 7, ``append_kv``, or None) appending to ``k_buffer`` /
    ``v_buffer`` (B, H_kv, cap, d): a function ``append(k, v, center)`` (center (B, H_kv, d) float32 or
    None) that writes k - center and v in one call; None where it does not apply (no kernel, a device
    buffer, a dtype it has no path for, a padding mask to extend). A decode step appends one row per
    kv-head: the tensor operations it replaces cost more than the copy."""
    data = k_buffer.data
    if (kernel is None or data.device.type != "cpu" or data.dtype not in (torch.float32, torch.bfloat16)
            or valid is not None or k_buffer.dim != 2):
        return None

    def append(k: torch.Tensor, v: torch.Tensor, center: torch.Tensor | None) -> None:
        m = k.shape[2]
        kernel(k_buffer.reserve(m), v_buffer.reserve(m), k_buffer.n, k, v, center)
        k_buffer.n += m
        v_buffer.n += m

    return append


def _compact(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Indices that move the True entries of each row of ``mask`` (B, n) to the front, in order.

    Returns (index (B, m) long, counts (B,) long, m = max count)."""
    counts = mask.sum(1)
    m = int(counts.max()) if mask.numel() else 0
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices[:, :m]
    return order, counts, m


def _gather_keys(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, H_kv, n, ...) gathered along n with index (B, m) -> (B, H_kv, m, ...)."""
    B, Hkv = x.shape[:2]
    idx = index[:, None, :].expand(B, Hkv, index.shape[1])
    idx = idx.reshape(*idx.shape, *([1] * (x.dim() - 3))).expand(B, Hkv, index.shape[1], *x.shape[3:])
    return torch.gather(x, 2, idx)


def _zero_padding(x: torch.Tensor, layout: KeyLayout) -> torch.Tensor:
    """Zero the rows of padding positions (their states are never attended; this keeps NaN out)."""
    return x.masked_fill(~layout.valid()[:, None, :, None], 0)


def offload_dtype_of(value: Any) -> torch.dtype | None:
    """``offload_dtype`` (None/"auto", a name of OFFLOAD_DTYPES or its dtype) -> the dtype; None: the model's choice."""
    if value is None or value == "auto":
        return None
    if isinstance(value, str) and value in OFFLOAD_DTYPES:
        return OFFLOAD_DTYPES[value]
    if isinstance(value, torch.dtype) and value in OFFLOAD_DTYPES.values():
        return value
    raise ValueError(f"offload_dtype must be one of {', '.join(OFFLOAD_DTYPE_CHOICES)} (how the offloaded "
                     f"keys/values are stored in CPU memory), got {value!r}")


def host_buffer(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A CPU tensor for copies to / from ``device``: pinned (page-locked, so non-blocking copies are
    truly asynchronous) when the device is a CUDA GPU, plain otherwise. The one place that pins."""
    pin = device.type == "cuda" and torch.cuda.is_available()
    return torch.empty(shape, dtype=dtype, pin_memory=pin)


def row_ranges(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, n) bool mask with one contiguous run of True per row (the offloaded prompt keys: after the
    sinks, before the local window) -> (lo, count) (B,) int64 CPU tensors."""
    m = mask.cpu()
    count = m.sum(1)
    lo = torch.where(count > 0, m.to(torch.int8).argmax(1), torch.zeros_like(count))
    idx = torch.arange(m.shape[1])
    if not torch.equal((idx >= lo[:, None]) & (idx < (lo + count)[:, None]), m):
        raise RuntimeError("internal: the offloaded keys of a sequence are not one contiguous range")
    return lo, count


def offload_center(k: torch.Tensor, layout: KeyLayout, offloaded: torch.Tensor, centering: bool) -> torch.Tensor:
    """(B, H_kv, d) float32 mean of the offloaded keys, computed as ``MagicPIG.prepare`` does (so the
    codes equal the reference's), or zeros without centering.

    k: (B, H_kv, n, d); offloaded: (B, n) bool."""
    if not centering:
        return torch.zeros(k.shape[0], k.shape[1], k.shape[3], device=k.device)
    w = offloaded[:, None, :, None].to(torch.float32)
    padded = bool((layout.start > 0).any())
    kf = masked_keys(k, layout) if padded else k.float()  # the same values; no copy without padding
    return (kf * w).sum(2) / w.sum(2).clamp_min(1.0)


def _add(timings: dict, key: str, since: float) -> float:
    now = time.perf_counter()
    timings[key] = timings.get(key, 0.0) + now - since
    return now


# ---- exact attention of one decode query, for the system path -----------------------------------------
def decode_exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                 valid: torch.Tensor | None = None, kernel: Callable | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact attention of one decode query per head with the device's fused kernel, in the cache dtype.

    q: (B, H, d); k, v: (B, H_kv, n, d) (any strides with a contiguous last dim); valid: (B, n) bool or
    None (all keys). The G = H / H_kv heads of a kv-head are that head's G query rows, so GQA needs no
    copy of the keys. Returns out (B, H, d) float32 and lse (B, H) float32 natural log for the merge
    (-inf, and out 0, for a row without valid keys). CPU: ``_scaled_dot_product_flash_attention_for_cpu``
    (returns the LSE); CUDA, 16-bit, no mask: the flash kernel (returns the LSE); otherwise SDPA for the
    output and the LSE from the (B, H, n) logits (the keys are read twice; the cache is never copied).
    kernel: the CPU module's kernel 5 (``magicpig.cpu.exact_kernel()``), used instead on CPU float32 /
    bfloat16 keys without a mask.
    """
    if (kernel is not None and valid is None and k.device.type == "cpu" and k.dtype == v.dtype
            and k.dtype in (torch.float32, torch.bfloat16)):
        return kernel(q.float().contiguous(), k, v, float(scale))
    B, H, d = q.shape
    Hkv = k.shape[1]
    qg = q.reshape(B, Hkv, H // Hkv, d).to(k.dtype)
    bias = None
    if valid is not None:
        bias = torch.zeros(valid.shape, dtype=k.dtype, device=k.device).masked_fill_(~valid, float("-inf"))
        bias = bias[:, None, None, :]
    if k.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            qg, k, v, 0.0, False, attn_mask=bias, scale=scale)
    elif (k.device.type == "cuda" and bias is None and k.dtype in (torch.float16, torch.bfloat16)
          and d <= 256 and d % 8 == 0):
        res = torch.ops.aten._scaled_dot_product_flash_attention(qg, k, v, 0.0, False, False, scale=scale)
        out, lse = res[0], res[1]
    else:
        out = F.scaled_dot_product_attention(qg, k, v, attn_mask=bias, scale=scale)
        logits = torch.matmul(qg, k.transpose(-1, -2)).float() * scale
        lse = torch.logsumexp(logits if bias is None else logits + bias.float(), dim=-1)
    out, lse = out.reshape(B, H, d).float(), lse.reshape(B, H).float()
    if valid is not None:  # the fused kernels give lse 0 (CPU) or NaN for a row with nothing to attend
        empty = ~valid.any(-1)[:, None]
        lse = torch.where(empty, float("-inf"), lse)
        out = torch.where(empty[..., None], 0.0, out)
    return out, lse


# ---- decoders ----------------------------------------------------------------------------------------
class ReferenceDecoder:
    """All keys/values on the device; the method's own ``attend`` every step.

    k, v: (B, H_kv, n0, d) prefill keys/values (not modified); layout: their KeyLayout (n = n0).
    """

    kind: ClassVar[str] = "reference"

    def __init__(self, method: AttentionMethod, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout,
                 layer_idx: int, generator: torch.Generator | None = None):
        self.method = method
        self.layer_idx = layer_idx
        self.generator = generator  # padding may hold NaN: every method masks it itself (fuzz-tested)
        self.state = method.prepare(k, v, layout, layer_idx)
        self.k = GrowBuffer(k, 2)
        self.v = GrowBuffer(v, 2)
        self.layout = layout

    @property
    def n(self) -> int:
        return self.layout.n

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: (B, H_kv, t, d) keys/values of t new tokens."""
        self.k.append(k)
        self.v.append(v)
        self.layout = self.layout.grow(k.shape[2])

    def attend(self, q: torch.Tensor, scale: float | None) -> AttentionResult:
        """q: (B, H, d) -> AttentionResult (output (B, H, d) float32)."""
        return self.method.attend(q, self.k.view(), self.v.view(), self.layout, scale=scale, state=self.state,
                                  layer_idx=self.layer_idx, generator=self.generator)

    def nbytes(self) -> dict[str, int]:
        dev = (self.k.view().numel() * self.k.data.element_size() * 2)
        return {"device": dev, "cpu": 0}

    @staticmethod
    def estimate_nbytes(method, batch: int, kv_heads: int, n: int, head_dim: int, elem: int, new: int) -> dict:
        """Bytes one layer's decoder will hold (the benchmark's memory check, before building): ``device`` the
        buffers after ``new`` appends (+64 slack) and a MagicPIG state's codes and float32 keys; ``once_device``
        the padding-zeroed build copy, counted once per decode (layers are built one by one)."""
        kv = 2 * batch * kv_heads * head_dim * elem
        state = batch * kv_heads * n * (method.L + head_dim) * 4 if isinstance(method, MagicPIG) else 0
        return {"device": kv * (n + new + 64) + state, "host": 0, "tables": 0, "once_device": kv * n, "once_host": 0}


class ExactDecoder:
    """A dense layer of the system path (backend ``offload``): keys/values stay on the device in the
    model's dtype and every step is one fused exact attention (``decode_exact``).

    k, v: (B, H_kv, n0, d) prefill keys/values (not modified); layout: their KeyLayout. Padding rows are
    zeroed in the decoder's copy (they may hold NaN, which a zero probability would not cancel). kernel:
    see ``decode_exact``; append_kernel: the CPU module's kernel 7 (``append_kv_fn``), or None.
    """

    kind: ClassVar[str] = "exact"

    def __init__(self, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout, layer_idx: int,
                 timings: dict | None = None, kernel: Callable | None = None, append_kernel: Callable | None = None):
        self.layer_idx = layer_idx
        self.kernel = kernel  # decode_exact's CPU kernel, or None
        self.timings = timings if timings is not None else {}
        self.start = layout.start.cpu()
        padded = bool((self.start > 0).any())
        if padded:
            k, v = _zero_padding(k, layout), _zero_padding(v, layout)
        self.k = GrowBuffer(k, 2)
        self.v = GrowBuffer(v, 2)
        self.valid = GrowBuffer(layout.valid(), 1) if padded else None
        self.n_total = layout.n
        self._append = append_kv_fn(self.k, self.v, self.valid, append_kernel)

    @property
    def n(self) -> int:
        return self.n_total

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        if self._append is not None and k.dtype == self.k.data.dtype:
            self._append(k, v, None)
            self.n_total += k.shape[2]
            return
        self.k.append(k)
        self.v.append(v)
        if self.valid is not None:
            self.valid.append(torch.ones(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device))
        self.n_total += k.shape[2]

    def attend(self, q: torch.Tensor, scale: float | None) -> AttentionResult:
        t0 = time.perf_counter()
        out, lse = decode_exact(q, self.k.view(), self.v.view(), default_scale(q, scale),
                                self.valid.view() if self.valid is not None else None, self.kernel)
        _add(self.timings, "exact", t0)
        counts = (self.n_total - self.start).to(torch.float32)[:, None].expand(q.shape[0], q.shape[1])
        return AttentionResult(out, lse, counts, counts, 0.0)

    def nbytes(self) -> dict[str, int]:
        return {"device": self.k.view().numel() * self.k.data.element_size() * 2, "cpu": 0}

    @staticmethod
    def estimate_nbytes(batch: int, kv_heads: int, n: int, head_dim: int, elem: int, new: int) -> dict:
        """As ``ReferenceDecoder.estimate_nbytes`` (no method state)."""
        return ReferenceDecoder.estimate_nbytes(Dense(), batch, kv_heads, n, head_dim, elem, new)


class OffloadDecoder:
    """MagicPIG's heterogeneous decode of one sparse layer (see the module docstring).

    k, v: (B, H_kv, n0, d) prefill keys/values on the model's device (not modified); layout: their
    KeyLayout. layer_class: the class that holds the offloaded keys in CPU memory (``magicpig.cpu
    .OffloadedLayer``, or ``magicpig.cpu.torch_twin.TorchOffloadedLayer``; ``cpu.torch_twin.offload_layer_class``
    picks one by name). Its protocol: ``from_prefill(k, v, center, projections, lo, counts, K, L, dtype,
    min_collisions=...)`` -> layer with ``query_hasher(projections, pool)``, ``attend(q, q_codes,
    min_collisions, scale, timings=...)`` and ``nbytes``; optionally ``attend_checked(q, q_codes, scale,
    timings)`` (no Python checks). concurrent: queue the device's static part before the CPU part runs
    (on a GPU the two then overlap); False computes it after the CPU part (same result). offload_dtype: how
    the offloaded keys/values are stored in CPU memory (float32 / bfloat16; None: bfloat16 for a bfloat16
    model, else float32). timings: the dict the per-step seconds are added to (``TIMING_KEYS``);
    projection_pool: a list shared by the layers of one cache, so that layers with equal projections
    share their padded copy. stage_through_host: hash the queries on the model's device and pass them and
    the results through host buffers (None: when the model is not on the CPU; True on a CPU model runs the
    GPU route, for tests); otherwise the CPU layer hashes the queries itself.
    """

    kind: ClassVar[str] = "offload"

    def __init__(self, method: MagicPIG, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout, layer_idx: int,
                 layer_class: type, concurrent: bool = True, offload_dtype: torch.dtype | None = None,
                 timings: dict | None = None, projection_pool: list | None = None,
                 stage_through_host: bool | None = None):
        self.method = method
        self.layer_idx = layer_idx
        self.concurrent = concurrent
        self.timings = timings if timings is not None else {}
        self.n_total = layout.n
        self.device = k.device
        self.staged = k.device.type != "cpu" if stage_through_host is None else bool(stage_through_host)
        maker = getattr(layer_class, "exact_kernel", None) if k.device.type == "cpu" else None
        self._exact = maker() if maker is not None else None  # decode_exact's CPU kernel for the static part
        maker = getattr(layer_class, "append_kernel", None) if k.device.type == "cpu" else None
        append_kernel = maker() if maker is not None else None
        static, offloaded = split_static_offloaded(layout, method.sinks, method.local)
        self.center = offload_center(k, layout, offloaded, method.centering)  # (B, H_kv, d) float32
        self.projections = method.projections(layer_idx, k.shape[1], k.shape[3], device=k.device)
        # static part: sinks + local window (compacted to the front), generated keys appended after; kept
        # centred, in the model's dtype
        s_idx, s_counts, s_max = _compact(static)
        keep = torch.arange(s_max, device=k.device)[None] < s_counts[:, None]  # (B, s_max)
        ks = (_gather_keys(k, s_idx).float() - self.center[:, :, None]).masked_fill(~keep[:, None, :, None], 0)
        vs = _gather_keys(v, s_idx).masked_fill(~keep[:, None, :, None], 0)
        self.k_static = GrowBuffer(ks.to(k.dtype), 2)
        self.v_static = GrowBuffer(vs, 2)
        # a mask only where some sequence has fewer static keys than another (generated keys are valid)
        self.static_valid = None if bool(keep.all()) else GrowBuffer(keep, 1)
        # offloaded part: one contiguous run of prompt keys per sequence, hashed, centred and stored in
        # CPU memory with its hash tables in one pass (from_prefill: the CPU layer's plan)
        lo, counts = row_ranges(offloaded)
        self.counts = counts  # (B,) int64 on the CPU
        self.cpu_layer = None
        self._hash_on_cpu = self._checked = False
        if int(counts.max()) > 0:
            store = offload_dtype or (torch.bfloat16 if v.dtype == torch.bfloat16 else torch.float32)
            self.cpu_layer = layer_class.from_prefill(k, v, self.center, self.projections, lo, counts, method.K,
                                                      method.L, store, min_collisions=method.min_collisions)
            self._checked = hasattr(self.cpu_layer, "attend_checked")  # inputs built here: skip re-checks
            self._hash_on_cpu = not self.staged  # the CPU layer hashes the queries where it is
            if self._hash_on_cpu:
                self._hash_queries = self.cpu_layer.query_hasher(self.projections, projection_pool)
        # CPU model, compiled layer: the whole step (hash, retrieve, attend, the static part by kernel 5 and
        # the merge) is one call of the module
        self._fused = None
        if (self._exact is not None and self._hash_on_cpu and self.static_valid is None
                and self.k_static.data.dtype in (torch.float32, torch.bfloat16)
                and hasattr(self.cpu_layer, "decode_step_fn")):
            self._fused = self.cpu_layer.decode_step_fn(self.projections, projection_pool)
        self._append = append_kv_fn(self.k_static, self.v_static, self.static_valid, append_kernel)
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None  # appended, written by the next step
        self._host: dict[str, torch.Tensor] = {}
        self._candidates: torch.Tensor | None = None
        self._copied = None  # CUDA event: q and its codes have reached the host buffers

    @property
    def n(self) -> int:
        return self.n_total

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """New keys join the exact (device) part, centred with the prefill centre. Where the whole step is one
        call of the CPU module, that call writes them (kernel 7) before it attends: the next ``attend``."""
        self._write_pending()
        if self._append is not None and v.dtype == self.v_static.data.dtype:
            if self._fused is not None:
                self._pending = (k, v)
            else:
                self._append(k, v, self.center)
            self.n_total += k.shape[2]
            return
        self.k_static.append((k.float() - self.center[:, :, None]).to(self.k_static.data.dtype))
        self.v_static.append(v)
        if self.static_valid is not None:
            self.static_valid.append(torch.ones(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device))
        self.n_total += k.shape[2]

    def _write_pending(self) -> None:
        if self._pending is not None:
            k, v = self._pending
            self._pending = None
            self._append(k, v, self.center)

    def _buffer(self, name: str, shape, dtype: torch.dtype) -> torch.Tensor:
        """A reusable host buffer (pinned beside a GPU). Reusing it one step later is safe: every step
        waits on a later event of the same stream (and the engine synchronizes each step)."""
        buf = self._host.get(name)
        if buf is None or tuple(buf.shape) != tuple(shape):
            buf = self._host[name] = host_buffer(shape, dtype, self.device)
        return buf

    def _query_to_host(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, H, d) -> (q float32, codes (B, H, L) int32) on the CPU. CPU model: the CPU layer hashes q
        where it is; GPU model: hashed on the GPU, both copied without blocking into pinned buffers."""
        B, H, d = q.shape
        Hkv, K, L = self.center.shape[1], self.method.K, self.method.L
        if self._hash_on_cpu:
            qf = q.detach().float().contiguous()
            return qf, self._hash_queries(qf)
        codes = lsh.hash_codes(q.detach().float().reshape(B, Hkv, H // Hkv, d), self.projections, K, L)
        q_host = self._buffer("q", (B, H, d), torch.float32)
        codes_host = self._buffer("codes", (B, H, L), torch.int32)
        q_host.copy_(q.detach(), non_blocking=True)
        codes_host.copy_(codes.reshape(B, H, L), non_blocking=True)
        if self.device.type == "cuda":
            if self._copied is None:
                self._copied = torch.cuda.Event()
            self._copied.record()
        return q_host, codes_host

    def _static_part(self, q: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k_static.n == 0:  # sinks = local = 0 and nothing generated yet
            B, H, d = q.shape
            return (torch.zeros(B, H, d, device=q.device), torch.full((B, H), _NEG_INF, device=q.device))
        t0 = time.perf_counter()
        res = decode_exact(q, self.k_static.view(), self.v_static.view(), scale,
                           self.static_valid.view() if self.static_valid is not None else None, self._exact)
        _add(self.timings, "exact", t0)
        return res

    def attend(self, q: torch.Tensor, scale: float | None) -> AttentionResult:
        """q: (B, H, d) on the device -> AttentionResult with output (B, H, d) float32 on the device;
        used / candidates (B, H) are CPU tensors (reading them never waits for the device)."""
        B, H, d = q.shape
        scale = default_scale(q, scale)
        candidates = self._candidates
        if candidates is None or candidates.shape[1] != H:
            candidates = self._candidates = self.counts.to(torch.float32)[:, None].expand(B, H).contiguous()
        if self.cpu_layer is None:
            out, lse = self._static_part(q, scale)
            return AttentionResult(out, lse, torch.zeros(B, H), candidates, 0.0)
        T = self.timings
        if self._fused is not None:
            new, n, m = self._pending, self.k_static.n, 0
            self._pending = None
            if new is not None:  # this step's key and value: the call writes them (room made here)
                m = new[0].shape[2]
                new = (*new, self.center)
                self.k_static.reserve(m)
                self.v_static.reserve(m)
            qf = q if q.dtype == torch.float32 and q.is_contiguous() and not q.requires_grad else \
                q.detach().float().contiguous()
            out, lse, sampled = self._fused(qf, self.k_static.data, self.v_static.data, n, float(scale), T, new)
            self.k_static.n += m  # counted once the call has written them
            self.v_static.n += m
            return AttentionResult(out, lse, sampled, candidates, 0.0)
        self._write_pending()
        t = time.perf_counter()
        q_host, codes_host = self._query_to_host(q)
        t = _add(T, "hash", t)
        static = self._static_part(q, scale) if self.concurrent else None  # queued on a GPU, then overlaps
        t = time.perf_counter()
        if self._copied is not None:
            self._copied.synchronize()  # waits for the two small copies only, not for the static part
            t = _add(T, "transfer", t)
        if self._checked:
            o_cpu, lse_cpu, sampled = self.cpu_layer.attend_checked(q_host, codes_host, float(scale), T)
        else:
            o_cpu, lse_cpu, sampled = self.cpu_layer.attend(q_host, codes_host, self.method.min_collisions,
                                                            scale, timings=T)
        _add(T, "cpu_attend", t)
        _add(T, "cpu_wait", t)  # the CPU part runs on this thread: it holds the step for all of its time
        if static is None:
            static = self._static_part(q, scale)
        t = time.perf_counter()
        if self.staged:
            o_host = self._buffer("out", o_cpu.shape, torch.float32)
            lse_host = self._buffer("lse", lse_cpu.shape, torch.float32)
            o_host.copy_(o_cpu)
            lse_host.copy_(lse_cpu)
            o_cpu = o_host.to(self.device, non_blocking=True)
            lse_cpu = lse_host.to(self.device, non_blocking=True)
            t = _add(T, "transfer", t)
        out, lse = merge_attention(static[0], static[1], o_cpu, lse_cpu)
        return AttentionResult(out, lse, sampled.to(torch.float32), candidates, 0.0)

    @staticmethod
    def estimate_nbytes(method: MagicPIG, batch: int, heads: int, kv_heads: int, n: int, head_dim: int, elem: int,
                        new: int, store: torch.dtype, layer_nbytes: Callable) -> dict:
        """As ``ReferenceDecoder.estimate_nbytes``: on the device the static part (centred keys, values); in host
        memory the CPU layer (``layer_nbytes``: ``magicpig.cpu.estimate_nbytes``) and its ``tables``; once, the
        build's copies (device: padded keys/values, float32 keys, int32 codes; host: the offloaded keys/values in
        ``store`` and codes) and a step's per-head bitsets of sampled tokens."""
        B, Hkv, d, L, n_off = batch, kv_heads, head_dim, method.L, max(0, n - method.sinks - method.local)
        layer = layer_nbytes(B, Hkv, n_off, d, method.K, L, store)
        return {"device": B * Hkv * (method.sinks + method.local + new + 64) * d * (4 + elem), "host": layer["total"],
                "tables": layer["tables"], "once_device": B * Hkv * n * (2 * d * elem + 3 * d * 4 + 2 * L * 4),
                "once_host": B * Hkv * n_off * (2 * d * store.itemsize + L * 4) + B * heads * n_off // 8}

    def nbytes(self) -> dict[str, int]:
        self._write_pending()
        dev = sum(b.view().numel() * b.data.element_size() for b in (self.k_static, self.v_static))
        cpu = int(self.cpu_layer.nbytes["total"]) if self.cpu_layer is not None else 0
        return {"device": dev, "cpu": cpu}


# ---- the context a method builds its decoders with -------------------------------------------------------
@dataclass
class DecoderContext:
    """A cache's decoder settings, handed to ``AttentionMethod.make_decoder`` with the builders of the
    three decoders (so the methods never import this module, which imports them).

    options: the decode's ``magicpig.options.DecodeOptions`` (``backend``, ``concurrent``,
    ``offload_dtype`` are read here; not imported, as that module imports this one); dense_layers: the
    layers that attend exactly (``method.dense_layer_set``); generator: for randomised methods (oracle),
    sparse layers only; offload_layer: () -> the CPU layer class of ``OffloadDecoder`` (called at the first
    offloaded layer or exact layer of a CPU model, whose ``exact_kernel`` then computes the exact parts; a
    GPU decode that offloads nothing never builds the compiled module); timings / projection_pool: see
    ``OffloadDecoder``.
    """

    options: Any
    dense_layers: frozenset[int] = frozenset()
    generator: torch.Generator | None = None
    offload_layer: Callable[[], type] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    projection_pool: list = field(default_factory=list)

    @property
    def backend(self) -> str:
        return self.options.backend

    def is_dense(self, layer_idx: int) -> bool:
        return layer_idx in self.dense_layers

    def reference(self, method: AttentionMethod, k, v, layout: KeyLayout, layer_idx: int) -> ReferenceDecoder:
        """``method``'s own ``attend`` on the device (with the context's generator)."""
        return ReferenceDecoder(method, k, v, layout, layer_idx, self.generator)

    def dense(self, k, v, layout: KeyLayout, layer_idx: int) -> ReferenceDecoder:
        """Exact float32 attention on the device (the reference backend's dense layers)."""
        return ReferenceDecoder(Dense(), k, v, layout, layer_idx)

    def exact(self, k, v, layout: KeyLayout, layer_idx: int) -> ExactDecoder:
        """Fused exact attention in the model's dtype (the system path's dense layers)."""
        kernels = [None, None]
        if k.device.type == "cpu" and self.offload_layer is not None:
            for i, name in enumerate(("exact_kernel", "append_kernel")):
                maker = getattr(self.offload_layer(), name, None)
                kernels[i] = maker() if maker is not None else None
        return ExactDecoder(k, v, layout, layer_idx, self.timings, *kernels)

    def offload(self, method: MagicPIG, k, v, layout: KeyLayout, layer_idx: int) -> OffloadDecoder:
        """The heterogeneous device + CPU split of a MagicPIG sparse layer."""
        if self.offload_layer is None:
            raise RuntimeError("DecoderContext.offload: no offload_layer (the CPU layer class) was given")
        return OffloadDecoder(method, k, v, layout, layer_idx, self.offload_layer(), self.options.concurrent,
                              self.options.offload_dtype, self.timings, self.projection_pool)
