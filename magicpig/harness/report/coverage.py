"""The coverage table at the top of REPORT.md: one row per item of the paper (``paper_items.ITEMS``) with
what it shows, where it is in this report and its status, computed when the report is built from the
preset's config, the results present and each figure's list of missing data. Nothing here is typed per
preset: a status is ``reproduced here`` (with what its check compared, where the item has a per-cell check:
``coverage_run.cells_status``), ``partial: <what is missing>`` or ``not run in this preset: <why>``.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from magicpig.harness.pipeline_config import all_presets
from magicpig.harness.results_tree import gpu_run_folders
from magicpig.harness.report.coverage_run import NOT_PRODUCED, NOT_RUN, PARTIAL, REPRODUCED, Run, add_gaps, not_run
from magicpig.harness.report.markdown import table
from magicpig.harness.report import paper_items


def section_of(item, sections) -> str | None:
    """The heading the coverage table links a paper item to: the title of the section of ``sections`` that lists
    it, else the item's own ``section`` (the start of a subheading inside a section)."""
    return next((s.title for s in sections if item.label in s.items), item.section)


def anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def figure_gaps(run: Run, names: tuple[str, ...]) -> list[str]:
    """'<figure> lacks <files>' for each of ``names`` drawn without some of its data (or not written)."""
    gaps = []
    for name in names:
        fig = run.figures.get(name)
        if fig is None:
            gaps.append(f"`{name}` not written")
        elif fig.missing:
            gaps.append(f"`{name}` lacks " + ", ".join(f"`{m.splitlines()[0]}`" for m in fig.missing))
    return gaps


def item_status(item, run: Run, sections: tuple = ()) -> str:
    """The status of one paper item: its own check, then its figures' missing data on top."""
    if item.check is None:  # reproduced wherever a section or a figure shows it
        status = REPRODUCED if section_of(item, sections) or item.figures else not_run(NOT_PRODUCED)
    else:
        status = item.check(run)
    return add_gaps(status, *figure_gaps(run, item.figures))


def where(item, headings: list[str], status: str, sections: tuple = ()) -> str:
    """Links to the item's section (by its anchor: the section of ``sections`` that lists it, else the first
    heading its ``section`` starts) and figures; '—' when this preset does not run it."""
    if status.startswith(NOT_RUN):
        return "—"
    title = section_of(item, sections)
    links = [f"[§ {h}](#{anchor(h)})" for h in headings if title and h.startswith(title)][:1]
    links += [f"[{name}]({name})" for name in item.figures]
    return ", ".join(links) or "—"


def headings_of(parts: list[str]) -> list[str]:
    """The text of every Markdown heading in the report's parts."""
    return [m.group(1).strip() for p in parts for m in re.finditer(r"^#{1,6} (.+)$", p, flags=re.M)]


def coverage_rows(run: Run, parts: list[str], sections: tuple = ()) -> list[tuple]:
    """(item, where, status) per registered paper item, in the paper's order; ``parts``: the report's sections
    (``sections``: their entries, ``sections.SECTIONS``)."""
    heads = headings_of(parts)
    statuses = [(item, item_status(item, run, sections)) for item in paper_items.ITEMS]
    return [(item, where(item, heads, status, sections), status) for item, status in statuses]


def coverage_section(run: Run, parts: list[str], sections: tuple = ()) -> list[str]:
    rows = coverage_rows(run, parts, sections)
    counts = {k: sum(s.startswith(k) for _, _, s in rows) for k in (REPRODUCED, PARTIAL, NOT_RUN)}
    return ["## Coverage of the paper",
            f"Every table and figure of the paper (arXiv 2410.16179 v4) with its status in this run of preset "
            f"`{run.preset}` (model `{run.model}`), computed from the preset's config, the results present and "
            f"each figure's missing data: {counts[REPRODUCED]} reproduced here, {counts[PARTIAL]} partial, "
            f"{counts[NOT_RUN]} not run in this preset.",
            table(["item", "what it shows", "where in this report", "status"],
                  [[cell.replace("|", "\\|") for cell in (item.label, item.shows, w, status)]
                   for item, w, status in rows])]


def load_run(preset: str, config: dict | None, results: Path, figures: dict, accuracy: pd.DataFrame,
             gpu_folders: Sequence[Path] | None = None) -> Run:
    """A ``Run`` of ``preset``: its config as given, else its block of config/*.yaml (empty when unknown);
    ``gpu_folders``: the GPU runs the report reads (default ``results_tree.gpu_run_folders``)."""
    presets = all_presets()
    config = presets.get(preset, {}) if config is None else config
    gpu = tuple(gpu_run_folders(Path(results)) if gpu_folders is None else gpu_folders)
    return Run(preset, json.loads(json.dumps(config)), Path(results), figures, accuracy,
               {**presets, preset: config}, gpu)
