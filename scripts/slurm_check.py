"""The checks of scripts/slurm_check.sh (`make slurm-check`), on a pipeline run through the SLURM profile.

    slurm_check.py cancel RUN_DIR OUT.json     scancel one `magicpig eval` job of the run in RUN_DIR once it has
                                               saved a row of one method and not yet of another; the job, its
                                               rows at that moment and their files' times go to OUT.json
    slurm_check.py verify RUN_DIR LOCAL_DIR CANCELLED.json
                                               every job of the run's Snakemake logs went to SLURM (job id, its
                                               kept log, its state in squeue), the cancelled job was rerun and
                                               resumed (its kept rows untouched, "resuming:" in the rerun's log),
                                               each eval job ran with the CPUs SLURM gave it, and REPORT.md has the
                                               accuracy rows of the local run in LOCAL_DIR

Both read the one-node cluster's process table (/proc/<pid>/environ: SLURM_JOB_ID), so they run on that node.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from magicpig.harness.result_files import EVAL_RULE_NAMES, rule_of

# rules whose command is `magicpig eval` (resumable from predictions.jsonl): the rows of the job table
# `eval_rules` in workflow/rules/common.smk, one per benchmark family plus the ablations' and sweeps'
EVAL_RULES = EVAL_RULE_NAMES


def is_eval_rule(rule: str) -> bool:
    """A rule of the job table: one of EVAL_RULES, or the rule of settings one of them runs at some lengths only
    (`eval_ruler_16k`, ...: result_files.rule_of, which the report rule's inputs use too)."""
    return rule_of(EVAL_RULES, rule)


# one rule of each kind the check must see run as a SLURM job: build, eval, estimation, bench, project, report
RULE_KINDS = ("build_cpu_module", "eval_ruler", "ablation_centering", "estimation_capture", "estimation_experiments",
              "tune_kl", "bench_kernel", "bench_decode", "project_hardware", "report")
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")
ACCURACY_SECTIONS = ("## RULER", "## LongBench", "## GSM8K", "## Ablations")


def _slurm_job_of(pid: int) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"SLURM_JOB_ID="):
            return item.split(b"=", 1)[1].decode()
    return None


def _rows(folder: Path) -> int:
    path = folder / "predictions.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _midway(base: Path) -> dict | None:
    """The (task, length) folder `base` of a running eval: its job and rows when one method has a row and another
    none yet, else None."""
    methods = [d for d in base.iterdir() if (d / "settings.json").is_file()]
    if len(methods) < 2 or any((d / "metrics.json").is_file() for d in methods):
        return None
    rows = {d.name: _rows(d) for d in methods}
    if not (any(rows.values()) and not all(rows.values())):
        return None
    holder = (base / "eval.lock").read_text().strip()
    job = _slurm_job_of(int(holder)) if holder.isdigit() else None
    if job is None:
        return None
    kept = {d.name: {"bytes": (d / "predictions.jsonl").read_text(), "mtime_ns": (d / "predictions.jsonl").stat().st_mtime_ns}
            for d in methods if rows[d.name]}
    return {"job": job, "base": str(base), "rows": rows, "kept": kept}


def cancel(run_dir: Path, out: Path, timeout_s: float = 3600) -> int:
    """Poll the run's eval folders every 0.1 s; scancel the first job caught between two methods' rows."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for lock in sorted(run_dir.glob("results/*/**/eval.lock")):
            caught = _midway(lock.parent)
            if caught is None:
                continue
            subprocess.run(["scancel", caught["job"]], check=True)
            caught["cancelled_at"] = time.time()
            out.write_text(json.dumps(caught, indent=1))
            print(f"slurm_check: cancelled SLURM job {caught['job']} ({caught['base']}: rows {caught['rows']})")
            return 0
        if (run_dir / "run1.done").exists():
            break
        time.sleep(0.1)
    print("slurm_check: FAILED: no eval job was caught between two methods' rows to cancel (each finished "
          "between two polls, or none ran)", file=sys.stderr)
    return 1


def _submissions(run_dir: Path) -> list[dict]:
    """Every job the run's Snakemake logs say went to SLURM: rule, wildcards, SLURM job id, log file."""
    jobs = []
    for log in sorted((run_dir / ".snakemake" / "log").glob("*.snakemake.log")):
        text = log.read_text()
        for m in SUBMITTED.finditer(text):
            slurm_log = Path(m.group(3))
            rule = slurm_log.relative_to(run_dir / ".snakemake" / "slurm_logs").parts[0].removeprefix("rule_")
            jobs.append({"invocation": log.name, "rule": rule, "slurm_job": m.group(2), "log": str(slurm_log)})
    return jobs


def _states(job_ids: list[str]) -> dict[str, tuple[str, int]]:
    """State and CPUs of each job SLURM still lists (finished jobs stay MinJobAge seconds)."""
    out = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%i|%T|%C", "--jobs", ",".join(job_ids)],
                         capture_output=True, text=True).stdout
    return {i: (s, int(c)) for i, s, c in (line.split("|") for line in out.split())}


def _accuracy_rows(report: Path) -> list[str]:
    rows, keep = [], False
    for line in report.read_text().splitlines():
        if line.startswith("## "):
            keep = line.startswith(ACCURACY_SECTIONS)
        elif keep and line.startswith("|"):
            rows.append(line)
    return rows


def verify(run_dir: Path, local_dir: Path, cancelled_file: Path) -> int:
    problems: list[str] = []
    jobs = _submissions(run_dir)
    states = _states([j["slurm_job"] for j in jobs]) if jobs else {}
    cancelled = json.loads(cancelled_file.read_text())
    missing_kinds = sorted(set(RULE_KINDS) - {j["rule"] for j in jobs})
    if missing_kinds:
        problems.append(f"no SLURM job of rule(s) {', '.join(missing_kinds)} in the run's logs")
    for j in jobs:
        log = Path(j["log"])
        if not log.is_file() or f"rule {j['rule']}:" not in log.read_text():
            problems.append(f"SLURM job {j['slurm_job']} ({j['rule']}): its log {log} is missing or names another rule")
        state = states.get(j["slurm_job"], ("not listed by squeue", 0))[0]
        want = "CANCELLED" if j["slurm_job"] == cancelled["job"] else "COMPLETED"
        if state != want:
            problems.append(f"SLURM job {j['slurm_job']} ({j['rule']}): state {state}, expected {want}")
    # the cancelled job: rerun as a new SLURM job, resumed from its saved rows
    base = Path(cancelled["base"])
    for name, before in cancelled["kept"].items():
        path = base / name / "predictions.jsonl"
        if path.read_text() != before["bytes"] or path.stat().st_mtime_ns != before["mtime_ns"]:
            problems.append(f"{path}: the rows saved before the cancel were rewritten (not resumed)")
    for name, n in cancelled["rows"].items():
        if _rows(base / name) < max(n, 1) or not (base / name / "metrics.json").is_file():
            problems.append(f"{base / name}: not finished by the rerun")
    eval_logs = [j for j in jobs if is_eval_rule(j["rule"])]
    resumed = [j for j in eval_logs if j["slurm_job"] != cancelled["job"] and "resuming:" in
               Path(j["log"]).read_text() + _rule_log_text(run_dir, j)]
    if not resumed:
        problems.append("no rerun eval job says it resumed (`resuming:` in its log)")
    # each eval job used the CPUs SLURM gave it (torch's threads, recorded in every metrics.json it wrote)
    checked = 0
    for j in eval_logs:
        if states.get(j["slurm_job"], ("", 0))[0] != "COMPLETED":
            continue
        for metrics in _metrics_of(run_dir, Path(j["log"]).read_text()):
            checked += 1
            threads = (json.loads(metrics.read_text()).get("machine") or {}).get("threads")
            if threads != states[j["slurm_job"]][1]:
                problems.append(f"{metrics}: {threads} threads, its SLURM job {j['slurm_job']} was given "
                                f"{states[j['slurm_job']][1]} CPUs")
    if not checked:
        problems.append("no metrics.json of a completed eval job found to compare its threads with its CPUs")
    # the report: finished, and its accuracy rows are the local run's
    reports = sorted(run_dir.glob("figures/generated/*/REPORT.md"))
    local_reports = sorted(local_dir.glob("figures/generated/*/REPORT.md"))
    if not reports or not local_reports:
        problems.append(f"REPORT.md missing: SLURM run {reports}, local run {local_reports}")
    else:
        ours, theirs = _accuracy_rows(reports[0]), _accuracy_rows(local_reports[0])
        if not theirs:
            problems.append(f"{local_reports[0]} has no accuracy rows")
        elif ours != theirs:
            diff = [f"  local: {a}\n  slurm: {b}" for a, b in zip(theirs, ours) if a != b]
            problems.append(f"accuracy rows differ from the local run ({len(ours)} vs {len(theirs)} rows):\n"
                            + "\n".join(diff[:10]))
    summary = {"slurm_jobs_submitted": len(jobs), "invocations": len({j["invocation"] for j in jobs}),
               "rules": sorted({j["rule"] for j in jobs}), "cancelled_job": cancelled["job"],
               "accuracy_rows_compared": len(_accuracy_rows(reports[0])) if reports else 0,
               "metrics_threads_checked": checked}
    (run_dir / "verify.json").write_text(json.dumps({"summary": summary, "problems": problems}, indent=1))
    print(f"slurm_check: {summary['slurm_jobs_submitted']} SLURM jobs in {summary['invocations']} invocations, "
          f"{summary['accuracy_rows_compared']} accuracy rows compared with the local run")
    for p in problems:
        print(f"slurm_check: FAILED: {p}", file=sys.stderr)
    return 1 if problems else 0


def _rule_log_text(run_dir: Path, job: dict) -> str:
    """The rule's own log (results/<preset>/logs/<rule>*.log) of an eval job: where `magicpig eval` writes."""
    return "".join(p.read_text() for p in run_dir.glob(f"results/*/logs/{job['rule']}*.log"))


def _metrics_of(run_dir: Path, slurm_log: str) -> list[Path]:
    """The metrics.json files of the `magicpig eval` command a SLURM job's log shows (--task, --length, --out)."""
    [command] = [line for line in slurm_log.splitlines() if " -m magicpig eval " in line][:1] or [""]
    tasks, lengths = re.findall(r"--task (\S+)", command), re.findall(r"--length (\d+)", command)
    out = re.search(r"--out (\S+)", command)
    return [m for t in tasks for n in lengths for m in (run_dir / out.group(1) / t / n).glob("*/metrics.json")] if out else []


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "cancel":
        sys.exit(cancel(Path(args[0]), Path(args[1])))
    if command == "verify":
        sys.exit(verify(Path(args[0]), Path(args[1]), Path(args[2])))
    sys.exit(f"usage: {__doc__}")
