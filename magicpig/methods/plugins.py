"""Attention methods from outside this package: a user's module registers its own ``@register`` dataclasses.

Two ways to name such a module, honoured by ``magicpig eval --methods-module``, the pipeline's config check
(the ``methods_module`` key of ``config/config.yaml``) and the report:

- a ``.py`` file (``my_methods.py``, ``/home/me/methods.py``) or an importable module name
  (``mylab.methods``), given explicitly;
- an installed package's entry point in the group ``magicpig.methods`` (``[project.entry-points."magicpig.methods"]
  mine = "mylab.methods"`` in its pyproject.toml), loaded whenever :func:`load_methods` runs.

Loading is idempotent: a module already imported is not imported again (its methods would be registered twice).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

ENTRY_POINT_GROUP = "magicpig.methods"


def _import_file(path: Path):
    """Import a .py file under a module name derived from its absolute path (one module per file)."""
    path = path.resolve()
    name = f"magicpig_user_methods_{path.stem}_{hashlib.blake2b(str(path).encode(), digest_size=6).hexdigest()}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_methods_module(ref: str, field: str = "methods_module"):
    """Import one user module (a .py path or a module name); errors name ``field`` and the module."""
    path = Path(ref).expanduser()
    try:
        if ref.endswith(".py") or path.is_file():
            if not path.is_file():
                raise FileNotFoundError(f"{field}: {ref!r} does not exist")
            return _import_file(path)
        return importlib.import_module(ref)
    except FileNotFoundError:
        raise
    except ModuleNotFoundError as exc:
        raise ValueError(f"{field}: cannot import {ref!r} ({exc}); give a .py file or an importable module") from None
    except ValueError as exc:  # e.g. a method name registered twice
        raise ValueError(f"{field}: {ref!r}: {exc}") from None


def load_methods(modules: list[str] | tuple[str, ...] = (), field: str = "methods_module") -> list[str]:
    """Import every entry point of the ``magicpig.methods`` group, then each of ``modules``; returns the names
    of what was loaded (entry points as ``entry-point:NAME``)."""
    loaded = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.module not in sys.modules:
            try:
                ep.load()
            except Exception as exc:
                raise ValueError(f"entry point {ep.name!r} of group {ENTRY_POINT_GROUP!r} ({ep.value}): "
                                 f"{exc}") from None
        loaded.append(f"entry-point:{ep.name}")
    for i, ref in enumerate(modules):
        load_methods_module(ref, f"{field}[{i}]" if len(modules) > 1 else field)
        loaded.append(ref)
    return loaded
