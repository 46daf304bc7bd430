"""``magicpig methods``: list the registered attention methods and their fields."""
from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("methods", help="list attention methods and their hyperparameters")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from magicpig.methods import METHODS, method_fields

    table = {name: [{"field": f, "type": t, "default": d} for f, t, d in method_fields(name)]
             for name in sorted(METHODS)}
    if args.json:
        print(json.dumps(table, indent=2, default=str))
        return 0
    for name, fields in table.items():
        doc = " ".join((METHODS[name].__doc__ or "").strip().split("\n\n")[0].split())
        print(f"{name}: {doc.split('. ')[0].rstrip('.')}.")
        for f in fields:
            print(f"    {f['field']:<18} {f['type']:<34} default {f['default']}")
    return 0
