"""A check of the set-up before a long run (``magicpig doctor``): the machine, the CPU module, the models and the
task data a preset needs, the GPU; then what the preset will run and skip.

Every finding is a ``Finding`` (area, name, status, detail) with status ``ok``, ``warn`` (runs, with a caveat),
``skip`` (that part of the preset will be skipped, and why) or ``fail`` (the preset cannot run at all: its
config does not validate, or its model is missing). Nothing here loads a model: sizes and contexts come from
files and headers (GGUF metadata, config.json); an assembled model that is not assembled yet is reported, not
assembled. The one slow step is the CPU module's first build (cached after it; ``build=False`` leaves it out).
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

OK, WARN, SKIP, FAIL = "ok", "warn", "skip", "fail"


@dataclass(frozen=True)
class Finding:
    area: str  # machine, cpu module, model, data, gpu, config
    name: str
    status: str  # OK, WARN, SKIP or FAIL
    detail: str


def _flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def machine() -> list[Finding]:
    """ISA (from the CPU's flags, nothing built), cores, memory, torch build, C++ compiler."""
    import psutil
    import torch

    from magicpig.cpu.extension import check_compiler
    from magicpig.harness.machine import cpu_model

    out = []
    flags = _flags()
    isas = [name for name, flag in (("avx512", "avx512f"), ("avx2", "avx2")) if flag in flags] + ["scalar"]
    out.append(Finding("machine", "cpu", OK, f"{cpu_model()} ({platform.machine()}); instruction sets the module "
                                              f"can use: {', '.join(isas)}"))
    logical, physical = os.cpu_count() or 1, psutil.cpu_count(logical=False) or 1
    out.append(Finding("machine", "cores", OK if physical >= 4 else WARN,
                       f"{physical} physical, {logical} logical" + ("" if physical >= 4 else
                                                                   "; the CPU paths and benches will be slow")))
    mem = psutil.virtual_memory()
    out.append(Finding("machine", "memory", OK if mem.total >= 8e9 else WARN,
                       f"{mem.total / 1e9:.1f} GB, {mem.available / 1e9:.1f} GB available"))
    build = f"torch {torch.__version__}" + (f", CUDA {torch.version.cuda}" if torch.version.cuda else ", CPU-only build")
    build += f", {torch.get_num_threads()} threads"
    out.append(Finding("machine", "torch", OK, build))
    try:
        out.append(Finding("machine", "c++ compiler", OK, check_compiler()))
    except RuntimeError as exc:
        out.append(Finding("machine", "c++ compiler", WARN, str(exc)))
    return out


def cpu_module(build: bool) -> list[Finding]:
    """The compiled CPU module: builds (cached) and passes its self-check against the torch reference, or why
    not (the offload backend then runs the pure-torch twin, slower; its kernel benches are skipped)."""
    if not build:
        return [Finding("cpu module", "build", WARN, "not checked (--no-build)")]
    from magicpig import cpu

    fallback = "; the offload backend falls back to the pure-torch twin (slower) and the kernel benches fail"
    start = time.perf_counter()
    try:
        cpu.load()
        variants = cpu.supported_isas()
    except (RuntimeError, OSError, ImportError) as exc:
        return [Finding("cpu module", "build", WARN, f"does not build: {str(exc).splitlines()[0]}{fallback}")]
    out = [Finding("cpu module", "build", OK, f"built ({time.perf_counter() - start:.1f} s, cached); variants "
                                               f"{', '.join(variants)}, in use {cpu.isa()}")]
    try:
        errors = cpu.self_check()
    except RuntimeError as exc:
        return out + [Finding("cpu module", "self-check", WARN, f"FAILED: {exc}{fallback}")]
    worst = max(errors.values()) if errors else 0.0
    return out + [Finding("cpu module", "self-check", OK, f"max error vs the torch reference {worst:.1e}")]


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def model(name: str) -> Finding:
    """Is ``name`` present (or installable without a download), its size and context, read from headers."""
    from magicpig import model_parts
    from magicpig.gguf_header import gguf_facts
    from magicpig.models import ASSEMBLED, EMBEDDED, embedded_gguf_path, model_facts

    try:
        if name == EMBEDDED:
            path = embedded_gguf_path()
            return Finding("model", name, OK, f"{path} ({_size(path) / 1e6:.0f} MB), context "
                                              f"{gguf_facts(path)['context']} tokens")
        if name in ASSEMBLED:
            target = model_parts.target_path(name)
            entry = model_parts.assembled_model(name)
            if target.is_file():
                return Finding("model", name, OK, f"{target} ({_size(target) / 1e6:.0f} MB), context "
                                                  f"{gguf_facts(target)['context']} tokens")
            model_parts.part_paths(entry)  # MissingPartsError (a FileNotFoundError) naming what to install
            return Finding("model", name, OK, f"parts installed; assembled into {target} on first use "
                                              f"({entry.size / 1e6:.0f} MB)")
        facts, where = model_facts(name)
        if facts is None:
            return Finding("model", name, WARN, where)
        local = Path(name).expanduser()
        size = f"{_size(local) / 1e6:.0f} MB, " if local.exists() else ""
        return Finding("model", name, OK, f"{size}context {facts['context']} tokens ({where})")
    except (ValueError, OSError) as exc:
        return Finding("model", name, FAIL, str(exc))


def _hub_id(url: str) -> str:
    """'owner/name' of a Hugging Face dataset URL, else ''."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    bits = parts.path.strip("/").split("/")
    if parts.netloc.endswith("huggingface.co") and len(bits) >= 3 and bits[0] == "datasets":
        return f"{bits[1]}/{bits[2]}"
    return ""


def _sources(task: str) -> list[tuple[str, str | None]]:
    """(url, cache file name or None) of the files ``task`` fetches when no --data file is given."""
    from magicpig_tasks.registry import get_task

    if task in ("ruler/qa_1", "ruler/qa_2"):
        from magicpig_tasks.ruler import qa

        return [(qa.SQUAD_URL, "squad_dev_v2.0.json")] if task == "ruler/qa_1" else [
            (qa.HOTPOT_URL, "hotpot_dev_distractor_v1.json")]
    url = getattr(get_task(task), "source_url", None)
    return [(url, None)] if url else []


def data(task: str, given: str | None) -> Finding:
    """The data of one task: the configured file, or the cached download, or what to give to run it."""
    from magicpig_tasks import download

    if given:
        ok = Path(given).is_file()
        return Finding("data", task, OK if ok else SKIP,
                       f"{given}" if ok else f"configured file {given} does not exist; {task} is skipped")
    missing = []
    for url, name in _sources(task):
        dest = download.cache_dir() / (name or download.cache_name(url))
        if not dest.is_file():
            missing.append((url, dest))
    if not missing:
        return Finding("data", task, OK, "cached in " + str(download.cache_dir()))
    url, _ = missing[0]
    hub = _hub_id(url)
    source = f"hub dataset {hub}" if hub else url
    give = f"or give a file: magicpig eval --data {task}=PATH (pipeline: `data: {{{task}: PATH}}` in the config)"
    switch = download.offline_switch()
    if switch:
        return Finding("data", task, SKIP, f"not cached and offline ({switch}): skipped; download {source} {give}")
    return Finding("data", task, WARN, f"not cached: fetched from {source} on first use (skipped without network); "
                                       f"{give}")


def gpu() -> Finding:
    import torch

    if not torch.cuda.is_available():
        return Finding("gpu", "cuda", WARN, "no CUDA GPU: every job runs on the CPU (the cpu preset's design); "
                                            "GPU throughput rows are not measured")
    props = torch.cuda.get_device_properties(0)
    return Finding("gpu", "cuda", OK, f"{torch.cuda.device_count()} x {props.name}, "
                                      f"{props.total_memory / 2**30:.0f} GiB, capability {props.major}.{props.minor}")


def job_time(results: Path, preset: str, preset_config: dict, reference_root: Path | None = None) -> Finding:
    """The preset's job time: as last measured on this machine (Snakemake's benchmark files under
    ``results``), the best estimate of a full rerun; on a fresh clone, the committed reference run's
    (``reference_runs``), saying on which machine it was measured and whether its config equals this one."""
    from magicpig.harness import reference_runs
    from magicpig.harness.results_tree import read_job_times

    try:
        df = read_job_times(results)
    except (ValueError, OSError) as exc:
        return Finding("time", "job time", WARN, f"benchmark files under {results} unreadable: {exc}")
    if not df.empty:
        return Finding("time", "job time", OK, f"{df['seconds'].sum() / 3600:.2f} h over {len(df)} jobs, measured "
                                               f"by the last run into {results} (longest job "
                                               f"{df['seconds'].max() / 60:.0f} min); a rerun into it redoes only "
                                               "what is missing")
    root = reference_runs.ROOT if reference_root is None else reference_root
    try:
        folder = reference_runs.latest(preset, root)
        ref = reference_runs.read(folder) if folder is not None else None
    except (ValueError, OSError) as exc:
        return Finding("time", "job time", WARN, f"no measured job times under {results}; the reference run is "
                                                 f"unreadable: {exc}")
    if ref is None:
        return Finding("time", "job time", OK, f"no measured job times yet ({results / 'benchmarks'} is empty, "
                                               f"no reference run of {preset} under {root})")
    same = ref.config_sha256 == reference_runs.config_digest(preset_config)
    cores = f"{ref.cores} cores" if ref.cores else "cores unknown"
    return Finding("time", "job time", OK if same else WARN,
                   f"about {ref.job_seconds / 3600:.2f} h over {ref.jobs} jobs: the reference run {ref.folder} "
                   f"({ref.cpu_model}, {cores}, {ref.date}); "
                   + ("its preset config equals this one" if same else
                      "its preset config differs from this one, so the time is a rough guide")
                   + "; a slower or busier machine takes longer")


def preset_tasks(p: dict) -> dict[str, list[str]]:
    """Block -> the accuracy tasks a (validated) preset runs."""
    from magicpig.harness.pipeline_config import ruler_task_samples

    def runs(block: str) -> bool:
        return block in p and (p[block].get("samples") == "all" or (p[block].get("samples") or 0) > 0)

    out: dict[str, list[str]] = {}
    ruler = [t for t, n in ruler_task_samples(p["ruler"]).items() if n > 0]
    if ruler:
        names = ruler + p.get("ablations", {}).get("tasks", []) + p.get("sweeps", {}).get("tasks", [])
        out["ruler"] = [f"ruler/{t}" for t in dict.fromkeys(names)]
    if runs("longbench"):
        out["longbench"] = [f"longbench/{t}" for t in p["longbench"]["tasks"]]
    if runs("gsm8k"):
        out["gsm8k"] = ["gsm8k"]
    if runs("lm_eval"):
        out["lm_eval"] = list(p["lm_eval"]["tasks"])
    if runs("reasoning"):
        out["reasoning"] = [f"infini_igsm/{t}" for t in p["reasoning"]["tasks"]]
    return {k: v for k, v in out.items() if v}


def load_config(path: Path, preset: str | None, warn: Callable[[str], None]) -> tuple[dict | None, str, list[str]]:
    """(the validated preset or None, its name, the config's problems)."""
    import yaml

    from magicpig.harness.pipeline_config import validate_pipeline_config

    if not path.is_file():
        raise FileNotFoundError(f"config: {path} does not exist (give --config PATH)")
    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(config, dict):
        raise ValueError(f"config: {path} holds a YAML {type(config).__name__}, not a mapping")
    name = preset or config.get("preset")
    if preset is not None:
        config["preset"] = preset
    if name not in (config.get("presets") or {}):
        return None, str(name), [f"preset {name!r} is not one of {sorted(config.get('presets') or {})}"]
    try:
        config = validate_pipeline_config(config, warn=warn)
    except ValueError as exc:
        return None, name, str(exc).splitlines()[1:] or [str(exc)]
    p = config["presets"][name]
    p["_data"] = dict(config.get("data") or {})
    return p, name, []


def diagnose(config_path: Path, preset: str | None, *, build: bool = True, results: Path | None = None,
             reference_root: Path | None = None) -> tuple[str, list[Finding], list[str]]:
    """(preset name, every finding, the summary lines: what runs, what is skipped and why). ``results``: the
    preset's results folder (default ``results/<preset>``), for its measured job times; ``reference_root``: the
    folder of reference runs (default ``figures/reference``), for an estimate where none are measured."""
    warnings: list[str] = []
    p, name, problems = load_config(config_path, preset, warnings.append)
    findings = machine() + cpu_module(build) + [gpu()]
    findings += [Finding("config", "warning", WARN, w) for w in warnings]
    if p is None:
        findings += [Finding("config", f"preset {name}", FAIL, line.lstrip("- ")) for line in problems]
        return name, findings, [f"preset {name} cannot run: its config has {len(problems)} problem(s)"]
    findings.append(model(p["model"]))
    findings.append(job_time(results or Path("results") / name, name, p, reference_root))
    blocks = preset_tasks(p)
    from magicpig_tasks.registry import DATA_TASKS

    for tasks in blocks.values():
        for t in tasks:
            if t in DATA_TASKS:
                findings.append(data(t, p["_data"].get(t)))
    status = {f.name: f.status for f in findings if f.area == "data"}
    summary = []
    for block, tasks in blocks.items():
        skipped = [t for t in tasks if status.get(t) == SKIP]
        maybe = [t for t in tasks if status.get(t) == WARN]
        line = f"{block}: runs {len(tasks) - len(skipped)} of {len(tasks)} tasks"
        if skipped:
            line += f"; skips {', '.join(skipped)} (data, see above)"
        if maybe:
            line += f"; downloads the data of {', '.join(maybe)} first"
        summary.append(line)
    if any(f.status == FAIL for f in findings):
        summary.append(f"preset {name} cannot run: " + "; ".join(f"{f.area} {f.name}: {f.status}"
                                                                  for f in findings if f.status == FAIL))
    elif blocks and all(status.get(t) == SKIP for ts in blocks.values() for t in ts):
        summary.append(f"preset {name} cannot run: every accuracy task it lists is skipped")
        findings.append(Finding("config", f"preset {name}", FAIL, "every accuracy task is skipped"))
    else:
        summary.append(f"preset {name} can run (backend {p.get('backend')}, model {p['model']})")
    return name, findings, summary


def render(name: str, findings: list[Finding], summary: list[str]) -> str:
    lines = [f"magicpig doctor: preset {name}", ""]
    lines += [f"[{f.status:4}] {f.area:10} {f.name}: {f.detail}" for f in findings]
    return "\n".join(lines + ["", "summary:"] + [f"  {s}" for s in summary]) + "\n"
