"""Reading benchmark records (dicts) from local files, or from the Hugging Face hub parquet files fetched
into the local cache by ``magicpig_tasks.download.fetch``."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any



def read_records(path: str | Path, what: str) -> list[dict[str, Any]]:
    """Records from a ``.jsonl``, ``.json`` (a list, or {"data": [...]}) or ``.parquet`` file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what}: data file {p} does not exist")
    if p.suffix == ".jsonl":
        rows = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    elif p.suffix == ".json":
        data = json.loads(p.read_text(encoding="utf-8"))
        rows = data.get("data", data) if isinstance(data, dict) else data
    elif p.suffix == ".parquet":
        import pandas as pd
        rows = pd.read_parquet(p).to_dict("records")
    else:
        raise ValueError(f"{what}: data file {p} must be .jsonl, .json or .parquet")
    if not isinstance(rows, list):
        raise ValueError(f"{what}: {p} does not hold a list of records")
    return [plain(r) for r in rows]


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
