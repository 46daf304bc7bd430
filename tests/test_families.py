"""The benchmark families are declared once (magicpig.harness.families): the pipeline config's schema holds
each family's block, the job table a rule per family, the report a section per family, and each family's
tasks and paper table exist."""
import yaml
from test_contributing import ROOT, job_table

from magicpig.harness.families import FAMILIES
from magicpig.harness.pipeline_config import load_schema, validate_pipeline_config
from magicpig.harness.results_tree import load_reference
from magicpig.harness.report.sections import report_sections
from magicpig.harness.result_files import EVAL_RULE_NAMES
from magicpig_tasks.registry import TASK_NAMES


def test_each_family_block_is_in_the_schema_and_required_unless_optional():
    preset = load_schema()["properties"]["presets"]["additionalProperties"]
    for family in FAMILIES.values():
        assert preset["properties"][family.block] == family.schema, family.block
        assert (family.block in preset["required"]) == (not family.optional), family.block
    assert {"ruler", "longbench", "gsm8k"} <= set(preset["required"])


def test_each_family_runs_registered_tasks_and_has_its_paper_table():
    ref = load_reference()
    for family in FAMILIES.values():
        tasks = family.schema["properties"].get("tasks", {}).get("items", {}).get("enum")
        names = family.task_names({"tasks": tasks}) if tasks else [family.task] if "{task}" not in family.task else []
        assert all(name in TASK_NAMES for name in names), (family.block, names)
        assert any(name.startswith(family.prefix) for name in TASK_NAMES), family.block
        assert family.table_key in ref, family.block
        assert family.rule in EVAL_RULE_NAMES


def test_each_family_has_one_rule_of_the_job_table_and_a_report_section():
    config = validate_pipeline_config(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()) |
                                      {"preset": "paper"}, warn=lambda m: None)
    rules = job_table(config["presets"]["paper"])
    shown = [block for section in report_sections() for block in section.families]
    for family in FAMILIES.values():
        assert family.rule in rules, family.block
        assert rules[family.rule].log == family.log and rules[family.rule].tasks == [family.task]
        assert family.block in shown, family.block
