"""One layer's CPU-side state, ``OffloadedLayer``: the offloaded keys and values of B sequences, their hash
tables, and the kernels a decode step runs over them (retrieval, attention, the one-call decode step), with
kernel 5 (exact attention) for the decoders' static parts.

Plan and run: building a layer (``build`` / ``from_prefill``) fixes everything a step needs: the ISA
variant (``$MAGICPIG_ISA``), the thread count (``$MAGICPIG_THREADS``) and the correction table of its
``min_collisions``; ``attend`` reads no environment variable and builds no table (an env change reaches
the layers built after it; ``with_threads`` re-plans a layer's threads).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import torch

from magicpig import lsh
from magicpig.cpu import extension
from magicpig.cpu.env import ISA_CODES, MAX_MIN_COLLISIONS, isa, num_threads, plan_threads, resolve_isa
from magicpig.cpu.hashing import check_batch, hash_keys, shared_tiled_projections
from magicpig.cpu.tables import TABLE_LIMIT, check_fits, correction_table, estimate_nbytes

PREFETCH = 16  # tokens ahead whose key/value rows the attention kernel prefetches
SPLIT_TOKENS = 16384  # token range of one attention work item (several items per group balance the threads)
HASH_BLOCK = 8192  # key rows per block when hashing on a device with torch (bounds rows x K*L floats)


def _check_codes(codes: torch.Tensor, name: str, shape: tuple, K: int) -> torch.Tensor:
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.int32:
        raise ValueError(f"{name} must be an int32 tensor, got {getattr(codes, 'dtype', type(codes))}")
    if tuple(codes.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(codes.shape)}")
    return codes.detach().cpu().contiguous()


def check_min_collisions(min_collisions, L: int) -> int:
    """``min_collisions`` checked: an integer in [1, min(L, MAX_MIN_COLLISIONS)] (the 8-bit counters)."""
    if (isinstance(min_collisions, bool) or not isinstance(min_collisions, int)
            or not 1 <= min_collisions <= min(L, MAX_MIN_COLLISIONS)):
        raise ValueError(f"min_collisions must be an integer in [1, {min(L, MAX_MIN_COLLISIONS)}], "
                         f"got {min_collisions!r}")
    return min_collisions


@dataclass
class OffloadedLayer:
    """One layer's CPU-side state for B sequences: centered offloaded keys / values and the L hash tables
    of each (sequence, kv-head), with the plan of its decode steps.

    kv: (B, H_kv, n_max, 2, d) float32 or bfloat16, each token's key row followed by its value row (one
    contiguous block per token, backed by transparent huge pages where the OS allows: the kernels gather
    random tokens); ``keys`` / ``values`` are views of it. counts: (B,) int64 valid rows; offsets:
    (B, H_kv, L, 2^K + 1) int32 CSR bucket bounds; ids: (B, H_kv, L, n_max) int16 (read as uint16,
    n_max <= 65536) or int32 token ids.

    The plan, fixed when the layer is made (``__post_init__``): ``min_collisions`` (the one ``attend``
    runs with) and its ``table`` (the correction of ``correction_table``), ``isa`` (None: ``isa()``, i.e.
    ``$MAGICPIG_ISA`` or the best supported) and ``threads`` (None: ``num_threads(gpu)``, i.e.
    ``$MAGICPIG_THREADS``, else torch's setting, or cores - 1 when ``gpu``: a GPU drives the model).
    """

    kv: torch.Tensor
    counts: torch.Tensor
    offsets: torch.Tensor
    ids: torch.Tensor
    K: int
    L: int
    min_collisions: int = 2
    isa: str | None = None
    threads: int | None = None
    gpu: bool = False
    table: torch.Tensor = field(init=False, repr=False)
    isa_code: int = field(init=False, repr=False)

    def __post_init__(self):
        self.min_collisions = check_min_collisions(self.min_collisions, self.L)
        self.isa = resolve_isa(self.isa)
        self.isa_code = ISA_CODES[self.isa]
        self.threads = plan_threads(self.threads, self.gpu)
        self.table = correction_table(self.K, self.L, self.min_collisions)

    @classmethod
    def build(cls, keys: torch.Tensor, values: torch.Tensor, codes: torch.Tensor, counts: torch.Tensor,
              K: int, L: int, min_collisions: int = 2) -> "OffloadedLayer":
        """Build the tables once, and copy keys / values into the interleaved store.

        keys, values: (B, H_kv, n_max, d) CPU float32 / bfloat16, the centered offloaded keys and their
        values compacted to the front of each sequence; counts: (B,) int64 valid rows per sequence (rows
        >= counts[b] are padding and never sampled); codes: (B, H_kv, n_max, L) int32 in [0, 2**K);
        min_collisions: the plan's (see the class). Raises ValueError naming the bad field,
        InsufficientMemoryError (a ValueError) when the state would not fit in the available RAM.
        """
        lsh.check_kl(K, L, min_collisions)
        check_min_collisions(min_collisions, L)  # and the 8-bit counters' limit
        for name, t in (("keys", keys), ("values", values)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4:
                raise ValueError(f"{name} must be a (B, H_kv, n_max, d) tensor")
            if t.dtype not in (torch.float32, torch.bfloat16):
                raise ValueError(f"{name} must be float32 or bfloat16, got {t.dtype}")
            if t.device.type != "cpu":
                raise ValueError(f"{name} must be a CPU tensor, got device {t.device}")
        if values.shape != keys.shape or values.dtype != keys.dtype:
            raise ValueError(f"values {tuple(values.shape)} {values.dtype} must match keys "
                             f"{tuple(keys.shape)} {keys.dtype}")
        B, Hkv, n_max, d = check_batch(keys, "keys")
        if n_max >= 2**32:
            raise ValueError(f"keys: n_max = {n_max} exceeds 32-bit token ids")
        codes = _check_codes(codes, "codes", (B, Hkv, n_max, L), K)
        if not isinstance(counts, torch.Tensor) or tuple(counts.shape) != (B,):
            raise ValueError(f"counts must be a (B,) = ({B},) tensor")
        counts = counts.detach().cpu().to(torch.int64).contiguous()
        if B and (int(counts.min()) < 0 or int(counts.max()) > n_max):
            raise ValueError(f"counts must lie in [0, n_max={n_max}], got {counts.tolist()}")
        sizes = estimate_nbytes(B, Hkv, n_max, d, K, L, keys.dtype)
        check_fits(sizes["total"], f"the offloaded layer of B={B}, H_kv={Hkv}, n_max={n_max}, d={d}, K={K}, "
                                   f"L={L} ({keys.dtype})")
        variant, threads = isa(), num_threads()  # the plan, before any work (a bad env var fails here)
        mod = extension.load()
        try:
            offsets, ids = mod.build_tables(codes, counts, K, threads)
        except RuntimeError as exc:
            raise ValueError(f"codes: {exc}") from None
        kv = mod.empty_huge([B, Hkv, n_max, 2, d], keys.dtype)
        kv[:, :, :, 0] = keys.detach()
        kv[:, :, :, 1] = values.detach()
        return cls(kv, counts, offsets, ids, K, L, min_collisions, variant, threads)

    @classmethod
    def from_prefill(cls, k: torch.Tensor, v: torch.Tensor, center: torch.Tensor, projections: torch.Tensor,
                     lo: torch.Tensor, counts: torch.Tensor, K: int, L: int,
                     dtype: torch.dtype = torch.float32, min_collisions: int = 2) -> "OffloadedLayer":
        """The decoder set-up of one layer: hash, centre and store the offloaded rows, build the tables.

        k, v: (B, H_kv, n, d) prefill keys / values on any device; sequence b offloads its rows
        lo[b] .. lo[b] + counts[b] (lo, counts: (B,) int64); center: (B, H_kv, d) float32; projections
        (S, d, K*L); dtype: float32 or bfloat16, how keys / values are stored; min_collisions: the plan's.
        Keys are hashed (from float32 keys, whatever the store) on the CPU by kernel 0 when k is a CPU
        float32 tensor, else on k's device with ``lsh.hash_codes`` in blocks of rows. Centred keys and
        values are written straight into the interleaved store; rows >= counts[b] are zero and never
        sampled. A CUDA k plans the threads for a GPU beside (``num_threads(gpu=True)``).
        """
        lsh.check_kl(K, L, min_collisions)
        check_min_collisions(min_collisions, L)  # and the 8-bit counters' limit
        if dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"dtype (offload_dtype) must be float32 or bfloat16, got {dtype}")
        B, Hkv, n, d = check_batch(k, "k")
        gpu = k.device.type == "cuda"
        variant, threads = isa(), num_threads(gpu)  # the plan, before any work (a bad env var fails here)
        lo_c, counts_c = lo.to("cpu", torch.int64), counts.to("cpu", torch.int64)
        m = int(counts_c.max()) if B else 0
        sizes = estimate_nbytes(B, Hkv, m, d, K, L, dtype)
        check_fits(sizes["total"], f"the offloaded layer of B={B}, H_kv={Hkv}, n_max={m}, d={d}, K={K}, "
                                   f"L={L} ({dtype})")
        mod = extension.load()
        if k.device.type == "cpu" and k.dtype == torch.float32:
            codes = hash_keys(k, center, projections, K, L, lo_c, counts_c, m, table_major=True,
                              isa_name=variant, threads=threads)
            build_tables = mod.build_tables_table_major
        else:
            codes = torch.zeros(B, Hkv, m, L, dtype=torch.int32)
            for b in range(B):
                lo_b, c = int(lo_c[b]), int(counts_c[b])
                for r0 in range(0, c, HASH_BLOCK):  # bounds the (rows, K*L) projections on the device
                    r1 = min(c, r0 + HASH_BLOCK)
                    x = k[b:b + 1, :, lo_b + r0:lo_b + r1].float() - center[b:b + 1, :, None]
                    codes[b, :, r0:r1] = lsh.hash_codes(x, projections, K, L)[0].cpu()
            build_tables = mod.build_tables
        try:
            offsets, ids = build_tables(codes, counts_c.contiguous(), K, threads)
        except RuntimeError as exc:
            raise ValueError(f"codes: {exc}") from None
        del codes
        kv = mod.empty_huge([B, Hkv, m, 2, d], dtype)
        for b in range(B):
            lo_b, c = int(lo_c[b]), int(counts_c[b])
            kb, vb = k[b, :, lo_b:lo_b + c], v[b, :, lo_b:lo_b + c]
            if k.device.type == "cpu" and dtype == torch.float32 and k.dtype == torch.float32:
                torch.sub(kb, center[b, :, None].to(torch.float32), out=kv[b, :, :c, 0])  # one pass
            else:
                kv[b, :, :c, 0].copy_((kb.float() - center[b, :, None]).to(dtype))
            kv[b, :, :c, 1].copy_(vb)
            kv[b, :, c:].zero_()
        return cls(kv, counts_c.contiguous(), offsets, ids, K, L, min_collisions, variant, threads, gpu)

    @staticmethod
    def exact_kernel(threads: int | None = None):
        """Kernel 5 for the decoders' exact parts on a CPU model (this module's ``exact_kernel``)."""
        return exact_kernel(threads)

    @staticmethod
    def append_kernel():
        """Kernel 7 for the decoders' exact buffers on a CPU model: ``append_kv(k_buf, v_buf, n, k, v,
        center)`` writes k - center and v at rows n.. of the (B, H_kv, cap, d) buffers."""
        return extension.load().append_kv

    def with_threads(self, threads: int) -> "OffloadedLayer":
        """The same layer (shared storage and tables) planned for ``threads`` kernel threads, e.g. a
        single-thread measurement of a layer built for all cores."""
        return dataclasses.replace(self, threads=threads)

    @property
    def keys(self) -> torch.Tensor:
        """(B, H_kv, n_max, d) view of the centered keys."""
        return self.kv[:, :, :, 0]

    @property
    def values(self) -> torch.Tensor:
        """(B, H_kv, n_max, d) view of the values."""
        return self.kv[:, :, :, 1]

    @property
    def nbytes(self) -> dict[str, int]:
        """Bytes held: {"tables", "keys", "values", "total"}."""
        def size(t):
            return t.numel() * t.element_size()
        half = size(self.kv) // 2
        sizes = {"tables": size(self.offsets) + size(self.ids), "keys": half, "values": half}
        sizes["total"] = sum(sizes.values())
        return sizes

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(B, H_kv, n_max, d)."""
        return tuple(self.keys.shape)

    def _query_codes(self, q_codes: torch.Tensor, min_collisions: int) -> torch.Tensor:
        B, Hkv = self.keys.shape[:2]
        if not isinstance(q_codes, torch.Tensor) or q_codes.dim() != 3:
            raise ValueError(f"q_codes must be a (B, H, L) int32 tensor, got {getattr(q_codes, 'shape', q_codes)}")
        H = q_codes.shape[1]
        if H % Hkv or H // Hkv > 64:
            raise ValueError(f"q_codes: query heads H={H} must be a multiple of H_kv={Hkv} with H/H_kv <= 64")
        check_min_collisions(min_collisions, self.L)
        return _check_codes(q_codes, "q_codes", (B, H, self.L), self.K)

    def _retrieve_bits(self, q_codes, min_collisions):
        try:
            return extension.load().retrieve(self.offsets, self.ids, self.K, q_codes, min_collisions, self.threads)
        except RuntimeError as exc:
            raise ValueError(f"retrieve: {exc}") from None

    def retrieve_raw(self, q_codes: torch.Tensor, min_collisions: int = 2):
        """-> (bits (B, H, ceil(n_max/64)) int64 bitsets of sampled tokens, sampled (B, H) int32,
        bucket entries read (B, H) int64)."""
        return self._retrieve_bits(self._query_codes(q_codes, min_collisions), min_collisions)

    def retrieve(self, q_codes: torch.Tensor, min_collisions: int = 2) -> list[list[torch.Tensor]]:
        """q_codes (B, H, L) int32 -> [b][h] sorted int64 tensors of the sampled token ids."""
        bits, _, _ = self.retrieve_raw(q_codes, min_collisions)
        return bits_to_ids(bits, self.keys.shape[2])

    def query_hasher(self, projections: torch.Tensor, pool: list | None = None):
        """A function q (B, H, d) contiguous CPU float32 -> codes (B, H, L) int32 of the queries, by
        kernel 0 with this layer's ISA variant and threads (a few rows per step, but each kv-head reads
        its own (d, K*L) projections: the threads split the kv-heads). projections: (S, d, K*L), tiled
        once here (``pool``: see ``shared_tiled_projections``)."""
        tiled = shared_tiled_projections(projections, pool)
        kernel = extension.load().hash_keys
        B, Hkv, _, d = self.keys.shape
        zero_center, row0 = torch.zeros(B, Hkv, d), torch.zeros(B, dtype=torch.int64)
        rows: dict[int, torch.Tensor] = {}  # query heads per kv-head -> row counts (B,), made once
        K, L, code, threads = self.K, self.L, self.isa_code, self.threads

        def hash_queries(q: torch.Tensor) -> torch.Tensor:
            H = q.shape[1]
            G = H // Hkv
            count = rows.get(G)
            if count is None:
                count = rows[G] = torch.full((B,), G, dtype=torch.int64)
            return kernel(q.view(B, Hkv, G, d), zero_center, tiled, row0, count, G, K, L, False, code,
                          threads).view(B, H, L)

        return hash_queries

    def step_args(self, projections: torch.Tensor, pool: list | None = None) -> tuple:
        """The module's arguments for this layer's offloaded part of a decode step, in the order
        ``DecodeLoop.set_sparse`` takes them: (kv, offsets, ids, K, tiled projections, table, table limit, L,
        min_collisions, isa code, threads, prefetch, split tokens); projections tiled here (``pool``: see
        ``shared_tiled_projections``)."""
        return (self.kv, self.offsets, self.ids, self.K, shared_tiled_projections(projections, pool), self.table,
                TABLE_LIMIT, self.L, self.min_collisions, self.isa_code, self.threads, PREFETCH, SPLIT_TOKENS)

    def decode_step_fn(self, projections: torch.Tensor, pool: list | None = None):
        """The whole CPU part of one decode step of this layer on a CPU model, as one call of the module
        (kernels 0, 2, 3 and 5): a function ``step(q, k_static, v_static, n_static, scale, timings, new)`` ->
        (out, lse, sampled float32) that hashes q (B, H, d) contiguous float32 with ``projections`` (tiled
        once here), retrieves and attends the sampled offloaded keys, attends the first n_static static keys
        of k_static / v_static (B, H_kv, >= n_static, d) exactly and merges the two. ``new``: None or (k, v,
        center), this step's keys / values (B, H_kv, m, d) written centred to rows n_static .. n_static + m
        first (kernel 7; the buffers must have the room) and attended with the others. ``timings``: the
        parts' seconds are added to its ``hash``, ``cpu_retrieve``, ``cpu_attend`` (retrieval + attention),
        ``cpu_wait`` and ``exact``."""
        kernel = extension.load().decode_step
        offloaded = self.step_args(projections, pool)
        args, plan, run = offloaded[:5], offloaded[5:9], offloaded[9:]

        def step(q: torch.Tensor, k_static: torch.Tensor, v_static: torch.Tensor, n_static: int, scale: float,
                 timings: dict | None = None, new: tuple | None = None):
            k_new, v_new, center = new if new is not None else (None, None, None)
            out, lse, sampled, seconds = kernel(*args, q, scale, *plan, k_static, v_static, n_static, k_new, v_new,
                                                center, *run)
            if timings is not None:
                add_step_seconds(timings, seconds)
            return out, lse, sampled

        return step

    def attend(self, q: torch.Tensor, q_codes: torch.Tensor, min_collisions: int | None = None,
               scale: float | None = None, timings: dict | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Importance-weighted attention of each query head over its sampled offloaded keys.

        q: (B, H, d) CPU float (not centered); q_codes: (B, H, L) int32 codes of q; min_collisions: None
        or the plan's (another value is refused: the correction table is the plan's). Logit of a sampled
        key i: scale·q·k_i − ln(u_i + 1e-4), u_i from the clamped cos(q, k_i), K, L and min_collisions.
        Returns out (B, H, d) float32, lse (B, H) float32 natural log (-inf where nothing was sampled,
        and then out = 0), sampled (B, H) int32. ``timings``: seconds of the retrieval are added to its
        ``cpu_retrieve`` entry.

        A query head holding a NaN or inf (a caller bug, not padding) gets out = NaN and lse = NaN, with
        ``sampled`` as retrieved: the torch reference ``MagicPIG.attend`` gives the same, so both backends
        show the bug instead of returning a plausible 0 / -inf (nothing is checked in Python, no cost).
        """
        B, Hkv, _, d = self.keys.shape
        if not isinstance(q, torch.Tensor) or q.dim() != 3 or q.shape[0] != B or q.shape[2] != d:
            raise ValueError(f"q must be (B, H, d) = ({B}, H, {d}), got {tuple(getattr(q, 'shape', ()))}")
        if min_collisions is not None and min_collisions != self.min_collisions:
            check_min_collisions(min_collisions, self.L)
            raise ValueError(f"min_collisions={min_collisions!r}, but this layer was planned (built) for "
                             f"min_collisions={self.min_collisions}: build it with min_collisions={min_collisions}")
        q_codes = self._query_codes(q_codes, self.min_collisions)
        if q_codes.shape[1] != q.shape[1]:
            raise ValueError(f"q has {q.shape[1]} heads but q_codes has {q_codes.shape[1]}")
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        q = q.detach().to(device="cpu", dtype=torch.float32).contiguous()
        return self.attend_checked(q, q_codes, scale, timings)

    def attend_checked(self, q: torch.Tensor, q_codes: torch.Tensor, scale: float,
                       timings: dict | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``attend`` without its Python checks, for a caller that built valid inputs (the decoder, every
        step): q (B, H, d) contiguous CPU float32, q_codes (B, H, L) contiguous CPU int32, scale a float;
        min_collisions is the plan's. The compiled kernels still check shapes and code ranges."""
        t0 = time.perf_counter()
        bits, sampled, _ = self._retrieve_bits(q_codes, self.min_collisions)
        if timings is not None:
            timings["cpu_retrieve"] = timings.get("cpu_retrieve", 0.0) + time.perf_counter() - t0
        out, lse = extension.load().attend(self.kv, q, bits, scale, self.table, TABLE_LIMIT, self.K, self.L,
                                           self.min_collisions, self.isa_code, self.threads, PREFETCH,
                                           SPLIT_TOKENS)
        return out, lse, sampled


def add_step_seconds(timings: dict, seconds: torch.Tensor) -> None:
    """The module's (hash, retrieve, attend, exact) seconds of a decode step (``decode_step``, ``DecodeLoop``)
    added to the decoders' ``timings``: ``hash``, ``cpu_retrieve``, ``cpu_attend`` and ``cpu_wait`` (retrieval +
    attention: the CPU part runs on the calling thread) and ``exact``."""
    hash_s, retrieve_s, attend_s, exact_s = seconds.tolist()
    for key, value in (("hash", hash_s), ("cpu_retrieve", retrieve_s), ("cpu_attend", retrieve_s + attend_s),
                       ("cpu_wait", retrieve_s + attend_s), ("exact", exact_s)):
        timings[key] = timings.get(key, 0.0) + value


def exact_kernel(threads: int | None = None):
    """Kernel 5 as a function ``exact(q, k, v, scale) -> (out (B, H, d), lse (B, H))`` float32, with this
    machine's ISA variant and the threads fixed now: exact attention of one decode query per head, q
    (B, H, d) contiguous float32, k / v (B, H_kv, n, d) float32 or bfloat16 CPU tensors with a contiguous
    last dim (a narrowed growing buffer is fine); prior: None or (out, lse) float32 of a disjoint key set,
    merged into the result (as ``magicpig.merge.merge_attention`` would). GQA groups read each key / value
    row once; token ranges are split over the threads. Used by ``magicpig.decoders.decode_exact`` for the
    system path's exact parts on a CPU model (torch's fused CPU kernel reads at well under the streaming
    bandwidth there)."""
    kernel, code, nt = extension.load().exact_attend, ISA_CODES[isa()], plan_threads(threads, False)

    def exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, prior=None):
        if not (q.shape[0] and k.shape[0]):
            raise ValueError(f"q, k: batch B must be >= 1, got {tuple(q.shape)}, {tuple(k.shape)}")
        return kernel(q, k, v, scale, code, nt, *(prior if prior is not None else (None, None)))

    return exact


def bits_to_ids(bits: torch.Tensor, n: int) -> list[list[torch.Tensor]]:
    """Bitsets (B, H, W) int64 -> [b][h] sorted int64 tensors of the set positions (< n)."""
    B, H, W = bits.shape
    shifts = torch.arange(64, dtype=torch.int64)
    flags = ((bits.unsqueeze(-1) >> shifts) & 1).bool().reshape(B, H, W * 64)[:, :, :n]
    return [[flags[b, h].nonzero().squeeze(1) for h in range(H)] for b in range(B)]
