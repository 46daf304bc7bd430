"""A bandwidth model of one decode step, to PROJECT throughput on hardware we do not have.

Everything this module returns is a model output, not a measurement, and the report labels it so.
Decoding at long context is memory-bound, so a step costs the bytes it must read divided by the bandwidth
that reads them:

- GPU-only full attention: weights + every sequence's whole KV cache from GPU memory; the batch is capped
  by GPU memory (weights + B * KV must fit).
- MagicPIG (offload): weights + the dense layers' KV + the static tokens (sinks, local window, generated)
  from GPU memory, concurrently with the CPU reading the sampled keys/values and the hash-table buckets from
  host memory at ``cpu_read_gbps * cpu_efficiency``; step time = the slower of the two (the system overlaps
  them). The batch is capped by host memory (KV + tables) and GPU memory (weights + dense-layer KV).

Device facts are public specifications; host-memory bandwidths of the paper's servers are not given in the
paper, so they are explicit assumptions (fields of ``Hardware``) that a user can override.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

GB = 1e9


@dataclass(frozen=True)
class ModelShape:
    name: str
    params_b: float  # parameters, billions
    layers: int
    heads: int
    kv_heads: int
    head_dim: int = 128
    bytes_per_param: int = 2  # bf16 / fp16

    def kv_bytes_per_token_layer(self, elem: int = 2) -> int:
        return 2 * self.kv_heads * self.head_dim * elem

    @property
    def weight_bytes(self) -> float:
        return self.params_b * 1e9 * self.bytes_per_param


@dataclass(frozen=True)
class Hardware:
    name: str
    gpu_mem_gb: float
    gpu_read_gbps: float
    host_mem_gb: float  # assumption: memory available to the KV cache and tables
    cpu_read_gbps: float  # assumption: streaming-read bandwidth of the host
    cpu_efficiency: float = 0.5  # achieved / streaming bandwidth of the sampled gather (measured by bench kernel)
    note: str = ""


MODELS = {
    "llama-3.1-8b": ModelShape("Llama-3.1-8B", 8.03, 32, 32, 8),
    "codellama-13b": ModelShape("CodeLlama-13B", 13.0, 40, 40, 40),
    "codellama-34b": ModelShape("CodeLlama-34B", 33.7, 48, 64, 8),
}

HARDWARE = {
    "A100": Hardware("A100-80GB", 80, 2039, 1000, 300,
                     note="host bandwidth assumed (2-socket DDR4 server); paper does not state it"),
    "L20": Hardware("L20-48GB", 48, 864, 1000, 300,
                    note="host bandwidth assumed (2-socket DDR5 server); paper does not state it"),
    "RTX4090": Hardware("RTX 4090 (simulated: L20 capped at 24 GB)", 24, 864, 1000, 300,
                        note="as in the paper: an L20 with its memory capped at 24 GB"),
}

# The paper's three throughput comparisons (PAPER.md §5): hardware, model, context, (K, L).
PAPER_SETTINGS = [("A100", "codellama-34b", 16384, (10, 150)), ("L20", "codellama-13b", 16384, (10, 150)),
                  ("RTX4090", "llama-3.1-8b", 98304, (10, 150))]


@dataclass(frozen=True)
class Projection:
    batch: int
    step_s: float
    tokens_per_s: float
    gpu_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def ms_per_token(self) -> float:
        return 1000 * self.step_s


NO_FIT = Projection(0, math.inf, 0.0)


def gpu_full_attention(model: ModelShape, hw: Hardware, context: int, batch: int | None = None) -> Projection:
    """GPU-only full attention at the largest batch that fits (or ``batch``)."""
    kv_seq = model.layers * context * model.kv_bytes_per_token_layer()
    free = hw.gpu_mem_gb * GB * 0.95 - model.weight_bytes
    max_batch = int(free // kv_seq) if free > 0 else 0
    b = max_batch if batch is None else min(batch, max_batch)
    if b < 1:
        return NO_FIT
    step = (model.weight_bytes + b * kv_seq) / (hw.gpu_read_gbps * GB)
    return Projection(b, step, b / step, gpu_s=step)


def magicpig_offload(model: ModelShape, hw: Hardware, context: int, sampled_fraction: float, K: int, L: int,
                     *, dense_layers: int = 2, static_tokens: int = 68 + 64, batch: int | None = None,
                     max_batch: int = 4096) -> Projection:
    """MagicPIG with the sparse layers' KV and tables in host memory; best throughput over batch sizes
    (or the given ``batch``)."""
    sparse_layers = model.layers - dense_layers
    kv_tok = model.kv_bytes_per_token_layer()
    id_bytes = 2 if context <= 65536 else 4
    tables_seq = sparse_layers * model.kv_heads * L * context * id_bytes
    host_seq = sparse_layers * context * kv_tok + tables_seq
    gpu_seq = dense_layers * context * kv_tok + sparse_layers * static_tokens * kv_tok
    gpu_free = hw.gpu_mem_gb * GB * 0.95 - model.weight_bytes
    cap = min(int(hw.host_mem_gb * GB // host_seq), int(gpu_free // gpu_seq) if gpu_free > 0 else 0, max_batch)
    if cap < 1:
        return NO_FIT
    # per query head and sparse layer: sampled rows (k and v) + the L buckets it reads (context / 2^K ids each)
    cpu_seq = sparse_layers * model.heads * (sampled_fraction * context * kv_tok / model.kv_heads
                                             + L * (context / 2 ** K) * id_bytes)
    cpu_bw = hw.cpu_read_gbps * GB * hw.cpu_efficiency

    def at(b: int) -> Projection:
        gpu = (model.weight_bytes + b * gpu_seq) / (hw.gpu_read_gbps * GB)
        cpu = b * cpu_seq / cpu_bw
        step = max(gpu, cpu)
        return Projection(b, step, b / step, gpu, cpu)

    if batch is not None:
        return at(min(batch, cap))
    return max((at(b) for b in range(1, cap + 1)), key=lambda p: p.tokens_per_s)


def paper_projection_rows(cpu_efficiency: float | None = None, sampled_fraction: float = 0.02) -> list[dict]:
    """One row per paper setting: projected tokens/s of both systems and the speedup (a model output)."""
    rows = []
    for hw_key, model_key, context, (K, L) in PAPER_SETTINGS:
        hw = HARDWARE[hw_key]
        if cpu_efficiency is not None:
            hw = replace(hw, cpu_efficiency=cpu_efficiency)
        model = MODELS[model_key]
        full = gpu_full_attention(model, hw, context)
        pig = magicpig_offload(model, hw, context, sampled_fraction, K, L)
        rows.append({
            "kind": "projection (bandwidth model, not a measurement)", "hardware": hw.name, "model": model.name,
            "context": context, "K": K, "L": L, "sampled_fraction": sampled_fraction,
            "cpu_efficiency": hw.cpu_efficiency, "cpu_read_gbps_assumed": hw.cpu_read_gbps,
            "full_batch": full.batch, "full_tokens_per_s": full.tokens_per_s,
            "magicpig_batch": pig.batch, "magicpig_tokens_per_s": pig.tokens_per_s,
            "magicpig_ms_per_step": pig.ms_per_token,
            "speedup": (pig.tokens_per_s / full.tokens_per_s) if full.tokens_per_s > 0 else math.inf,
            "note": hw.note + ("" if full.batch else "; GPU-only full attention does not fit even at batch 1"),
        })
    return rows
