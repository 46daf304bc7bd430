"""GPU servers we do not have, and the throughput the bandwidth model PROJECTS on them.

On a GPU server (``Hardware``) the weights and the exact part are read from GPU memory; the sparse part is
read from host memory at ``cpu_read_gbps x cpu_efficiency`` (the efficiency our kernel reaches, fitted or
measured here, carries over as a fraction of the host's streaming bandwidth), and it runs layer by layer
between the GPU's parts (only the small static part overlaps it), so the step is their sum. GPU-only full
attention through stock transformers moves its cache three times a step (``STOCK_KV_PASSES``). Device facts
are public specifications; host bandwidths and overheads are assumptions (fields of ``Hardware``) that a
user or a GPU run can correct. Everything projected is a model output, never a measurement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from magicpig.harness.projection.bandwidth import GB, SparseSetting, step_work
from magicpig.shapes import ModelShape, model_shape


@dataclass(frozen=True)
class Hardware:
    name: str
    gpu_mem_gb: float
    gpu_read_gbps: float
    host_mem_gb: float  # assumption: host memory available to the KV cache and tables
    cpu_read_gbps: float  # assumption: streaming-read bandwidth of the host
    cpu_efficiency: float = 0.5  # achieved / streaming bandwidth of the sparse CPU part (fitted / measured)
    gpu_efficiency: float = 1.0  # achieved / peak GPU-memory bandwidth of decode kernels
    layer_overhead_ms: float = 0.0  # fixed host-side cost per layer and step (launches, Python)
    note: str = ""


# Stated assumptions of the GPU servers, correctable by a GPU run (`magicpig project --gpu-efficiency
# --gpu-layer-overhead-ms`): decode kernels reach ~80% of peak GPU-memory bandwidth; an eager transformers
# forward spends ~0.3 ms of host time per layer (launches, Python), both for GPU-only and for MagicPIG.
GPU_ASSUMPTIONS = dict(gpu_efficiency=0.8, layer_overhead_ms=0.3)
HARDWARE = {
    "A100": Hardware("A100-80GB", 80, 2039, 1000, 300, **GPU_ASSUMPTIONS,
                     note="host bandwidth assumed (2-socket DDR4 server); paper does not state it"),
    "L20": Hardware("L20-48GB", 48, 864, 1000, 300, **GPU_ASSUMPTIONS,
                    note="host bandwidth assumed (2-socket DDR5 server); paper does not state it"),
    "RTX4090": Hardware("RTX 4090 (simulated: L20 capped at 24 GB)", 24, 864, 1000, 300, **GPU_ASSUMPTIONS,
                        note="as in the paper: an L20 with its memory capped at 24 GB"),
    "H200": Hardware("H200-141GB", 141, 4800, 100, 80, **GPU_ASSUMPTIONS,
                     note="one H200 (HBM3e ~4.8 TB/s); host 16 cores / 128 GB: ~100 GB usable and 80 GB/s "
                          "read bandwidth ASSUMED (correct with --host-gbps / --host-mem-gb)"),
}
H200_CONTEXTS = (16384, 65536, 98304)
LABEL = "PROJECTION (bandwidth model, not a measurement)"


def paper_entries(name: str) -> list[dict]:
    """The paper's system figures ``system.<name>`` of config/paper_reference.yaml (the paper's Sec. 5,
    Fig. 8 and Table 8), each naming its setting: ``hardware`` (a key of HARDWARE), ``model`` (of
    model_shapes.yaml), ``context``, ``method`` (a spec) and ``batch`` where stated."""
    from magicpig_tasks.paper import system_entries

    return system_entries(name)


def _kl(spec: str) -> tuple[int, int]:
    from magicpig.methods import parse_method

    m = parse_method(spec)
    return m.K, m.L


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


def _usable_gpu(model: ModelShape, hw: Hardware) -> float:
    return hw.gpu_mem_gb * GB * 0.95 - model.weight_bytes


# Stock transformers' DynamicCache appends by torch.cat: every step it reads and rewrites each layer's whole
# cache, then attention reads it again — three passes over the KV where a static cache makes one.
STOCK_KV_PASSES = 3


def gpu_full_attention(model: ModelShape, hw: Hardware, context: int, batch: int | None = None,
                       kv_passes: int = 1) -> Projection:
    """GPU-only full attention at the largest batch that fits (or ``batch``); ``kv_passes``: how many times
    a step moves the KV cache (1: a static cache; STOCK_KV_PASSES: stock transformers)."""
    kv_seq = model.layers * context * model.kv_bytes_per_token_layer()
    free = _usable_gpu(model, hw)
    max_batch = int(free // kv_seq) if free > 0 else 0
    b = max_batch if batch is None else min(batch, max_batch)
    if b < 1:
        return NO_FIT
    w = step_work(model, "dense", context, b)
    gpu = (w.weight_bytes + kv_passes * w.exact_kv_bytes) / (hw.gpu_read_gbps * hw.gpu_efficiency * GB)
    step = gpu + model.layers * hw.layer_overhead_ms / 1e3
    return Projection(b, step, b / step, gpu_s=gpu)


def magicpig_offload(model: ModelShape, hw: Hardware, context: int, sampled_fraction: float, K: int, L: int,
                     *, dense_layers: int = 2, static_tokens: int = 68 + 64, batch: int | None = None,
                     max_batch: int = 4096) -> Projection:
    """MagicPIG with the sparse layers' KV and tables in host memory, at the largest batch that fits (the
    step is a sum, so throughput grows with the batch) or at the given ``batch``."""
    sparse_layers = model.layers - dense_layers
    kv_tok = model.kv_bytes_per_token_layer()
    id_bytes = 2 if context <= 65536 else 4
    host_seq = sparse_layers * context * kv_tok + sparse_layers * model.kv_heads * L * context * id_bytes
    gpu_seq = dense_layers * context * kv_tok + sparse_layers * static_tokens * kv_tok
    gpu_free = _usable_gpu(model, hw)
    cap = min(int(hw.host_mem_gb * GB // host_seq), int(gpu_free // gpu_seq) if gpu_free > 0 else 0, max_batch)
    b = cap if batch is None else min(batch, cap)
    if b < 1:
        return NO_FIT
    w = step_work(model, "magicpig", context, b,
                  SparseSetting(K, L, sampled_fraction, dense_layers, static_tokens))
    gpu = (w.weight_bytes + w.exact_kv_bytes) / (hw.gpu_read_gbps * hw.gpu_efficiency * GB)
    cpu = w.sparse_bytes / (hw.cpu_read_gbps * hw.cpu_efficiency * GB)
    step = gpu + cpu + model.layers * hw.layer_overhead_ms / 1e3
    return Projection(b, step, b / step, gpu, cpu)


def paper_projection_rows(cpu_efficiency: float | None = None, sampled_fraction: float = 0.02,
                          hardware: dict[str, Hardware] | None = None) -> list[dict]:
    """One row per throughput comparison of the paper (``system.throughput_speedup_vs_gpu_full``): projected
    tokens/s of both systems and the speedup (a model output), beside the paper's speedup of that setting."""
    hardware = hardware or HARDWARE
    rows = []
    for e in paper_entries("throughput_speedup_vs_gpu_full"):
        hw = hardware[e["hardware"]]
        if cpu_efficiency is not None:
            hw = replace(hw, cpu_efficiency=cpu_efficiency)
        model, context = model_shape(e["model"]), int(e["context"])
        K, L = _kl(e["method"])
        full = gpu_full_attention(model, hw, context)
        pig = magicpig_offload(model, hw, context, sampled_fraction, K, L)
        rows.append({
            "kind": LABEL, "hardware": hw.name, "model": model.name,
            "context": context, "K": K, "L": L, "sampled_fraction": sampled_fraction,
            "cpu_efficiency": hw.cpu_efficiency, "cpu_read_gbps_assumed": hw.cpu_read_gbps,
            "full_batch": full.batch, "full_tokens_per_s": full.tokens_per_s,
            "magicpig_batch": pig.batch, "magicpig_tokens_per_s": pig.tokens_per_s,
            "magicpig_ms_per_step": pig.ms_per_token,
            "speedup": (pig.tokens_per_s / full.tokens_per_s) if full.tokens_per_s > 0 else math.inf,
            "paper_speedup": float(e["speedup"]),
            "note": hw.note + ("" if full.batch else "; GPU-only full attention does not fit even at batch 1"),
        })
    return rows


def latency_rows(cpu_efficiency: float, sampled_fraction: float = 0.02,
                 hardware: dict[str, Hardware] | None = None) -> list[dict]:
    """The paper's latency and maximum-throughput points (``system.latency_ms_per_token``,
    ``system.max_throughput_tokens_per_s``: L20, Llama-3.1-8B, 96K, (10,150)) beside the model's, each
    projected at the entry's own setting, plus MagicPIG at the largest batch that fits there."""
    hardware = hardware or HARDWARE

    def setting(e):
        hw = replace(hardware[e["hardware"]], cpu_efficiency=cpu_efficiency)
        return hw, model_shape(e["model"]), int(e["context"])

    rows = []
    for e in paper_entries("latency_ms_per_token"):
        hw, model, n = setting(e)
        p = magicpig_offload(model, hw, n, sampled_fraction, *_kl(e["method"]), batch=int(e["batch"]))
        rows.append({"kind": LABEL, "hardware": hw.name, "what": f"MagicPIG ms/token, batch {e['batch']}",
                     "projected": p.ms_per_token, "paper": float(e["ms"]), "batch": p.batch})
    for e in paper_entries("max_throughput_tokens_per_s"):
        hw, model, n = setting(e)
        if e["method"] == "dense":  # GPU-only full attention at its largest batch
            full = gpu_full_attention(model, hw, n)
            rows.append({"kind": LABEL, "hardware": hw.name, "what": "GPU-only full attention tokens/s, largest batch",
                         "projected": full.tokens_per_s, "paper": float(e["tokens_per_s"]), "batch": full.batch})
            continue
        K, L = _kl(e["method"])
        at = magicpig_offload(model, hw, n, sampled_fraction, K, L, batch=int(e["batch"]))
        best = magicpig_offload(model, hw, n, sampled_fraction, K, L)
        rows.append({"kind": LABEL, "hardware": hw.name, "what": f"MagicPIG tokens/s, batch {e['batch']}",
                     "projected": at.tokens_per_s, "paper": float(e["tokens_per_s"]), "batch": at.batch})
        rows.append({"kind": LABEL, "hardware": hw.name, "what": "MagicPIG tokens/s, largest batch that fits",
                     "projected": best.tokens_per_s, "batch": best.batch})
    return rows


def h200_rows(cpu_efficiency: float, sampled_fraction: float = 0.02, hw: Hardware | None = None,
              contexts=H200_CONTEXTS, model_key: str = "llama-3.1-8b") -> list[dict]:
    """llama-3.1-8b on one H200 at batch 1 and at the largest batch that fits: GPU-only full attention
    (stock transformers, as ``bench decode``'s ``dense@stock`` measures it, and with a static cache) vs
    MagicPIG (10,150) offload — rows a GPU run of ``bench decode`` checks."""
    hw = replace(hw or HARDWARE["H200"], cpu_efficiency=cpu_efficiency)
    model = model_shape(model_key)
    rows = []
    for n in contexts:
        for which in ("batch 1", "max batch"):
            batch = 1 if which == "batch 1" else None
            for method, p in (("dense@stock", gpu_full_attention(model, hw, n, batch, STOCK_KV_PASSES)),
                              ("dense (static cache)", gpu_full_attention(model, hw, n, batch)),
                              ("magicpig:K=10,L=150@offload",
                               magicpig_offload(model, hw, n, sampled_fraction, 10, 150, batch=batch))):
                rows.append({"kind": LABEL, "hardware": hw.name, "model": model.name, "context": n, "which": which,
                             "method": method, "batch": p.batch, "ms_per_token": p.ms_per_token,
                             "tokens_per_s": p.tokens_per_s, "gpu_ms": 1e3 * p.gpu_s, "cpu_ms": 1e3 * p.cpu_s,
                             "cpu_efficiency": hw.cpu_efficiency, "cpu_read_gbps_assumed": hw.cpu_read_gbps,
                             "host_mem_gb_assumed": hw.host_mem_gb, "fits": p.batch >= 1})
    return rows


def project_gpu_row(model: ModelShape, family: str, context: int, batch: int, hw: Hardware,
                    sparse: SparseSetting | None = None) -> float:
    """Projected seconds of one step measured on a GPU (a check of the projection, not a fit)."""
    if family == "magicpig":
        s = sparse or SparseSetting()
        p = magicpig_offload(model, hw, context, s.sampled_fraction, s.K, s.L, dense_layers=s.dense_layers,
                             static_tokens=s.static_tokens, batch=batch)
    else:
        p = gpu_full_attention(model, hw, context, batch, STOCK_KV_PASSES if family == "dense@stock" else 1)
    return p.step_s if p.batch == batch else math.inf  # inf: that batch does not fit
