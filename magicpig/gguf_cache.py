"""Read a GGUF file once per process when transformers loads a tokenizer and a model from it.

``AutoTokenizer.from_pretrained(gguf_file=...)`` and ``AutoModelForCausalLM.from_pretrained(gguf_file=...)``
call ``transformers.modeling_gguf_pytorch_utils.load_gguf_checkpoint`` three times for one model (the
tokenizer's config, the model's config, the weights), and each call builds a fresh ``gguf.GGUFReader``, which
walks every metadata field, the whole vocabulary included, in Python. Mapping the weight names then builds
``gguf.get_tensor_name_map(arch, n_blocks)`` once per module of the model. Inside :func:`parsed_once` those
three entry points are served from caches keyed by the file's path, size and modification time:

- ``gguf.GGUFReader``: one reader per file (it is read-only: a memory map and the fields parsed from it);
- ``load_gguf_checkpoint(path, return_tensors=False)``: the parsed config / tokenizer dict, returned as a deep
  copy (callers edit it); the weights (``return_tensors=True``) are still read by transformers itself;
- ``gguf.get_tensor_name_map``: one map per (architecture, block count).

Both libraries import these names from their modules at call time, so replacing the module attributes for
the duration of a load reaches every call; outside :func:`parsed_once` nothing is changed.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import os
import threading

_LOCK = threading.RLock()  # a load inside a load (load_model reads the tokenizer) re-enters


def _file_key(path) -> tuple[str, int, float]:
    st = os.stat(path)
    return os.path.realpath(path), st.st_size, st.st_mtime


@functools.lru_cache(maxsize=2)
def _reader(key: tuple[str, int, float]):
    from gguf import gguf_reader

    return gguf_reader.GGUFReader(key[0])


@functools.lru_cache(maxsize=2)
def _metadata(key: tuple[str, int, float], load):
    return load(key[0], return_tensors=False)


@functools.lru_cache(maxsize=8)
def _name_map(arch, n_blocks: int, build):
    return build(arch, n_blocks)


@contextlib.contextmanager
def parsed_once():
    """Within the block, transformers' GGUF loading reads each file's header once (see the module docstring)."""
    import gguf
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    load, build = hf_gguf.load_gguf_checkpoint, gguf.get_tensor_name_map

    def reader(path, mode="r"):
        return _reader(_file_key(path)) if mode == "r" else gguf.gguf_reader.GGUFReader(path, mode)

    def load_checkpoint(path, return_tensors=False, *args, **kwargs):
        if return_tensors or args or kwargs:
            return load(path, return_tensors, *args, **kwargs)
        return copy.deepcopy(_metadata(_file_key(path), load))

    def name_map(arch, n_blocks):
        return _name_map(arch, n_blocks, build)

    with _LOCK:
        saved = gguf.GGUFReader, hf_gguf.load_gguf_checkpoint, gguf.get_tensor_name_map
        gguf.GGUFReader, hf_gguf.load_gguf_checkpoint, gguf.get_tensor_name_map = reader, load_checkpoint, name_map
        try:
            yield
        finally:
            gguf.GGUFReader, hf_gguf.load_gguf_checkpoint, gguf.get_tensor_name_map = saved
