"""Which cache layer the next decode attention call of this thread belongs to.

transformers calls a layer's ``Cache.update`` right before that layer's attention function, and passes the
attention function no handle to the cache. ``MagicPIGLayer.update`` (magicpig.cache) therefore marks its
(cache, layer) here, ``magicpig_attention`` (magicpig.attention) reads it, and the engine clears it when
a prefill or decode ends (magicpig.engine). This module imports nothing from the project, so the three
depend on it and not on each other.

The cache is held by weak reference: a finished ``generate()`` does not keep its cache (and its decoders'
memory) alive through this thread-local.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

_local = threading.local()


def set_active(cache: Any, layer_idx: int) -> None:
    """Mark ``cache.layers[layer_idx]`` as the layer of this thread's next attention call."""
    _local.cache = weakref.ref(cache)
    _local.layer_idx = layer_idx


def get_active(layer_idx: int) -> Any | None:
    """The cache marked for ``layer_idx`` (None when another layer, nothing, or a collected cache is marked)."""
    ref = getattr(_local, "cache", None)
    if ref is None or getattr(_local, "layer_idx", None) != layer_idx:
        return None
    return ref()


def clear_active() -> None:
    """Forget the mark of this thread (after a prefill or decode)."""
    _local.cache = None
    _local.layer_idx = None
