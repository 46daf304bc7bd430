"""Decode benchmark, the paper's throughput experiment (``magicpig bench decode``): per (context, batch,
method@backend) the time of one decode step and tokens/s, with stock transformers and llama.cpp as the
baselines.

Protocol: one prompt per context (``prompts``), repeated to the batch; ``warmup`` untimed decode steps, then
``steps`` timed ones; ms_per_token = timed time / steps (a step makes one token per sequence), tokens_per_s =
batch * steps / timed time. Backends: ``stock`` (dense only: transformers' SDPA and DynamicCache, the
forward, greedy pick and mask update ``generate`` does per step), ``llamacpp`` (dense only: the model's GGUF
file run by llama.cpp, ``llamacpp``) and the engine's ``reference`` / ``offload``, whose linear layers kernel 4
reads in the storage ``weights`` (``magicpig.decode_weights``).
Each row is checked against the memory before it runs (``memory``); ``max_throughput`` searches the largest
batch that fits per method (the paper's Table 7). The rows and their columns: ``table``; how to read them:
docs/benchmarking.md.
"""
from __future__ import annotations

import inspect
import math
import os
import threading
import time

import torch

from magicpig.backends import BASELINE_BACKENDS, BENCH_BACKENDS, SpecOnBackend, parse_spec_at_backend, system_backend
from magicpig.harness.bench import llamacpp, memory
from magicpig.harness.bench.prompts import essay_tokens, random_tokens, repeat_batch, tile_prefill
from magicpig.harness.bench.table import Table, bytes_limit, is_under_load, summary
from magicpig.harness.machine import device_name, machine_record
from magicpig.shapes import ModelShape, model_shape

CONTEXTS = (8192, 32768)
BATCHES = (1,)
METHODS = (("dense", "stock"), ("dense", "reference"), ("magicpig:K=10,L=150", "offload"))
BACKENDS = BENCH_BACKENDS  # stock transformers, llama.cpp + the engine's (magicpig.backends)
WEIGHTS = "q8_0"  # kernel 4's weight storage in the engine's rows (docs/benchmarking.md: why)
FILLS = ("exact", "tile")
DTYPES = ("auto", "float32", "bfloat16", "float16")
STREAM_EVERY = 4  # --diagnostics: one timed step in this many is followed by a streaming read
IN_ROW_STREAM_MIN = 64 << 20  # that read's buffer: 4x the last-level cache, at least this


def parse_method_arg(item: str) -> tuple[str, str]:
    """``SPEC[@BACKEND]`` -> (canonical spec, backend). Default backend: the method's system backend
    (``magicpig.backends.system_backend``); ``stock`` (stock transformers) and ``llamacpp`` run ``dense``
    only."""
    from magicpig.methods import parse_method

    try:
        given = parse_spec_at_backend(item)
    except ValueError as exc:
        raise ValueError(f"--method: {exc}") from None
    method = parse_method(given.spec)
    backend = given.backend or system_backend(method.name)
    if backend in BASELINE_BACKENDS and method.name != "dense":
        raise ValueError(f"--method {item!r}: backend {backend!r} (stock transformers or llama.cpp) runs 'dense' only")
    return method.spec(), backend


def gguf_file_type(path: str) -> str:
    """The GGUF file's ``general.file_type`` as its name (``MOSTLY_Q4_1`` -> ``Q4_1``)."""
    import gguf

    from magicpig.models import gguf_metadata

    value = gguf_metadata(path).get("general.file_type")
    try:
        return gguf.LlamaFileType(int(value)).name.removeprefix("MOSTLY_")
    except (TypeError, ValueError):
        return f"file_type {value}"


def resolve_dtype(name: str | None, device: str):
    """``auto`` -> float32 on the CPU, bfloat16 on CUDA; else the named torch dtype."""
    if name in (None, "auto"):
        return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return getattr(torch, name)


class RowMonitor:
    """Over one row: peak process RSS (sampled by a thread), peak device memory, and the cores' worth of CPU
    time OTHER processes took (system busy time minus this process's, over wall time); a row is
    ``under_load`` when that reaches into its threads' cores (``table.is_under_load``, every backend's rows:
    llama.cpp's threads are this process's too). ``diagnostics``: also the load averages, the
    hypervisor's steal and this process's share of CPU time in the kernel."""

    def __init__(self, device: torch.device, diagnostics: bool = False, interval: float = 0.05):
        import psutil

        self.device, self.diagnostics, self.interval = device, diagnostics, interval
        self.proc, self._stop = psutil.Process(), threading.Event()
        self.threads = torch.get_num_threads()  # the row's threads (llama.cpp rows are given as many)

    @staticmethod
    def _busy() -> float:
        import psutil

        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0)

    @staticmethod
    def _steal() -> float:
        import psutil

        return getattr(psutil.cpu_times(), "steal", 0.0)  # Linux only

    def _own(self) -> tuple[float, float]:
        t = self.proc.cpu_times()
        return t.user + t.system, t.system

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self):
        self.load_before = os.getloadavg()[0]
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.peak_rss = self.proc.memory_info().rss
        self._start = time.perf_counter(), self._busy(), self._own(), self._steal()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        t0, busy0, own0, steal0 = self._start
        wall = max(1e-9, time.perf_counter() - t0)
        own, own_sys = (b - a for a, b in zip(own0, self._own()))
        self.other_cpu_load = max(0.0, (self._busy() - busy0) - own) / wall
        self.steal_cpu = max(0.0, self._steal() - steal0) / wall
        self.own_sys_share = own_sys / own if own > 0 else 0.0
        self.load_after = os.getloadavg()[0]
        self.peak_device = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else 0
        return False

    def fields(self) -> dict:
        out = {"peak_host_mb": round(self.peak_rss / 2**20, 1),
               "peak_device_mb": round(self.peak_device / 2**20, 1) if self.device.type == "cuda" else "",
               "other_cpu_load": round(self.other_cpu_load, 2),
               "under_load": is_under_load(self.other_cpu_load, self.threads)}
        if self.diagnostics:
            out.update({"load_before": round(self.load_before, 2), "load_after": round(self.load_after, 2),
                        "steal_cpu": round(self.steal_cpu, 3), "own_sys_share": round(self.own_sys_share, 3)})
        return out


class StepBandwidth:
    """``--diagnostics``: the ``after_step`` of a CPU row. After every ``every``-th timed step (the first
    included), outside its time, one timed streaming read of ``buffer`` (larger than the last-level cache)
    with ``threads`` threads. ``gbps()``: bytes over the summed seconds of the reads; ``after_read(steps)``:
    the mean time of the steps right after a read over that of the other timed steps."""

    def __init__(self, buffer: torch.Tensor, threads: int, warmup: int, every: int = STREAM_EVERY):
        from magicpig import cpu

        self.read = cpu.load().stream_read
        self.buffer, self.threads, self.warmup, self.every = buffer, threads, warmup, every
        self.seconds: list[float] = []
        self.followed: set[int] = set()  # steps that came right after a read

    def __call__(self, step: int) -> None:
        if step < self.warmup or (step - self.warmup) % self.every:
            return
        t0 = time.perf_counter()
        self.read(self.buffer, self.threads)
        self.seconds.append(max(time.perf_counter() - t0, 1e-9))
        self.followed.add(step + 1)

    def gbps(self) -> float | None:
        nbytes = self.buffer.numel() * self.buffer.element_size()
        return nbytes * len(self.seconds) / sum(self.seconds) / 1e9 if self.seconds else None

    def after_read(self, step_seconds: list[float]) -> float | None:
        timed = range(self.warmup, len(step_seconds))
        after = [step_seconds[i] for i in timed if i in self.followed]
        other = [step_seconds[i] for i in timed if i not in self.followed]
        if not after or not other:
            return None
        return (sum(after) / len(after)) / (sum(other) / len(other))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def time_stock(net, pre, steps: int, warmup: int, after_step=None) -> dict:
    """Stock transformers decode (SDPA + DynamicCache holding ``pre``'s context): per step the forward of
    one token per sequence, the greedy pick and the mask update, as ``model.generate`` does them.
    after_step(i): called after step i (0-based) is timed, outside its time."""
    from transformers import DynamicCache

    from magicpig import attention as _attention

    device = next(net.parameters()).device
    previous = getattr(net.config, "_attn_implementation", None)
    net.set_attn_implementation("sdpa")
    try:
        t0 = time.perf_counter()
        cache = DynamicCache(config=net.config)
        for i, (k, v) in enumerate(zip(pre.keys, pre.values)):
            cache.update(k, v, i)  # DynamicLayer concatenates: the batch copies are made here
        B, n = pre.batch, pre.n
        cache_kw = "cache" if "cache" in inspect.signature(net.forward).parameters else "past_key_values"
        mask = torch.ones(B, n, dtype=torch.long, device=device)
        tokens = pre.logits.argmax(-1)[:, None]
        _sync(device)
        setup = time.perf_counter() - t0
        step_seconds = []
        for t in range(warmup + steps):
            t_step = time.perf_counter()
            mask = torch.cat([mask, mask.new_ones(B, 1)], dim=1)
            pos = torch.full((B, 1), n + t, dtype=torch.long, device=device)
            out = net(input_ids=tokens, attention_mask=mask, position_ids=pos, **{cache_kw: cache},
                      cache_position=torch.tensor([n + t], device=device), use_cache=True, logits_to_keep=1)
            tokens = out.logits[:, -1].argmax(-1)[:, None]
            _sync(device)
            step_seconds.append(time.perf_counter() - t_step)
            if after_step is not None:
                after_step(t)
        del cache, out
    finally:
        if previous == _attention.NAME:
            _attention.use_hook(net)
        elif previous:
            net.set_attn_implementation(previous)
    return {"step_seconds": step_seconds, "setup_seconds": setup, "sampled_fraction": 1.0, "timings": None,
            "linear": "torch", "forward": "transformers"}


def time_engine(net, tokenizer, pre, spec: str, backend: str, steps: int, warmup: int,
                offload_dtype: str | None = None, linear: str = "auto", forward: str = "auto",
                weights: str = WEIGHTS, after_step=None) -> dict:
    """Decode ``pre`` with ``Engine`` (backend ``reference`` / ``offload``) for warmup + steps forwards;
    linear / forward / weights: the engine's ``linear_impl`` / ``decode_forward`` / ``decode_weights``;
    after_step: ``Engine.decode``'s."""
    from magicpig.engine import Engine, GenerationConfig

    engine = Engine(net, tokenizer, backend=backend, allow_long_context=True, offload_dtype=offload_dtype,
                    linear_impl=linear, decode_forward=forward, decode_weights=weights)
    # n new tokens take n - 1 decode forwards (the first comes from the prefill's logits)
    res = engine.decode(pre, spec, GenerationConfig(max_new_tokens=warmup + steps + 1, ignore_eos=True),
                        after_step=after_step)[0]
    return {"step_seconds": res.step_seconds, "setup_seconds": res.setup_seconds, "sampled_fraction": res.cost,
            "timings": getattr(res, "timings", None), "linear": res.linear, "forward": res.forward}


def measure_stream_gbps() -> float:
    """This machine's streaming-read GB/s, measured as ``magicpig bench kernel`` does."""
    from magicpig.harness.bench import kernel

    return kernel.stream_read_gbps(torch.get_num_threads(), kernel.stream_bytes_for(kernel.llc_bytes()[0]))


class _Run:
    """One run's model, settings and rows: a row measured, refused, or searched for its largest batch."""

    def __init__(self, model, config, shape_only, device, dtype, steps, warmup, csv_path, verbose, offload_dtype,
                 linear, forward, weights, llamacpp_kv, diagnostics, malloc_policy):
        import transformers

        from magicpig import __version__
        from magicpig.models import resolve

        self.model, self.net, self.tokenizer = model, None, None
        self.device, self.steps, self.warmup, self.offload_dtype = device, steps, warmup, offload_dtype
        self.linear, self.forward, self.weights, self.diagnostics = linear, forward, weights, diagnostics
        self.llamacpp_kv = llamacpp_kv
        src = resolve(model, allow_shape=True)
        self.gguf_path = os.path.join(src.path, src.gguf_file) if src.gguf_file else None
        self.versions = {"stock": f"transformers {transformers.__version__}", "engine": f"magicpig {__version__}"}
        self.ids: dict[int, list[int]] = {}  # context -> the essay's tokens (llama.cpp rows prefill them)
        self.shape = ModelShape.of_config(config, dtype)
        self.stream_gbps = measure_stream_gbps() if device.type == "cpu" else None
        machine = machine_record(str(device), load_cpu_module=True)
        self.malloc_policy = malloc_policy  # memory.converge_allocator's record
        self.table = Table(csv_path, {
            "model": model, "shape_only": shape_only, "device": str(device), "device_name": device_name(device),
            **{k: machine[k] for k in ("threads", "isa", "cpu_model", "torch_version")},
            "malloc_policy": self.malloc_policy, "dtype": str(dtype).replace("torch.", ""), "steps": steps,
            "warmup": warmup, "offload_dtype": offload_dtype or "auto"}, diagnostics, verbose)
        self.stream_buffer = None  # --diagnostics: read between a CPU row's timed steps (StepBandwidth)
        if self.stream_gbps and diagnostics:
            from magicpig import cpu
            from magicpig.harness.bench import kernel

            nbytes = kernel.stream_bytes_for(kernel.llc_bytes()[0], IN_ROW_STREAM_MIN)
            self.stream_buffer = torch.ones(nbytes // 8, dtype=torch.int64)
            cpu.load().stream_read(self.stream_buffer, torch.get_num_threads())
        if self.stream_gbps:
            self.table.log(f"streaming read {self.stream_gbps:.1f} GB/s (bench kernel's method): the bytes-limit's "
                           "bandwidth")

    def estimate(self, spec, backend, n, batch, steps=None, warmup=None) -> dict:
        new = (self.steps if steps is None else steps) + (self.warmup if warmup is None else warmup)
        if backend == "llamacpp":
            host = (llamacpp.estimate_nbytes(self.gguf_path, self.shape, n, batch, new, self.llamacpp_kv)
                    if self.gguf_path else 0)
            elem = llamacpp.KV_ELEM_BYTES[self.llamacpp_kv]
            kv = self.shape.layers * n * batch * self.shape.kv_bytes_per_token_layer(elem)
            return {"device": 0, "host": host, "kv": int(kv), "tables": 0}
        return memory.estimate_row(self.shape, spec, backend, n, batch, new)

    def row_setup(self, backend: str) -> dict:
        """The columns that say how a row's decoder ran: weights' storage and the runtime's version."""
        if backend == "llamacpp":
            if "llamacpp" not in self.versions:
                self.llamacpp_reason = llamacpp.unavailable_reason(self.gguf_path)
                self.versions["llamacpp"] = "" if self.llamacpp_reason else llamacpp.version()
                self.llamacpp_weights = "gguf " + gguf_file_type(self.gguf_path) if self.gguf_path else ""
            return {"weights": self.llamacpp_weights, "runtime_version": self.versions["llamacpp"], "dtype": "",
                    "offload_dtype": self.llamacpp_kv}  # llama.cpp's KV cache, in host memory
        if backend == "stock":
            return {"weights": "model", "runtime_version": self.versions["stock"]}
        return {"weights": self.weights, "runtime_version": self.versions["engine"]}

    def measure(self, pre1, n, batch, spec, backend, fill, steps=None, warmup=None, search="") -> dict:
        """One row: estimate, then (if it fits) time it; an out-of-memory error becomes a fits=false row."""
        steps = self.steps if steps is None else steps
        warmup = self.warmup if warmup is None else warmup
        if backend == "llamacpp":
            fill = "exact"  # llama.cpp prefills the context itself
        est = self.estimate(spec, backend, n, batch, steps, warmup)
        row = self.table.row(n, batch, spec, backend, fill, est)
        row.update({"search": search, "steps": steps, "warmup": warmup, **self.row_setup(backend)})
        reason = self.llamacpp_reason if backend == "llamacpp" else None
        if reason:
            row.update({"fits": False, "reason": reason})
            return row
        reason = memory.fit_reason(est, self.device)
        if reason:
            row.update({"fits": False, "reason": "estimate: " + reason})
            return row
        trim = self.malloc_policy == "converged"
        memory.free_memory(trim)
        sampler = StepBandwidth(self.stream_buffer, torch.get_num_threads(), warmup) \
            if self.stream_buffer is not None else None
        out = None
        try:
            with RowMonitor(self.device, self.diagnostics) as mon:
                if backend == "llamacpp":
                    out = llamacpp.time_llamacpp(self.gguf_path, self.context_ids(n), batch, steps, warmup,
                                                 torch.get_num_threads(), self.llamacpp_kv)
                else:
                    pre = repeat_batch(pre1, batch)
                    if backend == "stock":
                        out = time_stock(self.net, pre, steps, warmup, sampler)
                    else:
                        out = time_engine(self.net, self.tokenizer, pre, spec, backend, steps, warmup,
                                          self.offload_dtype, self.linear, self.forward, weights=self.weights,
                                          after_step=sampler)
                    del pre
        except Exception as exc:  # noqa: BLE001 - only allocation failures are turned into rows
            if not memory.is_oom(exc):
                raise
            row.update({"fits": False, "reason": f"out of memory: {str(exc).splitlines()[0][:200]}"})
        memory.free_memory(trim)  # after the except clause: its traceback no longer holds the row's tensors
        if out is None:
            return row
        timed = out["step_seconds"][warmup:]
        total = sum(timed)
        row.update(mon.fields())
        row.update({"fits": True, "ms_per_token": round(1000 * total / max(1, len(timed)), 3),
                    "tokens_per_s": round(batch * len(timed) / total, 3) if total > 0 else math.inf,
                    "setup_seconds": round(out["setup_seconds"], 3),
                    "sampled_fraction": round(float(out["sampled_fraction"]), 5), "linear": out["linear"],
                    "forward": out["forward"]})
        if backend != "offload":
            row["table_bytes"] = 0
        if backend == "llamacpp":
            row.update(self.llamacpp_bytes_limit(row))
        else:
            if out["linear"] != "magicpig":
                row["weights"] = "model"  # kernel 4 did not run
            row.update(bytes_limit(self.model, row, self.stream_gbps))
        if self.diagnostics:
            if sampler is not None and sampler.seconds:  # the machine's bandwidth during this row
                after = sampler.after_read(out["step_seconds"])
                row.update({"stream_gbps_steps": round(sampler.gbps(), 2), "stream_samples": len(sampler.seconds),
                            "x_after_read": round(after, 3) if after is not None else ""})
            for key, secs in (out["timings"] or {}).items():
                if key != "setup":  # once per decode, not per step: setup_seconds
                    row[f"{key}_ms"] = round(1000 * secs / max(1, len(timed)), 3)
        return row

    def llamacpp_bytes_limit(self, row: dict) -> dict:
        """A llama.cpp row's bytes-limit: the GGUF's tensor data (every weight read once; an untied input
        embedding is counted too, so the limit is a little high for such models) and the KV cache."""
        from magicpig.models import gguf_data_extent

        if not self.stream_gbps:
            return {}
        nbytes = gguf_data_extent(self.gguf_path)[0] + int(row["kv_bytes"])
        limit_ms = 1000 * nbytes / (self.stream_gbps * 1e9)
        return {"bytes_per_step": nbytes, "stream_gbps": round(self.stream_gbps, 2),
                "bytes_limit_ms": round(limit_ms, 3), "x_bytes_limit": round(float(row["ms_per_token"]) / limit_ms, 3)}

    def context_ids(self, n: int) -> list[int]:
        """The first ``n`` tokens of the essay (random ids for a model without a tokenizer)."""
        if n not in self.ids:
            self.ids = {n: essay_tokens(self.tokenizer, n) if self.tokenizer is not None
                        else random_tokens(self.shape.vocab, n)}
        return self.ids[n]

    def refuse(self, n, batches, methods, fill, reason) -> None:
        """fits=false rows for every (batch, method) at context ``n``."""
        for b in batches:
            for spec, backend in methods:
                row = self.table.row(n, b, spec, backend, fill, self.estimate(spec, backend, n, b))
                row.update({"fits": False, "reason": reason, **self.row_setup(backend)})
                self.table.add(row)

    def max_batch(self, pre1, n, spec, backend, fill, limit: int) -> dict:
        """The largest batch <= ``limit`` that fits, measured with the full protocol. The estimate finds
        it (doubling, then bisection); the measurement at that batch is tried first, and only an actual
        OOM leads to short real probes (bisection downwards) and a measurement at the batch they find."""
        def est_fits(b: int) -> bool:
            return not memory.fit_reason(self.estimate(spec, backend, n, b), self.device)

        def label(b: int) -> str:
            return f"max-batch (capped at --max-batch {limit})" if b == limit else "max-batch"

        if not est_fits(1):
            return self.measure(pre1, n, 1, spec, backend, fill, search=label(1))
        lo = 1
        while lo * 2 <= limit and est_fits(lo * 2):
            lo *= 2
        hi = min(lo * 2, limit + 1)  # lo fits, hi does not (or is past the limit)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if est_fits(mid) else (lo, mid)
        row = self.measure(pre1, n, lo, spec, backend, fill, search=label(lo))
        if row["fits"] or lo == 1:
            return row
        self.table.log(f"max-batch: batch {lo} passed the estimate but failed ({row['reason']}); probing below")
        good, bad = 0, lo
        while bad - good > 1:
            probe = (good + bad) // 2
            if self.measure(pre1, n, probe, spec, backend, fill, steps=1, warmup=1)["fits"]:
                good = probe
            else:
                bad = probe
        return self.measure(pre1, n, max(good, 1), spec, backend, fill, search=label(max(good, 1)))


def _check(fill, steps, warmup, contexts, batches, tile_base, offload_dtype, max_batch, linear, forward, weights,
           llamacpp_kv) -> None:
    """Every argument of ``run``, checked before anything is loaded."""
    from magicpig.decode_forward import check_forward_impl
    from magicpig.decode_linear import check_linear_impl
    from magicpig.decode_weights import check_weight_format
    from magicpig.decoders import offload_dtype_of

    if fill not in FILLS:
        raise ValueError(f"fill must be one of {', '.join(FILLS)}, got {fill!r}")
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    if not contexts or any(c < 64 for c in contexts):
        raise ValueError(f"context lengths must be >= 64, got {list(contexts)}")
    if not batches or any(not isinstance(b, int) or b < 1 for b in batches):
        raise ValueError(f"batch sizes must be integers >= 1, got {list(batches)}")
    if tile_base < 64:
        raise ValueError(f"tile_base must be >= 64, got {tile_base}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    offload_dtype_of(offload_dtype)
    check_linear_impl(linear)
    check_forward_impl(forward)
    check_weight_format(weights)
    if llamacpp_kv not in llamacpp.KV_TYPES:
        raise ValueError(f"llamacpp_kv must be one of {', '.join(llamacpp.KV_TYPES)}, got {llamacpp_kv!r}")


def run(model: str = "smollm2", contexts=CONTEXTS, methods=METHODS, *, batches=BATCHES, steps: int = 128,
        warmup: int = 32, fill: str = "exact", tile_base: int = 8192, device: str | None = None,
        dtype: str | None = None, csv_path: str | None = None, prefill_chunk: int = 2048,
        max_throughput: bool = False, max_batch: int = 256, verbose: bool = True,
        offload_dtype: str | None = None, linear: str = "auto", forward: str = "auto", weights: str = WEIGHTS,
        llamacpp_kv: str = "f16", diagnostics: bool = False) -> list[dict]:
    """Time decoding for every (context, batch, method@backend); returns the rows (also appended to
    ``csv_path`` one at a time). methods: (spec, backend) pairs or ``SPEC[@BACKEND]`` strings. weights: kernel
    4's weight storage in the engine's rows; llamacpp_kv: llama.cpp's KV cache type. diagnostics:
    also the columns ``table.DIAGNOSTIC_COLUMNS`` (and, on the CPU, a streaming read between timed steps)."""
    from magicpig.engine import Engine
    from magicpig.models import load_model, resolve, shape_weight_bytes

    contexts, batches = tuple(contexts), tuple(batches)
    _check(fill, steps, warmup, contexts, batches, tile_base, offload_dtype, max_batch, linear, forward, weights,
           llamacpp_kv)
    methods = [parse_method_arg(m if isinstance(m, str) else str(SpecOnBackend(*m))) for m in methods]
    if not methods:
        raise ValueError("methods must not be empty")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: CUDA is not available on this machine")
    torch_dtype = resolve_dtype(dtype, device)
    src = resolve(model, allow_shape=True)
    if csv_path is None:
        csv_path = os.path.join("results", "bench", f"decode_{time.strftime('%Y%m%d-%H%M%S')}.csv")
    Table(csv_path, {}, diagnostics).start()  # a file of other columns is refused before the model loads
    settings = (steps, warmup, csv_path, verbose, offload_dtype, linear, forward, weights, llamacpp_kv, diagnostics,
                memory.converge_allocator())
    if src.shape is not None:  # a shape model whose weights cannot fit is refused before it is built
        bench = _Run(model, model_shape(src.shape).config(), True, dev, torch_dtype, *settings)
        need = shape_weight_bytes(src.shape, torch_dtype)
        reason = memory.fit_reason({"device": need}, dev)
        if reason:
            for n in contexts:
                bench.refuse(n, batches, methods, fill, f"estimate: the weights ({need / 1e9:.2f} GB) alone {reason}")
            if verbose:
                print(summary(bench.table.rows), flush=True)
            return bench.table.rows
    net, tokenizer = load_model(model, device=device, dtype=None if src.gguf_file and dtype in (None, "auto")
                                else torch_dtype, allow_shape=True)
    torch_dtype = next(net.parameters()).dtype
    if src.shape is None:
        bench = _Run(model, net.config, False, dev, torch_dtype, *settings)
    bench.net, bench.tokenizer = net, tokenizer
    common = bench.table.common
    bench.table.log(f"model {model}{' (shape-only: random weights)' if src.shape else ''} on {dev} "
                    f"({common['device_name']}), {common['dtype']}, {common['threads']} threads")
    base_prefill = None  # (base, Prefill) kept for tiling
    for n in contexts:
        base = n if fill == "exact" else min(n, tile_base)
        fill_label = "exact" if base == n else f"tile({base})"
        reason = memory.fit_reason(memory.estimate_prefill(bench.shape, base, n, prefill_chunk), dev)
        if reason:
            bench.refuse(n, batches, methods, fill_label, f"estimate: the prefilled context {reason}")
            continue
        try:
            if base_prefill is None or base_prefill[0] != base:
                base_prefill = None
                memory.free_memory()
                ids = (essay_tokens(tokenizer, base) if tokenizer is not None
                       else random_tokens(bench.shape.vocab, base))
                t0 = time.perf_counter()
                base_prefill = (base, Engine(net, tokenizer, prefill_chunk=prefill_chunk,
                                             allow_long_context=True).prefill(ids))
                bench.table.log(f"prefilled {base} tokens in {time.perf_counter() - t0:.1f} s")
            pre1 = base_prefill[1] if base == n else tile_prefill(base_prefill[1], n)
        except Exception as exc:  # noqa: BLE001
            if not memory.is_oom(exc):
                raise
            base_prefill = None
            memory.free_memory()
            bench.refuse(n, batches, methods, fill_label, f"out of memory in the prefill: {str(exc)[:200]}")
            continue
        for b in batches:
            for spec, backend in methods:
                bench.table.add(bench.measure(pre1, n, b, spec, backend, fill_label))
        if max_throughput:
            for spec, backend in methods:
                bench.table.add(bench.max_batch(pre1, n, spec, backend, fill_label, max_batch))
        del pre1
        if fill == "exact":
            base_prefill = None
        memory.free_memory()
    if verbose:
        print(summary(bench.table.rows), flush=True)
        bench.table.log(f"wrote {csv_path}")
    return bench.table.rows
