"""A layer's correction table and the bytes its state holds, checked against the free RAM before allocating."""
from __future__ import annotations

import functools

import torch

from magicpig import lsh

TABLE_INTERVALS = 8192  # correction -ln(u + 1e-4) is interpolated on this many intervals of the cosine...
TABLE_LIMIT = 1.0 - 1.0 / 32  # ...for |cos| <= TABLE_LIMIT (interpolation error < 1e-5); exact beyond


class InsufficientMemoryError(ValueError, MemoryError):
    """A configuration that would not fit in the available RAM (raised before allocating)."""


@functools.lru_cache(maxsize=64)
def correction_table(K: int, L: int, min_collisions: int) -> torch.Tensor:
    """-ln(u(c) + 1e-4) at c = -1 + 2 i / TABLE_INTERVALS, float32 (TABLE_INTERVALS + 1,), computed with
    magicpig.lsh in float64 (the same formula as the torch reference)."""
    c = torch.linspace(-1.0, 1.0, TABLE_INTERVALS + 1, dtype=torch.float64)
    u = lsh.collision_probability(c, K, L, min_collisions)
    return lsh.importance_log_weight(u).float().contiguous()


def table_nbytes(B: int, Hkv: int, n_max: int, K: int, L: int) -> int:
    """Bytes of one layer's hash tables: CSR offsets plus 16-bit (n_max <= 65536) or 32-bit token ids."""
    id_bytes = 2 if n_max <= 65536 else 4
    return B * Hkv * L * (((1 << K) + 1) * 4 + n_max * id_bytes)


def estimate_nbytes(B: int, Hkv: int, n_max: int, d: int, K: int, L: int,
                    dtype: torch.dtype = torch.bfloat16) -> dict[str, int]:
    """Bytes an OffloadedLayer of this shape holds: {"tables", "keys", "values", "total"}."""
    kv = B * Hkv * n_max * d * torch.empty((), dtype=dtype).element_size()
    sizes = {"tables": table_nbytes(B, Hkv, n_max, K, L), "keys": kv, "values": kv}
    sizes["total"] = sum(sizes.values())
    return sizes


def check_fits(new_bytes: int, what: str, margin: float = 0.9) -> None:
    """Raise InsufficientMemoryError if allocating ``new_bytes`` more would exceed ``margin`` of the
    RAM psutil reports as available."""
    import psutil

    available_bytes = psutil.virtual_memory().available
    if new_bytes > margin * available_bytes:
        raise InsufficientMemoryError(
            f"{what} needs {new_bytes / 2**30:.2f} GiB ({new_bytes} bytes) but only "
            f"{available_bytes / 2**30:.2f} GiB ({available_bytes} bytes) of RAM is available")
