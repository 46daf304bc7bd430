"""The ``magicpig`` command. Each sub-command lives in its own module of ``magicpig.harness.commands`` and
exposes ``register(subparsers)``; modules are discovered, so adding a command touches no other file.

Exit codes: 0 success, 1 a failed build / check or a failed write (a full disk: one line naming the file), 2 bad
input (one line ``magicpig CMD: error: ...``, no traceback), 130 Ctrl-C (one line)."""
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
    except OSError as exc:  # a full disk, a read-only folder, a quota: one line naming the file
        print(f"magicpig {args.command}: error: {os_error_text(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C: one line, no traceback (what was saved stays saved)
        print(getattr(exc, "summary", None) or f"magicpig {args.command}: interrupted", file=sys.stderr)
        return 130


def os_error_text(exc: OSError) -> str:
    """An OSError in words: what failed, on which file, and for a full disk or a quota what to do. Every
    result file is written whole or not at all (magicpig.atomic_io), so a rerun resumes."""
    import errno

    name = errno.errorcode.get(exc.errno or 0, "OSError")
    where = f" ({exc.filename})" if exc.filename else ""
    text = f"{exc.strerror or exc}{where} [{name}]"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        text += "; free some space and rerun: what was saved stays saved, the run resumes from it"
    elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        text += "; give the run a folder it may write to"
    return text


if __name__ == "__main__":
    sys.exit(main())
