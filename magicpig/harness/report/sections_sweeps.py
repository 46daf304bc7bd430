"""Two sections of REPORT.md: the budget / cost sweeps (Figs. 1, 6c, 9a, 9b/c; ``results/<preset>/sweeps``) and
the per-token attention figures (Figs. 2a, 5a-c, 10, 11; ``results/<preset>/estimation``)."""
from __future__ import annotations

from pathlib import Path

from magicpig.harness.report import figures
from magicpig.harness.report.collect import collect_metrics, read_csv
from magicpig.harness.report.markdown import fmt, table

SWEEP_FIGURES = ("topk_budget_sweep.png", "oracle_vs_topk_budget.png", "centering_sweep.png",
                 "magicpig_vs_topk_cost.png")
TOKEN_FIGURES = ("attention_mass_curve.png", "sink_key_similarity.png", "sink_vs_mean_key.png", "value_vs_logit.png",
                 "value_norms.png")
# columns that describe the run, not the result (left out of the tables)
META_COLUMNS = {"model", "n_prompt", "capture", "seed", "prompts"}
# summary tables shown above the per-token figures: file -> title
TOKEN_TABLES = {
    "mass_curve_summary.csv": "Attention mass held by the top fraction of keys (Figure 2a; sparse layers, all prompts)",
    "sink_center_summary.csv": "cos(k_sink, k_avg) per kv-head (Figure 5c; sparse layers, all prompts)",
    "value_norm_summary.csv": "Value norm of the sink against the median token (Figure 11)",
}


def sweep_section(results: Path, figs: dict | None = None) -> list[str]:
    """Score and measured cost2 of every sweep run (one row per method, one column per task) and the four
    sweep figures."""
    parts = ["## Budget and cost sweeps (Figures 1, 6c, 9a, 9b/c)"]
    root = results / "sweeps"
    df = collect_metrics(root) if root.is_dir() else None
    if df is None or df.empty:
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
    parts = ["## Attention per key and per token (Figures 2a, 5a-c, 10, 11)"]
    est = results / "estimation"
    for name, title in TOKEN_TABLES.items():
        df = read_csv(est / name)
        if df is None:
            continue
        cols = [c for c in df.columns if c not in META_COLUMNS]
        parts += [f"### {title}", table(cols, [[fmt(v, digits=3) for v in r]
                                              for r in df[cols].head(40).itertuples(index=False)])]
    return parts + figures.embed_all(figs, TOKEN_FIGURES)
