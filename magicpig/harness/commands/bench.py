"""``magicpig bench <what>``: benchmarks (not tests). Sub-commands live in SUBCOMMANDS; ``kernel`` times
the CPU module for one decode step of one layer, ``decode`` the whole model (magicpig.harness.bench). To add
one, add a register function to SUBCOMMANDS; heavy imports stay inside the handlers."""
from __future__ import annotations

from magicpig.backends import BENCH_BACKENDS
from magicpig.harness.progress import heartbeat


def _register_kernel(sub) -> None:
    from magicpig.decoders import OFFLOAD_DTYPES  # the runtime's own names (import magicpig loads torch anyway)
    from magicpig.harness.bench.kernel import DISTS

    p = sub.add_parser("kernel", help="CPU module: time per decode step, bandwidth, speedup vs exact attention")
    p.add_argument("--n", type=int, action="append", help="context length(s) (default 16384, 65536, 131072)")
    p.add_argument("--head-dim", type=int, action="append", help="head dim(s) (default 64, 128)")
    p.add_argument("--kl", action="append", help="a (K, L) pair written K,L; repeat for more (default 10,150 9,120 8,75)")
    p.add_argument("--dist", action="append", choices=DISTS, help="key distribution(s) (default all)")
    p.add_argument("--dtype", choices=tuple(OFFLOAD_DTYPES), default="bfloat16",
                   help="the CPU module's key/value storage (default bfloat16)")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per step measurement")
    p.add_argument("--no-reference", action="store_true", help="skip timing the torch reference (slow)")
    p.add_argument("--csv", help="output CSV (default results/bench/kernel_<time>.csv)")
    p.set_defaults(func=_run_kernel)


def _run_kernel(args) -> int:
    import torch

    from magicpig.harness.argcheck import check_kl_option
    from magicpig.harness.bench import kernel as bench_kernel

    kls = tuple(check_kl_option(x) for x in args.kl) if args.kl else bench_kernel.KLS
    for n in args.n or ():
        if n < 1:
            raise ValueError(f"--n must be positive, got {n}")
    for d in args.head_dim or ():  # the gather probe reads key+value rows (2 * d elements) 8 bytes at a time
        if d < 1 or (args.dtype == "bfloat16" and d % 2):
            raise ValueError(f"--head-dim must be a positive{' even' if args.dtype == 'bfloat16' else ''} "
                             f"integer (a {args.dtype} key+value row must be a multiple of 8 bytes), got {d}")
    with heartbeat("bench kernel"):  # a line at least every 30 s in a log
        bench_kernel.run(ns=tuple(args.n or bench_kernel.NS),
                         head_dims=tuple(args.head_dim or bench_kernel.HEAD_DIMS), kls=kls,
                         dists=tuple(args.dist or bench_kernel.DISTS), dtype=getattr(torch, args.dtype),
                         csv_path=args.csv, reps=args.reps, reference=not args.no_reference)
    return 0


def _register_decode(sub) -> None:
    from magicpig.decode_forward import FORWARD_IMPLS  # the choices are the runtime's own names
    from magicpig.decode_linear import LINEAR_IMPLS
    from magicpig.decode_weights import WEIGHT_FORMATS
    from magicpig.decoders import OFFLOAD_DTYPE_CHOICES
    from magicpig.harness.bench.decode_options import DTYPES, FILLS
    from magicpig.harness.bench.llamacpp import KV_TYPES

    p = sub.add_parser("decode", help="model decode throughput: batch x context x method, stock transformers "
                                      "as the baseline (the paper's protocol: 32 warm-up, 128 timed steps)")
    p.add_argument("--model", default="smollm2",
                   help="'smollm2' (embedded), 'qwen2.5-coder-0.5b', a .gguf file, a folder, a hub id, or shape:NAME (random weights of "
                        "a stored architecture, timing only; see magicpig/data/model_shapes.yaml)")
    p.add_argument("--context", type=int, action="append", help="context length(s) (default 8192, 32768)")
    p.add_argument("--batch", type=int, action="append", help="batch size(s); the prompt is repeated (default 1)")
    p.add_argument("--method", action="append", metavar="SPEC[@BACKEND]",
                   help="method spec with optional @BACKEND, one of " + "/".join(BENCH_BACKENDS) + " (stock = "
                        "stock transformers SDPA + DynamicCache, dense only; default: a method's system backend, "
                        "offload for magicpig, reference otherwise); "
                        "repeatable; default dense@stock, dense, magicpig:K=10,L=150@offload")
    p.add_argument("--steps", type=int, default=128, help="timed decode steps (default 128, the paper's)")
    p.add_argument("--warmup", type=int, default=32, help="untimed decode steps first (default 32, the paper's)")
    p.add_argument("--fill", choices=FILLS, default="exact",
                   help="prefill every context exactly, or prefill --tile-base tokens and tile the cache")
    p.add_argument("--tile-base", type=int, default=8192)
    p.add_argument("--prefill-chunk", type=int, default=2048, help="prompt tokens per prefill forward")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda when available)")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="model dtype (auto: float32 on the CPU and for GGUF files, bfloat16 on CUDA)")
    p.add_argument("--offload-dtype", choices=OFFLOAD_DTYPE_CHOICES, default="auto",
                   help="storage of the offloaded keys/values in CPU memory (auto: the model's dtype when it is "
                        "bfloat16, float32 otherwise)")
    p.add_argument("--linear", choices=LINEAR_IMPLS, default="auto",
                   help="who computes the decode step's linear layers for the engine's backends (auto: the CPU "
                        "module's kernel 4 on a CPU model; stock rows always use torch)")
    p.add_argument("--forward", choices=FORWARD_IMPLS, default="auto",
                   help="who runs the decode step's layer loop for the engine's backends (auto: magicpig's loop for "
                        "a float32 Llama / Mistral / Qwen2 CPU model with kernel-4 linears; stock rows always run "
                        "transformers')")
    p.add_argument("--weights", choices=WEIGHT_FORMATS, default="q8_0",
                   help="how kernel 4 stores the linear weights in the engine's rows: the model's own tensors, a "
                        "bfloat16 copy, or Q8_0 blocks (int8 + a float32 scale per 32; the default: "
                        "docs/benchmarking.md gives its speed and accuracy against the model's weights)")
    p.add_argument("--llamacpp-kv", choices=tuple(KV_TYPES), default="f16",
                   help="llama.cpp's KV cache type in dense@llamacpp rows (default f16)")
    p.add_argument("--llamacpp-state-dir", metavar="DIR",
                   help="keep each llama.cpp prefill's state in DIR and restore it in later runs of the same GGUF "
                        "file, context, KV type, batch and threads instead of prefilling again (18 minutes at 32K on "
                        "2 cores); the timed steps are the same either way")
    p.add_argument("--diagnostics", action="store_true",
                   help="also record the load averages, the hypervisor's steal, this process's kernel-time share, "
                        "the engine's per-step time breakdown and (on the CPU) the memory bandwidth measured "
                        "between the timed steps (docs/benchmarking.md)")
    p.add_argument("--max-throughput", action="store_true",
                   help="also search the largest batch that fits per method and context and measure it")
    p.add_argument("--max-batch", type=int, default=256, help="upper bound of the --max-throughput search")
    p.add_argument("--csv", help="output CSV (default results/bench/decode_<time>.csv)")
    p.set_defaults(func=_run_decode)


def _run_decode(args) -> int:
    import sys

    from magicpig.harness.bench import decode as bench_decode, decode_options

    methods = tuple(decode_options.parse_method_arg(m) for m in args.method or ()) or decode_options.METHODS
    for name, values in (("--context", args.context), ("--batch", args.batch)):
        for v in values or ():
            if v < 1:
                raise ValueError(f"{name} must be positive, got {v}")
    from magicpig.harness.argcheck import check_device, check_writable_file  # before the model is loaded

    check_device(args.device)
    if args.csv:
        check_writable_file(args.csv, "--csv")
    with heartbeat("bench decode"):  # a line at least every 30 s in a log
        rows = bench_decode.run(args.model, tuple(args.context or decode_options.CONTEXTS), methods,
                                batches=tuple(args.batch or decode_options.BATCHES), steps=args.steps,
                                warmup=args.warmup, fill=args.fill, tile_base=args.tile_base, device=args.device,
                                dtype=args.dtype, csv_path=args.csv, prefill_chunk=args.prefill_chunk,
                                max_throughput=args.max_throughput, max_batch=args.max_batch,
                                offload_dtype=None if args.offload_dtype == "auto" else args.offload_dtype,
                                linear=args.linear, forward=args.forward, weights=args.weights,
                                llamacpp_kv=args.llamacpp_kv, llamacpp_state_dir=args.llamacpp_state_dir,
                                diagnostics=args.diagnostics)
    if not any(r["fits"] is True for r in rows):
        print("magicpig bench decode: no configuration fits in memory: "
              + "; ".join(sorted({r["reason"] for r in rows})), file=sys.stderr)
        return 1
    return 0


SUBCOMMANDS = {"kernel": _register_kernel, "decode": _register_decode}


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: " + ", ".join(SUBCOMMANDS))
    inner = p.add_subparsers(dest="bench_command", metavar="WHAT")
    for add in SUBCOMMANDS.values():
        add(inner)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
