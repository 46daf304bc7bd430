"""``magicpig tasks``: list the accuracy tasks and task groups that ``magicpig eval --task`` accepts."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("tasks", help="list benchmark task names (for magicpig eval --task)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from magicpig_tasks.registry import DATA_TASKS, GROUPS, TASK_NAMES, TASK_SETTINGS

    if args.json:
        print(json.dumps({"tasks": list(TASK_NAMES), "groups": {k: list(v) for k, v in GROUPS.items()},
                          "data_tasks": list(DATA_TASKS),
                          "settings": {k: {"option": o, "default": d, "help": h}
                                       for k, (o, d, h) in TASK_SETTINGS.items()}}, indent=2))
        return 0
    for name in TASK_NAMES:
        print(name + ("    (data file: downloaded, or --data TASK=PATH)" if name in DATA_TASKS else ""))
    print()
    for group, members in GROUPS.items():
        print(f"group {group}: {len(members)} tasks")
    print()
    for name, (option, default, text) in TASK_SETTINGS.items():
        print(f"setting {name} (magicpig eval {option}, default {default}): {text}")
    return 0
