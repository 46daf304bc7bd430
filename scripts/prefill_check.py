"""Speed and accuracy of the bfloat16 prefill (``--prefill-dtype bfloat16``: autocast, kernel 8 for attention on
a CPU with AVX512-BF16) against the float32 reference, on the same RULER samples.

Each sample is prefilled both ways, in alternating order (float32 first on even samples), so a load change on
a shared machine touches both sides; each prefill is timed alone. Per sample: prefill tokens/s of each dtype
and their ratio, the first token's logits (largest absolute difference, top-1 agreement), and the task's score
of a greedy dense decode from each prefill. Printed: the per-sample lines, then the median and range of each
rate and of the per-sample ratio, the scores, and the load average before and after.

    python scripts/prefill_check.py --model smollm2 --task ruler/niah_single_1 --length 4096 --samples 20
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--task", default="ruler/niah_single_1")
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the per-sample rows to this file")
    args = p.parse_args()
    if args.samples < 1 or args.length < 16:
        raise SystemExit("--samples must be >= 1 and --length >= 16")

    import torch

    from magicpig.cpu.prefill import prefill_kernel_usable
    from magicpig.engine import Engine, GenerationConfig
    from magicpig.models import load_model
    from magicpig_tasks.registry import get_task

    net, tok = load_model(args.model)
    task = get_task(args.task)
    samples = task.build(tok, args.length, args.samples, args.seed)
    engines = {dtype: Engine(net, tok, prefill_dtype=dtype) for dtype in ("float32", "bfloat16")}
    engines["float32"].prefill(samples[0].prompt_ids[:256])  # first-call costs outside the timings
    engines["bfloat16"].prefill(samples[0].prompt_ids[:256])
    load_before = os.getloadavg()[0]
    print(f"{args.model} {args.task} {args.length} tokens, {len(samples)} samples, torch threads "
          f"{torch.get_num_threads()}, kernel 8 {'on' if prefill_kernel_usable() else 'off (SDPA)'}", flush=True)
    rows = []
    for i, sample in enumerate(samples):
        order = ("float32", "bfloat16") if i % 2 == 0 else ("bfloat16", "float32")
        row = {"id": sample.id, "tokens": sample.n_tokens}
        pre = {}
        for dtype in order:
            t0 = time.perf_counter()
            pre[dtype] = engines[dtype].prefill(sample.prompt_ids)
            row[f"{dtype}_tokens_per_s"] = sample.n_tokens / (time.perf_counter() - t0)
        ref, fast = pre["float32"].logits[0], pre["bfloat16"].logits[0]
        row["max_abs_logit_diff"] = float((ref - fast).abs().max())
        row["top1_same"] = int(ref.argmax()) == int(fast.argmax())
        cfg = GenerationConfig(max_new_tokens=sample.max_new_tokens, stop=list(sample.stop), do_sample=False)
        for dtype in ("float32", "bfloat16"):
            text = engines[dtype].decode(pre[dtype], "dense", cfg)[0].text
            row[f"{dtype}_score"] = task.score(text, sample)
            row[f"{dtype}_answer"] = text.strip()
        row["ratio"] = row["bfloat16_tokens_per_s"] / row["float32_tokens_per_s"]
        rows.append(row)
        print(f"  {sample.id}: float32 {row['float32_tokens_per_s']:.1f} tok/s, bfloat16 "
              f"{row['bfloat16_tokens_per_s']:.1f} ({row['ratio']:.2f}x); logits max |diff| "
              f"{row['max_abs_logit_diff']:.3f}, top-1 {'same' if row['top1_same'] else 'DIFFERENT'}; scores "
              f"{row['float32_score']:.0f} / {row['bfloat16_score']:.0f}", flush=True)

    def spread(key: str) -> str:
        values = [r[key] for r in rows]
        return f"median {statistics.median(values):.2f} (range {min(values):.2f}-{max(values):.2f})"

    print(f"float32 tokens/s {spread('float32_tokens_per_s')}; bfloat16 tokens/s {spread('bfloat16_tokens_per_s')}")
    print(f"per-sample ratio bfloat16 / float32: {spread('ratio')}")
    print(f"score float32 {statistics.mean(r['float32_score'] for r in rows):.1f}, bfloat16 "
          f"{statistics.mean(r['bfloat16_score'] for r in rows):.1f}; same answer in "
          f"{sum(r['float32_answer'] == r['bfloat16_answer'] for r in rows)} of {len(rows)}; top-1 of the first "
          f"token the same in {sum(r['top1_same'] for r in rows)}; largest logit difference "
          f"{max(r['max_abs_logit_diff'] for r in rows):.3f}")
    print(f"load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
