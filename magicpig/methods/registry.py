"""Registry of attention methods and the textual spec parser (``magicpig:K=10,L=150``)."""
from __future__ import annotations

import dataclasses
import re
import typing

from magicpig.methods.base import LIST_SEP, AttentionMethod
from magicpig.names import name_problem

METHODS: dict[str, type[AttentionMethod]] = {}
_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")


def register(cls: type[AttentionMethod]) -> type[AttentionMethod]:
    """Class decorator: make ``cls`` (a dataclass with a ``name``) available to ``parse_method``."""
    if not cls.name or cls.name in METHODS:
        raise ValueError(f"method name {cls.name!r} missing or already registered")
    problem = name_problem(cls.name)  # the name starts every folder name of its specs (spec_names)
    if problem:
        raise ValueError(f"method name of {cls.__name__}: {problem}")
    METHODS[cls.name] = cls
    return cls


def method_fields(name: str) -> list[tuple[str, str, typing.Any]]:
    """(field, type description, default) for each hyperparameter of method ``name``."""
    cls = get_method_class(name)
    hints = typing.get_type_hints(cls)
    return [(f.name, _type_name(hints[f.name]), f.default) for f in cls.spec_fields()]


def get_method_class(name: str) -> type[AttentionMethod]:
    if name not in METHODS:
        raise ValueError(f"unknown attention method {name!r}; known methods: {', '.join(sorted(METHODS))}")
    return METHODS[name]


def parse_method(spec: str | ParsedSpec | AttentionMethod) -> AttentionMethod:
    """Build a method from ``name`` or ``name:field=value,field=value``.

    Grammar (one for every command and the pipeline): fields are separated by ``,``; whitespace around
    names, fields and values is ignored, inside a value it is an error; numbers are ASCII digits only
    (``K=１１`` is refused, not read as 11); lists (``dense_layers``) are written ``0/16`` (``none`` for
    empty), with ``LIST_SEP`` which never separates methods (``;`` does, in ``--methods``); booleans
    ``true``/``false``. Errors name the method, the field and the accepted values. An AttentionMethod
    is returned as it is, a ParsedSpec as its method, so an entry point parses once and passes the
    object on.

    >>> method = parse_method("magicpig:K=8,L=75,dense_layers=0/16")
    >>> method.K, method.L, method.dense_layers
    (8, 75, (0, 16))
    >>> method.spec()  # canonical: the fields that differ from their defaults, the method's own first
    'magicpig:K=8,L=75,dense_layers=0/16'
    >>> parse_method(method) is method
    True
    >>> parse_method("magicpig:K=ten")
    Traceback (most recent call last):
    ...
    ValueError: method 'magicpig': field 'K' expects int, got 'ten'
    """
    if isinstance(spec, AttentionMethod):
        return spec
    if isinstance(spec, ParsedSpec):
        return spec.method
    return read_spec(spec).method


@dataclasses.dataclass(frozen=True)
class ParsedSpec:
    """A method spec read once (``read_spec``), passed on instead of its text: ``text`` as given (stripped),
    the ``method`` it builds, and ``given``, the fields the text sets explicitly (a task's method overrides
    leave those alone, even where the value given is the default)."""

    text: str
    method: AttentionMethod
    given: frozenset[str]

    @property
    def canonical(self) -> str:
        """``canonical_spec`` of the text, from the parsed method (no second parse)."""
        return self.method.spec()


def read_spec(spec: str) -> ParsedSpec:
    """The one parser of a method spec's text (grammar: ``parse_method``); ValueError naming the method,
    the field and the accepted values."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"method spec must be a non-empty string like 'magicpig:K=10,L=150', got {spec!r}")
    name, _, rest = spec.strip().partition(":")
    cls = get_method_class(name.strip())
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, typing.Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq:
            raise ValueError(f"method {cls.name!r}: expected field=value, got {item!r}")
        if key not in known:
            raise ValueError(f"method {cls.name!r} has no field {key!r}; fields: {', '.join(sorted(known))}")
        if key in kwargs:
            raise ValueError(f"method {cls.name!r}: field {key!r} given twice")
        kwargs[key] = _convert(cls.name, key, raw.strip(), hints[key])
    try:
        method = cls(**kwargs)
    except TypeError as exc:  # pragma: no cover - dataclass signature mismatch
        raise ValueError(f"method {cls.name!r}: {exc}") from exc
    return ParsedSpec(spec.strip(), method, frozenset(kwargs))


def canonical_spec(spec: str | ParsedSpec | AttentionMethod) -> str:
    """The one spec string of a method: its name plus every field that differs from its default, in the
    fields' declared order, values normalised (``magicpig:L=150,K=10`` -> ``magicpig``;
    ``quest:ratio=0.040,page_size=16`` -> ``quest``; ``topk:budget=64.0`` -> ``topk:budget=64``;
    ``dense_layers=16/0`` -> ``dense_layers=0/16``). Two specs are the same method iff these are equal.
    Raises ValueError for a spec that does not parse."""
    return parse_method(spec).spec()


def _convert(method: str, field: str, raw: str, hint: typing.Any) -> typing.Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
        if raw.lower() in ("", "default", "null"):
            return None
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    problem = _lexical_problem(raw, hint, origin)
    if problem:
        raise ValueError(f"method {method!r}: field {field!r} expects {_type_name(hint)}, got {raw!r}: {problem}")
    try:
        if hint is bool:
            low = raw.lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if hint is int and _INT.fullmatch(raw):
            return int(raw)
        if hint is float and _FLOAT.fullmatch(raw):
            return float(raw)
        if hint is str:
            return raw
        if origin is typing.Literal:
            if raw in args:
                return raw
            raise ValueError
        if origin is tuple:
            if raw.lower() in ("none", ""):
                return ()
            items = raw.split(LIST_SEP)
            if all(_INT.fullmatch(x) for x in items):
                return tuple(int(x) for x in items)
    except ValueError:
        pass
    raise ValueError(f"method {method!r}: field {field!r} expects {_type_name(hint)}, got {raw!r}")


def _lexical_problem(raw: str, hint: typing.Any, origin: typing.Any) -> str:
    """Why ``raw`` can never be a value of the grammar (empty when it may be)."""
    if any(c.isspace() for c in raw):
        return "whitespace inside a value" + (f" (lists are written with '{LIST_SEP}', e.g. 0{LIST_SEP}16)"
                                               if origin is tuple else "")
    if not raw.isascii():
        return "only ASCII characters are accepted (digits 0-9)"
    if origin is tuple and any(c in raw for c in ";,"):
        return f"list items are separated by '{LIST_SEP}' (e.g. 0{LIST_SEP}16); ';' separates methods"
    return ""


def _type_name(hint: typing.Any) -> str:
    args = typing.get_args(hint)
    if type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return f"{_type_name(inner)} or default"
    if typing.get_origin(hint) is tuple:
        return f"list of ints separated by '{LIST_SEP}' (or none)"
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + "|".join(str(a) for a in args)
    return getattr(hint, "__name__", str(hint))
