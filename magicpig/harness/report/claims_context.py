"""What the claim tests read (``Context``: the results root, the finished accuracy runs, the reference and its
thresholds) and the selections of runs they share (``of_method``, ``family``)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from magicpig.harness.results_tree import canonical, gpu_run_folders, ok_runs


class Context:
    """What the tests read (module docstring); ``min_samples`` counts per task, method and length. ``gpu_folders``:
    the GPU runs read (default ``results_tree.gpu_run_folders``: those under results/gpu and the committed ones)."""

    def __init__(self, results: Path, ref: dict, gpu_folders: Sequence[Path] | None = None):
        self.results, self.ref = Path(results), ref
        claims = ref.get("claims", {})
        self.min_samples = int(claims.get("min_samples", 20))
        self.floor_points = float(claims.get("floor_points", 5))
        self.gpu_folders = list(gpu_folders) if gpu_folders is not None else gpu_run_folders(self.results)
        self.acc = ok_runs(self.results / "accuracy")

    def runs(self, benchmark: str, tasks: list[str] | None = None):
        df = self.acc[self.acc["task"].fillna("").str.startswith(benchmark)]
        return df[df["task"].isin(tasks)] if tasks else df


def of_method(df: pd.DataFrame, spec: str) -> pd.DataFrame:
    """The rows that ran ``spec``: as written (canonical) or as the task actually ran it (the effective
    spec with task overrides, e.g. GSM8K's local=24), so a claim may name either."""
    want = canonical(spec)
    return df[(df["method"] == want) | (df["method_effective"] == want)]


def family(method: str) -> str:
    return method.partition(":")[0]
