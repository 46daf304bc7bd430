"""Reading benchmark records (dicts) from local files, or from the Hugging Face hub parquet files fetched
into the local cache by ``magicpig_tasks.download.fetch``."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_records(path: str | Path, what: str) -> list[dict[str, Any]]:
    """Records from a ``.jsonl``, ``.json`` (a list, or {"data": [...]}) or ``.parquet`` file.

    Raises ValueError naming the file (and for JSONL the line, counted from 1 over every line, blank ones
    included) for a file that is not UTF-8, not valid JSON / parquet, holds something other than
    objects, or holds no record at all (an empty file would otherwise score 0 on 0 samples)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what}: data file {p} does not exist")
    if p.suffix == ".jsonl":
        rows = _jsonl_rows(p, what)
    elif p.suffix == ".json":
        try:
            data = json.loads(_utf8(p, what))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{what}: data file {p} is not valid JSON: {exc}") from None
        rows = data.get("data", data) if isinstance(data, dict) else data
    elif p.suffix == ".parquet":
        import pandas as pd
        try:
            rows = pd.read_parquet(p).to_dict("records")
        except Exception as exc:  # pyarrow raises its own error types for a corrupt file
            raise ValueError(f"{what}: data file {p} is not a readable parquet file: {exc}") from None
    else:
        raise ValueError(f"{what}: data file {p} must be .jsonl, .json or .parquet")
    if not isinstance(rows, list):
        raise ValueError(f"{what}: {p} does not hold a list of records")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(f"{what}: {p}: record {i} is a {type(r).__name__}, not an object")
    if not rows:
        raise ValueError(f"{what}: data file {p} holds no records")
    return [plain(r) for r in rows]


def _utf8(p: Path, what: str) -> str:
    data = p.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ValueError(f"{what}: data file {p} is not UTF-8 (line {line}, byte {exc.start})") from None


def _jsonl_rows(p: Path, what: str) -> list:
    rows = []
    for number, line in enumerate(_utf8(p, what).split("\n"), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{what}: data file {p} line {number}: not valid JSON ({exc.msg}, "
                                 f"column {exc.colno})") from None
            if not isinstance(rows[-1], dict):
                raise ValueError(f"{what}: data file {p} line {number}: a JSON {type(rows[-1]).__name__}, "
                                 "not an object")
    return rows


def read_hub_parquet(url: str, what: str) -> list[dict[str, Any]]:
    """Records of a remote parquet file (https URL), through the one fetcher (``magicpig_tasks.download``:
    cached, offline-aware); ``TaskUnavailable`` with the reason when it cannot be had."""
    from magicpig_tasks.download import fetch

    return read_records(fetch(url, None, what), what)


def plain(value: Any) -> Any:
    """numpy arrays / scalars inside a record -> python lists / scalars (JSON-serialisable)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if hasattr(value, "tolist"):
        return plain(value.tolist())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
