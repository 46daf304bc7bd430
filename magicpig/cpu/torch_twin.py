"""The pure-torch twin of the compiled CPU layer, and the choice between the two.

``TorchOffloadedLayer`` holds one layer's offloaded keys in CPU memory and attends them with the same
API as ``magicpig.cpu.OffloadedLayer`` (the protocol ``magicpig.decoders.OffloadDecoder`` relies on):

* ``from_prefill(k, v, center, projections, lo, counts, K, L, dtype, min_collisions)`` (plan, once);
* ``query_hasher(projections, pool)`` -> a function q (B, H, d) float32 CPU -> codes (B, H, L) int32;
* ``attend(q, q_codes, min_collisions=None, scale=None, timings=None)`` -> (out, lse, sampled) (run,
  every step); ``nbytes``.

It is used when the compiled module cannot be built on this machine, and as an independent check of it.
``offload_layer_class`` picks one of the two by name (``OFFLOAD_IMPLS``).
"""
from __future__ import annotations

import warnings

import torch

from magicpig import lsh
from magicpig.cpu import extension
from magicpig.cpu.layer import OffloadedLayer
from magicpig.methods.base import attend_logits, default_scale

OFFLOAD_IMPLS = ("auto", "compiled", "torch")
_NEG_INF = float("-inf")


class TorchOffloadedLayer:
    """Pure-torch stand-in for ``magicpig.cpu.OffloadedLayer`` with the same API.

    keys, values: (B, H_kv, n_max, d) centred keys / values, valid rows compacted to the front;
    codes: (B, H_kv, n_max, L) int32; counts: (B,) int64; min_collisions: the default of ``attend``
    (the twin has no correction table, so it attends with any other value as well).
    """

    CHUNK = 4096
    exact_kernel = None  # no compiled exact kernel: the decoders' exact parts use torch's
    append_kernel = None  # nor kernel 7: the decoders append with tensor operations

    def __init__(self, keys, values, codes, counts, K, L, min_collisions: int = 2):
        self.keys, self.values, self.codes, self.counts, self.K, self.L = keys, values, codes, counts, K, L
        self.min_collisions = min_collisions
        self.norms = keys.float().norm(dim=-1)

    @classmethod
    def build(cls, keys, values, codes, counts, K, L, min_collisions: int = 2):
        if codes.shape[:3] != keys.shape[:3] or codes.shape[3] != L:
            raise ValueError(f"codes {tuple(codes.shape)} do not match keys {tuple(keys.shape)} and L={L}")
        return cls(keys, values, codes, counts, K, L, min_collisions)

    @classmethod
    def from_prefill(cls, k, v, center, projections, lo, counts, K, L, dtype=torch.float32,
                     min_collisions: int = 2):
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
        return cls(keys, values, codes, counts.to("cpu", torch.int64), K, L, min_collisions)

    @property
    def nbytes(self) -> dict[str, int]:
        sizes = {"tables": self.codes.numel() * 4, "keys": self.keys.numel() * self.keys.element_size(),
                 "values": self.values.numel() * self.values.element_size(), "norms": self.norms.numel() * 4}
        sizes["total"] = sum(sizes.values())
        return sizes

    def query_hasher(self, projections: torch.Tensor, pool: list | None = None):
        """A function q (B, H, d) float32 -> codes (B, H, L) int32 (``lsh.hash_codes`` on q's device, with
        ``projections`` (S, d, K*L) there). ``pool`` is accepted for the compiled layer's API."""
        K, L, Hkv = self.K, self.L, self.keys.shape[1]

        def hash_queries(q: torch.Tensor) -> torch.Tensor:
            B, H, d = q.shape
            return lsh.hash_codes(q.reshape(B, Hkv, H // Hkv, d), projections, K, L).reshape(B, H, L).contiguous()

        return hash_queries

    def attend(self, q, q_codes, min_collisions: int | None = None, scale: float | None = None, timings=None):
        """q (B, H, d) float32, q_codes (B, H, L) int32 -> (out (B, H, d), lse (B, H), sampled (B, H) int32).
        min_collisions: None = the layer's. ``timings`` is accepted for the compiled layer's API
        (retrieval is not separable here)."""
        m = self.min_collisions if min_collisions is None else min_collisions
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
            take = (hits >= m) & valid[:, None, None, lo:hi]
            dots = qg @ self.keys[:, :, lo:hi].float().transpose(-1, -2)
            cos = dots / qn / self.norms[:, :, None, lo:hi].clamp_min(1e-12)
            u = lsh.collision_probability(cos, self.K, self.L, m)
            logit = dots * scale + lsh.importance_log_weight(u)
            logits[..., lo:hi] = logit.masked_fill(~take, _NEG_INF)
        out, lse = attend_logits(logits, self.values)
        sampled = torch.isfinite(logits).sum(-1, dtype=torch.int32).reshape(B, H)
        return out, lse, sampled


_warned_fallback = False


def offload_layer_class(impl: str = "auto"):
    """The class that holds offloaded keys in CPU memory: ``magicpig.cpu.OffloadedLayer`` (``compiled``)
    or ``TorchOffloadedLayer`` (``torch``). ``auto`` uses the compiled module when it builds here and
    warns (once) otherwise; ``compiled`` raises RuntimeError when it does not."""
    global _warned_fallback
    if impl not in OFFLOAD_IMPLS:
        raise ValueError(f"offload_impl must be one of {', '.join(OFFLOAD_IMPLS)}, got {impl!r}")
    if impl == "torch":
        return TorchOffloadedLayer
    if extension.available():
        extension.load()
        return OffloadedLayer
    why = "magicpig.cpu.available() is False"
    if impl == "compiled":
        raise RuntimeError(f"the compiled CPU module is not usable here ({why}); use offload_impl='torch'")
    if not _warned_fallback:
        warnings.warn(f"magicpig: compiled CPU module unavailable ({why}); the offload backend uses the "
                      "pure-torch CPU implementation", RuntimeWarning, stacklevel=2)
        _warned_fallback = True
    return TorchOffloadedLayer
