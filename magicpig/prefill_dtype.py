"""The prefill's compute dtype: ``float32`` (the reference) or ``bfloat16`` (autocast), and ``auto``'s choice.

``bfloat16`` runs the prefill's matrix products (linear layers, SDPA) under ``torch.autocast`` in bfloat16;
norms, the residual stream and softmax statistics stay in float32 as autocast leaves them, and the keys and
values handed to decode are cast back to the model's dtype (``Engine.prefill``), so decode reads the same
dtype whatever the prefill ran in. ``float32`` runs no autocast: the model's own dtype (float32 wherever
``magicpig.models.load_model`` loads float32: on the CPU and for GGUF files).

``auto`` picks ``bfloat16`` only on a CPU whose flags say it multiplies bfloat16 natively (AVX512-BF16 or
AMX-BF16, read from /proc/cpuinfo at run time); ``float32`` everywhere else. Torch-free, so CLI parsers can
take their ``choices=`` from here.
"""
from __future__ import annotations

import functools
from pathlib import Path

PREFILL_DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16")
DEFAULT_PREFILL_DTYPE = "auto"
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bfloat16 dot products
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: str) -> set[str]:
    """The flags of the first processor listed in a /proc/cpuinfo text (x86 ``flags``, ARM ``Features``)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


@functools.lru_cache(maxsize=1)
def cpu_has_bf16() -> bool:
    """Whether this machine's CPU has native bfloat16 dot products (``BF16_CPU_FLAGS``); False when
    /proc/cpuinfo cannot be read (not Linux)."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(cpu_flags(text) & set(BF16_CPU_FLAGS))


def check_prefill_dtype(value: str, field: str = "prefill_dtype") -> str:
    """``value`` if it is one of PREFILL_DTYPES, else ValueError naming ``field`` and the allowed values."""
    if value not in PREFILL_DTYPES:
        raise ValueError(f"{field} must be one of {', '.join(PREFILL_DTYPES)}, got {value!r}")
    return value


def resolve_prefill_dtype(value: str, device_type: str, field: str = "prefill_dtype") -> str:
    """The concrete prefill dtype (``float32`` or ``bfloat16``) that ``value`` names on a device of type
    ``device_type`` (``"cpu"``, ``"cuda"``): ``auto`` -> ``bfloat16`` on a CPU with ``cpu_has_bf16()``,
    else ``float32``."""
    check_prefill_dtype(value, field)
    if value != "auto":
        return value
    return "bfloat16" if device_type == "cpu" and cpu_has_bf16() else "float32"


def prefill_autocast(dtype: str, device_type: str):
    """The context the prefill's forwards run in: autocast to bfloat16 for ``bfloat16``, else none."""
    import contextlib

    import torch

    if dtype == "bfloat16":
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
