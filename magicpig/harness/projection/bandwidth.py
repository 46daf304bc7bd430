"""A bandwidth model of one decode step, and its fit to this machine's measured rows.

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

On this machine (everything on the CPU) these costs add up. ``fit`` finds the rates by non-negative least
squares on the relative error of the unflagged measured rows (``magicpig bench decode``): the weights are
read at the streaming bandwidth ``magicpig bench kernel`` measured (a floor: whatever a step costs beyond
it at fixed (context, batch) is per-layer overhead), and the fit gives the FLOP rate, the effective
bandwidth of each method's exact attention, that of the sparse CPU part and each method's per-layer
overhead. ``trust_problems`` says why a fit's sparse efficiency may not be projected.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from magicpig.shapes import ModelShape

GB = 1e9
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2,
               "half": 2}


def dtype_bytes(dtype) -> int:
    name = str(dtype).replace("torch.", "").strip().lower()
    if name not in DTYPE_BYTES:
        raise ValueError(f"dtype: {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[name]


# ---- the work of one decode step -------------------------------------------------------------------
FAMILIES = ("dense@stock", "dense", "magicpig")  # the methods the model knows


# bytes per weight of magicpig.decode_weights' storages (q8_0: int8 + a float32 scale per 32; the test pins
# both to the packed tensors' sizes)
WEIGHT_STORAGE_BYTES = {"bfloat16": 2.0, "q8_0": 1.125}


def method_family(method: str, backend: str | None = None) -> str | None:
    """``dense@stock`` (stock transformers SDPA + DynamicCache), ``dense`` (our dense decoder),
    ``magicpig`` (offload backend), or None for a method the model does not describe."""
    from magicpig.backends import parse_spec_at_backend

    given = parse_spec_at_backend(method)
    name, backend = given.spec.split(":", 1)[0].strip().lower(), str(given.backend or backend or "").strip().lower()
    if backend == "llamacpp":
        return None  # another runtime's kernels: the bench row carries its own bytes-limit
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
    from magicpig.backends import parse_spec_at_backend
    from magicpig.methods import parse_method

    m = parse_method(parse_spec_at_backend(spec).spec)
    if m.name != "magicpig":
        raise ValueError(f"method: {spec!r} is not a magicpig spec")
    frac = sampled_fraction if sampled_fraction is not None and math.isfinite(sampled_fraction) else 0.02
    return SparseSetting(m.K, m.L, frac, len(m.dense_layer_set(layers)), m.sinks + m.local + generated)


MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's largest dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)


def weight_elem_bytes(weights) -> float | None:
    """Bytes per weight of a bench row's ``weights`` storage (``magicpig.decode_weights``), None for the
    model's own tensors (then the model dtype's size)."""
    return WEIGHT_STORAGE_BYTES.get(str(weights or ""))


def step_work(model: ModelShape, family: str, context: int, batch: int, sparse: SparseSetting | None = None,
              kv_elem: int | None = None, host_alloc: bool = False, weight_elem: float | None = None) -> StepWork:
    """The bytes and FLOPs of one decode step (module docstring); ``kv_elem``: bytes per key/value element
    (default: the weights' element size); ``weight_elem``: bytes per weight as the step reads them (default:
    the element size; ``weight_elem_bytes``).

    host_alloc (a CPU run): stock transformers' DynamicCache concatenates every layer's keys and values with
    the new token at each step, into new tensors. glibc serves an allocation above its mmap threshold (at
    most 32 MiB) with fresh pages from the OS and returns them when freed, so once one layer's key tensor
    exceeds 32 MiB every step faults in all of the cache's pages again: ``fresh_bytes``, a cost the
    kernels' bandwidth does not describe (it makes stock CPU decoding superlinear in batch x context)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    kv_tok = model.kv_bytes_per_token_layer(kv_elem)
    weights = model.params_read * (weight_elem or model.bytes_per_param)
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
        f["sparse"] = w.sparse_bytes
    else:
        f[f"kv:{w.family}"] = w.exact_kv_bytes
    if w.fresh_bytes:
        f["fresh"] = w.fresh_bytes
    return f


COEFFICIENTS = ("flops", "kv:dense@stock", "kv:dense", "sparse", "fresh", "layer:dense@stock", "layer:dense",
                "layer:magicpig")
EFFICIENCY = "sparse_efficiency (of stream)"


@dataclass
class Fit:
    """Fitted rates of this machine. ``coef``: seconds per unit of each feature (0 where no row determined
    it); ``stream_gbps``: the measured streaming read the weights are charged at; ``used``: rows fitted;
    ``determined``: the coefficients some row's features determined (the fitted parameters)."""

    stream_gbps: float
    coef: dict[str, float]
    used: int = 0
    determined: tuple[str, ...] = ()

    def predict_s(self, w: StepWork) -> float:
        return sum(self.breakdown_s(w).values())

    def breakdown_s(self, w: StepWork) -> dict[str, float]:
        """Predicted seconds of one step by part: weights, flops, exact_kv, sparse, fresh, overhead."""
        at_stream = 1 / (self.stream_gbps * GB)
        parts = {"weights": w.weight_bytes * at_stream, "flops": 0.0,
                 "exact_kv": (w.streamed_bytes - w.weight_bytes) * at_stream, "sparse": 0.0,
                 "fresh": 0.0, "overhead": 0.0}
        for k, v in features(w).items():
            part = {"kv": "exact_kv", "layer": "overhead"}.get(k.split(":")[0], k)
            parts[part] += self.coef.get(k, 0.0) * v
        return parts

    def parameters(self) -> dict[str, float]:
        """The fitted values in physical units: GB/s (inf where a byte's cost came out 0), ms per layer (NaN
        where no row determined them)."""
        def gbps(k):
            c = self.coef.get(k, 0.0)
            return math.nan if k not in self.determined else 1e-9 / c if c else math.inf

        out = {"stream_gbps (measured)": self.stream_gbps, "gflops": gbps("flops"),
               "exact_kv_gbps[dense@stock]": gbps("kv:dense@stock"), "exact_kv_gbps[dense]": gbps("kv:dense"),
               "sparse_gbps[magicpig]": gbps("sparse"), "fresh_page_gbps[dense@stock]": gbps("fresh")}
        out[EFFICIENCY] = out["sparse_gbps[magicpig]"] / self.stream_gbps
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
    b = (y - np.array([w.streamed_bytes for w in works]) / (stream_gbps * GB)) / y
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


# ---- when a fit may be projected -------------------------------------------------------------------
SPARE_ROWS = 3  # rows beyond the fitted parameters: with fewer, the fit reproduces almost any data
MAX_LOO_ERROR = 0.25  # every row predicted within +-25% by a fit without it
EFFICIENCY_RANGE = (0.01, 1.0)  # a physical sparse efficiency: below 1% the fit put the step's time on its sparse bytes


def trust_problems(f: Fit, measured_s: list[float], loo_s: list[float]) -> list[str]:
    """Why the fit's sparse efficiency may not be projected (empty: it may): too few rows for its
    parameters, a row that a fit without it misses by more than ``MAX_LOO_ERROR``, or a sparse efficiency
    no MagicPIG row determined or outside ``EFFICIENCY_RANGE``."""
    problems = []
    params = len(f.determined)
    if f.used < params + SPARE_ROWS:
        problems.append(f"{f.used} unflagged rows for {params} fitted parameters (needs {params + SPARE_ROWS})")
    loo = [abs(p / m - 1) for p, m in zip(loo_s, measured_s)]
    if any(not e <= MAX_LOO_ERROR for e in loo):  # NaN: no row left to fit without it
        worst = max((e for e in loo if math.isfinite(e)), default=math.nan)
        problems.append(f"leave-one-out error up to {worst:.0%} (bound {MAX_LOO_ERROR:.0%})" if math.isfinite(worst)
                        else "no leave-one-out check (too few rows)")
    eff = f.parameters()[EFFICIENCY]
    lo, hi = EFFICIENCY_RANGE
    if math.isnan(eff):
        problems.append("no MagicPIG row determined the sparse bandwidth")
    elif not lo <= eff <= hi:
        problems.append(f"fitted sparse efficiency {eff:.3g} is outside [{lo:g}, {hi:g}]")
    return problems
