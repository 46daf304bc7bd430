"""The MagicPIG CPU runtime: hash tables, retrieval and importance-weighted sparse attention over the
offloaded keys, in C++/OpenMP (``magicpig/csrc``).

The module is compiled on first use (``load()``) with ``torch.utils.cpp_extension.load`` and ninja into
``$MAGICPIG_BUILD_DIR`` or ``~/.cache/magicpig``, in a folder named by a hash of the sources, the flags and
the Python installation; importing this file compiles nothing. One process builds a folder at a time
(``build.lock``, freed by the kernel if the builder dies; others wait up to ``$MAGICPIG_BUILD_TIMEOUT``
seconds, saying for whom). The attention kernel has scalar, AVX2+FMA and AVX-512 variants in one
binary, chosen at run time from what the CPU supports; ``MAGICPIG_ISA=scalar|avx2|avx512|auto`` forces one.
Threads: ``num_threads()`` (``$MAGICPIG_THREADS``, else torch's setting, or cores - 1 beside a GPU).

Typical use, one layer of B sequences::

    layer = OffloadedLayer.build(keys, values, codes, counts, K=10, L=150)   # plan: once, after prefill
    out, lse, sampled = layer.attend(q, q_codes)                              # run: every decode step

Plan and run: building a layer (``build`` / ``from_prefill``) fixes everything a step needs: the ISA
variant (``$MAGICPIG_ISA``), the thread count (``$MAGICPIG_THREADS``) and the correction table of its
``min_collisions``; ``attend`` reads no environment variable and builds no table (an env change reaches
the layers built after it; ``with_threads`` re-plans a layer's threads).

The decoder's set-up (``magicpig.decoders.OffloadDecoder``) uses ``OffloadedLayer.from_prefill``: kernel 0
(``hash_keys``) hashes the centred prefill keys without materialising their projections, writes the codes
table-major, and the tables are built from that layout, one table per work item. ``self_check`` runs that
decoder against the torch reference (``magicpig build``).

Kernels (``csrc/magicpig_cpu.h``): 0 hash_keys, 1 build_tables, 2 retrieve, 3 attend (sampled keys), 4 linear
(a decode step's linear layers, several matrices in one parallel region, optionally added to a residual:
``magicpig.decode_linear``), 5 exact_attend (exact decode attention: ``exact_kernel``), 6 attention_in /
mlp_residual (the two halves of a Llama-family layer around its attention: RMSNorm, rotary embedding,
SiLU MLP, over kernel 4; ``magicpig.decode_forward``); on a CPU model a decode step of an offloaded layer is
one call, ``decode_step`` (0, 2, 3, then 5 for the static keys and the merge;
``OffloadedLayer.decode_step_fn``).
"""
from __future__ import annotations

import functools
import hashlib
import math
import os
import sys
import time
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from magicpig import lsh
from magicpig.cpu_env import (ISA_ENV, MAX_MIN_COLLISIONS, THREADS_ENV, env_threads, isa_name,  # noqa: F401
                              physical_cores)
from magicpig.pidlock import LockTimeout, PidLock

ISA_CODES = {"scalar": 0, "avx2": 1, "avx512": 2}
BUILD_DIR_ENV = "MAGICPIG_BUILD_DIR"
BUILD_TIMEOUT_ENV = "MAGICPIG_BUILD_TIMEOUT"
DEFAULT_BUILD_TIMEOUT = 1800.0  # seconds to wait for another process's build of the same folder
CFLAGS = ["-O3", "-fopenmp", "-fno-math-errno"]
LDFLAGS = ["-fopenmp"]
CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ["bindings.cpp", "build_tables.cpp", "retrieve.cpp", "attend.cpp", "exact.cpp", "linear.cpp",
           "decode_layer.cpp", "append.cpp", "isa_scalar.cpp", "isa_avx2.cpp", "isa_avx512.cpp"]
HEADERS = ["magicpig_cpu.h", "attend_impl.h", "linear_impl.h", "probe_impl.h"]
TABLE_INTERVALS = 8192  # correction -ln(u + 1e-4) is interpolated on this many intervals of the cosine...
TABLE_LIMIT = 1.0 - 1.0 / 32  # ...for |cos| <= TABLE_LIMIT (interpolation error < 1e-5); exact beyond
PREFETCH = 16  # tokens ahead whose key/value rows the attention kernel prefetches
SPLIT_TOKENS = 16384  # token range of one attention work item (several items per group balance the threads)
HASH_BLOCK = 8192  # key rows per block when hashing on a device with torch (bounds rows x K*L floats)
HASH_PAD = 32  # kernel 0's column tile (kHashTile in csrc/magicpig_cpu.h; tile_projections)


class InsufficientMemoryError(ValueError, MemoryError):
    """A configuration that would not fit in the available RAM (raised before allocating)."""


# ---- building and loading the extension ------------------------------------------------------------

def _install_key() -> str:
    """The Python installation and source folder the module is built for: two environments or checkouts
    sharing the cache (same sources, other interpreter, torch or source path, which the build files
    name) get separate folders instead of rebuilding each other's."""
    return "|".join([sys.version, sys.executable, sys.prefix, torch.__version__, str(Path(torch.__file__).parent),
                     str(CSRC)])


def _source_hash() -> str:
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update(name.encode())
        h.update((CSRC / name).read_bytes())
    h.update(" ".join(CFLAGS + LDFLAGS).encode())
    h.update(_install_key().encode())
    return h.hexdigest()[:16]


def build_dir() -> Path:
    """Folder holding the compiled module: ``$MAGICPIG_BUILD_DIR/<hash>`` or ``~/.cache/magicpig/<hash>``,
    the hash covering the sources, the flags and the installation (``_install_key``)."""
    env = os.environ.get(BUILD_DIR_ENV)
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "magicpig"
    return base / _source_hash()


def build_timeout() -> float:
    """Seconds to wait for another process's build (``$MAGICPIG_BUILD_TIMEOUT``, default 1800)."""
    text = os.environ.get(BUILD_TIMEOUT_ENV, "").strip()
    try:
        value = float(text) if text else DEFAULT_BUILD_TIMEOUT
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{BUILD_TIMEOUT_ENV} must be a positive number of seconds, got {text!r}")
    return value


@functools.lru_cache(maxsize=1)
def load():
    """Build the extension if needed (cached on disk) and return the loaded module.

    Raises RuntimeError carrying the compiler output when the build fails, or naming the process it
    waited for when another build held the folder longer than ``build_timeout()``.
    """
    return _load(build_dir(), build_timeout())


def _load(folder: Path, timeout: float):
    """Build / load the module in ``folder`` under the folder's build lock (see ``_build_lock``)."""
    from torch.utils import cpp_extension

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeError(f"cannot create the CPU module's build folder {folder}: {exc} "
                           f"(set {BUILD_DIR_ENV} to a writable folder)") from None
    lock = _build_lock(folder, timeout)
    try:
        # copies: torch appends its own flags to these lists in place, which would change build_dir()
        return cpp_extension.load(
            name=f"magicpig_cpu_{folder.name}",
            sources=[str(CSRC / s) for s in SOURCES],
            extra_cflags=list(CFLAGS),
            extra_ldflags=list(LDFLAGS),
            extra_include_paths=[str(CSRC)],
            build_directory=str(folder),
            verbose=False,
        )
    except Exception as exc:  # compiler / ninja failures come as RuntimeError or CalledProcessError
        output = getattr(exc, "output", None)
        if isinstance(output, bytes):
            output = output.decode(errors="replace")
        raise RuntimeError(f"building the MagicPIG CPU module in {folder} failed: {exc}"
                           + (f"\n{output}" if output else "")) from exc
    finally:
        lock.release()


def _build_lock(folder: Path, timeout: float) -> PidLock:
    """Take ``folder/build.lock`` (waiting, with messages, up to ``timeout`` s for a live builder) and
    clear a stale torch build lock.

    torch's ``cpp_extension`` guards the folder with a bare ``lock`` file (its FileBaton) that a killed
    build leaves behind, and waits forever for it to go away. Every build of this folder runs under our
    pid lock, which the kernel frees when its holder dies; so a ``lock`` found while we hold ours was
    left by an interrupted build and is removed (ninja redoes the unfinished compile steps).
    """
    lock = PidLock(folder / "build.lock")
    try:
        lock.acquire(timeout, f"building the MagicPIG CPU module in {folder}")
    except (LockTimeout, OSError) as exc:
        raise RuntimeError(f"MagicPIG CPU module: {exc}") from None
    baton = folder / "lock"
    if baton.exists():
        print(f"removing the stale build lock {baton} of an interrupted build", file=sys.stderr, flush=True)
        baton.unlink(missing_ok=True)
    return lock


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether the module can be built / loaded here (cached); never raises."""
    try:
        load()
        return True
    except Exception:
        return False


def supported_isas() -> list[str]:
    """Instruction-set variants this CPU can run, best first."""
    mod = load()
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


# ---- correction table ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def correction_table(K: int, L: int, min_collisions: int) -> torch.Tensor:
    """-ln(u(c) + 1e-4) at c = -1 + 2 i / TABLE_INTERVALS, float32 (TABLE_INTERVALS + 1,), computed with
    magicpig.lsh in float64 (the same formula as the torch reference)."""
    c = torch.linspace(-1.0, 1.0, TABLE_INTERVALS + 1, dtype=torch.float64)
    u = lsh.collision_probability(c, K, L, min_collisions)
    return lsh.importance_log_weight(u).float().contiguous()


# ---- memory accounting -----------------------------------------------------------------------------

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


# ---- hashing (kernel 0) -----------------------------------------------------------------------------

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
    B, Hkv, n, d = _batch_of(keys, "keys")
    if lo is None:
        lo = torch.zeros(B, dtype=torch.int64)
    if count is None:
        count = torch.full((B,), n, dtype=torch.int64)
    lo, count = lo.to("cpu", torch.int64).contiguous(), count.to("cpu", torch.int64).contiguous()
    if m is None:
        m = int(count.max()) if B else 0
    if center is None:
        center = torch.zeros(B, Hkv, d)
    return load().hash_keys(keys.contiguous(), center.to("cpu", torch.float32).contiguous(),
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


# ---- one layer's CPU-side state ---------------------------------------------------------------------

def _check_codes(codes: torch.Tensor, name: str, shape: tuple, K: int) -> torch.Tensor:
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.int32:
        raise ValueError(f"{name} must be an int32 tensor, got {getattr(codes, 'dtype', type(codes))}")
    if tuple(codes.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(codes.shape)}")
    return codes.detach().cpu().contiguous()


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
        self.min_collisions = _check_min_collisions(self.min_collisions, self.L)
        self.isa = resolve_isa(self.isa)
        self.isa_code = ISA_CODES[self.isa]
        self.threads = _plan_threads(self.threads, self.gpu)
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
        _check_min_collisions(min_collisions, L)  # and the 8-bit counters' limit
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
        B, Hkv, n_max, d = _batch_of(keys, "keys")
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
        mod = load()
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
        _check_min_collisions(min_collisions, L)  # and the 8-bit counters' limit
        if dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"dtype (offload_dtype) must be float32 or bfloat16, got {dtype}")
        B, Hkv, n, d = _batch_of(k, "k")
        gpu = k.device.type == "cuda"
        variant, threads = isa(), num_threads(gpu)  # the plan, before any work (a bad env var fails here)
        lo_c, counts_c = lo.to("cpu", torch.int64), counts.to("cpu", torch.int64)
        m = int(counts_c.max()) if B else 0
        sizes = estimate_nbytes(B, Hkv, m, d, K, L, dtype)
        check_fits(sizes["total"], f"the offloaded layer of B={B}, H_kv={Hkv}, n_max={m}, d={d}, K={K}, "
                                   f"L={L} ({dtype})")
        mod = load()
        if k.device.type == "cpu" and k.dtype == torch.float32:
            codes = hash_keys(k, center, projections, K, L, lo_c, counts_c, m, table_major=True,
                              isa_name=variant, threads=threads)
            build = mod.build_tables_table_major
        else:
            codes = torch.zeros(B, Hkv, m, L, dtype=torch.int32)
            for b in range(B):
                lo_b, c = int(lo_c[b]), int(counts_c[b])
                for r0 in range(0, c, HASH_BLOCK):  # bounds the (rows, K*L) projections on the device
                    r1 = min(c, r0 + HASH_BLOCK)
                    x = k[b:b + 1, :, lo_b + r0:lo_b + r1].float() - center[b:b + 1, :, None]
                    codes[b, :, r0:r1] = lsh.hash_codes(x, projections, K, L)[0].cpu()
            build = mod.build_tables
        try:
            offsets, ids = build(codes, counts_c.contiguous(), K, threads)
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
        """Kernel 5 for the decoders' exact parts on a CPU model (``magicpig.cpu.exact_kernel``)."""
        return exact_kernel(threads)

    @staticmethod
    def append_kernel():
        """Kernel 7 for the decoders' exact buffers on a CPU model: ``append_kv(k_buf, v_buf, n, k, v,
        center)`` writes k - center and v at rows n.. of the (B, H_kv, cap, d) buffers."""
        return load().append_kv

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
        _check_min_collisions(min_collisions, self.L)
        return _check_codes(q_codes, "q_codes", (B, H, self.L), self.K)

    def _retrieve_bits(self, q_codes, min_collisions):
        try:
            return load().retrieve(self.offsets, self.ids, self.K, q_codes, min_collisions, self.threads)
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
        kernel = load().hash_keys
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
        tiled = shared_tiled_projections(projections, pool)
        kernel = load().decode_step
        args = (self.kv, self.offsets, self.ids, self.K, tiled)
        plan = (self.table, TABLE_LIMIT, self.L, self.min_collisions)
        run = (self.isa_code, self.threads, PREFETCH, SPLIT_TOKENS)

        def step(q: torch.Tensor, k_static: torch.Tensor, v_static: torch.Tensor, n_static: int, scale: float,
                 timings: dict | None = None, new: tuple | None = None):
            k_new, v_new, center = new if new is not None else (None, None, None)
            out, lse, sampled, seconds = kernel(*args, q, scale, *plan, k_static, v_static, n_static, k_new, v_new,
                                                center, *run)
            if timings is not None:
                hash_s, retrieve_s, attend_s, exact_s = seconds.tolist()
                for key, value in (("hash", hash_s), ("cpu_retrieve", retrieve_s),
                                   ("cpu_attend", retrieve_s + attend_s), ("cpu_wait", retrieve_s + attend_s),
                                   ("exact", exact_s)):
                    timings[key] = timings.get(key, 0.0) + value
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
            _check_min_collisions(min_collisions, self.L)
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
        out, lse = load().attend(self.kv, q, bits, scale, self.table, TABLE_LIMIT, self.K, self.L,
                                 self.min_collisions, self.isa_code, self.threads, PREFETCH, SPLIT_TOKENS)
        return out, lse, sampled


def exact_kernel(threads: int | None = None):
    """Kernel 5 as a function ``exact(q, k, v, scale) -> (out (B, H, d), lse (B, H))`` float32, with this
    machine's ISA variant and the threads fixed now: exact attention of one decode query per head, q
    (B, H, d) contiguous float32, k / v (B, H_kv, n, d) float32 or bfloat16 CPU tensors with a contiguous
    last dim (a narrowed growing buffer is fine); prior: None or (out, lse) float32 of a disjoint key set,
    merged into the result (as ``magicpig.merge.merge_attention`` would). GQA groups read each key / value
    row once; token ranges are split over the threads. Used by ``magicpig.decoders.decode_exact`` for the
    system path's exact parts on a CPU model (torch's fused CPU kernel reads at well under the streaming
    bandwidth there)."""
    kernel, code, nt = load().exact_attend, ISA_CODES[isa()], _plan_threads(threads, False)

    def exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, prior=None):
        if not (q.shape[0] and k.shape[0]):
            raise ValueError(f"q, k: batch B must be >= 1, got {tuple(q.shape)}, {tuple(k.shape)}")
        return kernel(q, k, v, scale, code, nt, *(prior if prior is not None else (None, None)))

    return exact


def _batch_of(t: torch.Tensor, name: str) -> tuple[int, ...]:  # B = 0 must never reach the compiled kernels
    if not isinstance(t, torch.Tensor) or t.dim() < 1 or t.shape[0] == 0:
        raise ValueError(f"{name}: batch B must be >= 1, got shape {tuple(getattr(t, 'shape', ()))}")
    return tuple(t.shape)


def _check_min_collisions(min_collisions, L: int) -> int:
    if (isinstance(min_collisions, bool) or not isinstance(min_collisions, int)
            or not 1 <= min_collisions <= min(L, MAX_MIN_COLLISIONS)):
        raise ValueError(f"min_collisions must be an integer in [1, {min(L, MAX_MIN_COLLISIONS)}], "
                         f"got {min_collisions!r}")
    return min_collisions


def _plan_threads(threads, gpu: bool) -> int:
    if threads is None:
        return num_threads(gpu)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    return threads


def bits_to_ids(bits: torch.Tensor, n: int) -> list[list[torch.Tensor]]:
    """Bitsets (B, H, W) int64 -> [b][h] sorted int64 tensors of the set positions (< n)."""
    B, H, W = bits.shape
    shifts = torch.arange(64, dtype=torch.int64)
    flags = ((bits.unsqueeze(-1) >> shifts) & 1).bool().reshape(B, H, W * 64)[:, :, :n]
    return [[flags[b, h].nonzero().squeeze(1) for h in range(H)] for b in range(B)]


# ---- self-check: the offload decode path against the torch reference ------------------------------------

CHECK_TOLERANCE = 1e-4  # max abs error of output and lse (float32 store)
CHECK_TIE = 1e-4  # check data has no key / query projection this close to 0 (see _check_data)


def self_check(seed: int = 0) -> dict[str, float]:
    """Run the decode path the offload backend runs -- a ``magicpig.decoders.OffloadDecoder`` over this
    module's ``OffloadedLayer``: kernel 0 hashing keys and queries, the table build, retrieval and the
    attention kernel, merged by LSE with the exact static part -- against the torch reference
    ``MagicPIG.attend``, for every ISA variant this CPU runs (each decoder built under ``$MAGICPIG_ISA``).

    The layer is small and awkward: GQA with 3 query heads per kv-head, head_dim 36, K*L = 52 (not a
    multiple of kernel 0's column tile), one left-padded sequence and one holding generated keys; it is
    checked at the first decode step and after one appended key. Returns {isa: max abs error of output
    and lse}; raises RuntimeError naming the variant when it samples other keys than the reference or
    differs from it by more than ``CHECK_TOLERANCE``.
    """
    from magicpig.decoders import OffloadDecoder
    from magicpig.methods import MagicPIG

    method = MagicPIG(K=4, L=13, sinks=4, local=16)
    k, v, layout, steps = _check_data(method, seed)
    errors = {}
    saved = os.environ.get(ISA_ENV)
    try:
        for name in supported_isas():
            os.environ[ISA_ENV] = name
            decoder = OffloadDecoder(method, k, v, layout, 0, OffloadedLayer)
            if decoder.cpu_layer.isa != name:
                raise RuntimeError(f"self-check ({name}): the layer was planned for {decoder.cpu_layer.isa}")
            worst = 0.0
            for step, (q, ref, new_kv) in enumerate(steps):
                got = decoder.attend(q, None)
                if not (torch.equal(got.used, ref.used) and torch.equal(got.candidates, ref.candidates)):
                    raise RuntimeError(f"self-check ({name}, step {step}): sampled counts differ from the "
                                       "reference")
                err = float((got.output - ref.output).abs().max())
                lse_err = float((got.lse - ref.lse).abs().max())
                if not (err < CHECK_TOLERANCE and lse_err < CHECK_TOLERANCE):
                    raise RuntimeError(f"self-check ({name}, step {step}): output differs from the reference "
                                       f"by {err:.3g}, lse by {lse_err:.3g}")
                worst = max(worst, err, lse_err)
                if new_kv is not None:
                    decoder.append(*new_kv)
            errors[name] = worst
    finally:
        if saved is None:
            os.environ.pop(ISA_ENV, None)
        else:
            os.environ[ISA_ENV] = saved
    return errors


def _check_data(method, seed: int, tries: int = 100):
    """(k, v, layout, steps) of the self-check: steps = [(q, reference result, (k_new, v_new) or None)].

    Kernel 0 sums a projection in another order than torch, so a code bit may differ from the reference's
    where a projection is within rounding of 0 (``hash_keys``); such a tie would make a correct kernel
    sample another key. The data are therefore drawn (seed, seed + 1, ...) until no projection of an
    offloaded key or a query lies within ``CHECK_TIE`` of 0: any difference left is a fault."""
    from magicpig.methods import KeyLayout
    from magicpig.methods.base import masked_keys

    B, Hkv, G, d, n = 2, 2, 3, 36, 333
    layout = KeyLayout(n, torch.tensor([0, 31]), torch.tensor([n - 8, n]))  # left padding; generated keys
    for s in range(seed, seed + tries):
        gen = torch.Generator().manual_seed(s)
        k = torch.randn(B, Hkv, n, d, generator=gen) + 0.7
        v = torch.randn(B, Hkv, n, d, generator=gen)
        qs = [torch.randn(B, Hkv * G, d, generator=gen) * 2 for _ in range(2)]
        k_new, v_new = torch.randn(B, Hkv, 1, d, generator=gen) + 0.7, torch.randn(B, Hkv, 1, d, generator=gen)
        state = method.prepare(k, v, layout)
        proj = state.projections  # (Hkv, d, K*L)
        keys = (masked_keys(k, layout) - state.center[:, :, None]) @ proj[None]  # (B, Hkv, n, K*L)
        key_gap = keys.abs().amin(-1).masked_fill(~state.offloaded[:, None, :], float("inf")).min()
        query_gap = min(float((q.reshape(B, Hkv, G, d) @ proj[None]).abs().min()) for q in qs)
        if min(float(key_gap), query_gap) < CHECK_TIE:
            continue
        k2, v2 = torch.cat([k, k_new], 2), torch.cat([v, v_new], 2)
        steps = [(qs[0], method.attend(qs[0], k, v, layout, state=state), (k_new, v_new)),
                 (qs[1], method.attend(qs[1], k2, v2, layout.grow(1), state=state), None)]
        return k, v, layout, steps
    raise RuntimeError(f"self-check: no data without projection ties in {tries} draws")  # pragma: no cover
