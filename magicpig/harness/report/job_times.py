"""What the run itself cost: each pipeline job's wall time, CPU time and peak memory, summed per rule
(``results_tree.read_job_times``: Snakemake's benchmark files)."""
from __future__ import annotations

from pathlib import Path

from magicpig.harness.report.markdown import fmt, table
from magicpig.harness.results_tree import read_job_times

HEADING = "## Job time of this run"


def job_time_section(results: Path) -> list[str]:
    """Per rule: jobs, summed wall minutes, the longest job, CPU minutes and peak RSS; then the total."""
    df = read_job_times(results)
    if df.empty:
        return [HEADING, "No benchmark files under `benchmarks/` (the run has not finished a job, or it predates "
                         "them)."]
    by_rule = df.groupby("rule", sort=False).agg(jobs=("job", "size"), seconds=("seconds", "sum"),
                                                 longest=("seconds", "max"), cpu=("cpu_seconds", "sum"),
                                                 rss=("max_rss_mb", "max")).sort_values("seconds", ascending=False)
    rows = [[f"`{r.Index}`", r.jobs, fmt(r.seconds / 60), fmt(r.longest / 60), fmt(r.cpu / 60), f"{r.rss / 1024:.2f}"]
            for r in by_rule.itertuples()]
    total = df["seconds"].sum()
    rows.append(["**all**", len(df), f"**{fmt(total / 60)}**", fmt(df['seconds'].max() / 60),
                 fmt(df["cpu_seconds"].sum() / 60), f"{df['max_rss_mb'].max() / 1024:.2f}"])
    return [HEADING,
            f"Wall time of the {len(df)} finished jobs, from Snakemake's benchmark files "
            f"(`benchmarks/<rule>/<job>.tsv`): {total / 3600:.2f} h in all. Jobs that each take every core run one "
            "after another, so this sum is the run's wall time less Snakemake's own start-up; a job that was "
            "interrupted and rerun counts its last attempt only. CPU time is user + system time of the job's "
            "processes; peak RSS is the largest job's.",
            table(["rule", "jobs", "wall (min)", "longest job (min)", "CPU (min)", "peak RSS (GB)"], rows)]
