"""Attention methods for one decode step, registered by name (``parse_method("magicpig:K=10,L=150")``).

Every module of this package is imported when the package is (``import_modules``), so a method class
decorated with ``@register`` in any module of ``magicpig/methods/`` is registered with no further wiring.
"""
import importlib
import pkgutil

from magicpig.methods.base import AttentionMethod, AttentionResult, KeyLayout
from magicpig.methods.registry import METHODS, canonical_spec, get_method_class, method_fields, parse_method, register


def import_modules() -> list[str]:
    """Import every module of this package (each registers the methods it defines); returns their names."""
    names = [f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__)]
    for name in names:
        importlib.import_module(name)
    return names


import_modules()

from magicpig.methods.magicpig import MagicPIG, MagicPIGState, split_static_offloaded  # noqa: E402

__all__ = ["AttentionMethod", "AttentionResult", "KeyLayout", "METHODS", "MagicPIG", "MagicPIGState",
           "canonical_spec", "get_method_class", "import_modules", "method_fields", "parse_method", "register",
           "split_static_offloaded"]
