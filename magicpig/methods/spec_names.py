"""Method lists and method folder names: the textual side of specs shared by every command and the pipeline.

A method list is one spec per item (``--method``, a YAML list), or one string with specs separated by ``;``
(``--methods 'dense;magicpig:K=10,L=150'``). ``;`` never occurs inside a spec (lists inside a spec use
``LIST_SEP``, ``dense_layers=0/16``), so the split cannot cut a spec in two.

A method's folder (``method_dirname``) is the spec as written, compacted and made filesystem-safe:
':' -> '@', ',' -> '+', '=' -> '-', '/' -> '.', any other character outside [A-Za-z0-9._+@-] -> '_'
(``magicpig:K=10,L=150`` -> ``magicpig@K-10+L-150``). Two different methods never share a folder: a name
is kept only when reading it back gives the same method; otherwise (a value holding '+' or '-' that the
mapping cannot return, or a name over ``MAX_DIRNAME`` characters) the folder is the start of that name, '~'
and a hash of the canonical spec. '~' never appears in a kept name, so the two kinds cannot meet.
"""
from __future__ import annotations

import hashlib
import re
import typing

from magicpig.methods.base import LIST_SEP
from magicpig.methods.registry import ParsedSpec, canonical_spec, get_method_class, read_spec
from magicpig.names import FOLDER_PATTERN

MAX_DIRNAME = 120  # characters; file systems allow 255 bytes, and the rest of a path needs room
_SAFE = re.compile(r"[^A-Za-z0-9._+@-]")
_FOLDER = re.compile(FOLDER_PATTERN)
_LIST_TAIL = re.compile(rf"[0-9{re.escape(LIST_SEP)}]+")


def _compact(spec: str) -> str:
    return "".join(spec.split())


def _mapped(spec: str) -> str:
    s = _compact(spec).replace(":", "@").replace(",", "+").replace("=", "-").replace(LIST_SEP, ".")
    return _SAFE.sub("_", s)


def _read_back(name: str) -> str:
    """The spec a kept folder name stands for (the inverse of ``_mapped`` where it has one)."""
    method, _, rest = name.partition("@")
    hints = typing.get_type_hints(get_method_class(method))
    items = []
    for item in filter(None, rest.split("+")):
        key, _, value = item.partition("-")
        if typing.get_origin(hints.get(key)) is tuple or tuple in map(typing.get_origin,
                                                                       typing.get_args(hints.get(key))):
            value = value.replace(".", LIST_SEP)
        items.append(f"{key}={value}")
    return method + (":" + ",".join(items) if items else "")


def method_dirname(spec: str | ParsedSpec) -> str:
    """The folder name of a method spec (module docstring); ValueError for a spec that does not parse.
    A ParsedSpec is not parsed again: a name that reads back to its own text needs no parse at all."""
    parsed = spec if isinstance(spec, ParsedSpec) else read_spec(spec)
    canon = parsed.canonical
    name = _mapped(parsed.text)
    try:
        back = _read_back(name)
        same = len(name) <= MAX_DIRNAME and (back == _compact(parsed.text) or canonical_spec(back) == canon)
    except ValueError:
        same = False
    digest = hashlib.sha256(canon.encode()).hexdigest()[:16]
    folder = name if same else f"{name[:MAX_DIRNAME - 17]}~{digest}"
    if not _FOLDER.fullmatch(folder):  # the method's name leads: a registered name never starts with '.'
        raise ValueError(f"method {parsed.text!r}: its folder name {folder!r} is not a safe path component")
    return folder


def split_methods(values: list[str] | str) -> list[str]:
    """Method specs, as text, from a list (one spec per item) or a ';'-separated string; empty items
    dropped, order kept. Refused: the same text twice, an item holding ';' inside a list (give
    ``--method`` one spec), and a part of a ';' string that is the tail of a list written with ';'
    (``dense_layers=0;15``). Nothing is parsed: ``read_methods`` parses and refuses equivalent specs."""
    if isinstance(values, str):
        parts = values.split(";")
        for part in parts:
            if _LIST_TAIL.fullmatch(part.strip()):
                raise ValueError(f"methods: {part.strip()!r} in {values!r} is not a method: ';' separates "
                                 f"methods, list items inside a spec are separated by '{LIST_SEP}' "
                                 f"(dense_layers=0{LIST_SEP}16)")
    else:
        parts = list(values)
        for part in parts:
            if ";" in part:
                raise ValueError(f"methods: {part!r} holds ';': give one spec per --method (list items inside "
                                 f"a spec are separated by '{LIST_SEP}', e.g. dense_layers=0{LIST_SEP}16), or "
                                 "several specs separated by ';' in --methods")
    specs: list[str] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        if part in specs:
            raise ValueError(f"methods: {part!r} given twice")
        specs.append(part)
    if not specs:
        raise ValueError("methods: no method given (e.g. --methods 'dense;magicpig:K=10,L=150')")
    return specs


def read_methods(values: list[str] | str) -> list[ParsedSpec]:
    """``split_methods``, then each spec parsed once; equivalent specs (``magicpig`` and
    ``magicpig:K=10,L=150``) are refused, naming both."""
    parsed: list[ParsedSpec] = []
    seen: dict[str, str] = {}  # canonical spec -> the spec as given
    for text in split_methods(values):
        spec = read_spec(text)
        if spec.canonical in seen:
            raise ValueError(f"methods: {seen[spec.canonical]!r} and {text!r} are the same method "
                             f"({spec.canonical!r})")
        seen[spec.canonical] = text
        parsed.append(spec)
    return parsed


def check_dirnames(specs: list[str] | list[ParsedSpec]) -> dict[str, str]:
    """spec text -> folder name for every spec; ValueError naming both specs if two would share a folder
    (``method_dirname`` is built so that they cannot; this is the check before any work)."""
    names: dict[str, str] = {}
    owner: dict[str, str] = {}
    for spec in specs:
        text = spec.text if isinstance(spec, ParsedSpec) else spec
        name = method_dirname(spec)
        if name.lower() in owner:  # case-insensitive file systems (macOS) fold K-10 and k-10
            raise ValueError(f"methods: {owner[name.lower()]!r} and {text!r} would share the folder {name!r}")
        owner[name.lower()] = text
        names[text] = name
    return names
