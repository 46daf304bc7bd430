"""Sections of ``REPORT.md`` built from the results tree: the skipped items, RULER (Table 3), LongBench
(Table 2), the ablations, the attention-level experiments, throughput, the budget / cost sweeps (Figs. 1, 6c, 9a,
9b/c; ``results/<preset>/sweeps``) and the per-token attention figures (Figs. 2a, 5a-c, 10, 11; ``estimation``),
which ``sections.SECTIONS`` orders; and what the run itself cost (``job_time_section``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pandas as pd

from magicpig.harness.report import figures
from magicpig.harness.results_tree import collect_metrics, read_csv, read_job_times, tune_kl_files
from magicpig.harness.report.markdown import fmt, table
from magicpig.harness.report.paper_tables import (COST_NOTE, intervals, paper_model, ruler_table, skipped_notes,
                                                  task_table)
from magicpig.harness.report.tables_system import DECODE_COLUMNS, cpu_baselines_section
from magicpig.harness.result_files import (ATTENTION_MASS_CURVE_PNG, ATTENTION_SPREAD_PNG, CENTERING_PNG,
                                           CENTERING_SUMMARY_CSV, CENTERING_SWEEP_PNG, CPU_BASELINES_PNG, DECODE_CSV,
                                           DECODE_PREDICTED_CSV, ERROR_SUMMARY_CSV, ERROR_TOPK_VS_ORACLE_CSV,
                                           ERROR_VS_BUDGET_PNG, FIT_CSV, GEOMETRY_PNG, GEOMETRY_SUMMARY_CSV, KERNEL_CSV,
                                           KL_GRID_PNG, KL_GRID_SUMMARY_CSV, MAGICPIG_VS_TOPK_COST_PNG,
                                           MASS_CURVE_SUMMARY_CSV, ORACLE_VS_TOPK_BUDGET_PNG, PROJECTION_H200_CSV,
                                           PROJECTION_PAPER_HARDWARE_CSV, PROJECTION_PAPER_LATENCY_CSV,
                                           RULER_PER_TASK_PNG, RULER_VS_COST_PNG, SINK_CENTER_SUMMARY_CSV,
                                           SINK_KEY_SIMILARITY_PNG, SINK_VS_MEAN_KEY_PNG, SPEEDUP_PAPER_HARDWARE_PNG,
                                           SPREAD_SUMMARY_CSV, THROUGHPUT_BATCH_PNG, THROUGHPUT_CONTEXT_PNG,
                                           TOPK_BUDGET_SWEEP_PNG, TUNE_KL_JSON, VALUE_NORMS_PNG, VALUE_NORM_SUMMARY_CSV,
                                           VALUE_VS_LOGIT_PNG, ResultFile)


def skipped_section(acc: pd.DataFrame, ablations: Path) -> list[str]:
    """Every (task, length) of the run that was skipped or is incomplete, with its reason, in one list."""
    frames = [acc, collect_metrics(ablations)]
    df = pd.concat([f for f in frames if not f.empty]) if any(not f.empty for f in frames) else acc
    if df.empty or (df["status"] == "ok").all():
        return []
    from magicpig_tasks.registry import DATA_TASKS

    bad = df[df["status"] != "ok"].drop_duplicates(["task", "length", "status", "reason"])
    lines = []
    for r in bad.itertuples():
        hint = (f" Give its file under `data:` in the config (`{r.task}: /path/to/file`): the job reruns."
                if r.status == "skipped" and r.task in DATA_TASKS else "")
        lines.append(f"- `{r.task}` @ {r.length}: **{r.status}**" + (f" — {r.reason}." if r.reason else ".") + hint)
    return ["## Skipped or incomplete", "These results are missing from the tables below:\n" + "\n".join(lines)]


RULER_FIGURES = (RULER_PER_TASK_PNG.name, RULER_VS_COST_PNG.name)


def ruler_section(acc: pd.DataFrame, ref: dict, figs: dict | None = None) -> list[str]:
    parts = ["## RULER (paper Table 3)"]
    df = acc[acc["task"].fillna("").str.startswith("ruler/")]
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return parts + ["No RULER results in this run."] + skipped_notes(df) + \
            figures.embed_all(figs, RULER_FIGURES)
    lengths = sorted(ok["length"].unique())
    model = paper_model(ok, ref)
    parts.append("Average score over tasks (string match ×100); `cost2` = mean fraction of offloaded keys used. "
                 f"Paper rows: `{model}`.")
    parts.append(ruler_table(ok, lengths, lengths, ref["ruler_table3"], model))
    for n in lengths:
        s = ok[ok["length"] == n].pivot_table(index="task", columns="method", values="score", aggfunc="mean")
        parts.append(f"Per task at {n} tokens:")
        parts.append(table(["task"] + [f"`{c}`" for c in s.columns],
                           [[t.removeprefix("ruler/")] + [fmt(v) for v in r] for t, r in s.iterrows()]))
    return parts + intervals(ok, "ruler/") + figures.embed_all(figs, RULER_FIGURES) + skipped_notes(df)


def longbench_section(acc: pd.DataFrame, ref: dict) -> list[str]:
    parts = ["## LongBench (paper Table 2)"]
    df = acc[acc["task"].fillna("").str.startswith("longbench/")]
    if df.empty:
        return parts + ["No LongBench results in this run (the preset runs none)."]
    paper = ref["longbench_table2"]
    tasks = paper["tasks"][:-1]
    scores = task_table(df, [f"longbench/{t}" for t in tasks], tasks, paper["tasks"], paper, paper_model(df, ref),
                        costs=True)
    return parts + [scores, COST_NOTE] + intervals(df, "longbench/") + skipped_notes(df)


def ablation_section(root: Path, ref: dict, figs: dict | None = None) -> list[str]:
    parts = ["## Ablations"]
    centering_figure = figures.embed_all(figs, (CENTERING_PNG.name,))
    if not root.is_dir():
        return parts + ["No ablation results in this run."] + centering_figure
    for name, title in [("centering", "Centering on / off (paper Figure 9a: without centering NIAH ≈ 0, "
                                      "FWE ≈ 65, under 0.1% of keys sampled)"),
                        ("kl_grid", "(K, L) grid: score and measured cost beside the paper's Table 9 fraction")]:
        df = collect_metrics(root / name)
        parts.append(f"### {title}")
        figure = centering_figure if name == "centering" else []
        if df.empty:
            parts += ["Not run."] + figure
            continue
        ok = df[df["status"] == "ok"]
        piv = ok.pivot_table(index="method", columns="task", values="score", aggfunc="mean")
        cost = ok.groupby("method")["cost"].mean()
        header = ["method"] + [c.removeprefix("ruler/") for c in piv.columns] + ["cost2 (ours)", "Table 9"]
        rows = [[f"`{method}`"] + [fmt(v) for v in r] + [fmt(cost.get(method), pct=True),
                                                         fmt(table9(ref, method), pct=True)]
                for method, r in piv.iterrows()]
        parts += [table(header, rows)] + intervals(df, "ruler/") + figure + skipped_notes(df)
    setups = sorted(p for p in root.glob("setup_*") if p.is_dir())
    parts.append("### Evaluation setup A (question prefilled) vs B (question decoded sparsely)")
    if not setups:
        return parts + ["Not run."]
    df = pd.concat([collect_metrics(p).assign(setup=p.name.removeprefix("setup_")) for p in setups])
    ok = df[df["status"] == "ok"]
    piv = ok.pivot_table(index=["method", "setup"], columns="task", values="score", aggfunc="mean")
    header = ["method", "setup"] + [c.removeprefix("ruler/") for c in piv.columns]
    rows = [[f"`{m}`", s] + [fmt(v) for v in r] for (m, s), r in piv.iterrows()]
    return parts + [table(header, rows)] + intervals(df, "ruler/", by="setup")


def table9(ref: dict, method: str) -> float | None:
    """The paper's measured sampled fraction for a magicpig spec's (K, L), when Table 9 has it."""
    from magicpig.methods import parse_method

    try:
        m = parse_method(method)
    except ValueError:
        return None
    t = ref["sampled_fraction_table9"]
    if m.name != "magicpig" or t["K"].get(m.K) is None or m.L not in t["L"]:
        return None
    return t["K"][m.K][t["L"].index(m.L)]


# columns that describe the run, not the result (left out of a table that names no columns)
META_COLUMNS = {"model", "n_prompt", "capture", "seed", "load_avg", "prompts"}
ESTIMATION_TITLES = {
    SPREAD_SUMMARY_CSV: "Attention spread (Figure 2b): mass in the top 20% of keys, with and without the sink",
    ERROR_SUMMARY_CSV: "Relative output error vs budget: TopK, oracle sampling, MagicPIG (Figures 3, 4, 6a/b)",
    ERROR_TOPK_VS_ORACLE_CSV: "TopK vs oracle sampling at equal distinct keys (paper: TopK up to 4x worse)",
    KL_GRID_SUMMARY_CSV: "Sampled fraction on real keys for the (K, L) grid, beside the formula and Table 9",
    CENTERING_SUMMARY_CSV: "Centering ablation (Figure 9a: under 0.1% sampled without centering)",
    GEOMETRY_SUMMARY_CSV: "Geometry (Figure 5): cosines of queries and keys to the sink key and the key mean",
}
THROUGHPUT_TITLES = {
    KERNEL_CSV: ("CPU kernel, measured on this machine (one decode step of one layer)",
                 ["n", "head_dim", "K", "L", "dist", "dtype", "threads", "isa", "sampled_fraction", "ms_per_step",
                  "gb_per_s", "read_gb_per_s", "bandwidth_ratio", "gather_gb_per_s", "step_vs_gather",
                  "speedup_vs_dense", "speedup_vs_roofline", "speedup_vs_reference"]),
    DECODE_CSV: ("End-to-end decoding, measured on this machine", DECODE_COLUMNS),
    FIT_CSV: ("Bandwidth model fitted to this machine (`magicpig project`: least squares on the unflagged rows)",
              ["parameter", "value", "source"]),
    DECODE_PREDICTED_CSV: ("Bandwidth model vs measurement per decode row (error = predicted / measured - 1; "
                           "loo = fitted without that row; rows under load are flagged and not fitted)",
                           ["context", "batch", "method", "backend", "fits", "under_load", "ms_per_token",
                            "predicted_ms_per_token", "prediction_error", "loo_error", "model_role"]),
    PROJECTION_PAPER_HARDWARE_CSV: ("PROJECTED (bandwidth model, not measured) throughput on the paper's hardware",
                                    ["cpu_kernel", "hardware", "model", "context", "baseline", "full_batch",
                                     "full_tokens_per_s", "magicpig_batch", "magicpig_tokens_per_s",
                                     "magicpig_ms_per_step", "speedup", "paper_speedup"]),
    PROJECTION_PAPER_LATENCY_CSV: ("PROJECTION (bandwidth model, not measured): the paper's latency (simulated "
                                   "RTX 4090, with its baseline at batch 1) and L20 throughput points",
                                   ["hardware", "what", "batch", "projected", "paper"]),
    PROJECTION_H200_CSV: ("PROJECTION (bandwidth model, not measured): llama-3.1-8b on one H200, dense GPU-only "
                          "vs MagicPIG (10,150); host bandwidth and memory assumed",
                          ["context", "which", "method", "batch", "ms_per_token", "tokens_per_s", "gpu_ms",
                           "cpu_ms", "cpu_read_gbps_assumed", "host_mem_gb_assumed"]),
}


def csv_table(df: pd.DataFrame, columns: list[str] | None = None, limit: int = 40) -> str:
    """The first ``limit`` rows of a result table: its ``columns`` that it has, else all but ``META_COLUMNS``."""
    cols = [c for c in columns if c in df.columns] if columns else [c for c in df.columns if c not in META_COLUMNS]
    return table(cols, [[fmt(v, digits=3) for v in r] for r in df[cols].head(limit).itertuples(index=False)])


def present_tables(results: Path, files: dict) -> Iterator[tuple[ResultFile, str]]:
    """(file, its '### title' and table) for each result file of ``files`` (file -> title, or (title, columns
    shown)) that ``results`` holds, in that order."""
    for file, entry in files.items():
        title, columns = entry if isinstance(entry, tuple) else (entry, None)
        df = read_csv(file.under(results))
        if df is not None:
            yield file, f"### {title}\n\n{csv_table(df, columns)}"


# the figure drawn from each estimation CSV, shown under its table
ESTIMATION_FIGURES = {SPREAD_SUMMARY_CSV: ATTENTION_SPREAD_PNG.name, ERROR_TOPK_VS_ORACLE_CSV: ERROR_VS_BUDGET_PNG.name,
                      KL_GRID_SUMMARY_CSV: KL_GRID_PNG.name, GEOMETRY_SUMMARY_CSV: GEOMETRY_PNG.name}
THROUGHPUT_FIGURES = (THROUGHPUT_BATCH_PNG.name, THROUGHPUT_CONTEXT_PNG.name, SPEEDUP_PAPER_HARDWARE_PNG.name,
                      CPU_BASELINES_PNG.name)


def tune_kl_section(path: Path) -> list[str]:
    try:
        t = json.loads(path.read_text())
    except json.JSONDecodeError:
        return [f"`{path.name}` is not valid JSON (the tune-kl run failed; see its log)."]
    settings = [("chosen", t)] + [(key.replace("_", " "), t[key]) for key in ("baseline", "matched_baseline")
                                  if t.get(key)]
    rows = [[name, s.get("K"), s.get("L"), fmt(s.get("measured_cost"), pct=True),
             fmt(s.get("relative_error"), digits=3)] for name, s in settings]
    return [f"### Automatic (K, L) for a target cost of {fmt(t.get('target_cost'), pct=True)} (`{path.name}`)",
            table(["setting", "K", "L", "measured cost", "relative error"], rows)]


def estimation_section(results: Path, figs: dict | None = None) -> list[str]:
    """Estimation results, as tables with their figures (``figs``: name -> FigureResult from
    ``figures.write_all``; every figure is embedded, those without data say so)."""
    parts, shown = ["## Attention-level experiments"], []
    for file, text in present_tables(results, ESTIMATION_TITLES):  # each table with its figure under it
        shown.append(file)
        parts += [text] + figures.embed_all(figs, [ESTIMATION_FIGURES[file]] if file in ESTIMATION_FIGURES else [])
    tune_kl = [part for path in tune_kl_files(results / TUNE_KL_JSON.folder) for part in tune_kl_section(path)]
    parts += tune_kl if shown or tune_kl else ["Not run."]
    return parts + figures.embed_all(figs, [fig for file, fig in ESTIMATION_FIGURES.items() if file not in shown])


def throughput_section(results: Path, figs: dict | None = None) -> list[str]:
    """Throughput results (measured and projected), as tables with their figures."""
    tables = [text for _, text in present_tables(results, THROUGHPUT_TITLES)]
    return (["## Throughput and latency"] + (tables or ["Not run."]) + cpu_baselines_section(results)
            + figures.embed_all(figs, THROUGHPUT_FIGURES))


SWEEP_FIGURES = (TOPK_BUDGET_SWEEP_PNG.name, ORACLE_VS_TOPK_BUDGET_PNG.name, CENTERING_SWEEP_PNG.name,
                 MAGICPIG_VS_TOPK_COST_PNG.name)
TOKEN_FIGURES = (ATTENTION_MASS_CURVE_PNG.name, SINK_KEY_SIMILARITY_PNG.name, SINK_VS_MEAN_KEY_PNG.name,
                 VALUE_VS_LOGIT_PNG.name, VALUE_NORMS_PNG.name)
# summary tables shown above the per-token figures: result file -> title
TOKEN_TABLES = {
    MASS_CURVE_SUMMARY_CSV: "Attention mass held by the top fraction of keys (Figure 2a; sparse layers, all prompts)",
    SINK_CENTER_SUMMARY_CSV: "cos(k_sink, k_avg) per kv-head (Figure 5c; sparse layers, all prompts)",
    VALUE_NORM_SUMMARY_CSV: "Value norm of the sink against the median token (Figure 11)",
}


def sweep_section(results: Path, figs: dict | None = None) -> list[str]:
    """Score and measured cost2 of every sweep run (a row per method, a column per task) and the sweep figures."""
    parts = ["## Budget and cost sweeps (Figures 1, 6c, 9a, 9b/c)"]
    df = collect_metrics(results / "sweeps")
    if df.empty:
        parts.append("Not run in this preset (no `sweeps` block, or its jobs have not finished).")
    else:
        ok = df[df["status"] == "ok"]
        for length, at in ok.groupby("length"):
            piv = at.pivot_table(index="method", columns="task", values="score", aggfunc="mean", sort=False)
            cost = at.groupby("method", sort=False)["cost"].mean()
            samples = at.groupby("method", sort=False)["samples"].max()
            parts.append(f"### Sweep runs at {length} tokens (score; cost2 = fraction of keys used, measured)")
            parts.append(table(["method"] + [c.removeprefix("ruler/") for c in piv.columns] + ["cost2", "samples"],
                               [[f"`{m}`"] + [fmt(v) for v in r] + [fmt(cost.get(m), pct=True), samples.get(m)]
                                for m, r in piv.iterrows()]))
    return parts + figures.embed_all(figs, SWEEP_FIGURES)


def token_section(results: Path, figs: dict | None = None) -> list[str]:
    """The per-token experiments' summaries and figures."""
    return (["## Attention per key and per token (Figures 2a, 5a-c, 10, 11)"]
            + [text for _, text in present_tables(results, TOKEN_TABLES)] + figures.embed_all(figs, TOKEN_FIGURES))


JOB_TIMES_HEADING = "## Job time of this run"


def job_time_section(results: Path) -> list[str]:
    """What the run itself cost, from Snakemake's benchmark files (``results_tree.read_job_times``): per rule the
    jobs, summed wall minutes, the longest job, CPU minutes and peak RSS; then the total."""
    df = read_job_times(results)
    if df.empty:
        return [JOB_TIMES_HEADING, "No benchmark files under `benchmarks/` (the run has not finished a job, or it "
                                   "predates them)."]
    by_rule = df.groupby("rule", sort=False).agg(jobs=("job", "size"), seconds=("seconds", "sum"),
                                                 longest=("seconds", "max"), cpu=("cpu_seconds", "sum"),
                                                 rss=("max_rss_mb", "max")).sort_values("seconds", ascending=False)
    rows = [[f"`{r.Index}`", r.jobs, fmt(r.seconds / 60), fmt(r.longest / 60), fmt(r.cpu / 60), f"{r.rss / 1024:.2f}"]
            for r in by_rule.itertuples()]
    total = df["seconds"].sum()
    rows.append(["**all**", len(df), f"**{fmt(total / 60)}**", fmt(df['seconds'].max() / 60),
                 fmt(df["cpu_seconds"].sum() / 60), f"{df['max_rss_mb'].max() / 1024:.2f}"])
    return [JOB_TIMES_HEADING,
            f"Wall time of the {len(df)} finished jobs, from Snakemake's benchmark files "
            f"(`benchmarks/<rule>/<job>.tsv`): {total / 3600:.2f} h in all. Jobs that each take every core run one "
            "after another, so this sum is the run's wall time less Snakemake's own start-up; a job that was "
            "interrupted and rerun counts its last attempt only. CPU time is user + system time of the job's "
            "processes; peak RSS is the largest job's.",
            table(["rule", "jobs", "wall (min)", "longest job (min)", "CPU (min)", "peak RSS (GB)"], rows)]
