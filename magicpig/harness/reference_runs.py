"""Reference runs: a finished preset's report kept in the repository, so a reader sees the reproduction
without running it, and ``magicpig doctor`` can estimate a preset's job time on a fresh clone.

One folder per run, ``figures/reference/<preset>-<YYYY-MM-DD>/``, written once by ``magicpig archive`` and
never by the pipeline (which writes ``figures/generated/`` and ``results/``):

    REPORT.md, REPORT.html, *.png   the report as the pipeline made it
    disagreements/<A>__vs__<B>/*.csv  the disagreeing samples the report links to
    job_times.csv                   one row per finished job (``results_tree.read_job_times``)
    machine.json                    ``machine.machine_record()`` of the machine that ran it
    run.json                        preset, date, commit, the preset's validated config and its sha256

The folder is read back as untrusted input: names must match the grammar, files are size-capped and
``job_times.csv`` must hold its columns with finite, non-negative seconds.

>>> from pathlib import Path
>>> folder_name("cpu", "2026-12-04")
'cpu-2026-12-04'
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from magicpig.harness.report.disagreements_section import FOLDER as DISAGREEMENTS
from magicpig.harness.result_files import (REFERENCE_JOB_TIMES_CSV, REFERENCE_MACHINE_JSON, REFERENCE_RUN,
                                           REFERENCE_RUN_JSON, REPORT_HTML, REPORT_MD)
from magicpig.names import check_name

ROOT = Path(REFERENCE_RUN).parent  # figures/reference
REPORT_FILES = (REPORT_MD.name, REPORT_HTML.name)
FIGURE_SUFFIXES = (".png", ".svg")
JOB_TIMES = REFERENCE_JOB_TIMES_CSV.name
MACHINE = REFERENCE_MACHINE_JSON.name
RUN = REFERENCE_RUN_JSON.name
MAX_READ_BYTES = 4 * 2**20  # job_times.csv / run.json / machine.json of a run are a few kB
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def folder_name(preset: str, date: str) -> str:
    """``<preset>-<date>``; ValueError naming the field when either is malformed."""
    check_name("preset", preset)
    try:
        if not _DATE.fullmatch(date):
            raise ValueError("not YYYY-MM-DD")
        dt.date.fromisoformat(date)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"date: {date!r} is not a date YYYY-MM-DD ({exc})") from None
    return f"{preset}-{date}"


def config_digest(preset_config: dict) -> str:
    """sha256 of the preset's validated config as canonical JSON: equal configs give equal digests."""
    text = json.dumps(preset_config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def archive(preset: str, preset_config: dict, results: Path, report_dir: Path, *, root: Path = ROOT,
            date: str | None = None, commit: str = "") -> Path:
    """Copy ``report_dir``'s report and figures and ``results``' job times into ``root/<preset>-<date>/``.
    Refuses an existing folder (a reference is never overwritten) and a report that is not there."""
    from magicpig.harness.machine import machine_record
    from magicpig.harness.results_tree import read_job_times

    date = date or dt.date.today().isoformat()
    out = Path(root) / folder_name(preset, date)
    missing = [n for n in REPORT_FILES if not (Path(report_dir) / n).is_file()]
    if missing:
        raise FileNotFoundError(f"report: {', '.join(missing)} not in {report_dir} (run the preset first)")
    times = read_job_times(Path(results))
    if times.empty:
        raise ValueError(f"results: no job times under {Path(results) / 'benchmarks'}")
    if out.exists():
        raise FileExistsError(f"{out} exists: a reference run is never overwritten (pick another date)")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for path in sorted(Path(report_dir).iterdir()):
        if path.is_file() and not path.is_symlink() and (path.name in REPORT_FILES
                                                         or path.suffix in FIGURE_SUFFIXES):
            shutil.copy2(path, tmp / path.name)
    _copy_disagreements(Path(report_dir) / DISAGREEMENTS, tmp / DISAGREEMENTS)
    times.to_csv(tmp / JOB_TIMES, index=False)
    (tmp / MACHINE).write_text(json.dumps(machine_record(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    run = {"preset": preset, "date": date, "commit": commit, "config_sha256": config_digest(preset_config),
           "job_hours": round(float(times["seconds"].sum()) / 3600, 3), "jobs": int(len(times)),
           "preset_config": preset_config}
    (tmp / RUN).write_text(json.dumps(run, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.rename(out)
    return out


def _copy_disagreements(src: Path, dst: Path) -> None:
    """The report's ``disagreements/<pair>/<unit>.csv`` files: plain CSV files one folder deep, no links."""
    if not src.is_dir() or src.is_symlink():
        return
    for pair in sorted(src.iterdir()):
        if not pair.is_dir() or pair.is_symlink():
            continue
        for path in sorted(pair.iterdir()):
            if path.is_file() and not path.is_symlink() and path.suffix == ".csv":
                (dst / pair.name).mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, dst / pair.name / path.name)


@dataclass(frozen=True)
class ReferenceRun:
    folder: Path
    preset: str
    date: str
    config_sha256: str
    cpu_model: str
    cores: int | None
    job_seconds: float
    jobs: int


def latest(preset: str, root: Path = ROOT) -> Path | None:
    """The newest ``root/<preset>-<date>`` folder, or None."""
    check_name("preset", preset)
    if not Path(root).is_dir():
        return None
    dated = [p for p in Path(root).iterdir() if p.is_dir() and not p.is_symlink()
             and p.name.startswith(preset + "-") and _DATE.fullmatch(p.name[len(preset) + 1:])]
    return max(dated, key=lambda p: p.name) if dated else None


def _read_json(path: Path) -> dict:
    if path.stat().st_size > MAX_READ_BYTES:
        raise ValueError(f"{path}: larger than {MAX_READ_BYTES} bytes")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: holds a JSON {type(data).__name__}, not an object")
    return data


def read(folder: Path) -> ReferenceRun:
    """A reference folder's job time and the machine it ran on; ValueError naming the file and field when a
    file is missing, too large or malformed."""
    folder = Path(folder)
    for name in (JOB_TIMES, RUN, MACHINE):
        if not (folder / name).is_file():
            raise ValueError(f"{folder / name}: missing")
    if (folder / JOB_TIMES).stat().st_size > MAX_READ_BYTES:
        raise ValueError(f"{folder / JOB_TIMES}: larger than {MAX_READ_BYTES} bytes")
    times = pd.read_csv(folder / JOB_TIMES)
    if "seconds" not in times.columns or times.empty:
        raise ValueError(f"{folder / JOB_TIMES}: no `seconds` column or no row")
    seconds = pd.to_numeric(times["seconds"], errors="coerce")
    if seconds.isna().any() or not all(math.isfinite(s) and s >= 0 for s in seconds):
        raise ValueError(f"{folder / JOB_TIMES}: `seconds` must be finite and >= 0")
    run, machine = _read_json(folder / RUN), _read_json(folder / MACHINE)
    cores = machine.get("cpu_cores_physical")
    return ReferenceRun(folder=folder, preset=check_name("run.json preset", run.get("preset")),
                        date=str(run.get("date", "")), config_sha256=str(run.get("config_sha256", "")),
                        cpu_model=str(machine.get("cpu_model", "unknown CPU"))[:200],
                        cores=cores if isinstance(cores, int) else None,
                        job_seconds=float(seconds.sum()), jobs=len(times))
