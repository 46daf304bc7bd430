"""The one grammar of names that become a path or reach a shell: preset names (and the keys of ``presets``),
task names (each ``/``-separated part) and method folder names.

A name is non-empty, made of ASCII letters, digits, ``-``, ``_`` and ``.``, and starts with neither ``.`` nor
``-``: so it can be neither ``..`` nor a hidden file nor read as a command-line option, holds no ``/`` (no path
of its own), and holds nothing a shell
reads specially (``$``, backticks, quotes, ``;``, spaces). A method's folder name starts with its method's
name and adds only ``@ + ~`` (``FOLDER_PATTERN``). The pipeline's schema carries the same pattern
(``$defs.name`` of ``magicpig/data/pipeline_config.schema.yaml``; ``tests/test_hostile_inputs.py`` holds the
two equal).
"""
from __future__ import annotations

import re

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]*$"
TASK_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$"
# a method's folder (magicpig.methods.spec_names.method_dirname): its method's name, then the spec's fields
# written with '@' for ':', '+' for ',', '-' for '=', and '~' before a hash; a shell reads none of them
# specially inside a word
FOLDER_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._+@~-]*$"
NAME_RULE = "letters, digits, '-', '_' and '.' ('.' and '-' not first), non-empty"
_NAME = re.compile(NAME_PATTERN)
MAX_NAME = 200  # characters: a name is one path component (file systems allow 255 bytes)


def name_problem(value: object) -> str:
    """Why ``value`` is not a name (empty string when it is one)."""
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    if len(value) > MAX_NAME:
        return f"{len(value)} characters, at most {MAX_NAME}"
    if not _NAME.fullmatch(value):
        return f"{_short(value)} is not a name ({NAME_RULE})"
    return ""


def check_name(field: str, value: object) -> str:
    """``value`` when it is a name; else ValueError naming ``field`` and the grammar."""
    problem = name_problem(value)
    if problem:
        raise ValueError(f"{field}: {problem}")
    return value  # type: ignore[return-value]


def task_name_problem(value: object) -> str:
    """Why ``value`` is not a task name: one or more names joined by ``/`` (``ruler/cwe``)."""
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    bad = len(value) > MAX_NAME or any(name_problem(part) for part in value.split("/"))
    return f"{_short(value)} is not a task name (names of {NAME_RULE}, joined by '/')" if bad else ""


def _short(value: str, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(value)} characters)"
