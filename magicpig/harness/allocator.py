"""The host allocator policy a CPU benchmark runs under.

glibc's malloc serves a request above its mmap threshold with fresh pages from the OS, and raises that
threshold (up to 32 MiB on 64-bit, with the trim threshold at twice it) each time it frees a mapped chunk
larger than the current one. So the threshold a row runs under depends on every allocation made before it
in the process: the same decode step of the torch reference measured 205-330 ms across our runs at 32K,
and 211-238 ms against 260-282 ms in one process with the thresholds fixed small or large.

Policy ``converged`` fixes the thresholds where glibc's own rule ends up once the process has freed a
chunk of 32 MiB (every benchmark run frees far larger ones in its prefill): mmap at 32 MiB, trim at
64 MiB. Fixing them turns glibc's adjustment off, so every row meets the same rule: an allocation above
32 MiB faults in fresh pages, one below reuses the heap (``projection.MMAP_THRESHOLD_MAX`` models this).
``release()`` between rows hands the free heap back to the OS, so each row starts from a trimmed heap.
Policy ``default`` leaves glibc's adaptive behaviour as a user's process has it. Neither applies off
glibc (the record says so).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

POLICIES = ("converged", "default")
DEFAULT_POLICY = "converged"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
CONVERGED_MMAP_THRESHOLD = 32 * 2**20  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the most mallopt accepts
CONVERGED_TRIM_THRESHOLD = 2 * CONVERGED_MMAP_THRESHOLD  # what glibc pairs with it when it adjusts


@functools.lru_cache(maxsize=1)
def _libc():
    """glibc's handle, or None on another C library."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def check_policy(policy: str, field: str = "malloc") -> str:
    if policy not in POLICIES:
        raise ValueError(f"{field} must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy


def apply(policy: str) -> str:
    """Set ``policy`` for this process; returns what a result records (``converged``, ``default``, or
    ``default (not glibc)``). RuntimeError when glibc refuses a threshold."""
    check_policy(policy)
    libc = _libc()
    if libc is None:
        return "default (not glibc)"
    if policy == "converged":
        for option, value in ((M_MMAP_THRESHOLD, CONVERGED_MMAP_THRESHOLD),
                              (M_TRIM_THRESHOLD, CONVERGED_TRIM_THRESHOLD)):
            if libc.mallopt(ctypes.c_int(option), ctypes.c_int(value)) != 1:
                raise RuntimeError(f"mallopt({option}, {value}) was refused by this glibc")
    return policy


def release() -> None:
    """Return the free part of the heap to the OS (glibc's malloc_trim; nothing elsewhere). The benchmark
    calls it between rows under ``converged`` only."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(ctypes.c_size_t(0))
