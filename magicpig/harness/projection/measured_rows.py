"""The measured rows the bandwidth model is fitted to, read from their CSVs: this machine's streaming bandwidth
and kernel efficiency (``kernel_summary``, of ``magicpig bench kernel``) and one item per decode row with its
step work and its role in the fit (``decode_items``, of ``magicpig bench decode``: fitted, flagged under
load, a repeat of a later run, not modelled, or the GPU check of the H200 projection)."""
from __future__ import annotations

import math
import os
from pathlib import Path


def cell_number(row: dict, key: str, default=math.nan) -> float:
    """A CSV cell as a number; ``default`` for an empty, unparsable or NaN cell."""
    try:
        v = float(row.get(key))
    except (TypeError, ValueError):
        return default
    return default if math.isnan(v) else v


def cell_flag(v) -> bool | None:
    """A CSV cell as a boolean; None when it is neither true nor false."""
    s = str(v).strip().lower()
    return True if s in ("true", "1", "yes", "1.0") else False if s in ("false", "0", "no", "0.0") else None


def csv_rows(paths) -> list[dict]:
    """The rows of every CSV in ``paths``, each with its ``source`` path."""
    from magicpig.harness.csv_rows import load_rows  # skips a torn row with a warning

    rows = []
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no such CSV: {path}")
        if Path(path).stat().st_size == 0:
            raise ValueError(f"{path}: empty CSV (no header, no rows)")
        rows += [dict(r, source=str(path)) for r in load_rows(path)]
    return rows


def under_load(row: dict) -> bool:
    """Whether OTHER processes took CPU the row's threads needed while it was measured: the row's
    ``under_load`` if it has one, else its ``other_cpu_load``, else its load average less the benchmark's
    own threads (a load average counts them: a quiet 2-core machine running a 2-thread benchmark reads ~2),
    judged by ``bench.table.is_under_load`` with the row's threads on as many cores (no spare ones)."""
    from magicpig.harness.bench.table import is_under_load

    flag = cell_flag(row.get("under_load"))
    if flag is not None:
        return flag
    other = cell_number(row, "other_cpu_load")
    if math.isnan(other):
        load = max(cell_number(row, k, default=0.0) for k in ("load_avg", "load_before", "load_after"))
        other = load - cell_number(row, "threads", default=0.0)
    threads = int(cell_number(row, "threads", default=os.cpu_count() or 1))
    return is_under_load(other, threads, cores=threads)


def kernel_summary(paths) -> dict:
    """Streaming-read GB/s and kernel efficiency (medians over unflagged rows) of the kernel CSV(s)."""
    import statistics

    rows = csv_rows(paths)
    good = [r for r in rows if not under_load(r)]
    stream = [v for v in (cell_number(r, "read_gb_per_s") for r in good) if v > 0]
    ratio = [v for v in (cell_number(r, "bandwidth_ratio") for r in good) if v > 0]
    out = {"rows": len(rows), "unflagged": len(good),
           "stream_gbps": statistics.median(stream) if stream else math.nan,
           "efficiency": statistics.median(ratio) if ratio else math.nan, "stream_source": "kernel CSV"}
    loaded = [v for v in (cell_number(r, "read_gb_per_s") for r in rows) if v > 0]
    if not stream and loaded:  # every row under load: the least disturbed (highest) reading, said so
        out.update(stream_gbps=max(loaded), stream_source="kernel CSV, rows under load only (unreliable)")
    return out


def decode_items(paths, sampled_default: float = 0.02) -> list[dict]:
    """One dict per decode row: the row, its measured step seconds, its StepWork and its role."""
    from magicpig.harness.projection.bandwidth import (dtype_bytes, method_family, sparse_setting, step_work,
                                                       weight_elem_bytes)
    from magicpig.shapes import model_shape

    items = []
    for r in csv_rows(paths):
        ms = cell_number(r, "ms_per_token")
        item = {"row": r, "measured_s": ms / 1e3 if ms > 0 else math.nan, "work": None, "role": "",
                "device": str(r.get("device", "cpu"))}
        items.append(item)
        batch, context = cell_number(r, "batch", default=1), cell_number(r, "context")
        for name, v in (("batch", batch), ("context", context)):
            if not (v >= 1 and float(v).is_integer()):
                raise ValueError(f"decode-csv {r['source']}: field {name!r} must be a positive integer, got "
                                 f"{r.get(name)!r}")
        family = method_family(r.get("method", ""), r.get("backend"))
        if family is None:
            item["role"] = "not modelled (method)"
            continue
        try:
            shape = model_shape(str(r.get("model", "")))
        except ValueError:
            item["role"] = "not modelled (unknown model shape)"
            continue
        gpu = item["device"].startswith("cuda")
        try:
            elem = dtype_bytes(r.get("dtype") or ("bf16" if gpu else "fp32"))
        except ValueError as exc:
            item["role"] = f"not modelled ({exc})"
            continue
        sparse = None
        if family == "magicpig":
            generated = int(cell_number(r, "warmup", default=32) + cell_number(r, "steps", default=64) / 2)
            sparse = sparse_setting(str(r["method"]), shape.layers,
                                    cell_number(r, "sampled_fraction", default=sampled_default), generated)
        item.update(shape=shape.with_dtype(elem), family=family, context=int(context), batch=int(batch),
                    sparse=sparse)
        item["work"] = step_work(item["shape"], family, int(context), int(batch), sparse, host_alloc=not gpu,
                                 weight_elem=weight_elem_bytes(r.get("weights")))
        if cell_flag(r.get("fits")) is False or math.isnan(item["measured_s"]):
            item["role"] = "not measured (does not fit)"
        elif under_load(r):
            item["role"] = "flagged: under load"
        else:
            item["role"] = "GPU check of the H200 projection" if gpu else "fitted"
    return one_row_per_setting(items)


def one_row_per_setting(items: list[dict]) -> list[dict]:
    """Of the fitted (or GPU-check) rows that measured one setting (``bench.table.setting_key``: a rerun of
    `bench decode` adds a row beside the first, with its own run_id), only the latest is used; the others
    stay in the table, their role saying which run replaced them."""
    from magicpig.harness.bench.table import latest_per_setting, setting_key

    used = [it for it in items if it["role"] in ("fitted", "GPU check of the H200 projection")]
    latest = {setting_key(it["row"]): it for it, last in zip(used, latest_per_setting([it["row"] for it in used]))
              if last}
    for it in used:
        kept = latest[setting_key(it["row"])]
        if kept is not it:
            it["role"] = f"repeat: run {kept['row'].get('run_id') or 'later in the CSV'} of this setting is used"
    return items
