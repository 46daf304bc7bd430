"""The centering claim's test (``no_centering_collapse``, paper Fig. 9a): without key centering, MagicPIG
(10, 150) samples under 0.1% of the keys and NIAH falls to about 0. Two parts, both decided by intervals, each
naming the model and the length it ran on:

* the uncentered sampled fraction over prompts, below the paper's bound: per captured prompt the mean over
  MagicPIG's sparse layers (``estimation/centering.csv``), over prompts ``paired.mean_t_interval`` (Student t,
  widened to the bootstrap-t: a fraction near 0 is right-skewed). Without per-prompt rows the summary (one
  value) or the uncentered decoding runs' cost (one value per run) stand in, each a unit;
* the uncentered NIAH score's interval below ``niah_near_zero_points`` while the centered run's lies above
  ``centered_min_points`` (otherwise the model fails NIAH anyway and a low uncentered score shows no collapse).
"""
from __future__ import annotations

import pandas as pd

from magicpig.harness.report.claims_accuracy import levels_text, task_levels
from magicpig.harness.report.claims_context import Context, of_method
from magicpig.harness.report.claims_system import prompt_of
from magicpig.harness.results_tree import ok_runs, read_table, sparse_layers, truthy
from magicpig.harness.report.markdown import fmt
from magicpig.harness.result_files import CENTERING_CSV, CENTERING_SUMMARY_CSV
from magicpig.harness.stats import detectable
from magicpig.harness.stats.bootstrap import Interval
from magicpig.harness.stats.paired import clopper_pearson, current_level, mean_t_interval
from magicpig.harness.stats.verdicts import (NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Verdict, combine, decide,
                                             testable)


def _where(df: pd.DataFrame, length_col: str) -> str:
    """'SmolLM2-135M, 4096 tokens' from a frame's model and length columns (several values joined)."""
    def values(col: str) -> str:
        return ("/".join(dict.fromkeys(df[col].dropna().astype(str))) or "?") if col in df else "?"
    return f"{values('model')}, {values(length_col)} tokens"


def fraction_units(ctx: Context, method) -> tuple[pd.Series | None, str]:
    """(one uncentered sampled fraction per unit, what the units are and where they ran)."""
    rows = read_table(CENTERING_CSV.under(ctx.results))
    if rows is not None and {"K", "L", "centering", "cost2"} <= set(rows.columns):
        sel = sparse_layers(rows)
        sel = sel[(sel["K"] == method.K) & (sel["L"] == method.L) & ~truthy(sel["centering"])]
        if len(sel):
            return sel.groupby(prompt_of(sel))["cost2"].mean(), (
                f"attention-level, per captured prompt the mean over the sparse layers; {_where(sel, 'n_prompt')}")
    summ = read_table(CENTERING_SUMMARY_CSV.under(ctx.results))
    if summ is not None:
        sel = summ[(summ["K"] == method.K) & (summ["L"] == method.L) & ~truthy(summ["centering"])]
        if len(sel):
            return pd.Series([float(sel["cost2"].mean())]), "attention-level summary, one value for all prompts"
    return None, ""


def fraction_part(claim: dict, ctx: Context, runs: pd.DataFrame, method) -> tuple[str, Verdict]:
    """The uncentered sampled fraction's interval over units against the paper's bound."""
    bound = ctx.ref.get("ablations", {}).get("no_centering", {}).get("sampled_fraction_below", 0.001)
    min_units = int(claim.get("min_prompts", 3))
    values, src = fraction_units(ctx, method)
    if values is None and len(runs):
        values, src = runs["cost"].astype(float).reset_index(drop=True), \
            f"decoding runs, one value per run; {_where(runs, 'length')}"
    if values is None:
        return "", testable(f"missing data: no uncentered sampled fraction ({CENTERING_CSV.rel})",
                            f"none at n=0 prompts; with {min_units}+ prompts it follows the spread between them")
    iv = mean_t_interval(values.to_numpy(), floor=0.0, ceil=1.0)
    level = current_level()
    shown = (f"{fmt(iv.value, pct=True)} [{fmt(iv.lo, pct=True)}, {fmt(iv.hi, pct=True)}]" if iv.n > 1
             else fmt(iv.value, pct=True))
    text = (f"uncentered sampled fraction {shown} (n={iv.n} unit{'s' * (iv.n != 1)}: {src}; {level:.4g} "
            f"interval: Student t, widened to the bootstrap-t; paper < {fmt(bound, pct=True)})")
    sd = float(values.std(ddof=1)) if iv.n > 1 else float("nan")
    mde = detectable.from_units(iv.n, sd, level)
    mde_text = (f"+-{fmt(mde, pct=True)} of the keys around {fmt(bound, pct=True)} at n={iv.n} (t, sd "
                f"{fmt(sd, pct=True)})" if mde == mde and mde < float("inf")
                else f"none at n={iv.n} unit{'s' * (iv.n != 1)} (no spread between units to estimate)")
    if iv.n < min_units:
        return text, testable(f"sampled fraction from {iv.n} unit{'s' * (iv.n != 1)}: fewer than {min_units} "
                              "prompts give no interval to decide on", mde_text)
    v = decide(iv, bound, min_n=min_units, above=False, strict=True)
    if v.status == NOT_TESTABLE:
        return text, testable(f"sampled fraction interval [{fmt(iv.lo, pct=True)}, {fmt(iv.hi, pct=True)}] "
                              f"includes {fmt(bound, pct=True)}", mde_text)
    if v.status == NOT_REPRODUCED:
        v = Verdict(NOT_REPRODUCED, f"{fmt(iv.lo, pct=True)}-{fmt(iv.hi, pct=True)} sampled")
    return text, v


def _level_mde(iv: Interval | None) -> str:
    if iv is None or not iv.n:
        return "none at n=0"
    return detectable.points_text(detectable.from_interval(iv.lo, iv.hi), "from this interval")


def niah_part(claim: dict, ctx: Context, ok: pd.DataFrame, runs: pd.DataFrame) -> tuple[list[str], Verdict]:
    """The uncentered NIAH score near 0 while the centered run finds the needle."""
    niah = runs[runs["task"].fillna("").str.contains("niah")]
    if niah.empty:
        top = 100.0 * clopper_pearson(0, ctx.min_samples)[1]
        return [], testable(f"missing data: no uncentered NIAH predictions of `{claim['method']}`",
                            f"none at n=0; {ctx.min_samples} samples all wrong would bound the score at "
                            f"{top:.0f} points")
    centered = of_method(ok, claim["centered_method"])
    centered = centered[centered["task"].isin(set(niah["task"])) & centered["length"].isin(set(niah["length"]))]
    iv, tasks, left = task_levels(niah, ctx)
    parts = [levels_text(f"uncentered NIAH ({_where(niah, 'length')})", iv, tasks, left)]
    if iv is None:
        return parts, testable(f"uncentered NIAH: no task with {ctx.min_samples}+ samples",
                               f"none at the run's n (below min_samples {ctx.min_samples})")
    v = decide(iv, float(claim["niah_near_zero_points"]), min_n=ctx.min_samples, above=False)
    if v.status == NOT_TESTABLE:
        v = testable(f"uncentered NIAH {iv.text()} straddles {claim['niah_near_zero_points']} points", _level_mde(iv))
    floor = float(claim["centered_min_points"])
    civ, ctasks, cleft = task_levels(centered, ctx)
    parts.append(levels_text("centered NIAH", civ, ctasks, cleft))
    if v.status == REPRODUCED:
        if civ is None:
            v = testable(f"missing data: no centered NIAH run with {ctx.min_samples}+ samples per task to show "
                         "the model finds the needle at all", "none at n=0 centered samples")
        elif civ.lo < floor:
            v = testable(f"the centered run scores {civ.text()}, not clearly above {floor:g}: the model fails NIAH "
                         "anyway, so a low uncentered score shows no collapse", _level_mde(civ))
    return parts, v


def centering(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """Both parts of the centering claim, combined (any part not reproduced: not reproduced)."""
    from magicpig.methods import parse_method

    ok = ok_runs(ctx.results / "ablations" / "centering")
    runs = of_method(ok, claim["method"])
    text, fv = fraction_part(claim, ctx, runs, parse_method(claim["method"]))
    niah_text, nv = niah_part(claim, ctx, ok, runs)
    measured = "; ".join([t for t in [text] + niah_text if t]) or "—"
    return measured, combine([fv, nv])

