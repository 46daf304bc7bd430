"""``magicpig tune-kl``: choose MagicPIG's (K, L) for a target sampling cost from measured keys/queries.

    magicpig tune-kl --model smollm2 --target-cost 0.02 [--capture PATH] [--json]

Without ``--capture`` the default capture of the model (``results/estimation/captures/<model>_<ctx>.safetensors``)
is used, and made first (one exact prefill) when it does not exist yet.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from magicpig.harness.progress import heartbeat
from magicpig.harness.result_files import TUNE_KL_CANDIDATES_CSV, TUNE_KL_JSON, tune_kl_target


def register(sub) -> None:
    p = sub.add_parser("tune-kl", help="choose (K, L) for a target sampling cost from measured attention")
    p.add_argument("--model", default="smollm2", help="smollm2, a .gguf file, a model folder or a hub id")
    p.add_argument("--target-cost", type=float, required=True, help="target sampled fraction, e.g. 0.02")
    p.add_argument("--capture", default=None, help="capture file (default: the model's default capture)")
    p.add_argument("--context", type=int, default=8192 - 16, help="prompt length when a capture must be made")
    p.add_argument("--layers", default=None, help="layers to tune on, among MagicPIG's sparse layers (default: every captured sparse layer)")
    p.add_argument("--max-queries", type=int, default=8, help="queries per layer used for measurement")
    p.add_argument("--K", default="6,7,8,9,10,11,12,13", help="candidate K values")
    p.add_argument("--max-L", type=int, default=300, help="largest L considered (hash-table memory grows with L)")
    p.add_argument("--verify", type=int, default=3, help="candidates verified by real hashing")
    p.add_argument("--tolerance", type=float, default=0.25, help="allowed relative deviation of the cost")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="results/estimation")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    if not 0 < args.target_cost < 1:
        raise ValueError(f"--target-cost must be a fraction in (0, 1), got {args.target_cost}")
    if not 0 < args.tolerance < 1:
        raise ValueError(f"--tolerance must be in (0, 1), got {args.tolerance}")
    if args.verify < 1 or args.max_queries < 1:
        raise ValueError("--verify and --max-queries must be >= 1")
    try:
        Ks = [int(k) for k in args.K.split(",") if k.strip()]
    except ValueError:
        raise ValueError(f"--K: expected comma-separated integers, got {args.K!r}") from None
    from magicpig.harness.argcheck import check_layer_spec, check_min, check_seed, check_writable_dir, check_writable_file
    from magicpig.lsh import MAX_K, format_kl

    # every argument is checked before a capture is loaded or made
    if not Ks or any(not 1 <= k <= MAX_K for k in Ks):
        raise ValueError(f"--K: expected integers in [1, {MAX_K}], got {args.K!r}")
    check_min(args.max_L, 2, "--max-L")
    check_min(args.context, 64, "--context")
    check_layer_spec(args.layers)
    check_seed(args.seed)
    out_dir = check_writable_dir(args.out_dir, "--out-dir")
    if args.capture and not Path(args.capture).is_file():
        raise FileNotFoundError(f"--capture: {args.capture} does not exist")

    from magicpig_tasks.experiments.capture import Capture, capture_for_model, default_capture_path, parse_layers
    from magicpig_tasks.experiments.tune_kl import candidates_frame, tune_kl

    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    path = Path(args.capture) if args.capture else default_capture_path(args.model, args.context)
    if not path.is_file():  # a capture will be made: its model and file must be usable
        from magicpig.models import resolve
        resolve(args.model)
        check_writable_file(path, "capture path")
    if path.is_file():
        cap = Capture.load(path)
    elif args.capture:
        raise FileNotFoundError(f"--capture: {path} does not exist")
    else:
        say(f"no capture at {path}; capturing {args.model} at {args.context} tokens")
        with heartbeat(f"capture {args.model} @ {args.context}"):  # a line at least every 30 s in a log
            cap = capture_for_model(args.model, args.context, progress=say)
        from magicpig.harness.machine import machine_record

        cap.meta["machine"] = machine_record()
        cap.save(path)
    layers = None
    if args.layers:
        layers = [i for i in parse_layers(args.layers, cap.num_layers) if i in cap.layers]
    with heartbeat(f"tune-kl {args.target_cost:g}"):
        res = tune_kl(cap, args.target_cost, layers=layers, Ks=Ks, max_L=args.max_L, verify=args.verify,
                      tolerance=args.tolerance, seed=args.seed, max_queries=args.max_queries, progress=say)
    out = res.to_dict()
    out.update({"model": args.model, "capture": str(path), "n_prompt": cap.n_prompt,
                "no_worse_than_baseline": res.relative_error <= res.baseline["relative_error"],
                "no_worse_than_matched_baseline": res.relative_error <= res.matched_baseline["relative_error"]})
    tag = tune_kl_target(args.target_cost)
    (out_dir / TUNE_KL_JSON.format(target=tag)).write_text(json.dumps(out, indent=2))
    candidates_frame(res).assign(model=args.model).to_csv(out_dir / TUNE_KL_CANDIDATES_CSV.format(target=tag),
                                                          index=False)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        b = res.baseline
        print(f"chosen (K, L) = ({format_kl(res.K, res.L)}) for target cost {res.target_cost:g}: measured cost "
              f"{res.measured_cost:.4f} ({'within' if res.within_tolerance else 'OUTSIDE'} ±{res.tolerance:.0%}), "
              f"relative error {res.relative_error:.4f}")
        print(f"paper setting ({format_kl(b['K'], b['L'])}) (nominal {b['paper_cost']:g}): measured cost "
              f"{b['measured_cost']:.4f}, relative error {b['relative_error']:.4f}")
        m = res.matched_baseline
        print(f"paper setting nearest the target here ({format_kl(m['K'], m['L'])}): measured cost "
              f"{m['measured_cost']:.4f}, relative error {m['relative_error']:.4f}")
    return 0
