"""Decode benchmark, the paper's throughput experiment: per (context, batch, method@backend) the time of one
decode step and tokens/s, with stock transformers as the baseline, in one run.

Protocol (the original's): one prompt per context, repeated to the batch; ``warmup`` untimed decode steps
(default 32), then ``steps`` timed ones (default 128); ms_per_token = timed time / steps (one step makes one
token per sequence), tokens_per_s = batch * steps / timed time.

Backends:

* ``stock`` (method ``dense`` only): stock transformers with SDPA attention and its own ``DynamicCache``
  holding the prefilled context; each step is the model forward of one token per sequence plus the
  greedy pick and attention-mask update, what ``model.generate`` does per step. On a GPU this is the
  paper's baseline, GPU-only full attention.
* ``reference`` / ``offload``: ``magicpig.engine.Engine`` with that backend (``offload``: MagicPIG's
  heterogeneous split, sampled keys in host memory attended by the CPU module).

Prompts: essay text (tokenizer models) or random token ids (shape-only models, ``--model shape:NAME``).
``fill="exact"`` prefills every context exactly; ``fill="tile"`` prefills ``tile_base`` tokens exactly and
repeats that cache along the sequence to the context (same number of keys, same key statistics; positions
of the copies repeat) for machines too slow to prefill the longest contexts. Every row records its fill.

Memory: before anything is allocated for a row, ``estimate_row`` adds up what it will hold (KV at the
model dtype, hash tables, build-time copies, buffers) and compares it with the available host memory
(psutil) and, on CUDA, the free device memory; a row that would not fit is written with ``fits=false``
and the numbers, never attempted. A real out-of-memory error is the backstop and gives the same kind of
row. ``max_throughput`` searches the largest batch that fits per method (doubling, then bisection, on the
estimate first, short real probes as backstop) and measures it (the paper's Table 7).

Columns (``COLUMNS``; every row has all of them, '' where not applicable): ms_per_token = ms per decode
step (one token per sequence), tokens_per_s = batch / step time; peak_host_mb = peak RSS of this process
during the row (model included), peak_device_mb = peak CUDA allocation; kv_bytes = the batch's KV cache at
the model dtype; table_bytes = the offloaded hash tables; est_host_mb / est_device_mb = the estimate's
memory for the row on top of the model and the batch-1 prefill; sampled_fraction = mean sampled / candidate
keys over sparse layers (1 for dense); fits / reason = whether it ran, and why not; search = "" or
"max-batch"; linear = who computed the step's linear layers (``torch``, or ``magicpig`` = the CPU
module's kernel 4: torch's CPU matmul reads a decode step's weights on one thread); forward = who ran the
step's layer loop (``transformers``, or ``magicpig`` = ``magicpig.decode_forward``); ``<key>_ms`` = the
decode result's ``timings`` (seconds over the timed steps) per step, empty when the engine does not
report them; predicted_ms_per_token is left empty for ``magicpig project``.

Bandwidth (CPU runs): a shared machine's memory bandwidth drifts by tens of percent within seconds, so a
row measures its own. stream_gbps is the streaming read measured once at the start of the run (``bench
kernel``'s method); stream_gbps_steps is measured during the row: after every ``STREAM_EVERY``-th timed
step (outside its time) one timed read of a buffer of 4x the last-level cache (``IN_ROW_STREAM_MIN`` at
least), with the step's threads; stream_gbps_steps =
bytes read / seconds summed over those reads (the harmonic mean of the samples, which is what a mean step
time compares with), stream_samples = how many. bytes_limit_ms = bytes_per_step at stream_gbps_steps (the
run-start figure where a row has no samples), x_bytes_limit = ms_per_token / bytes_limit_ms, and
x_bytes_limit_start the same ratio at the run-start figure. A decode step reads far more than the
last-level cache, so a read between steps should leave the next step's time alone; x_after_read checks
it: the mean time of the steps right after a read over that of the other timed steps. ``magicpig
project`` charges a row's bytes at its stream_gbps_steps: a MagicPIG row's always, a torch-reference row's
under malloc_policy ``converged``, a stock row's never (both dense backends allocate and free hundreds of MB
per step, and a read right after a stock step, or after a reference step under glibc's adaptive
thresholds, measured that churn).

Allocator (``--malloc``, ``magicpig.harness.allocator``): ``converged`` (default) fixes glibc's mmap and
trim thresholds where its adaptive rule settles (32 / 64 MiB) and trims the heap before each row, so that
a row meets the same allocator whatever ran before it in the process; ``default`` leaves glibc adaptive.
The row's malloc_policy records which.

Load: ``load_before`` / ``load_after`` are the 1-minute load averages; ``other_cpu_load`` is the number of
cores that OTHER processes kept busy during the row (system CPU time minus this process's, over wall
time; it includes ``steal_cpu``, the cores' worth of time a VM's hypervisor gave to other guests).
``own_sys_share`` is the share of this process's CPU time spent in the kernel (page faults: stock's
fresh-page rows spend about 40% there on the development machine, other rows about 1%), so that a row slowed
by its own faults is told apart from one slowed by another process. ``under_load`` is true when
other_cpu_load exceeds half the cores; the load average alone cannot tell, since it counts this
benchmark's own threads.
"""
from __future__ import annotations

import csv
import gc
import inspect
import math
import os
import threading
import time
from pathlib import Path

import torch

from magicpig.atomic_io import CsvAppender
from magicpig.backends import BENCH_BACKENDS, system_backend
from magicpig.decoders import TIMING_KEYS  # the parts of a decode step the engine times
from magicpig.harness import allocator
from magicpig.harness.csv_rows import load_rows  # noqa: F401 (the reader of what this module writes)
from magicpig.harness.machine import device_name, machine_record
from magicpig.shapes import ModelShape, model_shape

CONTEXTS = (8192, 32768)
BATCHES = (1,)
METHODS = (("dense", "stock"), ("dense", "reference"), ("magicpig:K=10,L=150", "offload"))
BACKENDS = BENCH_BACKENDS  # stock transformers + the engine's (magicpig.backends)
FILLS = ("exact", "tile")
DTYPES = ("auto", "float32", "bfloat16", "float16")
MEMORY_MARGIN = 0.9  # a row may use at most this share of the available memory
STREAM_EVERY = 4  # one timed step in this many is followed by a streaming read (the row's own bandwidth)
IN_ROW_STREAM_MIN = 64 << 20  # that read's buffer: 4x the last-level cache, at least this (held by the run,
# so it is kept small: the memory estimate of a row, and so --max-throughput, sees it as used)
COLUMNS = ["model", "shape_only", "device", "device_name", "context", "batch", "method", "backend",
           "ms_per_token", "tokens_per_s", "peak_host_mb", "peak_device_mb", "kv_bytes", "table_bytes",
           "est_host_mb", "est_device_mb", "setup_seconds", "sampled_fraction", "fits", "reason", "search",
           "load_before", "load_after", "other_cpu_load", "steal_cpu", "own_sys_share", "under_load",
           "predicted_ms_per_token", "threads", "isa", "cpu_model", "torch_version", "malloc_policy", "dtype",
           "offload_dtype", "linear", "forward", "bytes_per_step", "stream_gbps", "stream_gbps_steps",
           "stream_samples", "x_after_read",
           "bytes_limit_ms", "x_bytes_limit", "x_bytes_limit_start", "fill", "prefill_seconds", "steps", "warmup"] \
    + [f"{k}_ms" for k in TIMING_KEYS]
NEEDLE = "The secret passkey is {key}. Remember it: the passkey is {key}."
QUESTION = "What is the secret passkey mentioned in the text above? Answer with the number only."


# ---- prompts ---------------------------------------------------------------------------------------
def essay_tokens(tokenizer, n_tokens: int) -> list[int]:
    """``n_tokens`` token ids of the essay haystack (``magicpig_tasks.ruler.haystack.essay_corpus``: sorted by
    file name, ``$MAGICPIG_ESSAYS`` honoured), repeated if needed."""
    from magicpig_tasks.ruler.haystack import essay_corpus

    ids = tokenizer(essay_corpus(), add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError("the haystack tokenized to nothing")
    reps = -(-n_tokens // len(ids))
    return (ids * reps)[:n_tokens]


def random_tokens(vocab: int, n_tokens: int, seed: int = 0) -> list[int]:
    """``n_tokens`` random ids in [3, vocab) (the prompt of a shape-only model: timing needs no text)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, max(4, vocab), (n_tokens,), generator=g).tolist()


def needle_prompt(tokenizer, n_tokens: int, depth: float = 0.5, key: int = 68413) -> tuple[list[int], str]:
    """A needle-in-a-haystack chat prompt of about ``n_tokens`` tokens: the needle sentence inserted at
    ``depth`` (0..1) of the essay haystack, then the question. Returns (ids, expected answer)."""
    from magicpig.models import prompt_ids

    if not 0 <= depth <= 1:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    needle = NEEDLE.format(key=key)
    overhead = len(prompt_ids(tokenizer, needle + "\n\n" + QUESTION))
    hay = essay_tokens(tokenizer, max(16, n_tokens - overhead))
    cut = int(len(hay) * depth)
    text = tokenizer.decode(hay[:cut]) + " " + needle + " " + tokenizer.decode(hay[cut:])
    return prompt_ids(tokenizer, text + "\n\n" + QUESTION), str(key)


# ---- prefill shapes --------------------------------------------------------------------------------
def tile_prefill(pre, n_target: int):
    """Repeat a prefill's keys/values along the sequence up to ``n_target`` keys (batch 1 only)."""
    from magicpig.engine import Prefill
    from magicpig.methods import KeyLayout

    if pre.batch != 1:
        raise ValueError("tile_prefill works on a single prompt")
    reps = -(-n_target // pre.n)
    keys = [k.repeat(1, 1, reps, 1)[:, :, :n_target].contiguous() for k in pre.keys]
    values = [v.repeat(1, 1, reps, 1)[:, :, :n_target].contiguous() for v in pre.values]
    dev = pre.layout.start.device
    layout = KeyLayout(n_target, torch.zeros(1, dtype=torch.long, device=dev),
                       torch.full((1,), n_target, dtype=torch.long, device=dev))
    ids = (pre.prompt_ids[0] * reps)[:n_target]
    return Prefill(keys, values, layout, pre.logits, [ids], pre.seconds)


def repeat_batch(pre, batch: int):
    """The batch-1 prefill ``pre`` as ``batch`` identical sequences (the original's protocol: the prompt
    repeated B times). Keys/values are expanded views, so nothing is copied until a decoder builds."""
    from magicpig.engine import Prefill
    from magicpig.methods import KeyLayout

    if pre.batch != 1:
        raise ValueError("repeat_batch works on a single prompt")
    if batch == 1:
        return pre
    keys = [k.expand(batch, -1, -1, -1) for k in pre.keys]
    values = [v.expand(batch, -1, -1, -1) for v in pre.values]
    layout = KeyLayout(pre.n, pre.layout.start.expand(batch).contiguous(),
                       pre.layout.prompt_end.expand(batch).contiguous())
    return Prefill(keys, values, layout, pre.logits.expand(batch, -1), pre.prompt_ids * batch, pre.seconds)


# ---- arguments -------------------------------------------------------------------------------------
def parse_method_arg(item: str) -> tuple[str, str]:
    """``SPEC[@BACKEND]`` -> (canonical spec, backend). Default backend: the method's system backend
    (``magicpig.backends.system_backend``: offload for magicpig, reference otherwise); ``stock`` (stock
    transformers) runs ``dense`` only."""
    from magicpig.methods import parse_method

    spec, _, backend = item.rpartition("@") if "@" in item else (item, "", "")
    method = parse_method(spec)
    backend = backend or system_backend(method.name)
    if backend not in BACKENDS:
        raise ValueError(f"--method {item!r}: backend after '@' must be one of {', '.join(BACKENDS)}, "
                         f"got {backend!r}")
    if backend == "stock" and method.name != "dense":
        raise ValueError(f"--method {item!r}: backend 'stock' (stock transformers, SDPA + DynamicCache) runs "
                         "'dense' only")
    return method.spec(), backend


def resolve_dtype(name: str | None, device: str):
    """``auto`` -> float32 on the CPU, bfloat16 on CUDA; else the named torch dtype."""
    if name in (None, "auto"):
        return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return getattr(torch, name)


# ---- memory estimate -------------------------------------------------------------------------------
def estimate_prefill(shape: ModelShape, base: int, n: int, chunk: int) -> dict[str, int]:
    """Device bytes to prefill ``base`` tokens exactly (batch 1) and tile the cache to ``n`` keys."""
    from magicpig.attention import PREFILL_BLOCK

    chunk = min(chunk, base)
    acts = chunk * (6 * shape.hidden + 3 * shape.intermediate) * shape.elem
    scores = min(PREFILL_BLOCK, chunk) * base * shape.heads * 4  # the math SDPA path's score block
    layer_cat = shape.kv_bytes(base, layers=1)  # DynamicLayer's cat: one layer's old + new copy
    tiled = shape.kv_bytes(n) + shape.kv_bytes(n, layers=1) if n > base else 0
    return {"device": shape.kv_bytes(base) + acts + scores + layer_cat + tiled + shape.vocab * 4}


def estimate_row(shape: ModelShape, spec: str, backend: str, n: int, batch: int, steps: int) -> dict[str, int]:
    """Bytes a row allocates on top of the model and the batch-1 prefill at ``n`` keys.

    Returns {"device", "host", "kv", "tables"}: device = on the model's device, host = in CPU memory
    beyond the device part (on a CPU-only run both are host memory). Build-time copies of one layer
    (padding-zeroed keys, float32 centred keys, int32 codes) are counted once, since decoders are built
    layer by layer. Deliberately generous: a row refused by the estimate is cheaper than a killed run.
    """
    from magicpig import cpu
    from magicpig.methods import MagicPIG, parse_method

    method = parse_method(spec)
    B, Hkv, d, L_ = batch, shape.kv_heads, shape.head_dim, shape.layers
    grow = n + steps + 64 + 1  # GrowBuffer slack and the generated keys
    step_acts = B * (shape.vocab * 4 + 8 * shape.hidden * 4 + 3 * shape.intermediate * shape.elem)
    step_scores = 2 * B * shape.heads * grow * 4  # float32 logits and probabilities of one layer
    one_layer_f32 = 2 * B * Hkv * grow * d * 4  # grouped_scores' float copies of one layer's cache
    kv_full = shape.kv_bytes(n, B)
    if backend == "stock":
        device = shape.kv_bytes(grow, B) + shape.kv_bytes(grow, B, layers=1) + step_acts + step_scores
        return {"device": device, "host": 0, "kv": kv_full, "tables": 0}
    dense = method.dense_layer_set(L_) if hasattr(method, "dense_layer_set") else set(range(L_))
    n_dense = len(dense)
    if backend == "reference" or not isinstance(method, MagicPIG):
        extra_layer = 0
        if isinstance(method, MagicPIG):  # codes and float32 centred keys stay in the method state
            extra_layer = B * Hkv * n * (method.L * 4 + d * 4)
        device = (shape.kv_bytes(grow, B) + shape.kv_bytes(n, B, layers=1)  # buffers + one padding copy
                  + (L_ - n_dense) * extra_layer + one_layer_f32 + step_acts + step_scores)
        return {"device": device, "host": 0, "kv": kv_full, "tables": 0}
    # offload: dense layers and static tokens on the device; the rest in host memory
    n_sparse = L_ - n_dense
    static = method.sinks + method.local + steps + 64 + 1
    n_off = max(0, n - method.sinks - method.local)
    store = torch.float32 if shape.elem == 4 else torch.bfloat16
    store_elem = torch.empty((), dtype=store).element_size()
    per_layer = cpu.estimate_nbytes(B, Hkv, n_off, d, method.K, method.L, store)
    build_dev = (shape.kv_bytes(n, B, layers=1) + 3 * B * Hkv * n * d * 4 + 2 * B * Hkv * n * method.L * 4)
    device = (shape.kv_bytes(grow, B, layers=n_dense) + n_sparse * B * Hkv * static * d * (4 + shape.elem)
              + build_dev + one_layer_f32 + step_acts + step_scores)
    build_host = 2 * B * Hkv * n_off * d * store_elem + B * Hkv * n_off * method.L * 4
    sampled_bits = B * shape.heads * n_off // 8  # one layer's per-head bitsets of sampled tokens
    host = n_sparse * per_layer["total"] + build_host + sampled_bits
    return {"device": device, "host": host, "kv": kv_full, "tables": n_sparse * per_layer["tables"]}


def available_memory(device: torch.device) -> dict[str, int]:
    """{"host": bytes psutil reports available, "device": free + allocator-cached bytes on CUDA}."""
    import psutil

    free = {"host": int(psutil.virtual_memory().available)}
    if device.type == "cuda":
        dev_free, _ = torch.cuda.mem_get_info(device)
        free["device"] = int(dev_free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    return free


def fit_reason(need: dict[str, int], device: torch.device, free: dict[str, int] | None = None) -> str:
    """'' when ``need`` fits in ``MEMORY_MARGIN`` of the free memory, else the numbers that do not."""
    free = free or available_memory(device)
    host_need = need.get("host", 0) + (need.get("device", 0) if device.type == "cpu" else 0)
    problems = []
    if host_need > MEMORY_MARGIN * free["host"]:
        problems.append(f"needs {host_need / 1e9:.2f} GB of host memory, {free['host'] / 1e9:.2f} GB available")
    if device.type != "cpu" and need.get("device", 0) > MEMORY_MARGIN * free.get("device", 0):
        problems.append(f"needs {need['device'] / 1e9:.2f} GB of {device.type} memory, "
                        f"{free.get('device', 0) / 1e9:.2f} GB free")
    return "; ".join(problems)


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure (device OOM, the CPU allocator, the CPU module's check)."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _free_memory(trim: bool = False) -> None:
    """Collect garbage (and, with ``trim``, return the free heap to the OS: ``allocator.release``)."""
    gc.collect()
    if trim:
        allocator.release()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- measurement helpers ---------------------------------------------------------------------------
class RowMonitor:
    """Peak process RSS (sampled by a thread), peak device memory, load average and other processes' CPU
    use over one row."""

    def __init__(self, device: torch.device, interval: float = 0.05):
        import psutil

        self.device, self.interval = device, interval
        self.proc = psutil.Process()
        self.peak_rss = 0
        self._stop = threading.Event()

    @staticmethod
    def _busy() -> float:
        import psutil

        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0)

    def _own(self) -> tuple[float, float]:
        """This process's CPU seconds: (user + system, system)."""
        t = self.proc.cpu_times()
        return t.user + t.system, t.system

    @staticmethod
    def _steal() -> float:
        import psutil

        return getattr(psutil.cpu_times(), "steal", 0.0)  # Linux only: time the hypervisor gave elsewhere

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self):
        self.load_before = os.getloadavg()[0]
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.peak_rss = self.proc.memory_info().rss
        self._t0, self._busy0, self._own0 = time.perf_counter(), self._busy(), self._own()
        self._steal0 = self._steal()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        wall = max(1e-9, time.perf_counter() - self._t0)
        own, own_sys = (b - a for a, b in zip(self._own0, self._own()))
        self.other_cpu_load = max(0.0, (self._busy() - self._busy0) - own) / wall
        self.steal_cpu = max(0.0, self._steal() - self._steal0) / wall
        self.own_sys_share = own_sys / own if own > 0 else 0.0
        self.load_after = os.getloadavg()[0]
        self.peak_device = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else 0
        return False

    def fields(self) -> dict:
        cores = os.cpu_count() or 1
        return {"peak_host_mb": round(self.peak_rss / 2**20, 1),
                "peak_device_mb": round(self.peak_device / 2**20, 1) if self.device.type == "cuda" else "",
                "load_before": round(self.load_before, 2), "load_after": round(self.load_after, 2),
                "other_cpu_load": round(self.other_cpu_load, 2), "steal_cpu": round(self.steal_cpu, 3),
                "own_sys_share": round(self.own_sys_share, 3), "under_load": self.other_cpu_load > cores / 2}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def time_stock(net, pre, steps: int, warmup: int, after_step=None) -> dict:
    """Stock transformers decode (SDPA + DynamicCache holding ``pre``'s context): per step the forward of
    one token per sequence, the greedy pick and the mask update, as ``model.generate`` does them.
    after_step(i): called after step i (0-based) is timed, outside its time."""
    from transformers import DynamicCache

    from magicpig import attention as _attention

    device = next(net.parameters()).device
    previous = getattr(net.config, "_attn_implementation", None)
    net.set_attn_implementation("sdpa")
    try:
        t0 = time.perf_counter()
        cache = DynamicCache(config=net.config)
        for i, (k, v) in enumerate(zip(pre.keys, pre.values)):
            cache.update(k, v, i)  # DynamicLayer concatenates: the batch copies are made here
        B, n = pre.batch, pre.n
        cache_kw = "cache" if "cache" in inspect.signature(net.forward).parameters else "past_key_values"
        mask = torch.ones(B, n, dtype=torch.long, device=device)
        tokens = pre.logits.argmax(-1)[:, None]
        _sync(device)
        setup = time.perf_counter() - t0
        step_seconds = []
        for t in range(warmup + steps):
            t_step = time.perf_counter()
            mask = torch.cat([mask, mask.new_ones(B, 1)], dim=1)
            pos = torch.full((B, 1), n + t, dtype=torch.long, device=device)
            out = net(input_ids=tokens, attention_mask=mask, position_ids=pos, **{cache_kw: cache},
                      cache_position=torch.tensor([n + t], device=device), use_cache=True, logits_to_keep=1)
            tokens = out.logits[:, -1].argmax(-1)[:, None]
            _sync(device)
            step_seconds.append(time.perf_counter() - t_step)
            if after_step is not None:
                after_step(t)
        del cache, out
    finally:
        if previous == _attention.NAME:
            _attention.use_hook(net)
        elif previous:
            net.set_attn_implementation(previous)
    return {"step_seconds": step_seconds, "setup_seconds": setup, "sampled_fraction": 1.0, "timings": None,
            "linear": "torch", "forward": "transformers"}


def time_engine(net, tokenizer, pre, spec: str, backend: str, steps: int, warmup: int,
                offload_dtype: str | None = None, linear: str = "auto", forward: str = "auto",
                after_step=None) -> dict:
    """Decode ``pre`` with ``Engine`` (backend ``reference`` / ``offload``) for warmup + steps forwards;
    linear / forward: the engine's ``linear_impl`` / ``decode_forward``; after_step: ``Engine.decode``'s."""
    from magicpig.engine import Engine, GenerationConfig

    engine = Engine(net, tokenizer, backend=backend, allow_long_context=True, offload_dtype=offload_dtype,
                    linear_impl=linear, decode_forward=forward)
    # n new tokens take n - 1 decode forwards (the first comes from the prefill's logits)
    res = engine.decode(pre, spec, GenerationConfig(max_new_tokens=warmup + steps + 1, ignore_eos=True),
                        after_step=after_step)[0]
    return {"step_seconds": res.step_seconds, "setup_seconds": res.setup_seconds, "sampled_fraction": res.cost,
            "timings": getattr(res, "timings", None), "linear": res.linear, "forward": res.forward}


# ---- the benchmark ---------------------------------------------------------------------------------
def machine_description(device: str | None = None) -> dict:
    """This machine's record for a benchmark report (``magicpig.harness.machine.machine_record``, the CPU
    module loaded first); kept under this name for bench/gpu_check.sh."""
    return machine_record(device, load_cpu_module=True)


def _fmt_gb(x: float) -> str:
    return f"{x / 1e9:.2f} GB"


def measure_stream_gbps() -> float:
    """This machine's streaming-read GB/s, measured as ``magicpig bench kernel`` does (one method)."""
    from magicpig.harness import bench_kernel

    return bench_kernel.stream_read_gbps(torch.get_num_threads(), bench_kernel.stream_bytes_for(
        bench_kernel.llc_bytes()[0]))


class StepBandwidth:
    """``after_step`` for a row: after every ``every``-th timed step (the first included) one timed
    streaming read of ``buffer`` (larger than the last-level cache; read once before, so its pages exist)
    with ``threads`` threads. ``gbps()``: bytes over the summed seconds of the reads; ``after_read(steps)``:
    the mean time of the steps right after a read over that of the other timed steps."""

    def __init__(self, buffer: torch.Tensor, threads: int, warmup: int, every: int = STREAM_EVERY):
        from magicpig import cpu

        self.read = cpu.load().stream_read
        self.buffer, self.threads, self.warmup, self.every = buffer, threads, warmup, every
        self.seconds: list[float] = []
        self.followed: set[int] = set()  # steps that came right after a read

    def __call__(self, step: int) -> None:
        if step < self.warmup or (step - self.warmup) % self.every:
            return
        t0 = time.perf_counter()
        self.read(self.buffer, self.threads)
        self.seconds.append(max(time.perf_counter() - t0, 1e-9))
        self.followed.add(step + 1)

    def gbps(self) -> float | None:
        nbytes = self.buffer.numel() * self.buffer.element_size()
        return nbytes * len(self.seconds) / sum(self.seconds) / 1e9 if self.seconds else None

    def after_read(self, step_seconds: list[float]) -> float | None:
        timed = range(self.warmup, len(step_seconds))
        after = [step_seconds[i] for i in timed if i in self.followed]
        other = [step_seconds[i] for i in timed if i not in self.followed]
        if not after or not other:
            return None
        return (sum(after) / len(after)) / (sum(other) / len(other))


def bytes_limit(model: str, row: dict, stream_gbps: float | None) -> dict:
    """The bytes one decode step of ``row`` must read (weights, the KV read exactly, the sampled rows and
    bucket ids: ``projection.step_work``) and the time they take at the streaming bandwidth measured during
    the row (``stream_gbps_steps``; ``stream_gbps``, the run-start figure, where the row has none): the
    step's memory limit on this machine. Empty for models or methods the hardware model does not know."""
    from magicpig.harness import projection

    family = projection.method_family(row["method"], row["backend"])
    if family is None or not stream_gbps:
        return {}
    try:
        shape = projection.model_shape(model).with_dtype(projection.dtype_bytes(row["dtype"]))
    except ValueError:
        return {}
    sparse = None
    kv_elem = None
    if family == "magicpig":
        sparse = projection.sparse_setting(row["method"], shape.layers, float(row["sampled_fraction"]))
        if row.get("offload_dtype") not in (None, "", "auto"):
            kv_elem = projection.dtype_bytes(row["offload_dtype"])
    w = projection.step_work(shape, family, int(row["context"]), int(row["batch"]), sparse, kv_elem)
    nbytes = w.weight_bytes + w.exact_kv_bytes + w.sparse_bytes
    ms = float(row["ms_per_token"])
    start_ms = 1000 * nbytes / (stream_gbps * 1e9)
    in_row = row.get("stream_gbps_steps")
    limit_ms = 1000 * nbytes / (float(in_row) * 1e9) if in_row not in (None, "") else start_ms
    return {"bytes_per_step": int(nbytes), "stream_gbps": round(stream_gbps, 2), "bytes_limit_ms": round(limit_ms, 3),
            "x_bytes_limit": round(ms / limit_ms, 3), "x_bytes_limit_start": round(ms / start_ms, 3)}


class _Bench:
    """State shared by the rows of one run (model, environment facts, CSV)."""

    def __init__(self, model, config, shape_only, device, dtype, steps, warmup, csv_path, verbose,
                 offload_dtype=None, linear="auto", forward="auto", malloc_policy="default"):
        self.model, self.shape_only, self.net, self.tokenizer = model, shape_only, None, None
        self.device, self.dtype, self.steps, self.warmup = device, dtype, steps, warmup
        self.csv, self.verbose, self.offload_dtype = CsvAppender(csv_path, COLUMNS), verbose, offload_dtype
        self.linear, self.forward = linear, forward
        self.trim = malloc_policy == "converged"  # each row starts from a trimmed heap (allocator docstring)
        self.shape = ModelShape.of_config(config, dtype)
        self.stream_gbps = measure_stream_gbps() if device.type == "cpu" else None
        self.stream_buffer = None  # read between a CPU row's timed steps (StepBandwidth)
        if self.stream_gbps:
            from magicpig import cpu
            from magicpig.harness import bench_kernel

            nbytes = bench_kernel.stream_bytes_for(bench_kernel.llc_bytes()[0], IN_ROW_STREAM_MIN)
            self.stream_buffer = torch.ones(nbytes // 8, dtype=torch.int64)
            cpu.load().stream_read(self.stream_buffer, torch.get_num_threads())
            self.log(f"streaming read {self.stream_gbps:.1f} GB/s (bench kernel's method) at the start; each row "
                     f"reads {nbytes / 2**20:.0f} MiB after one timed step in {STREAM_EVERY}, and its "
                     "bytes-limit is its bytes per step at the bandwidth of those reads")
        self.rows: list[dict] = []
        machine = machine_record(str(device), load_cpu_module=True)
        self.common = {"model": model, "shape_only": shape_only, "device": str(device),
                       "device_name": device_name(device),
                       **{k: machine[k] for k in ("threads", "isa", "cpu_model", "torch_version")},
                       "malloc_policy": malloc_policy, "dtype": str(dtype).replace("torch.", ""),
                       "steps": steps, "warmup": warmup, "predicted_ms_per_token": "",
                       "offload_dtype": offload_dtype or "auto"}

    def log(self, msg: str) -> None:
        if self.verbose:
            print(f"[bench decode] {msg}", flush=True)

    def base_row(self, n, batch, spec, backend, fill, prefill_s, est=None) -> dict:
        row = dict.fromkeys(COLUMNS, "")
        row.update(self.common)
        row.update({"context": n, "batch": batch, "method": spec, "backend": backend, "fill": fill,
                    "prefill_seconds": round(prefill_s, 3) if prefill_s is not None else ""})
        if est is not None:
            row.update({"kv_bytes": est["kv"], "table_bytes": est["tables"],
                        "est_host_mb": round((est["host"] + (est["device"] if self.device.type == "cpu" else 0))
                                             / 2**20, 1),
                        "est_device_mb": round(est["device"] / 2**20, 1) if self.device.type != "cpu" else ""})
        return row

    def add(self, row: dict) -> dict:
        self.rows.append(row)
        self.csv.append(row)
        if row["fits"] is False:
            self.log(f"context {row['context']} batch {row['batch']} {row['method']}@{row['backend']}: "
                     f"does not fit ({row['reason']})")
        else:
            self.log(f"context {row['context']} batch {row['batch']} {row['method']}@{row['backend']}"
                     f"{' [' + row['search'] + ']' if row['search'] else ''}: {row['ms_per_token']:.1f} ms/token, "
                     f"{row['tokens_per_s']:.2f} tokens/s, setup {row['setup_seconds']:.1f} s, sampled "
                     f"{row['sampled_fraction']:.4f}{' (UNDER LOAD)' if row['under_load'] else ''}")
        return row

    def measure(self, pre1, n, batch, spec, backend, fill, prefill_s, steps=None, warmup=None,
                search="") -> dict:
        """One row: estimate, then (if it fits) time it; OOM becomes a fits=false row."""
        steps = self.steps if steps is None else steps
        warmup = self.warmup if warmup is None else warmup
        est = estimate_row(self.shape, spec, backend, n, batch, warmup + steps)
        row = self.base_row(n, batch, spec, backend, fill, prefill_s, est)
        row.update({"search": search, "steps": steps, "warmup": warmup})
        reason = fit_reason(est, self.device)
        if reason:
            row.update({"fits": False, "reason": "estimate: " + reason})
            return row
        _free_memory(self.trim)
        sampler = (StepBandwidth(self.stream_buffer, torch.get_num_threads(), warmup)
                   if self.stream_buffer is not None else None)
        out = None
        try:
            with RowMonitor(self.device) as mon:
                pre = repeat_batch(pre1, batch)
                if backend == "stock":
                    out = time_stock(self.net, pre, steps, warmup, sampler)
                else:
                    out = time_engine(self.net, self.tokenizer, pre, spec, backend, steps, warmup, self.offload_dtype,
                                      self.linear, self.forward, sampler)
                del pre
        except Exception as exc:  # noqa: BLE001 - only allocation failures are turned into rows
            if not is_oom(exc):
                raise
            row.update({"fits": False, "reason": f"out of memory: {str(exc).splitlines()[0][:200]}"})
        _free_memory(self.trim)  # after the except clause: its traceback no longer holds the row's tensors
        if out is None:
            return row
        if sampler is not None and sampler.seconds:  # the machine's bandwidth during this row
            after = sampler.after_read(out["step_seconds"])
            row.update({"stream_gbps_steps": round(sampler.gbps(), 2), "stream_samples": len(sampler.seconds),
                        "x_after_read": round(after, 3) if after is not None else ""})
        timed = out["step_seconds"][warmup:]
        total = sum(timed)
        per_step = total / max(1, len(timed))
        row.update(mon.fields())
        row.update({"fits": True, "ms_per_token": round(1000 * per_step, 3),
                    "tokens_per_s": round(batch * len(timed) / total, 3) if total > 0 else math.inf,
                    "setup_seconds": round(out["setup_seconds"], 3),
                    "sampled_fraction": round(float(out["sampled_fraction"]), 5), "linear": out["linear"],
                    "forward": out["forward"]})
        if backend != "offload":
            row["table_bytes"] = 0
        row.update(bytes_limit(self.model, row, self.stream_gbps))
        for key, secs in (out["timings"] or {}).items():
            if key == "setup":  # once per decode, not per step: setup_seconds
                continue
            row[f"{key}_ms"] = round(1000 * secs / max(1, len(timed)), 3)
        return row

    def refuse(self, n, batches, methods, fill, reason) -> None:
        """fits=false rows for every (batch, method) at context ``n``."""
        for b in batches:
            for spec, backend in methods:
                est = estimate_row(self.shape, spec, backend, n, b, self.warmup + self.steps)
                row = self.base_row(n, b, spec, backend, fill, None, est)
                row.update({"fits": False, "reason": reason})
                self.add(row)

    def max_batch(self, pre1, n, spec, backend, fill, prefill_s, limit: int) -> dict:
        """The largest batch <= ``limit`` that fits, measured with the full protocol. The estimate finds
        it (doubling, then bisection); the measurement at that batch is tried first, and only an actual
        OOM leads to short real probes (bisection downwards) and a measurement at the batch they find."""
        def est_fits(b: int) -> bool:
            return not fit_reason(estimate_row(self.shape, spec, backend, n, b, self.warmup + self.steps),
                                  self.device)

        def label(b: int) -> str:
            return f"max-batch (capped at --max-batch {limit})" if b == limit else "max-batch"

        if not est_fits(1):
            return self.measure(pre1, n, 1, spec, backend, fill, prefill_s, search=label(1))
        lo = 1
        while lo * 2 <= limit and est_fits(lo * 2):
            lo *= 2
        hi = min(lo * 2, limit + 1)  # lo fits, hi does not (or is past the limit)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if est_fits(mid) else (lo, mid)
        row = self.measure(pre1, n, lo, spec, backend, fill, prefill_s, search=label(lo))
        if row["fits"] or lo == 1:
            return row
        self.log(f"max-batch: batch {lo} passed the estimate but failed ({row['reason']}); probing below")
        good, bad = 0, lo
        while bad - good > 1:
            probe = (good + bad) // 2
            if self.measure(pre1, n, probe, spec, backend, fill, prefill_s, steps=1, warmup=1)["fits"]:
                good = probe
            else:
                bad = probe
        return self.measure(pre1, n, max(good, 1), spec, backend, fill, prefill_s, search=label(max(good, 1)))


def run(model: str = "smollm2", contexts=CONTEXTS, methods=METHODS, *, batches=BATCHES, steps: int = 128,
        warmup: int = 32, fill: str = "exact", tile_base: int = 8192, device: str | None = None,
        dtype: str | None = None, csv_path: str | None = None, prefill_chunk: int = 2048,
        max_throughput: bool = False, max_batch: int = 256, verbose: bool = True,
        offload_dtype: str | None = None, linear: str = "auto", forward: str = "auto",
        malloc: str = allocator.DEFAULT_POLICY) -> list[dict]:
    """Time decoding for every (context, batch, method@backend); returns the rows (also written to
    ``csv_path``, one appended row at a time: ``magicpig.atomic_io.CsvAppender``). methods: (spec, backend)
    pairs or ``SPEC[@BACKEND]`` strings.
    malloc: the host allocator policy (``allocator``), set for the rest of the process before the model loads."""
    from magicpig.models import load_model, resolve, shape_weight_bytes

    fill = "exact" if fill == "prefill" else fill  # "prefill": the old name of "exact"
    if fill not in FILLS:
        raise ValueError(f"fill must be one of {', '.join(FILLS)}, got {fill!r}")
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    contexts, batches = tuple(contexts), tuple(batches)
    if not contexts or any(c < 64 for c in contexts):
        raise ValueError(f"context lengths must be >= 64, got {list(contexts)}")
    if not batches or any(not isinstance(b, int) or b < 1 for b in batches):
        raise ValueError(f"batch sizes must be integers >= 1, got {list(batches)}")
    if tile_base < 64:
        raise ValueError(f"tile_base must be >= 64, got {tile_base}")
    if offload_dtype is not None:
        from magicpig.decoders import offload_dtype_of

        offload_dtype_of(offload_dtype)  # a clear error before the model is loaded
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    allocator.check_policy(malloc)
    from magicpig.decode_linear import check_linear_impl

    check_linear_impl(linear)
    from magicpig.decode_forward import check_forward_impl

    check_forward_impl(forward)
    methods = [parse_method_arg(m) if isinstance(m, str) else parse_method_arg(f"{m[0]}@{m[1]}") for m in methods]
    if not methods:
        raise ValueError("methods must not be empty")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: CUDA is not available on this machine")
    torch_dtype = resolve_dtype(dtype, device)
    src = resolve(model, allow_shape=True)
    if csv_path is None:
        csv_path = os.path.join("results", "bench", f"decode_{time.strftime('%Y%m%d-%H%M%S')}.csv")
    CsvAppender(csv_path, COLUMNS).start()  # a file of other columns is refused before the model loads

    malloc_policy = allocator.apply(malloc)
    if src.shape is not None:  # a shape model whose weights cannot fit is refused before it is built
        bench = _Bench(model, model_shape(src.shape).config(), True, dev, torch_dtype, steps, warmup, csv_path, verbose,
                       offload_dtype, linear, forward, malloc_policy)
        need = shape_weight_bytes(src.shape, torch_dtype)
        reason = fit_reason({"device": need}, dev)
        if reason:
            for n in contexts:
                bench.refuse(n, batches, methods, fill, f"estimate: the weights ({_fmt_gb(need)}) alone {reason}")
            if verbose:
                print(summary(bench.rows), flush=True)
            return bench.rows
    net, tokenizer = load_model(model, device=device, dtype=None if src.gguf_file and dtype in (None, "auto")
                                else torch_dtype, allow_shape=True)
    torch_dtype = next(net.parameters()).dtype
    if src.shape is None:
        bench = _Bench(model, net.config, False, dev, torch_dtype, steps, warmup, csv_path, verbose, offload_dtype,
                       linear, forward, malloc_policy)
    bench.net, bench.tokenizer = net, tokenizer
    bench.log(f"model {model}{' (shape-only: random weights)' if bench.shape_only else ''} on {dev} "
              f"({bench.common['device_name']}), {bench.common['dtype']}, {bench.common['threads']} threads")

    from magicpig.engine import Engine

    base_prefill = None  # (base, Prefill) kept for tiling
    for n in contexts:
        base = n if fill == "exact" else min(n, tile_base)
        fill_label = "exact" if base == n else f"tile({base})"
        need = estimate_prefill(bench.shape, base, n, prefill_chunk)
        reason = fit_reason(need, dev)
        if reason:
            bench.refuse(n, batches, methods, fill_label, f"estimate: the prefilled context {reason}")
            continue
        try:
            if base_prefill is None or base_prefill[0] != base:
                base_prefill = None
                _free_memory()
                ids = (essay_tokens(tokenizer, base) if tokenizer is not None
                       else random_tokens(bench.shape.vocab, base))
                t0 = time.perf_counter()
                base_prefill = (base, Engine(net, tokenizer, prefill_chunk=prefill_chunk,
                                             allow_long_context=True).prefill(ids))
                bench.log(f"prefilled {base} tokens in {time.perf_counter() - t0:.1f} s")
            pre1 = base_prefill[1] if base == n else tile_prefill(base_prefill[1], n)
        except Exception as exc:  # noqa: BLE001
            if not is_oom(exc):
                raise
            base_prefill = None
            _free_memory()
            bench.refuse(n, batches, methods, fill_label, f"out of memory in the prefill: {str(exc)[:200]}")
            continue
        prefill_s = base_prefill[1].seconds
        for b in batches:
            for spec, backend in methods:
                bench.add(bench.measure(pre1, n, b, spec, backend, fill_label, prefill_s))
        if max_throughput:
            for spec, backend in methods:
                bench.add(bench.max_batch(pre1, n, spec, backend, fill_label, prefill_s, max_batch))
        del pre1
        if fill == "exact":
            base_prefill = None
        _free_memory()
    if verbose:
        print(summary(bench.rows), flush=True)
        bench.log(f"wrote {csv_path}")
    return bench.rows


def summary(rows: list[dict]) -> str:
    """A text table: per (context, batch) and method@backend, ms/token, tokens/s and the ratio of tokens/s
    to dense@stock at the same context and batch (max-batch rows compare with stock's max-batch row), and
    ``x limit``: ms/token over the step's bytes-limit (its bytes at the measured streaming bandwidth)."""
    lines = [f"{'context':>8} {'batch':>5} {'method@backend':<34} {'ms/token':>10} {'tokens/s':>10} "
             f"{'vs stock':>8} {'x limit':>7}  note"]
    def key(r):
        return r["context"], ("max" if r["search"] else r["batch"])

    stock = {key(r): r for r in rows if r["backend"] == "stock" and r["fits"] is True}
    for r in rows:
        label = f"{r['method']}@{r['backend']}"
        if r["fits"] is not True:
            lines.append(f"{r['context']:>8} {r['batch']:>5} {label:<34} {'-':>10} {'-':>10} {'-':>8}  "
                         f"does not fit: {r['reason']}")
            continue
        ref = stock.get(key(r))
        ratio = f"{r['tokens_per_s'] / ref['tokens_per_s']:.2f}x" if ref and ref["tokens_per_s"] else "-"
        limit = f"{float(r['x_bytes_limit']):.2f}" if r.get("x_bytes_limit") not in (None, "") else "-"
        notes = [n for n, on in (("max batch", r["search"]), ("shape-only", r["shape_only"]),
                                 ("under load", r["under_load"])) if on]
        lines.append(f"{r['context']:>8} {r['batch']:>5} {label:<34} {r['ms_per_token']:>10.1f} "
                     f"{r['tokens_per_s']:>10.2f} {ratio:>8} {limit:>7}  {', '.join(notes)}")
    return "\n".join(lines)
