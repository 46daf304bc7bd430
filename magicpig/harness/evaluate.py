"""The accuracy-evaluation runner behind ``magicpig eval``.

For each (task, length) it builds the task's samples once, and for each sample still missing for some
requested method it prefills the prompt ONCE and decodes every missing method from that prefill. Results go
to::

    OUT/<task>/<length>/<method dir>/predictions.jsonl   one JSON line per finished sample
    OUT/<task>/<length>/<method dir>/metrics.json        the aggregate (rewritten after every run)

A row holds the prediction, its references, score and cost, the sample's ``meta`` (what ``magicpig rescore``
scores from again) and its ``provenance`` (prompt hash, template, truncation, decoding, which ``magicpig
compare`` checks; ``magicpig.harness.provenance``).

``<task>`` keeps its slash (``ruler/cwe`` -> ``ruler/cwe/``). ``<method dir>`` is the method spec as the user
wrote it (spaces removed) made filesystem-safe by ``method_dirname`` (``magicpig.methods.spec_names``):
':' -> '@', ',' -> '+', '=' -> '-', '/' -> '.', any other character outside [A-Za-z0-9._+@-] -> '_'.
Example: ``magicpig:K=10,L=150`` -> ``magicpig@K-10+L-150``. Two different methods never share a folder.

Resuming: a sample whose id is already in predictions.jsonl is not redone (a torn or foreign line is skipped
with a warning naming file and line: ``magicpig.harness.predictions``). The rows of a method folder are only
reused by a run with the same settings: every setting that can change a row (model, effective method spec,
setup, backend, max_new_tokens, seed, length, device type, the task's data file and its whole ``describe()``,
and any other EvalConfig field not listed in ``_NOT_RESULT_FIELDS``; see ``run_settings``) is stored in
``<method dir>/settings.json`` before the first row. A run whose settings differ from the stored ones (or that
finds rows without stored settings) is refused before any work, with a message naming the differing settings:
use another ``--out``, or ``--overwrite`` to discard those folders' rows and run them again. Rows made with
different settings are never mixed.

Concurrency: a run holds ``OUT/<task>/<length>/eval.lock`` for each (task, length) it writes (a flock
that dies with its process, see ``magicpig.pidlock``); a second run on the same (task, length) and
``--out`` is refused at once, naming the pid of the first. Runs on other tasks or lengths of the same
``--out`` (one pipeline job each) go on side by side.

Ctrl-C: rows already written stay; ``run_eval`` raises ``EvalInterrupted`` (a KeyboardInterrupt) saying
how many samples are saved, and the next run resumes.

Setup A prefills context + question; setup B prefills the context and feeds the question through the
method's decode path (setup A is the paper's evaluation, Sec. 5). Task-recommended overrides (GSM8K: magicpig ``local=24``) are applied
to specs that do not set the field; both the written spec and the effective one are recorded. A task whose
data is unavailable (``TaskUnavailable``) is reported as skipped, with the reason, in its metrics.json
(``status: "skipped"``) and on stderr; it is retried on the next run.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from magicpig.atomic_io import write_text_atomic
from magicpig.backends import DEFAULT_BACKEND, check_backend_limits, effective_backend, resolve_backend
from magicpig.decode_weights import check_weight_format
from magicpig.harness.argcheck import check_device, check_seed, check_writable_dir
from magicpig.harness.eval_checks import check_generated_lengths, check_task_data, model_context_length
from magicpig.harness.machine import machine_record
from magicpig.harness.predictions import Predictions
from magicpig.harness.progress import heartbeat, progress
from magicpig.harness.provenance import sample_provenance, unit_provenance
from magicpig.harness.result_files import METRICS, PREDICTIONS, SETTINGS
from magicpig.harness.results_paths import method_dir, unit_dir
from magicpig.methods.registry import ParsedSpec, read_spec
from magicpig.methods.spec_names import check_dirnames, read_methods
from magicpig.options import SETUPS
from magicpig.pidlock import LockHeld, PidLock
from magicpig.prefill_dtype import DEFAULT_PREFILL_DTYPE, resolve_prefill_dtype

MAX_LENGTH = 1 << 20  # tokens: beyond any model's context; a bigger value is a typo, refused before any work
MAX_SAMPLES = 10_000  # per (task, length): beyond any benchmark's size (10M RULER samples took ~21 h to build)
LOCK_FILE = "eval.lock"
# EvalConfig fields that do not change a prediction row (or enter run_settings in another form)
_NOT_RESULT_FIELDS = {"model", "methods", "tasks", "lengths", "samples", "out", "device", "data",
                      "allow_long_context", "progress", "overwrite",
                      "task_settings"}  # in task.describe(), as each task applies them


def effective_method(spec: str | ParsedSpec, overrides: dict[str, dict[str, Any]]):
    """(method, applied) : the parsed spec with the task's overrides for fields the spec leaves unset."""
    parsed = spec if isinstance(spec, ParsedSpec) else read_spec(spec)
    method = parsed.method
    applied = {k: v for k, v in overrides.get(method.name, {}).items() if k not in parsed.given}
    if applied:
        method = dataclasses.replace(method, **applied)
    return method, applied


@dataclass
class EvalConfig:
    """Everything one ``magicpig eval`` run needs; validated by ``check`` before any expensive work.

    lengths: target prompt lengths (RULER) or prompt caps (LongBench, GSM8K), in tokens.
    data: task name -> local data file. max_new_tokens: None = each task's own budget.
    prefill_dtype: ``magicpig.prefill_dtype`` (``auto``, ``float32``, ``bfloat16``); ``check`` resolves
    ``auto`` for the run's device, and a bfloat16 prefill is a setting of its own in the resume key.
    overwrite: discard stored rows made with other settings instead of refusing (module docstring).
    A new field that changes results is keyed for resuming by itself; one that does not must be added
    to ``_NOT_RESULT_FIELDS``.
    """

    model: str
    methods: list[str]
    tasks: list[str]
    lengths: list[int]
    samples: int | None  # None ('all'): every record of the task (LongBench, GSM8K)
    out: Path
    seed: int = 0
    setup: str = "A"
    backend: str = DEFAULT_BACKEND
    device: str | None = None
    decode_weights: str = "model"  # magicpig.decode_weights: kernel 4's storage of the decode step's weights
    prefill_dtype: str = DEFAULT_PREFILL_DTYPE  # magicpig.prefill_dtype: the prefill's matmul dtype
    data: dict[str, str] = field(default_factory=dict)
    max_new_tokens: int | None = None
    allow_long_context: bool = False
    progress: bool = True
    overwrite: bool = False
    task_settings: dict[str, Any] = field(default_factory=dict)  # magicpig_tasks.settings (chat_template ...)

    def check(self) -> list[ParsedSpec]:
        """Validate and normalise the fields; returns ``methods`` parsed, each spec once, which is what the
        run passes on (overrides, folders, limits) instead of the text."""
        from magicpig_tasks.registry import DATA_TASKS, expand
        from magicpig_tasks.settings import task_settings

        self.tasks = expand(self.tasks)
        self.task_settings = task_settings(self.task_settings)
        specs = read_methods(self.methods)
        self.methods = [spec.text for spec in specs]
        self.backend = resolve_backend(self.backend)  # 'auto' -> the backend that runs, as keyed and recorded
        check_weight_format(self.decode_weights, "decode_weights")
        for spec in specs:
            check_backend_limits(spec.method, self.backend)
        check_dirnames(specs)
        if self.setup not in SETUPS:
            raise ValueError(f"setup must be one of {', '.join(SETUPS)}, got {self.setup!r}")
        if not self.lengths or any(not isinstance(n, int) or not 64 <= n <= MAX_LENGTH for n in self.lengths):
            raise ValueError(f"length must be integers in [64, {MAX_LENGTH}] tokens, got {self.lengths!r}")
        repeated = sorted({n for n in self.lengths if self.lengths.count(n) > 1})
        if repeated:
            raise ValueError(f"length: {', '.join(map(str, repeated))} given more than once")
        if self.samples is None:
            generated = [t for t in self.tasks if t.startswith("ruler/")]
            if generated:
                raise ValueError(f"samples: 'all' needs tasks with a fixed set of records (longbench/*, gsm8k); "
                                 f"{', '.join(generated)} generate their samples: give a count")
        elif not isinstance(self.samples, int) or not 1 <= self.samples <= MAX_SAMPLES:
            raise ValueError(f"samples must be an integer in [1, {MAX_SAMPLES}] or 'all', got {self.samples!r}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        for name, path in self.data.items():
            if name not in DATA_TASKS:
                raise ValueError(f"data: task {name!r} takes no data file; tasks with data: {', '.join(DATA_TASKS)}")
            if not Path(path).is_file():
                raise FileNotFoundError(f"data: file for {name} does not exist: {path}")
        check_seed(self.seed, "seed")
        check_device(self.device, "device")
        self.prefill_dtype = resolve_prefill_dtype(self.prefill_dtype, _device_type(self.device))
        self.out = check_writable_dir(self.out, "out")
        return specs


def _mean(xs: list[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0


class EvalInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``run_eval``; ``summary`` is the one line to show (rows written so far are kept)."""

    def __init__(self, saved: int, total: int):
        super().__init__(saved, total)
        self.saved, self.total = saved, total
        self.summary = f"interrupted: {saved} of {total} samples saved; rerun to resume"


@dataclass
class _Unit:
    """One (task, length) of a run: its folder and, per method, (spec, effective method, overrides
    applied, folder, settings)."""

    task_name: str
    task: Any
    length: int
    base: Path
    methods: list[tuple[str, Any, dict, Path, dict]]


def _get_task(cfg: EvalConfig, name: str):
    from magicpig_tasks.registry import get_task

    return get_task(name, cfg.data.get(name), cfg.task_settings)


def _model_id(model: str) -> str:
    """A local model path made absolute (the same model named from another folder is the same model)."""
    p = Path(model).expanduser()
    return str(p.resolve()) if p.exists() else model


def _device_type(device: str | None) -> str:
    """``cpu`` / ``cuda`` ...: the type of ``device``, or of the default device (cuda when available)."""
    import torch

    return torch.device(device).type if device else ("cuda" if torch.cuda.is_available() else "cpu")


def run_settings(cfg: EvalConfig, task_name: str, task, length: int, method) -> dict:
    """Every setting that can change a prediction row of (task, length, method), as stored in
    settings.json (JSON-normalised, so it compares equal to what is read back)."""
    settings = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in _NOT_RESULT_FIELDS}
    if settings["decode_weights"] == "model":
        del settings["decode_weights"]  # the exact decode: keyed as rows stored before the field existed
    if settings["prefill_dtype"] == "float32":
        del settings["prefill_dtype"]  # the reference prefill: keyed as rows stored before the field existed
    device = _device_type(cfg.device)
    if settings.get("prefill_dtype") == "bfloat16" and device == "cpu":
        from magicpig.cpu.prefill import KERNEL, prefill_kernel_usable

        if prefill_kernel_usable():
            settings["prefill_attention"] = KERNEL  # kernel 8's rows never mix with SDPA's bfloat16 rows
    data = cfg.data.get(task_name)
    settings.update(model=_model_id(cfg.model), method=method.spec(), length=length, device=device,
                    data=str(Path(data).resolve()) if data else None, task=task.describe())
    return json.loads(json.dumps(settings, default=str, sort_keys=True))


def _plan(cfg: EvalConfig, specs: list[ParsedSpec]) -> list[_Unit]:
    units = []
    for task_name in cfg.tasks:
        task = _get_task(cfg, task_name)
        for length in cfg.lengths:
            base = unit_dir(cfg.out, task_name, length)
            methods = []
            for spec in specs:
                method, applied = effective_method(spec, task.method_overrides)
                methods.append((spec.text, method, applied, method_dir(cfg.out, task_name, length, spec),
                                run_settings(cfg, task_name, task, length, method)))
            units.append(_Unit(task_name, task, length, base, methods))
    return units


def _lock_units(units: list[_Unit]) -> list[PidLock]:
    """Lock every (task, length) folder of the run, or refuse naming the run that holds one."""
    locks: list[PidLock] = []
    try:
        for unit in units:
            unit.base.mkdir(parents=True, exist_ok=True)
            lock = PidLock(unit.base / LOCK_FILE)
            if not lock.try_acquire():
                pid = lock.holder()
                raise LockHeld(f"out: {unit.base} is being written by another magicpig eval "
                               f"({f'pid {pid}' if pid else 'another process'}); wait for it to end or use "
                               "another --out")
            locks.append(lock)
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    return locks


def _differences(stored: dict | None, want: dict) -> list[str]:
    if not isinstance(stored, dict):
        return ["no settings recorded (rows written by an older version)"]

    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    a, b = flat(stored), flat(want)
    missing = object()
    return [f"{k}: {json.dumps(a.get(k)) if k in a else '(unset)'} -> {json.dumps(b.get(k)) if k in b else '(unset)'}"
            for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)]


def _read_settings(path: Path) -> tuple[dict | None, str]:
    """(stored settings, '') from a settings.json; (None, '') when there is none (rows of an older version);
    (None, what is wrong) when it is there but unreadable or not a JSON object (a damaged file)."""
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"
    if not isinstance(stored, dict):
        return None, f"a JSON {type(stored).__name__}, not an object"
    return stored, ""


def _check_settings(cfg: EvalConfig, units: list[_Unit], log: Callable[[str], None]) -> None:
    """Compare each method folder's stored settings with this run's; refuse (or, with ``overwrite``,
    clear) folders holding rows made otherwise; record this run's settings."""
    conflicts: list[tuple[Path, list[str]]] = []
    to_write: list[tuple[Path, dict]] = []
    for unit in units:
        for _, _, _, folder, settings in unit.methods:
            stored, corrupt = _read_settings(folder / SETTINGS.name)
            if stored == settings:
                continue
            rows = Predictions(folder / PREDICTIONS.name, warn=lambda msg: log(f"warning: {msg}")).rows
            if rows and corrupt and not cfg.overwrite:
                raise ValueError(f"out: {folder / SETTINGS.name} is corrupt ({corrupt}); the {len(rows)} prediction "
                                 "row(s) beside it are intact, but the settings that made them cannot be checked. "
                                 "Restore that file (from a backup, or from the run that wrote it), or run into "
                                 "another --out to leave the rows untouched")
            if rows:
                conflicts.append((folder, [f"settings.json corrupt ({corrupt})"] if corrupt
                                  else _differences(stored, settings)))
            to_write.append((folder, settings))
    if conflicts and not cfg.overwrite:
        folder, diffs = conflicts[0]
        more = f" (and {len(conflicts) - 1} more folder(s))" if len(conflicts) > 1 else ""
        raise ValueError(f"out: {folder}{more} holds predictions made with other settings: {'; '.join(diffs)}. "
                         "Use another --out, or --overwrite to discard them and run again")
    for folder, diffs in conflicts:
        log(f"overwriting {folder}: {'; '.join(diffs)}")
        for name in (PREDICTIONS.name, METRICS.name):
            (folder / name).unlink(missing_ok=True)
    for folder, settings in to_write:
        _write_json(folder / SETTINGS.name, settings)


def run_eval(cfg: EvalConfig, *, model=None, tokenizer=None, engine_factory: Callable | None = None,
             log: Callable[[str], None] | None = None) -> list[dict]:
    """Run the evaluation; returns the metrics dict of every (task, length, method), skipped ones included.

    ``model`` / ``tokenizer``: already loaded objects (tests); otherwise ``cfg.model`` is loaded, the model
    only when some sample is still missing. ``engine_factory(model, tokenizer)`` builds the engine.
    Before any model or sample work: the settings are checked, the (task, length) folders locked and
    stored rows matched against this run's settings (see the module docstring). Raises EvalInterrupted
    on Ctrl-C.
    """
    specs = cfg.check()
    log = log or (lambda msg: print(msg, file=sys.stderr))
    units = _plan(cfg, specs)
    tasks = {unit.task_name: unit.task for unit in units}
    check_generated_lengths(cfg, tasks, model_context_length(cfg, model))
    check_task_data(cfg, tasks)
    locks = _lock_units(units)
    built: list[tuple[list, dict]] = []  # (samples, predictions) of the units started, for Ctrl-C's count
    try:
        _check_settings(cfg, units, log)
        return _run_units(cfg, units, model, tokenizer, engine_factory, log, built)
    except KeyboardInterrupt:
        saved = sum(all(s.id in p for p in preds.values()) for samples, preds in built for s in samples)
        total = sum(len(samples) for samples, _ in built) + (cfg.samples or 0) * (len(units) - len(built))
        raise EvalInterrupted(saved, total) from None
    finally:
        for lock in locks:
            lock.release()


def _run_units(cfg, units, model, tokenizer, engine_factory, log, built) -> list[dict]:
    from magicpig_tasks.common import TaskUnavailable

    if tokenizer is None:
        from magicpig.models import load_tokenizer
        tokenizer = load_tokenizer(cfg.model)
    state: dict[str, Any] = {"model": model, "engine": None}

    def engine():
        if state["engine"] is None:
            if state["model"] is None:
                from magicpig.models import load_model
                log(f"loading model {cfg.model} ...")
                with heartbeat(f"loading model {cfg.model}"):  # a line at least every 30 s in a log
                    state["model"], _ = load_model(cfg.model, device=cfg.device)
            if engine_factory is not None:
                state["engine"] = engine_factory(state["model"], tokenizer)
            else:
                from magicpig.engine import Engine
                state["engine"] = Engine(state["model"], tokenizer, backend=cfg.backend,
                                         allow_long_context=cfg.allow_long_context,
                                         decode_weights=cfg.decode_weights, prefill_dtype=cfg.prefill_dtype)
        return state["engine"]

    all_metrics: list[dict] = []
    for unit in units:
        task_name, task, length = unit.task_name, unit.task, unit.length
        methods = [m[:4] for m in unit.methods]
        try:
            count = len(task.records()) if cfg.samples is None else cfg.samples
            samples = task.build(tokenizer, length, count, cfg.seed)
            if not samples:
                raise ValueError(f"{task_name} @ {length}: no sample to run (data: {cfg.data.get(task_name)})")
        except TaskUnavailable as exc:
            built.append(([], {}))
            log(f"SKIPPED {task_name} @ {length}: {exc}")
            for spec, method, applied, folder in methods:
                m = _metrics_skeleton(cfg, task, length, spec, method, applied)
                m.update(status="skipped", reason=str(exc), score=None)
                _write_json(folder / METRICS.name, m)
                all_metrics.append(m)
            continue
        preds = {spec: Predictions(folder / PREDICTIONS.name, warn=lambda msg: log(f"warning: {msg}"))
                 for spec, _, _, folder in methods}
        built.append((samples, preds))
        todo = [s for s in samples if any(s.id not in preds[spec] for spec, *_ in methods)]
        if todo:
            kept = sum(s.id in preds[spec] for s in todo for spec, *_ in methods)
            log(f"{task_name} @ {length}: {len(todo)} of {len(samples)} samples to run "
                f"x {sum(1 for spec, *_ in methods)} methods"
                + (f", resuming: {kept} of their (sample, method) rows kept from an earlier run" if kept else ""))
        eng = engine() if todo else None
        for _, method, _, _ in (methods if hasattr(eng, "check_method") else ()):
            eng.check_method(method)  # e.g. dense_layers beyond the model's layers, before any prefill
        if eng is not None and eng.max_context and not cfg.allow_long_context:
            budget = cfg.max_new_tokens or task.max_new_tokens
            worst = max(s.n_tokens for s in todo) + budget
            if worst > eng.max_context:
                raise ValueError(f"length: {task_name} at {length} needs {worst} tokens (prompt + answer), over "
                                 f"the model's context {eng.max_context}; lower --length or pass "
                                 "--allow-long-context")
        prov = unit_provenance(task, tokenizer, length, cfg.setup)
        bar = progress(todo, f"{task_name}@{length}", cfg.progress)
        try:
            for s in bar:
                _run_sample(cfg, eng, task, s, methods, preds, prov)
        finally:  # on Ctrl-C too, so that the bar is not redrawn after the last message
            getattr(bar, "close", lambda: None)()
        for spec, method, applied, folder in methods:
            m = _metrics(cfg, task, length, spec, method, applied, samples, preds[spec])
            _write_json(folder / METRICS.name, m)
            all_metrics.append(m)
    return all_metrics


def _run_sample(cfg: EvalConfig, eng, task, sample, methods, preds, prov: dict) -> None:
    from magicpig.engine import GenerationConfig

    budget = cfg.max_new_tokens or sample.max_new_tokens
    gen_cfg = GenerationConfig(max_new_tokens=budget, stop=list(sample.stop), do_sample=False, seed=cfg.seed)
    if cfg.setup == "A":
        pre, cont = eng.prefill(sample.prompt_ids), None
    else:
        pre, cont = eng.prefill(sample.context_ids), (list(sample.question_ids) or None)
    for spec, method, applied, folder in methods:
        if sample.id in preds[spec]:
            continue
        per_sample = method.for_sample(sample.id)  # MagicPIG: projections drawn for this sample
        res = eng.decode(pre, per_sample, gen_cfg, continuation_ids=cont)[0]
        row = {"id": sample.id, "prompt_tokens": sample.n_tokens, "prediction": res.text,
               "references": sample.references, "score": task.score(res.text, sample),
               "cost": res.cost, "cost1": res.cost1, "new_tokens": res.new_tokens,
               "stop_reason": getattr(res, "stop_reason", ""), "seconds": res.seconds,
               "prefill_seconds": getattr(pre, "seconds", None), "meta": sample.meta,
               "provenance": sample_provenance(prov, sample, budget)}  # magicpig.harness.provenance
        if "seed" in per_sample.params():
            row["method_seed"] = per_sample.params()["seed"]  # the projection seed this sample used
        decoders = getattr(res, "layer_decoders", None)  # the decoder each layer ran (engines that report it)
        if decoders:
            row["layer_decoders"] = [str(d) for d in decoders]
        scores = task.extra_scores(res.text, sample)
        if scores:
            row["scores"] = scores
        preds[spec].append(row)


def _metrics_skeleton(cfg: EvalConfig, task, length: int, spec: str, method, applied: dict) -> dict:
    return {
        "task": task.name, "length": length, "model": cfg.model, "method": spec,
        "method_effective": method.spec(), "method_name": method.name,
        "parameters": {k: (list(v) if isinstance(v, tuple) else v) for k, v in method.params().items()},
        "overrides_applied": applied, "setup": cfg.setup, "seed": cfg.seed,
        # what ran: offload only for methods with an offload decoder (MagicPIG); the rest ran on reference
        "backend": effective_backend(method.name, cfg.backend), "backend_requested": cfg.backend,
        "prefill_dtype": cfg.prefill_dtype,
        "metric": task.metric, "samples_requested": "all" if cfg.samples is None else cfg.samples,
        "machine": machine_record(),
        "task_settings": task.describe(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _metrics(cfg, task, length, spec, method, applied, samples, preds: Predictions) -> dict:
    rows = [preds.rows[s.id] for s in samples if s.id in preds]
    m = _metrics_skeleton(cfg, task, length, spec, method, applied)
    cost = _mean([r["cost"] for r in rows])
    cost1 = _mean([r["cost1"] for r in rows])
    m.update(
        status="ok" if len(rows) == len(samples) else "partial",
        score=task.aggregate([r["score"] for r in rows]),
        cost=cost, cost1=cost1, total_cost=cost + cost1,
        counts={"samples": len(samples), "scored": len(rows),
                "stopped": sum(r.get("stop_reason") in ("stop", "eos") for r in rows)},
        prompt_tokens_mean=_mean([r["prompt_tokens"] for r in rows]),
        new_tokens_mean=_mean([r["new_tokens"] for r in rows]),
    )
    decoders = [r["layer_decoders"] for r in rows if r.get("layer_decoders")]
    if decoders:  # one list when every sample ran the same decoders (the normal case), else each distinct one
        distinct = [list(d) for d in dict.fromkeys(tuple(d) for d in decoders)]
        m["layer_decoders"] = distinct[0] if len(distinct) == 1 else {"differs_between_samples": distinct}
    extra = [r["scores"] for r in rows if "scores" in r]
    if extra:
        m["scores"] = {k: _mean([e[k] for e in extra]) for k in extra[0]}
    return m


def _write_json(path: Path, obj: dict) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def collect_metrics(out: str | Path) -> list[dict]:
    """Every metrics.json under ``out`` (sorted by task, length, method), for tables and reports."""
    rows = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(Path(out).rglob(METRICS.name))]
    return sorted(rows, key=lambda m: (m.get("task", ""), m.get("length", 0), m.get("method", "")))


def format_table(rows: list[dict]) -> str:
    """A Markdown table: one row per (task, length), one score (cost) column per method."""
    methods = list(dict.fromkeys(m["method"] for m in rows))
    cells: dict[tuple[str, int], dict[str, str]] = {}
    for m in rows:
        score = "skipped" if m.get("status") == "skipped" else (
            f"{m['score']:.1f} ({m['cost']:.3f}, n={m['counts']['scored']})")
        cells.setdefault((m["task"], m["length"]), {})[m["method"]] = score
    lines = ["| task | length | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for (task, length), row in cells.items():
        lines.append(f"| {task} | {length} | " + " | ".join(row.get(x, "-") for x in methods) + " |")
    return "\n".join(lines)
