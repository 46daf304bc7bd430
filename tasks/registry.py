"""The accuracy tasks by name: ``get_task`` builds one, ``expand`` resolves task and group names.

Every task class registers itself (``@register``, ``magicpig_tasks.common``) under its ``names``; the
package's ``__init__`` imports the built-in task modules, so their tasks are known, in its order. Built in:
``ruler/<task>`` (13), ``longbench/<task>`` (6), ``gsm8k``, ``coqa``, ``mmlu_cot`` (the paper's Table 1),
``infini_igsm/<set>_op<N>`` (6, Table 6). A group is every task that names it in its ``groups``: ``ruler``,
``ruler/synthetic`` (RULER without its QA data), ``longbench``, ``lm_eval``, ``infini_igsm``.

``TASK_NAMES``, ``GROUPS`` and ``DATA_TASKS`` (the tasks that read a data file, ``--data TASK=PATH``) are
computed from the registered classes when read, so a task registered later (a user's module) is in them.
"""
from __future__ import annotations

from typing import Any, Mapping

from magicpig_tasks.common import TASKS, Task, register
from magicpig_tasks.records import RecordsTask
from magicpig_tasks.settings import task_settings

__all__ = ["TASKS", "Task", "register", "task_names", "groups", "data_tasks", "expand", "get_task"]


def task_names() -> tuple[str, ...]:
    """Every registered task name, in registration order."""
    return tuple(TASKS)


def groups() -> dict[str, tuple[str, ...]]:
    """Group name -> its tasks, in registration order (groups in order of first appearance)."""
    out: dict[str, list[str]] = {}
    for name, cls in TASKS.items():
        for group in cls.groups:
            out.setdefault(group, []).append(name)
    return {group: tuple(names) for group, names in out.items()}


def data_tasks() -> tuple[str, ...]:
    """The tasks that read a data file (and so accept ``--data TASK=PATH``)."""
    return tuple(name for name, cls in TASKS.items() if issubclass(cls, RecordsTask))


_COMPUTED = {"TASK_NAMES": task_names, "GROUPS": groups, "DATA_TASKS": data_tasks}


def __getattr__(name: str) -> Any:
    if name in _COMPUTED:
        return _COMPUTED[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def expand(names: list[str] | tuple[str, ...] | str) -> list[str]:
    """Task and group names (a string or a list of strings, each possibly a ',' or ';' separated list) ->
    task names, in order, no duplicates; unknown names raise ValueError listing the known ones."""
    if isinstance(names, str):
        names = [names]
    known_groups = groups()
    out: list[str] = []
    for raw in (part for item in names for part in item.replace(";", ",").split(",")):
        name = raw.strip()
        if not name:
            continue
        if name in known_groups:
            items = known_groups[name]
        elif name in TASKS:
            items = (name,)
        else:
            raise ValueError(f"unknown task {name!r}; tasks: {', '.join(TASKS)}; groups: {', '.join(known_groups)}")
        out.extend(i for i in items if i not in out)
    if not out:
        raise ValueError("no task given")
    return out


def get_task(name: str, data_path: str | None = None, settings: Mapping[str, Any] | None = None) -> Task:
    """Build task ``name``. ``data_path``: a local data file, for the tasks in ``DATA_TASKS``; ``settings``:
    task settings (``magicpig_tasks.settings``), the others at their defaults. Each task applies the ones it
    reads and shows them in its ``describe()``."""
    settings = task_settings(settings)
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; tasks: {', '.join(TASKS)}")
    cls = TASKS[name]
    if data_path is None:
        return cls(name, settings)
    if not issubclass(cls, RecordsTask):
        raise ValueError(f"task {name!r} takes no data file (only {', '.join(data_tasks())} do)")
    return cls(name, settings, data_path)
