"""Throughput figures: measured decoding (``throughput/decode.csv``, ``magicpig bench-decode``) and the
bandwidth-model projections (``projection_*.csv``, ``magicpig project``), always in separate panels, the
projected ones titled "PROJECTION"."""
from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from magicpig.harness.projection import HARDWARE
from magicpig.harness.report import canvas
from magicpig.harness.report.tables_system import batch_one, system_label
from magicpig.harness.results_tree import cpu_decode_rows, gpu_decode_rows, gpu_run_folders, read_table, truthy
from magicpig.harness.result_files import (DECODE_CSV, PROJECTION_H200_CSV, PROJECTION_PAPER_HARDWARE_CSV,
                                           PROJECTION_PAPER_LATENCY_CSV)

PROJECTED = "PROJECTION (bandwidth model, not measured)"


def _system(ref: dict) -> dict:
    return ref.get("system", {}) or {}


def baseline_labels(ref: dict) -> dict:
    """The paper's baselines (``system.baselines``) by key: the label each is named by."""
    return {k: v.get("label", k) for k, v in (_system(ref).get("baselines") or {}).items()}


def baselines_caption(ref: dict) -> str:
    """What each of the paper's ratios is over (``system.baselines`` and ``throughput_speedup`` of the paper
    reference, Sec. 5.2) and how the projection models the CPU baseline."""
    system, labels = _system(ref), baseline_labels(ref)
    per = "; ".join(f"{e['hardware']}: {labels.get(e.get('baseline'), e.get('baseline'))}"
                    for e in system.get("throughput_speedup", []))
    text = f"paper's baselines (Sec. 5.2): {per}."
    cpu = [v for v in (system.get("baselines") or {}).values() if v.get("kv_read_gbps")]
    if cpu:
        text += (f" Projected CPU baseline: the whole KV cache read from host memory at {cpu[0]['kv_read_gbps']:g} "
                 "GB/s, the weights read on the GPU (bandwidth x efficiency, plus a per-layer overhead), one after the "
                 "other, at the largest batch whose cache fits host memory.")
    return text


def _label(r) -> str:
    backend = getattr(r, "backend", "")
    return f"{r.method}" + (f"@{backend}" if isinstance(backend, str) and backend else "")


def _measured(ax, df, x: str, y: str, by: str) -> None:
    """Lines of ``y`` vs ``x`` for each (method, backend, ``by``) with a value (a row that did not fit has
    none, and gets no legend entry); rows under load hollow."""
    df = df[pd.to_numeric(df[y], errors="coerce").notna()]
    df = df.assign(_label=[_label(r) for r in df.itertuples()])
    load = truthy(df["under_load"]) if "under_load" in df else df[x] < 0
    for i, ((lab, b), g) in enumerate(df.groupby(["_label", by], sort=False)):
        g = g.sort_values(x)
        ax.plot(g[x], g[y], "o-", color=f"C{i % 10}", label=f"{lab}, {by} {b}")
        bad = load.loc[g.index]
        if bad.any():
            ax.plot(g.loc[bad, x], g.loc[bad, y], "o", mfc="white", color=f"C{i % 10}")
    if load.any():
        ax.plot([], [], "o", mfc="white", color="k", label="under load (not fitted)")
    canvas.legend_below(ax, fontsize=6)
    canvas.log_if_wide(ax, df[y])


def _panels(results: Path, title: str, x: str, y: str, by: str, xlabel: str, ylabel: str, height: float = 4.4):
    """The three panels of a throughput figure: MEASURED ``y`` vs ``x`` per (method, ``by``) from decode.csv, then
    the H200 and the paper's-machine panels, titled PROJECTION, for the caller to draw. Returns (fig, axes, the
    three tables: decode.csv, the H200 and the paper's-machine projection; None where absent: the panel says so)."""
    fig, axes = canvas.subplots(3, title, width=4.8, height=height)
    frames = tuple(canvas.panel_table(results, file, ax)
                   for file, ax in zip((DECODE_CSV, PROJECTION_H200_CSV, PROJECTION_PAPER_LATENCY_CSV), axes))
    for ax in axes:
        ax.set(xlabel=xlabel, ylabel=ylabel)
    if frames[0] is not None:
        _measured(axes[0], frames[0], x, y, by)
    axes[1].set_title("H200: " + PROJECTED, color="darkorange", fontsize=9)
    return fig, axes, frames


def _paper_title(ax, paper_rows: list[dict]) -> None:
    hw = {str(r.get("hardware")) for r in paper_rows} or {"L20"}
    ax.set_title(f"paper's {', '.join(sorted(hw))}: paper vs PROJECTION", color="darkorange", fontsize=9)
    canvas.legend_below(ax, ncol=1, fontsize=6)


def throughput_batch(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Tokens/s vs batch: measured on this machine | PROJECTION on one H200 | the paper's L20: its numbers
    beside the projection of the same settings (each machine on its own axes)."""
    title = "Decoding throughput vs batch"
    fig, (ax, axp, axl), (df, proj, lat) = _panels(results, title, "batch", "tokens_per_s", "context",
                                                    "batch", "tokens / s")
    if df is not None:
        canvas.fit_single(ax, df["batch"])
    ax.set_title("MEASURED on this machine (" + ("no rows" if df is None else
                                                 ", ".join(sorted(set(df["device"].astype(str))))) + ")", fontsize=9)
    if proj is not None:
        for i, ((m, n), g) in enumerate(proj.groupby(["method", "context"], sort=False)):
            g = g.sort_values("batch")
            axp.plot(g["batch"], g["tokens_per_s"], "o-", color=f"C{i % 10}", label=f"{m}, {n // 1024}K")
        canvas.readable_log(axp)
        canvas.legend_below(axp, fontsize=6)
    paper_rows = _system(ref).get("max_throughput_tokens_per_s", [])
    if lat is not None:
        sel = lat[lat["what"].astype(str).str.contains("tokens/s")]
        axl.plot(sel["batch"], sel["projected"], "D", color="darkorange", mfc="none", ms=8,
                 label="projected (bandwidth model)")
    for row in paper_rows:
        if row.get("batch") is not None:
            axl.plot(row["batch"], row["tokens_per_s"], "*", ms=12, color="crimson",
                     label=f"paper {row['method']}: {row['tokens_per_s']} tok/s at batch {row['batch']}")
        else:
            axl.axhline(row["tokens_per_s"], color="crimson", ls="--", lw=1,
                        label=f"paper {row['method']} (GPU-only, largest batch): {row['tokens_per_s']} tok/s")
    axl.set_ylim(bottom=0)
    _paper_title(axl, paper_rows)
    return canvas.save(fig, path, title)


def throughput_context(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """ms per token vs context: measured on this machine | PROJECTION (H200, batch 1) | the paper's
    latency beside the projection of the same setting on the paper's machine."""
    title = "Decoding latency vs context"
    fig, (ax, axp, axl), (df, proj, lat) = _panels(results, title, "context", "ms_per_token", "batch",
                                                    "context (tokens)", "ms / token", height=6.0)
    if df is not None:
        ax.set_xscale("log", base=2)
        canvas.fit_single(ax, df["context"], log=True)
    ax.set_title("MEASURED on this machine", fontsize=9)
    if proj is not None:
        one = proj[proj["batch"] == 1]
        for i, (m, g) in enumerate(one.groupby("method", sort=False)):
            g = g.sort_values("context")
            axp.plot(g["context"], g["ms_per_token"], "o-", color=f"C{i % 10}", label=f"{m}, batch 1")
        axp.set_xscale("log", base=2)
        canvas.log_if_wide(axp, one["ms_per_token"])
        canvas.legend_below(axp, ncol=1, fontsize=6)
    if lat is not None:
        sel = lat[lat["what"].astype(str).str.contains("ms/token")]
        names = [textwrap.fill(f"{str(h).split(' (')[0]}: {w}", 32) for h, w in zip(sel["hardware"], sel["what"])]
        xs = np.arange(len(sel))
        proj = pd.to_numeric(sel["projected"], errors="coerce").to_numpy()
        paper = pd.to_numeric(sel["paper"], errors="coerce").to_numpy()
        axl.bar(xs - 0.2, np.where(np.isfinite(proj), proj, 0), 0.4, color="darkorange",
                label="projected (bandwidth model)")
        axl.bar(xs + 0.2, np.nan_to_num(paper), 0.4, color="crimson", alpha=0.7, label="paper")
        for x, v, pv in zip(xs, proj, paper):
            axl.text(x - 0.2, v if np.isfinite(v) else 0, f"{v:.0f}" if np.isfinite(v) else "does not fit",
                     ha="center", va="bottom", fontsize=6)
            if np.isfinite(pv):
                axl.text(x + 0.2, pv, f"{pv:g}", ha="center", va="bottom", fontsize=6)
        axl.set_xticks(xs, names, fontsize=6)
    axl.set_xlabel("")
    _paper_title(axl, _system(ref).get("latency_ms_per_token", []))
    if axl.get_legend() is not None:  # under the four-line tick labels
        axl.get_legend().set_bbox_to_anchor((0.5, -0.5))
    for e in _system(ref).get("latency_ms_per_token", []):
        machine = HARDWARE[e["hardware"]].name if e["hardware"] in HARDWARE else str(e["hardware"])
        canvas.note(axl, f"paper: {e['ms']:g} ms/token at batch {e['batch']} on the {machine}, "
                         f"{e['model']}, {int(e['context']) // 1024}K, {e['method']} (Fig. 8c, Sec. 5.2)")
    canvas.note(axl, baselines_caption(ref))
    return canvas.save(fig, path, title)


def speedup_paper_hardware(results: Path, ref: dict, path: Path,
                           gpu_folders: Sequence[Path] | None = None) -> canvas.FigureResult:
    """Speed-up of MagicPIG over the paper's baseline of each setting: measured on a GPU (over GPU-only full
    attention, each method at its best measured batch) from the preset's GPU decode rows and the GPU runs
    ``gpu_folders`` (default ``results_tree.gpu_run_folders``) | PROJECTION for the paper's three machines, each
    over its own baseline (``baselines_caption``), our ratio printed beside the paper's 1.5x / 5.0x / 3.3x."""
    title = "Throughput speed-up over the paper's baseline of each setting"
    fig, (ax, axp) = canvas.subplots(2, title, width=6.0, height=6.0)
    gpu = gpu_decode_rows(results, list(gpu_run_folders(results) if gpu_folders is None else gpu_folders))
    if gpu.empty:
        canvas.no_data(ax, f"{DECODE_CSV.rel} rows on a GPU\n(this machine has none), or a GPU run")
    else:
        best = gpu.groupby(["context", "method"])["tokens_per_s"].max().unstack()
        dense = [c for c in best.columns if str(c).startswith("dense")]
        for i, m in enumerate(c for c in best.columns if str(c).startswith("magicpig")):
            if dense:
                ax.plot(best.index, best[m] / best[dense[0]], "o-", color=f"C{i}", label=f"{m} / {dense[0]}")
        ax.axhline(1, color="k", lw=0.6)
        canvas.fit_single(ax, best.index)
        ax.set(xlabel="context", ylabel="ratio of max tokens/s (each at its best batch)")
        canvas.legend_below(ax)
    where = "a GPU" if gpu.empty else ", ".join(sorted(set(gpu["_gpu"].astype(str))))
    ax.set_title(f"MEASURED on {where} (over GPU-only full attention)", fontsize=9)
    paper, labels = _system(ref).get("throughput_speedup", []), baseline_labels(ref)
    proj = read_table(PROJECTION_PAPER_HARDWARE_CSV.under(results))
    names = [f"{p['hardware']}\n{p['model']} {p['context'] // 1024}K\n"
             + textwrap.fill(f"over {labels.get(p.get('baseline'), p.get('baseline'))}", 30) for p in paper]
    xs = np.arange(len(paper))
    kernels = [] if proj is None else list(dict.fromkeys(proj.get("cpu_kernel", pd.Series(["projected"] * len(proj)))))
    width = 0.8 / (1 + max(1, len(kernels)))
    axp.bar(xs, [p["speedup"] for p in paper], width, color="crimson", alpha=0.7, label="paper")
    for x, p in zip(xs, paper):
        axp.text(x, p["speedup"], f"{p['speedup']:g}x", ha="center", va="bottom", fontsize=6, color="crimson")
    if proj is None:
        canvas.no_data(axp, PROJECTION_PAPER_HARDWARE_CSV.rel)
    else:
        if "cpu_kernel" not in proj:
            proj = proj.assign(cpu_kernel="projected")
        table = {k: [] for k in kernels}
        for k in kernels:
            rows = proj[proj["cpu_kernel"] == k]
            for p in paper:
                hit = rows[(rows["model"].astype(str).str.lower() == str(p["model"]).lower())
                           & (rows["context"] == p["context"])]
                if "baseline" in hit:
                    hit = hit[hit["baseline"].astype(str) == str(p.get("baseline"))]
                table[k].append(float(hit["speedup"].iloc[0]) if len(hit) else np.nan)
        finite = [v for vals in table.values() for v in vals if np.isfinite(v)]
        cap = 1.2 * max([p["speedup"] for p in paper] + finite + [1])
        for j, (k, vals) in enumerate(table.items(), start=1):
            x = xs + j * width
            axp.bar(x, [min(v, cap) if np.isfinite(v) else 0 for v in vals], width, color=f"C{j}",
                    label=f"projected, CPU kernel {k}")
            for xi, v, p in zip(x, vals, paper):
                if not np.isfinite(v):
                    gone = f"{labels.get(p.get('baseline'), 'baseline')}\ndoes not fit" if v == np.inf else "no row"
                    axp.text(xi, cap * 0.05, textwrap.fill(gone, 24), ha="center", va="bottom", fontsize=5,
                             rotation=90)
                else:
                    axp.text(xi, min(v, cap), f"{v:.1f}x", ha="center", va="bottom", fontsize=6)
        xs = xs + width * len(kernels) / 2
    axp.set_xticks(xs, names, fontsize=6)
    axp.set_ylabel("speed-up (x)")
    axp.set_title(PROJECTED, color="darkorange")
    axp.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.32), frameon=False)
    canvas.note(axp, baselines_caption(ref))
    return canvas.save(fig, path, title)


def cpu_baselines(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """The CPU decoders against context: ms/token at batch 1 (solid; dashed: the step's bytes-limit) | tokens/s
    at the largest batch that fits (``--max-throughput`` rows, the batch written at each point). Stock
    transformers, llama.cpp on the same GGUF file, our dense decoder and MagicPIG, all measured here."""
    title = "CPU decoders: stock transformers, llama.cpp, our dense, MagicPIG"
    fig, (ax, axm) = canvas.subplots(2, title, width=5.0, height=4.4)
    df = cpu_decode_rows(results)
    if df is not None:
        df = df[truthy(df["fits"])]
    if df is None or df.empty:
        return canvas.no_data_figure(fig, (ax, axm), "throughput/decode.csv (CPU rows)", path, title)
    one = batch_one(df)
    load = truthy(df["under_load"]) if "under_load" in df else pd.Series(False, index=df.index)
    for i, ((m, b), g) in enumerate(one.groupby(["method", "backend"], sort=False)):
        g = g.sort_values("context")
        ax.plot(g["context"], g["ms_per_token"], "o-", color=f"C{i % 10}", label=system_label(m, b))
        shared = load.loc[g.index]  # the table's '(under load)' rows: hollow here
        ax.plot(g.loc[shared, "context"], g.loc[shared, "ms_per_token"], "o", mfc="white", color=f"C{i % 10}")
        limit = pd.to_numeric(g.get("bytes_limit_ms"), errors="coerce")
        if limit is not None and limit.notna().any():
            ax.plot(g["context"], limit, "--", color=f"C{i % 10}", lw=0.8)
    ax.plot([], [], "k--", lw=0.8, label="bytes-limit of the step")
    if load.loc[one.index].any():
        ax.plot([], [], "o", mfc="white", color="k", label="under load (another process shared the CPU)")
    ax.set_title("batch 1: ms / token (lower is better)", fontsize=9)
    ax.set(xlabel="context (tokens)", ylabel="ms / token")
    ax.set_xscale("log", base=2)
    canvas.fit_single(ax, one["context"], log=True)
    canvas.log_if_wide(ax, one["ms_per_token"])
    canvas.legend_below(ax, fontsize=6)
    best = df[df["search"].fillna("").astype(str) != ""]
    if best.empty:
        canvas.no_data(axm, "max-batch rows (bench decode --max-throughput)")
    for i, ((m, b), g) in enumerate(best.groupby(["method", "backend"], sort=False)):
        g = g.sort_values("context")
        axm.plot(g["context"], g["tokens_per_s"], "o-", color=f"C{i % 10}", label=system_label(m, b))
        shared = load.loc[g.index]
        axm.plot(g.loc[shared, "context"], g.loc[shared, "tokens_per_s"], "o", mfc="white", color=f"C{i % 10}")
        for x, y, batch, busy in zip(g["context"], g["tokens_per_s"], g["batch"], shared):
            axm.annotate(f"B={int(batch)}" + (" (under load)" if busy else ""), (x, y), fontsize=6, xytext=(3, 3),
                         textcoords="offset points")
    axm.set_title("largest batch that fits: tokens / s", fontsize=9)
    axm.set(xlabel="context (tokens)", ylabel="tokens / s")
    if not best.empty:
        axm.set_xscale("log", base=2)
        canvas.fit_single(axm, best["context"], log=True)
        canvas.legend_below(axm, fontsize=6)
    return canvas.save(fig, path, title)
