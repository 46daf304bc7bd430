"""``dense@llamacpp`` in ``magicpig bench decode``: the same GGUF file decoded by llama.cpp (through
llama-cpp-python's C API, CPU only), the decoder a CPU user would otherwise run.

Protocol (as for the other rows): the context's tokens are prefilled for real (llama.cpp's KV cache cannot
be tiled from a shorter prefill, so a ``tile`` run's llama.cpp rows say ``fill=exact``; the prefilled
sequence's state is kept and restored for the next row of the same context and batch: llama.cpp restores
a state only into as many KV streams as it was saved from), copied to every sequence of the batch
(``llama_memory_seq_cp``: each sequence its own KV stream), then ``warmup`` untimed and ``steps`` timed
decode steps of one token per sequence: ``llama_decode`` and the greedy pick of each
sequence's next token from its logits. Flash attention on, the KV cache in ``kv_type`` (f16 or q8_0), the
same thread count as the engine's rows. llama-cpp-python's own default is flash attention off; llama.cpp's
command line defaults to auto, which picks it on a CPU.

With a state folder (``bench decode --llamacpp-state-dir DIR``) the prefilled sequence's state is also kept on
disk, named by a hash of what it depends on (the GGUF file's bytes, the token ids, the KV type, the batch, the
threads, the bindings' version), and a later run restores it instead of prefilling again (18 minutes at 32K on
2 cores): the decode steps a row times are the same either way, and the run's log says which rows restored.

The bindings are an optional extra (``make setup-llamacpp``). ``unavailable_reason`` says why a row cannot
run (bindings missing, a model without a GGUF file), and the row is written with ``fits=false`` and that
reason instead.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import json
import os
import time

import numpy as np

from magicpig.atomic_io import write_bytes_atomic, write_text_atomic

KV_TYPES = {"f16": 1, "q8_0": 8}  # ggml_type of the KV cache
KV_ELEM_BYTES = {"f16": 2.0, "q8_0": 34 / 32}
FLASH_ATTN_ENABLED = 1  # llama_flash_attn_type
N_BATCH = 2048  # prompt tokens per llama_decode call in the prefill
N_UBATCH = 512
CTX_PAD = 256
_quiet = None  # the log callback handed to llama.cpp (kept alive here)
_prefilled: dict = {}  # the last prefill: {"key": (path, ids, kv, threads, batch), "state": ..., "first": token}


def _silence(lc) -> None:
    """llama.cpp's own log (model and context details, per call) goes nowhere: the row records what counts."""
    global _quiet
    if _quiet is None:
        _quiet = lc.llama_log_callback(lambda level, text, data: None)
        lc.llama_log_set(_quiet, ctypes.c_void_p(0))


def unavailable_reason(gguf_path: str | None) -> str | None:
    """Why llama.cpp rows cannot run here (None: they can)."""
    if gguf_path is None:
        return "llama.cpp runs GGUF files; this model has none (a hub folder or shape-only model)"
    if not bindings_installed():
        return "llama.cpp bindings not installed (make setup-llamacpp)"
    return None


def bindings_installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def version() -> str:
    """``llama-cpp-python X (llama.cpp build flags)``: the package version and its system info line."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    return f"llama-cpp-python {llama_cpp.__version__} ({info})"


def estimate_nbytes(gguf_path: str, shape, n: int, batch: int, new_tokens: int, kv_type: str) -> int:
    """Host bytes of a llama.cpp row: the GGUF file (mapped), the KV cache of ``batch`` sequences of
    ``n + new_tokens`` tokens in ``kv_type``, the kept prefill state (one sequence of ``n``) and the prefill's
    compute buffer (logits of N_UBATCH tokens and the activations of one ubatch, generously)."""
    tokens = (n + new_tokens) * batch + n
    kv = shape.layers * tokens * shape.kv_bytes_per_token_layer(KV_ELEM_BYTES[kv_type])
    compute = N_UBATCH * (shape.vocab + 8 * shape.intermediate + 8 * shape.hidden) * 4
    return int(os.path.getsize(gguf_path) + kv + compute)


def check_state_dir(state_dir: str | None) -> None:
    """``state_dir`` (``--llamacpp-state-dir``): None, or a folder (created on first use); else ValueError."""
    if state_dir is not None and os.path.exists(state_dir) and not os.path.isdir(state_dir):
        raise ValueError(f"llamacpp_state_dir {state_dir!r} exists and is not a folder")


@functools.lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _state_paths(state_dir: str, gguf_path: str, ids, kv_type: str, threads: int, batch: int) -> tuple[str, str]:
    """(state file, its record) in ``state_dir``, named by the sha256 of everything the state depends on: the
    names are ours (hex digits), never read from the folder."""
    import llama_cpp

    st = os.stat(gguf_path)
    key = {"gguf_sha256": _file_sha256(gguf_path, st.st_size, st.st_mtime_ns), "kv": kv_type, "threads": threads,
           "batch": batch, "bindings": llama_cpp.__version__}
    h = hashlib.sha256(json.dumps(key, sort_keys=True).encode())
    h.update(np.asarray(ids, dtype=np.int64).tobytes())
    base = os.path.join(state_dir, h.hexdigest())
    return base + ".state", base + ".json"


def _load_state(paths: tuple[str, str], n_vocab: int):
    """(state bytes, first token) kept by an earlier run, or None when the folder has none for this key. A record
    that does not describe its state file (another size, a token outside the vocabulary) is an error naming it."""
    state_path, record_path = paths
    if not (os.path.isfile(state_path) and os.path.isfile(record_path)):
        return None
    with open(record_path, encoding="utf-8") as f:
        record = json.load(f)
    first, size = (record.get("first_token"), record.get("bytes")) if isinstance(record, dict) else (None, None)
    ok = isinstance(first, int) and 0 <= first < n_vocab and isinstance(size, int)
    if not ok or size != os.path.getsize(state_path):
        raise ValueError(f"llama.cpp state record {record_path} does not describe {state_path}: delete both")
    with open(state_path, "rb") as f:
        return (ctypes.c_uint8 * size).from_buffer_copy(f.read()), first


def _save_state(paths: tuple[str, str], state, first: int) -> None:
    """The state, then its record (which marks it complete), each replaced in one step (``atomic_io``)."""
    write_bytes_atomic(paths[0], bytes(state))
    write_text_atomic(paths[1], json.dumps({"first_token": first, "bytes": len(state)}))


class _Batch:
    """A ``llama_batch`` of up to ``capacity`` tokens, each in one sequence."""

    def __init__(self, capacity: int):
        import llama_cpp

        self.lib, self.capacity = llama_cpp, capacity
        self.batch = llama_cpp.llama_batch_init(capacity, 0, capacity)

    def fill(self, tokens, positions, seqs, want_logits) -> None:
        b = self.batch
        b.n_tokens = len(tokens)
        for i, (tok, pos, seq, out) in enumerate(zip(tokens, positions, seqs, want_logits)):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = int(tok), int(pos), 1, bool(out)
            b.seq_id[i][0] = int(seq)

    def free(self) -> None:
        self.lib.llama_batch_free(self.batch)


def time_llamacpp(gguf_path: str, ids: list[int], batch: int, steps: int, warmup: int, threads: int,
                  kv_type: str = "f16", state_dir: str | None = None) -> dict:
    """Prefill ``ids`` with llama.cpp (or restore the last row's prefill of the same ids, or with ``state_dir``
    an earlier run's), copy the context to ``batch`` sequences and time the decode steps. Returns the dict
    ``timed_decode.time_engine`` returns, ``first_token`` (the prefill's greedy token), ``last_tokens`` (each
    sequence's pick at the last step) and ``prefill``: ``run``,
    ``kept`` (this process's earlier row) or ``restored`` (from ``state_dir``); raises MemoryError when llama.cpp
    cannot allocate its context or a step fails."""
    import llama_cpp as lc

    if kv_type not in KV_TYPES:
        raise ValueError(f"llamacpp_kv must be one of {', '.join(KV_TYPES)}, got {kv_type!r}")
    _silence(lc)
    lc.llama_backend_init()
    mparams = lc.llama_model_default_params()
    mparams.n_gpu_layers = 0
    t0 = time.perf_counter()
    model = lc.llama_model_load_from_file(gguf_path.encode(), mparams)
    if not model:
        raise ValueError(f"llama.cpp could not load {gguf_path}")
    ctx = None
    batches: list[_Batch] = []
    try:
        n = len(ids)
        # cells per sequence, a multiple of llama.cpp's padding of n_ctx (256): every row of the batch gives
        # each sequence the same cells, and the kept prefill state restores into them
        per_seq = -(-(n + warmup + steps + 1) // CTX_PAD) * CTX_PAD
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = per_seq * batch
        cparams.n_batch, cparams.n_ubatch = N_BATCH, N_UBATCH
        cparams.n_seq_max = batch
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.flash_attn_type = FLASH_ATTN_ENABLED
        cparams.type_k = cparams.type_v = KV_TYPES[kv_type]
        cparams.kv_unified = False  # one KV stream per sequence: each holds its own copy, as the engine's rows
        cparams.no_perf = True
        ctx = lc.llama_init_from_model(model, cparams)
        if not ctx:
            raise MemoryError(f"llama.cpp could not allocate a context of {batch} x {per_seq} tokens")
        vocab = lc.llama_model_get_vocab(model)
        n_vocab = lc.llama_vocab_n_tokens(vocab)
        step_batch = _Batch(batch)
        batches.append(step_batch)
        # a sequence's saved state restores only into a context of the same number of KV streams (sequences)
        key = (gguf_path, tuple(ids), kv_type, threads, batch)
        paths = _state_paths(state_dir, gguf_path, ids, kv_type, threads, batch) if state_dir else None
        if _prefilled.get("key") != key and paths and (kept := _load_state(paths, n_vocab)) is not None:
            _prefilled.update(key=key, state=kept[0], first=kept[1], source="restored")
        if _prefilled.get("key") == key:  # the same context and batch prefilled before: restored
            state = _prefilled["state"]
            if lc.llama_state_seq_set_data(ctx, state, len(state), 0) == 0:
                raise MemoryError("llama.cpp could not restore the prefilled sequence")
            first, prefill = _prefilled["first"], _prefilled.pop("source", "kept")
        else:
            prefill = "run"
            _prefilled.clear()
            prompt = _Batch(min(N_BATCH, n))
            batches.append(prompt)
            for lo in range(0, n, N_BATCH):
                chunk = ids[lo:lo + N_BATCH]
                last = lo + len(chunk) == n
                prompt.fill(chunk, range(lo, lo + len(chunk)), [0] * len(chunk),
                            [last and i == len(chunk) - 1 for i in range(len(chunk))])
                if lc.llama_decode(ctx, prompt.batch) != 0:
                    raise MemoryError(f"llama_decode failed in the prefill at token {lo}")
            first = _argmax(lc.llama_get_logits_ith(ctx, -1), n_vocab)
            size = lc.llama_state_seq_get_size(ctx, 0)
            state = (ctypes.c_uint8 * size)()
            lc.llama_state_seq_get_data(ctx, state, size, 0)
            _prefilled.update(key=key, state=state, first=first)
            if paths:
                _save_state(paths, state, first)
        mem = lc.llama_get_memory(ctx)
        for s in range(1, batch):
            lc.llama_memory_seq_cp(mem, 0, s, -1, -1)
        setup = time.perf_counter() - t0
        tokens = [first] * batch
        step_seconds = []
        for t in range(warmup + steps):
            t_step = time.perf_counter()
            step_batch.fill(tokens, [n + t] * batch, range(batch), [True] * batch)
            if lc.llama_decode(ctx, step_batch.batch) != 0:
                raise MemoryError(f"llama_decode failed at decode step {t} (batch {batch}, context {n + t})")
            tokens = [_argmax(lc.llama_get_logits_ith(ctx, i), n_vocab) for i in range(batch)]
            step_seconds.append(time.perf_counter() - t_step)
    finally:
        for b in batches:
            b.free()
        if ctx:
            lc.llama_free(ctx)
        lc.llama_model_free(model)
    return {"step_seconds": step_seconds, "setup_seconds": setup, "sampled_fraction": 1.0, "timings": None,
            "linear": "llamacpp", "forward": "llamacpp", "first_token": first, "prefill": prefill,
            "last_tokens": tokens}


def _argmax(logits_ptr, n_vocab: int) -> int:
    return int(np.ctypeslib.as_array(ctypes.cast(logits_ptr, ctypes.POINTER(ctypes.c_float)), (n_vocab,)).argmax())
