"""One ``bench decode`` run's rows: a row estimated, checked against the memory and measured
(``DecodeRun.measure``), refused, or searched for its largest batch (``DecodeRun.max_batch``)."""
from __future__ import annotations

import math
import os

import torch

from magicpig.gguf_header import gguf_data_extent, gguf_file_type
from magicpig.harness.bench import llamacpp, memory, timed_decode
from magicpig.harness.bench.prompts import essay_tokens, random_tokens, repeat_batch
from magicpig.harness.bench.row_monitor import RowMonitor, StepBandwidth, in_row_stream_buffer, measure_stream_gbps
from magicpig.harness.bench.table import Table, bytes_limit
from magicpig.harness.machine import device_name, machine_record
from magicpig.shapes import ModelShape


class DecodeRun:
    """One run's model, settings and rows: a row measured, refused, or searched for its largest batch."""

    def __init__(self, model, config, shape_only, device, dtype, steps, warmup, csv_path, verbose, offload_dtype,
                 linear, forward, weights, llamacpp_kv, llamacpp_state_dir, diagnostics, malloc_policy):
        import transformers

        from magicpig import __version__
        from magicpig.models import resolve

        self.model, self.net, self.tokenizer = model, None, None
        self.device, self.steps, self.warmup, self.offload_dtype = device, steps, warmup, offload_dtype
        self.linear, self.forward, self.weights, self.diagnostics = linear, forward, weights, diagnostics
        self.llamacpp_kv, self.llamacpp_state_dir = llamacpp_kv, llamacpp_state_dir
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
            self.stream_buffer = in_row_stream_buffer()
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
                                                 torch.get_num_threads(), self.llamacpp_kv, self.llamacpp_state_dir)
                    if out["prefill"] == "restored":
                        self.table.log(f"llama.cpp: context {n}, batch {batch}: the prefill restored from "
                                       f"{self.llamacpp_state_dir}")
                else:
                    pre = repeat_batch(pre1, batch)
                    if backend == "stock":
                        out = timed_decode.time_stock(self.net, pre, steps, warmup, sampler)
                    else:
                        out = timed_decode.time_engine(self.net, self.tokenizer, pre, spec, backend, steps,
                                                       warmup, self.offload_dtype, self.linear, self.forward,
                                                       weights=self.weights, after_step=sampler)
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
