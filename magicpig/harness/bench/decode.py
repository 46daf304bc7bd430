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
batch that fits per method (the paper's Table 7). This module runs the grid; the options are ``decode_options``,
a row measured, refused or searched ``decode_rows``, its timed decode ``timed_decode``, what it records besides
time ``row_monitor``. The rows and their columns: ``table``; how to read them: docs/benchmarking.md.
"""
from __future__ import annotations

import os
import time

import torch

from magicpig.backends import SpecOnBackend
from magicpig.harness.bench import memory
from magicpig.harness.bench.decode_options import (BATCHES, CONTEXTS, METHODS, WEIGHTS, check_options,
                                                   parse_method_arg, resolve_dtype)
from magicpig.harness.bench.decode_rows import DecodeRun
from magicpig.harness.bench.prompts import essay_tokens, random_tokens, tile_prefill
from magicpig.harness.bench.table import Table, summary
from magicpig.shapes import model_shape


def run(model: str = "smollm2", contexts=CONTEXTS, methods=METHODS, *, batches=BATCHES, steps: int = 128,
        warmup: int = 32, fill: str = "exact", tile_base: int = 8192, device: str | None = None,
        dtype: str | None = None, csv_path: str | None = None, prefill_chunk: int = 2048,
        max_throughput: bool = False, max_batch: int = 256, verbose: bool = True,
        offload_dtype: str | None = None, linear: str = "auto", forward: str = "auto", weights: str = WEIGHTS,
        llamacpp_kv: str = "f16", llamacpp_state_dir: str | None = None, diagnostics: bool = False) -> list[dict]:
    """Time decoding for every (context, batch, method@backend); returns the rows (also appended to
    ``csv_path`` one at a time). methods: (spec, backend) pairs or ``SPEC[@BACKEND]`` strings. weights: kernel
    4's weight storage in the engine's rows; llamacpp_kv: llama.cpp's KV cache type; llamacpp_state_dir: a folder
    keeping llama.cpp's prefills for later runs (``llamacpp``). diagnostics:
    also the columns ``table.DIAGNOSTIC_COLUMNS`` (and, on the CPU, a streaming read between timed steps)."""
    from magicpig.engine import Engine
    from magicpig.models import load_model, resolve, shape_weight_bytes

    contexts, batches = tuple(contexts), tuple(batches)
    check_options(fill, steps, warmup, contexts, batches, tile_base, offload_dtype, max_batch, linear, forward,
                  weights, llamacpp_kv, llamacpp_state_dir)
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
    settings = (steps, warmup, csv_path, verbose, offload_dtype, linear, forward, weights, llamacpp_kv,
                llamacpp_state_dir, diagnostics, memory.converge_allocator())
    if src.shape is not None:  # a shape model whose weights cannot fit is refused before it is built
        bench = DecodeRun(model, model_shape(src.shape).config(), True, dev, torch_dtype, *settings)
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
        bench = DecodeRun(model, net.config, False, dev, torch_dtype, *settings)
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
