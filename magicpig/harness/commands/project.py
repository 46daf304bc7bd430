"""``magicpig project``: fit the bandwidth model (magicpig.harness.projection) to this machine's measured
decode rows, show its error per row, then PROJECT throughput on A100 / L20 / RTX 4090 and one H200 — model
outputs, labelled as such, never measurements. Each paper ratio is projected over the baseline the paper
states for its setting (``system.baselines`` of config/paper_reference.yaml): full attention on the GPU for
the A100 and L20, full attention on the CPU at a theoretical 150 GB/s for the simulated RTX 4090 (Sec. 5.2).

Inputs: the kernel CSV(s) of ``magicpig bench kernel`` (this machine's streaming-read bandwidth and the
sparse kernel's measured share of it) and the decode CSV(s) of ``magicpig bench decode`` (the rows the
model is fitted to; rows measured under load are flagged and never fitted). The projections take the sparse
CPU part's efficiency from --cpu-efficiency, else from the fit when it passes ``trust_problems``, else from
the kernel CSV, else the original MagicPIG kernel's; fit.csv and the projection CSV say which and why.

This module parses the arguments, writes the tables and prints them; the readers of the CSVs are
``projection.measured_rows``, the fit, the efficiency's choice and the tables ``projection.fit_policy``.
"""
from __future__ import annotations

from pathlib import Path

from magicpig.harness.result_files import PROJECT_FILES


def register(sub) -> None:
    p = sub.add_parser("project", help="fit the bandwidth model to this machine's benchmarks, then project "
                                       "throughput on A100 / L20 / RTX 4090 / H200")
    p.add_argument("--kernel-csv", action="append", default=[],
                   help="CSV of `magicpig bench kernel` (streaming bandwidth, kernel efficiency); repeatable")
    p.add_argument("--decode-csv", action="append", default=[],
                   help="CSV of `magicpig bench decode`: the rows the model is fitted to; repeatable")
    p.add_argument("--stream-gbps", type=float, help="this machine's streaming-read GB/s (default: the kernel CSV's)")
    p.add_argument("--cpu-efficiency", type=float,
                   help="the sparse CPU part's efficiency (0-1] used in projections (default: fitted or measured)")
    p.add_argument("--host-gbps", type=float, help="H200 host's streaming-read GB/s (an assumption; default 80)")
    p.add_argument("--host-mem-gb", type=float, help="H200 host memory usable for KV + tables (default 100)")
    p.add_argument("--gpu-layer-overhead-ms", type=float,
                   help="host-side cost per layer and step on the GPU servers (launches, Python; an assumption, "
                        "default 0.3)")
    p.add_argument("--gpu-efficiency", type=float,
                   help="achieved / peak GPU-memory bandwidth on the GPU servers (an assumption, default 0.8)")
    p.add_argument("--sampled-fraction", type=float, default=0.02, help="MagicPIG sampled fraction (default 0.02)")
    p.add_argument("--out-dir", help="write " + ", ".join(f.name for f in PROJECT_FILES.values()) + " here")
    p.add_argument("--csv", help="write the paper-hardware projection rows to this CSV")
    p.set_defaults(func=run)


# ---- the command -------------------------------------------------------------------------------------
def _check_args(args) -> None:
    for name in ("cpu_efficiency", "gpu_efficiency", "sampled_fraction"):
        v = getattr(args, name)
        if v is not None and not 0 < v <= 1:
            raise ValueError(f"{name.replace('_', '-')} must be in (0, 1], got {v}")
    for name in ("stream_gbps", "host_gbps", "host_mem_gb"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise ValueError(f"{name.replace('_', '-')} must be > 0, got {v}")
    if args.gpu_layer_overhead_ms is not None and not args.gpu_layer_overhead_ms >= 0:
        raise ValueError(f"gpu-layer-overhead-ms must be >= 0, got {args.gpu_layer_overhead_ms}")


def run(args) -> int:
    from magicpig.harness.projection.fit_policy import ProjectionInputs, project

    _check_args(args)
    frames, eff = project(ProjectionInputs(
        kernel_csvs=tuple(args.kernel_csv), decode_csvs=tuple(args.decode_csv), stream_gbps=args.stream_gbps,
        cpu_efficiency=args.cpu_efficiency, host_gbps=args.host_gbps, host_mem_gb=args.host_mem_gb,
        gpu_layer_overhead_ms=args.gpu_layer_overhead_ms, gpu_efficiency=args.gpu_efficiency,
        sampled_fraction=args.sampled_fraction))
    if args.out_dir:
        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
        for key, df in frames.items():
            df.to_csv(Path(args.out_dir) / PROJECT_FILES[key].name, index=False)
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        frames["paper"].to_csv(args.csv, index=False)
    _print(frames, eff)
    return 0


PRINTED = {  # what the command prints of each table: a title and its columns (None: all)
    "fit": ("Bandwidth model fitted to this machine (least squares on relative error, unflagged rows only)", None),
    "predicted": ("Per-row prediction (error = predicted / measured - 1; loo = by a fit without that row)",
                  ["context", "batch", "method", "backend", "ms_per_token", "predicted_ms_per_token",
                   "prediction_error", "loo_error", "model_role"]),
    "paper": ("PROJECTION from a bandwidth model (magicpig.harness.projection), not a measurement",
              ["cpu_kernel", "hardware", "model", "context", "baseline", "full_batch", "full_tokens_per_s",
               "magicpig_batch", "magicpig_tokens_per_s", "magicpig_ms_per_step", "speedup", "paper_speedup"]),
    "latency": ("PROJECTION: the paper's latency (simulated RTX 4090) and throughput (L20) points "
                "(Llama-3.1-8B, 96K, (10,150))",
                ["hardware", "what", "projected", "paper", "batch"]),
    "h200": ("PROJECTION: llama-3.1-8b on one H200 (a GPU run of `bench decode` checks these)",
             ["context", "which", "method", "batch", "ms_per_token", "tokens_per_s", "gpu_ms", "cpu_ms"]),
}


def _print(frames: dict, eff) -> None:
    """The tables of ``PRINTED`` and the efficiency projected with (a ``fit_policy.Efficiency``)."""
    for key, (title, cols) in PRINTED.items():
        df = frames[key]
        if len(df):
            cols = [c for c in cols if c in df.columns] if cols else list(df.columns)
            print(f"\n{title}:\n" + df[cols].to_string(index=False, float_format="{:.3g}".format))
    print(f"\nsparse CPU part in the projections: {eff.value:.0%} of the host's streaming bandwidth "
          f"({eff.source}: {eff.basis})")
