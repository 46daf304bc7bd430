"""Kernel 0: SimHash codes of centred key (or query) rows, and the projection layout it reads."""
from __future__ import annotations

import torch

from magicpig.cpu import extension
from magicpig.cpu.env import ISA_CODES, isa, num_threads, resolve_isa

HASH_PAD = 32  # kernel 0's column tile (kHashTile in csrc/magicpig_cpu.h; tile_projections)


def check_batch(t: torch.Tensor, name: str) -> tuple[int, ...]:
    """``t``'s shape; ValueError naming ``name`` when it has no batch dim or B = 0 (which must never reach
    the compiled kernels)."""
    if not isinstance(t, torch.Tensor) or t.dim() < 1 or t.shape[0] == 0:
        raise ValueError(f"{name}: batch B must be >= 1, got shape {tuple(getattr(t, 'shape', ()))}")
    return tuple(t.shape)


def hash_keys(keys: torch.Tensor, center: torch.Tensor | None, projections: torch.Tensor, K: int, L: int,
              lo: torch.Tensor | None = None, count: torch.Tensor | None = None, m: int | None = None,
              gpu: bool = False, table_major: bool = False, isa_name: str | None = None,
              threads: int | None = None) -> torch.Tensor:
    """SimHash codes of centred rows in one pass (``lsh.hash_codes(keys - center, projections)``,
    without the (rows, K*L) float projections in memory).

    keys: (B, H_kv, n, d) CPU float32; center: (B, H_kv, d) float32 or None (no centering);
    projections: (S, d, P >= K*L), S = H_kv or 1, tiled here, or already tiled by ``tile_projections``
    (S, P / 32, d, 32); lo, count: (B,) int64, the rows lo[b] .. lo[b] + count[b]
    of sequence b (default: all n rows); m: rows of the result (default max count). Returns int32 codes
    (B, H_kv, m, L), row r of sequence b at [b, :, r], or (B, H_kv, L, m) with ``table_major`` (the layout
    the table build reads fastest); rows >= count[b] are 0. A code can differ from
    the torch reference only where a projection is within rounding of 0 (the sums run in another order).
    isa_name / threads: the variant and threads to run (default: ``isa()`` and ``num_threads(gpu)``).
    """
    B, Hkv, n, d = check_batch(keys, "keys")
    if lo is None:
        lo = torch.zeros(B, dtype=torch.int64)
    if count is None:
        count = torch.full((B,), n, dtype=torch.int64)
    lo, count = lo.to("cpu", torch.int64).contiguous(), count.to("cpu", torch.int64).contiguous()
    if m is None:
        m = int(count.max()) if B else 0
    if center is None:
        center = torch.zeros(B, Hkv, d)
    return extension.load().hash_keys(keys.contiguous(), center.to("cpu", torch.float32).contiguous(),
                                      projections if projections.dim() == 4 else tile_projections(projections),
                                      lo, count, int(m), K, L,
                                      table_major, ISA_CODES[resolve_isa(isa_name) if isa_name else isa()],
                                      int(threads) if threads else num_threads(gpu))


def tile_projections(projections: torch.Tensor) -> torch.Tensor:
    """(S, d, K*L) -> (S, P / 32, d, 32) float32 CPU, the layout kernel 0 reads: the columns padded with
    zeros to P, a multiple of 32, and each tile of 32 columns stored as one contiguous (d, 32) block, so
    that hashing reads the projections in memory order (a decoder tiles once, not at every step)."""
    S, d, KL = projections.shape
    P = -(-KL // HASH_PAD) * HASH_PAD
    out = torch.zeros(S, d, P)
    out[:, :, :KL] = projections.to("cpu", torch.float32)
    return out.view(S, d, P // HASH_PAD, HASH_PAD).transpose(1, 2).contiguous()


def shared_tiled_projections(projections: torch.Tensor, pool: list | None = None) -> torch.Tensor:
    """``tile_projections(projections)``, shared with the earlier layers in ``pool`` (a list of
    (projections, tiled) pairs shared by the layers of one cache) that use equal projections: MagicPIG
    draws one set per block of 16 layers, so each step then reads one tiled copy from the cache instead
    of one ~1 MB copy per layer from memory."""
    for proj, tiled in pool if pool is not None else ():
        if proj.shape == projections.shape and torch.equal(proj, projections):
            return tiled
    tiled = tile_projections(projections)
    if pool is not None:
        pool.append((projections, tiled))
    return tiled
