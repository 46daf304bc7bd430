"""The accuracy cost of the decode step's weight storage (``magicpig bench decode --weights``): logits of the
same decode steps with the model's float32 weights and with the bfloat16 / q8_0 copies kernel 4 reads.

One essay prompt of ``--context`` tokens is prefilled once (with the model's own weights); each storage then
decodes ``--steps`` tokens greedily. Per storage: the first decode step's largest and mean absolute logit
difference against float32 (the same input for all: the prefill's token), both over the float32 logits'
standard deviation; and how many of the greedy tokens equal float32's before the first that differs. The
needle answers come from ``magicpig eval --decode-weights``.

    python scripts/weights_accuracy.py --model smollm2 --context 4096 --steps 64 --method dense
"""
from __future__ import annotations

import argparse

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--method", default="dense", help="method spec (its backend: the system one)")
    args = p.parse_args()

    from magicpig.backends import system_backend
    from magicpig.engine import Engine, GenerationConfig
    from magicpig.harness.bench.prompts import essay_tokens
    from magicpig.methods import parse_method
    from magicpig.models import load_model

    net, tok = load_model(args.model)
    pre = Engine(net, tok).prefill(essay_tokens(tok, args.context))
    backend = system_backend(parse_method(args.method).name)
    cfg = GenerationConfig(max_new_tokens=args.steps, ignore_eos=True, return_logits=True)

    def decode(fmt: str):
        res = Engine(net, tok, backend=backend, decode_weights=fmt).decode(pre, args.method, cfg)[0]
        return res.token_ids, torch.stack(res.logits)

    ref_tokens, ref = decode("model")
    scale = ref[1].std()
    print(f"model {args.model}, context {args.context}, {args.steps} greedy steps, {args.method}@{backend}; "
          "first decode step's logits against the float32 weights' (over their std)")
    print(f"{'weights':<9} {'max |dlogit|/std':>17} {'mean |dlogit|/std':>18} {'same tokens':>12}")
    for fmt in ("model", "bfloat16", "q8_0"):
        tokens, got = decode(fmt)
        diff = (got[1] - ref[1]).abs() / scale  # logits[0] are the prefill's, the same for every storage
        same = next((i for i, (a, b) in enumerate(zip(tokens, ref_tokens)) if a != b), len(tokens))
        print(f"{fmt:<9} {diff.max().item():>17.4f} {diff.mean().item():>18.5f} {same:>7} of {len(tokens)}")

if __name__ == "__main__":
    main()
