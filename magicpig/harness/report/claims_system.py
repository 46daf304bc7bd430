"""The attention-level and system claims' tests: error_ratio (TopK vs oracle sampling, prompts as the unit),
table9 (sampled fractions), speedup (measured GPU throughput over repeated runs against the paper's ratios)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from magicpig.harness.results_tree import gpu_decode_rows, read_table, sparse_layers
from magicpig.harness.report.claims_context import Context, family
from magicpig.harness.report.markdown import fmt
from magicpig.harness.report.plots_throughput import baseline_labels
from magicpig.harness.result_files import (DECODE_CSV, ERROR_TOPK_VS_ORACLE_CSV, ERROR_TOPK_VS_ORACLE_HEADS_CSV,
                                           KL_GRID_SUMMARY_CSV, PROJECTION_PAPER_HARDWARE_CSV, SPREAD_CSV)
from magicpig.harness.stats.paired import log_t_interval
from magicpig.harness.stats.verdicts import (NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Verdict, combine, decide,
                                             testable)

ONE_PROMPT = "(one capture)"


def _geomean(x: pd.Series) -> float:
    return float(np.exp(np.log(x.clip(lower=1e-12)).mean()))


def prompt_of(df: pd.DataFrame) -> pd.Series:
    """The capture each row belongs to: the ``prompt`` column, or one capture when the file has none."""
    return df["prompt"].astype(str) if "prompt" in df else pd.Series(ONE_PROMPT, index=df.index)


def _decide_over_prompts(rows: pd.DataFrame, keys: list[str], claim: dict, unit: str) -> tuple[pd.Series, str, Verdict]:
    """(ratio per unit, text, verdict): the geometric-mean error ratio per unit (``keys``: layer, or layer and head)
    of each prompt; the interval over prompts of their geometric means; fewer than ``min_prompts`` prompts cannot
    decide (the units of one prompt share its text and are not independent samples)."""
    min_prompts = int(claim.get("min_prompts", 3))
    per_unit = rows.assign(_prompt=prompt_of(rows)).groupby(["_prompt", *keys])["topk_over_oracle"].apply(_geomean)
    iv = log_t_interval(per_unit.groupby("_prompt").apply(_geomean).to_numpy())
    text = (f"TopK/oracle error ratio {iv.value:.2f}" + (f" [{iv.lo:.2f}, {iv.hi:.2f}]" if iv.n > 1 else "")
            + f" (n={iv.n} prompt{'s' * (iv.n != 1)}; per prompt the geometric mean over its long-tailed {unit}; "
            "Student t interval of the mean log ratio over prompts)")
    if iv.n < min_prompts:
        return per_unit, text, testable(f"n={iv.n} prompt{'s' * (iv.n != 1)}: fewer than {min_prompts} prompts "
                                        f"(the {unit} within one prompt are not independent samples)")
    v = decide(iv, 1.0, min_n=min_prompts, strict=True)
    if v.status not in (REPRODUCED, NOT_REPRODUCED):
        v = testable(f"ratio interval [{iv.lo:.2f}, {iv.hi:.2f}] over {iv.n} prompts includes 1")
    return per_unit, text, v


def error_ratio(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """Per prompt: the geometric-mean TopK/oracle error ratio over the long-tailed heads of the sparse layers
    (``error_topk_vs_oracle_heads.csv``; without it, over long-tailed layers); interval over prompts above 1."""
    heads = read_table(ERROR_TOPK_VS_ORACLE_HEADS_CSV.under(ctx.results))
    if heads is not None:
        return _error_ratio_heads(claim, heads)
    tv, sp = read_table(ERROR_TOPK_VS_ORACLE_CSV.under(ctx.results)), read_table(SPREAD_CSV.under(ctx.results))
    if tv is None or sp is None:
        miss = [f.name for f, d in ((ERROR_TOPK_VS_ORACLE_CSV, tv), (SPREAD_CSV, sp)) if d is None]
        return "—", testable("missing data: estimation/" + ", estimation/".join(miss))
    bound = float(claim["long_tail_top_mass_below"])
    mass = sparse_layers(sp).groupby("layer")["top_mass_without_sink"].mean()
    tail = set(mass[mass < bound].index)
    rows = tv[tv["layer"].isin(tail)]
    if rows.empty:
        return (f"no long-tailed sparse layer (per-layer top-20% mass without sink: "
                f"{fmt(mass.min(), digits=3)}-{fmt(mass.max(), digits=3)}; bound {bound:g})",
                testable("missing data: no long-tailed layer in this capture"))
    _, text, v = _decide_over_prompts(rows, ["layer"], claim, "layers")
    return f"{len(tail)} long-tailed layers: {text}, max {rows['topk_over_oracle'].max():.2f}", v


def _error_ratio_heads(claim: dict, heads: pd.DataFrame) -> tuple[str, Verdict]:
    bound = float(claim["long_tail_top_mass_below"])
    sparse = sparse_layers(heads)
    tail = sparse[sparse["top_mass_without_sink"] < bound]
    if tail.empty:
        return (f"no long-tailed head in the sparse layers (top-20% mass without sink: "
                f"{fmt(sparse['top_mass_without_sink'].min(), digits=3)}-"
                f"{fmt(sparse['top_mass_without_sink'].max(), digits=3)}; bound {bound:g})",
                testable("missing data: no long-tailed head in this capture"))
    per_head, text, v = _decide_over_prompts(tail, ["layer", "head"], claim, "heads")
    heads_seen = per_head.reset_index()[["layer", "head"]].drop_duplicates()
    names = ", ".join(f"L{int(la)}h{int(h)}" for la, h in list(heads_seen.itertuples(index=False, name=None))[:12])
    names += " ..." if len(heads_seen) > 12 else ""
    n_heads = sparse.groupby(["layer", "head"]).ngroups
    prompts = f", in {prompt_of(tail).nunique()} of {prompt_of(sparse).nunique()} prompts" if "prompt" in heads else ""
    return (f"{len(heads_seen)} of {n_heads} sparse-layer heads long-tailed ({names}){prompts}: {text}, "
            f"max {tail['topk_over_oracle'].max():.2f}", v)


def table9(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """Share of Table 9 cells whose measured fraction is within ``within_factor`` of the paper's."""
    df = read_table(KL_GRID_SUMMARY_CSV.under(ctx.results))
    t9 = ctx.ref.get("sampled_fraction_table9", {})
    if df is None:
        return "—", testable(f"missing data: {KL_GRID_SUMMARY_CSV.rel}")
    f = float(claim["within_factor"])
    cells = []
    for r in df.itertuples():
        row = t9.get("K", {}).get(int(r.K))
        if row is None or int(r.L) not in t9["L"]:
            continue
        paper = row[t9["L"].index(int(r.L))]
        cells.append(max(r.measured / paper, paper / r.measured) if r.measured > 0 else math.inf)
    if not cells:
        return "no (K, L) of Table 9 measured", testable("missing data: no Table 9 cell measured")
    share = sum(c <= f for c in cells) / len(cells)
    text = (f"{sum(c <= f for c in cells)}/{len(cells)} cells within {f:g}x (median ratio "
            f"{float(np.median(cells)):.2f}x, worst {max(cells):.2f}x)")
    return text, Verdict(REPRODUCED) if share >= float(claim["min_share"]) else Verdict(NOT_REPRODUCED)


# ---- throughput ---------------------------------------------------------------------------------------------------
def model_key(name: str) -> str:
    """'shape:llama-3.1-8b', 'meta-llama/Llama-3.1-8B-Instruct' -> 'llama-3.1-8b' (the paper's model keys)."""
    return str(name).removeprefix("shape:").rpartition("/")[2].lower().removesuffix("-instruct")


def paper_ratios(ref: dict) -> list[dict]:
    """The paper's throughput ratios, one per (hardware, model, context), each with the baseline it is over
    (a key of ``system.baselines``): the stated speedups (Fig. 8; full attention on the GPU, or on the CPU at a
    theoretical 150 GB/s for the simulated RTX 4090) and the max-throughput pair (MagicPIG's tokens/s over
    GPU-only full attention's at one setting)."""
    system = ref.get("system", {})
    out = [{"hardware": e["hardware"], "model": e["model"], "context": int(e["context"]), "ratio": float(e["speedup"]),
            "baseline": e.get("baseline", "gpu_full"), "source": "speedup"}
           for e in system.get("throughput_speedup", [])]
    tput = system.get("max_throughput_tokens_per_s", [])
    for e in tput:
        if family(e["method"]) != "magicpig":
            continue
        dense = [d for d in tput if family(d["method"]) == "dense" and
                 (d["hardware"], d["model"], d["context"]) == (e["hardware"], e["model"], e["context"])]
        if dense:
            out.append({"hardware": e["hardware"], "model": e["model"], "context": int(e["context"]),
                        "ratio": float(e["tokens_per_s"]) / float(dense[0]["tokens_per_s"]), "baseline": "gpu_full",
                        "source": "max throughput"})
    return out


def _ratio(g: pd.DataFrame, max_batch: bool) -> tuple[float, str] | None:
    """MagicPIG's tokens/s over GPU-only full attention's (dense, stock backend first) within one run, at batch 1,
    or each at its largest batch: the max-throughput search's row, else (a run without a search) its best
    measured batch. None where one method's search row is missing (the run stopped before it finished)."""
    def searched(rows: pd.DataFrame) -> pd.DataFrame:
        return rows[rows["search"].notna() & (rows["search"].astype(str).str.strip() != "")] \
            if "search" in rows else rows.iloc[:0]

    def pick(rows: pd.DataFrame) -> pd.Series | None:
        if rows.empty:
            return None
        if not max_batch:
            one = rows[rows["batch"] == 1]
            return None if one.empty else one.loc[one["tokens_per_s"].idxmax()]
        pool = searched(rows) if len(searched(rows)) else rows
        return pool.loc[pool["tokens_per_s"].idxmax()]

    dense = g[g["method"].map(family) == "dense"]
    if "backend" in dense and (dense["backend"] == "stock").any():
        dense = dense[dense["backend"] == "stock"]
    magicpig = g[g["method"].map(family) == "magicpig"]
    if max_batch and searched(magicpig).empty != searched(dense).empty:
        return None
    mp, dn = pick(magicpig), pick(dense)
    if mp is None or dn is None or not dn["tokens_per_s"] > 0:
        return None
    return float(mp["tokens_per_s"] / dn["tokens_per_s"]), f"batch {int(mp['batch'])} vs {int(dn['batch'])}"


def runs(g: pd.DataFrame) -> list[pd.DataFrame]:
    """The independent runs among one setting's rows: per file, the rows of each ``run_id`` (a bench process,
    or a repeat holding both methods); a file without the column, or whose run_ids each hold one method only
    (one process per method), is one run. A run counts when it measured both MagicPIG and dense."""
    out = []
    for _, f in g.groupby("_source", sort=True):
        ids = f["run_id"].astype(str) if "run_id" in f and f["run_id"].notna().all() else None
        parts = [r for _, r in f.groupby(ids, sort=False)] if ids is not None else [f]
        if len(parts) > 1 and any(r["method"].map(family).nunique() < 2 for r in parts):
            parts = [f]
        out += [r for r in parts if {"dense", "magicpig"} <= set(r["method"].map(family))]
    return out


def _paper_ratio(paper: list[dict], gpu: str, model: str, context: int) -> tuple[dict | None, list[dict]]:
    """(The paper ratio over GPU-only full attention a measured GPU setting is set against: its own hardware's, else
    the smallest for that model and context; the paper ratios over other baselines, which a GPU run cannot measure)."""
    same = [p for p in paper if p["model"] == model and p["context"] == int(context)]
    gpu_only = [p for p in same if p["baseline"] == "gpu_full"]
    own = [p for p in gpu_only if p["hardware"].lower() in str(gpu).lower()]
    ref = own[0] if own else (min(gpu_only, key=lambda p: p["ratio"]) if gpu_only else None)
    return ref, [p for p in same if p["baseline"] != "gpu_full"]


def _fmt_ratios(xs: list[tuple[float, str]]) -> str:
    return ", ".join(f"{x:.2f} ({batches})" for x, batches in xs)


def speedup(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """Per measured GPU setting (GPU, model, context): per independent run (``runs``), MagicPIG/dense tokens/s
    at batch 1 and at the largest batch; the max-batch ratios of at least ``min_runs`` runs decide, by the 95%
    Student t interval of their mean log ratio (the geometric-mean ratio), where the paper states a ratio over
    GPU-only full attention for that model and context: reproduced when the interval lies at or above
    max(1, paper ratio / ``tolerance``) (above 1 strictly: the paper's "significantly improves"), not
    reproduced when it lies below. Projections are quoted beside the paper's ratios and never decide."""
    quoted = _projection_quote(ctx.results, ctx.ref)
    rows = gpu_decode_rows(ctx.results, ctx.gpu_folders)
    where = f"GPU results read: {', '.join([DECODE_CSV.rel] + [str(f) for f in ctx.gpu_folders])}"
    if rows.empty:
        return quoted or "—", testable(f"no GPU: no measured GPU rows ({where})")
    tol, min_runs = float(claim.get("tolerance", 2.0)), int(claim.get("min_runs", 3))
    paper = paper_ratios(ctx.ref)
    labels = baseline_labels(ctx.ref)
    lines, verdicts = [], []
    for (gpu, model, context), g in rows.groupby(["_gpu", rows["model"].map(model_key), "context"], sort=True):
        per_run = [(_ratio(r, max_batch=False), _ratio(r, max_batch=True)) for r in runs(g)]
        mx = [m for _, m in per_run if m is not None]
        if not mx:
            continue
        b1 = [b[0] for b, _ in per_run if b is not None]
        iv = log_t_interval([m[0] for m in mx])
        label = f"{gpu or 'GPU'}, {model}, {int(context)} tokens"
        line = (f"{label}: {iv.n} run{'s' * (iv.n != 1)}, max-batch ratio per run {_fmt_ratios(mx)}, geometric mean "
                f"{iv.value:.2f}x" + (f" [{iv.lo:.2f}, {iv.hi:.2f}]" if iv.n > 1 else "")
                + (f", batch 1 geometric mean {log_t_interval(b1).value:.2f}x" if b1 else ", batch 1 not measured"))
        ref, other = _paper_ratio(paper, gpu, model, context)
        line += "".join(f" (the paper's {p['ratio']:.2f}x on {p['hardware']} is over "
                        f"{labels.get(p['baseline'], p['baseline'])}, not measured here: see the projection)"
                        for p in other)
        if ref is None:
            lines.append(line + " (no paper ratio over GPU-only full attention for this model and context: shown, "
                                "not decisive)")
            continue
        bar = max(1.0, ref["ratio"] / tol)
        line += f"; paper {ref['ratio']:.2f}x ({ref['hardware']}, {ref['source']}), bar {bar:.2f}x"
        lines.append(line)
        if iv.n < min_runs:
            verdicts.append(testable(f"{label}: {iv.n} independent run{'s' * (iv.n != 1)} with both methods, "
                                     f"needs {min_runs} (docs/benchmarking.md: repeated runs)"))
            continue
        v = decide(iv, bar, min_n=min_runs, strict=bar <= 1.0)
        if v.status == NOT_TESTABLE:
            v = testable(f"{label}: interval [{iv.lo:.2f}, {iv.hi:.2f}] over {iv.n} runs includes the bar {bar:.2f}x")
        elif v.status == NOT_REPRODUCED:
            v = Verdict(NOT_REPRODUCED, f"{label}: [{iv.lo:.2f}, {iv.hi:.2f}] over {iv.n} runs below {bar:.2f}x")
        verdicts.append(v)
    text = ("measured on GPU (" + INTERVAL + "): " + "; ".join(lines) + (f"; {quoted}" if quoted else ""))
    if not verdicts:
        settings = ", ".join(sorted({f"{p['model']} {p['context']}" for p in paper if p["baseline"] == "gpu_full"}))
        return text, testable(f"no measured GPU setting matches a paper setting over GPU-only full attention "
                              f"({settings})")
    return text, combine(verdicts)


INTERVAL = ("a run: one bench process, or one repeat's file, holding both methods; interval: two-sided Student t "
            "interval (95% unless the report adjusts the level) of the mean log ratio over runs, exponentiated: "
            "the geometric-mean ratio's")


def _projection_quote(results: Path, ref: dict) -> str:
    """The projected speedups per CPU kernel efficiency, each over its baseline beside the paper's ratio, with
    where that efficiency comes from and why (``cpu_efficiency_basis``: e.g. the decode-row fit refused)."""
    proj = read_table(PROJECTION_PAPER_HARDWARE_CSV.under(results))
    if proj is None or "speedup" not in proj:
        return ""
    labels = baseline_labels(ref)
    text = (proj.reindex(columns=["cpu_kernel", "cpu_efficiency_basis", "baseline"]).astype(object).fillna("")
            .astype(str))

    def one(r) -> str:
        v, over, p = float(r.speedup), labels.get(r.q_baseline, r.q_baseline), float(r.q_paper)
        if not math.isfinite(v):
            return f"{r.hardware} (full attention does not fit)"
        return (f"{r.hardware} {v:.2f}x" + (f" over {over}" if over else "")
                + (f" (paper {p:.1f}x)" if math.isfinite(p) else ""))
    quoted = proj.assign(_k=text["cpu_kernel"], _why=text["cpu_efficiency_basis"], q_baseline=text["baseline"],
                         q_paper=pd.to_numeric(proj.get("paper_speedup", math.nan), errors="coerce"))
    return "PROJECTION (bandwidth model, not measured): " + "; ".join(
        f"CPU kernel {k}" * bool(k) + f" [{why}]" * bool(why) + ": " * bool(k or why)
        + ", ".join(one(r) for r in g.itertuples()) for (k, why), g in quoted.groupby(["_k", "_why"], sort=False))
