"""The CPU module's environment settings, read and checked without building or loading the module, so a
command refuses a bad value before it loads a model:

    MAGICPIG_THREADS  OpenMP threads of the kernels: an integer in [1, MAX_THREADS], or unset (the default)
    MAGICPIG_ISA      attention variant: auto (default), scalar, avx2 or avx512; whether this CPU supports
                      it is ``magicpig.cpu.resolve_isa``'s check (that one needs the module)

and the machine's physical core count (the default thread plan beside a GPU).
"""
from __future__ import annotations

import functools
import os

THREADS_ENV = "MAGICPIG_THREADS"
ISA_ENV = "MAGICPIG_ISA"
ISA_NAMES = ("scalar", "avx2", "avx512")
MAX_MIN_COLLISIONS = 255  # per-token collision counters of the module are 8-bit (here: readable without torch)
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
