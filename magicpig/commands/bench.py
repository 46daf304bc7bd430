"""``magicpig bench <what>``: benchmarks (not tests). Sub-commands live in SUBCOMMANDS; ``kernel`` times
the CPU module for one decode step of one layer. To add one (e.g. ``decode``), add a register function
to SUBCOMMANDS; heavy imports stay inside the handlers."""
from __future__ import annotations


def _parse_kl(text: str) -> tuple[int, int]:
    try:
        K, L = (int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--kl must be 'K,L' (e.g. 10,150), got {text!r}") from None
    return K, L


def _register_kernel(sub) -> None:
    p = sub.add_parser("kernel", help="CPU module: time per decode step, bandwidth, speedup vs exact attention")
    p.add_argument("--n", type=int, action="append", help="context length(s) (default 16384, 65536, 131072)")
    p.add_argument("--head-dim", type=int, action="append", help="head dim(s) (default 64, 128)")
    p.add_argument("--kl", action="append", help="K,L pair(s) (default 10,150 9,120 8,75)")
    p.add_argument("--dist", action="append", choices=["offset", "random"],
                   help="key distribution(s) (default both)")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per step measurement")
    p.add_argument("--no-reference", action="store_true", help="skip timing the torch reference (slow)")
    p.add_argument("--csv", help="output CSV (default results/bench/kernel_<time>.csv)")
    p.set_defaults(func=_run_kernel)


def _run_kernel(args) -> int:
    import torch

    from .. import bench_kernel

    kls = tuple(_parse_kl(x) for x in args.kl) if args.kl else bench_kernel.KLS
    for n in args.n or ():
        if n < 1:
            raise ValueError(f"--n must be positive, got {n}")
    for d in args.head_dim or ():
        if d < 1:
            raise ValueError(f"--head-dim must be positive, got {d}")
    for K, L in kls:
        from ..lsh import check_kl
        check_kl(K, L)
    bench_kernel.run(ns=tuple(args.n or bench_kernel.NS), head_dims=tuple(args.head_dim or bench_kernel.HEAD_DIMS),
                     kls=kls, dists=tuple(args.dist or bench_kernel.DISTS), dtype=getattr(torch, args.dtype),
                     csv_path=args.csv, reps=args.reps, reference=not args.no_reference)
    return 0


def _register_decode(sub) -> None:
    p = sub.add_parser("decode", help="model decode: tokens/s of dense vs MagicPIG offload at long contexts")
    p.add_argument("--model", default="smollm2", help="'smollm2' (embedded), a .gguf file, a folder or a hub id")
    p.add_argument("--context", type=int, action="append", help="context length(s) (default 8192, 32768)")
    p.add_argument("--method", action="append", metavar="SPEC[@BACKEND]",
                   help="method spec with optional @reference/@offload (default: offload for magicpig, reference "
                        "otherwise; methods default to dense and magicpig:K=10,L=150); repeatable")
    p.add_argument("--steps", type=int, default=16, help="timed decode steps")
    p.add_argument("--warmup", type=int, default=4, help="untimed decode steps first")
    p.add_argument("--fill", choices=["prefill", "tile"], default="prefill",
                   help="prefill every context exactly, or prefill --tile-base tokens and tile the cache")
    p.add_argument("--tile-base", type=int, default=8192)
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda when available)")
    p.add_argument("--csv", help="output CSV (default results/bench/decode_<time>.csv)")
    p.set_defaults(func=_run_decode)


def _run_decode(args) -> int:
    from .. import bench_decode
    from ..methods import parse_method

    methods = []
    for item in args.method or ():
        spec, _, backend = item.rpartition("@") if "@" in item else (item, "", "")
        backend = backend or ("offload" if parse_method(spec).name == "magicpig" else "reference")
        if backend not in ("reference", "offload"):
            raise ValueError(f"--method: backend after '@' must be reference or offload, got {backend!r}")
        methods.append((parse_method(spec).spec(), backend))
    bench_decode.run(args.model, tuple(args.context or bench_decode.CONTEXTS),
                     tuple(methods) or bench_decode.METHODS, steps=args.steps, warmup=args.warmup, fill=args.fill,
                     tile_base=args.tile_base, device=args.device, csv_path=args.csv)
    return 0


SUBCOMMANDS = {"kernel": _register_kernel, "decode": _register_decode}


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: " + ", ".join(SUBCOMMANDS))
    inner = p.add_subparsers(dest="bench_command", metavar="WHAT")
    for add in SUBCOMMANDS.values():
        add(inner)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
