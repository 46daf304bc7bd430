"""Report sections of the paper's model-specific accuracy tables: Table 1 (GSM8K-CoT, COQA, MMLU-CoT),
Tables 4 and 5 (RULER on the 512K-context models and on Llama-3.1-70B) and Table 6 (infini_igsm), the
lookup of the paper's rows for a run's model that every accuracy table uses, and the table of 95% intervals and
sample counts each accuracy section ends with (``intervals``: per task ``paired.level_interval`` of the per-sample
scores, task averages by MOVER, ``paired.task_average``). The accuracy figures draw the same intervals
(``run_level``), so a whisker is as wide as its table cell.

A run is put beside the paper's rows of its own model (``paper_models`` of the reference file maps a
preset's Hugging Face id to the paper's model key); a model the paper does not evaluate (the embedded
SmolLM2, Qwen) is put beside Llama-3.1-8B-Instruct's rows, to compare trends. A table whose model this
preset does not run lists the paper's rows and says which preset runs it and what that needs.
"""
from __future__ import annotations

import pandas as pd

from magicpig.harness.results_tree import canonical, sample_scores
from magicpig.harness.report.markdown import fmt, table
from magicpig.harness.stats.paired import TaskInterval, level_interval, task_average

PAPER_MODEL = "llama-3.1-8b-instruct"
TABLE1_TITLE = "GSM8K-CoT, COQA, MMLU-CoT (paper Table 1, lm-evaluation-harness tasks)"
TABLE6_TITLE = "infini_igsm reasoning (paper Table 6)"
# what the figures' whiskers are, said on each figure that draws them
WHISKERS = "whiskers: 95% CI as in the tables (Clopper-Pearson for 0/100 scores, else bootstrap with an exact bound)"
# Table 1's columns: our task name -> the paper's column name (lm_eval_table1.tasks)
TABLE1_TASKS = {"gsm8k": "gsm8k_cot", "coqa": "coqa", "mmlu_cot": "mmlu_cot"}
# the local window of the lm-eval tasks: what the paper says and how this suite reads it
LOCAL_WINDOW_NOTE = (
    "Local window: Sec. 5.1 (Baselines) says \"The initial 4 tokens and local 64 (for LongBench and RULER) or 24 "
    "(for lm-eval-harness) tokens as well as layer-{0, 16} are statically preserved.\" The sentence names no "
    "method and follows the description of Quest's settings, so the 24-token window is read as holding for every "
    "sparse method of this table: MagicPIG and Quest both run with `local=24` here (the paper presets write it in "
    "their specs; GSM8K also applies it to a MagicPIG spec that leaves it out).")
# the presets that run each model of Tables 4-6 and what they need (for the "not run" lines)
LONG_NEEDS = "a GPU, the weights of {} and host memory for a 256K-token cache"
MODEL_PRESETS = {
    "megabeam-mistral-7b-512k": ("paper-long", LONG_NEEDS.format("aws-prototyping/MegaBeam-Mistral-7B-512k")),
    "llama3-8b-prolong-512k": ("paper-long-prolong",
                               LONG_NEEDS.format("princeton-nlp/Llama-3-8B-ProLong-512k-Instruct")),
    "llama-3.1-70b-instruct": ("paper-70b", "GPUs for 140 GB of bf16 weights and the weights of "
                                            "meta-llama/Llama-3.1-70B-Instruct"),
}


def paper_model(acc: pd.DataFrame, ref: dict) -> str:
    """The paper's key of the model the runs in ``acc`` used (the most frequent one), or PAPER_MODEL."""
    models = acc["model"].dropna() if "model" in acc else pd.Series(dtype=object)
    if models.empty:
        return PAPER_MODEL
    ours = str(models.mode().iloc[0]).rstrip("/").lower()
    for hub_id, key in (ref.get("paper_models") or {}).items():
        if ours == hub_id.lower() or ours.endswith("/" + hub_id.split("/")[-1].lower()):
            return key
    return PAPER_MODEL


def paper_rows(section: dict, key: str = PAPER_MODEL) -> dict:
    """The paper's rows of one table under ``key`` (a model's; Table 7's ``rows``), keyed by canonical spec."""
    return {canonical(k): v for k, v in (section.get(key) or {}).items()}


def paper_match(rows_ref: dict, runs: pd.DataFrame) -> tuple[str | None, list | None]:
    """(key, values) of the paper's row for the runs of one method: by canonical spec, the effective spec
    first (what the task ran, e.g. GSM8K's local=24 override), then the spec as written."""
    for key in list(dict.fromkeys(runs["method_effective"].dropna())) + list(dict.fromkeys(runs["method"])):
        if key in rows_ref:
            return key, rows_ref[key]
    return None, None


def paper_only_rows(section: dict, matched: set, n_ours: int, model: str = PAPER_MODEL,
                    paper_values=lambda values: values, extra=lambda key: []) -> list[list[str]]:
    """The paper's rows this run has no results for (named as the reference file writes them): ``paper_values``
    picks the columns shown from a row, ``extra`` gives the cells after them by canonical spec."""
    return [[f"`{spec}` (paper only)"] + ["—"] * n_ours + [fmt(x) for x in paper_values(values)]
            + extra(canonical(spec)) for spec, values in (section.get(model) or {}).items()
            if canonical(spec) not in matched]


def paper_table(header: list[str], section: dict) -> str:
    """The paper's rows alone (spec -> values), for a model or task set this preset does not run."""
    return table(["method"] + header, [[f"`{spec}`"] + [fmt(x) for x in values] for spec, values in section.items()])


def skipped_notes(df: pd.DataFrame) -> list[str]:
    """One line per (task, length, status) that did not finish, with its reason."""
    bad = df[df["status"] != "ok"]
    if bad.empty:
        return []
    lines = [f"- `{r.task}` @ {r.length} / `{r.method}`: **{r.status}**" + (f" — {r.reason}" if r.reason else "")
             for r in bad.drop_duplicates(["task", "length", "status"]).itertuples()]
    return ["Not run or incomplete:\n" + "\n".join(lines)]


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
    return table(["method", by, "average [95% CI] (n)"] + [t.removeprefix(prefix) for t in tasks], rows)


def intervals(df: pd.DataFrame, prefix: str, by: str = "length") -> list[str]:
    return ["Every accuracy number above with its 95% interval and sample count (per task: Clopper-Pearson "
            "for 0/100 scores, else a percentile bootstrap over samples widened to an exact bound when nearly "
            "every score is the same; task averages: MOVER over the task intervals):", interval_table(df, prefix, by)]


def run_level(row) -> TaskInterval:
    """One run's (a ``collect_metrics`` row) mean score with the interval its table cell prints (``level_interval``
    of its per-sample scores); without them its metrics score, with no interval (n = 0, how = 'no samples')."""
    scores = list(sample_scores(row.path).values())
    if not scores:
        v = float(row.score)
        return TaskInterval(str(row.task), 0, v, v, v, "no samples")
    return level_interval(str(row.task), scores)


def whisker(value: float, lo: float, hi: float) -> tuple[float, float]:
    """(below, above) lengths of an error bar around ``value`` (never negative)."""
    return max(0.0, value - lo), max(0.0, hi - value)


# the cost columns of Tables 1 and 2 beside our measured cost2: ours, then the paper's (its `costs` rows)
COST_HEADER = ["cost1", "total cost"]
PAPER_COST_HEADER = ["paper cost1", "paper cost2", "paper total"]
COST_NOTE = ("Costs as fractions of full attention (Table 1's caption: \"Cost1, Cost2 represents the cost for "
             "searching/sampling and sparse attention computation\"): cost2 is the share of keys attended, measured; "
             "cost1 the search cost each method reports (0 for MagicPIG, whose hash codes need no pass over the keys; "
             "1/page_size for Quest, one min/max bound per page; 0.5 for TopK and oracle sampling, which score every "
             "key), total = cost1 + cost2. The paper's three cost columns follow its scores.")


def task_table(df: pd.DataFrame, tasks: list[str], ours: list[str], theirs: list[str], paper: dict, model: str,
               paper_values=lambda values: values, costs: bool = False) -> str:
    """One row per method: our score per task (``tasks``: task names; ``ours``: their column names), their
    average, measured cost2 (with ``costs``: also cost1 and the total), then the paper's columns ``theirs`` of that
    setting (``paper_values`` picks them from a row; with ``costs`` its cost1, cost2 and total from the section's
    ``costs`` rows); the paper's other rows follow as 'paper only'."""
    ok = df[df["status"] == "ok"]
    rows_ref = {k: paper_values(v) for k, v in paper_rows(paper, model).items()}
    cost_ref = paper_rows(paper.get("costs") or {}, model) if costs else {}
    n_paper = len(next(iter(rows_ref.values()), []))
    n_cost = len(PAPER_COST_HEADER) if costs else 0

    def paper_costs(key: str | None) -> list[str]:
        return [fmt(x, pct=True) for x in cost_ref.get(key) or [None] * n_cost]

    rows, matched = [], set()
    for method in dict.fromkeys(df["method"]):
        g = ok[ok["method"] == method]
        scores = [g[g["task"] == t]["score"].mean() for t in tasks]
        have = [s for s in scores if s == s]
        key, pv = paper_match(rows_ref, df[df["method"] == method])
        matched.add(key)
        avg = (fmt(sum(have) / len(have)) + ("" if len(have) == len(tasks) else f" ({len(have)}/{len(tasks)})")
               if have else "—")
        cost2, cost1 = g["cost"].mean(), pd.to_numeric(g["cost1"], errors="coerce").mean()
        ours_costs = [fmt(cost1, pct=True), fmt(cost1 + cost2, pct=True)] if costs else []
        rows.append([f"`{method}`"] + [fmt(s) for s in scores] + [avg, fmt(cost2, pct=True)] + ours_costs
                    + ([fmt(x) for x in pv] if pv else ["—"] * n_paper) + paper_costs(key))
    n_ours = len(tasks) + 2 + (len(COST_HEADER) if costs else 0)
    header = (["method"] + [f"ours {t}" for t in ours] + ["ours avg", "cost2"] + (COST_HEADER if costs else [])
              + [f"paper {t}" for t in theirs] + (PAPER_COST_HEADER if costs else []))
    return table(header, rows + paper_only_rows(paper, matched, n_ours, model, paper_values, paper_costs))


def family_section(family, acc: pd.DataFrame, ref: dict) -> list[str]:
    """The generic section of a benchmark family (``families.BenchmarkFamily`` with a ``heading``): our score per
    task of the family, their average and cost2 per method, beside the paper's rows of its table (when
    ``config/paper_reference.yaml`` has it: ``tasks`` names its columns)."""
    parts = [f"## {family.heading}"]
    df = acc[acc["task"].fillna("").str.startswith(family.prefix)]
    if df.empty:
        return parts + [f"No results of block `{family.block}` in this run."]
    paper = ref.get(family.table_key) or {}
    tasks = sorted(df["task"].unique())
    ours = [t.removeprefix(family.prefix) or t for t in tasks]
    return (parts + [task_table(df, tasks, ours, paper.get("tasks", []), paper, paper_model(df, ref))]
            + intervals(df, family.prefix) + skipped_notes(df))


def table1_section(acc: pd.DataFrame, ref: dict) -> list[str]:
    """Table 1: GSM8K-CoT, COQA (F1) and MMLU-CoT beside the paper's three columns."""
    parts = [f"## {TABLE1_TITLE}"]
    df = acc[acc["task"].fillna("").isin(list(TABLE1_TASKS))]
    if df.empty:
        return parts + ["No Table 1 results in this run (the preset runs none of gsm8k, coqa, mmlu_cot)."]
    paper = ref["lm_eval_table1"]
    model = paper_model(df, ref)
    cols = [paper["tasks"].index(c) for c in TABLE1_TASKS.values()]
    scores = task_table(df, list(TABLE1_TASKS), list(TABLE1_TASKS), [paper["tasks"][c] for c in cols], paper, model,
                        lambda v: [v[c] for c in cols], costs=True)
    parts.append(f"Scores ×100: GSM8K strict match, COQA token F1 (exact match is recorded in each run's "
                 f"metrics; the paper does not say which of lm-eval's two CoQA metrics its column shows), MMLU-CoT "
                 f"exact match of the extracted choice. Paper rows: `{model}`.")
    parts.append(LOCAL_WINDOW_NOTE)
    return parts + [scores, COST_NOTE] + intervals(df, "") + skipped_notes(df)


def tasks_done(counts: list[int], tasks: int) -> str:
    """The tasks column of a RULER row: the fewest tasks finished at a length the method ran, and at how many of
    the table's lengths it ran when not all (a setting the paper reports at one length: Tables 10-13)."""
    ran = [c for c in counts if c]
    text = f"{min(ran)}/{tasks}" if ran else f"0/{tasks}"
    return text if len(ran) == len(counts) else f"{text} ({len(ran)} of {len(counts)} lengths)"


def ruler_table(ok: pd.DataFrame, lengths: list[int], ours: list[str], paper: dict, model: str) -> str:
    """One row per method of finished RULER runs: the task average per length (``ours``: their column names),
    tasks done, cost2, the paper's row of the same setting; then the paper's rows this run lacks."""
    rows_ref, tasks = paper_rows(paper, model), ok["task"].nunique()
    rows, matched = [], set()
    for method, g in ok.groupby("method", sort=False):
        counts = [g[g["length"] == n]["task"].nunique() for n in lengths]
        key, pv = paper_match(rows_ref, g)
        matched.add(key)
        rows.append([f"`{method}`"] + [fmt(g[g["length"] == n]["score"].mean()) if c else "—"
                                       for n, c in zip(lengths, counts)]
                    + [tasks_done(counts, tasks), fmt(g["cost"].mean(), pct=True)]
                    + ([fmt(x) for x in pv] if pv else ["—"] * len(paper["lengths"])))
    header = (["method"] + [f"ours {n}" for n in ours] + ["tasks", "cost2"]
              + [f"paper {n // 1024}K" for n in paper["lengths"]])
    return table(header, rows + paper_only_rows(paper, matched, len(lengths) + 2, model=model))


def ruler_model_section(acc: pd.DataFrame, ref: dict, table_key: str, title: str) -> list[str]:
    """Table 4 or 5: the RULER average of this run beside the paper's rows of the same model when the run's
    model is one of the table's; otherwise the paper's rows and the preset that runs them."""
    paper = ref[table_key]
    models = [m for m in paper if m != "lengths"]
    header_paper = [f"paper {n // 1024}K" for n in paper["lengths"]]
    df = acc[acc["task"].fillna("").str.startswith("ruler/")]
    ok = df[df["status"] == "ok"]
    model = paper_model(df, ref) if not df.empty else None
    parts = [f"## {title}"]
    if model in models and not ok.empty:
        lengths = sorted(ok["length"].unique())
        parts.append(f"Average RULER score over tasks (×100) of this run's model beside the paper's `{model}` rows.")
        parts.append(ruler_table(ok, lengths, [f"{n // 1024}K" for n in lengths], paper, model))
        return parts + intervals(ok, "ruler/") + skipped_notes(df)
    for m in models:
        preset, needs = MODEL_PRESETS.get(m, ("—", "its weights"))
        parts.append(f"`{m}`: no finished run of this model here" if m == model else
                     f"`{m}`: not run in this preset: needs {needs} (preset `{preset}`). The paper's rows:")
        parts.append(paper_table(header_paper, paper[m]))
    return parts + (skipped_notes(df) if model in models else [])


def table6_section(acc: pd.DataFrame, ref: dict) -> list[str]:
    """Table 6: infini_igsm accuracy by set and number of operations beside the paper's."""
    paper = ref["infini_igsm_table6"]
    parts = [f"## {TABLE6_TITLE}"]
    df = acc[acc["task"].fillna("").str.startswith("infini_igsm/")]
    if df.empty:
        return parts + ["Not run in this preset: needs the hub data sets YangZhoumill/infini_igsm_4k_noise_close "
                        "and _8k_noise_close and a model with an 8K+ context (block `reasoning`; preset `paper` "
                        "runs all six (set, operations) tasks)."]
    model = paper_model(df, ref)
    ops = paper["ops"]
    header_paper = [f"paper {n}-ops" for n in ops]
    for set_name in paper["sets"]:
        tasks = [f"infini_igsm/{set_name}_op{n}" for n in ops]
        sub = df[df["task"].isin(tasks)]
        section = {model: (paper.get(model) or {}).get(set_name, {})}
        parts.append(f"### {set_name}")
        if sub.empty:
            parts += [f"Not run in this preset (block `reasoning` lists none of {', '.join(tasks)}). The paper's "
                      "rows:", paper_table(header_paper, section[model])]
            continue
        parts.append(task_table(sub, tasks, [f"{n}-ops" for n in ops], [f"{n}-ops" for n in ops], section, model))
    return parts + ["Accuracy ×100 (the integer after 'Answer:' equals the solution's). The paper's TopK setting "
                    "is its fraction of keys, oracle sampling's its fraction of drawn keys."] \
        + intervals(df, "infini_igsm/") + skipped_notes(df)
