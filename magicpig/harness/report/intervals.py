"""Tables of accuracy numbers with their 95% bootstrap intervals and sample counts, read from the
per-sample predictions beside each metrics.json."""
from __future__ import annotations

import pandas as pd

from magicpig.harness.report.bootstrap import mean_interval, stratified_interval
from magicpig.harness.report.collect import sample_scores
from magicpig.harness.report.markdown import table


def interval_table(df: pd.DataFrame, prefix: str = "", by: str = "length") -> str:
    """One row per (method, ``by``) of a ``collect_metrics`` frame: the task average (bootstrap stratified
    by task) and each task, as 'mean [lo, hi] (n=...)'. A run without predictions.jsonl shows its metrics
    score with 'no samples'."""
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return "No finished runs."
    tasks = sorted(ok["task"].unique())
    rows = []
    for (method, key), g in ok.groupby(["method", by], sort=False):
        strata, cells = {}, []
        for t in tasks:
            r = g[g["task"] == t]
            if r.empty:
                cells.append("—")
                continue
            scores = [s for p in r["path"] for s in sample_scores(p).values()]
            if scores:
                strata[t] = scores
                cells.append(mean_interval(scores).text())
            else:
                cells.append(f"{r['score'].mean():.1f} (no samples)")
        avg = stratified_interval(strata).text() if strata else "—"
        if strata and len(strata) < g["task"].nunique():
            avg += f" ({len(strata)}/{g['task'].nunique()} tasks)"
        rows.append([f"`{method}`", str(key), avg] + cells)
    header = ["method", by, "average [95% CI] (n)"] + [t.removeprefix(prefix) for t in tasks]
    return table(header, rows)
