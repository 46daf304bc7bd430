"""Attention methods for one decode step, registered by name (``parse_method("magicpig:K=10,L=150")``)."""
from magicpig.methods.base import AttentionMethod, AttentionResult, KeyLayout
from magicpig.methods.registry import METHODS, canonical_spec, get_method_class, method_fields, parse_method, register
from magicpig.methods import exact as _exact  # noqa: F401  (registers dense, streaming, topk, quest)
from magicpig.methods import oracle as _oracle  # noqa: F401
from magicpig.methods.magicpig import MagicPIG, MagicPIGState, split_static_offloaded

__all__ = ["AttentionMethod", "AttentionResult", "KeyLayout", "METHODS", "MagicPIG", "MagicPIGState",
           "canonical_spec", "get_method_class", "method_fields", "parse_method", "register", "split_static_offloaded"]
