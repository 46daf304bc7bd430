"""Two sections of REPORT.md: the budget / cost sweeps (Figs. 1, 6c, 9a, 9b/c; ``results/<preset>/sweeps``) and
the per-token attention figures (Figs. 2a, 5a-c, 10, 11; ``results/<preset>/estimation``)."""
from __future__ import annotations

from pathlib import Path

from magicpig.harness.report import figures
from magicpig.harness.report.build import present_tables
from magicpig.harness.results_tree import collect_metrics
from magicpig.harness.report.markdown import fmt, table
from magicpig.harness.result_files import (ATTENTION_MASS_CURVE_PNG, CENTERING_SWEEP_PNG, MAGICPIG_VS_TOPK_COST_PNG,
                                           MASS_CURVE_SUMMARY_CSV, ORACLE_VS_TOPK_BUDGET_PNG, SINK_CENTER_SUMMARY_CSV,
                                           SINK_KEY_SIMILARITY_PNG, SINK_VS_MEAN_KEY_PNG, TOPK_BUDGET_SWEEP_PNG,
                                           VALUE_NORMS_PNG, VALUE_NORM_SUMMARY_CSV, VALUE_VS_LOGIT_PNG)

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
    """Score and measured cost2 of every sweep run (one row per method, one column per task) and the four
    sweep figures."""
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
