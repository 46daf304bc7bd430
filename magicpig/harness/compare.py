"""Paired comparison of two evaluation runs (``magicpig compare``), with the claims table's own statistics.

Run A and run B are one method each in a results folder written by ``magicpig eval`` (two folders, or two
methods of one folder). At every (task, length) both have, the samples are paired by id and the difference
A - B of their mean scores gets the interval the claims table builds (``stats.paired.task_difference``:
Newcombe's paired interval for 0/100 scores, the hulled bootstrap for graded ones); tasks of one length are
averaged with MOVER (``stats.paired.task_average``). Each row states the n it rests on, the minimum
detectable effect (``stats.detectable.from_interval``) and, given a margin, a verdict made by the claims
table's ``stats.verdicts.decide``:

* non-inferiority (default): A is non-inferior when the whole interval of A - B lies at or above -margin,
  inferior when it lies wholly below, otherwise inconclusive;
* ``superiority``: A is superior when the whole interval lies above +margin, not superior when it lies at or
  below it, otherwise inconclusive.

Before any number is computed the two runs are checked to be comparable: the same sample ids at every
(task, length), the same per-sample provenance (``magicpig.harness.provenance``: prompt hash, template,
truncation, decoding) and the same model, setup, metric and task settings in metrics.json. A difference is
refused with a ``ValueError`` naming it, unless ``allow_mismatch``, which pairs the common ids and returns
every difference as a warning.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from magicpig.harness.disagreements import PairedUnit
from magicpig.harness.provenance import differences as provenance_differences
from magicpig.harness.results_tree import canonical, collect_metrics, prediction_rows
from magicpig.harness.stats.bootstrap import Interval
from magicpig.harness.stats.detectable import from_interval
from magicpig.harness.stats.paired import interval_level, task_average, task_difference
from magicpig.harness.stats.verdicts import NOT_REPRODUCED, REPRODUCED, decide

# metrics.json fields two compared runs must share (the method and what it costs are what is compared)
RUN_FIELDS = ("model", "setup", "metric", "task_settings")
COLUMNS = ["task", "length", "n", "mean_a", "mean_b", "difference", "lower", "upper", "how", "mde", "verdict",
           "note"]


@dataclass
class Side:
    """One side of a comparison: a results folder and the method chosen in it (None: its only method)."""
    root: Path
    method: str | None = None
    label: str = ""


@dataclass
class Comparison:
    """The rows of a comparison (``COLUMNS``), what it was asked, and the warnings it raised."""
    a: str
    b: str
    level: float
    margin: float | None
    superiority: bool
    rows: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    units: list[PairedUnit] = field(default_factory=list)  # the paired rows (``disagreements``)


def _metrics_of(side: Side) -> dict[tuple[str, int], dict]:
    """(task, length) -> {path, metrics} of the chosen method of one side; refuses an unknown or ambiguous
    method, naming the methods the folder holds."""
    if not side.root.is_dir():
        raise FileNotFoundError(f"{side.label}: results folder {side.root} does not exist")
    df = collect_metrics(side.root)
    df = df[df.status != "skipped"]
    if df.empty:
        raise ValueError(f"{side.label}: no metrics.json of a run under {side.root}")
    present = sorted(set(df.method))
    if side.method is None:
        if len(present) != 1:
            raise ValueError(f"{side.label}: {side.root} holds {len(present)} methods ({', '.join(present)}); "
                             f"name one with --method-{side.label[-1].lower()}")
        wanted = present[0]
    else:
        wanted = canonical(side.method)
    chosen = df[(df.method == wanted) | (df.method_written == side.method) | (df.method_effective == wanted)]
    if chosen.empty:
        raise ValueError(f"{side.label}: method {side.method!r} has no results under {side.root}; "
                         f"methods there: {', '.join(present)}")
    side.label = f"{side.label} ({side.root}: {side.method or wanted})"
    out: dict[tuple[str, int], dict] = {}
    for r in chosen.itertuples():
        key = (str(r.task), int(r.length))
        if key in out:
            raise ValueError(f"{side.label}: two results for {key[0]} at {key[1]} ({out[key]['path']} and "
                             f"{r.path}); give the method as written")
        out[key] = {"path": Path(r.path), "metrics": json.loads(Path(r.path).read_text(encoding="utf-8"))}
    return out


def _scores(rows: dict[str, dict], metrics: dict) -> dict[str, float]:
    """Per-sample scores: those of a ``magicpig rescore`` (in metrics.json) when there are, else the rows'."""
    rescored = (metrics.get("rescored") or {}).get("sample_scores")
    if isinstance(rescored, dict):
        return {i: float(s) for i, s in rescored.items() if i in rows}
    return {i: float(r["score"]) for i, r in rows.items()
            if isinstance(r.get("score"), (int, float)) and not isinstance(r.get("score"), bool)}


def _examples(ids: set[str]) -> str:
    shown = sorted(ids)[:3]
    return ", ".join(repr(i) for i in shown) + (", ..." if len(ids) > 3 else "")


def _unit_problems(where: str, run_a: dict, run_b: dict, rows_a: dict, rows_b: dict,
                   a: dict[str, float], b: dict[str, float]) -> list[str]:
    """Why the two runs of one (task, length) are not comparable (empty: they are)."""
    problems = []
    only_a, only_b = set(a) - set(b), set(b) - set(a)
    if only_a or only_b:
        problems.append(f"{where}: samples do not pair by id: {len(only_a)} only in A"
                        + (f" ({_examples(only_a)})" if only_a else "") + f", {len(only_b)} only in B"
                        + (f" ({_examples(only_b)})" if only_b else ""))
    for key in RUN_FIELDS:
        va, vb = run_a["metrics"].get(key), run_b["metrics"].get(key)
        if va != vb:
            problems.append(f"{where}: {key} differs: A {json.dumps(va, sort_keys=True)} vs B "
                            f"{json.dumps(vb, sort_keys=True)}")
    diffs, _ = provenance_differences(rows_a, rows_b, [i for i in a if i in b])
    problems += [f"{where}: provenance {d}" for d in diffs]
    return problems


def verdict(iv: Interval, margin: float | None, *, superiority: bool, min_n: int) -> str:
    """The verdict of A - B at ``margin`` (module docstring), with its reason when inconclusive."""
    if margin is None:
        return ""
    if superiority:
        v = decide(iv, margin, min_n=min_n, above=True, strict=True)
        words = {REPRODUCED: "A superior", NOT_REPRODUCED: "A not superior"}
    else:
        v = decide(iv, -margin, min_n=min_n, above=True, strict=False)
        words = {REPRODUCED: "A non-inferior", NOT_REPRODUCED: "A inferior"}
    return words.get(v.status) or f"inconclusive ({v.reason})"


def compare(a: Side, b: Side, *, margin: float | None = None, superiority: bool = False, level: float = 0.95,
            min_n: int = 1, allow_mismatch: bool = False, tasks: list[str] | None = None,
            lengths: list[int] | None = None) -> Comparison:
    """Compare method ``a`` with method ``b`` (module docstring); ``tasks`` / ``lengths`` narrow the units."""
    if margin is not None and not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin: expected a number of points >= 0, got {margin}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: expected a number in (0, 1), got {level}")
    a.label, b.label = a.label or "run A", b.label or "run B"
    runs_a, runs_b = _metrics_of(a), _metrics_of(b)
    keys = sorted(set(runs_a) & set(runs_b))
    keys = [k for k in keys if (not tasks or k[0] in tasks) and (not lengths or k[1] in lengths)]
    if not keys:
        raise ValueError(f"no (task, length) has results of both runs: A has {sorted(runs_a)}, B has "
                         f"{sorted(runs_b)}" + (f" (narrowed to tasks {tasks}, lengths {lengths})"
                                               if tasks or lengths else ""))
    out = Comparison(a.label, b.label, level, margin, superiority)
    for side, runs in (("A", runs_a), ("B", runs_b)):
        left = sorted(set(runs) - set(keys))
        if left and not (tasks or lengths):
            out.warnings.append(f"only in {side}, not compared: " + ", ".join(f"{t}@{n}" for t, n in left))
    units, problems, unchecked = [], [], 0
    for task, length in keys:
        ra, rb = runs_a[(task, length)], runs_b[(task, length)]
        rows_a, rows_b = prediction_rows(ra["path"]), prediction_rows(rb["path"])
        sa, sb = _scores(rows_a, ra["metrics"]), _scores(rows_b, rb["metrics"])
        problems += _unit_problems(f"{task}@{length}", ra, rb, rows_a, rows_b, sa, sb)
        common = [i for i in sa if i in sb]
        unchecked += provenance_differences(rows_a, rows_b, common)[1]
        units.append((task, length, {i: sa[i] for i in common}, {i: sb[i] for i in common}))
        out.units.append(PairedUnit(task, length, common, sa, sb, rows_a, rows_b))
    if problems and not allow_mismatch:
        raise ValueError("the two runs are not comparable (--allow-mismatch pairs them anyway, with warnings):\n  "
                         + "\n  ".join(problems))
    out.warnings += [f"MISMATCH {p}" for p in problems]
    if unchecked:
        out.warnings.append(f"{unchecked} pair(s) have no provenance recorded (rows of an older magicpig eval): "
                            "their prompts, templates and decoding could not be checked")
    with interval_level(level):
        by_length: dict[int, list] = {}
        for task, length, xa, xb in units:
            if not xa:
                out.rows.append(_row(task, length, None, margin, superiority, min_n, "no paired samples"))
                continue
            iv = task_difference(task, xa, xb)
            by_length.setdefault(length, []).append(iv)
            out.rows.append(_row(task, length, iv, margin, superiority, min_n, ""))
        for length, parts in sorted(by_length.items()):
            if len(parts) > 1:
                avg = task_average(parts)
                row = _row(f"average of {len(parts)} tasks", length, None, margin, superiority, min_n,
                           "MOVER over tasks")
                row.update(n=avg.n, mean_a=sum(p.other for p in parts) / len(parts),
                           mean_b=sum(p.base for p in parts) / len(parts), difference=avg.value, lower=avg.lo,
                           upper=avg.hi, how="MOVER", mde=from_interval(avg.lo, avg.hi),
                           verdict=verdict(avg, margin, superiority=superiority, min_n=min_n))
                out.rows.append(row)
    return out


def _row(task, length, iv, margin, superiority, min_n, note) -> dict:
    nan = float("nan")
    if iv is None:
        return dict(task=task, length=length, n=0, mean_a=nan, mean_b=nan, difference=nan, lower=nan, upper=nan,
                    how="", mde=nan, verdict="", note=note)
    whole = Interval(iv.value, iv.lo, iv.hi, iv.n)
    return dict(task=task, length=length, n=iv.n, mean_a=iv.other, mean_b=iv.base, difference=iv.value,
                lower=iv.lo, upper=iv.hi, how=iv.how, mde=from_interval(iv.lo, iv.hi),
                verdict=verdict(whole, margin, superiority=superiority, min_n=min_n), note=note)


def _num(x, digits: int = 1) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def to_markdown(c: Comparison) -> str:
    """The comparison as a Markdown table with a heading that says what was compared and how."""
    pct = f"{100 * c.level:g}%"
    if c.margin is None:
        test = "no verdict (give --margin)"
    elif c.superiority:
        test = f"superiority of A over B by more than {c.margin:g} points"
    else:
        test = f"non-inferiority of A to B at a margin of {c.margin:g} points"
    lines = [f"# {c.a} vs {c.b}", "",
             f"A - B in score points, paired by sample id; {pct} intervals as in the claims table; test: {test}. "
             "MDE: the smallest true difference from the margin this n decides with 80% power.", "",
             f"| task | length | n | A | B | A - B | {pct} interval | how | MDE | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in c.rows:
        interval = "—" if r["n"] == 0 else f"[{_num(r['lower'])}, {_num(r['upper'])}]"
        mde = "—" if r["n"] == 0 else f"±{_num(r['mde'])}"
        lines.append(f"| {r['task']} | {r['length']} | {r['n']} | {_num(r['mean_a'])} | {_num(r['mean_b'])} | "
                     f"{_num(r['difference'])} | {interval} | {r['how'] or r['note']} | {mde} | "
                     f"{r['verdict'] or '—'} |")
    if c.warnings:
        lines += [""] + [f"> warning: {w}" for w in c.warnings]
    return "\n".join(lines) + "\n"


def to_csv(c: Comparison) -> str:
    """The comparison's rows as CSV (``COLUMNS``), numbers at full precision."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in c.rows:
        writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()})
    return buf.getvalue()
