"""A bandwidth model of one decode step: fitted to this machine's measurements, then used to PROJECT
throughput on hardware we do not have.

Decoding at long context is memory-bound, so a step costs the bytes it must read divided by the bandwidth
that reads them, plus a fixed cost per layer (Python, kernel launches, thread hand-offs). For one step of a
batch of ``B`` sequences at context ``n`` (``StepWork``):

- weights: every parameter is read once per step (the input-embedding table only for the B rows it looks
  up, unless it is tied to the output head); ``B x 2 x params`` FLOPs of matrix products;
- exact KV: dense attention reads every layer's keys and values; MagicPIG reads the dense layers' and the
  static tokens' (sinks, local window, generated) exactly;
- sparse: MagicPIG's CPU part reads, per query head and sparse layer, the sampled keys/values and the ``L``
  hash buckets it looks up (``n / 2^K`` ids each) — the same byte count as ``magicpig bench kernel`` —
  and, once per step and sparse layer, each kv-head's (d, K*L) float32 projections to hash the queries;
- overhead: a fixed cost per layer, per method.

On this machine (everything on the CPU) these costs add up. ``fit`` finds the few rates by non-negative
least squares on the relative error of the unflagged measured rows (``magicpig bench decode``): the
weights are read at the streaming bandwidth ``magicpig bench kernel`` measured (a floor: whatever a step
costs beyond it at fixed (context, batch) is per-layer overhead), and the fit gives the FLOP rate, the
effective bandwidth of each method's exact attention, that of the sparse CPU part and each method's
per-layer overhead. Rows measured under load are flagged and never fitted.

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

from magicpig.shapes import ModelShape, load_shapes, model_shape  # noqa: F401 (re-exported)

GB = 1e9
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2,
               "half": 2}
MODELS = load_shapes()


def dtype_bytes(dtype) -> int:
    name = str(dtype).replace("torch.", "").strip().lower()
    if name not in DTYPE_BYTES:
        raise ValueError(f"dtype: {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[name]


# ---- the work of one decode step -------------------------------------------------------------------
FAMILIES = ("dense@stock", "dense", "magicpig")  # the methods the model knows


def method_family(method: str, backend: str | None = None) -> str | None:
    """``dense@stock`` (stock transformers SDPA + DynamicCache), ``dense`` (our dense decoder),
    ``magicpig`` (offload backend), or None for a method the model does not describe."""
    spec = str(method).strip()
    if "@" in spec:
        spec, backend = spec.split("@", 1)
    name, backend = spec.split(":", 1)[0].strip().lower(), str(backend or "").strip().lower()
    if name == "dense":
        return "dense@stock" if backend == "stock" else "dense"
    if name == "magicpig" and backend == "offload":
        return "magicpig"
    return None


@dataclass(frozen=True)
class StepWork:
    """What one decode step of a batch reads and computes (bytes, FLOPs), by the part that does it."""

    family: str
    batch: int
    layers: int
    weight_bytes: float
    flops: float
    exact_kv_bytes: float
    sparse_bytes: float = 0.0
    fresh_bytes: float = 0.0  # memory the step allocates anew from the OS (host_alloc; see step_work)
    # reference streaming bandwidth / the bandwidth measured during this row (1: not measured). A shared
    # machine's memory bandwidth drifts; every byte term of the row is scaled by it (``features``, ``fit``)
    bandwidth_scale: float = 1.0

    @property
    def streamed_bytes(self) -> float:
        """Bytes charged at the streaming bandwidth, not fitted: the weights, and MagicPIG's exact part
        (read by a fused exact kernel; see ``features``)."""
        return self.weight_bytes + (self.exact_kv_bytes if self.family == "magicpig" else 0.0)


@dataclass(frozen=True)
class SparseSetting:
    K: int = 10
    L: int = 150
    sampled_fraction: float = 0.02
    dense_layers: int = 2
    static_tokens: int = 4 + 64 + 64  # sinks + local window + tokens generated so far (typical)


def sparse_setting(spec: str, layers: int, sampled_fraction: float | None = None, generated: int = 64) -> SparseSetting:
    from magicpig.methods import parse_method

    m = parse_method(spec.split("@", 1)[0])
    if m.name != "magicpig":
        raise ValueError(f"method: {spec!r} is not a magicpig spec")
    frac = sampled_fraction if sampled_fraction is not None and math.isfinite(sampled_fraction) else 0.02
    return SparseSetting(m.K, m.L, frac, len(m.dense_layer_set(layers)), m.sinks + m.local + generated)


MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's largest dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)


def step_work(model: ModelShape, family: str, context: int, batch: int, sparse: SparseSetting | None = None,
              kv_elem: int | None = None, host_alloc: bool = False) -> StepWork:
    """The bytes and FLOPs of one decode step (module docstring); ``kv_elem``: bytes per key/value element
    (default: the weights' element size).

    host_alloc (a CPU run): stock transformers' DynamicCache concatenates every layer's keys and values with
    the new token at each step, into new tensors. glibc serves an allocation above its mmap threshold (at
    most 32 MiB) with fresh pages from the OS and returns them when freed, so once one layer's key tensor
    exceeds 32 MiB every step faults in all of the cache's pages again: ``fresh_bytes``, a cost the
    kernels' bandwidth does not describe (it makes stock CPU decoding superlinear in batch x context)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    kv_tok = model.kv_bytes_per_token_layer(kv_elem)
    weights = model.params_read * model.bytes_per_param
    flops = batch * 2 * model.params_read
    if family != "magicpig":
        kv = batch * model.layers * context * kv_tok
        tensor = batch * context * kv_tok / 2  # one layer's keys (or values)
        fresh = kv if host_alloc and family == "dense@stock" and tensor > MMAP_THRESHOLD_MAX else 0.0
        return StepWork(family, batch, model.layers, weights, flops, kv, fresh_bytes=fresh)
    s = sparse or SparseSetting()
    sparse_layers = model.layers - s.dense_layers
    exact = s.dense_layers * context * kv_tok + sparse_layers * min(s.static_tokens, context) * kv_tok
    id_bytes = 2 if context <= 65536 else 4
    per_head = (s.sampled_fraction * context * 2 * model.head_dim * (kv_elem or model.bytes_per_param)
                + s.L * (context / 2 ** s.K) * id_bytes)
    # the queries' hashing reads each kv-head's (d, K*L) float32 projections once per step, whatever the batch
    projections = sparse_layers * model.kv_heads * model.head_dim * s.K * s.L * 4
    return StepWork(family, batch, model.layers, weights, flops, batch * exact,
                    batch * sparse_layers * model.heads * per_head + projections)


# ---- the fitted model of this machine --------------------------------------------------------------
# coefficient names: seconds per FLOP, per exact-KV byte (by attention code: stock SDPA, our torch reference),
# per sparse byte, per freshly allocated byte, per layer. MagicPIG's exact part (its dense layers and static
# keys) is read by a fused exact kernel (the CPU module's kernel 5, flash attention on a GPU) and charged,
# like the weights, at the streaming bandwidth: its bytes grow with the context as the sparse part's do, so
# a fit could not tell the two rates apart.
def features(w: StepWork) -> dict[str, float]:
    f = {"flops": w.flops, f"layer:{w.family}": float(w.layers)}
    if w.family == "magicpig":
        f["sparse"] = w.sparse_bytes * w.bandwidth_scale
    else:
        f[f"kv:{w.family}"] = w.exact_kv_bytes * w.bandwidth_scale
    if w.fresh_bytes:
        f["fresh"] = w.fresh_bytes * w.bandwidth_scale
    return f


COEFFICIENTS = ("flops", "kv:dense@stock", "kv:dense", "sparse", "fresh", "layer:dense@stock", "layer:dense",
                "layer:magicpig")


@dataclass
class Fit:
    """Fitted rates of this machine. ``coef``: seconds per unit of each feature (0 where no row determined
    it); ``stream_gbps``: the measured streaming read the weights are charged at."""

    stream_gbps: float
    coef: dict[str, float]
    used: int = 0
    determined: tuple[str, ...] = ()

    def predict_s(self, w: StepWork) -> float:
        return sum(self.breakdown_s(w).values())

    def breakdown_s(self, w: StepWork) -> dict[str, float]:
        """Predicted seconds of one step by part: weights, flops, exact_kv, sparse, fresh, overhead."""
        at_stream = w.bandwidth_scale / (self.stream_gbps * GB)
        parts = {"weights": w.weight_bytes * at_stream, "flops": 0.0,
                 "exact_kv": (w.streamed_bytes - w.weight_bytes) * at_stream, "sparse": 0.0,
                 "fresh": 0.0, "overhead": 0.0}
        for k, v in features(w).items():
            part = {"kv": "exact_kv", "layer": "overhead"}.get(k.split(":")[0], k)
            parts[part] += self.coef.get(k, 0.0) * v
        return parts

    def parameters(self) -> dict[str, float]:
        """The fitted values in physical units (NaN where no row determined them)."""
        def inv(k, scale):
            c = self.coef.get(k, 0.0)
            if k not in self.determined:
                return math.nan
            return math.inf if c == 0 else scale / c

        out = {"stream_gbps (measured)": self.stream_gbps, "gflops": inv("flops", 1e-9)}
        for fam in ("dense@stock", "dense"):
            out[f"exact_kv_gbps[{fam}]"] = inv(f"kv:{fam}", 1e-9)
        out["sparse_gbps[magicpig]"] = inv("sparse", 1e-9)
        out["fresh_page_gbps[dense@stock]"] = inv("fresh", 1e-9)
        out["sparse_efficiency (of stream)"] = out["sparse_gbps[magicpig]"] / self.stream_gbps
        for fam in FAMILIES:
            k = f"layer:{fam}"
            out[f"layer_overhead_ms[{fam}]"] = 1e3 * self.coef.get(k, 0.0) if k in self.determined else math.nan
        return out


def nnls(A, b, tol: float = 1e-10):
    """Non-negative least squares, min |A x - b| with x >= 0 (Lawson & Hanson's active-set method)."""
    import numpy as np

    A, b = np.asarray(A, float), np.asarray(b, float)
    n = A.shape[1]
    x, passive = np.zeros(n), np.zeros(n, bool)
    for _ in range(3 * n + 10):
        w = A.T @ (b - A @ x)
        if passive.all() or w[~passive].max() <= tol:
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        for _ in range(n + 1):  # each pass drops at least one coefficient from the passive set
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(A[:, passive], b, rcond=None)[0]
            if (z[passive] > tol).all():
                break
            neg = passive & (z <= tol)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
        x = z
    return x


def fit(works: list[StepWork], measured_s: list[float], stream_gbps: float) -> Fit:
    """Least squares on the relative error: minimise sum((predicted - measured) / measured)^2 over
    non-negative coefficients."""
    import numpy as np

    if not works:
        raise ValueError("fit: no unflagged measured rows to fit")
    if not stream_gbps > 0:
        raise ValueError(f"stream_gbps must be > 0, got {stream_gbps}")
    feats = [features(w) for w in works]
    names = [k for k in COEFFICIENTS if any(f.get(k, 0) > 0 for f in feats)]
    y = np.asarray(measured_s, float)
    A = np.array([[f.get(k, 0.0) for k in names] for f in feats]) / y[:, None]
    b = (y - np.array([w.streamed_bytes * w.bandwidth_scale for w in works]) / (stream_gbps * GB)) / y
    scale = np.linalg.norm(A, axis=0)
    x = nnls(A / scale, b) / scale
    return Fit(stream_gbps, {k: float(v) for k, v in zip(names, x)}, len(works), tuple(names))


def leave_one_out(works: list[StepWork], measured_s: list[float], stream_gbps: float) -> list[float]:
    """Predicted seconds of each row by a fit without it (NaN when too few rows remain)."""
    out = []
    for i in range(len(works)):
        rest = [j for j in range(len(works)) if j != i]
        if not rest:
            out.append(math.nan)
            continue
        f = fit([works[j] for j in rest], [measured_s[j] for j in rest], stream_gbps)
        out.append(f.predict_s(works[i]))
    return out


def under_load(load: float, cores: int) -> bool:
    """A measurement taken while the load average exceeded half the cores is not trusted."""
    return load > cores / 2


# ---- GPU servers: projections --------------------------------------------------------------------
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



def paper_entries(name: str) -> list[dict]:
    """The paper's system figures ``system.<name>`` of config/paper_reference.yaml (the paper's Sec. 5, Fig. 8 and Table 8), each
    naming its setting: ``hardware`` (a key of HARDWARE), ``model`` (of model_shapes.yaml), ``context``,
    ``method`` (a spec) and ``batch`` where stated."""
    from magicpig_tasks.paper import system_entries

    return system_entries(name)


def _kl(spec: str) -> tuple[int, int]:
    from magicpig.methods import parse_method

    m = parse_method(spec)
    return m.K, m.L
H200_CONTEXTS = (16384, 65536, 98304)


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


LABEL = "PROJECTION (bandwidth model, not a measurement)"


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
        model, context = MODELS[e["model"]], int(e["context"])
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
        return hw, MODELS[e["model"]], int(e["context"])

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
    model = MODELS[model_key]
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


