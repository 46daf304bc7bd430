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


@pytest.mark.parametrize("args", [[], ["--configfile", "config/smoke.yaml"], ["--config", "preset=paper"],
                                  ["--config", "preset=paper-long"], ["--config", "preset=paper-long-prolong"],
                                  ["--config", "preset=paper-70b"]])
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


def ruler_jobs(counts: dict[str, int]) -> int:
    """RULER eval jobs over the rules that run them (eval_ruler, and eval_ruler_<16k>... for the lengths where
    `ruler.length_methods` adds settings)."""
    return sum(n for rule, n in counts.items() if rule == "eval_ruler" or rule.startswith("eval_ruler_"))


def test_paper_preset_runs_the_papers_grid():
    counts = job_counts(dry_run("--config", "preset=paper").stdout)
    assert ruler_jobs(counts) == 13 * 4  # 13 tasks x 16K/32K/64K/96K, one job each
    assert counts["eval_ruler_16k"] == counts["eval_ruler_64k"] == 13  # Tables 12-13 at 16K, Table 11 at 64K
    assert counts["eval_lm_eval"] == 2 and counts["eval_reasoning"] == 6  # Table 1's COQA, MMLU-CoT; Table 6
    assert ruler_jobs(job_counts(dry_run("--config", "preset=paper-long").stdout)) == 13 * 6  # Table 4: to 256K
    assert ruler_jobs(job_counts(dry_run("--config", "preset=paper-70b").stdout)) == 13 * 4  # Table 5
    smoke = job_counts(dry_run("--configfile", "config/smoke.yaml").stdout)
    assert "eval_lm_eval" not in smoke and "eval_reasoning" not in smoke  # blocks absent: not run
    assert counts["eval_longbench"] == 6
    assert counts["ablation_setup"] == 2


def eval_commands(stdout: str, task: str) -> list[str]:
    """The `magicpig eval` shell commands of a dry run (-p) that evaluate ``task`` (e.g. 'longbench/lcc')."""
    return [line for line in stdout.splitlines()
            if " eval " in line and f"--task {task} " in line and "/accuracy " in line]


def test_each_benchmark_runs_its_paper_tables_settings():
    """Table 3 / 2 / 1 each have their own method list, LongBench scores every record and the paper preset
    formats prompts with the Llama-3 chat template."""
    out = dry_run("-p", "--config", "preset=paper").stdout
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["presets"]["paper"]
    for task, block in (("ruler/cwe", "ruler"), ("longbench/lcc", "longbench"), ("gsm8k", "gsm8k")):
        # RULER at 32K: a length where ruler.length_methods adds no setting
        [cmd] = [c for c in eval_commands(out, task) if task != "ruler/cwe" or " --length 32768 " in c][:1]
        specs = [part.split(" ", 1)[0] for part in cmd.split("--method ")[1:]]
        assert specs == cfg[block]["methods"], task
        assert "--chat-template meta-chat-3" in cmd
    assert "magicpig:K=10,L=220,local=24" in cfg["gsm8k"]["methods"]
    assert "topk:budget=0.02" in cfg["ruler"]["methods"] and "topk:budget=0.02" not in cfg["longbench"]["methods"]
    assert all("--samples all" in c for c in eval_commands(out, "longbench/lcc"))
    cpu = dry_run("-p").stdout
    assert all("--chat-template tokenizer" in c for c in eval_commands(cpu, "ruler/vt"))


@pytest.mark.parametrize("args", [[], ["--config", "preset=paper"], ["--config", "preset=paper-long"]])
def test_every_eval_command_parses(args):
    """The rules' `magicpig eval` lines are accepted by its own parser (--samples all, --chat-template ...), and
    none turns progress off: a job's log shows its plain progress lines."""
    import shlex

    from magicpig.harness.cli import build_parser

    cmds = [line.split("Shell command: ", 1)[1].split(" > ", 1)[0] for line in dry_run("-p", *args).stdout.splitlines()
            if line.startswith("Shell command: ") and " -m magicpig eval " in line]
    assert cmds
    parser = build_parser()
    for cmd in cmds:
        argv = shlex.split(cmd)
        assert not parser.parse_args(argv[argv.index("magicpig") + 1:]).no_progress, cmd


def test_overwrite_switch_reaches_every_eval_command():
    """`overwrite: true` (a changed seed, setup, backend, model or chat_template) passes --overwrite to every
    eval job, so the rerun replaces the old rows instead of refusing; the default passes none."""
    def eval_lines(*args):
        return [line for line in dry_run("-p", "--configfile", "config/smoke.yaml", *args).stdout.splitlines()
                if line.startswith("Shell command: ") and " -m magicpig eval " in line]

    default, switched = eval_lines(), eval_lines("--config", "overwrite=True", "seed=3")
    assert default and len(default) == len(switched)
    assert not any("--overwrite" in c for c in default)
    assert all("--overwrite" in c and "--seed 3" in c for c in switched)


def test_chat_template_choices_match_the_schema():
    from magicpig_tasks.settings import CHAT_TEMPLATES

    from magicpig.harness.pipeline_config import load_schema

    schema = load_schema()
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


def test_task_samples_set_each_ruler_jobs_count(tmp_path):
    """A task of ``ruler.task_samples`` runs its own count, the others ``samples``; a task of 0 runs no job."""
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    ruler = cfg["presets"]["smoke"]["ruler"]
    ruler.update(tasks=["niah_single_1", "niah_single_2", "vt"], samples=2, task_samples={"niah_single_2": 7, "vt": 0})
    path = tmp_path / "task_samples.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = dry_run("-p", "--configfile", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert [c for c in eval_commands(r.stdout, "ruler/niah_single_2") if "--samples 7 " in c]
    assert all("--samples 2 " in c for c in eval_commands(r.stdout, "ruler/niah_single_1"))
    assert eval_commands(r.stdout, "ruler/niah_single_1") and not eval_commands(r.stdout, "ruler/vt")


# ---- the DAG is built on the results files themselves --------------------------------------------------------

def dry_run_jobs(stdout: str) -> list[dict]:
    """The jobs of a dry run: rule, input / output lists, resources (ints where they are), shell command."""
    jobs, job = [], None
    for line in stdout.splitlines():
        head = line.split(" ", 1)
        if line.endswith(":") and head[0] in ("rule", "localrule") and len(head) == 2:
            job = {"rule": head[1][:-1], "input": [], "output": [], "resources": {}, "shell": None}
            jobs.append(job)
        elif job is not None and line.startswith("    ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            if key in ("input", "output"):
                job[key] = value.split(", ")
            elif key == "resources":
                for item in value.split(", "):
                    name, _, v = item.partition("=")
                    job["resources"][name] = int(v) if v.isdigit() else v
        elif job is not None and line.startswith("Shell command: "):
            job["shell"] = line[len("Shell command: "):]
    return jobs


@pytest.mark.parametrize("args", [[], ["--config", "preset=paper"]])
def test_eval_outputs_are_the_metrics_files_the_command_writes(args):
    """Each eval / ablation job declares exactly OUT/<task>/<length>/<method dir>/metrics.json for its command's
    --task x --length x --method (magicpig.harness.results_paths, the layout `magicpig eval` writes), and no job
    outputs a `.done` flag."""
    import shlex

    from magicpig.methods.spec_names import method_dirname

    jobs = dry_run_jobs(dry_run("-p", *args).stdout)
    evals = [j for j in jobs if j["shell"] and " -m magicpig eval " in j["shell"]]
    assert len(evals) > 10
    for job in evals:
        argv = shlex.split(job["shell"].split(" > ", 1)[0])
        opt = lambda name: [argv[i + 1] for i, a in enumerate(argv) if a == name]  # noqa: E731
        [out] = opt("--out")
        want = {f"{out}/{t}/{n}/{method_dirname(m)}/metrics.json"
                for t in opt("--task") for n in opt("--length") for m in opt("--method")}
        assert set(job["output"]) == want, job["rule"]
    assert not [f for j in jobs for f in j["output"] if f.endswith(".done")]


def test_one_rule_definition_runs_every_eval_job():
    """Accuracy, ablations and sweeps: every `magicpig eval` job comes from the one rule of workflow/rules/eval.smk,
    defined once per row of the job table (common.smk's eval_rules), each row with its own rule name."""
    rules_text = "\n".join(p.read_text() for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    assert rules_text.count(" eval {params.args}") == 1
    jobs = dry_run_jobs(dry_run("-p", "--config", "preset=paper").stdout)
    names = {j["rule"] for j in jobs if j["shell"] and " -m magicpig eval " in j["shell"]}
    # the paper preset's RULER settings run at one length only (Tables 11-13: 16K, 64K) get a rule per length set
    assert names == {"eval_ruler", "eval_ruler_16k", "eval_ruler_64k", "eval_longbench", "eval_gsm8k", "eval_lm_eval",
                     "eval_reasoning", "ablation_centering", "ablation_kl_grid", "ablation_setup", "sweep_ruler"}


def test_report_reads_every_result_and_writes_every_figure():
    """The report's inputs are every results file of the run (the metrics.json, the CSVs, tune-kl's JSON); its
    outputs REPORT.md, REPORT.html and each figure of magicpig.harness.report.figures.FIGURES."""
    from magicpig.harness.report import figures

    jobs = dry_run_jobs(dry_run().stdout)
    [report] = [j for j in jobs if j["rule"] == "report"]
    results = {f for j in jobs if j["rule"] not in ("build_cpu_module", "estimation_capture", "report", "all")
               for f in j["output"]}
    assert results and results <= set(report["input"])
    assert "config/paper_reference.yaml" in report["input"]
    assert {f"figures/generated/cpu/{n}" for n in ["REPORT.md", "REPORT.html", *figures.FIGURES]} == set(report["output"])


def test_report_inputs_are_what_its_sections_read():
    """The report rule's results inputs are the files the report's sections declare (result_files.SECTION_READS,
    which report.sections gives each section): each input is a file of a declared entry, and each declared entry
    has its files among the inputs (the paper preset runs every block, shape-only models included)."""
    from test_report_sections import declares

    from magicpig.harness.result_files import SECTION_READS

    [report] = [j for j in dry_run_jobs(dry_run("--config", "preset=paper").stdout) if j["rule"] == "report"]
    inputs = [f.removeprefix("results/paper/") for f in report["input"] if f.startswith("results/paper/")]
    assert sorted(set(report["input"]) - {f"results/paper/{f}" for f in inputs}) == [
        "config/paper_reference.yaml", "workflow/scripts/report.py"]
    declared = {file for files in SECTION_READS.values() for file in files}
    assert [f for f in inputs if not any(declares(file, f) for file in declared)] == []
    assert [file for file in declared if not any(declares(file, f) for f in inputs)] == []


def test_report_captions_come_from_the_result_file_map():
    """Each file the HTML report shows (REPORT.html, each figure) has the caption of its entry in result_files:
    a dry run writes them where the report rule points Snakemake (common.smk report_caption)."""
    from magicpig.harness.result_files import REPORT_FIGURES, REPORT_HTML

    assert dry_run().returncode == 0
    folder = ROOT / ".snakemake" / "report_captions"
    for file in (REPORT_HTML, *REPORT_FIGURES):
        assert file.caption and (folder / f"{file.name}.rst").read_text(encoding="utf-8") == file.caption + "\n"
    assert "Speed-up of MagicPIG" in (folder / "speedup_paper_hardware.png.rst").read_text(encoding="utf-8")
    assert [p.name for p in (ROOT / "workflow" / "report").iterdir()] == ["workflow.rst"]  # the report's own text


def test_tune_kl_writes_its_result_once():
    """tune-kl writes tune_kl_<target>.json itself; the rule does not also capture its --json stdout as a second
    result file (the report would print the table twice)."""
    jobs = dry_run_jobs(dry_run("-p").stdout)
    [tune] = [j for j in jobs if j["rule"] == "tune_kl"]
    assert tune["output"] == ["results/cpu/estimation/tune_kl_0.02.json",
                              "results/cpu/estimation/tune_kl_0.02_candidates.csv"]
    command, _, redirect = tune["shell"].partition(" > ")
    assert "--json" not in command.split() and redirect.startswith("results/cpu/logs/tune_kl.log")
    [report] = [j for j in jobs if j["rule"] == "report"]
    assert [f for f in report["input"] if "tune_kl" in f and f.endswith(".json")] == [tune["output"][0]]


def _touch_results(workdir: Path, *args: str) -> list[str]:
    """Create every output of the DAG in ``workdir`` (empty files, one mtime), as after a finished run."""
    import os
    import time

    files = [f for j in dry_run_jobs(dry_run(*args, cwd=workdir).stdout) for f in j["output"]]
    now = time.time()
    for f in files:
        (workdir / f).parent.mkdir(parents=True, exist_ok=True)
        (workdir / f).write_text("")
        os.utime(workdir / f, (now, now))
    return files


def _plan(workdir: Path, *args: str) -> dict[str, int]:
    r = subprocess.run([SNAKEMAKE, "-n", "--cores", "2", *args], cwd=workdir, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    if "Nothing to be done" in r.stdout:
        return {}
    table = r.stdout.split("Job stats:", 1)[1].split("\ntotal", 1)[0]  # the first table, less its total
    return job_counts("Job stats:" + table)


def test_deleting_one_result_reruns_exactly_its_job_and_the_report(tmp_path):
    """On a finished results tree (a copy of the workflow in a temporary folder), deleting one metrics.json plans
    its eval job and the report, nothing else; deleting an experiment CSV plans its job and the report."""
    import os

    for name in ("Snakefile", "workflow", "config"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    args = ("--configfile", "config/smoke.yaml")
    files = _touch_results(tmp_path, *args)
    assert _plan(tmp_path, *args) == {}
    metrics = tmp_path / "results/smoke/accuracy/ruler/vt/1024/dense/metrics.json"
    assert str(metrics.relative_to(tmp_path)) in files
    stamp = os.stat(metrics).st_mtime
    metrics.unlink()
    assert _plan(tmp_path, *args) == {"eval_ruler": 1, "report": 1, "all": 1}
    metrics.write_text("")
    os.utime(metrics, (stamp, stamp))
    assert _plan(tmp_path, *args) == {}
    (tmp_path / "results/smoke/estimation/geometry_summary.csv").unlink()
    assert _plan(tmp_path, *args) == {"estimation_experiments": 1, "report": 1, "all": 1}


# ---- software environment and resources ---------------------------------------------------------------

MODEL_RULES = {"eval_ruler", "eval_longbench", "eval_gsm8k", "eval_lm_eval", "eval_reasoning", "ablation_centering",
               "ablation_kl_grid", "ablation_setup", "estimation_capture", "bench_decode", "bench_decode_shape",
               "sweep_ruler", "estimation_inputs"}


@pytest.mark.parametrize("preset", ["cpu", "paper"])
def test_every_job_declares_memory_runtime_and_its_gpu(preset):
    """mem_mb and runtime on every job; a GPU (gpu=1, and --device cuda) only on the jobs that run the model, and
    only for a preset with `device: cuda` (the paper's); the CPU-only rules never ask for one."""
    jobs = [j for j in dry_run_jobs(dry_run("-p", "--config", f"preset={preset}").stdout) if j["rule"] != "all"]
    # bench_decode_shape runs only for a preset with decode_bench.shapes (the paper's)
    assert {j["rule"] for j in jobs} >= MODEL_RULES - {"bench_decode_shape"} | {"build_cpu_module", "bench_kernel",
                                                                                "report"}
    cuda = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["presets"][preset].get("device") == "cuda"
    assert cuda == (preset == "paper")
    for job in jobs:
        assert job["resources"]["mem_mb"] > 0 and job["resources"]["runtime"] > 0, job["rule"]
        needs_gpu = cuda and (job["rule"] in MODEL_RULES or job["rule"].startswith("eval_ruler_"))
        assert job["resources"].get("gpu", 0) == int(needs_gpu), job["rule"]
        assert ("--device cuda" in job["shell"]) == needs_gpu, job["rule"]


def _partition(partitions, job: dict) -> str | None:
    """The partition the SLURM plugin picks for a dry-run job (its own selection code on the profile's file)."""
    import logging

    from snakemake_executor_plugin_slurm.partitions import get_best_partition

    class Resources(dict):
        __getattr__ = dict.__getitem__

    class Job:
        name = job["rule"]
        threads = job.get("threads", 1)
        resources = Resources(job["resources"])

    return get_best_partition(partitions, Job(), logging.getLogger("slurm-test"))


@pytest.mark.parametrize("preset", ["cpu", "paper"])
def test_slurm_profile_places_gpu_jobs_on_the_gpu_partition_only(preset):
    """`snakemake --profile profiles/slurm -n` resolves, and the plugin's partition choice from the profile's
    partitions.yaml puts each job asking for a GPU on the GPU partition and every other job on the CPU one."""
    pytest.importorskip("snakemake_executor_plugin_slurm",
                        reason="snakemake-executor-plugin-slurm is not installed (the `dev` extra)")
    from snakemake_executor_plugin_slurm.partitions import read_partition_file

    r = subprocess.run([SNAKEMAKE, "--profile", "profiles/slurm", "-n", "--forceall", "--config", f"preset={preset}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    assert "slurm_partition" not in profile["default-resources"] and "slurm_extra" not in profile["default-resources"]
    partitions = read_partition_file(ROOT / "profiles" / "slurm" / profile["slurm-partition-config"])
    jobs = [j for j in dry_run_jobs(r.stdout) if j["rule"] != "all"]
    placed = {(j["rule"], j["resources"].get("gpu", 0), _partition(partitions, j)) for j in jobs}
    assert {(rule, gpu, part) for rule, gpu, part in placed if part != ("gpu" if gpu else "cpu")} == set()
    assert any(gpu for _, gpu, _ in placed) == (preset == "paper")


def test_every_rule_runs_in_the_conda_env_that_lists_the_dependencies():
    """Every rule names workflow/envs/magicpig.yaml (`--sdm conda`); the env file lists each dependency of
    pyproject.toml with the same version bounds, and its post-deploy script installs the checkout."""
    import re
    import tomllib

    rules_text = "\n".join(p.read_text() for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    rules = re.findall(r"^( *)rule( \w+)?:$", rules_text, flags=re.M)  # the eval rule is defined in a loop
    assert len(rules) >= 10
    for indent, _ in rules:
        assert len(re.findall(rf"^{indent}    conda:\n{indent}        ENV$", rules_text, flags=re.M)) >= 1
    assert len(re.findall(r"^ *conda:\n *ENV$", rules_text, flags=re.M)) == len(rules)
    env = yaml.safe_load((ROOT / "workflow" / "envs" / "magicpig.yaml").read_text())
    [pip] = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    name = lambda spec: re.split(r"[<>=!~ ]", spec, 1)[0].lower()  # noqa: E731
    listed = {name(p): p.replace(" ", "") for p in pip}
    for dep in deps:
        assert name(dep) in listed, dep
        if name(dep) != "torch":  # pinned to the wheel `make setup` installs
            assert listed[name(dep)] == dep.replace(" ", ""), dep
    post = (ROOT / "workflow" / "envs" / "magicpig.post-deploy.sh").read_text()
    assert "pip install --no-deps -e ." in post


@pytest.mark.skipif(shutil.which("conda") is None, reason="conda is not installed (plain snakemake needs none)")
def test_conda_deployment_runs_the_envs_python():
    r = dry_run("-p", "--sdm", "conda", "--configfile", "config/smoke.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    shells = [j["shell"] for j in dry_run_jobs(r.stdout) if j["shell"] and j["shell"] != "None"]
    assert shells and all(s.startswith("python ") for s in shells)


def test_plain_snakemake_runs_this_interpreter():
    shells = [j["shell"] for j in dry_run_jobs(dry_run("-p", "--configfile", "config/smoke.yaml").stdout)
              if j["shell"] and j["shell"] != "None"]
    assert shells and all(s.startswith(f"{sys.executable} ") for s in shells)


def _fake_slurm(tmp_path) -> dict:
    """A PATH whose sbatch/squeue/scancel/scontrol/sacct/srun are the scripted stand-ins of fixtures/fake_slurm.py,
    with their state folder, as environment variables."""
    import os

    bin_dir, state = tmp_path / "bin", tmp_path / "slurm"
    bin_dir.mkdir()
    state.mkdir()
    for command in ("sbatch", "squeue", "scancel", "scontrol", "sacct", "srun"):
        (bin_dir / command).symlink_to(ROOT / "tests" / "fixtures" / "fake_slurm.py")
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_SLURM_DIR=str(state))


def _records(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_slurm_profile_submits_ready_gpu_jobs_together_and_each_uses_its_cpus(tmp_path):
    """With 8 GPU jobs ready (preset paper, 8 RULER jobs; the stand-in sbatch never lets one finish),
    `--profile profiles/slurm` submits all 8 at once: no limit of the workstation profile holds them back. Each asks
    for the CPUs its rule declares (--cpus-per-task) and passes no core count of the submit host. Run as SLURM
    runs it (SLURM_CPUS_PER_TASK: the CPUs given, here at most this machine's), the job's step asks srun for
    exactly those CPUs, and the rule's command inside it runs with that many threads."""
    import os
    import re
    import signal
    import time

    pytest.importorskip("snakemake_executor_plugin_slurm",
                        reason="snakemake-executor-plugin-slurm is not installed (the `dev` extra)")
    work = tmp_path / "wf"
    work.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    env = _fake_slurm(tmp_path)
    state = Path(env["FAKE_SLURM_DIR"])
    (work / "results/paper/build").mkdir(parents=True)
    (work / "results/paper/build/cpu_module.txt").write_text("")  # the CPU module job: done
    ruler = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["presets"]["paper"]["ruler"]
    assert len(ruler["tasks"]) >= 8
    targets = [f"results/paper/accuracy/ruler/{t}/{ruler['lengths'][0]}/dense/metrics.json" for t in ruler["tasks"][:8]]
    # the first status check a second after the submissions, not the plugin's default 40 s
    main = subprocess.Popen([SNAKEMAKE, *targets, "--profile", "profiles/slurm", "--config", "preset=paper",
                             "--slurm-init-seconds-before-status-checks", "1"],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        while len(_records(state / "submitted.jsonl")) < 8 and main.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        jobs = _records(state / "submitted.jsonl")
        # a job of the 8 in the queue before any other is submitted: they went together
        assert len(jobs) == 8, (main.poll(), jobs)
        # the wait for the (never ending) jobs, once all are queued, may not submit anything else: looked at after two
        # status checks that saw all 8 (squeue answers RUNNING), so the answer of the first has been acted on
        def checks_after_all_8() -> int:
            return sum(r["submitted"] >= 8 for r in _records(state / "squeue.jsonl"))

        deadline = time.monotonic() + 240
        while checks_after_all_8() < 2 and main.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        assert checks_after_all_8() >= 2, main.poll()
        assert len(_records(state / "submitted.jsonl")) == 8
    finally:
        main.send_signal(signal.SIGINT)  # it cancels its jobs (the stand-in scancel), then ends
        try:
            out = main.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:  # a loaded machine: its shutdown is not what is tested here
            main.kill()
            out = main.communicate()[0]
    assert not re.search(r"Provided resources:.*gpu", out), out
    wraps = []
    for job in jobs:
        argv = job["argv"]
        assert "--gpus=1" in argv and argv[argv.index("-p") + 1] == "gpu", argv
        assert "--cpus-per-task=16" in argv, argv  # job_threads: the rule's cluster CPUs, sized for the paper's model
        [wrap] = [a.removeprefix("--wrap=") for a in argv if a.startswith("--wrap=")]
        assert "--cores 'all'" in wrap, wrap  # the job takes the cores of its allocation, not the submit host's
        wraps.append((job["id"], wrap))

    # one job as SLURM would start it: its batch step is the wrapped command, with the CPUs it was given
    given = min(16, len(os.sched_getaffinity(0)))
    job_id, wrap = wraps[0]
    # the folder the step waits for (the submit host's, removed when its main process ended)
    for path in re.findall(r"--wait-for-files '([^']+)'", wrap):
        Path(path).mkdir(parents=True, exist_ok=True)
    step_env = dict(env, SLURM_JOB_ID=str(job_id), SLURM_CPUS_PER_TASK=str(given))
    subprocess.run(wrap, shell=True, cwd=work, env=step_env, capture_output=True, text=True, timeout=300)
    [step] = _records(state / "srun.jsonl")
    assert f"--cpus-per-task={given}" in step["argv"] and "--gpus=1" in step["argv"], step["argv"]
    assert step["returncode"] == 0, step["output"]
    threads = re.findall(r"^\s*threads: (\d+)$", step["output"], flags=re.M)
    assert threads == ([str(given)] if given > 1 else []), step["output"]  # Snakemake prints threads above 1
    assert "magicpig eval" in step["output"]


def test_no_rule_takes_the_submit_hosts_core_count():
    """Threads come from job_threads (the CPUs a cluster job is given), never from `workflow.cores`, which on a
    cluster is the submit host's count and fails without --cores under the SLURM profile."""
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        assert "workflow.cores" not in path.read_text(), path.name
