"""The fit policy of ``magicpig project``: fit the bandwidth model to this machine's decode rows
(``fit_machine``), decide which efficiency of the sparse CPU part the projections use (``choose_efficiency``:
--cpu-efficiency, else the fit's when ``trust_problems`` finds nothing, else the kernel CSV's, else the original
MagicPIG kernel's) and build every table the command writes (``project``): the fit, the per-row prediction,
and the PROJECTED throughput on A100 / L20 / RTX 4090 and one H200 — model outputs, never measurements. Each
paper ratio is projected over the baseline the paper states for its setting (``system.baselines`` of
config/paper_reference.yaml)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from magicpig.harness.projection.bandwidth import EFFICIENCY, MAX_LOO_ERROR, fit, leave_one_out, trust_problems
from magicpig.harness.projection.hardware import (HARDWARE, Hardware, h200_rows, latency_rows, paper_projection_rows,
                                                  project_gpu_row)
from magicpig.harness.projection.measured_rows import cell_number, decode_items, kernel_summary

ORIGINAL_KERNEL_EFFICIENCY = 0.08  # the original MagicPIG CPU kernels: ~8% of streaming bandwidth
ORIGINAL = "the original kernels' reported efficiency"


@dataclass(frozen=True)
class ProjectionInputs:
    """What ``project`` reads: the CSVs of ``bench kernel`` and ``bench decode``, and the settings that replace
    a measured or assumed value when given (None: the measured or default one)."""

    kernel_csvs: tuple[str, ...] = ()
    decode_csvs: tuple[str, ...] = ()
    stream_gbps: float | None = None  # this machine's streaming-read GB/s (default: the kernel CSV's)
    cpu_efficiency: float | None = None  # the sparse CPU part's efficiency (default: fitted or measured)
    host_gbps: float | None = None  # the H200 host's streaming-read GB/s
    host_mem_gb: float | None = None  # the H200 host memory usable for KV + tables
    gpu_layer_overhead_ms: float | None = None  # host-side cost per layer and step on the GPU servers
    gpu_efficiency: float | None = None  # achieved / peak GPU-memory bandwidth on the GPU servers
    sampled_fraction: float = 0.02  # MagicPIG's sampled fraction in the projections


def fit_machine(items: list[dict], stream_gbps: float):
    """Fit on the rows whose role is ``fitted``; fill predicted seconds and leave-one-out seconds."""
    used = [it for it in items if it["role"] == "fitted"]
    if not used:
        return None
    machines = {f"{it['row'].get('cpu_model', '?')} / {int(cell_number(it['row'], 'threads', default=0))} "
                "threads" for it in used}
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
    trusted, verdict = fit_verdict(f, items)
    if given is not None:
        return Efficiency(given, "given", f"--cpu-efficiency; {verdict}")
    if trusted:
        return Efficiency(f.parameters()[EFFICIENCY], "fitted to decode rows", verdict)
    if kern.get("efficiency", math.nan) > 0:
        return Efficiency(min(1.0, kern["efficiency"]), "measured by bench kernel",
                          f"median bandwidth_ratio of {kern['unflagged']} unflagged kernel rows; {verdict}")
    return Efficiency(ORIGINAL_KERNEL_EFFICIENCY, ORIGINAL, f"no unflagged kernel row measured ours; {verdict}")


def predict_gpu_rows(items: list[dict], h200: Hardware) -> None:
    """Set each modelled GPU row's ``predicted_s``: the H200 projection's step time for its (model, context,
    batch, method) on ``h200`` (a check of the projection, never a fit)."""
    for it in items:
        if it["work"] is not None and it["device"].startswith("cuda"):
            it["predicted_s"] = project_gpu_row(it["shape"], it["family"], it["context"], it["batch"], h200,
                                                it["sparse"])


def gpu_check_predictions(decode_csv, cpu_efficiency: float | None = None):
    """The rows of one GPU run's decode CSV (``make gpu-check``), each beside the H200 projection of its
    setting (``predicted_frame``'s columns). ``cpu_efficiency``: the sparse CPU part's efficiency the projection
    assumes (default: ``HARDWARE["H200"]``'s)."""
    h200 = HARDWARE["H200"]
    if cpu_efficiency is not None:
        h200 = replace(h200, cpu_efficiency=cpu_efficiency)
    items = decode_items([decode_csv])
    predict_gpu_rows(items, h200)
    return predicted_frame(items)


def predicted_frame(items: list[dict]):
    """One row per decode item: the measured row with its predicted ms/token, its errors and its role."""
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


def fit_table(f, stream_source: str, kern: dict, pred, eff: Efficiency):
    """fit.csv: the fitted parameters, the fit's errors, the kernel's efficiency and the one projected."""
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


def project(inputs: ProjectionInputs, say: Callable[[str], None] = print) -> tuple[dict, Efficiency]:
    """Every table of ``magicpig project`` (``result_files.PROJECT_FILES``' keys -> DataFrame) and the sparse
    efficiency they project with; ``say`` hears why no decode row was fitted, when none was."""
    import pandas as pd

    kern = kernel_summary(inputs.kernel_csvs) if inputs.kernel_csvs else {}
    stream, stream_source = ((inputs.stream_gbps, "--stream-gbps") if inputs.stream_gbps else
                             (kern.get("stream_gbps", math.nan), kern.get("stream_source", "")))
    items = decode_items(inputs.decode_csvs, inputs.sampled_fraction) if inputs.decode_csvs else []
    gpu = {k: v for k, v in (("layer_overhead_ms", inputs.gpu_layer_overhead_ms),
                             ("gpu_efficiency", inputs.gpu_efficiency)) if v is not None}
    servers = {key: replace(hw, **gpu) for key, hw in HARDWARE.items()}
    h200 = replace(servers["H200"], cpu_read_gbps=inputs.host_gbps or servers["H200"].cpu_read_gbps,
                   host_mem_gb=inputs.host_mem_gb or servers["H200"].host_mem_gb)
    f = fit_machine(items, stream) if items and stream > 0 else None
    if items and f is None:
        say("no decode row fitted: none unflagged and modelled, or no streaming bandwidth (give --kernel-csv "
            "or --stream-gbps)")
    eff = choose_efficiency(inputs.cpu_efficiency, f, items, kern)
    predict_gpu_rows(items, replace(h200, cpu_efficiency=eff.value))
    pred = predicted_frame(items)

    sampled = inputs.sampled_fraction
    paper = [dict(r, cpu_kernel=f"original MagicPIG kernel ({ORIGINAL_KERNEL_EFFICIENCY:.0%} of streaming bandwidth)",
                  cpu_efficiency_basis=ORIGINAL)
             for r in paper_projection_rows(ORIGINAL_KERNEL_EFFICIENCY, sampled, servers)]
    if eff.source != ORIGINAL:
        paper += [dict(r, cpu_kernel=f"this suite's kernel ({eff.value:.0%} of streaming bandwidth, {eff.source})",
                       cpu_efficiency_basis=eff.basis)
                  for r in paper_projection_rows(eff.value, sampled, servers)]
    frames = {"fit": fit_table(f, stream_source, kern, pred, eff), "predicted": pred,
              "paper": pd.DataFrame(paper),  # paper_speedup: the paper's figure of each row's own setting
              "latency": pd.DataFrame(latency_rows(eff.value, sampled, servers)),
              "h200": pd.DataFrame(h200_rows(eff.value, sampled, h200))}
    return frames, eff
