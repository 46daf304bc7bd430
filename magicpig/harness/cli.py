"""The ``magicpig`` command. Each sub-command lives in its own module of ``magicpig.harness.commands`` and
exposes ``register(subparsers)``; modules are discovered, so adding a command touches no other file.

Exit codes: 0 success, 1 a failed build / check, 2 bad input (one line ``magicpig CMD: error: ...``, no
traceback), 130 Ctrl-C (one line)."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from magicpig.cpu.env import check_env
from magicpig.harness import commands
from magicpig.pidlock import LockHeld


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="magicpig", description="MagicPIG reproduction suite")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        check_env()  # MAGICPIG_THREADS / MAGICPIG_ISA, before any command loads a model
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, LockHeld) as exc:
        print(f"magicpig {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C: one line, no traceback (what was saved stays saved)
        print(getattr(exc, "summary", None) or f"magicpig {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
