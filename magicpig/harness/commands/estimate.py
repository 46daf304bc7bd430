"""``magicpig estimate``: attention-level experiments on captured queries/keys/values.

    magicpig estimate capture  --model smollm2 --context 8192      # one exact prefill -> .safetensors capture
    magicpig estimate spread|error|kl-grid|centering|geometry|mass-curve|... --capture PATH [--capture PATH2 ...]
    magicpig estimate all --capture PATH [--capture PATH2 ...]     # every experiment of the registry
    magicpig estimate inputs --model smollm2 --inputs 32 --sentences 50   # keys across many short inputs

Each experiment (``magicpig.harness.estimate_experiments``: the registry) writes its table (rows per layer /
head / key, one block per capture, named in the ``prompt`` column), its summary (means over MagicPIG's sparse
layers and the captures) and its extra tables into ``<out-dir>``, and prints the summary.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from magicpig.harness.estimate_experiments import BY_TABLE, NAMES, Settings, reads, selected
from magicpig.harness.progress import heartbeat

# queries of the heavy experiments (``Experiment.heavy``: error, kl-grid, centering), spread over the captures:
# 8 of one capture, 4 of each of two, 2 (at least) of each of more
HEAVY_QUERIES = 8
DEFAULT_OUT = "results/estimation"


def _ints(text: str, field: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{field}: expected comma-separated integers, got {text!r}") from None
    if not vals:
        raise ValueError(f"{field}: expected at least one integer")
    return vals


def _floats(text: str, field: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{field}: expected comma-separated numbers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise ValueError(f"{field}: expected positive numbers, got {text!r}")
    return vals


def _paper_kl() -> list[tuple[int, int]]:
    """The paper's RULER/LongBench (K, L) settings (config/paper_reference.yaml), the default of --kl."""
    from magicpig_tasks.paper import kl_settings

    return [(m.K, m.L) for m in kl_settings("ruler_longbench")]


def register(sub) -> None:
    from magicpig_tasks.experiments.capture import KV_DTYPES

    p = sub.add_parser("estimate",
                       help="attention-level experiments (spread, error, (K,L) grid, centering, geometry)")
    esub = p.add_subparsers(dest="experiment", metavar="EXPERIMENT")

    c = esub.add_parser("capture", help="run one exact prefill (+ greedy decode steps) and save queries/keys/values")
    c.add_argument("--model", default="smollm2", help="smollm2, a .gguf file, a model folder or a hub id")
    c.add_argument("--context", type=int, default=8192 - 16, help="prompt length in tokens")
    c.add_argument("--decode-steps", type=int, default=15, help="greedy decode steps whose queries are kept")
    c.add_argument("--prompt-queries", type=int, default=1, help="keep queries of the last N prompt positions")
    c.add_argument("--layers", default="all", help="all, every:N, or a list like 0,2,5-9")
    c.add_argument("--depth", type=float, default=0.5, help="needle depth in [0, 1]")
    c.add_argument("--seed", type=int, default=0, help="picks the needle's key and value")
    c.add_argument("--haystack-offset", type=int, default=0,
                   help="token of the essay corpus the haystack starts at (several prompts of one length differ)")
    c.add_argument("--kv-dtype", choices=KV_DTYPES, default="float16")
    c.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    c.add_argument("--out", default=None,
                   help="capture file (default results/estimation/captures/<model>_<context>.safetensors)")
    c.add_argument("--force", action="store_true", help="recapture even if the file exists")
    c.set_defaults(func=run_capture)

    from magicpig.harness.estimate_inputs import add_parser as add_inputs_parser

    add_inputs_parser(esub)

    for name in NAMES + ("all",):
        e = esub.add_parser(name, help=f"run the {name} experiment" if name != "all" else "run every experiment")
        e.add_argument("--capture", required=True, action="append",
                       help="capture file from `magicpig estimate capture`; repeat for several prompts (every "
                            "table gets a `prompt` column, the file's stem; summaries average over prompts)")
        e.add_argument("--out-dir", default=DEFAULT_OUT)
        e.add_argument("--layers", default=None,
                       help="captured layers to use: all, every:N, or a list (default: all for spread/geometry, "
                            "every:3 for the others)")
        e.add_argument("--max-queries", type=int, default=None,
                       help="use at most N of the captured queries (default: all for the light experiments; for "
                            "error, kl-grid and centering 8 in total over the captures, at least 2 each)")
        e.add_argument("--seed", type=int, default=0)
        e.add_argument("--sinks", type=int, default=4)
        e.add_argument("--local", type=int, default=64)
        groups = reads(name)
        if "budgets" in groups:
            e.add_argument("--budgets", default="0.005,0.01,0.02,0.04,0.1", help="TopK/oracle budget fractions")
        if "kl" in groups:
            e.add_argument("--kl", action="append", metavar="K,L",
                           help="a MagicPIG (K, L) setting written K,L; repeat for more (default: the paper's "
                                "RULER/LongBench settings 10,150 10,170 9,120 8,75)")
        if "grid" in groups:
            e.add_argument("--K", default="7,8,9,10,11")
            e.add_argument("--L", default="75,100,120,150,200,300")
        if "heads" in groups:  # error: which heads are long-tailed (its per-head TopK/oracle table)
            e.add_argument("--top-frac", type=float, default=0.2)
            e.add_argument("--sink-tokens", type=int, default=1)
        e.add_argument("--json", action="store_true", help="print the summary as JSON records")
        e.set_defaults(func=run_experiment, experiment_name=name)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_capture(args) -> int:
    import torch

    from magicpig_tasks.experiments.capture import capture_for_model, default_capture_path

    from magicpig.harness.argcheck import (check_device, check_fraction, check_layer_spec, check_min, check_seed,
                                           check_writable_file)
    from magicpig.harness.machine import machine_record
    from magicpig.models import resolve

    out = Path(args.out) if args.out else default_capture_path(args.model, args.context)
    if out.is_file() and not args.force:
        print(f"{out} exists (use --force to recapture)")
        return 0
    # every argument is checked before the model is loaded
    check_min(args.context, 64, "--context")
    check_min(args.decode_steps, 0, "--decode-steps")
    check_min(args.prompt_queries, 0, "--prompt-queries")
    check_layer_spec(args.layers)
    check_fraction(args.depth, "--depth", closed_low=True)
    check_seed(args.seed)
    check_min(args.haystack_offset, 0, "--haystack-offset")
    check_device(args.device)
    check_writable_file(out, "--out")
    resolve(args.model)
    with heartbeat(f"capture {args.model} @ {args.context}"):  # a line at least every 30 s in a log
        cap = capture_for_model(args.model, args.context, layers=args.layers, decode_steps=args.decode_steps,
                                prompt_queries=args.prompt_queries, depth=args.depth, seed=args.seed,
                                haystack_offset=args.haystack_offset, kv_dtype=getattr(torch, args.kv_dtype),
                                device=args.device,
                                progress=lambda m: print(m, file=sys.stderr, flush=True))
    cap.meta["machine"] = machine_record(args.device)
    cap.save(out)
    print(json.dumps({"capture": str(out), "n_prompt": cap.n_prompt, "n_keys": cap.n_keys,
                      "layers": len(cap.layers), "queries": int(cap.queries.shape[1]),
                      "prefill_seconds": cap.meta.get("prefill_seconds"),
                      "needle_found": cap.meta.get("needle_found"),
                      "generated_text": cap.meta.get("generated_text")}, indent=2))
    return 0


def run_experiment(args) -> int:
    import pandas as pd

    from magicpig_tasks.experiments.capture import Capture

    experiments = selected(args.experiment_name)
    from magicpig.harness.argcheck import (check_fraction, check_kl_option, check_layer_spec, check_min,
                                           check_seed, check_writable_dir)
    from magicpig.lsh import check_kl

    # validate cheap arguments before loading the capture
    budgets = _floats(args.budgets, "--budgets") if hasattr(args, "budgets") else None
    kl = ([check_kl_option(x) for x in args.kl] if args.kl else _paper_kl()) if hasattr(args, "kl") else None
    Ks = _ints(args.K, "--K") if hasattr(args, "K") else None
    Ls = _ints(args.L, "--L") if hasattr(args, "L") else None

    if args.max_queries is not None:
        check_min(args.max_queries, 1, "--max-queries")
    for K, L in [(K, L) for K in Ks or [] for L in Ls or []]:
        try:
            check_kl(K, L)
        except ValueError as exc:
            raise ValueError(f"--K/--L: {exc}") from None
    check_layer_spec(args.layers)
    check_seed(args.seed)
    check_min(args.sinks, 0, "--sinks")
    check_min(args.local, 0, "--local")
    if hasattr(args, "top_frac"):
        check_fraction(args.top_frac, "--top-frac")
        check_min(args.sink_tokens, 0, "--sink-tokens")
    captures = [Path(c) for c in args.capture]
    for c in captures:
        if not c.is_file():
            raise FileNotFoundError(f"--capture: {c} does not exist (run `magicpig estimate capture` first)")
    labels = [c.stem for c in captures]
    if len(set(labels)) < len(labels):
        raise ValueError(f"--capture: two captures share a file name ({', '.join(labels)}); their rows would mix")
    out_dir = check_writable_dir(args.out_dir, "--out-dir")
    settings = Settings(args.layers, args.max_queries, args.seed, args.sinks, args.local,
                        budgets=tuple(budgets) if budgets else None, kl=tuple(kl) if kl else None,
                        Ks=tuple(Ks) if Ks else None, Ls=tuple(Ls) if Ls else None,
                        top_frac=getattr(args, "top_frac", None), sink_tokens=getattr(args, "sink_tokens", None))
    tables: dict = {}  # result file -> one frame per capture, each with its `prompt` column
    meta = {}
    with heartbeat(f"estimate {args.experiment_name}"):  # a line at least every 30 s in a log
        for path, label in zip(captures, labels):
            cap = Capture.load(path)
            meta = {"model": cap.meta.get("model", ""), "seed": args.seed}
            row_meta = {"prompt": label, "n_prompt": cap.n_prompt, "capture": path.name, **meta}
            tables_of = _experiment_tables(cap, experiments, settings,
                                           heavy_queries=max(2, math.ceil(HEAVY_QUERIES / len(captures))))
            for entry, df in tables_of.items():
                tables.setdefault(entry, []).append(df.assign(**row_meta))
    report = {}
    all_meta = {**meta, "prompts": len(captures), "capture": ";".join(c.name for c in captures)}
    for entry, frames in tables.items():
        df = pd.concat(frames, ignore_index=True)
        df.to_csv(out_dir / entry.name, index=False)
        experiment = BY_TABLE.get(entry)
        if experiment is None:  # the extra tables of an experiment (error_topk_vs_oracle, geometry_hist)
            continue
        name = experiment.name
        summary = experiment.summarize(df).assign(**all_meta)
        summary.to_csv(out_dir / experiment.summary.name, index=False)
        report[name] = summary
        if not args.json:
            print(f"== {name} (means over MagicPIG's sparse layers and {len(captures)} prompt(s)) -> "
                  f"{out_dir / entry.name}")
            print(summary.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if args.json:
        print(json.dumps({k: json.loads(v.to_json(orient="records")) for k, v in report.items()}, indent=2))
    return 0


def _experiment_tables(cap, experiments, settings: Settings, *, heavy_queries: int) -> dict:
    """The tables of ``experiments`` on one capture: result file -> frame (each experiment's own table and its
    extra ones), in the order they run. ``heavy_queries``: the queries of the heavy experiments unless
    --max-queries says otherwise."""
    from magicpig_tasks.experiments.capture import parse_layers

    out = {}
    for experiment in experiments:
        layer_spec = settings.layers or ("every:3" if experiment.heavy else "all")
        layers = [i for i in parse_layers(layer_spec, cap.num_layers) if i in cap.layers]
        mq = settings.max_queries if settings.max_queries is not None else (
            heavy_queries if experiment.heavy else None)
        print(f"[{experiment.name}] {len(layers)} layers, {mq or cap.queries.shape[1]} queries, "
              f"{cap.n_keys} keys", file=sys.stderr, flush=True)
        out.update(experiment.run(cap, settings, dict(layers=layers, max_queries=mq), out))
    return out
