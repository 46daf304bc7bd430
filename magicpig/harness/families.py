"""The benchmark families, each declared once: a set of accuracy tasks that a preset runs under one block of
its own (``ruler``, ``longbench``, ``gsm8k``, ``lm_eval``, ``reasoning``).

A ``BenchmarkFamily`` holds what the pipeline and the report need of it: the JSON schema of its block (its keys
and their defaults; ``pipeline_config.load_schema`` puts it into the pipeline config's schema), the task a job of
its eval rule runs (its prefix selects the family's results), how its jobs are laid out (the job table,
``eval_rules`` of workflow/rules/common.smk), its table in ``config/paper_reference.yaml`` (the report's
section and the coverage check of its paper item, ``paper_items.benchmark``) and, for a family without a
report section of its own, the heading of the generic one. The report's sections (``report.sections``) and the
paper's items (``report.paper_items``) name a family by its block.

This module stays free of heavy imports: the Snakefile reads it when it loads.
"""
from __future__ import annotations

from dataclasses import dataclass

METHODS = {"$ref": "#/$defs/methods"}
RECORD_SAMPLES = {"$ref": "#/$defs/record_samples"}
LENGTHS = {"type": "array", "items": {"type": "integer", "minimum": 256, "maximum": 1048576}, "minItems": 1,
           "uniqueItems": True}


def max_length(default: int, description: str, maximum: int | None = 1048576) -> dict:
    """The schema of a record-based block's ``max_length``: its prompt cap, with its default."""
    bound = {"maximum": maximum} if maximum else {}
    return {"type": "integer", "minimum": 256, **bound, "default": default, "description": description}


def task_enum(*names: str) -> dict:
    """The schema of a block's ``tasks``: a list of the family's task names (less its prefix)."""
    return {"type": "array", "uniqueItems": True, "items": {"enum": list(names)}}


def record_block(tasks: dict | None, max_len: dict, table: str, description: str = "") -> dict:
    """The schema of a block of record-based tasks: ``tasks`` (None: the family is one task), ``samples``,
    ``max_length`` and ``methods`` (the settings of the paper's ``table``); unknown keys rejected."""
    props = {**({"tasks": tasks} if tasks else {}), "samples": RECORD_SAMPLES, "max_length": max_len,
             "methods": {**METHODS, "description": f"paper {table} settings"}}
    return {"type": "object", **({"description": description} if description else {}),
            "required": [*(["tasks"] if tasks else []), "samples", "methods"], "additionalProperties": False,
            "properties": props}


@dataclass(frozen=True)
class BenchmarkFamily:
    """One benchmark family. Its eval rule is ``eval_<block>``; each job runs ``task`` (``{task}`` stands for
    each of the block's ``tasks``: one job per task; without it, one job) with the block's ``methods`` and
    ``samples``, at the block's ``max_length`` (a prompt cap), or with ``per_length`` at each of its ``lengths``
    (generated prompts: RULER)."""

    block: str  # its block of a preset
    task: str
    schema: dict  # the JSON schema of its block
    table_key: str  # its table in config/paper_reference.yaml
    optional: bool = True  # a preset may leave its block out (then it runs nothing)
    per_length: bool = False
    runtime: int = 2880  # minutes a job asks a cluster for, for a model other than SmolLM2
    # the heading of its report section and the labels of the paper items it holds, for a family that the
    # report's generic accuracy table shows (report.paper_tables.family_section); a family with a section of its
    # own (a report.sections entry naming it) leaves them empty
    heading: str = ""
    items: tuple[str, ...] = ()

    @property
    def prefix(self) -> str:
        """What the names of its tasks start with (``longbench/``; ``gsm8k`` for a one-task family); the report
        and the coverage checks select the family's results by it."""
        return self.task.split("{task}")[0]

    @property
    def rule(self) -> str:
        return f"eval_{self.block}"

    @property
    def log(self) -> str:
        """A job's log file name less .log, with the job's wildcards."""
        return "eval_" + self.task.replace("/", "_") + ("_{length}" if self.per_length else "")

    def task_names(self, block: dict) -> list[str]:
        """The tasks a preset's block of this family runs."""
        if "{task}" not in self.task:
            return [self.task]
        return [self.task.format(task=t) for t in block["tasks"]]


RULER = BenchmarkFamily("ruler", "ruler/{task}", {
    "type": "object", "required": ["tasks", "lengths", "samples", "methods"], "additionalProperties": False,
    "properties": {
        "tasks": {"type": "array", "items": {"$ref": "#/$defs/name"}, "uniqueItems": True},
        "lengths": {**LENGTHS, "description": "the first one is also the ablations' length"},
        "samples": {"type": "integer", "minimum": 0, "maximum": 10000,
                    "description": "generated samples per task and length (0: skip; at most magicpig eval's 10000)"},
        "task_samples": {
            "type": "object", "default": {}, "propertyNames": {"$ref": "#/$defs/name"},
            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 10000},
            "description": "samples of some of `tasks` instead of `samples`, at every length (a graded task whose "
                           "claim needs more pairs than the others). Sample i is the same prompt whatever the count, "
                           "so raising a count adds fresh samples to a finished run and reruns only those"},
        "methods": {**METHODS, "description": "paper Table 3 settings"},
        "length_methods": {
            "type": "array", "default": [],
            "description": "settings run at some lengths only, beside `methods` (the paper reports them at one or "
                           "a few lengths: Tables 10-13); each length's job decodes `methods` and the entries naming "
                           "that length from one prefill per sample. Every length must be one of `lengths`",
            "items": {"type": "object", "required": ["lengths", "methods"], "additionalProperties": False,
                      "properties": {"lengths": LENGTHS, "methods": METHODS}}}}},
    "ruler_table3", optional=False, per_length=True, runtime=1440)
LONGBENCH = BenchmarkFamily("longbench", "longbench/{task}", record_block(
    task_enum("qasper", "repobench-p", "lcc", "passage_retrieval_en", "trec", "triviaqa"),
    max_length(7680, "prompt cap (middle truncation)"), "Table 2"), "longbench_table2", optional=False)
GSM8K = BenchmarkFamily("gsm8k", "gsm8k", record_block(None, max_length(4096, "prompt cap (8-shot prompt)"), "Table 1"),
                        "lm_eval_table1", optional=False)
LM_EVAL = BenchmarkFamily("lm_eval", "{task}", record_block(
    task_enum("coqa", "mmlu_cot"), max_length(4096, "prompt cap (few-shot prompts)", maximum=None), "Table 1",
    "paper Table 1 beyond GSM8K-CoT (which the `gsm8k` block runs): CoQA and MMLU-CoT with lm-eval's protocols; "
    "absent: not run"), "lm_eval_table1")
REASONING = BenchmarkFamily("reasoning", "infini_igsm/{task}", record_block(
    task_enum("4k_close_op2", "4k_close_op4", "4k_close_op5", "8k_close_op2", "8k_close_op4", "8k_close_op5"),
    max_length(16384, "prompt cap", maximum=None), "Table 6",
    "paper Table 6: infini_igsm reasoning sets (hub data); absent: not run"), "infini_igsm_table6")

# every family by its block, in the job table's order; read at call time, so a family added here (or by a test)
# is in the schema, the job table and the report
FAMILIES: dict[str, BenchmarkFamily] = {f.block: f for f in (RULER, LONGBENCH, GSM8K, LM_EVAL, REASONING)}
