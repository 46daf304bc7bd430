"""Tables of accuracy numbers with their 95% intervals and sample counts, read from the per-sample
predictions beside each metrics.json. Per task: Clopper-Pearson when every score is 0 or 100, else the
percentile bootstrap widened to an exact bound when almost every score is the same (``paired.level_interval``);
task averages combine the task intervals by MOVER (``paired.task_average``)."""
from __future__ import annotations

import pandas as pd

from magicpig.harness.report.collect import sample_scores
from magicpig.harness.report.markdown import table
from magicpig.harness.report.paired import TaskInterval, level_interval, task_average


def _cell(part: TaskInterval) -> str:
    return f"{part.value:.1f} [{part.lo:.1f}, {part.hi:.1f}] (n={part.n})"


def interval_table(df: pd.DataFrame, prefix: str = "", by: str = "length") -> str:
    """One row per (method, ``by``) of a ``collect_metrics`` frame: the task average and each task, as
    'mean [lo, hi] (n=...)'. A run without predictions.jsonl shows its metrics score with 'no samples'."""
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return "No finished runs."
    tasks = sorted(ok["task"].unique())
    rows = []
    for (method, key), g in ok.groupby(["method", by], sort=False):
        parts, cells = [], []
        for t in tasks:
            r = g[g["task"] == t]
            if r.empty:
                cells.append("—")
                continue
            scores = [s for p in r["path"] for s in sample_scores(p).values()]
            if scores:
                parts.append(level_interval(t, scores))
                cells.append(_cell(parts[-1]))
            else:
                cells.append(f"{r['score'].mean():.1f} (no samples)")
        avg = task_average(parts).text() if parts else "—"
        if parts and len(parts) < g["task"].nunique():
            avg += f" ({len(parts)}/{g['task'].nunique()} tasks)"
        rows.append([f"`{method}`", str(key), avg] + cells)
    header = ["method", by, "average [95% CI] (n)"] + [t.removeprefix(prefix) for t in tasks]
    return table(header, rows)
