"""Kernel benchmark of the CPU module (``magicpig bench kernel``): one decode step of one layer (retrieval +
sparse attention, 32 query / 8 kv heads, batch 1) per (n, head_dim, K, L, key distribution), against this
machine's streaming-read bandwidth, exact CPU attention, the torch reference and the time to merely read the
rows the step reads. Timings start from cold caches; the memory the largest configuration needs is checked
before anything is allocated. What each column means: docs/benchmarking.md."""
from __future__ import annotations

import csv
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from magicpig import cpu, lsh
from magicpig.harness.machine import cpu_model

NS = (16384, 65536, 131072)
HEAD_DIMS = (64, 128)
KLS = ((10, 150), (9, 120), (8, 75))
DISTS = ("offset", "random")
HEADS, KV_HEADS = 32, 8
STREAM_MIN_BYTES = 1 << 29  # streaming buffer: 512 MiB, or 4x the last-level cache when that is larger
STREAM_REPS = 7  # streaming reads timed; their median is the bandwidth
FLUSH_MIN_BYTES = 128 << 20
SYS_CPU = Path("/sys/devices/system/cpu")
HASH_CHUNK = 4096
GATHER_PREFETCH = 16  # rows ahead, as cpu.PREFETCH tokens for the kernel


@dataclass
class Row:
    n: int
    head_dim: int
    K: int
    L: int
    dist: str
    dtype: str
    threads: int
    isa: str
    sampled_fraction: float
    retrieve_ms: float
    ms_per_step: float
    bytes_touched: int
    gb_per_s: float
    read_gb_per_s: float
    bandwidth_ratio: float
    gather_ms: float  # reading the step's distinct rows, random order, no arithmetic (cold)
    gather_gb_per_s: float
    step_vs_gather: float  # gather_ms / ms_per_step: 1 = the step costs no more than its row reads
    roofline_ms: float  # all keys and values at read_gb_per_s: the floor of any exact attention
    speedup_vs_roofline: float
    dense_ms: float
    dense_kind: str  # the faster exact attention: sdpa, or grouped (matmul-softmax-matmul)
    speedup_vs_dense: float
    reference_ms: float
    speedup_vs_reference: float
    load_avg: float
    llc_bytes: int  # last-level cache found (llc_bytes)
    flush_bytes: int  # bytes read before each cold repetition
    stream_bytes: int  # streaming buffer of read_gb_per_s
    cpu_model: str = ""
    torch_version: str = ""


def _size(text: str) -> int:
    """'32768K' / '1M' / '33554432' (sysfs, lscpu -B) -> bytes."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale


def _llc_sysfs(root: Path) -> tuple[int, str] | None:
    """Total bytes of the highest cache level in sysfs (each distinct instance, by its shared_cpu_list,
    counted once), or None."""
    levels: dict[int, dict[str, int]] = {}
    for index in root.glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            size = _size((index / "size").read_text())
            shared = (index / "shared_cpu_list").read_text().strip() if (index / "shared_cpu_list").exists() \
                else index.parent.parent.name
        except (OSError, ValueError):
            continue
        levels.setdefault(level, {})[shared] = size
    if not levels:
        return None
    top = max(levels)
    sizes = levels[top]
    return sum(sizes.values()), f"sysfs L{top}: {len(sizes)} x {max(sizes.values()) >> 20} MiB"


def _llc_lscpu() -> tuple[int, str] | None:
    """Total bytes of the highest cache level lscpu reports (ALL-SIZE), or None."""
    import subprocess

    try:
        text = subprocess.run(["lscpu", "-B", "-C=LEVEL,ALL-SIZE"], capture_output=True, text=True,
                              timeout=10, check=True).stdout
        rows = [line.split() for line in text.splitlines()[1:] if len(line.split()) == 2]
        level, size = max((int(a), _size(b)) for a, b in rows)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return size, f"lscpu L{level}: {size >> 20} MiB"


def llc_bytes(root: Path = SYS_CPU, lscpu: bool = True) -> tuple[int, str]:
    """(bytes, where from) of the last-level cache: the larger of what sysfs and lscpu report for the
    highest cache level, all instances together; (0, 'unknown') when neither tells."""
    found = [x for x in (_llc_sysfs(root), _llc_lscpu() if lscpu else None) if x]
    if not found:
        return 0, "unknown"
    size = max(b for b, _ in found)
    return size, "; ".join(text for _, text in found)


def _available_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def flush_bytes(llc: int | None = None, available: int | None = None) -> int:
    """Bytes to read between repetitions so that none of the previous one's data stays cached:
    max(8 x the last-level cache, 128 MiB), capped at a quarter of the available RAM."""
    llc = llc_bytes()[0] if llc is None else llc
    available = _available_bytes() if available is None else available
    return max(8, min(max(FLUSH_MIN_BYTES, 8 * llc), available // 4) // 8 * 8)


def stream_bytes_for(llc: int, minimum: int = STREAM_MIN_BYTES) -> int:
    """Streaming buffer: max(``minimum`` (512 MiB), 4 x the last-level cache), a multiple of 8 bytes."""
    return max(minimum, 4 * llc) // 8 * 8


def timed_cold(fn, reps: int, flush: torch.Tensor) -> float:
    """Fastest of ``reps`` calls of ``fn`` (seconds), each after reading ``flush`` so that it starts from
    cold caches; one untimed call first."""
    mod, threads = cpu.load(), cpu.num_threads()
    fn()
    best = float("inf")
    for _ in range(reps):
        mod.stream_read(flush, threads)
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def union_rows(layer, bits: torch.Tensor) -> torch.Tensor:
    """Row indices into ``layer.kv`` viewed as (B * H_kv * n_max) tokens of the tokens the attention kernel
    reads: per (sequence, kv-head), the union of its query heads' sampled tokens, in increasing order."""
    B, Hkv, n_max, _ = layer.keys.shape
    W = bits.shape[-1]
    grouped = bits.reshape(B, Hkv, -1, W)
    union = grouped[:, :, 0].clone()
    for g in range(1, grouped.shape[2]):
        union |= grouped[:, :, g]
    shifts = torch.arange(64, dtype=torch.int64)
    mask = ((union.unsqueeze(-1) >> shifts) & 1).bool().reshape(B * Hkv, W * 64)[:, :n_max]
    rows = [torch.nonzero(mask[i]).squeeze(1) + i * n_max for i in range(B * Hkv)]
    return torch.cat(rows).contiguous()


def timed(fn, reps: int, warmup: int = 1) -> float:
    """Fastest of ``reps`` calls (seconds) after ``warmup`` calls: on a shared machine the minimum is the
    estimate least disturbed by other processes."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def stream_read_seconds(threads: int, nbytes: int, reps: int = STREAM_REPS, clock=time.perf_counter) -> list[float]:
    """Seconds of each of ``reps`` timed reads of one buffer of ``nbytes`` (rounded down to 8) with
    ``threads`` threads, after one untimed read."""
    mod = cpu.load()
    buf = torch.ones(max(1, nbytes // 8), dtype=torch.int64)
    mod.stream_read(buf, threads)
    times = []
    for _ in range(reps):
        t0 = clock()
        mod.stream_read(buf, threads)
        times.append(max(clock() - t0, 1e-9))
    return times


def stream_read_gbps(threads: int, nbytes: int, reps: int = STREAM_REPS, clock=time.perf_counter) -> float:
    """Streaming-read bandwidth (GB/s, 1e9 bytes): the median of ``reps`` timed reads of one ``nbytes``
    buffer (``stream_bytes_for``: at least 4x the last-level cache, so that each read comes from memory)
    with ``threads`` threads (``stream_read_seconds``). The one method every ratio of this benchmark
    divides by."""
    return max(1, nbytes // 8) * 8 / statistics.median(stream_read_seconds(threads, nbytes, reps, clock)) / 1e9


def make_data(n: int, d: int, K: int, L: int, dist: str, dtype: torch.dtype, seed: int = 0):
    """Keys (1, 8, n, d) from ``dist`` ("offset": a shared offset direction plus noise, so centering
    matters; "random": isotropic Gaussian), values, queries (1, 32, d) and the codes of the centered keys /
    the queries under one projection set per kv-head."""
    if dist not in DISTS:
        raise ValueError(f"dist must be one of {DISTS}, got {dist!r}")
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(1, KV_HEADS, n, d, generator=gen)
    if dist == "offset":
        direction = torch.randn(1, KV_HEADS, 1, d, generator=gen)
        direction = direction / direction.norm(dim=-1, keepdim=True)
        keys = keys + 3.0 * d ** 0.5 * direction
    values = torch.randn(1, KV_HEADS, n, d, generator=gen).to(dtype)
    q = torch.randn(1, HEADS, d, generator=gen)
    keys = keys.to(dtype)
    center = keys.float().mean(2, keepdim=True)
    centered = (keys.float() - center).to(dtype)
    proj = lsh.make_projections(d, K, L, num_sets=KV_HEADS, seed=seed + 43)
    codes = torch.empty(1, KV_HEADS, n, L, dtype=torch.int32)
    for lo in range(0, n, HASH_CHUNK):
        codes[:, :, lo:lo + HASH_CHUNK] = lsh.hash_codes(centered[:, :, lo:lo + HASH_CHUNK].float(), proj, K, L)
    q_codes = lsh.hash_codes(q.reshape(1, KV_HEADS, HEADS // KV_HEADS, d), proj, K, L).reshape(1, HEADS, L)
    return keys, centered, values, q, codes, q_codes, center, proj


def grouped_attention(q, keys, values):
    """Two GQA-grouped matmul-softmax-matmul formulations of exact attention (B, H, d) in the keys'
    dtype: scores as q @ k^T (G x n) or as k @ q^T (n x G; its bf16 p^T @ v takes a much faster torch
    path). The benchmark uses the faster."""
    B, H, d = q.shape
    Hkv = keys.shape[1]
    qg = q.to(keys.dtype).reshape(B, Hkv, H // Hkv, d)

    def rows():
        s = (qg @ keys.transpose(-1, -2)).float() * d ** -0.5
        return torch.softmax(s, dim=-1).to(keys.dtype) @ values

    def cols():
        s = (keys @ qg.transpose(-1, -2)).float() * d ** -0.5  # (B, Hkv, n, G)
        return torch.softmax(s, dim=2).to(keys.dtype).transpose(-1, -2) @ values

    return rows, cols


def dense_times(q, keys, values, reps: int) -> tuple[float, float]:
    """(SDPA seconds, grouped matmul seconds, the faster formulation) of exact attention over all keys,
    in the keys' dtype."""
    qd = q.to(keys.dtype)
    sdpa = timed(lambda: torch.nn.functional.scaled_dot_product_attention(
        qd.unsqueeze(2), keys, values, enable_gqa=True), reps)
    return sdpa, min(timed(f, reps) for f in grouped_attention(q, keys, values))


def reference_time(q, centered, values, center, codes, proj, K, L) -> float:
    """Seconds of one torch-reference MagicPIG.attend call over the same (all offloaded) keys."""
    from magicpig.methods import KeyLayout, MagicPIG, MagicPIGState

    n = centered.shape[2]
    method = MagicPIG(K=K, L=L, sinks=0, local=0, centering=True)
    layout = KeyLayout.simple(1, n)
    state = MagicPIGState(torch.zeros_like(center[:, :, 0]), codes, torch.ones(1, n, dtype=torch.bool), proj)
    k = centered.float()
    return timed(lambda: method.attend(q, k, values.float(), layout, state=state), 1, warmup=0)


def config_nbytes(n: int, d: int, K: int, L: int, dtype: torch.dtype, reference: bool = True) -> dict[str, int]:
    """Bytes one configuration holds at its peak, by part (an upper estimate: make_data's inputs and their
    float32 temporaries, the codes, the offloaded layer, the union-row probe, exact attention, and the torch
    reference's float32 copies and (G, n) score tensors)."""
    elt = torch.empty((), dtype=dtype).element_size()
    kv = KV_HEADS * n * d  # elements of one (1, H_kv, n, d) tensor
    parts = {
        "inputs": 3 * kv * elt,                      # keys, centered keys, values
        "input temporaries": 2 * kv * 4,             # float32 keys / centering before the cast
        "codes": KV_HEADS * n * L * 4,
        "layer": cpu.estimate_nbytes(1, KV_HEADS, n, d, K, L, dtype)["total"],
        "union rows": 3 * KV_HEADS * n * 8,          # bit expansion (int64) and the row list
        "exact attention": 2 * kv * elt + 4 * HEADS * n * 4,
    }
    if reference:
        parts["torch reference"] = 3 * kv * 4 + 8 * HEADS * n * 4
    return parts


def check_memory(ns, head_dims, kls, dtype: torch.dtype, reference: bool, flush: int, stream: int) -> int:
    """Raise cpu.InsufficientMemoryError (a ValueError) naming the largest configuration and its parts when
    it, the flush buffer and the streaming buffer would not fit in the available RAM; returns the bytes
    needed. Called before anything large is allocated and before the CSV is opened."""
    need, worst = 0, None
    for n in ns:
        for d in head_dims:
            for K, L in kls:
                parts = config_nbytes(n, d, K, L, dtype, reference)
                if sum(parts.values()) > need:
                    need, worst = sum(parts.values()), (n, d, K, L, parts)
    total = need + flush + stream
    if worst is not None:
        n, d, K, L, parts = worst
        detail = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in parts.items())
        cpu.check_fits(total, f"bench kernel at n={n}, head_dim={d}, K={K}, L={L} ({str(dtype).replace('torch.', '')}; "
                              f"GiB: {detail}, flush buffer {flush / 2**30:.2f}, streaming buffer "
                              f"{stream / 2**30:.2f}; lower --n or --head-dim)")
    return total


def run_config(n: int, d: int, K: int, L: int, dist: str, dtype: torch.dtype, *, reps: int = 20,
               read_gbps: float, reference: bool = True, dense_reps: int = 3,
               stream_bytes: int | None = None, flush: torch.Tensor | None = None,
               llc: int | None = None) -> Row:
    threads = cpu.num_threads()
    llc = llc_bytes()[0] if llc is None else llc
    stream_bytes = stream_bytes_for(llc) if stream_bytes is None else stream_bytes
    if flush is None:
        flush = torch.ones(flush_bytes(llc) // 8, dtype=torch.int64)
    keys, centered, values, q, codes, q_codes, center, proj = make_data(n, d, K, L, dist, dtype)
    layer = cpu.OffloadedLayer.build(centered, values, codes, torch.tensor([n]), K, L)
    bits, sampled, entries = layer.retrieve_raw(q_codes, 2)
    retrieve_s = timed_cold(lambda: layer.retrieve_raw(q_codes, 2), reps, flush)
    step_s = timed_cold(lambda: layer.attend(q, q_codes, 2), reps, flush)
    elt = centered.element_size()
    token_bytes = 2 * d * elt
    rows = union_rows(layer, bits)
    mod = cpu.load()
    gather_s = timed_cold(lambda: mod.gather_rows(layer.kv, token_bytes, rows, GATHER_PREFETCH, threads), reps, flush)
    gather_gbps = rows.numel() * token_bytes / gather_s / 1e9
    id_bytes = layer.ids.element_size()
    touched = int(sampled.sum()) * 2 * d * elt + int(entries.sum()) * id_bytes
    sdpa_s, grouped_s = dense_times(q, keys, values, dense_reps)
    dense_s, dense_kind = (sdpa_s, "sdpa") if sdpa_s <= grouped_s else (grouped_s, "grouped")
    roofline_s = keys.numel() * 2 * elt / (read_gbps * 1e9)
    ref_s = reference_time(q, centered, values, center, codes, proj, K, L) if reference else float("nan")
    gbps = touched / step_s / 1e9
    return Row(n=n, head_dim=d, K=K, L=L, dist=dist, dtype=str(dtype).replace("torch.", ""), threads=threads,
               isa=cpu.isa(), sampled_fraction=float(sampled.sum()) / (HEADS * n),
               retrieve_ms=retrieve_s * 1e3, ms_per_step=step_s * 1e3, bytes_touched=touched, gb_per_s=gbps,
               read_gb_per_s=read_gbps, bandwidth_ratio=gbps / read_gbps, gather_ms=gather_s * 1e3,
               gather_gb_per_s=gather_gbps, step_vs_gather=gather_s / step_s,
               roofline_ms=roofline_s * 1e3, speedup_vs_roofline=roofline_s / step_s, dense_ms=dense_s * 1e3,
               dense_kind=dense_kind, speedup_vs_dense=dense_s / step_s, reference_ms=ref_s * 1e3,
               speedup_vs_reference=ref_s / step_s, load_avg=os.getloadavg()[0], llc_bytes=llc,
               flush_bytes=flush.numel() * 8, stream_bytes=stream_bytes, cpu_model=cpu_model(),
               torch_version=torch.__version__)


HEADER = (f"{'n':>7} {'hd':>4} {'K':>3} {'L':>4} {'dist':>6} {'frac%':>6} {'retr ms':>8} {'ms/step':>8} "
          f"{'MB':>6} {'GB/s':>6} {'read':>6} {'ratio':>6} {'gather':>7} {'gat/rd':>6} {'gat/step':>8} "
          f"{'dense ms':>9} {'x dense':>8} {'x roof':>7} {'x ref':>7} {'load':>5}")


def format_row(r: Row) -> str:
    return (f"{r.n:>7} {r.head_dim:>4} {r.K:>3} {r.L:>4} {r.dist:>6} {100 * r.sampled_fraction:>6.2f} "
            f"{r.retrieve_ms:>8.3f} {r.ms_per_step:>8.3f} {r.bytes_touched / 1e6:>6.2f} {r.gb_per_s:>6.1f} "
            f"{r.read_gb_per_s:>6.1f} {r.bandwidth_ratio:>6.2f} {r.gather_gb_per_s:>7.1f} "
            f"{r.gather_gb_per_s / r.read_gb_per_s:>6.2f} {r.step_vs_gather:>8.2f} {r.dense_ms:>7.1f}"
            f"{r.dense_kind[0]:>2} {r.speedup_vs_dense:>8.1f} {r.speedup_vs_roofline:>7.1f} "
            f"{r.speedup_vs_reference:>7.0f} {r.load_avg:>5.2f}")


LEGEND = ("# ratio = GB/s / read (streaming); gather = GB/s of reading the same rows in the same random order with "
          "no arithmetic and the widest vector loads (the ceiling of random row reads), gat/rd = gather / read; "
          "gat/step = gather time / step time;\n# x dense = speedup over the faster measured exact "
          "attention (s: SDPA, g: grouped matmul); x roof = over all K/V read at the streaming bandwidth "
          "(no exact attention can beat it)")


def run(ns=NS, head_dims=HEAD_DIMS, kls=KLS, dists=DISTS, dtype: torch.dtype = torch.bfloat16, *,
        csv_path: str | Path | None = None, reps: int = 20, reference: bool = True, dense_reps: int = 3,
        stream_bytes: int | None = None, echo=print) -> list[Row]:
    """Run the grid, print one line per configuration and write the CSV; returns the rows. Raises
    cpu.InsufficientMemoryError (before allocating anything large or opening the CSV) when the largest
    configuration would not fit in RAM. ``stream_bytes`` overrides the streaming buffer (tests)."""
    threads = cpu.num_threads()
    llc, llc_source = llc_bytes()
    stream_bytes = stream_bytes_for(llc) if stream_bytes is None else stream_bytes
    flush_n = flush_bytes(llc)
    check_memory(ns, head_dims, kls, dtype, reference, flush_n, stream_bytes)
    echo(f"# MagicPIG CPU kernel bench: {cpu_model()}, isa {cpu.isa()}, "
         f"{threads} threads, dtype {dtype}, {HEADS} query / {KV_HEADS} kv heads, B=1")
    seconds = stream_read_seconds(threads, stream_bytes)
    read = stream_bytes // 8 * 8 / statistics.median(seconds) / 1e9
    echo(f"# streaming read: {read:.1f} GB/s (median of {STREAM_REPS} reads of a {stream_bytes / 2**20:.0f} MiB "
         f"buffer, {threads} threads as the step; fastest {stream_bytes // 8 * 8 / min(seconds) / 1e9:.1f}); "
         f"load average {os.getloadavg()[0]:.2f}")
    echo(f"# cold caches: {flush_n / 2**20:.0f} MiB read before each timed repetition (last-level cache "
         f"{llc / 2**20:.0f} MiB from {llc_source}; flush = max(8 x LLC, {FLUSH_MIN_BYTES >> 20} MiB), at most "
         f"1/4 of the available RAM); times are the fastest of {reps} repetitions")
    echo(LEGEND)
    echo(HEADER)
    rows = []
    flush = torch.ones(flush_n // 8, dtype=torch.int64)
    if csv_path is None:
        csv_path = Path("results") / "bench" / f"kernel_{time.strftime('%Y%m%d-%H%M%S')}.csv"
    csv_path = Path(csv_path)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(Row.__dataclass_fields__))
        writer.writeheader()
        for n in ns:
            for d in head_dims:
                for K, L in kls:
                    for dist in dists:
                        row = run_config(n, d, K, L, dist, dtype, reps=reps, read_gbps=read, reference=reference,
                                         dense_reps=dense_reps, stream_bytes=stream_bytes, flush=flush, llc=llc)
                        rows.append(row)
                        writer.writerow(asdict(row))
                        fh.flush()
                        echo(format_row(row))
    echo(f"# wrote {csv_path}")
    return rows
