"""RULER (Hsieh et al., 2024): 13 synthetic long-context tasks, sized to a target token length.

``make_task(short, data_path=None, chat_template="tokenizer")`` builds one task by its short name
(``niah_single_1`` ... ``qa_2``).
"""
from __future__ import annotations

from magicpig_tasks.ruler.niah import CONFIGS as NIAH_CONFIGS

NIAH = tuple(NIAH_CONFIGS)
TASKS = NIAH + ("vt", "cwe", "fwe", "qa_1", "qa_2")
NON_QA = TASKS[:-2]


def make_task(short: str, data_path: str | None = None, chat_template: str = "tokenizer"):
    """``chat_template``: the prompt template, one of magicpig_tasks.common.CHAT_TEMPLATES."""
    if short in NIAH_CONFIGS:
        from magicpig_tasks.ruler.niah import NiahTask
        return NiahTask(short, chat_template)
    if short == "vt":
        from magicpig_tasks.ruler.vt import VariableTracking
        return VariableTracking(chat_template)
    if short == "cwe":
        from magicpig_tasks.ruler.cwe import CommonWords
        return CommonWords(chat_template)
    if short == "fwe":
        from magicpig_tasks.ruler.fwe import FrequentWords
        return FrequentWords(chat_template)
    if short in ("qa_1", "qa_2"):
        from magicpig_tasks.ruler.qa import QATask
        return QATask(short, data_path, chat_template)
    raise ValueError(f"unknown RULER task {short!r}; known: {', '.join(TASKS)}")
