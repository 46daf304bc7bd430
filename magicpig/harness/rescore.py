"""Re-scoring stored predictions with the current scorers (``magicpig rescore``), without generating again.

For every metrics.json under a results folder (skipped runs aside), each row of the predictions.jsonl beside
it is scored again by its task's ``score`` (or, with ``metric``, by the named entry of ``extra_scores``:
CoQA ``em``, GSM8K ``flexible``) from the row's prediction, references and sample ``meta``; metrics.json is
rewritten in one step (``magicpig.atomic_io``) with the new ``score``, ``scores`` and ``metric``, and a
``rescored`` record: when, which metric, how many samples changed, and the new per-sample scores
(``sample_scores``, which ``magicpig compare`` reads in preference to the rows' own). predictions.jsonl is
only read, never written. The (task, length) folder's eval.lock is held meanwhile, so a running
``magicpig eval`` on it is refused rather than raced.

Rows written before the runner stored the sample ``meta`` are scored with an empty one; a scorer that reads it
(LongBench's classification task reads its class list) may then score differently, and a warning says so.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from magicpig.atomic_io import write_text_atomic
from magicpig.harness.predictions import read_rows
from magicpig.harness.result_files import METRICS, PREDICTIONS
from magicpig.pidlock import LockHeld, PidLock

LOCK_FILE = "eval.lock"  # the runner's (task, length) lock (magicpig.harness.evaluate.LOCK_FILE)


@dataclass(frozen=True)
class Rescored:
    """What re-scoring did to one metrics.json."""
    path: Path
    task: str
    length: int
    method: str
    old: float | None
    new: float
    changed: int
    samples: int


def _task(metrics: dict, where: Path):
    from magicpig_tasks.registry import get_task
    from magicpig_tasks.settings import SETTINGS

    name = metrics.get("task")
    if not isinstance(name, str):
        raise ValueError(f"{where}: field 'task' missing or not a string")
    described = metrics.get("task_settings") or {}
    return get_task(name, settings={k: v for k, v in described.items() if k in SETTINGS})


def score_row(task, row: dict, metric: str | None) -> tuple[float, dict[str, float]]:
    """(score, extra scores) of one stored row by the task's current scorers; ``metric`` picks an extra score
    as the score."""
    from magicpig_tasks.common import Sample

    sample = Sample(id=row["id"], context_ids=[], question_ids=[], references=list(row.get("references") or []),
                    max_new_tokens=0, meta=dict(row.get("meta") or {}))
    prediction = str(row.get("prediction", ""))
    extras = task.extra_scores(prediction, sample)
    if metric is None:
        return float(task.score(prediction, sample)), extras
    if metric not in extras:
        raise ValueError(f"metric: {task.name} has no score {metric!r}; it has "
                         f"{', '.join(extras) or 'only its own score (' + task.metric + ')'}")
    return float(extras[metric]), extras


def rescore_file(metrics_path: Path, metric: str | None = None,
                 warn: Callable[[str], None] | None = None) -> Rescored | None:
    """Re-score one method folder (module docstring); None for a skipped run or one without predictions."""
    warn = warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr))
    metrics_path = Path(metrics_path)
    metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    if not isinstance(metrics, dict):
        raise ValueError(f"{metrics_path}: not a JSON object")
    preds = metrics_path.with_name(PREDICTIONS.name)
    if metrics.get("status") == "skipped" or not preds.is_file():
        return None
    task = _task(metrics, metrics_path)
    rows = read_rows(preds, warn=warn)
    scored = (metrics.get("counts") or {}).get("scored")
    if isinstance(scored, int) and scored != len(rows):
        raise ValueError(f"{metrics_path}: counts.scored is {scored} but {preds.name} holds {len(rows)} rows (a "
                         "later run with fewer samples shares the folder); rerun magicpig eval instead")
    if rows and not any("meta" in r for r in rows.values()):
        warn(f"{preds}: rows carry no sample meta (an older magicpig eval); scored with an empty one")
    new_scores, extras, changed = {}, [], 0
    for sid, row in rows.items():
        score, extra = score_row(task, row, metric)
        new_scores[sid] = score
        extras.append(extra)
        old = row.get("score")
        if not (isinstance(old, (int, float)) and math.isclose(float(old), score, abs_tol=1e-9)):
            changed += 1
    old_score = metrics.get("score")
    metrics["score"] = task.aggregate(list(new_scores.values()))
    metrics["metric"] = metric or task.metric
    if extras and extras[0]:
        metrics["scores"] = {k: sum(e[k] for e in extras) / len(extras) for k in extras[0]}
    metrics["rescored"] = {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "metric": metric,
        "changed_samples": changed, "sample_scores": new_scores}
    write_text_atomic(metrics_path, json.dumps(metrics, indent=2, default=str) + "\n")
    return Rescored(metrics_path, task.name, metrics.get("length"), metrics.get("method", ""), old_score,
                    metrics["score"], changed, len(rows))


def rescore(root: Path, metric: str | None = None, tasks: list[str] | None = None,
            warn: Callable[[str], None] | None = None) -> list[Rescored]:
    """Re-score every method folder under ``root`` (of ``tasks`` only, when given), each under its eval.lock."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"results folder {root} does not exist")
    paths = sorted(root.rglob(METRICS.name))
    if not paths:
        raise ValueError(f"no metrics.json under {root}")
    out = []
    for path in paths:
        if tasks and not any(f"/{t}/" in f"/{path.relative_to(root).as_posix()}" for t in tasks):
            continue
        lock = PidLock(path.parent.parent / LOCK_FILE)
        if not lock.try_acquire():
            raise LockHeld(f"{path.parent.parent} is being written by a magicpig eval; rescore it when that ends")
        try:
            done = rescore_file(path, metric, warn)
        finally:
            lock.release()
        if done is not None:
            out.append(done)
    return out
