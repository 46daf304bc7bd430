"""``magicpig compare RUN_A [RUN_B]``: is method A better than (or as good as) method B on my runs?

Two results folders of ``magicpig eval`` (one method each, or the one named by ``--method-a`` / ``--method-b``),
or two methods of one folder (``RUN_A`` alone with both ``--method-a`` and ``--method-b``). Prints a Markdown
table per task and length (the paired difference with the claims table's interval, n, the minimum
detectable effect, the verdict at ``--margin``); ``--csv PATH`` writes the same rows. Refuses runs whose
samples or provenance differ, naming the difference (see ``magicpig.harness.compare``).
"""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("compare", help="paired comparison of two runs (or two methods of one run) with verdicts",
                       description="A - B per task and length, paired by sample id, with the claims table's "
                                   "intervals, n, minimum detectable effect and a verdict at --margin.")
    p.add_argument("run_a", metavar="RUN_A", help="results folder of magicpig eval (--out)")
    p.add_argument("run_b", metavar="RUN_B", nargs="?", default=None,
                   help="second results folder (default: RUN_A, with --method-a and --method-b)")
    p.add_argument("--method-a", default=None, help="method spec of A (needed when RUN_A holds several)")
    p.add_argument("--method-b", default=None, help="method spec of B (needed when RUN_B holds several)")
    p.add_argument("--margin", type=float, default=None,
                   help="points: A is non-inferior when the interval of A - B lies at or above -MARGIN "
                        "(with --superiority: superior when it lies above +MARGIN); no verdict without it")
    p.add_argument("--superiority", action="store_true", help="test A > B + margin instead of non-inferiority")
    p.add_argument("--level", type=float, default=0.95, help="two-sided interval level (default 0.95)")
    p.add_argument("--min-samples", type=int, default=1,
                   help="pairs a verdict needs per row (default 1: the intervals stay honest at small n)")
    p.add_argument("--task", action="append", default=[], help="only these tasks (repeatable, or ',' separated)")
    p.add_argument("--length", action="append", default=[], help="only these lengths (repeatable, or ',' separated)")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="compare runs whose samples or provenance differ (on the common ids), warning about each")
    p.add_argument("--csv", default=None, metavar="PATH", help="also write the rows as CSV")
    p.add_argument("--disagreements", default=None, metavar="DIR",
                   help="write DIR/<task>_<length>.csv: the samples whose scores differ, with both answers")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys
    from pathlib import Path

    from magicpig.atomic_io import write_text_atomic
    from magicpig.harness.commands.eval import _lengths
    from magicpig.harness.compare import Side, compare, to_csv, to_markdown

    if args.run_b is None and not (args.method_a and args.method_b):
        raise ValueError("method: with one results folder give both --method-a and --method-b (two methods of it)")
    if args.min_samples < 1:
        raise ValueError(f"min-samples: expected an integer >= 1, got {args.min_samples}")
    tasks = [t.strip() for v in args.task for t in v.split(",") if t.strip()]
    result = compare(Side(Path(args.run_a), args.method_a, "run A"),
                     Side(Path(args.run_b or args.run_a), args.method_b, "run B"),
                     margin=args.margin, superiority=args.superiority, level=args.level, min_n=args.min_samples,
                     allow_mismatch=args.allow_mismatch, tasks=tasks or None,
                     lengths=_lengths(args.length) or None)
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(to_markdown(result), end="")
    if args.csv:
        write_text_atomic(args.csv, to_csv(result))
    if args.disagreements:
        from magicpig.harness.disagreements import write

        print("\n| task | length | samples where A and B score differently | file |\n|---|---|---|---|")
        for unit, path, count in write(result.units, Path(args.disagreements)):
            print(f"| {unit.task} | {unit.length} | {count} of {len(unit.ids)} | {path} |")
    return 0
