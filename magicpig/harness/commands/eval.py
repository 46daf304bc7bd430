"""``magicpig eval``: accuracy benchmarks (RULER, LongBench, GSM8K-CoT) for several attention methods.

Each sample is prefilled once and decoded with every method; results are written per (task, length,
method) and the run resumes where it stopped, refusing to mix rows made with other settings (see
``magicpig.harness.evaluate``). Ctrl-C stops with one line saying how many samples are saved (exit code 130).
"""
from __future__ import annotations

import argparse

from magicpig.backends import BACKEND_CHOICES, DEFAULT_BACKEND
from magicpig.decode_weights import WEIGHT_FORMATS
from magicpig.harness.result_files import LAST_RUN
from magicpig.options import SETUPS
from magicpig.prefill_dtype import DEFAULT_PREFILL_DTYPE, PREFILL_DTYPES


def register(sub) -> None:
    p = sub.add_parser("eval", help="run accuracy benchmarks for one or more attention methods",
                       description="Writes OUT/<task>/<length>/<method dir>/{predictions.jsonl,metrics.json}; "
                                   "method dir = the spec with ':'->'@', ','->'+', '='->'-', '/'->'.'.")
    p.add_argument("--model", default="smollm2", help="'smollm2' (embedded), 'qwen2.5-coder-0.5b' (32K context, `make setup-long`), a .gguf file, "
                   "a folder or a hub id")
    p.add_argument("--methods", default=None,
                   help="method specs separated by ';' (specs contain ','), e.g. 'dense;magicpig:K=10,L=150'")
    p.add_argument("--method", action="append", default=[],
                   help="one method spec (repeatable); list values inside it use '/', e.g. dense_layers=0/16")
    p.add_argument("--methods-module", action="append", default=[], metavar="FILE.py|MODULE",
                   help="import the user's module that registers more methods (magicpig.methods.register) "
                        "first; repeatable. Entry points of the group 'magicpig.methods' load too")
    p.add_argument("--task", action="append", required=True,
                   help="task or group name (repeatable, or ',' separated); see `magicpig tasks`")
    p.add_argument("--length", action="append", required=True,
                   help="prompt length in tokens (RULER target; LongBench/GSM8K cap); repeatable or ',' separated")
    p.add_argument("--samples", type=_samples, default=50,
                   help="samples per task and length (default 50); 'all': every record (LongBench, GSM8K)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--setup", choices=SETUPS, default="A",
                   help="A: prefill context+question (paper); B: prefill context, decode the question sparsely")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default=DEFAULT_BACKEND,
                   help=f"engine backend (default {DEFAULT_BACKEND}: offload when the CPU module builds here, else "
                        "reference): reference (pure torch) or offload (MagicPIG's device + CPU split; methods "
                        "without an offload decoder run on reference, as metrics.json records)")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda when available)")
    p.add_argument("--prefill-dtype", choices=PREFILL_DTYPES, default=DEFAULT_PREFILL_DTYPE,
                   help="dtype of the prefill's matrix products (default auto: bfloat16 on a CPU with AVX512-BF16 "
                        "or AMX, else float32, the reference); decode reads float32 keys and values either way")
    p.add_argument("--decode-weights", choices=WEIGHT_FORMATS, default="model",
                   help="how the CPU module's kernel 4 stores the linear weights it reads in decode steps (default "
                        "model: the model's own tensors; bfloat16 / q8_0: the storages bench decode times)")
    p.add_argument("--data", action="append", default=[], metavar="TASK=PATH",
                   help="local data file for a task (e.g. ruler/qa_1=dev-v2.0.json); repeatable")
    p.add_argument("--max-new-tokens", type=int, default=None, help="override every task's answer budget")
    p.add_argument("--allow-long-context", action="store_true", help="permit prompts beyond the model's context")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress output (default: a bar on a terminal, else a plain line at least every "
                        "30 s: sample i of n, elapsed, ETA)")
    p.add_argument("--overwrite", action="store_true",
                   help="discard stored predictions made with other settings (model, method, setup, backend, "
                        "prefill dtype, max-new-tokens, seed, device, task settings) instead of refusing to run")
    from magicpig_tasks.settings import SETTINGS

    for name, setting in SETTINGS.items():  # one flag per task setting
        if setting.choices:
            p.add_argument(setting.option, dest=name, choices=setting.choices, default=setting.default,
                           help=f"{setting.help} (default {setting.default})")
        else:
            p.add_argument(setting.option, dest=name, action="store_true", help=setting.help)
    p.set_defaults(func=run)


def _samples(text: str) -> int | None:
    """--samples: a count, or 'all' (None: every record of the task)."""
    if text.strip().lower() == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'all', got {text!r}") from None


def _lengths(values: list[str]) -> list[int]:
    out = []
    for v in values:
        for part in v.split(","):
            part = part.strip().lower()
            if not part:
                continue
            mult = 1024 if part.endswith("k") else 1
            try:
                out.append(int(part[:-1] if mult > 1 else part) * mult)
            except ValueError:
                raise ValueError(f"length: expected an integer number of tokens (or e.g. 4k), got {part!r}") from None
    return out


def _data(values: list[str]) -> dict[str, str]:
    out = {}
    for v in values:
        name, eq, path = v.partition("=")
        if not eq or not name or not path:
            raise ValueError(f"data: expected TASK=PATH, got {v!r}")
        out[name.strip()] = path.strip()
    return out


def run(args) -> int:
    import json
    from pathlib import Path

    from magicpig.atomic_io import write_text_atomic
    from magicpig.harness.evaluate import EvalConfig, format_table, run_eval
    from magicpig.methods.plugins import load_methods
    from magicpig.methods.spec_names import split_methods
    from magicpig_tasks.settings import SETTINGS

    load_methods(args.methods_module, "--methods-module")
    methods = (split_methods(args.methods) if args.methods else []) + list(args.method)
    if not methods:
        raise ValueError("methods: give --methods 'dense;magicpig:K=10,L=150' or --method SPEC")
    cfg = EvalConfig(model=args.model, methods=methods, tasks=list(args.task), lengths=_lengths(args.length),
                     samples=args.samples, out=Path(args.out), seed=args.seed, setup=args.setup,
                     backend=args.backend, device=args.device, decode_weights=args.decode_weights,
                     prefill_dtype=args.prefill_dtype,
                     data=_data(args.data),
                     max_new_tokens=args.max_new_tokens, allow_long_context=args.allow_long_context,
                     progress=not args.no_progress, overwrite=args.overwrite,
                     task_settings={name: getattr(args, name) for name in SETTINGS})
    results = run_eval(cfg)
    print(format_table(results))
    for m in results:
        if m.get("status") != "ok":
            print(f"{m['task']} @ {m['length']} / {m['method']}: {m['status']}"
                  + (f" ({m['reason']})" if m.get("reason") else ""))
    # parallel jobs may share --out: whole files only
    write_text_atomic(Path(args.out) / LAST_RUN.name, json.dumps(results, indent=2, default=str) + "\n")
    return 0
