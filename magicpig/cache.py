"""The decode-time KV cache: a transformers ``Cache`` whose layers decode with an attention method.

Prefill fills each layer like transformers' DynamicCache (full keys/values on the model's device). At the
end of prefill each layer gets a *decoder*:

* ``ReferenceDecoder`` (backend ``reference``, and every non-MagicPIG method, and the dense layers):
  all keys/values stay on the device; ``method.prepare`` runs once, ``method.attend(..., state=...)``
  every step.
* ``ExactDecoder`` (backend ``offload``, the dense layers): keys/values on the device in the model's
  dtype, attended with the device's fused kernel (``attention.decode_exact``), never copied to float32.
* ``OffloadDecoder`` (backend ``offload``, MagicPIG sparse layers): the paper's heterogeneous split.
  Keys are centred (c = mean of the offloaded keys) and hashed (CPU model: the CPU module's kernel 0;
  GPU model: on the GPU); sinks, the last ``local`` prompt keys and every generated key (centred with the
  same c) stay on the device, in the model's dtype, and are attended exactly by the fused kernel; the
  offloaded keys/values and their hash tables move to CPU memory and are attended by the CPU module
  (``magicpig.cpu.OffloadedLayer``); the two partial results merge by log-sum-exp. On a GPU the query
  and its codes go to pinned host buffers with non-blocking copies, the static part is queued on the GPU
  before the CPU part runs (so the two overlap; a CUDA event, not a device synchronize, tells the CPU
  part when its inputs have arrived), and the CPU results come back the same way.

Timings: every decoder adds seconds to its cache's ``timings`` dict (see ``MagicPIGCache``), read by
``Engine.decode`` into ``GenerationResult.timings``.

Decoders never modify the prefill tensors they are built from, so one prefill can be decoded with many
methods (``magicpig.engine.Engine.decode``).
"""
from __future__ import annotations

import time
import warnings
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from magicpig import attention as _attention
from magicpig import lsh
from magicpig.merge import merge_attention
from magicpig.methods import AttentionResult, KeyLayout, MagicPIG, parse_method
from magicpig.methods.base import AttentionMethod, attend_logits, default_scale, masked_keys
from magicpig.methods.exact import Dense
from magicpig.methods.magicpig import split_static_offloaded

BACKENDS = ("reference", "offload")
OFFLOAD_IMPLS = ("auto", "compiled", "torch")
OFFLOAD_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TIMING_KEYS = ("hash", "cpu_attend", "cpu_retrieve", "cpu_wait", "transfer", "exact")
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

    def append(self, x: torch.Tensor) -> None:
        extra = x.shape[self.dim]
        if self.n + extra > self.data.shape[self.dim]:
            shape = list(self.data.shape)
            shape[self.dim] = max(2 * shape[self.dim], self.n + extra)
            grown = torch.empty(shape, dtype=self.data.dtype, device=self.data.device)
            grown.narrow(self.dim, 0, self.n).copy_(self.view())
            self.data = grown
        self.data.narrow(self.dim, self.n, extra).copy_(x)
        self.n += extra

    def view(self) -> torch.Tensor:
        return self.data.narrow(self.dim, 0, self.n)


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
    """``offload_dtype`` (None, "float32", "bfloat16" or the torch dtype) -> torch dtype or None (= the
    model's dtype when it is bfloat16, float32 otherwise); a clear error for anything else."""
    if value is None or value == "auto":
        return None
    if isinstance(value, str) and value in OFFLOAD_DTYPES:
        return OFFLOAD_DTYPES[value]
    if isinstance(value, torch.dtype) and value in OFFLOAD_DTYPES.values():
        return value
    raise ValueError(f"offload_dtype must be one of auto, {', '.join(OFFLOAD_DTYPES)} (how the offloaded "
                     f"keys/values are stored in CPU memory), got {value!r}")


def host_buffer(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A CPU tensor for copies to / from ``device``: pinned (page-locked, so non-blocking copies are
    truly asynchronous) when the device is a CUDA GPU, plain otherwise. The one place that pins."""
    pin = device.type == "cuda" and torch.cuda.is_available()
    return torch.empty(shape, dtype=dtype, pin_memory=pin)


def _row_ranges(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, n) bool mask with one contiguous run of True per row (the offloaded prompt keys: after the
    sinks, before the local window) -> (lo, count) (B,) int64 CPU tensors."""
    m = mask.cpu()
    count = m.sum(1)
    lo = torch.where(count > 0, m.to(torch.int8).argmax(1), torch.zeros_like(count))
    idx = torch.arange(m.shape[1])
    if not torch.equal((idx >= lo[:, None]) & (idx < (lo + count)[:, None]), m):
        raise RuntimeError("internal: the offloaded keys of a sequence are not one contiguous range")
    return lo, count


def _center(k: torch.Tensor, layout: KeyLayout, offloaded: torch.Tensor, centering: bool) -> torch.Tensor:
    """(B, H_kv, d) float32 mean of the offloaded keys, computed as ``MagicPIG.prepare`` does (so the
    codes equal the reference's), or zeros without centering."""
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


# ---- decoders ----------------------------------------------------------------------------------------
class ReferenceDecoder:
    """All keys/values on the device; the method's own ``attend`` every step.

    k, v: (B, H_kv, n0, d) prefill keys/values (not modified); layout: their KeyLayout (n = n0).
    """

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


class ExactDecoder:
    """A dense layer of the system path (backend ``offload``): keys/values stay on the device in the
    model's dtype and every step is one fused exact attention (``attention.decode_exact``).

    k, v: (B, H_kv, n0, d) prefill keys/values (not modified); layout: their KeyLayout. Padding rows are
    zeroed in the decoder's copy (they may hold NaN, which a zero probability would not cancel).
    """

    def __init__(self, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout, layer_idx: int,
                 timings: dict | None = None):
        self.layer_idx = layer_idx
        self.timings = timings if timings is not None else {}
        self.start = layout.start.cpu()
        padded = bool((self.start > 0).any())
        if padded:
            k, v = _zero_padding(k, layout), _zero_padding(v, layout)
        self.k = GrowBuffer(k, 2)
        self.v = GrowBuffer(v, 2)
        self.valid = GrowBuffer(layout.valid(), 1) if padded else None
        self.n_total = layout.n

    @property
    def n(self) -> int:
        return self.n_total

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k.append(k)
        self.v.append(v)
        if self.valid is not None:
            self.valid.append(torch.ones(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device))
        self.n_total += k.shape[2]

    def attend(self, q: torch.Tensor, scale: float | None) -> AttentionResult:
        t0 = time.perf_counter()
        out, lse = _attention.decode_exact(q, self.k.view(), self.v.view(), default_scale(q, scale),
                                           self.valid.view() if self.valid is not None else None)
        _add(self.timings, "exact", t0)
        counts = (self.n_total - self.start).to(torch.float32)[:, None].expand(q.shape[0], q.shape[1])
        return AttentionResult(out, lse, counts, counts, 0.0)

    def nbytes(self) -> dict[str, int]:
        return {"device": self.k.view().numel() * self.k.data.element_size() * 2, "cpu": 0}


class OffloadDecoder:
    """MagicPIG's heterogeneous decode of one sparse layer (see the module docstring).

    k, v: (B, H_kv, n0, d) prefill keys/values on the model's device (not modified); layout: their
    KeyLayout. offload_impl: ``compiled`` (magicpig.cpu), ``torch`` (TorchOffloadedLayer) or ``auto``.
    concurrent: queue the device's static part before the CPU part runs (on a GPU the two then overlap);
    False computes it after the CPU part (same result). offload_dtype: how the offloaded keys/values are
    stored in CPU memory (float32 / bfloat16; None: bfloat16 for a bfloat16 model, else float32).
    timings: the dict the per-step seconds are added to (``TIMING_KEYS``); projection_pool: a list shared
    by the layers of one cache, so that layers with equal projections share their padded copy.
    stage_through_host: hash the queries on the model's device and pass them and the results through host
    buffers (None: when the model is not on the CPU; True on a CPU model runs the GPU route, for tests).
    """

    def __init__(self, method: MagicPIG, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout, layer_idx: int,
                 offload_impl: str = "auto", concurrent: bool = True, offload_dtype: torch.dtype | None = None,
                 timings: dict | None = None, projection_pool: list | None = None,
                 stage_through_host: bool | None = None):
        self.method = method
        self.layer_idx = layer_idx
        self.concurrent = concurrent
        self.timings = timings if timings is not None else {}
        self.n_total = layout.n
        self.device = k.device
        self.staged = k.device.type != "cpu" if stage_through_host is None else bool(stage_through_host)
        B, Hkv, _, d = k.shape
        static, offloaded = split_static_offloaded(layout, method.sinks, method.local)
        self.center = _center(k, layout, offloaded, method.centering)  # (B, H_kv, d) float32
        self.projections = method.projections(layer_idx, Hkv, d, device=k.device)
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
        # CPU memory with its hash tables in one pass (OffloadedLayer.from_prefill)
        lo, counts = _row_ranges(offloaded)
        self.counts = counts  # (B,) int64 on the CPU
        self.cpu_layer = None
        self._hash_on_cpu = self._checked = False
        if int(counts.max()) > 0:
            store = offload_dtype or (torch.bfloat16 if v.dtype == torch.bfloat16 else torch.float32)
            impl = offload_layer_class(offload_impl)
            self.cpu_layer = impl.from_prefill(k, v, self.center, self.projections, lo, counts, method.K,
                                               method.L, store)
            self._hash_on_cpu = not self.staged and impl is not TorchOffloadedLayer
            self._checked = hasattr(self.cpu_layer, "attend_checked")  # inputs built here: skip re-checks
            if self._hash_on_cpu:  # the arguments of kernel 0 for the queries, built once
                from magicpig import cpu
                # [kernel, zero centre, padded projections, row starts, row counts (= query heads per
                # kv-head, made at the first step), ISA code]
                self._q_hash = [cpu.load().hash_keys, torch.zeros(B, Hkv, d), self._padded(cpu, projection_pool),
                                torch.zeros(B, dtype=torch.int64), None, cpu.ISA_CODES[cpu.isa()]]
        self._host: dict[str, torch.Tensor] = {}
        self._candidates: torch.Tensor | None = None
        self._copied = None  # CUDA event: q and its codes have reached the host buffers

    def _padded(self, cpu, pool: list | None) -> torch.Tensor:
        """The projections padded for kernel 0, shared with the earlier layers that use the same ones
        (MagicPIG draws one set per block of 16 layers): each step then reads one copy from the cache
        instead of one ~1 MB copy per layer from memory."""
        for proj, padded in pool if pool is not None else ():
            if proj.shape == self.projections.shape and torch.equal(proj, self.projections):
                return padded
        padded = cpu.pad_projections(self.projections)
        if pool is not None:
            pool.append((self.projections, padded))
        return padded

    @property
    def n(self) -> int:
        return self.n_total

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """New keys join the exact (device) part, centred with the prefill centre."""
        self.k_static.append((k.float() - self.center[:, :, None]).to(self.k_static.data.dtype))
        self.v_static.append(v)
        if self.static_valid is not None:
            self.static_valid.append(torch.ones(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device))
        self.n_total += k.shape[2]

    def _buffer(self, name: str, shape, dtype: torch.dtype) -> torch.Tensor:
        """A reusable host buffer (pinned beside a GPU). Reusing it one step later is safe: every step
        waits on a later event of the same stream (and the engine synchronizes each step)."""
        buf = self._host.get(name)
        if buf is None or tuple(buf.shape) != tuple(shape):
            buf = self._host[name] = host_buffer(shape, dtype, self.device)
        return buf

    def _query_to_host(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, H, d) -> (q float32, codes (B, H, L) int32) on the CPU. CPU model: kernel 0 hashes q where
        it is; GPU model: hashed on the GPU, both copied without blocking into pinned buffers."""
        B, H, d = q.shape
        Hkv, K, L = self.center.shape[1], self.method.K, self.method.L
        if self._hash_on_cpu:
            fn, zeros, proj, lo, count, isa = self._q_hash
            if count is None:
                count = self._q_hash[4] = torch.full((B,), H // Hkv, dtype=torch.int64)
            qf = q.detach().float().contiguous()
            codes = fn(qf.view(B, Hkv, H // Hkv, d), zeros, proj, lo, count, H // Hkv, K, L, False, isa, 1)
            return qf, codes.view(B, H, L)
        codes = lsh.hash_codes(q.detach().float().reshape(B, Hkv, H // Hkv, d), self.projections, K, L)
        if not self.staged:  # the torch CPU layer on a CPU model
            return q.detach().float().contiguous(), codes.reshape(B, H, L).contiguous()
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
        res = _attention.decode_exact(q, self.k_static.view(), self.v_static.view(), scale,
                                      self.static_valid.view() if self.static_valid is not None else None)
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
        t = time.perf_counter()
        q_host, codes_host = self._query_to_host(q)
        t = _add(T, "hash", t)
        static = self._static_part(q, scale) if self.concurrent else None  # queued on a GPU, then overlaps
        t = time.perf_counter()
        if self._copied is not None:
            self._copied.synchronize()  # waits for the two small copies only, not for the static part
            t = _add(T, "transfer", t)
        if self._checked:
            o_cpu, lse_cpu, sampled = self.cpu_layer.attend_checked(q_host, codes_host, self.method.min_collisions,
                                                                    float(scale), T)
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

    def nbytes(self) -> dict[str, int]:
        dev = sum(b.view().numel() * b.data.element_size() for b in (self.k_static, self.v_static))
        cpu = int(self.cpu_layer.nbytes["total"]) if self.cpu_layer is not None else 0
        return {"device": dev, "cpu": cpu}


class TorchOffloadedLayer:
    """Pure-torch stand-in for ``magicpig.cpu.OffloadedLayer`` with the same API (used when the compiled
    module cannot be built on this machine, and as an independent check of it).

    keys, values: (B, H_kv, n_max, d) centred keys / values, valid rows compacted to the front;
    codes: (B, H_kv, n_max, L) int32; counts: (B,) int64.
    """

    CHUNK = 4096

    def __init__(self, keys, values, codes, counts, K, L):
        self.keys, self.values, self.codes, self.counts, self.K, self.L = keys, values, codes, counts, K, L
        self.norms = keys.float().norm(dim=-1)

    @classmethod
    def build(cls, keys, values, codes, counts, K, L):
        if codes.shape[:3] != keys.shape[:3] or codes.shape[3] != L:
            raise ValueError(f"codes {tuple(codes.shape)} do not match keys {tuple(keys.shape)} and L={L}")
        return cls(keys, values, codes, counts, K, L)

    @classmethod
    def from_prefill(cls, k, v, center, projections, lo, counts, K, L, dtype=torch.float32):
        """As ``magicpig.cpu.OffloadedLayer.from_prefill``, in torch: rows lo[b] .. lo[b] + counts[b] of
        sequence b, centred, hashed with ``lsh.hash_codes`` (as the reference) and moved to the CPU."""
        B, Hkv, _, d = k.shape
        m = int(counts.max()) if B else 0
        keys = torch.zeros(B, Hkv, m, d, dtype=dtype)
        values = torch.zeros(B, Hkv, m, d, dtype=dtype)
        codes = torch.zeros(B, Hkv, m, L, dtype=torch.int32)
        for b in range(B):
            lo_b, c = int(lo[b]), int(counts[b])
            kc = k[b:b + 1, :, lo_b:lo_b + c].float() - center[b:b + 1, :, None]
            codes[b, :, :c] = lsh.hash_codes(kc, projections, K, L)[0].cpu()
            keys[b, :, :c] = kc[0].to("cpu", dtype)
            values[b, :, :c] = v[b, :, lo_b:lo_b + c].to("cpu", dtype)
        return cls(keys, values, codes, counts.to("cpu", torch.int64), K, L)

    @property
    def nbytes(self) -> dict[str, int]:
        sizes = {"tables": self.codes.numel() * 4, "keys": self.keys.numel() * self.keys.element_size(),
                 "values": self.values.numel() * self.values.element_size(), "norms": self.norms.numel() * 4}
        sizes["total"] = sum(sizes.values())
        return sizes

    def attend(self, q, q_codes, min_collisions: int = 2, scale: float | None = None, timings=None):
        """q (B, H, d) float32, q_codes (B, H, L) int32 -> (out (B, H, d), lse (B, H), sampled (B, H) int32).
        ``timings`` is accepted for the compiled layer's API (retrieval is not separable here)."""
        B, H, d = q.shape
        Hkv, n = self.keys.shape[1], self.keys.shape[2]
        G = H // Hkv
        scale = default_scale(q, scale)
        qg = q.float().reshape(B, Hkv, G, d)
        qc = q_codes.reshape(B, Hkv, G, -1)
        valid = torch.arange(n)[None] < self.counts[:, None]  # (B, n)
        logits = torch.full((B, Hkv, G, n), _NEG_INF)
        qn = qg.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        for lo in range(0, n, self.CHUNK):
            hi = min(n, lo + self.CHUNK)
            hits = (self.codes[:, :, None, lo:hi, :] == qc[:, :, :, None, :]).sum(-1, dtype=torch.int32)
            take = (hits >= min_collisions) & valid[:, None, None, lo:hi]
            dots = qg @ self.keys[:, :, lo:hi].float().transpose(-1, -2)
            cos = dots / qn / self.norms[:, :, None, lo:hi].clamp_min(1e-12)
            u = lsh.collision_probability(cos, self.K, self.L, min_collisions)
            logit = dots * scale + lsh.importance_log_weight(u)
            logits[..., lo:hi] = logit.masked_fill(~take, _NEG_INF)
        out, lse = attend_logits(logits, self.values)
        sampled = torch.isfinite(logits).sum(-1, dtype=torch.int32).reshape(B, H)
        return out, lse, sampled


_warned_fallback = False


def offload_layer_class(impl: str = "auto"):
    """The class that holds offloaded keys in CPU memory: ``magicpig.cpu.OffloadedLayer`` (compiled) or
    ``TorchOffloadedLayer``. ``auto`` uses the compiled module when it is available and warns otherwise."""
    global _warned_fallback
    if impl not in OFFLOAD_IMPLS:
        raise ValueError(f"offload_impl must be one of {', '.join(OFFLOAD_IMPLS)}, got {impl!r}")
    if impl == "torch":
        return TorchOffloadedLayer
    try:
        from magicpig import cpu
        ok = cpu.available()
    except ImportError as exc:
        cpu, ok, why = None, False, str(exc)
    else:
        why = "magicpig.cpu.available() is False"
    if ok:
        cpu.load()
        return cpu.OffloadedLayer
    if impl == "compiled":
        raise RuntimeError(f"the compiled CPU module is not usable here ({why}); use offload_impl='torch'")
    if not _warned_fallback:
        warnings.warn(f"magicpig: compiled CPU module unavailable ({why}); the offload backend uses the "
                      "pure-torch CPU implementation", RuntimeWarning, stacklevel=2)
        _warned_fallback = True
    return TorchOffloadedLayer


# ---- the transformers Cache --------------------------------------------------------------------------
class MagicPIGLayer(DynamicLayer):
    """One layer: a DynamicLayer during prefill, a decoder afterwards."""

    def __init__(self, cache: "MagicPIGCache", layer_idx: int):
        super().__init__()
        self.cache = cache
        self.layer_idx = layer_idx
        self.decoder: ReferenceDecoder | ExactDecoder | OffloadDecoder | None = None
        self.pending: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states, value_states, *args, **kwargs):
        _attention.set_active(self.cache, self.layer_idx)
        if self.decoder is not None:
            if key_states.shape[2] != 1:
                raise RuntimeError("MagicPIGCache: after prefill only one token per step can be appended")
            self.decoder.append(key_states, value_states)
            return key_states, value_states
        if (key_states.shape[2] == 1 and not self.cache.prefill_only and self.get_seq_length() > 0):
            self.pending = (key_states, value_states)  # first decode step; decoder built in attend()
            return key_states, value_states
        return super().update(key_states, value_states, *args, **kwargs)

    def get_seq_length(self) -> int:
        if self.decoder is not None:
            return self.decoder.n
        return super().get_seq_length()


class MagicPIGCache(Cache):
    """transformers Cache that decodes with ``method``.

    model: a transformers model (or its config); method: AttentionMethod or spec string; backend:
    ``reference`` or ``offload``; generator: torch.Generator for randomised methods (oracle);
    prefill_only: never switch to decoding (the engine's prefill cache); offload_impl / concurrent /
    offload_dtype ("float32", "bfloat16" or None = by the model's dtype): see OffloadDecoder.

    Backend ``offload``: the dense layers get an ExactDecoder (fused attention in the model's dtype), the
    sparse MagicPIG layers an OffloadDecoder; other methods decode with their reference ``attend``.

    ``timings``: seconds summed over the decode steps (keys ``TIMING_KEYS``): ``hash`` (query hashing),
    ``cpu_attend`` (the CPU module's wall time: retrieval + attention), ``cpu_retrieve`` (its retrieval),
    ``cpu_wait`` (the main thread held by the CPU part; it runs there, so equal to ``cpu_attend``),
    ``transfer`` (host <-> device copies; on a GPU the wait for the query's copies), ``exact`` (the fused
    exact parts: static tokens and dense layers; on a GPU the time to queue them).

    Cost accounting: each decode step of each sparse layer (not in ``method.dense_layer_set``) records
    used/candidates per row, averaged over heads; ``pop_step()`` returns the mean over sparse layers.
    """

    def __init__(self, model, method: Any = "magicpig", backend: str = "reference", *,
                 generator: torch.Generator | None = None, prefill_only: bool = False,
                 offload_impl: str = "auto", concurrent: bool = True, offload_dtype: Any = None):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if offload_impl not in OFFLOAD_IMPLS:
            raise ValueError(f"offload_impl must be one of {', '.join(OFFLOAD_IMPLS)}, got {offload_impl!r}")
        config = getattr(model, "config", model)
        config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        self.num_layers = int(config.num_hidden_layers)
        windowed = "sliding_attention" in (getattr(config, "layer_types", None) or ())
        if windowed or (type(config).__name__.startswith("Mistral") and getattr(config, "sliding_window", None)):
            raise ValueError(
                f"model config has sliding_window={getattr(config, 'sliding_window', None)} (sliding-window "
                "attention layers); MagicPIG decodes full-attention layers only: load the model with "
                "sliding_window=None (and use_sliding_window=False for Qwen2)")
        self.offload_dtype = offload_dtype_of(offload_dtype)
        self.method = parse_method(method)
        self.backend = backend
        self.generator = generator
        self.prefill_only = prefill_only
        self.offload_impl = offload_impl
        self.concurrent = concurrent
        self.timings: dict[str, float] = {key: 0.0 for key in TIMING_KEYS}
        self._projection_pool: list = []
        self.dense_layers = self.method.dense_layer_set(self.num_layers)
        self._step: list[tuple[torch.Tensor, float]] = []
        self.cost_sum: torch.Tensor | None = None
        self.cost1_sum = 0.0
        self.steps = 0
        super().__init__(layers=[MagicPIGLayer(self, i) for i in range(self.num_layers)])

    # -- building decoders -----------------------------------------------------------------------------
    def is_sparse(self, layer_idx: int) -> bool:
        return layer_idx not in self.dense_layers

    def build_decoder(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout):
        system = self.backend == "offload" and isinstance(self.method, MagicPIG)
        if not self.is_sparse(layer_idx):
            if system:
                return ExactDecoder(k, v, layout, layer_idx, self.timings)
            return ReferenceDecoder(Dense(), k, v, layout, layer_idx)
        if system:
            return OffloadDecoder(self.method, k, v, layout, layer_idx, self.offload_impl, self.concurrent,
                                  self.offload_dtype, self.timings, self._projection_pool)
        return ReferenceDecoder(self.method, k, v, layout, layer_idx, self.generator)

    def start_decoding(self, keys: list[torch.Tensor], values: list[torch.Tensor], layout: KeyLayout) -> None:
        """Build every layer's decoder from prefill keys/values (B, H_kv, n0, d) per layer (not modified)."""
        if len(keys) != self.num_layers:
            raise ValueError(f"expected keys for {self.num_layers} layers, got {len(keys)}")
        for i, layer in enumerate(self.layers):
            layer.decoder = self.build_decoder(i, keys[i], values[i], layout.to(keys[i].device))
            layer.keys = layer.values = None
            layer.is_initialized = True
            layer.pending = None

    def is_decoding(self, layer_idx: int) -> bool:
        layer = self.layers[layer_idx]
        return layer.decoder is not None or layer.pending is not None

    # -- one decode step of one layer (called by the attention function) -------------------------------
    def attend(self, layer_idx: int, q: torch.Tensor, scale: float | None,
               mask: torch.Tensor | None = None) -> torch.Tensor:
        """q: (B, H, d) -> output (B, H, d) float32. Records the layer's cost for the current step."""
        if layer_idx == 0:
            self.pop_step()  # generate() path: a new step begins (the engine pops after every forward)
        layer = self.layers[layer_idx]
        if layer.decoder is None:  # generate() path: prefill just ended; padding read from the mask
            k0, v0 = layer.keys, layer.values
            n0 = k0.shape[2]
            start = torch.zeros(k0.shape[0], dtype=torch.long, device=k0.device)
            if mask is not None:
                m = mask[:, 0, -1, :n0]
                m = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
                first = m.to(torch.int8).argmax(-1)
                start = torch.where(m.any(-1), first, start).to(k0.device)
            layout = KeyLayout(n0, start, torch.full_like(start, n0))
            layer.decoder = self.build_decoder(layer_idx, k0, v0, layout)
            layer.keys = layer.values = None
            k_new, v_new = layer.pending
            layer.pending = None
            layer.decoder.append(k_new, v_new)
        res = layer.decoder.attend(q, scale)
        if self.is_sparse(layer_idx):
            ratio = (res.used / res.candidates.clamp_min(1)).mean(-1)  # (B,)
            self._step.append((ratio.detach().float().cpu(), float(res.cost1)))
        return res.output

    def pop_step(self) -> tuple[torch.Tensor, float] | None:
        """Mean over sparse layers of this step's (cost2 per row (B,), cost1); None if no sparse layer ran."""
        if not self._step:
            return None
        cost2 = torch.stack([c for c, _ in self._step]).mean(0)
        cost1 = sum(c for _, c in self._step) / len(self._step)
        self._step = []
        self.cost_sum = cost2 if self.cost_sum is None else self.cost_sum + cost2
        self.cost1_sum += cost1
        self.steps += 1
        return cost2, cost1

    def cost(self) -> torch.Tensor | None:
        """Mean cost2 per row over the steps popped so far (None before any)."""
        self.pop_step()
        return None if self.cost_sum is None else self.cost_sum / self.steps

    def memory(self) -> dict[str, int]:
        """Bytes held on the device and in CPU memory by the decoders."""
        total = {"device": 0, "cpu": 0}
        for layer in self.layers:
            if layer.decoder is not None:
                for key, val in layer.decoder.nbytes().items():
                    total[key] += val
        return total
