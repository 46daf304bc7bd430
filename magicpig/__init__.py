"""MagicPIG reproduction suite: LSH-sampling attention for long-context decoding.

Importing this package is cheap: it never compiles the CPU module nor touches CUDA, and it imports
transformers only where the caller already has. It makes ``attn_implementation="magicpig"`` known to
transformers (``magicpig.attention.register``), at once or when transformers' model code loads.
"""
from magicpig.attention import patch, register_when_transformers_loads
from magicpig.methods import AttentionResult, KeyLayout, METHODS, parse_method
from magicpig.merge import merge_attention
from magicpig.options import DecodeOptions

__version__ = "0.1.0"
__all__ = ["AttentionResult", "DecodeOptions", "KeyLayout", "METHODS", "merge_attention", "parse_method",
           "__version__", "patch", "Engine", "GenerationConfig", "MagicPIGCache"]

# Heavy parts (transformers) load on first use only.
_LAZY = {"Engine": ("engine", "Engine"), "GenerationConfig": ("engine", "GenerationConfig"),
         "MagicPIGCache": ("cache", "MagicPIGCache")}
register_when_transformers_loads()


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
