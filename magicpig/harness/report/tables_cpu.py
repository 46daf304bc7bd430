"""The CPU decoders side by side: per context, ms/token at batch 1 of stock transformers, llama.cpp on the
same GGUF file, our dense decoder and MagicPIG, each beside its step's bytes-limit, and MagicPIG's speed
against llama.cpp (the decoder a CPU user would otherwise run). From ``throughput/decode.csv``."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from magicpig.harness.report.markdown import fmt, table
from magicpig.harness.results_tree import cpu_decode_rows, truthy

TITLE = "CPU decoders side by side (batch 1, measured)"
# the baseline decoders, by (method, backend), in the table's order
SYSTEMS = {("dense", "stock"): "stock transformers", ("dense", "llamacpp"): "llama.cpp",
           ("dense", "reference"): "our dense"}


def system_label(method: str, backend: str) -> str:
    return SYSTEMS.get((method, backend), f"{method}@{backend}")


def batch_one(decode: pd.DataFrame) -> pd.DataFrame:
    """The measured batch-1 rows (not max-batch searches), one per (system, context): the last written."""
    df = decode[(decode["batch"] == 1) & (decode["search"].astype(object).fillna("").astype(str) == "")]
    return df.drop_duplicates(["method", "backend", "context"], keep="last")


def cpu_baselines_section(results: Path) -> list[str]:
    decode = cpu_decode_rows(results)
    if decode is None:
        return [f"### {TITLE}", "Not run (no `throughput/decode.csv` with the bench's columns)."]
    df = batch_one(decode)
    if df.empty:
        return [f"### {TITLE}", "No batch-1 CPU rows."]
    fits = truthy(df["fits"])
    present = list(dict.fromkeys(zip(df["method"], df["backend"])))
    systems = [s for s in SYSTEMS if s in present] + [s for s in present if s not in SYSTEMS]
    llama = df[(df["backend"] == "llamacpp") & fits]
    magicpig = [s for s in systems if s[0].startswith("magicpig")] if len(llama) else []
    header = ["context"] + [system_label(*s) for s in systems] + [f"{m} vs llama.cpp" for m, _ in magicpig]
    rows = []
    for n in sorted(df["context"].unique()):
        at = df[df["context"] == n]
        row = [int(n)]
        for m, b in systems:
            hit = at[(at["method"] == m) & (at["backend"] == b)]
            row.append(_cell(hit.iloc[0]) if len(hit) else "")
        ref = llama[llama["context"] == n]
        for m, b in magicpig:
            hit = at[(at["method"] == m) & (at["backend"] == b) & truthy(at["fits"])]
            row.append(f"{float(ref['ms_per_token'].iloc[0]) / float(hit['ms_per_token'].iloc[0]):.2f}x"
                       if len(ref) and len(hit) else "")
        rows.append(row)
    reasons = df.get("reason", pd.Series("", index=df.index)).fillna("").astype(str)
    notes = [f"- `{system_label(m, b)}` not run: {reason}" for (m, b), reason in
             reasons[~fits].groupby([df["method"], df["backend"]], sort=False).first().items()]
    weights = sorted({f"{system_label(m, b)}: {w}" for m, b, w in df[fits][["method", "backend", "weights"]]
                      .itertuples(index=False)}) if "weights" in df else []
    return [f"### {TITLE}",
            "ms/token (and, in brackets, the step's bytes-limit: the bytes it must read at this machine's "
            "streaming read, then the row's share of it: ms/token over the bytes-limit, 1.0x = as fast as "
            "reading its bytes allows; '(under load)' marks a row another process shared the CPU with). The ratios are "
            "llama.cpp's ms/token over MagicPIG's, from the same run. Weights as read: "
            + ("; ".join(weights) or "not recorded") + ".",
            table(header, rows)] + notes


def _true(value) -> bool:
    return bool(truthy(pd.Series([value])).iloc[0])


def _cell(r) -> str:
    if not _true(r["fits"]):
        return "not run"
    ms = float(r["ms_per_token"])
    limit = pd.to_numeric(pd.Series([r.get("bytes_limit_ms")]), errors="coerce").iloc[0]
    text = fmt(ms, digits=1) + ("" if pd.isna(limit) or not limit > 0 else f" ({limit:.1f}, {ms / limit:.1f}x)")
    return text + (" (under load)" if _true(r.get("under_load", False)) else "")
