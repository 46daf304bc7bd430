"""The report as data, and its assembly: ``SECTIONS``, the sections of REPORT.md below its coverage table in
their order (``Section``; ``report_sections`` adds the generic section of a family that no entry shows), and
``build_report``, which writes them. The coverage table links each paper item to the heading of its section.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from magicpig.harness.families import FAMILIES
from magicpig.harness.report import build, figures, paper_tables, tables_kl, tables_system
from magicpig.harness.report.claims import claims_section
from magicpig.harness.results_tree import collect_metrics, gpu_run_folders, load_reference
from magicpig.harness.report.coverage import coverage_section, load_run
from magicpig.harness.report.coverage_run import Run
from magicpig.harness.report.disagreements_section import disagreements_section
from magicpig.harness.report.html import write_html
from magicpig.harness.result_files import CENTERING_PNG, REPORT_MD, SECTION_READS, ResultFile


@dataclass(frozen=True)
class ReportInputs:
    """What a section reads: the results root, the report's folder, the paper's numbers, the written figures
    (``figures.write_all``), the accuracy rows (``collect_metrics``), the coverage ``Run`` and the GPU runs read."""

    results: Path
    out: Path
    ref: dict
    figs: dict
    acc: pd.DataFrame
    run: Run
    gpu_folders: tuple[Path, ...]


@dataclass(frozen=True)
class Section:
    """One section: the result files it reads, its own and its figures' (by key of ``result_files.SECTION_READS``,
    which the Snakefile reads, importing nothing heavy, to make them the report rule's inputs), its heading's text
    (as ``build`` writes it, at level 2 or 3), its builder, the labels of the paper items (``paper_items.ITEMS``)
    it holds, the figures (``figures.FIGURES``) it embeds and the benchmark families (``families.FAMILIES``, by
    block) whose results it shows."""

    reads: str
    title: str
    build: Callable[[ReportInputs], list[str]] = field(repr=False)
    items: tuple[str, ...] = ()
    figures: tuple[str, ...] = ()
    families: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[ResultFile, ...]:
        """The result files it reads."""
        return SECTION_READS[self.reads]


TABLE4_TITLE = "RULER at 16K-256K on 512K-context models (paper Table 4)"
TABLE5_TITLE = "RULER on Llama-3.1-70B-Instruct (paper Table 5)"

SECTIONS: list[Section] = [
    Section("skipped", "Skipped or incomplete", lambda r: build.skipped_section(r.acc, r.results / "ablations")),
    Section("claims", "Claims", lambda r: claims_section(r.results, r.ref, r.gpu_folders)),
    Section("disagreements", "Where methods disagree", lambda r: disagreements_section(r.acc, r.ref, r.out)),
    Section("ruler", "RULER (paper Table 3)", lambda r: build.ruler_section(r.acc, r.ref, r.figs), ("Table 3",),
            build.RULER_FIGURES, ("ruler",)),
    Section("ruler", TABLE4_TITLE,
            lambda r: paper_tables.ruler_model_section(r.acc, r.ref, "ruler_table4", TABLE4_TITLE), ("Table 4",),
            families=("ruler",)),
    Section("ruler", TABLE5_TITLE,
            lambda r: paper_tables.ruler_model_section(r.acc, r.ref, "ruler_table5", TABLE5_TITLE), ("Table 5",),
            families=("ruler",)),
    Section("longbench", "LongBench (paper Table 2)", lambda r: build.longbench_section(r.acc, r.ref), ("Table 2",),
            families=("longbench",)),
    Section("table1", paper_tables.TABLE1_TITLE, lambda r: paper_tables.table1_section(r.acc, r.ref), ("Table 1",),
            families=("gsm8k", "lm_eval")),
    Section("reasoning", paper_tables.TABLE6_TITLE, lambda r: paper_tables.table6_section(r.acc, r.ref), ("Table 6",),
            families=("reasoning",)),
    Section("ablations", "Ablations", lambda r: build.ablation_section(r.results / "ablations", r.ref, r.figs),
            figures=(CENTERING_PNG.name,)),
    Section("kl_tables", f"{tables_kl.HEADING} (paper Tables 10-13)",
            lambda r: tables_kl.kl_tables_section(r.results, r.ref), ("Table 10", "Table 11", "Table 12", "Table 13")),
    Section("sweeps", "Budget and cost sweeps (Figures 1, 6c, 9a, 9b/c)",
            lambda r: build.sweep_section(r.results, r.figs), ("Figure 1", "Figure 6c", "Figure 9b", "Figure 9c"),
            build.SWEEP_FIGURES),
    Section("estimation", "Attention-level experiments", lambda r: build.estimation_section(r.results, r.figs),
            figures=tuple(build.ESTIMATION_FIGURES.values())),
    Section("throughput", "Throughput and latency", lambda r: build.throughput_section(r.results, r.figs),
            ("Figure 8a", "Figure 8b", "Figure 8c"), build.THROUGHPUT_FIGURES),
    Section("tokens", "Attention per key and per token (Figures 2a, 5a-c, 10, 11)",
            lambda r: build.token_section(r.results, r.figs), ("Figure 2a", "Figure 5a", "Figure 5b", "Figure 10",
                                                                "Figure 11"), build.TOKEN_FIGURES),
    Section("table7", tables_system.TABLE7_TITLE, lambda r: tables_system.table7_section(r.results, r.ref),
            ("Table 7",)),
    Section("table8", tables_system.TABLE8_TITLE,
            lambda r: tables_system.table8_section(r.ref, r.run.config.get("model")), ("Table 8",)),
    Section("shapes", tables_system.SHAPES_TITLE, lambda r: tables_system.shapes_section(r.results)),
    Section("gpu", tables_system.GPU_TITLE, lambda r: tables_system.gpu_section(r.gpu_folders, r.results)),
]


def report_sections() -> list[Section]:
    """``SECTIONS`` with a section for each benchmark family that no entry shows: the generic accuracy table
    (``paper_tables.family_section``) under the family's heading, after the last section of a family."""
    shown = {block for s in SECTIONS for block in s.families}
    extra = [Section(f.block, f.heading, lambda r, f=f: paper_tables.family_section(f, r.acc, r.ref), f.items, (),
                     (f.block,)) for f in FAMILIES.values() if f.block not in shown]
    last = max(i for i, s in enumerate(SECTIONS) if s.families)
    return SECTIONS[:last + 1] + extra + SECTIONS[last + 1:]


def build_report(results: Path | str, out: Path | str, preset: str, preset_config: dict | None = None,
                 gpu_results: Path | str | None = None) -> Path:
    """Write ``out/REPORT.md``, its rendering ``out/REPORT.html`` and every figure of ``figures.FIGURES``
    beside them from ``results``; returns the Markdown report's path. The coverage table of the paper's items
    comes first, then the sections of ``report_sections()`` (the skipped items, the claims table, one section
    per benchmark / experiment) and the run's job times.
    ``preset_config``: the preset's block of the pipeline config (default: the block of that name in
    config/*.yaml), which the coverage statuses read. ``gpu_results``: the one ``make gpu-check`` output folder
    read (default: results/gpu beside ``results`` and the committed GPU runs, ``results_tree.gpu_run_folders``)."""
    results, out = Path(results), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ref = load_reference()
    gpu_folders = tuple(gpu_run_folders(results, Path(gpu_results) if gpu_results is not None else None))
    figs = figures.write_all(results, out, ref, gpu_folders)
    parts = [f"# MagicPIG reproduction report — preset `{preset}`",
             f"Generated {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} from `{results}`. "
             "Reproduced numbers come from the results files; paper numbers from `config/paper_reference.yaml` "
             "(arXiv 2410.16179 v4). The paper's columns are for its models and context lengths; ours for the "
             "model and lengths of this preset, so compare trends, not cells, unless the settings match."]
    acc = collect_metrics(results / "accuracy")
    run = load_run(preset, preset_config, results, figs, acc, gpu_folders)
    inputs = ReportInputs(results, out, ref, figs, acc, run, gpu_folders)
    sections = report_sections()
    body = [part for section in sections for part in section.build(inputs)]
    parts += coverage_section(run, body, sections) + body + build.job_time_section(results)
    path = out / REPORT_MD.name
    path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    write_html(path)
    return path
