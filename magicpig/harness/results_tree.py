"""Readers of a results tree into pandas frames: the metrics.json files, the per-sample scores beside them, CSVs,
Snakemake's per-job benchmark files and the folders of the sweeps, (K, L) grid, tune-kl and GPU runs. The report,
``magicpig compare``, ``magicpig doctor`` and the reference-run archive read results through them.

A job that was interrupted and rerun keeps the benchmark file of its last attempt only, so a resumed run's job
times leave out the time its killed attempts spent."""
from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import Callable

import pandas as pd


from magicpig.harness.predictions import read_rows
from magicpig.harness.result_files import (DECODE_CSV, MACHINE_JSON, METRICS, PREDICTIONS, REFERENCE_GPU_RUN,
                                           TUNE_KL_JSON)
from magicpig_tasks.paper import load as load_reference  # noqa: F401 (re-exported: one reader of the paper numbers)


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
    ``method_effective``: the canonical spec the task actually ran (with its overrides, GSM8K: local=24). A
    ``root`` that is not a folder has no rows (the frame keeps its columns)."""
    rows = []
    for path in sorted(Path(root).rglob(METRICS.name)) if Path(root).is_dir() else []:
        m, problem = _read_metrics(path)
        if problem:
            if str(path) not in _WARNED:  # the figures read the tree again: one warning per file
                _WARNED.add(str(path))
                print(f"warning: {path} skipped: {problem}", file=sys.stderr)
            continue
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


def ok_runs(root: Path | str, prefix: str = "") -> pd.DataFrame:
    """The finished runs (status ok) below ``root`` whose task starts with ``prefix``."""
    df = collect_metrics(root)
    return df[(df["status"] == "ok") & df["task"].fillna("").str.startswith(prefix)]


_WARNED: set[str] = set()
# metrics.json fields the report reads, and the types they may hold (None: absent, or a skipped run's score)
_METRICS_TYPES = {"task": (str,), "length": (int, str), "method": (str,), "method_effective": (str, type(None)),
                  "score": (int, float, type(None)), "cost": (int, float, type(None)),
                  "cost1": (int, float, type(None)), "status": (str,), "reason": (str, type(None)),
                  "setup": (str, type(None)), "model": (str, type(None)), "counts": (dict, type(None))}


def _read_metrics(path: Path) -> tuple[dict, str]:
    """(the metrics.json at ``path``, '') or ({}, why it cannot be read): results folders may come from
    someone else, so a damaged or hand-made file is skipped (with a warning), never trusted or fatal."""
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        return {}, f"not readable JSON ({type(exc).__name__})"
    if not isinstance(m, dict):
        return {}, f"a JSON {type(m).__name__}, not an object"
    for key, kinds in _METRICS_TYPES.items():
        value = m.get(key)
        if key in m and (not isinstance(value, kinds) or isinstance(value, bool)):
            return {}, f"field {key!r} is a {type(value).__name__}"
    return m, ""


def read_csv(path: Path | str) -> pd.DataFrame | None:
    path = Path(path)
    return pd.read_csv(path) if path.is_file() and path.stat().st_size > 0 else None


def sample_scores(metrics_path: Path | str) -> dict[str, float]:
    """Per-sample scores of one run: {sample id: score} from the ``predictions.jsonl`` that
    ``magicpig.harness.evaluate`` writes beside ``metrics.json`` (empty when it is absent; a torn or
    unscored line is skipped, as the evaluator itself does when resuming)."""
    path = Path(metrics_path).with_name(PREDICTIONS.name)
    out: dict[str, float] = {}
    if not path.is_file():
        return out
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        score = row.get("score")
        if isinstance(score, (int, float)) and not isinstance(score, bool):
            out[str(row.get("id", i))] = float(score)
    rescored = _rescored_scores(Path(metrics_path))
    return {i: rescored.get(i, s) for i, s in out.items()} if rescored else out


def prediction_rows(metrics_path: Path | str, warn: Callable[[str], None] | None = None) -> dict[str, dict]:
    """The rows of the predictions.jsonl beside ``metrics_path`` by sample id (``predictions.read_rows``: a line
    that is not a row is skipped, with ``warn``); empty when the file is absent."""
    path = Path(metrics_path).with_name(PREDICTIONS.name)
    return read_rows(path, warn=warn) if path.is_file() else {}


def _rescored_scores(metrics_path: Path) -> dict[str, float]:
    """The per-sample scores ``magicpig rescore`` stored in metrics.json (``rescored.sample_scores``), which
    replace the rows' own; empty when there are none or the file cannot be read."""
    m, problem = _read_metrics(metrics_path) if metrics_path.is_file() else ({}, "absent")
    rescored = m.get("rescored") if not problem else None
    got = rescored.get("sample_scores") if isinstance(rescored, dict) else None
    if not isinstance(got, dict):
        return {}
    return {str(i): float(v) for i, v in got.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def run_samples(df: pd.DataFrame) -> dict[str, dict[str, float]]:
    """task -> {sample id: score} over the rows of a ``collect_metrics`` frame (one method, one length)."""
    out: dict[str, dict[str, float]] = {}
    for r in df.itertuples():
        scores = sample_scores(r.path)
        if scores:
            out.setdefault(r.task, {}).update(scores)
    return out


def read_job_times(results: Path) -> pd.DataFrame:
    """One row per finished job, from the benchmark files Snakemake writes for every rule
    (``<results>/benchmarks/<rule>/<job>.tsv``): ``rule`` (the folder; a file directly under ``benchmarks/`` is
    its own rule), ``job`` (the file's stem), ``seconds`` (wall), ``cpu_seconds``, ``max_rss_mb``. Empty without
    files."""
    root = Path(results) / "benchmarks"
    rows = []
    for path in sorted(root.rglob("*.tsv")) if root.is_dir() else []:
        df = pd.read_csv(path, sep="\t")
        if df.empty or "s" not in df.columns:
            raise ValueError(f"{path}: not a Snakemake benchmark file (no `s` column or no row)")
        last = df.iloc[-1]  # `benchmark: repeat(...)` writes one row per repetition; the last is the kept run
        rule = path.parent.name if path.parent != root else path.stem
        rows.append({"rule": rule, "job": path.stem, "seconds": float(last["s"]),
                     "cpu_seconds": float(last.get("cpu_time", float("nan"))),
                     "max_rss_mb": float(last.get("max_rss", float("nan")))})
    return pd.DataFrame(rows, columns=["rule", "job", "seconds", "cpu_seconds", "max_rss_mb"])


SWEEPS = "sweeps"  # the folder of the budget / cost sweeps (block `sweeps`)


def sweep_runs(results: Path) -> pd.DataFrame:
    """Finished RULER runs of the sweeps and of the accuracy tree, one row per (task, length, method) (the
    sweep's run first), with the method's parsed fields: family (dense / topk / oracle / magicpig / other),
    budget, K, L, centering."""
    from magicpig.methods import parse_method

    df = pd.concat([ok_runs(results / folder, "ruler/").assign(source=folder) for folder in (SWEEPS, "accuracy")],
                   ignore_index=True)
    df = df.drop_duplicates(["task", "length", "method"], keep="first")
    fields = []
    for spec in df["method"]:
        try:
            m = parse_method(spec)
        except ValueError:
            fields.append({"family": "other"})
            continue
        fields.append({"family": m.name if m.name in ("dense", "topk", "oracle", "magicpig") else "other",
                       "budget": getattr(m, "budget", None), "K": getattr(m, "K", None), "L": getattr(m, "L", None),
                       "centering": getattr(m, "centering", None)})
    parsed = pd.DataFrame(fields, index=range(len(df)), columns=["family", "budget", "K", "L", "centering"])
    return pd.concat([df.reset_index(drop=True), parsed], axis=1)


def kl_grid_averages(results: Path) -> pd.DataFrame:
    """Our RULER average per method over the (K, L) grid's tasks and length: method, score, cost, tasks, length.
    Dense comes from the RULER runs on those tasks and that length."""
    grid = ok_runs(results / "ablations" / "kl_grid")
    if grid.empty:
        return pd.DataFrame(columns=["method", "score", "cost", "tasks", "length"])
    length = int(grid["length"].max())
    grid = grid[grid["length"] == length]
    ruler = ok_runs(results / "accuracy" / "ruler")
    dense = ruler[(ruler["method"] == "dense") & (ruler["length"] == length) & ruler["task"].isin(set(grid["task"]))]
    if len(dense):
        grid = pd.concat([grid, dense], ignore_index=True)
    out = grid.groupby("method").agg(score=("score", "mean"), cost=("cost", "mean"), tasks=("task", "nunique"))
    return out.reset_index().assign(length=length)


def ruler_averages(results: Path) -> pd.DataFrame:
    """Our RULER average per (method, length) over the tasks each finished: method, length, score, cost, tasks."""
    ok = ok_runs(Path(results) / "accuracy" / "ruler")
    if ok.empty:
        return pd.DataFrame(columns=["method", "length", "score", "cost", "tasks"])
    ok = ok.assign(length=lambda d: d["length"].astype(int))
    out = ok.groupby(["method", "length"]).agg(score=("score", "mean"), cost=("cost", "mean"),
                                               tasks=("task", "nunique"))
    return out.reset_index()


def gpu_runs(root: Path, prefix: str = "") -> list[Path]:
    """The ``make gpu-check`` output folders under ``root`` (``results/gpu/<name>/``) whose name starts with
    ``prefix``."""
    root = Path(root)
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(prefix)
                  and (p / DECODE_CSV.name).is_file()) if root.is_dir() else []


def gpu_run_folders(results: Path, gpu_results: Path | None = None) -> list[Path]:
    """The GPU runs a report of ``results`` (results/<preset>) reads: the ``make gpu-check`` folders under
    ``gpu_results`` alone when given; by default those under results/gpu and the committed ones
    (REFERENCE_GPU_RUN: figures/reference/gpu-check-*, beside results/)."""
    if gpu_results is not None:
        return gpu_runs(Path(gpu_results))
    results = Path(results)
    committed = Path(REFERENCE_GPU_RUN).parent
    return gpu_runs(results.parent / "gpu") + gpu_runs(results.parent.parent / committed,
                                                       Path(REFERENCE_GPU_RUN).name.split("<")[0])


def read_machine(folder: Path) -> dict:
    """The machine record of a ``make gpu-check`` folder (its MACHINE_JSON); empty when absent or not valid JSON."""
    try:
        return json.loads((Path(folder) / MACHINE_JSON.name).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def tune_kl_files(est: Path) -> list[Path]:
    """The tune-kl results, one per target cost (TUNE_KL_JSON, written by ``magicpig tune-kl``)."""
    return sorted(est.glob(TUNE_KL_JSON.glob)) if est.is_dir() else []


def read_table(path: Path | str) -> pd.DataFrame | None:
    """A CSV as a frame; None when it is absent, empty or has no rows (``read_csv`` keeps a header-only file)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    return df if len(df) else None


def truthy(series: pd.Series) -> pd.Series:
    """A CSV boolean column (True/False, 'true'/'false', 1/0) as bools."""
    return series.map(lambda v: str(v).strip().lower() in ("true", "1", "yes"))


def sparse_layers(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of MagicPIG's sparse layers (all rows when the ``dense_in_magicpig`` column is absent)."""
    return df[~truthy(df["dense_in_magicpig"])] if "dense_in_magicpig" in df else df


def gpu_decode_rows(results: Path, gpu_folders: list[Path]) -> pd.DataFrame:
    """Every measured GPU decode row: the pipeline's throughput/decode.csv and the decode.csv of each GPU run
    folder (``gpu_run_folders``), each row with the file it came from (``_source``)."""
    files = [DECODE_CSV.under(results)] + [Path(f) / DECODE_CSV.name for f in gpu_folders]
    frames = []
    for f in files:
        df = read_table(f)
        if df is None or "device" not in df:
            continue
        df = df[df["device"].astype(str).str.startswith("cuda")]
        if "fits" in df:
            df = df[truthy(df["fits"])]
        if len(df):
            frames.append(df.assign(_source=str(f), _gpu=df.get("device_name", pd.Series("", index=df.index))))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


DECODE_NEEDED = {  # the columns of a bench decode CSV the CPU table and figure read
    "device", "method", "backend", "context", "batch", "fits", "ms_per_token", "tokens_per_s"}


def cpu_decode_rows(results: Path) -> pd.DataFrame | None:
    """The CPU rows of ``throughput/decode.csv`` (None: no file, or one without the bench's columns)."""
    decode = read_table(DECODE_CSV.under(results))
    if decode is None or not DECODE_NEEDED <= set(decode.columns):
        return None
    if "search" not in decode:  # files written before the max-batch search existed
        decode = decode.assign(search="")
    return decode[decode["device"].astype(str) == "cpu"]
