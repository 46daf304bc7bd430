"""Readers of the results tree (metrics.json files, CSVs) into pandas frames."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pandas as pd
import yaml

REFERENCE = Path(__file__).resolve().parents[3] / "config" / "paper_reference.yaml"


def load_reference(path: Path | str = REFERENCE) -> dict:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


@lru_cache(maxsize=None)
def canonical(spec: str) -> str:
    """Canonical form of a method spec (``magicpig.methods.canonical_spec``), so that
    'quest:page_size=16,ratio=0.04' matches 'quest:ratio=0.04'; a spec that does not parse is kept as is."""
    from magicpig.methods import canonical_spec

    try:
        return canonical_spec(spec)
    except ValueError:
        return spec


def collect_metrics(root: Path | str) -> pd.DataFrame:
    """Every metrics.json below ``root`` as one row: task, length, method (canonical), score, cost, status...
    ``method_effective``: the canonical spec the task actually ran (with its overrides, GSM8K: local=24)."""
    rows = []
    for path in sorted(Path(root).rglob("metrics.json")):
        m = json.loads(path.read_text(encoding="utf-8"))
        rows.append({
            "task": m.get("task"), "length": m.get("length"), "method": canonical(m.get("method", "")),
            "method_written": m.get("method"),
            "method_effective": canonical(m.get("method_effective") or m.get("method", "")),
            "score": m.get("score"), "cost": m.get("cost"),
            "cost1": m.get("cost1"), "status": m.get("status", "ok"), "reason": m.get("reason", ""),
            "setup": m.get("setup"), "model": m.get("model"),
            "samples": (m.get("counts") or {}).get("scored"), "path": str(path),
        })
    columns = ["task", "length", "method", "method_written", "method_effective", "score", "cost", "cost1", "status",
               "reason",
               "setup", "model", "samples", "path"]
    return pd.DataFrame(rows, columns=columns)


def read_csv(path: Path | str) -> pd.DataFrame | None:
    path = Path(path)
    return pd.read_csv(path) if path.is_file() and path.stat().st_size > 0 else None
