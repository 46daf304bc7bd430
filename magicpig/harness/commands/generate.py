"""``magicpig generate``: answer one prompt with a chosen attention method and report speed and cost.

The file's text becomes the user turn of the model's chat template (``--no-chat-template``: raw text).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from magicpig.backends import BACKEND_CHOICES, DEFAULT_BACKEND
from magicpig.prefill_dtype import DEFAULT_PREFILL_DTYPE, PREFILL_DTYPES


def register(sub) -> None:
    p = sub.add_parser("generate", help="decode one prompt with an attention method (answer, tokens/s, cost)")
    p.add_argument("--model", default="smollm2", help="'smollm2' (embedded), 'qwen2.5-coder-0.5b' (32K context, `make setup-long`), a .gguf file, "
                   "a folder or a hub id")
    p.add_argument("--method", default="magicpig", help="method spec, e.g. 'magicpig:K=10,L=150' or 'dense'")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt-file", help="text file used as the user turn")
    src.add_argument("--prompt", help="the user turn as text")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default=DEFAULT_BACKEND,
                   help=f"reference: pure torch on the device; offload: MagicPIG's device + CPU split (methods "
                        f"without one decode on the device either way); default {DEFAULT_BACKEND}: offload when "
                        "the CPU module builds here, else reference")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda when available)")
    p.add_argument("--no-chat-template", action="store_true", help="feed the text as is")
    p.add_argument("--allow-long-context", action="store_true",
                   help="allow prompts beyond the model's max_position_embeddings (quality is not expected)")
    p.add_argument("--prefill-chunk", type=int, default=4096, help="prompt tokens per prefill forward")
    p.add_argument("--prefill-dtype", choices=PREFILL_DTYPES, default=DEFAULT_PREFILL_DTYPE,
                   help="dtype of the prefill's matrix products (default auto: bfloat16 on a CPU with AVX512-BF16 "
                        "or AMX, else float32, the reference); decode reads float32 keys and values either way")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _prompt_text(args) -> str:
    if args.prompt_file is None:
        if not args.prompt.strip():
            raise ValueError("--prompt is empty")
        return args.prompt
    path = Path(args.prompt_file)
    if not path.is_file():
        raise FileNotFoundError(f"--prompt-file: {path} does not exist" + (" (a folder)" if path.is_dir() else ""))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"--prompt-file: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ValueError(f"--prompt-file: cannot read {path}: {exc.strerror or exc}") from None
    if not text.strip():
        raise ValueError(f"--prompt-file: {path} is empty")
    return text


def run(args) -> int:
    from magicpig.backends import check_backend_limits, effective_backend, resolve_backend
    from magicpig.harness.argcheck import check_device, check_min, check_seed
    from magicpig.methods import parse_method

    # every argument is checked before the model is loaded
    method = parse_method(args.method)
    check_min(args.max_new_tokens, 0, "--max-new-tokens")
    check_min(args.prefill_chunk, 1, "--prefill-chunk")
    check_seed(args.seed)
    check_device(args.device)
    text = _prompt_text(args)
    backend = resolve_backend(args.backend, "--backend")  # 'auto' may build the CPU module here (once)
    check_backend_limits(method, backend)  # e.g. min_collisions beyond the offload backend's 8 bits

    from magicpig.engine import Engine, GenerationConfig
    from magicpig.models import load_model, prompt_ids, resolve

    resolve(args.model)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, stop=tuple(args.stop), do_sample=args.do_sample,
                              temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    model, tokenizer = load_model(args.model, device=args.device)
    ids = prompt_ids(tokenizer, text, chat=not args.no_chat_template)
    engine = Engine(model, tokenizer, backend=backend, prefill_chunk=args.prefill_chunk,
                    allow_long_context=args.allow_long_context, prefill_dtype=args.prefill_dtype)
    pre = engine.prefill(ids)
    res = engine.decode(pre, method, config)[0]
    ran_on = effective_backend(method.name, backend)  # methods without an offload decoder run on reference
    record = {"answer": res.text, "cost": res.cost, "cost1": res.cost1, "total_cost": res.total_cost,
              "tokens_per_s": res.tokens_per_s, "prompt_tokens": res.prompt_tokens, "new_tokens": res.new_tokens,
              "stop_reason": res.stop_reason, "prefill_seconds": pre.seconds, "setup_seconds": res.setup_seconds,
              "decode_seconds": res.seconds,
              "method": res.method, "params": method.params(), "backend": ran_on,
              "backend_requested": backend, "prefill_dtype": engine.prefill_dtype, "model": args.model,
              "device": str(engine.device)}
    if args.json:
        print(json.dumps(record))
    else:
        print(res.text)
        print(f"-- {res.new_tokens} tokens in {res.seconds:.2f} s ({res.tokens_per_s:.2f} tokens/s), "
              f"prompt {res.prompt_tokens} tokens (prefill {pre.seconds:.2f} s), method {res.method} "
              f"[{ran_on}, prefill {engine.prefill_dtype}], cost {res.cost:.4f} (+ search {res.cost1:.3f})",
              file=sys.stderr)
    return 0
