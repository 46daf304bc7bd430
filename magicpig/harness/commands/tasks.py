"""``magicpig tasks``: list the accuracy tasks, task groups and task settings that ``magicpig eval`` accepts."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("tasks", help="list benchmark task names (for magicpig eval --task)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from magicpig_tasks.registry import data_tasks, groups, task_names
    from magicpig_tasks.settings import SETTINGS

    if args.json:
        print(json.dumps({"tasks": list(task_names()), "groups": {k: list(v) for k, v in groups().items()},
                          "data_tasks": list(data_tasks()),
                          "settings": {name: {"option": s.option, "default": s.default, "help": s.help,
                                              "choices": list(s.choices)} for name, s in SETTINGS.items()}},
                         indent=2))
        return 0
    with_data = set(data_tasks())
    for name in task_names():
        print(name + ("    (data file: downloaded, or --data TASK=PATH)" if name in with_data else ""))
    print()
    for group, members in groups().items():
        print(f"group {group}: {len(members)} tasks")
    print()
    for name, s in SETTINGS.items():
        choices = f"; one of {', '.join(s.choices)}" if s.choices else ""
        print(f"setting {name} (magicpig eval {s.option}, default {s.default}{choices}): {s.help}")
    return 0
