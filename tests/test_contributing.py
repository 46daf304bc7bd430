"""The recipes of CONTRIBUTING.md, followed: a toy attention method in a new module of ``magicpig/methods/``,
a toy figure wired into the report's registries and a toy benchmark family registered in
``magicpig.harness.families`` are picked up, and leaving out a step is caught."""
import dataclasses
import sys
from pathlib import Path

import pytest
import yaml
from test_coverage import CPU_CONFIG, coverage_rows
from test_coverage import test_registry_declares_every_figure_and_only_figures_of_the_list as registry_check
from test_methods import run_matrix, unregistered_methods
from test_report_figures import synthetic_tree, write_run
from test_report_figures import test_report_embeds_every_figure as embeds_check
from test_report_sections import test_sections_list_registered_items_and_every_figure_once as sections_check

import magicpig.methods
from magicpig.harness import families
from magicpig.harness.pipeline_config import validate_pipeline_config
from magicpig.harness.report import build, build_report, canvas, figures, paper_items, sections
from magicpig.harness.results_tree import read_table
from magicpig.methods import import_modules, parse_method, registry

ROOT = Path(__file__).resolve().parents[1]

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
    table = read_table(results / "estimation" / "spread_summary.csv")
    if table is None:
        return canvas.no_data_figure(fig, axes, "estimation/spread_summary.csv", path, title)
    axes[0].plot(range(len(table)), "o")
    return canvas.save(fig, path, title)


TOY_FIGURE = "recipe_toy.png"
TOKEN_SECTION = "Attention per key and per token"  # the section the toy figure goes in


@pytest.fixture
def wire_figure(monkeypatch):
    """Steps 2-4 of "Add a figure", each one a switch: the toy in ``PLOTS`` (so in ``FIGURES``), embedded in
    a report section (and named in its entry of ``sections.SECTIONS``), named by a paper item (Figure 2a's)."""

    def wire(section: bool = True, item: bool = True):
        monkeypatch.setitem(figures.PLOTS, TOY_FIGURE, toy_figure)
        monkeypatch.setattr(figures, "FIGURES", list(figures.PLOTS))
        if section:
            monkeypatch.setattr(build, "TOKEN_FIGURES", (*build.TOKEN_FIGURES, TOY_FIGURE))
            monkeypatch.setattr(sections, "SECTIONS", [
                dataclasses.replace(s, figures=(*s.figures, TOY_FIGURE)) if s.title.startswith(TOKEN_SECTION) else s
                for s in sections.SECTIONS])
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
    sections_check()  # and tests/test_report_sections.py's


def test_a_figure_no_section_embeds_fails_the_report_check(tmp_path, wire_figure):
    wire_figure(section=False)
    with pytest.raises(AssertionError, match=TOY_FIGURE):
        embeds_check(tmp_path, "empty")


def test_a_figure_no_paper_item_names_fails_the_registry_check(wire_figure):
    wire_figure(item=False)
    with pytest.raises(AssertionError, match=TOY_FIGURE):
        registry_check()


# ---- "Add a benchmark family": a toy family, registered as the recipe says, end to end ----------------------

TOY_FAMILY = families.BenchmarkFamily(
    "toy", "toy/{task}", families.record_block(families.task_enum("echo", "count"),
                                               families.max_length(2048, "prompt cap"), "Table 99"),
    "toy_table99", heading="Toy benchmark (recipe, paper Table 99)", items=("Table 99",))
TOY_BLOCK = {"tasks": ["echo"], "samples": 2, "methods": ["dense", "magicpig"]}


@pytest.fixture
def toy_family(monkeypatch):
    """Steps 2 and 3 of "Add a benchmark family": the family in ``families.FAMILIES`` and its paper item (with
    the family's coverage check) in ``paper_items.ITEMS``."""
    monkeypatch.setitem(families.FAMILIES, TOY_FAMILY.block, TOY_FAMILY)
    monkeypatch.setattr(paper_items, "ITEMS", (*paper_items.ITEMS, paper_items.PaperItem(
        "Table 99", "toy accuracy of the recipe", None, check=paper_items.benchmark("toy"))))


def smoke_with_toy(block: dict) -> dict:
    config = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    config["presets"]["smoke"]["toy"] = block
    return config


def job_table(preset: dict) -> dict:
    """The eval rules of ``preset`` by name: ``eval_rules`` of workflow/rules/common.smk (plain Python, whose
    helpers read the workflow's globals only when a job runs)."""
    namespace = {"__name__": "common_smk"}
    exec(compile((ROOT / "workflow" / "rules" / "common.smk").read_text(), "common.smk", "exec"), namespace)
    return {rule.name: rule for rule in namespace["eval_rules"](preset, "res")}


def test_a_family_block_is_refused_until_the_family_is_registered():
    with pytest.raises(ValueError, match=r"presets\.smoke: Additional properties are not allowed \('toy'"):
        validate_pipeline_config(smoke_with_toy(TOY_BLOCK), warn=lambda m: None)


def test_a_registered_family_has_its_block_checked_and_its_jobs(toy_family):
    preset = validate_pipeline_config(smoke_with_toy(TOY_BLOCK), warn=lambda m: None)["presets"]["smoke"]
    assert preset["toy"] == {**TOY_BLOCK, "max_length": 2048}  # the family's default filled in
    for bad, problem in [({"tasks": ["nope"]}, "presets.smoke.toy.tasks[0]: 'nope' is not one of ['echo', 'count']"),
                         ({"methods": ["magicpig:K=0"]}, "presets.smoke.toy.methods[0]: "),
                         ({"extra": 1}, "presets.smoke.toy: Additional properties are not allowed ('extra'")]:
        with pytest.raises(ValueError) as info:
            validate_pipeline_config(smoke_with_toy({**TOY_BLOCK, **bad}), warn=lambda m: None)
        assert problem in str(info.value), str(info.value)
    rule = job_table(preset)["eval_toy"]
    assert (rule.tasks, rule.length, rule.methods, rule.samples, rule.jobs, rule.log, rule.runtime) == (
        ["toy/{task}"], 2048, ["dense", "magicpig"], 2, [{"task": "echo"}], "eval_toy_{task}", 2880)
    assert "res/accuracy/toy/echo/2048/dense/metrics.json" in rule.targets()
    assert "eval_toy" not in job_table({**preset, "toy": {**preset["toy"], "samples": 0}})  # 0 samples: no jobs


def test_a_registered_family_has_its_report_section_and_coverage_row(tmp_path, toy_family):
    root = tmp_path / "results"
    synthetic_tree(root)
    for method, scores in (("dense", [100, 100]), ("magicpig", [100, 0])):
        write_run(root / "accuracy", "toy/echo", 2048, method, scores, 1.0 if method == "dense" else 0.03)
    report = build_report(root, tmp_path / "out", "t", {**CPU_CONFIG, "toy": TOY_BLOCK}).read_text()
    section = report.split(f"\n## {TOY_FAMILY.heading}\n")[1].split("\n## ")[0]
    assert "| method | ours echo | ours avg | cost2 |" in section
    assert "| `dense` | 100 " in section and "| `magicpig` | 50" in section, section
    # after the last section of a family (Table 6's), before the ablations
    assert report.index("## infini_igsm reasoning") < report.index(f"## {TOY_FAMILY.heading}") < \
        report.index("## Ablations")
    label, shows, where, status = coverage_rows(report)["Table 99"]
    assert where == "[§ Toy benchmark (recipe, paper Table 99)](#toy-benchmark-recipe-paper-table-99)"
    assert status.startswith("partial: on `smollm2`"), status  # ran; on another model than the paper's
    no_block = build_report(root, tmp_path / "out2", "t", CPU_CONFIG).read_text()
    assert coverage_rows(no_block)["Table 99"][3].startswith("not run in this preset"), coverage_rows(no_block)
