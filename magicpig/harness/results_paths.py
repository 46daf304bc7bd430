"""Where ``magicpig eval`` writes its results: the one definition, read by the evaluator and by the pipeline's
rules (which name these files as their outputs).

    OUT/<task>/<length>/                 one (task, length) of a run (its lock)
    OUT/<task>/<length>/<method dir>/    predictions.jsonl, settings.json and metrics.json of one method

``<task>`` keeps its slash (``ruler/cwe`` is two folders); ``<method dir>`` is the spec made filesystem-safe by
``method_dirname`` (magicpig.methods.spec_names). The pipeline passes Snakemake wildcards for ``task`` and
``length`` (``"ruler/{task}"``, ``"{length}"``) to name a rule's output patterns.
"""
from __future__ import annotations

from pathlib import Path

from magicpig.harness.result_files import METRICS
from magicpig.methods.registry import ParsedSpec
from magicpig.methods.spec_names import method_dirname


def unit_dir(out: str | Path, task: str, length: int | str) -> Path:
    """The folder of one (task, length) of a run writing to ``out``."""
    return Path(out) / task / str(length)


def method_dir(out: str | Path, task: str, length: int | str, spec: str | ParsedSpec) -> Path:
    """The folder of method ``spec`` (as written, or parsed once by the caller) at one (task, length)."""
    return unit_dir(out, task, length) / method_dirname(spec)


def metrics_file(out: str | Path, task: str, length: int | str, spec: str) -> Path:
    """The metrics.json of method ``spec`` at one (task, length)."""
    return method_dir(out, task, length, spec) / METRICS.name
