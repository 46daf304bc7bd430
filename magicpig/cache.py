"""The decode-time KV cache: a transformers ``Cache`` whose layers decode with an attention method.

Prefill fills each layer like transformers' DynamicCache (full keys/values on the model's device). At the
end of prefill each layer gets a *decoder*:

* ``ReferenceDecoder`` (backend ``reference``, and every non-MagicPIG method, and the dense layers):
  all keys/values stay on the device; ``method.prepare`` runs once, ``method.attend(..., state=...)``
  every step.
* ``OffloadDecoder`` (backend ``offload``, MagicPIG sparse layers): the paper's heterogeneous split.
  Keys are centred (c = mean of the offloaded keys) and hashed on the device; sinks, the last ``local``
  prompt keys and every generated key (centred with the same c) stay on the device and are attended
  exactly; the offloaded keys/values and their hash tables move to CPU memory and are attended by the CPU
  module (``magicpig.cpu.OffloadedLayer``); the two partial results merge by log-sum-exp. The CPU call
  runs on a worker thread while the device computes the static part.

Decoders never modify the prefill tensors they are built from, so one prefill can be decoded with many
methods (``magicpig.engine.Engine.decode``).
"""
from __future__ import annotations

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from . import attention as _attention
from . import lsh
from .merge import merge_attention
from .methods import AttentionResult, KeyLayout, MagicPIG, parse_method
from .methods.base import AttentionMethod, attend_logits, default_scale, grouped_scores
from .methods.exact import Dense

BACKENDS = ("reference", "offload")
OFFLOAD_IMPLS = ("auto", "compiled", "torch")
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


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def cpu_executor() -> ThreadPoolExecutor:
    """The single worker thread that runs CPU-module calls concurrently with the device part."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magicpig-cpu")
        return _executor


# ---- decoders ----------------------------------------------------------------------------------------
class ReferenceDecoder:
    """All keys/values on the device; the method's own ``attend`` every step.

    k, v: (B, H_kv, n0, d) prefill keys/values (not modified); layout: their KeyLayout (n = n0).
    """

    def __init__(self, method: AttentionMethod, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout,
                 layer_idx: int, generator: torch.Generator | None = None):
        self.method = method
        self.layer_idx = layer_idx
        self.generator = generator
        k, v = _zero_padding(k, layout), _zero_padding(v, layout)
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


class OffloadDecoder:
    """MagicPIG's heterogeneous decode of one sparse layer (see the module docstring).

    k, v: (B, H_kv, n0, d) prefill keys/values on the model's device; layout: their KeyLayout.
    offload_impl: ``compiled`` (magicpig.cpu), ``torch`` (TorchOffloadedLayer) or ``auto``.
    concurrent: run the CPU part on the worker thread while the device part runs.
    """

    def __init__(self, method: MagicPIG, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout, layer_idx: int,
                 offload_impl: str = "auto", concurrent: bool = True, offload_dtype: torch.dtype | None = None):
        self.method = method
        self.layer_idx = layer_idx
        self.concurrent = concurrent
        self.n_total = layout.n
        k, v = _zero_padding(k, layout), _zero_padding(v, layout)
        state = method.prepare(k, v, layout, layer_idx)  # centre + hash on the device
        self.center = state.center  # (B, H_kv, d) float32
        self.projections = state.projections
        kc = k.float() - self.center[:, :, None]
        valid = layout.valid()
        static = valid & ~state.offloaded
        # static part: sinks + local window (compacted to the front), generated keys appended after
        s_idx, _, s_max = _compact(static)
        self.k_static = GrowBuffer(_gather_keys(kc, s_idx), 2)
        self.v_static = GrowBuffer(_gather_keys(v, s_idx), 2)
        self.static_valid = GrowBuffer(torch.arange(s_max, device=k.device)[None] < static.sum(1)[:, None], 1)
        # offloaded part: centred keys, values and codes in CPU memory, built into the CPU module's tables
        o_idx, counts, o_max = _compact(state.offloaded)
        self.counts = counts  # (B,) on the device
        self.cpu_layer = None
        if o_max > 0:
            keep = (torch.arange(o_max, device=k.device)[None] < counts[:, None])[:, None, :, None]
            store = offload_dtype or (torch.bfloat16 if v.dtype == torch.bfloat16 else torch.float32)
            ko = (_gather_keys(kc, o_idx) * keep).to("cpu", store).contiguous()
            vo = (_gather_keys(v, o_idx) * keep).to("cpu", store).contiguous()
            codes = _gather_keys(state.codes, o_idx).to("cpu", torch.int32).contiguous()
            impl = offload_layer_class(offload_impl)
            self.cpu_layer = impl.build(ko, vo, codes, counts.to("cpu", torch.int64), method.K, method.L)

    @property
    def n(self) -> int:
        return self.n_total

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """New keys join the exact (device) part, centred with the prefill centre."""
        self.k_static.append(k.float() - self.center[:, :, None])
        self.v_static.append(v)
        self.static_valid.append(torch.ones(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device))
        self.n_total += k.shape[2]

    def _cpu_part(self, q_cpu: torch.Tensor, codes_cpu: torch.Tensor, scale: float):
        return self.cpu_layer.attend(q_cpu, codes_cpu, min_collisions=self.method.min_collisions, scale=scale)

    def attend(self, q: torch.Tensor, scale: float | None) -> AttentionResult:
        """q: (B, H, d) on the device -> AttentionResult with output (B, H, d) float32 on the device."""
        B, H, d = q.shape
        Hkv = self.center.shape[1]
        scale = default_scale(q, scale)
        future = cpu_out = None
        if self.cpu_layer is not None:
            qg = q.float().reshape(B, Hkv, H // Hkv, d)
            q_codes = lsh.hash_codes(qg, self.projections, self.method.K, self.method.L).reshape(B, H, -1)
            q_cpu = q.detach().to("cpu", torch.float32).contiguous()
            codes_cpu = q_codes.to("cpu", torch.int32).contiguous()
            if self.concurrent:
                future = cpu_executor().submit(self._cpu_part, q_cpu, codes_cpu, scale)
            else:
                cpu_out = self._cpu_part(q_cpu, codes_cpu, scale)
        # device part: exact attention over sinks + local + generated (centred keys)
        logits = grouped_scores(q, self.k_static.view(), scale)
        logits = logits.masked_fill(~self.static_valid.view()[:, None, None, :], _NEG_INF)
        out, lse = attend_logits(logits, self.v_static.view())
        candidates = self.counts.to(torch.float32)[:, None].expand(B, H)
        if self.cpu_layer is None:
            return AttentionResult(out, lse, torch.zeros(B, H, device=q.device), candidates, 0.0)
        o_cpu, lse_cpu, sampled = future.result() if future is not None else cpu_out
        out, lse = merge_attention(out, lse, o_cpu.to(q.device), lse_cpu.to(q.device))
        return AttentionResult(out, lse, sampled.to(q.device, torch.float32), candidates, 0.0)

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

    @property
    def nbytes(self) -> dict[str, int]:
        sizes = {"tables": self.codes.numel() * 4, "keys": self.keys.numel() * self.keys.element_size(),
                 "values": self.values.numel() * self.values.element_size(), "norms": self.norms.numel() * 4}
        sizes["total"] = sum(sizes.values())
        return sizes

    def attend(self, q, q_codes, min_collisions: int = 2, scale: float | None = None):
        """q (B, H, d) float32, q_codes (B, H, L) int32 -> (out (B, H, d), lse (B, H), sampled (B, H) int32)."""
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
        from . import cpu
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
        self.decoder: ReferenceDecoder | OffloadDecoder | None = None
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
    prefill_only: never switch to decoding (the engine's prefill cache); offload_impl / concurrent: see
    OffloadDecoder.

    Cost accounting: each decode step of each sparse layer (not in ``method.dense_layer_set``) records
    used/candidates per row, averaged over heads; ``pop_step()`` returns the mean over sparse layers.
    """

    def __init__(self, model, method: Any = "magicpig", backend: str = "reference", *,
                 generator: torch.Generator | None = None, prefill_only: bool = False,
                 offload_impl: str = "auto", concurrent: bool = True):
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
        self.method = parse_method(method)
        self.backend = backend
        self.generator = generator
        self.prefill_only = prefill_only
        self.offload_impl = offload_impl
        self.concurrent = concurrent
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
        if not self.is_sparse(layer_idx):
            return ReferenceDecoder(Dense(), k, v, layout, layer_idx)
        if self.backend == "offload" and isinstance(self.method, MagicPIG):
            return OffloadDecoder(self.method, k, v, layout, layer_idx, self.offload_impl, self.concurrent)
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
