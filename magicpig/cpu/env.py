"""Which kernel variant runs, on how many threads: the environment settings and what they resolve to here.

    MAGICPIG_THREADS  OpenMP threads of the kernels: an integer in [1, MAX_THREADS], or unset (the default)
    MAGICPIG_ISA      attention variant: auto (default), scalar, avx2 or avx512

``check_env`` reads and checks both without building or loading the module, so a command refuses a bad
value before it loads a model; whether this CPU supports the variant is ``resolve_isa``'s check, which
asks the module (``cpu_supports``). The kernels have scalar, AVX2+FMA and AVX-512 variants in one
binary; ``auto`` picks the best this CPU runs.
"""
from __future__ import annotations

import functools
import os

import torch

from magicpig.cpu import extension

THREADS_ENV = "MAGICPIG_THREADS"
ISA_ENV = "MAGICPIG_ISA"
ISA_NAMES = ("scalar", "avx2", "avx512")
ISA_CODES = {"scalar": 0, "avx2": 1, "avx512": 2}  # the variant argument of the module's kernels
MAX_MIN_COLLISIONS = 255  # per-token collision counters of the module are 8-bit
MAX_THREADS = 1024  # OpenMP teams far past any core count only add start-up cost (and memory per thread)


def env_threads() -> int | None:
    """``$MAGICPIG_THREADS`` as an int, None when unset or blank; ValueError naming it otherwise."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_THREADS:
        raise ValueError(f"{THREADS_ENV} must be an integer in [1, {MAX_THREADS}] (CPU threads of the MagicPIG "
                         f"kernels), or unset for the default; got {text!r}")
    return int(text)


def isa_name(want: str | None) -> str:
    """A variant name as given (``auto``/None/blank = auto), lower-cased; ValueError for an unknown one."""
    want = (want or "auto").strip().lower() or "auto"
    if want != "auto" and want not in ISA_NAMES:
        raise ValueError(f"{ISA_ENV} must be one of auto, {', '.join(ISA_NAMES)}; got {want!r}")
    return want


def check_env() -> None:
    """Raise ValueError for a bad ``MAGICPIG_THREADS`` or ``MAGICPIG_ISA`` (module docstring)."""
    env_threads()
    isa_name(os.environ.get(ISA_ENV, "auto"))


@functools.lru_cache(maxsize=1)
def physical_cores() -> int:
    """Physical CPU cores (psutil; os.cpu_count() when psutil cannot tell)."""
    try:
        import psutil

        cores = psutil.cpu_count(logical=False)
    except Exception:  # pragma: no cover - psutil is a dependency; keep a fallback anyway
        cores = None
    return int(cores or os.cpu_count() or 1)


def supported_isas() -> list[str]:
    """Instruction-set variants this CPU can run, best first."""
    mod = extension.load()
    return [name for name in ("avx512", "avx2", "scalar") if mod.cpu_supports(ISA_CODES[name])]


def isa() -> str:
    """The attention variant in use: ``$MAGICPIG_ISA`` if set (and supported), else the best supported."""
    return resolve_isa(os.environ.get(ISA_ENV, "auto"))


def resolve_isa(want: str | None) -> str:
    """A variant name (``auto``/None = the best supported) -> the variant to run; ValueError for an unknown
    name, RuntimeError for one this CPU lacks (instead of an Illegal instruction later)."""
    want = isa_name(want)
    supported = supported_isas()
    if want == "auto":
        return supported[0]
    if want not in supported:
        raise RuntimeError(f"{ISA_ENV}={want} but this CPU supports only {', '.join(supported)}")
    return want


def num_threads(gpu: bool = False) -> int:
    """OpenMP threads of the kernels: ``$MAGICPIG_THREADS`` when set (a positive integer); otherwise,
    when a GPU drives the model (``gpu``), the physical cores minus one (one core keeps feeding the GPU),
    else torch's intra-op setting (all cores by default; follows ``OMP_NUM_THREADS``)."""
    threads = env_threads()
    if threads is not None:
        return threads
    if gpu:
        return max(1, physical_cores() - 1)
    return max(1, torch.get_num_threads())


def plan_threads(threads, gpu: bool) -> int:
    """``threads`` checked (a positive integer), or ``num_threads(gpu)`` when None."""
    if threads is None:
        return num_threads(gpu)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    return threads
