"""Every layer of a decode step in one call of the CPU module: ``DecodeLoop``, the route ``DecodeForward`` takes
when each layer's decoder is one the module runs whole.

Why: the layer-by-layer route (``DecodeForward``'s Python loop) costs per layer three module calls, the
decoder's bookkeeping and a dozen tensor allocations; on a decode step's cold caches those leave the kernels'
worker threads idle for about a third of a 4K step (docs/benchmarking.md). The module's ``DecodeLoop`` holds
every pointer a step needs and runs all layers with the same kernels in the same order, so the hidden state
it returns equals the Python loop's bit for bit (tests/test_decode_loop.py).

Which decoders it runs (``DecodeLoop.build`` returns None otherwise and the Python loop runs): an
``ExactDecoder`` of a dense layer with the CPU module's kernels 5 and 7 and no padding mask, and an
``OffloadDecoder`` of a sparse layer whose step is one call of the module (its ``_fused`` route: a CPU model,
the compiled layer, no padding mask on the static part). The loop owns the decoders' exact-row buffers while
it runs: it writes each step's key and value there and advances their counts, growing them (``GrowBuffer``)
when they fill.
"""
from __future__ import annotations

import torch

from magicpig.cpu.layer import add_step_seconds
from magicpig.decoders import ExactDecoder, OffloadDecoder


def _runs_whole(decoder, sparse: bool) -> bool:
    """Whether the module's loop runs this decoder's step (see the module docstring)."""
    if isinstance(decoder, ExactDecoder):
        return (not sparse and decoder.kernel is not None and decoder.valid is None and decoder._append is not None
                and decoder.k.dim == 2)
    if isinstance(decoder, OffloadDecoder):
        return sparse and decoder._fused is not None and decoder._pending is None
    return False


class DecodeLoop:
    """``DecodeLoop.build(forward, cache, batch)`` -> the loop, or None where a decoder needs the Python route;
    ``loop(h, cos, sin)`` -> the hidden state after the last layer (B, D), the step's key and value appended
    to every layer and its costs recorded in the cache (``MagicPIGCache.record_step``, ``timings``)."""

    def __init__(self, forward, cache, batch: int, decoders: list):
        module = forward.module
        first = forward.layers[0]
        self.forward, self.cache = forward, cache
        self.decoders = decoders
        self.loop = module.DecodeLoop(batch, int(first.in_norm.shape[0]), forward.heads, forward.kv_heads,
                                      forward.head_dim, int(first.mlp[0].shape[0]), forward.isa, forward.threads)
        pool: list = []  # the sparse layers' tiled projections, one copy per distinct set
        candidates = []  # the sparse layers' (B, H) offloaded keys per query head
        self.buffers: list[tuple] = []  # (layer, k GrowBuffer, v GrowBuffer)
        for i, (w, dec) in enumerate(zip(forward.layers, decoders)):
            self.loop.add_layer(w.in_norm, w.in_eps, w.qkv, w.qkv_bias, w.o[0], w.o_bias[0], w.post_norm, w.post_eps,
                                w.mlp, w.mlp_bias, w.scale)
            if isinstance(dec, ExactDecoder):
                k, v = dec.k, dec.v
                self.loop.set_exact(i, k.data, v.data, k.n)
            else:
                k, v = dec.k_static, dec.v_static
                center = dec.center.contiguous()
                self.loop.set_sparse(i, k.data, v.data, k.n, center, *dec.cpu_layer.step_args(dec.projections, pool))
                candidates.append(dec.counts.to(torch.float32)[:, None].expand(batch, forward.heads))
            self.buffers.append((i, k, v))
        self.candidates = torch.stack(candidates) if candidates else torch.zeros(0, batch, forward.heads)

    @classmethod
    def build(cls, forward, cache, batch: int) -> "DecodeLoop | None":
        decoders = [layer.decoder for layer in cache.layers]
        if not all(_runs_whole(dec, cache.is_sparse(i)) for i, dec in enumerate(decoders)):
            return None
        return cls(forward, cache, batch, decoders)

    def _grow(self) -> None:
        """Room for the next steps in every layer's buffers (``GrowBuffer`` doubles the full ones)."""
        for i, k, v in self.buffers:
            if k.data.shape[2] - k.n < 1:
                self.loop.set_buffers(i, k.reserve(1), v.reserve(1))

    def __call__(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.loop.room() < 1:
            self._grow()
        h, sampled, seconds = self.loop.step(h, cos, sin)
        for _, k, v in self.buffers:
            k.n += 1
            v.n += 1
        for dec in self.decoders:
            dec.n_total += 1
        self.cache.record_step(sampled, self.candidates, 0.0)
        add_step_seconds(self.cache.timings, seconds)
        return h
