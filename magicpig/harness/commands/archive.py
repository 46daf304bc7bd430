"""``magicpig archive --preset NAME``: keep a finished preset's report as a dated reference run under
``figures/reference/<preset>-<date>/`` (``magicpig.harness.reference_runs``): the report, its figures, the
job times and the machine. Never overwrites one; the pipeline never writes there."""
from __future__ import annotations

from magicpig.harness.commands import add_preset_options


def register(sub) -> None:
    p = sub.add_parser("archive", help="keep a finished preset's report as a dated reference run",
                       description="Copy figures/generated/<preset>/ (REPORT.md, REPORT.html, figures, the "
                                   "disagreement CSVs) and the job times of results/<preset>/ into "
                                   "figures/reference/<preset>-<date>/.")
    add_preset_options(p)
    p.add_argument("--results", default=None, help="the preset's results folder (default results/<preset>)")
    p.add_argument("--report", default=None, help="the preset's report folder (default figures/generated/<preset>)")
    p.add_argument("--out", default=None, help="folder of reference runs (default figures/reference)")
    p.add_argument("--date", default=None, help="the run's date, YYYY-MM-DD (default today)")
    p.add_argument("--commit", default=None, help="the commit the run was made with (default: git HEAD here)")
    p.set_defaults(func=run)


def run(args) -> int:
    import subprocess
    from pathlib import Path

    from magicpig.harness import reference_runs
    from magicpig.harness.doctor import load_config

    preset, name, problems = load_config(Path(args.config), args.preset, lambda _w: None)
    if preset is None:
        raise ValueError(f"preset {name}: " + "; ".join(problems))
    commit = args.commit or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                           check=False).stdout.strip()
    out = reference_runs.archive(name, preset, Path(args.results or Path("results") / name),
                                 Path(args.report or Path("figures/generated") / name),
                                 root=Path(args.out) if args.out else reference_runs.ROOT, date=args.date,
                                 commit=commit)
    print(f"magicpig archive: {out}")
    return 0
