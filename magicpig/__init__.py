"""MagicPIG reproduction suite: LSH-sampling attention for long-context decoding.

Importing this package is cheap: it never compiles the CPU module nor touches CUDA.
"""
from .methods import AttentionResult, KeyLayout, METHODS, parse_method
from .merge import merge_attention

__version__ = "0.1.0"
__all__ = ["AttentionResult", "KeyLayout", "METHODS", "merge_attention", "parse_method", "__version__"]
