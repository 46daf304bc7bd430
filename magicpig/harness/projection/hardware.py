"""GPU servers we do not have, and the throughput the bandwidth model PROJECTS on them.

On a GPU server (``Hardware``) the weights and the exact part are read from GPU memory; the sparse part is
read from host memory at ``cpu_read_gbps x cpu_efficiency`` (the efficiency our kernel reaches, fitted or
measured here, carries over as a fraction of the host's streaming bandwidth), and it runs layer by layer
between the GPU's parts (only the small static part overlaps it), so the step is their sum. GPU-only full
attention through stock transformers moves its cache three times a step (``STOCK_KV_PASSES``). Each paper
ratio is projected over the baseline the paper states for it (``system.baselines`` of
config/paper_reference.yaml, Sec. 5.2): full attention on the GPU (``gpu_full_attention``) for the A100 and
L20, full attention on the CPU at a theoretical 150 GB/s (``cpu_full_attention``) for the simulated RTX 4090,
where a 96K cache does not fit beside the weights in 24 GB. Device facts
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
                        note="as in the paper: an L20 with its memory capped at 24 GB; host memory and bandwidth "
                             "assumed as the L20 box's (the CPU baseline's batch is bound by the host memory)"),
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


def paper_baselines() -> dict[str, dict]:
    """``system.baselines`` of config/paper_reference.yaml: what each of the paper's throughput ratios is over,
    by key (``gpu_full``, ``cpu_full`` with its ``kv_read_gbps``)."""
    from magicpig_tasks.paper import system_entries

    return system_entries("baselines")


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


def cpu_full_attention(model: ModelShape, hw: Hardware, context: int, kv_read_gbps: float,
                       batch: int | None = None, max_batch: int = 4096) -> Projection:
    """Full attention on the CPU: the paper's baseline of Fig. 8c (Sec. 5.2, "full attention on CPU with
    theoretical estimated bandwidth", 150 GB/s). The whole KV cache lives in host memory and every step reads
    all of it there at ``kv_read_gbps`` (a theoretical figure: no efficiency factor); the weights stay on the
    GPU and are charged as in every GPU step (read at ``gpu_read_gbps x gpu_efficiency``, plus the per-layer
    overhead). A layer's attention needs its projections and the next layer needs its output, so the two parts
    run one after the other and the step is their sum. The batch: the largest whose cache fits host memory
    (``host_mem_gb``; throughput grows with it), at most ``max_batch``, or ``batch``."""
    if not kv_read_gbps > 0:
        raise ValueError(f"kv_read_gbps must be > 0, got {kv_read_gbps!r}")
    kv_seq = model.layers * context * model.kv_bytes_per_token_layer()
    if _usable_gpu(model, hw) <= 0:
        return NO_FIT
    cap = min(int(hw.host_mem_gb * GB // kv_seq), max_batch)
    b = cap if batch is None else min(batch, cap)
    if b < 1:
        return NO_FIT
    w = step_work(model, "dense", context, b)
    gpu = w.weight_bytes / (hw.gpu_read_gbps * hw.gpu_efficiency * GB)
    cpu = w.exact_kv_bytes / (kv_read_gbps * GB)
    step = gpu + cpu + model.layers * hw.layer_overhead_ms / 1e3
    return Projection(b, step, b / step, gpu, cpu)


def baseline_projection(baseline: str, model: ModelShape, hw: Hardware, context: int,
                        baselines: dict[str, dict] | None = None) -> Projection:
    """The paper's baseline ``baseline`` (a key of ``system.baselines``) projected at its largest batch."""
    baselines = paper_baselines() if baselines is None else baselines
    if baseline not in baselines:
        raise ValueError(f"system.throughput_speedup: baseline {baseline!r} is not a key of system.baselines "
                         f"({', '.join(baselines)})")
    if baseline == "gpu_full":
        return gpu_full_attention(model, hw, context)
    if baseline == "cpu_full":
        return cpu_full_attention(model, hw, context, float(baselines[baseline]["kv_read_gbps"]))
    raise ValueError(f"system.baselines: no projection for baseline {baseline!r} (known: gpu_full, cpu_full)")


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
    """One row per throughput comparison of the paper (``system.throughput_speedup``): projected tokens/s of
    MagicPIG and of the entry's own baseline (``baseline``: full attention on the GPU, or on the CPU at the
    paper's 150 GB/s; ``full_*`` columns) and the speedup (a model output), beside the paper's speedup."""
    hardware = hardware or HARDWARE
    baselines = paper_baselines()
    rows = []
    for e in paper_entries("throughput_speedup"):
        hw = hardware[e["hardware"]]
        if cpu_efficiency is not None:
            hw = replace(hw, cpu_efficiency=cpu_efficiency)
        model, context = model_shape(e["model"]), int(e["context"])
        K, L = _kl(e["method"])
        if "baseline" not in e:
            raise ValueError(f"system.throughput_speedup: the {e['hardware']} entry has no 'baseline' field")
        full = baseline_projection(e["baseline"], model, hw, context, baselines)
        pig = magicpig_offload(model, hw, context, sampled_fraction, K, L)
        cpu_gbps = baselines[e["baseline"]].get("kv_read_gbps")
        note = hw.note
        if e["baseline"] == "gpu_full" and not full.batch:
            note += "; GPU-only full attention does not fit even at batch 1"
        elif cpu_gbps:
            note += (f"; baseline: KV cache in host memory read at {float(cpu_gbps):g} GB/s (the paper's theoretical "
                     "CPU bandwidth, Sec. 5.2), weights on the GPU")
        rows.append({
            "kind": LABEL, "hardware": hw.name, "model": model.name,
            "context": context, "K": K, "L": L, "sampled_fraction": sampled_fraction,
            "cpu_efficiency": hw.cpu_efficiency, "cpu_read_gbps_assumed": hw.cpu_read_gbps,
            "baseline": e["baseline"], "baseline_label": baselines[e["baseline"]].get("label", e["baseline"]),
            "baseline_kv_read_gbps": float(cpu_gbps) if cpu_gbps else math.nan,
            "full_batch": full.batch, "full_tokens_per_s": full.tokens_per_s,
            "magicpig_batch": pig.batch, "magicpig_tokens_per_s": pig.tokens_per_s,
            "magicpig_ms_per_step": pig.ms_per_token,
            "speedup": (pig.tokens_per_s / full.tokens_per_s) if full.tokens_per_s > 0 else math.inf,
            "paper_speedup": float(e["speedup"]),
            "note": note,
        })
    return rows


def latency_rows(cpu_efficiency: float, sampled_fraction: float = 0.02,
                 hardware: dict[str, Hardware] | None = None) -> list[dict]:
    """The paper's latency and maximum-throughput points (``system.latency_ms_per_token``,
    ``system.max_throughput_tokens_per_s``: Llama-3.1-8B, 96K, (10,150); the 54 ms/token on the simulated
    RTX 4090, the tokens/s on the L20) beside the model's, each projected on the entry's own hardware and
    setting, plus MagicPIG at the largest batch that fits there. Beside a latency point, the paper's baseline of
    that setting (``system.throughput_speedup``'s ``baseline``: on the simulated RTX 4090, full attention on
    the CPU at 150 GB/s) at batch 1, projected only (the paper states no latency for it)."""
    hardware = hardware or HARDWARE
    baselines = paper_baselines()
    speedups = paper_entries("throughput_speedup")

    def setting(e):
        hw = replace(hardware[e["hardware"]], cpu_efficiency=cpu_efficiency)
        return hw, model_shape(e["model"]), int(e["context"])

    rows = []
    for e in paper_entries("latency_ms_per_token"):
        hw, model, n = setting(e)
        p = magicpig_offload(model, hw, n, sampled_fraction, *_kl(e["method"]), batch=int(e["batch"]))
        rows.append({"kind": LABEL, "hardware": hw.name, "what": f"MagicPIG ms/token, batch {e['batch']}",
                     "projected": p.ms_per_token, "paper": float(e["ms"]), "batch": p.batch})
        for sp in speedups:
            if (sp["hardware"], sp["model"], int(sp["context"])) != (e["hardware"], e["model"], n):
                continue
            key = sp["baseline"]
            gbps = baselines.get(key, {}).get("kv_read_gbps")
            base = (cpu_full_attention(model, hw, n, float(gbps), batch=1) if key == "cpu_full"
                    else gpu_full_attention(model, hw, n, batch=1))
            rows.append({"kind": LABEL, "hardware": hw.name, "baseline": key,
                         "what": f"baseline ms/token, batch 1: {baselines.get(key, {}).get('label', key)}",
                         "projected": base.ms_per_token, "batch": base.batch})
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
