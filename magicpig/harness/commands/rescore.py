"""``magicpig rescore RESULTS``: score the stored predictions again with the current scorers and rewrite each
metrics.json in one step, never touching predictions.jsonl (see ``magicpig.harness.rescore``)."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("rescore", help="re-score stored predictions with the current scorers (no generation)",
                       description="Rewrites every metrics.json under RESULTS from the predictions.jsonl beside "
                                   "it; the predictions are only read.")
    p.add_argument("results", metavar="RESULTS", help="results folder of magicpig eval (--out)")
    p.add_argument("--metric", default=None,
                   help="score by this one of a task's further scores (CoQA: em; GSM8K: flexible) instead of its "
                        "own metric")
    p.add_argument("--task", action="append", default=[], help="only these tasks (repeatable, or ',' separated)")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from magicpig.harness.rescore import rescore

    tasks = [t.strip() for v in args.task for t in v.split(",") if t.strip()]
    done = rescore(Path(args.results), args.metric, tasks or None)
    print("| task | length | method | samples | changed | score before | score now |")
    print("|---|---|---|---|---|---|---|")
    for r in done:
        before = "—" if r.old is None else f"{r.old:.2f}"
        print(f"| {r.task} | {r.length} | {r.method} | {r.samples} | {r.changed} | {before} | {r.new:.2f} |")
    print(f"{len(done)} metrics.json rewritten; predictions.jsonl unchanged")
    return 0
