"""The report's sections as data (magicpig.harness.report.sections): each entry writes the heading it declares,
embeds the figures it declares, and lists paper items of the registry, each item in one section at most."""
import pytest
from test_coverage import CPU_CONFIG
from test_report_figures import synthetic_tree

from magicpig.harness.report import figures, paper_items, sections
from magicpig.harness.results_tree import collect_metrics, load_reference
from magicpig.harness.report.coverage import load_run
from magicpig.harness.report.sections import ReportInputs, report_sections


@pytest.mark.parametrize("tree", ["synthetic", "empty"])
def test_each_section_writes_its_heading_and_embeds_its_figures(tmp_path, tree):
    root, out = tmp_path / "results", tmp_path / "out"
    synthetic_tree(root) if tree == "synthetic" else root.mkdir()
    ref = load_reference()
    figs = figures.write_all(root, out, ref)
    acc = collect_metrics(root / "accuracy")
    inputs = ReportInputs(root, out, ref, figs, acc, load_run("t", CPU_CONFIG, root, figs, acc), root.parent / "gpu")
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
