"""``magicpig estimate``: attention-level experiments on captured queries/keys/values.

    magicpig estimate capture  --model smollm2 --context 8192      # one exact prefill -> .pt capture
    magicpig estimate spread|error|kl-grid|centering|geometry --capture PATH
    magicpig estimate all --capture PATH                           # the five experiments

Each experiment writes ``<out-dir>/<name>.csv`` (per layer rows) and ``<name>_summary.csv`` (means over
MagicPIG's sparse layers) and prints the summary.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from magicpig.harness.progress import heartbeat

EXPERIMENTS = ("spread", "error", "kl-grid", "centering", "geometry")
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


def parse_kl(items: list[str] | str) -> list[tuple[int, int]]:
    """``--kl`` values, one (K, L) pair each (``10,150``; magicpig.lsh.parse_kl) -> [(10, 150), ...]."""
    from magicpig.lsh import parse_kl as parse_pair

    out = []
    for item in [items] if isinstance(items, str) else items:
        try:
            out.append(parse_pair(item))
        except ValueError as exc:
            raise ValueError(f"--kl: {exc}; repeat --kl for more pairs") from None
    if not out:
        raise ValueError("--kl: expected at least one K,L pair, e.g. 10,150")
    return out


def _paper_kl() -> list[tuple[int, int]]:
    """The paper's RULER/LongBench (K, L) settings (config/paper_reference.yaml), the default of --kl."""
    from magicpig_tasks.paper import kl_settings

    return [(m.K, m.L) for m in kl_settings("ruler_longbench")]


def register(sub) -> None:
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
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--kv-dtype", choices=("float16", "float32", "bfloat16"), default="float16")
    c.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    c.add_argument("--out", default=None,
                   help="capture file (default results/estimation/captures/<model>_<context>.pt)")
    c.add_argument("--force", action="store_true", help="recapture even if the file exists")
    c.set_defaults(func=run_capture)

    for name in EXPERIMENTS + ("all",):
        e = esub.add_parser(name, help=f"run the {name} experiment" if name != "all" else "run all five experiments")
        e.add_argument("--capture", required=True, help="capture file from `magicpig estimate capture`")
        e.add_argument("--out-dir", default=DEFAULT_OUT)
        e.add_argument("--layers", default=None,
                       help="captured layers to use: all, every:N, or a list (default: all for spread/geometry, "
                            "every:3 for the others)")
        e.add_argument("--max-queries", type=int, default=None,
                       help="use at most N of the captured queries (default: all for spread/geometry, 8 otherwise)")
        e.add_argument("--seed", type=int, default=0)
        e.add_argument("--sinks", type=int, default=4)
        e.add_argument("--local", type=int, default=64)
        if name in ("error", "all"):
            e.add_argument("--budgets", default="0.005,0.01,0.02,0.04,0.1", help="TopK/oracle budget fractions")
        if name in ("error", "centering", "all"):
            e.add_argument("--kl", action="append", metavar="K,L",
                           help="a MagicPIG (K, L) setting written K,L; repeat for more (default: the paper's "
                                "RULER/LongBench settings 10,150 10,170 9,120 8,75)")
        if name in ("kl-grid", "all"):
            e.add_argument("--K", default="7,8,9,10,11")
            e.add_argument("--L", default="75,100,120,150,200,300")
        if name in ("spread", "error", "all"):  # error: which heads are long-tailed (its per-head TopK/oracle table)
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
    check_device(args.device)
    check_writable_file(out, "--out")
    resolve(args.model)
    with heartbeat(f"capture {args.model} @ {args.context}"):  # a line at least every 30 s in a log
        cap = capture_for_model(args.model, args.context, layers=args.layers, decode_steps=args.decode_steps,
                                prompt_queries=args.prompt_queries, depth=args.depth, seed=args.seed,
                                kv_dtype=getattr(torch, args.kv_dtype), device=args.device,
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
    from magicpig_tasks.experiments import experiments as E
    from magicpig_tasks.experiments.capture import Capture, parse_layers

    names = EXPERIMENTS if args.experiment_name == "all" else (args.experiment_name,)
    # validate cheap arguments before loading the capture
    budgets = _floats(args.budgets, "--budgets") if hasattr(args, "budgets") else None
    kl = (parse_kl(args.kl) if args.kl else _paper_kl()) if hasattr(args, "kl") else None
    Ks = _ints(args.K, "--K") if hasattr(args, "K") else None
    Ls = _ints(args.L, "--L") if hasattr(args, "L") else None
    from magicpig.harness.argcheck import check_fraction, check_layer_spec, check_min, check_seed, check_writable_dir
    from magicpig.lsh import check_kl

    if args.max_queries is not None:
        check_min(args.max_queries, 1, "--max-queries")
    pairs = [("--kl", K, L) for K, L in kl or []] + [("--K/--L", K, L) for K in Ks or [] for L in Ls or []]
    for option, K, L in pairs:
        try:
            check_kl(K, L)
        except ValueError as exc:
            raise ValueError(f"{option}: {exc}") from None
    check_layer_spec(args.layers)
    check_seed(args.seed)
    check_min(args.sinks, 0, "--sinks")
    check_min(args.local, 0, "--local")
    if hasattr(args, "top_frac"):
        check_fraction(args.top_frac, "--top-frac")
        check_min(args.sink_tokens, 0, "--sink-tokens")
    if not Path(args.capture).is_file():
        raise FileNotFoundError(f"--capture: {args.capture} does not exist (run `magicpig estimate capture` first)")
    out_dir = check_writable_dir(args.out_dir, "--out-dir")
    cap = Capture.load(args.capture)
    report = {}
    spread_df = None  # which heads are long-tailed: the spread experiment's table, read by the error one
    with heartbeat(f"estimate {args.experiment_name}"):  # a line at least every 30 s in a log
        for name in names:
            heavy = name in ("error", "kl-grid", "centering")
            layer_spec = args.layers or ("every:3" if heavy else "all")
            layers = [i for i in parse_layers(layer_spec, cap.num_layers) if i in cap.layers]
            mq = args.max_queries if args.max_queries is not None else (8 if heavy else None)
            print(f"[{name}] {len(layers)} layers, {mq or cap.queries.shape[1]} queries, "
                  f"{cap.n_keys} keys", file=sys.stderr, flush=True)
            kw = dict(layers=layers, max_queries=mq)
            if name == "spread":
                df = spread_df = E.spread(cap, top_frac=args.top_frac, sink_tokens=args.sink_tokens, **kw)
            elif name == "error":
                df = E.error(cap, budgets=budgets, kl=kl, seed=args.seed, sinks=args.sinks, local=args.local, **kw)
            elif name == "kl-grid":
                df = E.kl_grid(cap, Ks=Ks, Ls=Ls, seed=args.seed, sinks=args.sinks, local=args.local, **kw)
            elif name == "centering":
                df = E.centering(cap, kl=kl, seed=args.seed, sinks=args.sinks, local=args.local, **kw)
            else:
                df = E.geometry(cap, sinks=args.sinks, local=args.local, **kw)
            summary = E.summary(name, df)
            meta = {"model": cap.meta.get("model", ""), "n_prompt": cap.n_prompt, "capture": Path(args.capture).name,
                    "seed": args.seed}
            stem = name.replace("-", "_")
            df.assign(**meta).to_csv(out_dir / f"{stem}.csv", index=False)
            summary.assign(**meta).to_csv(out_dir / f"{stem}_summary.csv", index=False)
            report[name] = summary
            if name == "error":
                E.topk_vs_oracle(df).assign(**meta).to_csv(out_dir / "error_topk_vs_oracle.csv", index=False)
                if spread_df is None:  # `estimate error` alone; `estimate all` reuses its spread table
                    spread_df = E.spread(cap, top_frac=args.top_frac, sink_tokens=args.sink_tokens, **kw)
                E.topk_vs_oracle_heads(df, spread_df).assign(**meta).to_csv(
                    out_dir / "error_topk_vs_oracle_heads.csv", index=False)  # which heads are long-tailed
            if name == "geometry":  # the per-key distributions of Fig. 5
                E.geometry_hist(cap, sinks=args.sinks, local=args.local, **kw).assign(**meta).to_csv(
                    out_dir / "geometry_hist.csv", index=False)
            if not args.json:
                print(f"== {name} (means over MagicPIG's sparse layers) -> {out_dir / (stem + '.csv')}")
                print(summary.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if args.json:
        print(json.dumps({k: json.loads(v.to_json(orient="records")) for k, v in report.items()}, indent=2))
    return 0
