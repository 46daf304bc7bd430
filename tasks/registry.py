"""Names of the accuracy tasks and groups, and ``get_task`` to build one.

Task names: ``ruler/<task>`` (13), ``longbench/<task>`` (6), ``gsm8k``. Groups expand to several tasks:
``ruler`` (all 13), ``ruler/synthetic`` (the 11 without QA data), ``longbench`` (all 6).
"""
from __future__ import annotations

from .common import Task
from .longbench import TASKS as LONGBENCH
from .ruler import NON_QA, TASKS as RULER

TASK_NAMES: tuple[str, ...] = tuple(f"ruler/{t}" for t in RULER) + tuple(f"longbench/{t}" for t in LONGBENCH) \
    + ("gsm8k",)
GROUPS: dict[str, tuple[str, ...]] = {
    "ruler": tuple(f"ruler/{t}" for t in RULER),
    "ruler/synthetic": tuple(f"ruler/{t}" for t in NON_QA),
    "longbench": tuple(f"longbench/{t}" for t in LONGBENCH),
}
# tasks that read a data file (and so accept --data TASK=PATH)
DATA_TASKS = ("ruler/qa_1", "ruler/qa_2") + GROUPS["longbench"] + ("gsm8k",)


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


def get_task(name: str, data_path: str | None = None) -> Task:
    """Build task ``name``; ``data_path`` is a local data file for the tasks in DATA_TASKS."""
    if name not in TASK_NAMES:
        raise ValueError(f"unknown task {name!r}; tasks: {', '.join(TASK_NAMES)}")
    if data_path is not None and name not in DATA_TASKS:
        raise ValueError(f"task {name!r} takes no data file (only {', '.join(DATA_TASKS)} do)")
    family, _, short = name.partition("/")
    if family == "ruler":
        from .ruler import make_task
        return make_task(short, data_path)
    if family == "longbench":
        from .longbench import LongBenchTask
        return LongBenchTask(short, data_path)
    from .gsm8k import GSM8KCoT
    return GSM8KCoT(data_path)
