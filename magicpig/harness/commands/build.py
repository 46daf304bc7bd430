"""``magicpig build``: compile the CPU module (cached), check it against the torch reference, and print
the instruction set and thread count in use."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("build", help="compile the C++/OpenMP CPU module and self-check it")
    p.add_argument("--no-check", action="store_true", help="skip the self-check against the torch reference")
    p.set_defaults(func=run)


def run(args) -> int:
    import time
    from pathlib import Path

    from magicpig import cpu

    start = time.perf_counter()
    try:
        module = cpu.load()
    except RuntimeError as exc:
        print(exc)
        return 1
    folder = Path(module.__file__).parent  # where it was loaded from (build_dir() follows later source edits)
    print(f"module:   {folder} ({time.perf_counter() - start:.1f} s, cached after the first build)")
    print(f"cpu:      variants {', '.join(cpu.supported_isas())}")
    print(f"isa:      {cpu.isa()} (set {cpu.ISA_ENV}=scalar|avx2|avx512 to force one)")
    print(f"threads:  {cpu.num_threads()} (torch / OMP_NUM_THREADS)")
    if not args.no_check:
        try:
            errors = cpu.self_check()
        except RuntimeError as exc:
            print(f"self-check FAILED: {exc}")
            return 1
        print("self-check: ok (max error vs torch reference: "
              + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()) + ")")
    return 0
