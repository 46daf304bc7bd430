"""A GGUF file's header, read without loading the file: its scalar metadata (``gguf_metadata``), the extent
of its tensor data (``gguf_data_extent``: ``check_gguf`` refuses a truncated file), its weights' storage
(``gguf_file_type``) and the model facts it states (``gguf_facts``: trained context, layers). Only the header
pages are read and the vocabulary arrays are skipped, not decoded."""
from __future__ import annotations

import functools
import mmap
import os
from pathlib import Path

_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_data_extent(path) -> tuple[int, int]:
    """(bytes the GGUF header says the file holds = end of its last tensor, alignment) from the header
    alone (the vocabulary arrays are skipped, not decoded). Raises ValueError on a malformed header."""
    return gguf_header(path)[:2]


def gguf_metadata(path) -> dict:
    """The scalar and string key-value metadata of a GGUF file (arrays such as the vocabulary left out),
    e.g. ``general.architecture``, ``llama.context_length``."""
    return gguf_header(path)[2]


def gguf_file_type(path) -> str:
    """The GGUF file's ``general.file_type`` as its name (``MOSTLY_Q4_1`` -> ``Q4_1``)."""
    import gguf

    value = gguf_metadata(path).get("general.file_type")
    try:
        return gguf.LlamaFileType(int(value)).name.removeprefix("MOSTLY_")
    except (TypeError, ValueError):
        return f"file_type {value}"


def gguf_header(path) -> tuple[int, int, dict]:
    """(data extent, alignment, scalar metadata) of a GGUF file from its header alone."""
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            raise ValueError("the file is empty")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:  # only the header pages are read
            return _parse_gguf_header(buf)


def _parse_gguf_header(buf) -> tuple[int, int, dict]:
    import struct

    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    pos = 0

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize("<" + fmt)
        if pos + size > len(buf):
            raise ValueError(f"header ends after {len(buf)} bytes")
        val = struct.unpack_from("<" + fmt, buf, pos)
        pos += size
        return val[0] if len(val) == 1 else val

    def string() -> str:
        nonlocal pos
        n = take("Q")
        if pos + n > len(buf):
            raise ValueError(f"header ends after {len(buf)} bytes")
        pos += n
        return buf[pos - n:pos].decode("utf-8", errors="replace")

    def value(vtype: int):
        nonlocal pos
        if vtype in _GGUF_SCALARS:
            return take(_GGUF_SCALARS[vtype])
        if vtype == 8:
            return string()
        if vtype == 9:
            etype, count = take("I"), take("Q")
            if etype in _GGUF_SCALARS:  # skip fixed-size arrays without decoding them
                pos += struct.calcsize("<" + _GGUF_SCALARS[etype]) * count
                if pos > len(buf):
                    raise ValueError(f"header ends after {len(buf)} bytes")
                return None
            for _ in range(count):
                value(etype)
            return None
        raise ValueError(f"unknown metadata value type {vtype}")

    if buf[:4] != b"GGUF":
        raise ValueError("not a GGUF file (no GGUF magic)")
    pos = 4
    version = take("I")
    if version < 2:
        raise ValueError(f"GGUF version {version} is not supported")
    n_tensors, n_kv = take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        key = string()
        val = value(take("I"))
        if val is not None:
            meta[key] = val
    alignment = meta.get("general.alignment", 32)
    alignment = alignment if isinstance(alignment, int) and alignment > 0 else 32
    end = 0
    for _ in range(n_tensors):
        string()
        dims = [take("Q") for _ in range(take("I"))]
        ttype, offset = take("I"), take("Q")
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            raise ValueError(f"unknown tensor type {ttype}") from None
        elems = 1
        for d in dims:
            elems *= d
        end = max(end, offset + elems // block * type_size)
    data_start = -(-pos // alignment) * alignment
    return data_start + end, alignment, meta


@functools.lru_cache(maxsize=16)
def _check_gguf_cached(path: str, size: int, mtime: float) -> None:
    try:
        needed, _ = gguf_data_extent(path)
    except ValueError as exc:
        raise ValueError(f"model: GGUF file {path} is truncated or damaged ({exc}); download it again") from None
    if size < needed:
        raise ValueError(f"model: GGUF file {path} is truncated: its header describes {needed} bytes of data, "
                         f"the file has {size}; download it again")


def check_gguf(path) -> None:
    """Raise ValueError naming ``path`` when the GGUF file is shorter than its header's tensor data."""
    st = os.stat(path)
    _check_gguf_cached(str(path), st.st_size, st.st_mtime)


def gguf_facts(path: Path) -> dict:
    """Context (``<arch>.context_length``) and layers (``<arch>.block_count``) from a GGUF file's key-value
    header (``gguf_metadata``: the header alone, the vocabulary arrays skipped)."""
    try:
        meta = gguf_metadata(path)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    arch = meta.get("general.architecture")
    value, layers = meta.get(f"{arch}.context_length"), meta.get(f"{arch}.block_count")
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{path}: no context_length in its GGUF metadata")
    return {"context": value, "layers": layers if isinstance(layers, int) and layers > 0 else None}
