"""What a decode-benchmark row will hold, checked before anything is allocated, and the host allocator the
rows run under.

``estimate_row`` asks each decoder class what one layer holds (``estimate_nbytes`` beside the code that
allocates; ``magicpig.cpu.estimate_nbytes`` for the CPU layer); ``fit_reason`` compares the sum with
``MEMORY_MARGIN`` of the free memory. A row that would not fit is written with ``fits=false`` and the
numbers, never attempted; a real out-of-memory error (``is_oom``) gives the same kind of row.

Allocator: glibc's malloc raises its mmap threshold each time it frees a large mapped chunk, so the rule a
row meets would depend on the rows before it in the process. ``converge_allocator`` fixes the thresholds
where glibc's own rule settles (mmap 32 MiB, trim 64 MiB) and ``free_memory(trim=True)`` hands the free heap
back before and after each row.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import platform

import torch

from magicpig.shapes import ModelShape

MEMORY_MARGIN = 0.9  # a row may use at most this share of the available memory
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 * 2**20  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the most mallopt accepts
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc pairs with it when it adjusts


def estimate_prefill(shape: ModelShape, base: int, n: int, chunk: int) -> dict[str, int]:
    """Device bytes to prefill ``base`` tokens exactly (batch 1) and tile the cache to ``n`` keys."""
    from magicpig.attention import PREFILL_BLOCK

    chunk = min(chunk, base)
    acts = chunk * (6 * shape.hidden + 3 * shape.intermediate) * shape.elem
    scores = min(PREFILL_BLOCK, chunk) * base * shape.heads * 4  # the math SDPA path's score block
    layer_cat = shape.kv_bytes(base, layers=1)  # DynamicLayer's cat: one layer's old + new copy
    tiled = shape.kv_bytes(n) + shape.kv_bytes(n, layers=1) if n > base else 0
    return {"device": shape.kv_bytes(base) + acts + scores + layer_cat + tiled + shape.vocab * 4}


def estimate_row(shape: ModelShape, spec: str, backend: str, n: int, batch: int, steps: int) -> dict[str, int]:
    """Bytes a row of ``steps`` decode steps allocates on top of the model and the batch-1 prefill at ``n`` keys.

    Returns {"device", "host", "kv", "tables"}: device = on the model's device, host = in CPU memory beyond
    the device part (on a CPU-only run both are host memory). Every layer's resident bytes, plus the largest
    one-layer temporaries of its decoders, plus a step's activations, float32 scores and a float32 copy of
    one layer's cache. Deliberately generous: a row refused by the estimate is cheaper than a killed run."""
    from magicpig import cpu
    from magicpig.decoders import ExactDecoder, OffloadDecoder, ReferenceDecoder
    from magicpig.methods import MagicPIG, parse_method
    from magicpig.methods.exact import Dense

    method = parse_method(spec)
    B, kv_heads, d, elem = batch, shape.kv_heads, shape.head_dim, shape.elem
    new = steps + 1  # the engine's first token comes from the prefill; each step appends one key
    grow = n + new + 64
    step = (B * (shape.vocab * 4 + 8 * shape.hidden * 4 + 3 * shape.intermediate * shape.elem)  # activations
            + 2 * B * shape.heads * grow * 4)  # float32 logits and probabilities of one layer
    kv = shape.kv_bytes(n, B)
    if backend == "stock":  # DynamicCache: every layer's cache, and one layer's concatenated copy
        return {"device": shape.kv_bytes(grow, B) + shape.kv_bytes(grow, B, layers=1) + step, "host": 0,
                "kv": kv, "tables": 0}
    step += 2 * B * kv_heads * grow * d * 4  # the engine's attention: a float32 copy of one layer's cache
    dense = method.dense_layer_set(shape.layers) if hasattr(method, "dense_layer_set") else set(range(shape.layers))
    n_sparse = shape.layers - len(dense)
    if backend == "reference" or not isinstance(method, MagicPIG):
        kinds = [(ReferenceDecoder.estimate_nbytes(Dense(), B, kv_heads, n, d, elem, new), len(dense)),
                 (ReferenceDecoder.estimate_nbytes(method, B, kv_heads, n, d, elem, new), n_sparse)]
    else:
        store = torch.float32 if elem == 4 else torch.bfloat16
        kinds = [(ExactDecoder.estimate_nbytes(B, kv_heads, n, d, elem, new), len(dense)),
                 (OffloadDecoder.estimate_nbytes(method, B, shape.heads, kv_heads, n, d, elem, new, store,
                                                 cpu.estimate_nbytes), n_sparse)]
    total = {key: sum(est[key] * layers for est, layers in kinds) for key in ("device", "host", "tables")}
    return {"device": total["device"] + max(est["once_device"] for est, _ in kinds) + step,
            "host": total["host"] + max(est["once_host"] for est, _ in kinds), "kv": kv, "tables": total["tables"]}


def available_memory(device: torch.device) -> dict[str, int]:
    """{"host": bytes psutil reports available, "device": free + allocator-cached bytes on CUDA}."""
    import psutil

    free = {"host": int(psutil.virtual_memory().available)}
    if device.type == "cuda":
        dev_free, _ = torch.cuda.mem_get_info(device)
        free["device"] = int(dev_free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    return free


def fit_reason(need: dict[str, int], device: torch.device, free: dict[str, int] | None = None) -> str:
    """'' when ``need`` fits in ``MEMORY_MARGIN`` of the free memory, else the numbers that do not."""
    free = free or available_memory(device)
    host_need = need.get("host", 0) + (need.get("device", 0) if device.type == "cpu" else 0)
    problems = []
    if host_need > MEMORY_MARGIN * free["host"]:
        problems.append(f"needs {host_need / 1e9:.2f} GB of host memory, {free['host'] / 1e9:.2f} GB available")
    if device.type != "cpu" and need.get("device", 0) > MEMORY_MARGIN * free.get("device", 0):
        problems.append(f"needs {need['device'] / 1e9:.2f} GB of {device.type} memory, "
                        f"{free.get('device', 0) / 1e9:.2f} GB free")
    return "; ".join(problems)


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure (device OOM, the CPU allocator, the CPU module's check)."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


@functools.lru_cache(maxsize=1)
def _libc():
    """glibc's handle, or None on another C library."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def converge_allocator() -> str:
    """Fix glibc's mmap / trim thresholds for the rest of the process (module docstring); returns what a row
    records: ``converged``, or ``default (not glibc)``. RuntimeError when glibc refuses a threshold."""
    libc = _libc()
    if libc is None:
        return "default (not glibc)"
    for option, value in ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        if libc.mallopt(ctypes.c_int(option), ctypes.c_int(value)) != 1:
            raise RuntimeError(f"mallopt({option}, {value}) was refused by this glibc")
    return "converged"


def free_memory(trim: bool = False) -> None:
    """Collect garbage and empty the CUDA cache; with ``trim``, hand the free heap back to the OS (glibc's
    malloc_trim)."""
    gc.collect()
    if trim and _libc() is not None:
        _libc().malloc_trim(ctypes.c_size_t(0))
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
