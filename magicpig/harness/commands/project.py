"""``magicpig project``: fit the bandwidth model (magicpig.harness.projection) to this machine's measured rows, show
its error per row, then PROJECT throughput on A100 / L20 / RTX 4090 and one H200 — model outputs,
labelled as such, never measurements.

Inputs: the kernel CSV of ``magicpig bench kernel`` (this machine's streaming-read bandwidth and the
sparse kernel's efficiency) and the decode CSV(s) of ``magicpig bench decode`` (the rows the model is
fitted to). Rows measured under load (other processes keeping more than half the cores busy) are flagged
and never fitted.
Readers accept missing optional columns.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import replace
from pathlib import Path

ORIGINAL_KERNEL_EFFICIENCY = 0.08  # the original MagicPIG CPU kernels: ~8% of streaming bandwidth
TARGET = 0.25  # the model should predict every unflagged row of this machine within +-25%
OUT_FILES = {"fit": "fit.csv", "predicted": "decode_predicted.csv", "paper": "projection_paper_hardware.csv",
             "latency": "projection_paper_latency.csv", "h200": "projection_h200.csv"}


def register(sub) -> None:
    p = sub.add_parser("project", help="fit the bandwidth model to this machine's benchmarks, then project "
                                       "throughput on A100 / L20 / RTX 4090 / H200")
    p.add_argument("--kernel-csv", action="append", default=[],
                   help="CSV of `magicpig bench kernel` (streaming bandwidth, kernel efficiency); repeatable")
    p.add_argument("--decode-csv", action="append", default=[],
                   help="CSV of `magicpig bench decode`: the rows the model is fitted to; repeatable")
    p.add_argument("--stream-gbps", type=float, help="this machine's streaming-read GB/s (default: the kernel CSV's)")
    p.add_argument("--cpu-efficiency", type=float,
                   help="override the sparse CPU part's efficiency (0-1] used in projections (default: fitted)")
    p.add_argument("--host-gbps", type=float, help="H200 host's streaming-read GB/s (an assumption; default 80)")
    p.add_argument("--host-mem-gb", type=float, help="H200 host memory usable for KV + tables (default 100)")
    p.add_argument("--gpu-layer-overhead-ms", type=float,
                   help="host-side cost per layer and step on the GPU servers (launches, Python; an assumption, "
                        "default 0.3)")
    p.add_argument("--gpu-efficiency", type=float,
                   help="achieved / peak GPU-memory bandwidth on the GPU servers (an assumption, default 0.8)")
    p.add_argument("--sampled-fraction", type=float, default=0.02, help="MagicPIG sampled fraction (default 0.02)")
    p.add_argument("--out-dir", help="write " + ", ".join(OUT_FILES.values()) + " here")
    p.add_argument("--csv", help="write the paper-hardware projection rows to this CSV")
    p.set_defaults(func=run)


# ---- readers -----------------------------------------------------------------------------------------
def _num(row: dict, *keys, default=math.nan) -> float:
    for k in keys:
        v = row.get(k)
        if v is None or (isinstance(v, str) and not v.strip()):
            continue
        try:
            v = float(v)
        except (TypeError, ValueError):
            continue
        if not math.isnan(v):
            return v
    return default


def _flag(v) -> bool | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "1.0"):
        return True
    if s in ("false", "0", "no", "0.0"):
        return False
    return None


def _rows(paths) -> list[dict]:
    import pandas as pd

    rows = []
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no such CSV: {path}")
        if Path(path).stat().st_size == 0:
            raise ValueError(f"{path}: empty CSV (no header, no rows)")
        try:  # a row torn by a killed writer is skipped with a warning, not a parser error
            df = pd.read_csv(path, engine="python", on_bad_lines=lambda cells: print(
                f"warning: {path}: a row of {len(cells)} cells skipped (torn or foreign)", file=sys.stderr))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not a readable CSV ({exc})") from None
        rows += [dict(r, source=str(path)) for r in df.to_dict("records")]
    return rows


def _cores(row: dict) -> int:
    return int(_num(row, "cores", "threads", default=os.cpu_count() or 1))


def under_load(row: dict) -> bool:
    """Whether OTHER processes kept more than half the cores busy while the row was measured: the row's
    ``under_load`` if it has one, else its ``other_cpu_load``, else its load average less the benchmark's
    own threads (a load average counts them: a quiet 2-core machine running a 2-thread benchmark reads ~2)."""
    flag = _flag(row.get("under_load"))
    if flag is not None:
        return flag
    cores = _cores(row)
    other = _num(row, "other_cpu_load")
    if math.isnan(other):
        load = max(_num(row, k, default=0.0) for k in ("load_avg", "load_before", "load_after"))
        other = load - _num(row, "threads", default=0.0)
    return other > cores / 2


def kernel_summary(paths) -> dict:
    """Streaming-read GB/s and kernel efficiency (medians over unflagged rows) of the kernel CSV(s)."""
    import statistics

    rows = _rows(paths)
    for r in rows:
        r["under_load"] = under_load(r)
    good = [r for r in rows if not r["under_load"]]
    stream = [_num(r, "read_gb_per_s") for r in good]
    ratio = [_num(r, "bandwidth_ratio") for r in good]
    stream, ratio = [v for v in stream if v > 0], [v for v in ratio if v > 0]
    out = {"rows": len(rows), "unflagged": len(good),
           "stream_gbps": statistics.median(stream) if stream else math.nan,
           "efficiency": statistics.median(ratio) if ratio else math.nan, "stream_source": "kernel CSV"}
    if not stream:  # every row under load: the least disturbed (highest) reading, said so
        loaded = [v for v in (_num(r, "read_gb_per_s") for r in rows) if v > 0]
        if loaded:
            out["stream_gbps"] = max(loaded)
            out["stream_source"] = "kernel CSV, rows under load only (unreliable)"
    return out


def decode_items(paths, sampled_default: float = 0.02) -> list[dict]:
    """One dict per decode row: the row, its measured step seconds, its StepWork and its role."""
    from magicpig.harness.projection import dtype_bytes, method_family, model_shape, sparse_setting, step_work

    items = []
    for r in _rows(paths):
        item = {"row": r, "measured_s": math.nan, "work": None, "role": "", "device": str(r.get("device", "cpu"))}
        items.append(item)
        batch, context = _num(r, "batch", default=1), _num(r, "context")
        for name, v in (("batch", batch), ("context", context)):
            if not (v >= 1 and float(v).is_integer()):
                raise ValueError(f"decode-csv {r['source']}: field {name!r} must be a positive integer, got "
                                 f"{r.get(name)!r}")
        batch, context = int(batch), int(context)
        ms = _num(r, "ms_per_token")
        if math.isnan(ms):
            ms = 1e3 * _num(r, "seconds_per_token")
        tps = _num(r, "tokens_per_s")
        if math.isnan(ms) and tps > 0:
            ms = 1e3 * batch / tps
        elif ms > 0 and tps > 0 and abs(tps * ms / 1e3 - 1) < 0.05 < abs(batch - 1):
            ms *= batch  # the row's ms is per token of the batch, not per step: convert to a step
        item["measured_s"] = ms / 1e3 if ms > 0 else math.nan
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
        dtype = r.get("dtype") if isinstance(r.get("dtype"), str) else ("bfloat16" if gpu else "float32")
        try:
            elem = dtype_bytes(dtype)
        except ValueError as exc:
            item["role"] = f"not modelled ({exc})"
            continue
        sparse = None
        if family == "magicpig":
            generated = int(_num(r, "warmup", "warmup_steps", default=32) + _num(r, "steps", "timed_steps",
                                                                                 default=64) / 2)
            sparse = sparse_setting(str(r["method"]), shape.layers, _num(r, "sampled_fraction",
                                                                        default=sampled_default), generated)
        item.update(shape=shape.with_dtype(elem), family=family, context=context, batch=batch, sparse=sparse)
        item["work"] = step_work(item["shape"], family, context, batch, sparse, host_alloc=not gpu)
        loaded = under_load(r)
        if _flag(r.get("fits")) is False or math.isnan(item["measured_s"]):
            item["role"] = "not measured (does not fit)"
        elif loaded:
            item["role"] = "flagged: under load"
        elif gpu:
            item["role"] = "GPU check of the H200 projection"
        else:
            item["role"] = "fitted"
    return items


def _machine(row: dict) -> str:
    cpu = next((str(row[k]) for k in ("cpu_model", "cpu") if isinstance(row.get(k), str)), "?")
    return f"{cpu} / {int(_num(row, 'threads', default=0))} threads"


def fit_machine(items: list[dict], stream_gbps: float):
    """Fit on the rows whose role is ``fitted``; fill predicted seconds, error and leave-one-out error."""
    from magicpig.harness.projection import fit, leave_one_out

    used = [it for it in items if it["role"] == "fitted"]
    if not used:
        return None
    machines = {_machine(it["row"]) for it in used}
    if len(machines) > 1:
        raise ValueError(f"decode-csv: CPU rows of {len(machines)} machines {sorted(machines)}: the model is "
                         "fitted to one machine, pass that machine's CSVs only")
    # a row that measured the machine's bandwidth during itself is charged at that bandwidth (_row: older
    # CSVs, reads around the row): a MagicPIG row always, a torch-reference row when it ran under the
    # converged allocator policy (bench decode --malloc, magicpig.harness.allocator), a stock row never.
    # Both dense backends allocate and free hundreds of MB per step. Under glibc's adaptive thresholds the
    # read right after their steps measured that churn, not the machine (2.8-16 GB/s after stock steps,
    # 5.7-8.6 after some reference rows, against 21-42 after MagicPIG's, whose steps allocate almost
    # nothing). With the thresholds fixed and the heap trimmed, the reads after the reference's steps agreed
    # with MagicPIG's (22-34 GB/s in sweeps f-h); those after stock's did not, heap-served or not (0.4-37
    # GB/s, 12 of 30 under 20: its cache copies of 25-150 MB per layer keep the kernel returning and
    # faulting in pages)
    for it in items:
        w, row_gbps = it["work"], _num(it["row"], "stream_gbps_steps", "stream_gbps_row")
        clean = w is not None and (w.family == "magicpig"
                                   or (w.family == "dense" and it["row"].get("malloc_policy") == "converged"))
        if clean and not it["device"].startswith("cuda") and row_gbps > 0:
            it["work"] = replace(w, bandwidth_scale=stream_gbps / row_gbps)
    works, ys = [it["work"] for it in used], [it["measured_s"] for it in used]
    f = fit(works, ys, stream_gbps)
    for it, loo in zip(used, leave_one_out(works, ys, stream_gbps)):
        it["loo_s"] = loo
    for it in items:
        if it["work"] is not None and not it["device"].startswith("cuda"):
            it["parts_s"] = f.breakdown_s(it["work"])
            it["predicted_s"] = sum(it["parts_s"].values())
    return f


def check_gpu_rows(items: list[dict], hw) -> None:
    """GPU rows: the H200 projection's step time for the row's (model, context, batch, method)."""
    from magicpig.harness.projection import project_gpu_row

    for it in items:
        if it["work"] is not None and it["device"].startswith("cuda"):
            it["predicted_s"] = project_gpu_row(it["shape"], it["family"], it["context"], it["batch"], hw,
                                                it["sparse"])


def predicted_frame(items: list[dict]):
    import pandas as pd

    out = []
    if not items:
        return pd.DataFrame(columns=["predicted_ms_per_token", "prediction_error", "loo_error", "model_role"])
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


# ---- the command -------------------------------------------------------------------------------------
def _check_fraction(name: str, v: float | None) -> None:
    if v is not None and not 0 < v <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {v}")


def _efficiency(given: float | None, params: dict, kern: dict) -> tuple[float | None, str]:
    """The sparse CPU part's efficiency for the projections, and where it comes from: given > fitted to the
    decode rows > the kernel CSV's median bandwidth ratio > none (the original kernel's is used)."""
    if given is not None:
        return given, "given"
    fitted = params.get("sparse_efficiency (of stream)", math.nan)
    if 0 < fitted <= 1:
        return fitted, "fitted to decode rows"
    note = "" if math.isnan(fitted) else f"; the fitted {fitted:.3g} is not a physical efficiency"
    if kern.get("efficiency", math.nan) > 0:
        return min(1.0, kern["efficiency"]), "kernel CSV (median bandwidth_ratio)" + note
    return None, "no measured or given value: the original kernel's" + note


def _fit_table(params: dict, stream_source: str, kern: dict, pred):
    import pandas as pd

    rows = [{"parameter": k, "value": v, "source": stream_source if "measured" in k else "fit"}
            for k, v in params.items()]
    n_params = sum(math.isfinite(v) for k, v in params.items() if "measured" not in k and "efficiency" not in k)
    if params:
        rows.append({"parameter": "parameters fitted", "value": n_params,
                     "source": "non-negative least squares on relative error"})
    if kern:
        rows.append({"parameter": "kernel bandwidth_ratio (median, unflagged)", "value": kern["efficiency"],
                     "source": f"kernel CSV: {kern['unflagged']} of {kern['rows']} rows unflagged"})
    if params:
        fitted = pred[pred["model_role"] == "fitted"]
        # with no more rows than coefficients the fit reproduces any data: its error says nothing
        caveat = "; NOT A CHECK: no more rows than fitted parameters" if len(fitted) <= n_params else ""
        for what, col in (("max abs prediction error", "prediction_error"),
                          ("max abs leave-one-out error", "loo_error")):
            rows.append({"parameter": what, "value": fitted[col].abs().max(),
                         "source": f"{len(fitted)} unflagged rows (target {TARGET:.0%}){caveat}"})
    return pd.DataFrame(rows, columns=["parameter", "value", "source"])


def run(args) -> int:
    import pandas as pd

    from magicpig.harness.projection import HARDWARE, h200_rows, latency_rows, paper_projection_rows

    _check_fraction("cpu-efficiency", args.cpu_efficiency)
    _check_fraction("gpu-efficiency", args.gpu_efficiency)
    if args.gpu_layer_overhead_ms is not None and not args.gpu_layer_overhead_ms >= 0:
        raise ValueError(f"gpu-layer-overhead-ms must be >= 0, got {args.gpu_layer_overhead_ms}")
    _check_fraction("sampled-fraction", args.sampled_fraction)
    for name in ("stream_gbps", "host_gbps", "host_mem_gb"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise ValueError(f"{name.replace('_', '-')} must be > 0, got {v}")
    kern = kernel_summary(args.kernel_csv) if args.kernel_csv else {}
    stream, stream_source = ((args.stream_gbps, "--stream-gbps") if args.stream_gbps else
                             (kern.get("stream_gbps", math.nan), kern.get("stream_source", "")))
    items = decode_items(args.decode_csv, args.sampled_fraction) if args.decode_csv else []
    gpu = {k: v for k, v in (("layer_overhead_ms", args.gpu_layer_overhead_ms),
                             ("gpu_efficiency", args.gpu_efficiency)) if v is not None}
    servers = {key: replace(hw, **gpu) for key, hw in HARDWARE.items()}
    h200 = servers["H200"]
    h200 = replace(h200, cpu_read_gbps=args.host_gbps or h200.cpu_read_gbps,
                   host_mem_gb=args.host_mem_gb or h200.host_mem_gb)
    f = None
    if items and not stream > 0:
        print("no streaming bandwidth (give --kernel-csv or --stream-gbps): the decode rows are not fitted")
    elif items:
        f = fit_machine(items, stream)
    params = f.parameters() if f is not None else {}
    eff, eff_source = _efficiency(args.cpu_efficiency, params, kern)
    eff_p = eff if eff is not None else ORIGINAL_KERNEL_EFFICIENCY  # what the H200 and latency tables use
    check_gpu_rows(items, replace(h200, cpu_efficiency=eff_p))
    pred = predicted_frame(items)
    fit_df = _fit_table(params, stream_source, kern, pred)

    paper = [dict(r, cpu_kernel=f"original MagicPIG kernel ({ORIGINAL_KERNEL_EFFICIENCY:.0%} of streaming bandwidth)")
             for r in paper_projection_rows(ORIGINAL_KERNEL_EFFICIENCY, args.sampled_fraction, servers)]
    if eff is not None:
        paper += [dict(r, cpu_kernel=f"this suite's kernel ({eff:.0%} of streaming bandwidth, {eff_source})")
                  for r in paper_projection_rows(eff, args.sampled_fraction, servers)]
    paper_df = pd.DataFrame(paper)  # paper_speedup: the paper's figure of each row's own setting
    latency_df = pd.DataFrame(latency_rows(eff_p, args.sampled_fraction, servers))
    h200_df = pd.DataFrame(h200_rows(eff_p, args.sampled_fraction, h200))

    frames = {"fit": fit_df, "predicted": pred, "paper": paper_df, "latency": latency_df, "h200": h200_df}
    if args.out_dir:
        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
        for key, df in frames.items():
            df.to_csv(Path(args.out_dir) / OUT_FILES[key], index=False)
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        paper_df.to_csv(args.csv, index=False)
    _print(frames, f, eff_p, eff_source)
    return 0


def _fmt(x) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _print(frames: dict, f, eff: float, eff_source: str) -> None:
    pred = frames["predicted"]
    if f is not None:
        print("Bandwidth model fitted to this machine (least squares on relative error, unflagged rows only):")
        print(frames["fit"].to_string(index=False, float_format=_fmt))
    if len(pred):
        cols = [c for c in ("context", "batch", "method", "backend", "ms_per_token", "predicted_ms_per_token",
                            "prediction_error", "loo_error", "other_cpu_load", "steal_cpu", "model_role")
                if c in pred.columns]
        print("\nPer-row prediction (error = predicted / measured - 1; loo = by a fit without that row; "
              "other_cpu_load / steal_cpu: cores' worth of CPU\nthat other processes / the hypervisor's other "
              "guests took during the row, where the CSV has them):")
        print(pred[cols].to_string(index=False, float_format=_fmt))
        fitted = pred[pred["model_role"] == "fitted"]
        if len(fitted):
            worst = fitted["prediction_error"].abs().max()
            n_params = int(frames["fit"].set_index("parameter")["value"].get("parameters fitted", 0))
            verdict = ("NOT A CHECK: no more rows than fitted parameters" if len(fitted) <= n_params else
                       f"{'within' if worst <= TARGET else 'OUTSIDE'} the +-{TARGET:.0%} target")
            print(f"max |error| on {len(fitted)} unflagged rows: {worst:.1%} ({verdict}); "
                  f"leave-one-out max {fitted['loo_error'].abs().max():.1%}")
        else:
            print("no unflagged measured row to fit (all under load, not fitting, or not modelled)")
    print(f"\nPROJECTION from a bandwidth model (magicpig.harness.projection), not a measurement; sparse CPU part at "
          f"{eff:.0%} of the host's streaming bandwidth ({eff_source}):")
    cols = ["cpu_kernel", "hardware", "model", "context", "full_batch", "full_tokens_per_s", "magicpig_batch",
            "magicpig_tokens_per_s", "magicpig_ms_per_step", "speedup", "paper_speedup"]
    print(frames["paper"][cols].to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    print("\nPROJECTION: the paper's L20 latency / throughput points (Llama-3.1-8B, 96K, (10,150)):")
    print(frames["latency"].drop(columns=["kind"]).to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    print("\nPROJECTION: llama-3.1-8b on one H200 (a GPU run of `bench decode` checks these):")
    cols = ["context", "which", "method", "batch", "ms_per_token", "tokens_per_s", "gpu_ms", "cpu_ms"]
    print(frames["h200"][cols].to_string(index=False, float_format=lambda x: f"{x:.1f}"))
