# Helpers shared by the rules. Every function of the workflow lives here; the other .smk files hold rules only.
# The output helpers name what each command writes (see their docstrings), so rule outputs are the result files.
# Every shell argument built from the config is quoted: the helpers below that return arguments quote each
# value (shlex.quote), and the rules' shell lines use {...:q} for the rest (tests/test_hostile_inputs.py
# checks every shell line).
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

# the result files the rules name as their outputs (magicpig.harness.result_files: each file's name, its rule
# and its readers); the Snakefile put the repository on sys.path
from magicpig.harness.result_files import (CAPTURE, CPU_MODULE_TXT, DECODE_CSV, EXPERIMENT_FILES, INPUTS_FILES,
                                           KERNEL_CSV, METHOD_DIR, PROJECT_FILES, REPORT_FIGURES, REPORT_HTML,
                                           REPORT_MD, SECTION_READS, SHAPE_DECODE_CSV, TUNE_KL_CANDIDATES_CSV,
                                           TUNE_KL_JSON, rule_of, tune_kl_target)


# ---- software and resources ------------------------------------------------------------------------------


def uses_conda(workflow):
    """Whether jobs run in their rules' conda envs (`--sdm conda`): then `python` is the env's, not ours."""
    from snakemake_interface_executor_plugins.settings import DeploymentMethod

    settings = workflow.deployment_settings
    return settings is not None and DeploymentMethod.CONDA in settings.deployment_method


def gpus(preset):
    """GPUs of a job that runs the preset's model: 1 when the preset sets `device: cuda`, else 0 (no device set:
    the commands pick cuda when they find one, and the job asks the scheduler for none)."""
    return 1 if preset.get("device") == "cuda" else 0


def job_threads(cluster_cpus):
    """Threads of a job that uses every core it is given (Snakemake sets OMP_NUM_THREADS to them, which torch and
    the CPU module follow). A local run: every core of `--cores`. Submitted to a cluster: ``cluster_cpus``, which
    the SLURM executor requests as --cpus-per-task (`--max-threads N` caps it for nodes of fewer cores), and in a
    dry run given no --cores. Inside that SLURM job (the Snakefile is read again there): the CPUs SLURM
    allocated, SLURM_CPUS_PER_TASK."""
    from snakemake_interface_executor_plugins.settings import ExecMode

    allocated = os.environ.get("SLURM_CPUS_PER_TASK")
    if workflow.exec_mode != ExecMode.DEFAULT and allocated:
        return int(allocated)
    cores = workflow.global_resources["_cores"].value
    if workflow.local_exec and cores is not None and cores != sys.maxsize:
        return cores
    return cluster_cpus


def sized(preset, small, large):
    """A resource value of a model-running job: ``small`` for the embedded SmolLM2-135M (presets cpu, smoke),
    ``large`` for any other model (the paper's Llama-3.1-8B at up to 128K tokens)."""
    return small if preset["model"] == "smollm2" else large


def device_args(preset):
    """`--device` of the model-running commands: only when the preset names a device (otherwise their default,
    cuda when available, stays)."""
    return f"--device {shlex.quote(preset['device'])}" if preset.get("device") else ""


# ---- magicpig eval: the job table -----------------------------------------------------------------------


def runs(samples):
    """Whether a benchmark block runs: a sample count > 0, or `all` (every record)."""
    return samples == "all" or int(samples) > 0


def method_args(methods):
    """--method options for a list of method specs (specs contain commas, so one option each)."""
    return " ".join(f"--method {shlex.quote(m)}" for m in methods)


def methods_module_args():
    """--methods-module options: the config's `methods_module` (the user's own methods), for eval and the report."""
    return " ".join(f"--methods-module {shlex.quote(m)}" for m in config["methods_module"])


def data_files(tasks):
    """The config's `data` files of ``tasks`` that exist: an eval job's inputs, so the job reruns when one
    appears (a task whose file is missing is skipped and says so in its metrics.json)."""
    data = config["data"]
    return [data[t] for t in tasks if t in data and os.path.isfile(data[t])]


def data_args(tasks):
    """--data TASK=PATH for each task of ``tasks`` whose data file is in the config and exists."""
    data = config["data"]
    return " ".join(f"--data {shlex.quote(f'{t}={data[t]}')}" for t in tasks
                    if t in data and os.path.isfile(data[t]))


def eval_args(preset, seed, tasks, lengths, methods, samples, setup=None):
    """Every `magicpig eval` option but --out: the tasks, lengths and methods of one job and the preset's
    settings (model, setup, backend, prompt template, device)."""
    task_args = " ".join(f"--task {shlex.quote(t)}" for t in tasks)
    length_args = " ".join(f"--length {int(n)}" for n in lengths)
    samples = "all" if samples == "all" else int(samples)
    return " ".join(filter(None, [
        f"--model={shlex.quote(preset['model'])} {method_args(methods)} {task_args} {length_args}",
        f"--samples {samples} --seed {int(seed)} --setup {shlex.quote(setup or preset['setup'])}",
        f"--backend {shlex.quote(preset['backend'])} --chat-template {shlex.quote(preset['chat_template'])}",
        device_args(preset), data_args(tasks), methods_module_args(), overwrite_arg()]))


def overwrite_arg():
    """`--overwrite` when the config's `overwrite` is true."""
    return "--overwrite" if config["overwrite"] else ""


@dataclass
class EvalRule:
    """One row of the job table: a `magicpig eval` rule (workflow/rules/eval.smk) and its jobs. Each job runs
    ``methods`` on ``tasks`` at ``length`` into ``out``, each sample prefilled once and decoded by every method;
    ``tasks``, ``length``, ``out``, ``setup`` and ``log`` may hold wildcards, which each dict of ``jobs`` fills
    for one job ({}: a rule of one job). A job's outputs are the metrics.json of each (task, method)
    (magicpig.harness.results_paths)."""

    name: str
    out: str  # `magicpig eval --out`
    tasks: list
    length: object  # the prompt length (RULER) or cap (record-based tasks)
    methods: list
    samples: object  # a count, or "all"
    jobs: list
    log: str  # the log's file name less .log
    runtime: int  # minutes a job asks a cluster for, for a model other than SmolLM2 (`sized`)
    setup: str = ""  # `--setup`; empty: the preset's
    task_samples: dict = field(default_factory=dict)  # task -> its count instead of ``samples`` (one-task jobs)

    def outputs(self):
        """The rule's output patterns."""
        from magicpig.harness.results_paths import metrics_file

        return [str(metrics_file(self.out, t, self.length, m)) for t in self.tasks for m in self.methods]

    def targets(self):
        """Every output of every job."""
        return [pattern.format(**job) for job in self.jobs for pattern in self.outputs()]

    def wildcard_constraints(self):
        """Each wildcard matches only its jobs' values, so that no two rules can claim one file."""
        names = dict.fromkeys(name for job in self.jobs for name in job)
        return {name: "|".join(dict.fromkeys(re.escape(str(job[name])) for job in self.jobs)) for name in names}

    def args(self, wildcards):
        """The job's `magicpig eval` options but --out."""
        tasks = self.task_names(wildcards)
        samples = self.task_samples.get(tasks[0], self.samples) if len(tasks) == 1 else self.samples
        return eval_args(P, SEED, tasks, [fill(self.length, wildcards)], self.methods, samples,
                         fill(self.setup, wildcards))

    def task_names(self, wildcards):
        return [fill(t, wildcards) for t in self.tasks]

    def data(self, wildcards):
        """The job's data files (data_files)."""
        return data_files(self.task_names(wildcards))

    def out_dir(self, wildcards):
        return fill(self.out, wildcards)


def fill(text, wildcards):
    """``text`` (a str or a number) with its {wildcard} placeholders set to one job's values."""
    return str(text).format(**dict(wildcards.items()))


def eval_rules(p, res):
    """The job table of preset ``p`` (results under ``res``): each `magicpig eval` rule that has jobs. Each
    benchmark family (magicpig.harness.families) runs its own method list (the settings of its paper table):
    RULER (Tables 3-5 / Figure 1) per task and length; LongBench (Table 2), GSM8K-CoT, CoQA and MMLU-CoT
    (Table 1) and infini_igsm (Table 6) per task, at their prompt cap; the ablations (centering on/off: Figure 9a;
    the (K, L) grid; evaluation setup A vs B) one job each, on all their tasks; the budget / cost sweeps (Figures
    1, 6c, 9a, 9b/c) per task. The blocks lm_eval, reasoning and sweeps are optional (absent: not run)."""
    from magicpig.harness.families import FAMILIES
    from magicpig.harness.pipeline_config import ruler_methods_by_length, ruler_task_samples, sweep_methods

    acc, abl, a = f"{res}/accuracy", f"{res}/ablations", p["ablations"]

    def each_task(block):
        return [{"task": t} for t in block["tasks"]] if runs(block["samples"]) else []

    def rule_name(family, methods, lengths):
        if list(methods) == p[family.block]["methods"]:
            return family.rule
        return "_".join([family.rule] + [f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in lengths])

    def per_length(family):
        """One rule per distinct method list over the block's lengths (`length_methods` adds settings at some
        lengths): `eval_ruler` runs the lengths of `methods` alone, `eval_ruler_<16k>_...` the others, each job
        decoding its whole list from one prefill per sample, of as many samples as its task has
        (`task_samples`, else `samples`; a task of 0 runs no job)."""
        b, groups = p[family.block], {}
        for n, methods in ruler_methods_by_length(b).items():
            groups.setdefault(tuple(methods), []).append(n)
        per_task = ruler_task_samples(b)
        counts = {family.task.format(task=t): count for t, count in per_task.items()}
        tasks = [t for t, count in per_task.items() if runs(count)]
        return [EvalRule(rule_name(family, methods, ns), acc, [family.task], "{length}", list(methods), b["samples"],
                         jobs=[{"task": t, "length": n} for t in tasks for n in ns], log=family.log,
                         runtime=family.runtime, task_samples=counts) for methods, ns in groups.items()]

    def per_task(family):
        """One rule, a job per task of the block (one job for a one-task family) at its prompt cap."""
        b = p[family.block]
        jobs = each_task(b) if "tasks" in b else [{}] if runs(b["samples"]) else []
        return [EvalRule(family.rule, acc, [family.task], b["max_length"], b["methods"], b["samples"], jobs=jobs,
                         log=family.log, runtime=family.runtime)]

    # each benchmark family whose block the preset has (magicpig.harness.families)
    table = [rule for family in FAMILIES.values() if family.block in p
             for rule in (per_length(family) if family.per_length else per_task(family))]
    tasks = [f"ruler/{t}" for t in a["tasks"]]
    table += [
        EvalRule("ablation_centering", f"{abl}/centering", tasks, a["length"], a["centering_methods"],
                 a["centering_samples"], jobs=[{}], log="ablation_centering", runtime=1440),
        EvalRule("ablation_kl_grid", f"{abl}/kl_grid", tasks, a["length"], a["kl_grid"], a["samples"], jobs=[{}],
                 log="ablation_kl_grid", runtime=1440),
        # setup A vs B: dense and the first centering method
        EvalRule("ablation_setup", f"{abl}/setup_{{setup}}", tasks, a["length"], ["dense", a["centering_methods"][0]],
                 a["samples"], jobs=[{"setup": s} for s in a["setups"]], log="ablation_setup_{setup}", runtime=1440,
                 setup="{setup}"),
    ]
    if "sweeps" in p:
        s = p["sweeps"]
        table.append(EvalRule("sweep_ruler", f"{res}/sweeps", ["ruler/{task}"], s["length"], sweep_methods(s),
                              s["samples"], jobs=[{"task": t} for t in s["tasks"]], log="sweep_ruler_{task}",
                              runtime=2880))
    return [rule for rule in table if rule.jobs]


def out_dir(wildcards, output):
    """A command's --out-dir: the folder of the rule's first output (params must not hard-code an output's
    prefix: it is derived from the output, as Snakemake's lint asks)."""
    return os.path.dirname(output[0])


# ---- attention-level experiments, throughput ------------------------------------------------------------


def experiment_files():
    """The CSVs of `magicpig estimate all`: <name>.csv and <name>_summary.csv per experiment, the TopK vs
    oracle tables of the error experiment (per layer and per head) and the per-key cosine histograms of the
    geometry experiment (result_files.EXPERIMENT_FILES)."""
    return [f.name for f in EXPERIMENT_FILES]


def inputs_files():
    """The CSVs of `magicpig estimate inputs` (result_files.INPUTS_FILES)."""
    return [f.name for f in INPUTS_FILES]


def capture_args(preset, length, seed, prompt=0):
    """`magicpig estimate capture` options: one exact prefill of the preset's model at ``length`` tokens. Prompt
    ``prompt`` (0, 1, ...) has its own needle (seed + prompt) and haystack text (starting prompt x length tokens
    into the essays), so the captured prompts are distinct inputs."""
    return " ".join(filter(None, [f"--model={shlex.quote(preset['model'])} --context {int(length)}",
                                  f"--seed {int(seed) + int(prompt)} --haystack-offset {int(prompt) * int(length)}",
                                  device_args(preset)]))


def inputs_args(preset, estimation, seed):
    """`magicpig estimate inputs` options: the preset's model, its counts of random inputs and sentences."""
    return " ".join(filter(None, [f"--model={shlex.quote(preset['model'])} --seed {int(seed)}",
                                  f"--inputs {int(estimation['inputs'])}",
                                  f"--sentences {int(estimation['sentences'])}", device_args(preset)]))


def tune_kl_files(target_cost):
    """What `magicpig tune-kl --target-cost X` writes: its JSON result and the candidates it weighed
    (result_files.TUNE_KL_JSON, TUNE_KL_CANDIDATES_CSV), named by X (result_files.tune_kl_target)."""
    target = tune_kl_target(target_cost)
    return [f.format(target=target) for f in (TUNE_KL_JSON, TUNE_KL_CANDIDATES_CSV)]


def project_files():
    """The CSVs `magicpig project --out-dir` writes (result_files.PROJECT_FILES)."""
    return [f.name for f in PROJECT_FILES.values()]


def kernel_args(kb):
    """`magicpig bench kernel` options of the preset's kernel_bench block."""
    return " ".join([f"--n {int(n)}" for n in kb["n"]] + [f"--head-dim {int(d)}" for d in kb["head_dim"]]
                    + [f"--kl {shlex.quote(kl)}" for kl in kb["kl"]])


def decode_args(preset):
    """`magicpig bench decode` options of the preset's decode_bench block. Stock transformers (SDPA +
    DynamicCache) is the baseline of every throughput row, so dense@stock is always measured."""
    db = preset["decode_bench"]
    methods = (["dense@stock"] if "dense@stock" not in db["methods"] else []) + list(db["methods"])
    return " ".join(filter(None, [f"--model={shlex.quote(preset['model'])}"]
                           + [f"--context {int(n)}" for n in db["lengths"]]
                           + [method_args(methods), f"--fill {shlex.quote(db['fill'])}",
                              f"--weights {shlex.quote(db['weights'])}"]
                           + [f"--batch {int(b)}" for b in db["batches"]]
                           + [f"--steps {int(db['steps'])} --warmup {int(db['warmup'])}"]
                           + (["--max-throughput"] if db["max_throughput"] else [])
                           + [device_args(preset)]))


def decode_shapes(preset):
    """Names (model_shapes.yaml keys) of the models decode_bench.shapes measures by shape only."""
    return [s["model"].removeprefix("shape:") for s in preset["decode_bench"]["shapes"]]


def shape_decode_file(res, name):
    """decode.csv of shape-only model ``name`` (a wildcard too: "{shape}"), result_files.SHAPE_DECODE_CSV."""
    return f"{res}/{SHAPE_DECODE_CSV.folder.replace('<name>', name)}/{SHAPE_DECODE_CSV.name}"


def shape_preset(preset, name):
    """The preset with its decode_bench pointed at shape-only model ``name``, that entry's lengths and methods."""
    db = preset["decode_bench"]
    entry = next(s for s in db["shapes"] if s["model"] == f"shape:{name}")
    bench = {**db, "lengths": entry["lengths"], "methods": entry["methods"]}
    return {**preset, "model": entry["model"], "decode_bench": bench}


# ---- the report ------------------------------------------------------------------------------------------


def report_figures():
    """The report's figures (result_files.REPORT_FIGURES, the files magicpig.harness.report.figures draws)."""
    return list(REPORT_FIGURES)


def report_caption(file):
    """The caption file of a result file that the HTML report shows (REPORT.html, a figure): its ``caption``
    (result_files), written to .snakemake/report_captions/<name>.rst when this file is read, since Snakemake's
    report() takes a caption as a file; an absolute path, which Snakemake uses as it is."""
    path = Path(".snakemake", "report_captions", f"{file.name}.rst").resolve()
    text = f"{file.caption}\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")  # whole or not at all, should two readers race
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return str(path)


def result_paths(file, eval_rules, res, preset):
    """The files of preset ``preset`` (results under ``res``) that a result-file entry names: for eval results
    (result_files.eval_results) the metrics.json of every job of their rules in the job table ``eval_rules``;
    tune-kl's files at the preset's target cost; decode.csv of each model measured by shape only; else the file
    in its folder."""
    if file.folder == METHOD_DIR:
        return [path for rule in eval_rules if rule_of(file.rules, rule.name) for path in rule.targets()]
    if file == SHAPE_DECODE_CSV:
        return [shape_decode_file(res, shape) for shape in decode_shapes(preset)]
    if file in (TUNE_KL_JSON, TUNE_KL_CANDIDATES_CSV):
        return [f"{res}/{file.folder}/{file.format(target=tune_kl_target(preset['estimation']['target_cost']))}"]
    return [f"{res}/{file.folder}/{file.name}"]


def report_inputs(eval_rules, res, preset):
    """The report rule's inputs: every file that a section of the report reads (result_files.SECTION_READS),
    each once."""
    files = dict.fromkeys(file for reads in SECTION_READS.values() for file in reads)
    return list(dict.fromkeys(path for file in files for path in result_paths(file, eval_rules, res, preset)))


def results_root(wildcards, input):
    """The preset's results folder (`build_report --results`), from the report's inputs: the folder that holds
    them all (each lies in one of its subfolders: accuracy, estimation, throughput, ...)."""
    return os.path.commonpath(input.results)


def report_dir(wildcards, output):
    """Where the report writes REPORT.md and its figures."""
    return os.path.dirname(output.report)
