"""``magicpig doctor [--preset NAME]``: check the machine, the CPU module, the models and the task data a preset
needs before a long run, and say what it will run and skip (``magicpig.harness.doctor``). Exit code 1 when the
preset cannot run at all (its config does not validate, its model is missing, or every task is skipped)."""
from __future__ import annotations

from magicpig.harness.commands import add_preset_options


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check the set-up a preset needs; say what it will run and skip",
                       description="Machine, CPU module, models, task data, GPU; then what the preset runs and "
                                   "skips. Loads no model.")
    add_preset_options(p)
    p.add_argument("--results", default=None, help="the preset's results folder, for its measured job times "
                                                    "(default results/<preset>)")
    p.add_argument("--no-build", action="store_true",
                   help="do not build and self-check the CPU module (its first build takes minutes)")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from magicpig.harness.doctor import FAIL, diagnose, render

    name, findings, summary = diagnose(Path(args.config), args.preset, build=not args.no_build,
                                     results=Path(args.results) if args.results else None)
    print(render(name, findings, summary), end="")
    return 1 if any(f.status == FAIL for f in findings) else 0
