"""The accuracy claims' tests: near (within a margin of a baseline), superior (above a family of baselines
by a gap); the centering claim's test is ``claims_centering``. Intervals: ``paired`` (per task, then MOVER
over tasks).

Each comparison is made per context length on the tasks where both methods have at least ``min_samples``
scored samples; a task is left out, and named, when it has fewer or when the baseline leaves no room for
the effect under test (floor: a baseline under ``floor_points`` cannot drop; ceiling: a baseline above
100 - ``floor_points`` cannot be beaten). Every line names the tasks and n it rests on.
"""
from __future__ import annotations

from typing import Callable

import pandas as pd

from magicpig.harness.report.claims_context import Context, family, of_method
from magicpig.harness.results_tree import canonical, run_samples
from magicpig.harness.report.markdown import fmt
from magicpig.harness.report.paper_tables import PAPER_MODEL, paper_rows
from magicpig.harness.stats import detectable
from magicpig.harness.stats.bootstrap import Interval
from magicpig.harness.stats.paired import (SCORE_RANGE, TaskInterval, level_interval, methods_used, paper_power,
                                           task_average, task_difference)
from magicpig.harness.stats.verdicts import NOT_REPRODUCED, NOT_TESTABLE, Verdict, combine, decide, testable

FLOOR, CEILING = "floor", "ceiling"


def _short(task: str) -> str:
    return task.rpartition("/")[2] or task


def _signed(iv: Interval) -> str:
    return f"{iv.value:+.1f} [{iv.lo:+.1f}, {iv.hi:+.1f}]"


def _written(runs: pd.DataFrame, method: str) -> str:
    """The spec as the preset wrote it ('topk:budget=0.02'; the canonical form drops defaults)."""
    written = runs["method_written"].dropna()
    return str(written.iloc[0]) if len(written) else method


def paired_tasks(a: pd.DataFrame, b: pd.DataFrame, ctx: Context,
                 guard: str) -> tuple[list[TaskInterval], list[str], list[tuple[int, float]]]:
    """Per-task paired differences (A - B) on the tasks both ran, the notes on the tasks left out, and
    (pairs, variance of the paired difference) of those left out for too few samples (their MDE)."""
    sa, sb = run_samples(a), run_samples(b)
    parts, left_out, thin = [], [], []
    for task in sorted(set(sa) | set(sb)):
        xa, xb = sa.get(task, {}), sb.get(task, {})
        common = sum(1 for i in xa if i in xb) or min(len(xa), len(xb))
        if min(len(xa), len(xb), common) < ctx.min_samples:
            left_out.append(f"{_short(task)} (n={min(len(xa), len(xb), common)} < {ctx.min_samples})")
            thin.append(detectable.pair_variance(xa, xb))
            continue
        part = task_difference(task, xa, xb)
        no_room = part.base < ctx.floor_points if guard == FLOOR else part.base > SCORE_RANGE - ctx.floor_points
        if guard in (FLOOR, CEILING) and no_room:
            left_out.append(f"{_short(task)} (baseline {part.base:.1f}: at the {guard})")
            continue
        parts.append(part)
    return parts, left_out, thin


def rests_on(parts: list[TaskInterval], left_out: list[str]) -> str:
    """'on niah_multikey_1 (n=10), cwe (n=10); Newcombe, bootstrap; MOVER over tasks; left out: vt (n=3 < 10)'"""
    used = ", ".join(f"{_short(p.task)} (n={p.n})" for p in parts)
    text = f"on {used}; {methods_used(parts)}" if parts else "on no task"
    return text + (f"; left out: {', '.join(left_out)}" if left_out else "")


def compare(label: str, a: pd.DataFrame, b: pd.DataFrame, ctx: Context, guard: str, threshold: float, *,
            strict: bool) -> tuple[str, Verdict]:
    """One comparison line and its verdict: the task average of (A - B) above ``threshold``."""
    parts, left_out, thin = paired_tasks(a, b, ctx, guard)
    where = rests_on(parts, left_out)
    if not parts:
        return f"{label}: {where}", testable(f"{label}: no task with {ctx.min_samples}+ samples per method"
                                             + (" off the " + guard if guard else "") + f" ({where})",
                                             detectable.thin_text(label, thin, ctx.min_samples))
    iv = task_average(parts)
    v = decide(iv, threshold, min_n=ctx.min_samples, above=True, strict=strict)
    line = f"{label}: {_signed(iv)} points (n={iv.n}) {where}"
    if v.status == NOT_REPRODUCED:
        v = Verdict(NOT_REPRODUCED, f"{label}: {_signed(iv)}")
    elif v.status == NOT_TESTABLE:
        mde = detectable.points_text(detectable.from_interval(iv.lo, iv.hi),
                                     f"n={iv.n} pairs over {len(parts)} task{'s' * (len(parts) > 1)}, from this "
                                     "interval")
        v = testable(f"{label}: {_signed(iv)} (n={iv.n}) straddles {threshold:+g}", f"{label}: {mde}")
    return line, v


def power_note(claim: dict, ctx: Context, threshold: float) -> str:
    """What the paper's own numbers would give at the paper's n (``power:`` of the claim), or ''."""
    spec = claim.get("power")
    if not spec:
        return ""
    rows = paper_rows(ctx.ref.get(spec["section"], {}), spec.get("model", PAPER_MODEL))
    pm, pb = rows.get(canonical(spec["method"])), rows.get(canonical(spec["baseline"]))
    if pm is None or pb is None:
        return ""
    i = int(spec.get("index", 0))
    return paper_power(float(pm[i]), float(pb[i]), int(spec["n_per_task"]), int(spec.get("tasks", 1)), threshold,
                       strict=claim.get("kind") == "superior")


def _outcome(lines: list[str], verdicts: list[Verdict], power: str, nothing: str, missing: str,
             ctx: Context) -> tuple[str, Verdict]:
    """(measured, verdict) of a comparison test: its compared lines and the power note, the verdicts combined;
    with no comparison made, ``nothing`` (or the power note) and not testable for ``missing``."""
    if not verdicts:
        return power or nothing, testable(missing, detectable.thin_text("", [], ctx.min_samples))
    return "; ".join(lines + ([power] if power else [])), combine(verdicts)


# ---- the tests ----------------------------------------------------------------------------------------------------
def near(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """(method - baseline), task average, above -max_drop at every length both ran; measured cost2 within
    cost_range. Tasks whose baseline is at the floor are left out (no room to drop)."""
    df = ctx.runs(claim["benchmark"], claim.get("tasks"))
    threshold = -float(claim["max_drop"])
    lines, verdicts = [], []
    for n, at in df.groupby("length"):
        a, b = of_method(at, claim["method"]), of_method(at, claim["baseline"])
        if a.empty or b.empty:
            continue
        cost = a["cost"].mean()
        label = f"{n} tokens, {claim['method']} (cost2 {fmt(cost, pct=True)}) - {claim['baseline']}"
        line, v = compare(label, a, b, ctx, FLOOR, threshold, strict=False)
        lo, hi = claim.get("cost_range") or (0.0, 1.0)
        if not (cost == cost and lo <= cost <= hi):
            v = combine([v, Verdict(NOT_REPRODUCED, f"cost2 {fmt(cost, pct=True)} outside "
                                                    f"[{fmt(lo, pct=True)}, {fmt(hi, pct=True)}]")])
        lines.append(line)
        verdicts.append(v)
    return _outcome(lines, verdicts, power_note(claim, ctx, threshold), "no run of both settings",
                    f"missing data: no {claim['benchmark']} runs of `{claim['method']}` and `{claim['baseline']}` "
                    "at one length", ctx)


def _cost_rule(claim: dict) -> Callable[[float, float], bool]:
    """keep(cost of the other run, cost of the method): 'same_or_higher' or 'within_factor' (cost_factor)."""
    if claim.get("cost_rule", "same_or_higher") == "same_or_higher":
        return lambda cb, ca: cb >= ca
    f = float(claim.get("cost_factor", 2))
    return lambda cb, ca: cb > 0 and ca > 0 and max(cb, ca) / min(cb, ca) <= f


def superior(claim: dict, ctx: Context) -> tuple[str, Verdict]:
    """(method - each run of ``family`` whose cost passes the claim's cost rule), task average, above
    ``min_gap`` (strictly) at every length. Tasks whose baseline is at the ceiling are left out."""
    df = ctx.runs(claim["benchmark"], claim.get("tasks"))
    keep, gap = _cost_rule(claim), float(claim.get("min_gap", 0))
    lines, verdicts = [], []
    for n, at in df.groupby("length"):
        a = of_method(at, claim["method"])
        if a.empty:
            continue
        ca = a["cost"].mean()
        others = at[(at["method"].map(family) == claim["family"]) & ~at.index.isin(a.index)]
        for other, b in others.groupby("method"):
            cb = b["cost"].mean()
            if not keep(cb, ca):
                continue
            label = (f"{n} tokens, {claim['method']} (cost2 {fmt(ca, pct=True)}) - {_written(b, other)} "
                     f"(cost2 {fmt(cb, pct=True)})")
            line, v = compare(label, a, b, ctx, CEILING, gap, strict=True)
            lines.append(line)
            verdicts.append(v)
    return _outcome(lines, verdicts, power_note(claim, ctx, gap), "no comparable runs",
                    f"missing data: no {claim['family']} run at a comparable cost beside `{claim['method']}` on "
                    f"{claim['benchmark']}", ctx)


def task_levels(runs: pd.DataFrame, ctx: Context) -> tuple[Interval | None, list[TaskInterval], list[str]]:
    """Task average of the mean score (Clopper-Pearson / bootstrap per task, MOVER over tasks)."""
    parts, left_out = [], []
    for task, s in sorted(run_samples(runs).items()):
        if len(s) < ctx.min_samples:
            left_out.append(f"{_short(task)} (n={len(s)} < {ctx.min_samples})")
            continue
        parts.append(level_interval(task, list(s.values())))
    return (task_average(parts) if parts else None), parts, left_out


def levels_text(label: str, iv: Interval | None, parts, left_out) -> str:
    head = f"{label} {iv.text()}" if iv is not None else f"{label}: no task with enough samples"
    return f"{head} {rests_on(parts, left_out)}"
