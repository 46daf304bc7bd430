"""The recipes of CONTRIBUTING.md, followed: a toy attention method in a new module of ``magicpig/methods/``
and a toy figure wired into the report's registries are picked up, and leaving out a step is caught."""
import dataclasses
import sys

import pytest
from test_coverage import CPU_CONFIG, coverage_rows
from test_coverage import test_registry_declares_every_figure_and_only_figures_of_the_list as registry_check
from test_methods import run_matrix, unregistered_methods
from test_report_figures import synthetic_tree
from test_report_figures import test_report_embeds_every_figure as embeds_check

import magicpig.methods
from magicpig.harness.report import build_report, canvas, figures, paper_items, sections_sweeps
from magicpig.methods import import_modules, parse_method, registry

TOY_METHOD = '''
"""A toy method of the recipe: exact attention over the last ``window`` valid keys."""
from dataclasses import dataclass

from magicpig.methods.base import (AttentionMethod, AttentionResult, attend_logits, check_min, check_shapes,
                                   default_scale, grouped_scores, per_head)
from magicpig.methods.registry import register


@{register}dataclass(kw_only=True)
class RecentWindow(AttentionMethod):
    """Exact attention over the last ``window`` valid keys."""

    name = "recipe-window"
    window: int = 16

    def __post_init__(self):
        super().__post_init__()
        check_min(self, 1, "window")

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        keep = layout.recent(self.window)
        logits = grouped_scores(q, k, default_scale(q, scale)).masked_fill(~keep[:, None, None, :], float("-inf"))
        out, lse = attend_logits(logits, v, layout)
        H = q.shape[1]
        return AttentionResult(out, lse, per_head(keep, H), per_head(layout.valid(), H), 0.0)
'''


@pytest.fixture
def method_module(tmp_path, monkeypatch):
    """A folder added to the ``magicpig.methods`` package; yields a function that writes the toy method
    module there, imports the package's modules as the package does and returns the toy module. The toy
    leaves the registry, the package and ``sys.modules`` afterwards."""
    module_name = "magicpig.methods.recipe_window"
    monkeypatch.setattr(magicpig.methods, "__path__", [*magicpig.methods.__path__, str(tmp_path)])

    def load(register: bool):
        (tmp_path / "recipe_window.py").write_text(TOY_METHOD.format(register="register\n@" if register else ""))
        assert module_name in import_modules()
        return sys.modules[module_name]

    yield load
    registry.METHODS.pop("recipe-window", None)
    sys.modules.pop(module_name, None)
    if hasattr(magicpig.methods, "recipe_window"):
        delattr(magicpig.methods, "recipe_window")


def test_a_method_in_a_new_module_registers_parses_and_passes_the_matrix(method_module):
    module = method_module(register=True)
    assert registry.METHODS["recipe-window"] is module.RecentWindow
    method = parse_method("recipe-window:window=8")
    assert method.window == 8 and method.spec() == "recipe-window:window=8"
    run_matrix(method)
    with pytest.raises(ValueError, match="recipe-window: field 'window' must be >= 1, got 0"):
        parse_method("recipe-window:window=0")
    assert unregistered_methods([module]) == []


def test_a_method_class_without_register_is_caught(method_module):
    module = method_module(register=False)
    assert "recipe-window" not in registry.METHODS
    with pytest.raises(ValueError, match="unknown attention method 'recipe-window'"):
        parse_method("recipe-window")
    assert unregistered_methods([module]) == ["magicpig.methods.recipe_window.RecentWindow"]


def toy_figure(results, ref, path):
    """A figure of the recipe from one estimation table, 'no data' without it."""
    title = "Toy figure of the recipe"
    fig, axes = canvas.subplots(1, title)
    table = canvas.read(results / "estimation" / "spread_summary.csv")
    if table is None:
        return canvas.no_data_figure(fig, axes, "estimation/spread_summary.csv", path, title)
    axes[0].plot(range(len(table)), "o")
    return canvas.save(fig, path, title, [])


TOY_FIGURE = "recipe_toy.png"


@pytest.fixture
def wire_figure(monkeypatch):
    """Steps 2-4 of "Add a figure", each one a switch: the toy in ``PLOTS`` (so in ``FIGURES``), embedded in
    a report section, named by a paper item (Figure 2a's)."""

    def wire(section: bool = True, item: bool = True):
        monkeypatch.setitem(figures.PLOTS, TOY_FIGURE, toy_figure)
        monkeypatch.setattr(figures, "FIGURES", list(figures.PLOTS))
        if section:
            monkeypatch.setattr(sections_sweeps, "TOKEN_FIGURES", (*sections_sweeps.TOKEN_FIGURES, TOY_FIGURE))
        if item:
            monkeypatch.setattr(paper_items, "ITEMS", [
                dataclasses.replace(i, figures=(*i.figures, TOY_FIGURE)) if i.label == "Figure 2a" else i
                for i in paper_items.ITEMS])

    return wire


@pytest.mark.parametrize("tree", ["synthetic", "empty"])
def test_a_wired_figure_is_drawn_embedded_and_covered(tmp_path, wire_figure, tree):
    wire_figure()
    root = tmp_path / "results"
    synthetic_tree(root) if tree == "synthetic" else root.mkdir()
    report = build_report(root, tmp_path / "out", "t", CPU_CONFIG).read_text()
    assert (tmp_path / "out" / TOY_FIGURE).stat().st_size > 1000
    body = report.split("## Coverage of the paper")[1].split("\n## ", 1)[1]
    assert f"![Toy figure of the recipe]({TOY_FIGURE})" in body  # embedded in its section
    row = coverage_rows(report)["Figure 2a"]
    assert f"[{TOY_FIGURE}]({TOY_FIGURE})" in row[2]
    if tree == "empty":
        assert f"`{TOY_FIGURE}` lacks `estimation/spread_summary.csv`" in row[3]
    registry_check()  # tests/test_coverage.py's check holds with the toy in


def test_a_figure_no_section_embeds_fails_the_report_check(tmp_path, wire_figure):
    wire_figure(section=False)
    with pytest.raises(AssertionError, match=TOY_FIGURE):
        embeds_check(tmp_path, "empty")


def test_a_figure_no_paper_item_names_fails_the_registry_check(wire_figure):
    wire_figure(item=False)
    with pytest.raises(AssertionError, match=TOY_FIGURE):
        registry_check()
