"""``magicpig project``: throughput projected for A100 / L20 / RTX 4090 by the bandwidth model
(magicpig.hardware) — a model output, labelled as such, never a measurement."""
from __future__ import annotations

ORIGINAL_KERNEL_EFFICIENCY = 0.08  # issue 3: the original CPU kernels reach ~8% of streaming bandwidth


def register(sub) -> None:
    p = sub.add_parser("project", help="projected throughput on A100 / L20 / RTX 4090 (bandwidth model)")
    p.add_argument("--kernel-csv", help="CSV of `magicpig bench kernel`: its median bandwidth_ratio is used "
                                        "as our kernel's efficiency")
    p.add_argument("--cpu-efficiency", type=float, help="override our kernel's efficiency (0-1]")
    p.add_argument("--sampled-fraction", type=float, default=0.02, help="MagicPIG sampled fraction (default 0.02)")
    p.add_argument("--csv", help="write the rows to this CSV")
    p.set_defaults(func=run)


def run(args) -> int:
    import pandas as pd

    from ..hardware import paper_projection_rows

    ours = args.cpu_efficiency
    if ours is None and args.kernel_csv:
        ratios = pd.read_csv(args.kernel_csv)["bandwidth_ratio"].dropna()
        if ratios.empty:
            raise ValueError(f"kernel-csv: {args.kernel_csv} has no bandwidth_ratio values")
        ours = float(ratios.median())
    if ours is not None and not 0 < ours <= 1:
        raise ValueError(f"cpu-efficiency must be in (0, 1], got {ours}")
    rows = [dict(r, cpu_kernel="original (8% of streaming, issue 3)")
            for r in paper_projection_rows(ORIGINAL_KERNEL_EFFICIENCY, args.sampled_fraction)]
    if ours is not None:
        rows += [dict(r, cpu_kernel=f"ours ({ours:.0%} of streaming, measured)")
                 for r in paper_projection_rows(ours, args.sampled_fraction)]
    from ..report.collect import load_reference

    paper = load_reference()["system"]["throughput_speedup_vs_gpu_full"]  # same order as PAPER_SETTINGS
    for i, r in enumerate(rows):
        r["paper_speedup"] = paper[i % len(paper)]["speedup"]
    df = pd.DataFrame(rows)
    if args.csv:
        df.to_csv(args.csv, index=False)
    cols = ["cpu_kernel", "hardware", "model", "context", "full_batch", "full_tokens_per_s", "magicpig_batch",
            "magicpig_tokens_per_s", "magicpig_ms_per_step", "speedup", "paper_speedup"]
    print("PROJECTION from a bandwidth model (magicpig.hardware), not a measurement:")
    print(df[cols].to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    return 0
