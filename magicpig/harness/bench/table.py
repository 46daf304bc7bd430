"""The decode benchmark's rows: their columns, the CSV they are appended to (one row at a time, so a killed
run keeps what it finished and a rerun adds to the same file), the bytes-limit of a row and the text table a
run ends with."""
from __future__ import annotations

import csv
import os
import secrets
import time

from magicpig.atomic_io import CsvAppender
from magicpig.decoders import TIMING_KEYS

# every row has all of them ('' where not applicable); docs/benchmarking.md says what each holds
COLUMNS = ["model", "shape_only", "device", "device_name", "context", "batch", "method", "backend", "fill",
           "dtype", "offload_dtype", "linear", "forward", "weights", "steps", "warmup", "threads", "isa", "cpu_model",
           "torch_version", "runtime_version", "malloc_policy", "ms_per_token", "tokens_per_s", "sampled_fraction",
           "setup_seconds", "peak_host_mb", "peak_device_mb", "kv_bytes", "table_bytes", "est_host_mb",
           "est_device_mb", "fits", "reason", "search", "other_cpu_load", "under_load", "bytes_per_step",
           "stream_gbps", "bytes_limit_ms", "x_bytes_limit", "run_id"]
# the columns that name what a row measured: two rows equal in all of them measured one setting (a rerun
# adds such a row beside the first, with its own run_id; `magicpig project` fits the latest of them)
SETTING_COLUMNS = ["model", "shape_only", "device", "device_name", "cpu_model", "context", "batch", "method",
                   "backend", "fill", "dtype", "offload_dtype", "weights", "steps", "warmup", "threads", "isa",
                   "search"]
# a row is under load when other processes took more than the cores its threads leave free plus this share
# of the cores its threads use: on 2 cores a 2-thread row is flagged above 0.5 other busy cores
UNDER_LOAD_SHARE = 0.25
# added by ``--diagnostics``: the load average, the hypervisor's steal, this process's kernel share, the
# bandwidth measured between the row's timed steps, and the engine's per-step time breakdown
DIAGNOSTIC_COLUMNS = ["load_before", "load_after", "steal_cpu", "own_sys_share", "stream_gbps_steps",
                      "stream_samples", "x_after_read"] + [f"{k}_ms" for k in TIMING_KEYS]


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def is_under_load(other_cpu_load: float, threads: int, cores: int | None = None) -> bool:
    """Whether other processes' CPU time (in cores) during a row reached into the cores the row's ``threads``
    ran on: beyond the ``cores - threads`` spare ones by more than ``UNDER_LOAD_SHARE`` of ``threads``. The
    same rule for every backend (llama.cpp's threads spin and collapse when a core is taken: 20x slower at 0.92
    other busy cores of 2)."""
    cores = usable_cores() if cores is None else cores
    threads = max(1, int(threads or cores))
    return other_cpu_load > max(0, cores - threads) + UNDER_LOAD_SHARE * threads


def new_run_id() -> str:
    """An id for one `bench decode` run: UTC start time and a random tag (two runs never share one)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def setting_key(row: dict) -> tuple:
    """What ``row`` measured (``SETTING_COLUMNS``), as text, so rows read back from a CSV compare equal."""
    return tuple(str(row.get(c, "")).strip().lower() for c in SETTING_COLUMNS)


def latest_per_setting(rows: list[dict]) -> list[bool]:
    """For each row, whether it is the last row of its setting (``setting_key``) in ``rows``."""
    last = {setting_key(r): i for i, r in enumerate(rows)}
    return [last[setting_key(r)] == i for i, r in enumerate(rows)]


def bytes_limit(model: str, row: dict, stream_gbps: float | None) -> dict:
    """The bytes one decode step of ``row`` must read (weights, the KV read exactly, the sampled rows and
    bucket ids: ``projection.step_work``) and the time they take at ``stream_gbps``, this machine's
    streaming read: the step's memory limit. Empty for models or methods the hardware model does not know,
    and without a bandwidth (a GPU run)."""
    from magicpig.harness import projection
    from magicpig.shapes import model_shape

    family = projection.method_family(row["method"], row["backend"])
    if family is None or not stream_gbps:
        return {}
    try:
        shape = model_shape(model).with_dtype(projection.dtype_bytes(row["dtype"]))
    except ValueError:
        return {}
    sparse = kv_elem = None
    if family == "magicpig":
        sparse = projection.sparse_setting(row["method"], shape.layers, float(row["sampled_fraction"]))
        if row.get("offload_dtype") not in (None, "", "auto"):
            kv_elem = projection.dtype_bytes(row["offload_dtype"])
    w = projection.step_work(shape, family, int(row["context"]), int(row["batch"]), sparse, kv_elem,
                             weight_elem=projection.weight_elem_bytes(row.get("weights")))
    nbytes = w.weight_bytes + w.exact_kv_bytes + w.sparse_bytes
    limit_ms = 1000 * nbytes / (stream_gbps * 1e9)
    return {"bytes_per_step": int(nbytes), "stream_gbps": round(stream_gbps, 2), "bytes_limit_ms": round(limit_ms, 3),
            "x_bytes_limit": round(float(row["ms_per_token"]) / limit_ms, 3)}


class Table:
    """The rows of one run: the settings every row shares (``common``), the CSV and the log."""

    def __init__(self, csv_path, common: dict, diagnostics: bool = False, verbose: bool = True):
        self.columns = COLUMNS + (DIAGNOSTIC_COLUMNS if diagnostics else [])
        self.csv, self.common, self.verbose = CsvAppender(csv_path, self.columns), common, verbose
        self.rows: list[dict] = []
        self.run_id = new_run_id()
        self.earlier: dict[tuple, str] = {}  # setting -> run_id of a row the file held before this run

    def start(self) -> None:
        """Write the header into a new file, or check an existing file's (a rerun adds rows to it) and note
        the settings its rows measured."""
        from magicpig.harness.csv_rows import load_rows

        try:
            self.csv.start()
        except ValueError:
            other = COLUMNS if self.columns != COLUMNS else COLUMNS + DIAGNOSTIC_COLUMNS
            with open(self.csv.path, newline="", encoding="utf-8", errors="replace") as fh:
                header = next(csv.reader(fh), None)
            if header == other:
                flag = "with" if other != COLUMNS else "without"
                raise ValueError(f"--csv: {self.csv.path} holds rows written {flag} --diagnostics; give the same "
                                 "flag to add rows to it") from None
            if header and [c for c in header if c != "run_id"] == [c for c in self.columns if c != "run_id"]:
                raise ValueError(f"--csv: {self.csv.path} holds rows written before rows carried a run_id; write "
                                 "to another file (`magicpig project` reads both)") from None
            raise
        self.earlier = {setting_key(r): str(r.get("run_id", "")) for r in load_rows(self.csv.path)}

    def log(self, msg: str) -> None:
        if self.verbose:
            print(f"[bench decode] {msg}", flush=True)

    def row(self, n: int, batch: int, spec: str, backend: str, fill: str, est: dict | None = None) -> dict:
        """A new row of this run's settings; ``est``: the memory estimate (``memory.estimate_row``)."""
        row = dict.fromkeys(self.columns, "")
        row.update(self.common)
        row.update({"context": n, "batch": batch, "method": spec, "backend": backend, "fill": fill,
                    "run_id": self.run_id})
        if est is not None:
            cpu = self.common["device"] == "cpu"
            row.update({"kv_bytes": est["kv"], "table_bytes": est["tables"],
                        "est_host_mb": round((est["host"] + (est["device"] if cpu else 0)) / 2**20, 1),
                        "est_device_mb": "" if cpu else round(est["device"] / 2**20, 1)})
        return row

    def add(self, row: dict) -> dict:
        """Append ``row`` to the CSV and log it."""
        self.rows.append(row)
        self.csv.append(row)
        label = f"context {row['context']} batch {row['batch']} {row['method']}@{row['backend']}"
        earlier = self.earlier.get(setting_key(row))
        if earlier is not None:
            self.log(f"{label}: {self.csv.path} already holds this setting (run {earlier or 'without an id'}); "
                     f"this run's row is added beside it as run {self.run_id}, and `magicpig project` fits the "
                     "latest")
        if row["fits"] is False:
            self.log(f"{label}: does not fit ({row['reason']})")
        else:
            self.log(f"{label}{' [' + row['search'] + ']' if row['search'] else ''}: {row['ms_per_token']:.1f} "
                     f"ms/token, {row['tokens_per_s']:.2f} tokens/s, setup {row['setup_seconds']:.1f} s, sampled "
                     f"{row['sampled_fraction']:.4f}{' (UNDER LOAD)' if row['under_load'] else ''}")
        return row


def summary(rows: list[dict]) -> str:
    """A text table: per (context, batch) and method@backend, ms/token, tokens/s and the ratio of tokens/s
    to dense@stock at the same context and batch (max-batch rows compare with stock's max-batch row), and
    ``x limit``: ms/token over the step's bytes-limit."""
    lines = [f"{'context':>8} {'batch':>5} {'method@backend':<34} {'ms/token':>10} {'tokens/s':>10} "
             f"{'vs stock':>8} {'x limit':>7}  note"]

    def key(r):
        return r["context"], ("max" if r["search"] else r["batch"])

    stock = {key(r): r for r in rows if r["backend"] == "stock" and r["fits"] is True}
    for r in rows:
        label = f"{r['method']}@{r['backend']}"
        if r["fits"] is not True:
            lines.append(f"{r['context']:>8} {r['batch']:>5} {label:<34} {'-':>10} {'-':>10} {'-':>8}  "
                         f"does not fit: {r['reason']}")
            continue
        ref = stock.get(key(r))
        ratio = f"{r['tokens_per_s'] / ref['tokens_per_s']:.2f}x" if ref and ref["tokens_per_s"] else "-"
        limit = f"{float(r['x_bytes_limit']):.2f}" if r.get("x_bytes_limit") not in (None, "") else "-"
        notes = [n for n, on in (("max batch", r["search"]), ("shape-only", r["shape_only"]),
                                 ("under load", r["under_load"])) if on]
        lines.append(f"{r['context']:>8} {r['batch']:>5} {label:<34} {r['ms_per_token']:>10.1f} "
                     f"{r['tokens_per_s']:>10.2f} {ratio:>8} {limit:>7}  {', '.join(notes)}")
    return "\n".join(lines)
