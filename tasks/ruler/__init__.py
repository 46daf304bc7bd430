"""RULER (Hsieh et al., 2024): 13 synthetic long-context tasks, sized to a target token length.

``make_task(short, data_path=None)`` builds one task by its short name (``niah_single_1`` ... ``qa_2``).
"""
from __future__ import annotations

from .niah import CONFIGS as NIAH_CONFIGS

NIAH = tuple(NIAH_CONFIGS)
TASKS = NIAH + ("vt", "cwe", "fwe", "qa_1", "qa_2")
NON_QA = TASKS[:-2]


def make_task(short: str, data_path: str | None = None):
    if short in NIAH_CONFIGS:
        from .niah import NiahTask
        return NiahTask(short)
    if short == "vt":
        from .vt import VariableTracking
        return VariableTracking()
    if short == "cwe":
        from .cwe import CommonWords
        return CommonWords()
    if short == "fwe":
        from .fwe import FrequentWords
        return FrequentWords()
    if short in ("qa_1", "qa_2"):
        from .qa import QATask
        return QATask(short, data_path)
    raise ValueError(f"unknown RULER task {short!r}; known: {', '.join(TASKS)}")
