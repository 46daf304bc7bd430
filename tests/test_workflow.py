"""The Snakemake pipeline: the DAG resolves for every preset and a bad config is refused early."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or shutil.which("snakemake")


def dry_run(*args, cwd=ROOT):
    return subprocess.run([SNAKEMAKE, "-n", "--forceall", "--cores", "2", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("args", [[], ["--configfile", "config/smoke.yaml"], ["--config", "preset=paper"]])
def test_dry_run_resolves(args):
    r = dry_run(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    for rule in ("build_cpu_module", "eval_ruler", "bench_kernel", "estimation_capture", "report"):
        assert rule in r.stdout


def job_counts(stdout: str) -> dict[str, int]:
    counts = {}
    for line in stdout.split("Job stats:", 1)[1].splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def test_paper_preset_runs_the_papers_grid():
    counts = job_counts(dry_run("--config", "preset=paper").stdout)
    assert counts["eval_ruler"] == 13 * 4  # 13 tasks x 16K/32K/64K/96K
    assert counts["eval_longbench"] == 6
    assert counts["ablation_setup"] == 2


def eval_commands(stdout: str, task: str) -> list[str]:
    """The `magicpig eval` shell commands of a dry run (-p) that evaluate ``task`` (e.g. 'longbench/lcc')."""
    return [line for line in stdout.splitlines()
            if " eval " in line and f"--task {task} " in line and "/accuracy " in line]


def test_each_benchmark_runs_its_paper_tables_settings():
    """Table 3 / 2 / 1 each have their own method list (issue #12.2), LongBench scores every record (#12.6) and
    the paper preset formats prompts with the Llama-3 chat template (#12.8)."""
    out = dry_run("-p", "--config", "preset=paper").stdout
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["presets"]["paper"]
    for task, block in (("ruler/cwe", "ruler"), ("longbench/lcc", "longbench"), ("gsm8k", "gsm8k")):
        [cmd] = eval_commands(out, task)[:1]
        specs = [part.split(" ", 1)[0] for part in cmd.split("--method ")[1:]]
        assert specs == cfg[block]["methods"], task
        assert "--chat-template meta-chat-3" in cmd
    assert "magicpig:K=10,L=220,local=24" in cfg["gsm8k"]["methods"]
    assert "topk:budget=0.02" in cfg["ruler"]["methods"] and "topk:budget=0.02" not in cfg["longbench"]["methods"]
    assert all("--samples all" in c for c in eval_commands(out, "longbench/lcc"))
    cpu = dry_run("-p").stdout
    assert all("--chat-template tokenizer" in c for c in eval_commands(cpu, "ruler/vt"))


@pytest.mark.parametrize("args", [[], ["--config", "preset=paper"]])
def test_every_eval_command_parses(args):
    """The rules' `magicpig eval` lines are accepted by its own parser (--samples all, --chat-template ...)."""
    import shlex

    from magicpig.harness.cli import build_parser

    cmds = [line.split("Shell command: ", 1)[1].split(" > ", 1)[0] for line in dry_run("-p", *args).stdout.splitlines()
            if line.startswith("Shell command: ") and " -m magicpig.harness.cli eval " in line]
    assert cmds
    parser = build_parser()
    for cmd in cmds:
        argv = shlex.split(cmd)
        parser.parse_args(argv[argv.index("magicpig.harness.cli") + 1:])


def test_chat_template_choices_match_the_schema():
    from magicpig_tasks.common import CHAT_TEMPLATES

    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    preset = schema["properties"]["presets"]["additionalProperties"]["properties"]
    assert tuple(preset["chat_template"]["enum"]) == CHAT_TEMPLATES


def test_unknown_preset_is_refused(tmp_path):
    r = dry_run("--config", "preset=nope")
    assert r.returncode != 0 and "preset 'nope'" in (r.stdout + r.stderr)


def test_schema_rejects_a_bad_field(tmp_path):
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg["presets"]["smoke"]["ruler"]["samples"] = -1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    r = dry_run("--configfile", str(bad))
    assert r.returncode != 0 and "samples" in (r.stdout + r.stderr)
