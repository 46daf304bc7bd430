"""The claims table: each qualitative claim of the paper (``claims:`` in ``config/paper_reference.yaml``),
what this run measured, and a verdict: reproduced / not reproduced / not testable here (why).

A claim's ``kind`` names its test below; the thresholds are the YAML's. Accuracy tests decide on 95%
bootstrap intervals (``bootstrap``): an interval that straddles the threshold, or rests on fewer than
``min_samples`` samples per method, cannot decide and says so with its n and interval.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from magicpig.harness.report import canvas
from magicpig.harness.report.bootstrap import (Interval, difference_interval, ratio_log_interval,
                                               stratified_interval)
from magicpig.harness.report.collect import canonical, collect_metrics, run_samples
from magicpig.harness.report.markdown import fmt, table

REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE = "reproduced", "not reproduced", "not testable here"


@dataclass(frozen=True)
class Verdict:
    status: str  # one of REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE
    reason: str = ""

    def text(self) -> str:
        if self.status == NOT_TESTABLE:
            return f"{NOT_TESTABLE} ({self.reason})" if self.reason else NOT_TESTABLE
        return self.status + (f" ({self.reason})" if self.reason else "")


@dataclass
class ClaimResult:
    id: str
    text: str
    test: str
    measured: str
    verdict: Verdict
    needs: str = ""


def testable(reason: str) -> Verdict:
    return Verdict(NOT_TESTABLE, reason)


def decide(iv: Interval, threshold: float, *, min_n: int, above: bool = True) -> Verdict:
    """Verdict of "the quantity is above (``above``) or below ``threshold``" from its interval.

    Reproduced when the whole interval is on the claimed side (the threshold itself counts as that side),
    not reproduced when it is wholly on the other, otherwise (or with n < ``min_n``) not testable."""
    if iv.n == 0 or math.isnan(iv.value):
        return testable("missing data")
    where = f"n={iv.n}: interval [{iv.lo:.3g}, {iv.hi:.3g}]"
    if iv.n < min_n:
        return testable(f"{where}; fewer than {min_n} samples")
    ok = iv.lo >= threshold if above else iv.hi <= threshold
    bad = iv.hi < threshold if above else iv.lo > threshold
    if ok:
        return Verdict(REPRODUCED)
    if bad:
        return Verdict(NOT_REPRODUCED)
    return testable(where)


def combine(verdicts: Iterable[Verdict]) -> Verdict:
    """One verdict from several comparisons: any not reproduced wins, then all reproduced, else not testable
    (with the reasons of the undecided ones)."""
    vs = list(verdicts)
    if not vs:
        return testable("missing data")
    bad = [v for v in vs if v.status == NOT_REPRODUCED]
    if bad:
        return Verdict(NOT_REPRODUCED, "; ".join(v.reason for v in bad if v.reason))
    open_ = [v for v in vs if v.status == NOT_TESTABLE]
    if not open_:
        return Verdict(REPRODUCED)
    return testable("; ".join(dict.fromkeys(v.reason for v in open_ if v.reason)))


class Context:
    """What the tests read: the results root, the finished accuracy runs, the reference and min_samples."""

    def __init__(self, results: Path, ref: dict):
        self.results, self.ref = Path(results), ref
        self.min_samples = int(ref.get("claims", {}).get("min_samples", 20))
        acc = self.results / "accuracy"
        df = collect_metrics(acc) if acc.is_dir() else collect_metrics(self.results / "__none__")
        self.acc = df[df["status"] == "ok"]

    def runs(self, benchmark: str, tasks: list[str] | None = None, root: pd.DataFrame | None = None):
        df = self.acc if root is None else root
        df = df[df["task"].fillna("").str.startswith(benchmark)]
        return df[df["task"].isin(tasks)] if tasks else df


def _family(method: str) -> str:
    return method.partition(":")[0]


def _iv_text(label: str, iv: Interval) -> str:
    return f"{label}: {iv.value:+.1f} [{iv.lo:+.1f}, {iv.hi:+.1f}] (n={iv.n})"


# ---- accuracy tests --------------------------------------------------------------------------------------------
def near(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """(method - baseline) above -max_drop at every length both ran; measured cost2 within cost_range."""
    method, base = canonical(claim["method"]), canonical(claim["baseline"])
    df = ctx.runs(claim["benchmark"], claim.get("tasks"))
    lines, verdicts = [], []
    for n, at in df.groupby("length"):
        a, b = at[at["method"] == method], at[at["method"] == base]
        if a.empty or b.empty:
            continue
        iv = difference_interval(run_samples(a), run_samples(b))
        cost = a["cost"].mean()
        v = decide(iv, -float(claim["max_drop"]), min_n=ctx.min_samples)
        lo, hi = claim.get("cost_range") or (0.0, 1.0)
        cost_ok = cost == cost and lo <= cost <= hi
        if not cost_ok:
            v = combine([v, Verdict(NOT_REPRODUCED, f"cost2 {fmt(cost, pct=True)} outside "
                                                    f"[{fmt(lo, pct=True)}, {fmt(hi, pct=True)}]")])
        lines.append(_iv_text(f"{n} tokens, {method} - {base}", iv) + f", cost2 {fmt(cost, pct=True)}")
        verdicts.append(v)
    if not verdicts:
        return "no run of both settings", testable(f"missing data: no {claim['benchmark']} runs of "
                                                   f"`{method}` and `{base}` at one length")
    return "; ".join(lines), combine(verdicts)


def _family_comparisons(claim: dict, ctx: Context, keep: Callable[[float, float], bool], threshold: float):
    """(method - each run of ``family`` whose cost passes ``keep(cost_family, cost_method)``) per length."""
    method, family = canonical(claim["method"]), claim["family"]
    df = ctx.runs(claim["benchmark"], claim.get("tasks"))
    lines, verdicts = [], []
    for n, at in df.groupby("length"):
        a = at[at["method"] == method]
        if a.empty:
            continue
        ca = a["cost"].mean()
        for other, b in at[at["method"].map(_family) == family].groupby("method"):
            cb = b["cost"].mean()
            if not keep(cb, ca):
                continue
            iv = difference_interval(run_samples(a), run_samples(b))
            lines.append(_iv_text(f"{n} tokens, {method} ({fmt(ca, pct=True)}) - {other} ({fmt(cb, pct=True)})", iv))
            verdicts.append(decide(iv, threshold, min_n=ctx.min_samples))
    if not verdicts:
        return "no comparable runs", testable(f"missing data: no {family} run at a comparable cost beside "
                                              f"`{method}` on {claim['benchmark']}")
    return "; ".join(lines), combine(verdicts)


def clearly_lower(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """Every run of ``family`` at cost >= the method's scores at least ``min_gap`` below it."""
    return _family_comparisons(claim, ctx, lambda cb, ca: cb >= ca, float(claim.get("min_gap", 0)))


def at_least(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """The method is not below any run of ``family`` within ``cost_factor`` of its cost (by > margin)."""
    f = float(claim.get("cost_factor", 2))
    keep = lambda cb, ca: cb > 0 and ca > 0 and max(cb, ca) / min(cb, ca) <= f  # noqa: E731
    return _family_comparisons(claim, ctx, keep, -float(claim.get("margin", 0)))


def centering(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """Uncentered sampled fraction below the paper's bound and uncentered NIAH interval near 0."""
    bound = ctx.ref.get("ablations", {}).get("no_centering", {}).get("sampled_fraction_below", 0.001)
    method = canonical(claim["method"])
    abl = ctx.results / "ablations" / "centering"
    df = collect_metrics(abl) if abl.is_dir() else collect_metrics(ctx.results / "__none__")
    runs = df[(df["status"] == "ok") & (df["method"] == method)]
    parts, verdicts = [], []
    summ = canvas.read(ctx.results / "estimation" / "centering_summary.csv")
    frac, src = None, ""
    from magicpig.methods import parse_method

    m = parse_method(claim["method"])
    if summ is not None:
        sel = summ[(summ["K"] == m.K) & (summ["L"] == m.L) & ~canvas.truthy(summ["centering"])]
        if len(sel):
            frac, src = float(sel["cost2"].mean()), "attention-level, sparse layers"
    if frac is None and len(runs):
        frac, src = float(runs["cost"].mean()), "decoding runs"
    if frac is None:
        verdicts.append(testable("missing data: no uncentered sampled fraction"))
    else:
        parts.append(f"uncentered sampled fraction {fmt(frac, pct=True)} ({src}; paper < {fmt(bound, pct=True)})")
        verdicts.append(Verdict(REPRODUCED) if frac < bound else
                        Verdict(NOT_REPRODUCED, f"{fmt(frac, pct=True)} sampled"))
    niah = runs[runs["task"].fillna("").str.contains("niah")]
    samples = run_samples(niah)
    if not samples:
        verdicts.append(testable("missing data: no uncentered NIAH predictions"))
    else:
        iv = stratified_interval({t: list(s.values()) for t, s in samples.items()})
        parts.append(f"uncentered NIAH {iv.text()}")
        verdicts.append(decide(iv, float(claim["niah_near_zero_points"]), min_n=ctx.min_samples, above=False))
    return "; ".join(parts) or "—", combine(verdicts)


# ---- attention-level and system tests -------------------------------------------------------------------------
def error_ratio(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """Geometric-mean TopK/oracle error ratio over the long-tailed heads of the sparse layers, interval over
    heads above 1 (``error_topk_vs_oracle_heads.csv``); without that file, over long-tailed layers."""
    est = ctx.results / "estimation"
    heads = canvas.read(est / "error_topk_vs_oracle_heads.csv")
    if heads is not None:
        return _error_ratio_heads(claim, heads)
    tv, sp = canvas.read(est / "error_topk_vs_oracle.csv"), canvas.read(est / "spread.csv")
    if tv is None or sp is None:
        miss = [n for n, d in (("error_topk_vs_oracle.csv", tv), ("spread.csv", sp)) if d is None]
        return "—", testable("missing data: estimation/" + ", estimation/".join(miss))
    bound = float(claim["long_tail_top_mass_below"])
    sp = sp[~canvas.truthy(sp["dense_in_magicpig"])] if "dense_in_magicpig" in sp else sp
    mass = sp.groupby("layer")["top_mass_without_sink"].mean()
    tail = set(mass[mass < bound].index)
    rows = tv[tv["layer"].isin(tail)]
    per_layer = rows.groupby("layer")["topk_over_oracle"].apply(lambda r: float(np.exp(np.log(r.clip(lower=1e-12)).mean())))
    if per_layer.empty:
        return (f"no long-tailed sparse layer (per-layer top-20% mass without sink: "
                f"{fmt(mass.min(), digits=3)}-{fmt(mass.max(), digits=3)}; bound {bound:g})",
                testable("missing data: no long-tailed layer in this capture"))
    iv = ratio_log_interval(per_layer.to_numpy())
    text = (f"{len(per_layer)} long-tailed layers: TopK/oracle error ratio {iv.value:.2f} "
            f"[{iv.lo:.2f}, {iv.hi:.2f}] (n={iv.n} layers), max {rows['topk_over_oracle'].max():.2f}")
    return text, decide(iv, 1.0, min_n=int(claim.get("min_layers", 3)))


def _error_ratio_heads(claim: dict, heads) -> tuple[str, Verdict]:
    bound = float(claim["long_tail_top_mass_below"])
    sparse = heads[~canvas.truthy(heads["dense_in_magicpig"])] if "dense_in_magicpig" in heads else heads
    tail = sparse[sparse["top_mass_without_sink"] < bound]
    if tail.empty:
        return (f"no long-tailed head in the sparse layers (top-20% mass without sink: "
                f"{fmt(sparse['top_mass_without_sink'].min(), digits=3)}-"
                f"{fmt(sparse['top_mass_without_sink'].max(), digits=3)}; bound {bound:g})",
                testable("missing data: no long-tailed head in this capture"))
    per_head = tail.groupby(["layer", "head"])["topk_over_oracle"].apply(
        lambda r: float(np.exp(np.log(r.clip(lower=1e-12)).mean())))
    iv = ratio_log_interval(per_head.to_numpy())
    names = ", ".join(f"L{int(la)}h{int(h)}" for la, h in per_head.index[:12]) + (" ..." if len(per_head) > 12 else "")
    n_heads = sparse.groupby(["layer", "head"]).ngroups
    text = (f"{len(per_head)} of {n_heads} sparse-layer heads long-tailed ({names}): TopK/oracle error ratio "
            f"{iv.value:.2f} [{iv.lo:.2f}, {iv.hi:.2f}] (n={iv.n} heads), max {tail['topk_over_oracle'].max():.2f}")
    return text, decide(iv, 1.0, min_n=int(claim.get("min_layers", 3)))


def table9(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """Share of Table 9 cells whose measured fraction is within ``within_factor`` of the paper's."""
    df = canvas.read(ctx.results / "estimation" / "kl_grid_summary.csv")
    t9 = ctx.ref.get("sampled_fraction_table9", {})
    if df is None:
        return "—", testable("missing data: estimation/kl_grid_summary.csv")
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


def speedup(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """Measured on a GPU only; the projections are quoted, labelled, and never decide."""
    thr = ctx.results / "throughput"
    proj = canvas.read(thr / "projection_paper_hardware.csv")
    quoted = ""
    if proj is not None and "speedup" in proj:
        kernel = proj["cpu_kernel"] if "cpu_kernel" in proj else pd.Series([""] * len(proj))
        quoted = "PROJECTION (bandwidth model, not measured): " + "; ".join(
            f"CPU kernel {k}: " * bool(k) + ", ".join(
                f"{r.hardware} " + (f"{float(r.speedup):.2f}x" if math.isfinite(float(r.speedup))
                                    else "(full attention does not fit)") for r in g.itertuples())
            for k, g in proj.assign(_k=kernel.fillna("")).groupby("_k", sort=False))
    dec = canvas.read(thr / "decode.csv")
    gpu = dec[dec["device"].astype(str).str.startswith("cuda")] if dec is not None and "device" in dec else None
    if gpu is None or gpu.empty:
        return quoted or "—", testable("no GPU: decode.csv has no GPU rows")
    best = gpu.groupby(["context", "method"])["tokens_per_s"].max().unstack()
    dense = [c for c in best.columns if _family(str(c)) == "dense"]
    mp = [c for c in best.columns if _family(str(c)) == "magicpig"]
    ratios = {n: float(best.loc[n, mp].max() / best.loc[n, dense].max()) for n in best.index
              if dense and mp and best.loc[n, dense].max() > 0 and best.loc[n, mp].notna().any()}
    if not ratios:
        return quoted or "—", testable("missing data: no context with both dense and magicpig GPU rows")
    text = "measured on GPU: " + ", ".join(f"{n}: {r:.2f}x" for n, r in ratios.items())
    ok = max(ratios.values()) > float(claim.get("min_speedup", 1.0))
    return text + (f"; {quoted}" if quoted else ""), Verdict(REPRODUCED if ok else NOT_REPRODUCED)


TESTS: dict[str, Callable[[dict, Context], tuple[str, Verdict]]] = {
    "near": near, "clearly_lower": clearly_lower, "at_least": at_least, "centering": centering,
    "error_ratio": error_ratio, "table9": table9, "speedup": speedup,
}


def evaluate(results: Path | str, ref: dict) -> list[ClaimResult]:
    """Every claim of ``ref['claims']['items']`` decided on the results tree."""
    ctx = Context(Path(results), ref)
    out = []
    for claim in ref.get("claims", {}).get("items", []):
        test = TESTS.get(claim.get("kind"))
        if test is None:
            measured, verdict = "—", testable(f"unknown test kind {claim.get('kind')!r}")
        else:
            measured, verdict = test(claim, ctx)
        out.append(ClaimResult(claim["id"], claim["text"], claim.get("test", ""), measured, verdict,
                               claim.get("needs", "")))
    return out


def claims_section(results: Path | str, ref: dict) -> list[str]:
    """The Markdown of the claims table."""
    rows = [[f"`{c.id}`", c.text, f"`{c.needs}`" if c.needs else "—", c.test, c.measured, f"**{c.verdict.text()}**"]
            for c in evaluate(results, ref)]
    return ["## Claims",
            "Each of the paper's qualitative claims (`claims:` in `config/paper_reference.yaml`), what this run "
            "measured and the verdict. Accuracy differences are 95% percentile bootstrap intervals over samples "
            "(paired by sample id, stratified by task, seed 0, 2000 resamples), in points, with the sample count.",
            table(["claim", "paper", "needs", "test", "measured here", "verdict"], rows) if rows else "No claims listed."]
