"""The report's sections as data (magicpig.harness.report.sections): each entry writes the heading it declares,
embeds the figures it declares, reads only the result files it declares, and lists paper items of the registry,
each item in one section at most."""
import builtins
import io
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest
from test_coverage import CPU_CONFIG
from test_report_figures import synthetic_tree

from magicpig.harness.families import FAMILIES
from magicpig.harness.report import figures, paper_items, sections
from magicpig.harness.results_tree import collect_metrics, load_reference
from magicpig.harness.report.coverage import load_run
from magicpig.harness.report.sections import ReportInputs, report_sections
from magicpig.harness.result_files import (DECODE_CSV, METHOD_DIR, METRICS, PREDICTIONS, SECTION_READS,
                                           SHAPE_DECODE_CSV, ResultFile, eval_results)


@pytest.mark.parametrize("tree", ["synthetic", "empty"])
def test_each_section_writes_its_heading_and_embeds_its_figures(tmp_path, tree):
    root, out = tmp_path / "results", tmp_path / "out"
    synthetic_tree(root) if tree == "synthetic" else root.mkdir()
    ref = load_reference()
    figs = figures.write_all(root, out, ref)
    acc = collect_metrics(root / "accuracy")
    inputs = ReportInputs(root, out, ref, figs, acc, load_run("t", CPU_CONFIG, root, figs, acc), ())
    for section in report_sections():
        parts = section.build(inputs)
        if section.title in ("Skipped or incomplete", "Models measured by shape only (paper Fig. 8a/b: CodeLlama-34B / "
                                                      "13B)") and not parts:
            continue  # written only when there is something to say
        assert parts[0] in (f"## {section.title}", f"### {section.title}"), (section.title, parts[0])
        text = "\n".join(parts)
        assert all(f"]({name})" in text for name in section.figures), section.title


def test_sections_list_registered_items_and_every_figure_once():
    labels = [item.label for item in paper_items.ITEMS]
    listed = [label for section in sections.SECTIONS for label in section.items]
    assert set(listed) <= set(labels) and len(listed) == len(set(listed))
    for item in paper_items.ITEMS:  # an item in a section links to it, not to a heading of its own
        assert not (item.label in listed and item.section), item.label
    declared = [name for section in sections.SECTIONS for name in section.figures]
    assert sorted(declared) == sorted(figures.FIGURES)


def eval_folders(rules: tuple[str, ...]) -> tuple[str, ...]:
    """The folders under the results root where the eval jobs of ``rules`` write (workflow/rules/common.smk
    eval_rules): accuracy/<the family's task prefix>, ablations/<the ablation>, sweeps/."""
    tasks = {f.rule: f.task.split("{")[0] for f in FAMILIES.values()}
    return tuple("sweeps/" if r.startswith("sweep_") else f"ablations/{r.removeprefix('ablation_')}"
                 if r.startswith("ablation_") else f"accuracy/{tasks[r]}" for r in rules)


def declares(file: ResultFile, rel: str) -> bool:
    """Whether ``rel`` (a path under a preset's results root) is a file of the entry ``file``: for eval results
    (result_files.eval_results) a metrics.json or the predictions.jsonl beside it in their rules' folders."""
    if file.folder == METHOD_DIR:
        return rel.endswith((f"/{METRICS.name}", f"/{PREDICTIONS.name}")) and rel.startswith(eval_folders(file.rules))
    return fnmatch(rel, re.sub(r"<[^>]*>", "*", file.folder) + "/" + file.glob)


def test_each_section_reads_an_entry_of_the_map_and_each_entry_is_read():
    """Each section names an entry of result_files.SECTION_READS, and each entry is named by a section but a
    family's own (there for the generic section of a family without one of its own): the report rule's inputs,
    every file of the map, are what the sections read."""
    keys = {section.reads for section in report_sections()}
    assert keys <= set(SECTION_READS) and set(SECTION_READS) - keys <= {f.block for f in FAMILIES.values()}
    declared = {file for section in report_sections() for file in section.files}
    assert declared == {file for files in SECTION_READS.values() for file in files}
    assert declares(eval_results("eval_ruler"), "accuracy/ruler/cwe/1024/dense/metrics.json")
    assert not declares(eval_results("eval_ruler"), "sweeps/ruler/cwe/2048/dense/metrics.json")
    assert declares(SHAPE_DECODE_CSV, "throughput/shapes/codellama-13b/decode.csv".replace("decode.csv", DECODE_CSV.name))


def test_each_section_declares_every_results_file_it_opens(tmp_path, monkeypatch):
    """On the synthetic results tree, every file that a section's builder or the figures it embeds open under
    the results root is one of the files the section declares (the report rule's inputs come from them)."""
    root, out = tmp_path / "results", tmp_path / "out"
    synthetic_tree(root)
    ref = load_reference()
    figs = figures.write_all(root, out, ref)
    acc = collect_metrics(root / "accuracy")
    inputs = ReportInputs(root, out, ref, figs, acc, load_run("t", CPU_CONFIG, root, figs, acc), ())
    opened: list[str] = []
    real_open = io.open

    def recording_open(file, mode="r", *args, **kwargs):
        if "r" in mode and Path(file).resolve().is_relative_to(root.resolve()):
            opened.append(Path(file).resolve().relative_to(root.resolve()).as_posix())
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", recording_open)
    monkeypatch.setattr(builtins, "open", recording_open)
    seen, undeclared = 0, {}
    for section in report_sections():
        opened.clear()
        section.build(inputs)
        for name in section.figures:
            figures.PLOTS[name](root, ref, out / name)
        undeclared[section.title] = sorted({rel for rel in opened if not any(declares(f, rel) for f in section.files)})
        seen += len(opened)
    assert not {title: rels for title, rels in undeclared.items() if rels}
    assert seen > 50  # the recording saw the tree's files
