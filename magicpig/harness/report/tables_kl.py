"""The paper's (K, L) ablation tables (App. E: Tables 10-13), ours beside the paper's.

Each of those tables gives RULER averages of a few (K, L) settings for one model at one or a few lengths
(``kl_ablation_tables`` in config/paper_reference.yaml). Ours come from two places: the RULER runs at the
table's own lengths (the paper presets run each table's settings there on all 13 tasks, ``ruler.length_methods``),
one column per length; and the ``ablations.kl_grid`` runs: the preset's ablation tasks at its ablation length,
each setting's score averaged over the tasks it completed, with dense attention ("full") taken from the RULER
runs on the same tasks and length when they exist. A setting of a paper table that this run did not measure
shows "—", and the coverage status counts the settings measured.
"""
from __future__ import annotations

from pathlib import Path

from magicpig.harness.results_tree import canonical, kl_grid_averages, load_reference, ruler_averages
from magicpig.harness.report.coverage_run import Run, not_run, partial
from magicpig.harness.report.markdown import fmt, table
from magicpig.lsh import parse_kl

HEADING = "(K, L) ablation tables"
TABLES = {
    "table10": ("Table 10", "larger tables for longer contexts, at about the same cost"),
    "table11": ("Table 11", "the same (K, L) settings on the 8B and the 70B model"),
    "table12": ("Table 12", "cost fixed at about 4%, K from 10 to 7"),
    "table13": ("Table 13", "L fixed at 120, K from 10 to 7"),
}


def setting_method(setting: str) -> str:
    """A paper table's setting ("full" or "K,L") as the canonical method spec our runs are keyed by."""
    if setting == "full":
        return "dense"
    K, L = parse_kl(setting)
    return canonical(f"magicpig:K={K},L={L}")


def paper_columns(block: dict) -> tuple[list[str], list[str], list[list[float | None]]]:
    """(settings, column names, values per setting) of one paper table, whatever its layout."""
    if "lengths" in block:  # Table 10: settings x lengths
        settings = list(block["rows"])
        cols = [f"paper {block['model']} {n // 1024}K" for n in block["lengths"]]
        return settings, cols, [list(block["rows"][s]) for s in settings]
    if "rows" in block:  # Table 11: models x settings
        settings = list(block["settings"])
        models = list(block["rows"])
        cols = [f"paper {m} {block['length'] // 1024}K" for m in models]
        return settings, cols, [[block["rows"][m][i] for m in models] for i in range(len(settings))]
    settings = list(block["settings"])  # Tables 12-13: one model, settings in a row
    keys = [key for key in ("cost", "accuracy") if key in block]
    cols = [f"paper {key} ({block['model']} {block['length'] // 1024}K)" for key in keys]
    return settings, cols, [[block[key][i] for key in keys] for i in range(len(settings))]


def table_lengths(block: dict) -> list[int]:
    """The context lengths a paper table reports (Table 10: three; the others: one)."""
    return [int(n) for n in (block.get("lengths") or [block["length"]])]


def kl_tables_section(results: Path, ref: dict) -> list[str]:
    parts = [f"### {HEADING} (paper Tables 10-13)"]
    paper = ref.get("kl_ablation_tables") or {}
    ours, ruler = kl_grid_averages(Path(results)), ruler_averages(Path(results))
    wanted = {n for block in paper.values() for n in table_lengths(block)}
    if ours.empty and not set(ruler["length"]) & wanted:
        return parts + ["Not run: no (K, L) grid results (`ablations.kl_grid`) and no RULER runs at the tables' "
                        "lengths in this run."]
    by_method = {r.method: r for r in ours.itertuples()}
    at = {(r.method, int(r.length)): r for r in ruler.itertuples()}
    grid = (f"the grid's tasks at {int(ours['length'].iloc[0])} tokens" if not ours.empty else "no grid run")
    parts.append("Ours: `ours <length>` is the RULER average at the table's own length over the tasks each setting "
                 "finished (13 in the paper presets: the paper's own quantity; the count in brackets); `ours grid` "
                 f"the (K, L) grid's average over {grid}, with its measured cost2 (dense from the RULER runs on the "
                 "same tasks and length). The paper's cells are averages over all 13 RULER tasks of the model it "
                 "names; another model's run is a reference, not the same quantity.")
    for key, (label, what) in TABLES.items():
        if key not in paper:
            continue
        settings, cols, values = paper_columns(paper[key])
        lengths = table_lengths(paper[key])
        rows = []
        for setting, vals in zip(settings, values):
            method = setting_method(setting)
            r = by_method.get(method)
            cells = [at.get((method, n)) for n in lengths]
            rows.append([setting] + [fmt(v, digits=3 if isinstance(v, float) and v < 1 else 1) for v in vals]
                        + (["—", "—"] if r is None else [f"{fmt(r.score)} ({r.tasks})", fmt(r.cost, digits=3)])
                        + ["—" if c is None else f"{fmt(c.score)} ({c.tasks})" for c in cells])
        header = ["(K, L)"] + cols + ["ours grid", "ours grid cost2"] + [f"ours {n // 1024}K" for n in lengths]
        parts += [f"**{label}**: {what}.", table(header, rows)]
    return parts


def kl_table_status(run: Run, key: str, model_note: str) -> str:
    """The coverage status of one of Tables 10-13: how many of its settings this run measured, and at what.
    ``model_note``: why our model is not the table's (empty when it is)."""
    block = (load_reference().get("kl_ablation_tables") or {}).get(key)
    if block is None:
        return not_run("the paper's cells are not in config/paper_reference.yaml")
    settings, _, _ = paper_columns(block)
    paper_lengths = table_lengths(block)
    ruler = ruler_averages(run.results)
    ruler = ruler[ruler["length"].isin(paper_lengths)]
    at_lengths = {m for m, g in ruler.groupby("method") if set(g["length"]) >= set(paper_lengths)}
    if not at_lengths and not (run.config.get("ablations") or {}).get("kl_grid"):
        return not_run(run.elsewhere(lambda p: bool((p.get("ablations") or {}).get("kl_grid"))))
    ours = kl_grid_averages(run.results)
    if ours.empty and not at_lengths:
        return partial("no (K, L) grid results and no RULER runs at the table's lengths in this run yet")
    lengths_text = ", ".join(f"{n // 1024}K" for n in paper_lengths)
    have_ruler = [s for s in settings if setting_method(s) in at_lengths]
    if len(have_ruler) == len(settings):  # every setting at the paper's lengths: the table's own quantity
        tasks = int(ruler["tasks"].min())
        return partial(f"every setting measured at {lengths_text}",
                       f"RULER average over {tasks} of the paper's 13 tasks" if tasks < 13 else "", model_note,
                       "no check against the paper's cells decides it")
    have = [s for s in settings if setting_method(s) in set(ours["method"]) | at_lengths]
    where = (f"RULER average over {int(ours['tasks'].max())} task(s) at {int(ours['length'].iloc[0])} tokens"
             if not ours.empty else f"RULER runs at {lengths_text}")
    return partial(f"{len(have)} of the paper's {len(settings)} settings measured" if len(have) < len(settings)
                   else "", f"{where}, the paper over 13 at {lengths_text}", model_note)
