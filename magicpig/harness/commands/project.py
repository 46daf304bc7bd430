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
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

from magicpig.harness.result_files import PROJECT_FILES

ORIGINAL_KERNEL_EFFICIENCY = 0.08  # the original MagicPIG CPU kernels: ~8% of streaming bandwidth
ORIGINAL = "the original kernels' reported efficiency"


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


# ---- readers -----------------------------------------------------------------------------------------
def _num(row: dict, key: str, default=math.nan) -> float:
    try:
        v = float(row.get(key))
    except (TypeError, ValueError):
        return default
    return default if math.isnan(v) else v


def _flag(v) -> bool | None:
    s = str(v).strip().lower()
    return True if s in ("true", "1", "yes", "1.0") else False if s in ("false", "0", "no", "0.0") else None


def _rows(paths) -> list[dict]:
    from magicpig.harness.csv_rows import load_rows  # skips a torn row with a warning

    rows = []
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no such CSV: {path}")
        if Path(path).stat().st_size == 0:
            raise ValueError(f"{path}: empty CSV (no header, no rows)")
        rows += [dict(r, source=str(path)) for r in load_rows(path)]
    return rows


def under_load(row: dict) -> bool:
    """Whether OTHER processes took CPU the row's threads needed while it was measured: the row's
    ``under_load`` if it has one, else its ``other_cpu_load``, else its load average less the benchmark's
    own threads (a load average counts them: a quiet 2-core machine running a 2-thread benchmark reads ~2),
    judged by ``bench.table.is_under_load`` with the row's threads on as many cores (no spare ones)."""
    from magicpig.harness.bench.table import is_under_load

    flag = _flag(row.get("under_load"))
    if flag is not None:
        return flag
    other = _num(row, "other_cpu_load")
    if math.isnan(other):
        load = max(_num(row, k, default=0.0) for k in ("load_avg", "load_before", "load_after"))
        other = load - _num(row, "threads", default=0.0)
    threads = int(_num(row, "threads", default=os.cpu_count() or 1))
    return is_under_load(other, threads, cores=threads)


def kernel_summary(paths) -> dict:
    """Streaming-read GB/s and kernel efficiency (medians over unflagged rows) of the kernel CSV(s)."""
    import statistics

    rows = _rows(paths)
    good = [r for r in rows if not under_load(r)]
    stream = [v for v in (_num(r, "read_gb_per_s") for r in good) if v > 0]
    ratio = [v for v in (_num(r, "bandwidth_ratio") for r in good) if v > 0]
    out = {"rows": len(rows), "unflagged": len(good),
           "stream_gbps": statistics.median(stream) if stream else math.nan,
           "efficiency": statistics.median(ratio) if ratio else math.nan, "stream_source": "kernel CSV"}
    loaded = [v for v in (_num(r, "read_gb_per_s") for r in rows) if v > 0]
    if not stream and loaded:  # every row under load: the least disturbed (highest) reading, said so
        out.update(stream_gbps=max(loaded), stream_source="kernel CSV, rows under load only (unreliable)")
    return out


def decode_items(paths, sampled_default: float = 0.02) -> list[dict]:
    """One dict per decode row: the row, its measured step seconds, its StepWork and its role."""
    from magicpig.harness.projection import dtype_bytes, method_family, sparse_setting, step_work, weight_elem_bytes
    from magicpig.shapes import model_shape

    items = []
    for r in _rows(paths):
        ms = _num(r, "ms_per_token")
        item = {"row": r, "measured_s": ms / 1e3 if ms > 0 else math.nan, "work": None, "role": "",
                "device": str(r.get("device", "cpu"))}
        items.append(item)
        batch, context = _num(r, "batch", default=1), _num(r, "context")
        for name, v in (("batch", batch), ("context", context)):
            if not (v >= 1 and float(v).is_integer()):
                raise ValueError(f"decode-csv {r['source']}: field {name!r} must be a positive integer, got "
                                 f"{r.get(name)!r}")
        family = method_family(r.get("method", ""), r.get("backend"))
        if family is None:
            item["role"] = "not modelled (method)"
            continue
        try:
            shape = model_shape(str(r.get("model", "")))
        except ValueError:
            item["role"] = "not modelled (unknown model shape)"
            continue
        gpu = item["device"].startswith("cuda")
        try:
            elem = dtype_bytes(r.get("dtype") or ("bf16" if gpu else "fp32"))
        except ValueError as exc:
            item["role"] = f"not modelled ({exc})"
            continue
        sparse = None
        if family == "magicpig":
            generated = int(_num(r, "warmup", default=32) + _num(r, "steps", default=64) / 2)
            sparse = sparse_setting(str(r["method"]), shape.layers,
                                    _num(r, "sampled_fraction", default=sampled_default), generated)
        item.update(shape=shape.with_dtype(elem), family=family, context=int(context), batch=int(batch),
                    sparse=sparse)
        item["work"] = step_work(item["shape"], family, int(context), int(batch), sparse, host_alloc=not gpu,
                                 weight_elem=weight_elem_bytes(r.get("weights")))
        if _flag(r.get("fits")) is False or math.isnan(item["measured_s"]):
            item["role"] = "not measured (does not fit)"
        elif under_load(r):
            item["role"] = "flagged: under load"
        else:
            item["role"] = "GPU check of the H200 projection" if gpu else "fitted"
    return one_row_per_setting(items)


def one_row_per_setting(items: list[dict]) -> list[dict]:
    """Of the fitted (or GPU-check) rows that measured one setting (``bench.table.setting_key``: a rerun of
    `bench decode` adds a row beside the first, with its own run_id), only the latest is used; the others
    stay in the table, their role saying which run replaced them."""
    from magicpig.harness.bench.table import latest_per_setting, setting_key

    used = [it for it in items if it["role"] in ("fitted", "GPU check of the H200 projection")]
    latest = {setting_key(it["row"]): it for it, last in zip(used, latest_per_setting([it["row"] for it in used]))
              if last}
    for it in used:
        kept = latest[setting_key(it["row"])]
        if kept is not it:
            it["role"] = f"repeat: run {kept['row'].get('run_id') or 'later in the CSV'} of this setting is used"
    return items


# ---- the fit and its trust ---------------------------------------------------------------------------
def fit_machine(items: list[dict], stream_gbps: float):
    """Fit on the rows whose role is ``fitted``; fill predicted seconds and leave-one-out seconds."""
    from magicpig.harness.projection import fit, leave_one_out

    used = [it for it in items if it["role"] == "fitted"]
    if not used:
        return None
    machines = {f"{it['row'].get('cpu_model', '?')} / {int(_num(it['row'], 'threads', default=0))} threads"
                for it in used}
    if len(machines) > 1:
        raise ValueError(f"decode-csv: CPU rows of {len(machines)} machines {sorted(machines)}: the model is "
                         "fitted to one machine, pass that machine's CSVs only")
    works, ys = [it["work"] for it in used], [it["measured_s"] for it in used]
    f = fit(works, ys, stream_gbps)
    for it, loo in zip(used, leave_one_out(works, ys, stream_gbps)):
        it["loo_s"] = loo
    for it in items:
        if it["work"] is not None and not it["device"].startswith("cuda"):
            it["parts_s"] = f.breakdown_s(it["work"])
            it["predicted_s"] = sum(it["parts_s"].values())
    return f


@dataclass(frozen=True)
class Efficiency:
    """The sparse CPU part's efficiency the projections use: ``value``, ``source`` (given / fitted to decode
    rows / measured by bench kernel / ORIGINAL) and ``basis`` (why)."""

    value: float
    source: str
    basis: str


def fit_verdict(f, items: list[dict]) -> tuple[bool, str]:
    """Whether the fit's sparse efficiency may be projected (``trust_problems`` finds nothing), and why."""
    from magicpig.harness.projection import MAX_LOO_ERROR, trust_problems

    if f is None:
        return False, "no decode-row fit (no unflagged decode rows, or no streaming bandwidth)"
    used = [it for it in items if it["role"] == "fitted"]
    ys, loo = [it["measured_s"] for it in used], [it["loo_s"] for it in used]
    problems = trust_problems(f, ys, loo)
    if problems:
        return False, "decode-row fit refused: " + "; ".join(problems)
    worst = max(abs(p / y - 1) for p, y in zip(loo, ys))
    return True, (f"decode-row fit trusted: {f.used} unflagged rows for {len(f.determined)} parameters, "
                  f"leave-one-out error at most {worst:.0%} (bound {MAX_LOO_ERROR:.0%})")


def choose_efficiency(given: float | None, f, items: list[dict], kern: dict) -> Efficiency:
    """--cpu-efficiency, else the fit's if trusted, else the kernel CSV's median bandwidth_ratio, else the
    original kernel's."""
    from magicpig.harness.projection import EFFICIENCY

    trusted, verdict = fit_verdict(f, items)
    if given is not None:
        return Efficiency(given, "given", f"--cpu-efficiency; {verdict}")
    if trusted:
        return Efficiency(f.parameters()[EFFICIENCY], "fitted to decode rows", verdict)
    if kern.get("efficiency", math.nan) > 0:
        return Efficiency(min(1.0, kern["efficiency"]), "measured by bench kernel",
                          f"median bandwidth_ratio of {kern['unflagged']} unflagged kernel rows; {verdict}")
    return Efficiency(ORIGINAL_KERNEL_EFFICIENCY, ORIGINAL, f"no unflagged kernel row measured ours; {verdict}")


def predicted_frame(items: list[dict]):
    import pandas as pd

    if not items:
        return pd.DataFrame(columns=["predicted_ms_per_token", "prediction_error", "loo_error", "model_role"])
    out = []
    for it in items:
        r = dict(it["row"])
        pred, meas, loo = it.get("predicted_s", math.nan), it["measured_s"], it.get("loo_s", math.nan)
        r["predicted_ms_per_token"] = 1e3 * pred if math.isfinite(pred) else math.nan
        r["prediction_error"] = pred / meas - 1 if meas > 0 and math.isfinite(pred) else math.nan
        r["loo_error"] = loo / meas - 1 if meas > 0 and math.isfinite(loo) else math.nan
        r["model_role"] = it["role"]
        for part, sec in it.get("parts_s", {}).items():  # to set beside the measured <key>_ms breakdown
            r[f"predicted_{part}_ms"] = 1e3 * sec
        out.append(r)
    return pd.DataFrame(out)


def _fit_table(f, stream_source: str, kern: dict, pred, eff: Efficiency):
    import pandas as pd

    params = f.parameters() if f is not None else {}
    rows = [{"parameter": k, "value": v, "source": stream_source if "measured" in k else "fit"}
            for k, v in params.items()]
    if f is not None:
        rows.append({"parameter": "parameters fitted", "value": len(f.determined),
                     "source": "non-negative least squares on relative error"})
        fitted = pred[pred["model_role"] == "fitted"]
        for what, col in (("max abs prediction error", "prediction_error"),
                          ("max abs leave-one-out error", "loo_error")):
            rows.append({"parameter": what, "value": fitted[col].abs().max(),
                         "source": f"{len(fitted)} unflagged rows"})
    if kern:
        rows.append({"parameter": "kernel bandwidth_ratio (median, unflagged)", "value": kern["efficiency"],
                     "source": f"kernel CSV: {kern['unflagged']} of {kern['rows']} rows unflagged"})
    rows.append({"parameter": "cpu_efficiency used in projections", "value": eff.value,
                 "source": f"{eff.source}: {eff.basis}"})
    return pd.DataFrame(rows, columns=["parameter", "value", "source"])


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
    import pandas as pd

    from magicpig.harness.projection import HARDWARE, h200_rows, latency_rows, paper_projection_rows, project_gpu_row

    _check_args(args)
    kern = kernel_summary(args.kernel_csv) if args.kernel_csv else {}
    stream, stream_source = ((args.stream_gbps, "--stream-gbps") if args.stream_gbps else
                             (kern.get("stream_gbps", math.nan), kern.get("stream_source", "")))
    items = decode_items(args.decode_csv, args.sampled_fraction) if args.decode_csv else []
    gpu = {k: v for k, v in (("layer_overhead_ms", args.gpu_layer_overhead_ms),
                             ("gpu_efficiency", args.gpu_efficiency)) if v is not None}
    servers = {key: replace(hw, **gpu) for key, hw in HARDWARE.items()}
    h200 = replace(servers["H200"], cpu_read_gbps=args.host_gbps or servers["H200"].cpu_read_gbps,
                   host_mem_gb=args.host_mem_gb or servers["H200"].host_mem_gb)
    f = fit_machine(items, stream) if items and stream > 0 else None
    if items and f is None:
        print("no decode row fitted: none unflagged and modelled, or no streaming bandwidth (give --kernel-csv "
              "or --stream-gbps)")
    eff = choose_efficiency(args.cpu_efficiency, f, items, kern)
    for it in items:  # GPU rows: the H200 projection's step time for the row's (model, context, batch, method)
        if it["work"] is not None and it["device"].startswith("cuda"):
            it["predicted_s"] = project_gpu_row(it["shape"], it["family"], it["context"], it["batch"],
                                                replace(h200, cpu_efficiency=eff.value), it["sparse"])
    pred = predicted_frame(items)

    paper = [dict(r, cpu_kernel=f"original MagicPIG kernel ({ORIGINAL_KERNEL_EFFICIENCY:.0%} of streaming bandwidth)",
                  cpu_efficiency_basis=ORIGINAL)
             for r in paper_projection_rows(ORIGINAL_KERNEL_EFFICIENCY, args.sampled_fraction, servers)]
    if eff.source != ORIGINAL:
        paper += [dict(r, cpu_kernel=f"this suite's kernel ({eff.value:.0%} of streaming bandwidth, {eff.source})",
                       cpu_efficiency_basis=eff.basis)
                  for r in paper_projection_rows(eff.value, args.sampled_fraction, servers)]
    frames = {"fit": _fit_table(f, stream_source, kern, pred, eff), "predicted": pred,
              "paper": pd.DataFrame(paper),  # paper_speedup: the paper's figure of each row's own setting
              "latency": pd.DataFrame(latency_rows(eff.value, args.sampled_fraction, servers)),
              "h200": pd.DataFrame(h200_rows(eff.value, args.sampled_fraction, h200))}
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


def _print(frames: dict, eff: Efficiency) -> None:
    for key, (title, cols) in PRINTED.items():
        df = frames[key]
        if len(df):
            cols = [c for c in cols if c in df.columns] if cols else list(df.columns)
            print(f"\n{title}:\n" + df[cols].to_string(index=False, float_format="{:.3g}".format))
    print(f"\nsparse CPU part in the projections: {eff.value:.0%} of the host's streaming bandwidth "
          f"({eff.source}: {eff.basis})")
