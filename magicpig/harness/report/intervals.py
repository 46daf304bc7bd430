"""Tables of accuracy numbers with their 95% intervals and sample counts, read from the per-sample
predictions beside each metrics.json. Per task: Clopper-Pearson when every score is 0 or 100, else the
percentile bootstrap widened to an exact bound when almost every score is the same (``paired.level_interval``);
task averages combine the task intervals by MOVER (``paired.task_average``). The accuracy figures draw the
same intervals (``run_level``, MOVER over a method's runs), so a whisker is as wide as its table cell: a percentile
bootstrap alone has no width at n = 1 or when every score is equal."""
from __future__ import annotations

import pandas as pd

from magicpig.harness.results_tree import sample_scores
from magicpig.harness.report.markdown import table
from magicpig.harness.stats.paired import TaskInterval, level_interval, task_average

# what the figures' whiskers are, said on each figure that draws them
WHISKERS = "whiskers: 95% CI as in the tables (Clopper-Pearson for 0/100 scores, else bootstrap with an exact bound)"


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


def run_level(row) -> TaskInterval:
    """One run's (a ``collect_metrics`` row) mean score with the interval its table cell prints
    (``paired.level_interval`` of its per-sample scores); without per-sample scores its metrics score, with
    no interval (n = 0, how = 'no samples')."""
    scores = list(sample_scores(row.path).values())
    if not scores:
        v = float(row.score)
        return TaskInterval(str(row.task), 0, v, v, v, "no samples")
    return level_interval(str(row.task), scores)


def whisker(value: float, lo: float, hi: float) -> tuple[float, float]:
    """(below, above) lengths of an error bar around ``value`` (never negative)."""
    return max(0.0, value - lo), max(0.0, hi - value)
