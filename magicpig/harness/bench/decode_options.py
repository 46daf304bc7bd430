"""The options of ``magicpig bench decode`` and their defaults: the grid (contexts, batches, ``SPEC[@BACKEND]``
methods), the fill, the dtype and the decoders' settings, each checked before anything is loaded."""
from __future__ import annotations

import torch

from magicpig.backends import BASELINE_BACKENDS, BENCH_BACKENDS, parse_spec_at_backend, system_backend
from magicpig.harness.bench import llamacpp

CONTEXTS = (8192, 32768)
BATCHES = (1,)
METHODS = (("dense", "stock"), ("dense", "reference"), ("magicpig:K=10,L=150", "offload"))
BACKENDS = BENCH_BACKENDS  # stock transformers, llama.cpp + the engine's (magicpig.backends)
WEIGHTS = "q8_0"  # kernel 4's weight storage in the engine's rows (docs/benchmarking.md: why)
FILLS = ("exact", "tile")
DTYPES = ("auto", "float32", "bfloat16", "float16")


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


def resolve_dtype(name: str | None, device: str):
    """``auto`` -> float32 on the CPU, bfloat16 on CUDA; else the named torch dtype."""
    if name in (None, "auto"):
        return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return getattr(torch, name)


def check_options(fill, steps, warmup, contexts, batches, tile_base, offload_dtype, max_batch, linear, forward, weights,
                  llamacpp_kv, llamacpp_state_dir=None) -> None:
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
    llamacpp.check_state_dir(llamacpp_state_dir)
