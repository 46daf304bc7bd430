"""Names of the accuracy tasks and groups, and ``get_task`` to build one.

Task names: ``ruler/<task>`` (13), ``longbench/<task>`` (6), ``gsm8k``, ``coqa``, ``mmlu_cot`` (the paper's
Table 1), ``infini_igsm/<set>_op<N>`` (6, Table 6). Groups expand to several tasks: ``ruler`` (all 13),
``ruler/synthetic`` (the 11 without QA data), ``longbench`` (all 6), ``lm_eval`` (Table 1's three),
``infini_igsm`` (all 6).
"""
from __future__ import annotations

from magicpig_tasks.common import CHAT_TEMPLATES, Task, check_chat_template
from magicpig_tasks.infini_igsm import TASKS as INFINI_IGSM
from magicpig_tasks.longbench import SPECS as LONGBENCH_SPECS, TASKS as LONGBENCH
from magicpig_tasks.ruler import NON_QA, TASKS as RULER

TASK_NAMES: tuple[str, ...] = tuple(f"ruler/{t}" for t in RULER) + tuple(f"longbench/{t}" for t in LONGBENCH) \
    + ("gsm8k", "coqa", "mmlu_cot") + tuple(f"infini_igsm/{t}" for t in INFINI_IGSM)
GROUPS: dict[str, tuple[str, ...]] = {
    "ruler": tuple(f"ruler/{t}" for t in RULER),
    "ruler/synthetic": tuple(f"ruler/{t}" for t in NON_QA),
    "longbench": tuple(f"longbench/{t}" for t in LONGBENCH),
    "lm_eval": ("gsm8k", "coqa", "mmlu_cot"),
    "infini_igsm": tuple(f"infini_igsm/{t}" for t in INFINI_IGSM),
}
# tasks that read a data file (and so accept --data TASK=PATH)
DATA_TASKS = ("ruler/qa_1", "ruler/qa_2") + GROUPS["longbench"] + GROUPS["lm_eval"] + GROUPS["infini_igsm"]
# the prompt settings get_task takes (``magicpig eval`` option, default, what it changes)
TASK_SETTINGS = {
    "chat_template": ("--chat-template", "tokenizer",
                      "prompt template of ruler/*, infini_igsm/* and "
                      + ", ".join(f"longbench/{t}" for t, spec in LONGBENCH_SPECS.items() if spec.chat)
                      + f": {', '.join(CHAT_TEMPLATES)}"),
    "gsm8k_add_bos": ("--gsm8k-add-bos", False, "GSM8K prompts start with the tokenizer's BOS token"),
}


def expand(names: list[str] | tuple[str, ...] | str) -> list[str]:
    """Task and group names (a string or a list of strings, each possibly a ',' or ';' separated list) ->
    task names, in order, no duplicates; unknown names raise ValueError listing the known ones."""
    if isinstance(names, str):
        names = [names]
    out: list[str] = []
    for raw in (part for item in names for part in item.replace(";", ",").split(",")):
        name = raw.strip()
        if not name:
            continue
        if name in GROUPS:
            items = GROUPS[name]
        elif name in TASK_NAMES:
            items = (name,)
        else:
            raise ValueError(f"unknown task {name!r}; tasks: {', '.join(TASK_NAMES)}; "
                             f"groups: {', '.join(GROUPS)}")
        out.extend(i for i in items if i not in out)
    if not out:
        raise ValueError("no task given")
    return out


def get_task(name: str, data_path: str | None = None, *, chat_template: str = "tokenizer",
             gsm8k_add_bos: bool = False) -> Task:
    """Build task ``name``; ``data_path`` is a local data file for the tasks in DATA_TASKS.

    ``chat_template`` (one of magicpig_tasks.common.CHAT_TEMPLATES): the prompt template of the RULER tasks, of
    the LongBench tasks that take one and of infini_igsm (GSM8K, CoQA and MMLU-CoT take none). ``gsm8k_add_bos``: GSM8K prompts start with the
    tokenizer's BOS (off: lm-eval's default of the paper's era). Both show in the task's ``describe()``."""
    check_chat_template(chat_template)
    if name not in TASK_NAMES:
        raise ValueError(f"unknown task {name!r}; tasks: {', '.join(TASK_NAMES)}")
    if data_path is not None and name not in DATA_TASKS:
        raise ValueError(f"task {name!r} takes no data file (only {', '.join(DATA_TASKS)} do)")
    family, _, short = name.partition("/")
    if family == "ruler":
        from magicpig_tasks.ruler import make_task
        return make_task(short, data_path, chat_template)
    if family == "longbench":
        from magicpig_tasks.longbench import LongBenchTask
        return LongBenchTask(short, data_path, chat_template)
    if family == "infini_igsm":
        from magicpig_tasks.infini_igsm import InfiniIGSM
        return InfiniIGSM(short, data_path, chat_template)
    if name == "coqa":
        from magicpig_tasks.coqa import CoQA
        return CoQA(data_path)
    if name == "mmlu_cot":
        from magicpig_tasks.mmlu import MMLUCoT
        return MMLUCoT(data_path)
    from magicpig_tasks.gsm8k import GSM8KCoT
    return GSM8KCoT(data_path, add_bos=gsm8k_add_bos)
