"""Every result file of the pipeline, by name: which Snakemake rule writes it and which code reads it.

This module is the one place a result file's name is spelled. Writers and readers import the entry (its
``name``, or ``under(results)`` for the file in a preset's results folder) instead of retyping the name, and the
workflow's rules name their outputs from it; tests/test_result_files.py checks that no other source file quotes
a declared name, that each declared rule exists in the workflow and that each declared reader uses the entry.

``folder`` is where the file lies: a folder under the preset's results root (``results/<preset>``) for the
pipeline's results, the report's folder (``figures/generated/<preset>``) for the report and its figures, or an
angle-bracketed description where the folder varies (the method folder of ``magicpig eval``, laid out by
magicpig.harness.results_paths). A ``name`` with ``{field}`` placeholders is a pattern: ``format`` fills it,
``glob`` matches every file of it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from magicpig.harness.families import FAMILIES

THROUGHPUT = "throughput"
ESTIMATION = "estimation"
METHOD_DIR = "<eval out>/<task>/<length>/<method dir>"
GPU_RUN = "results/gpu/<name>"  # one run of scripts/gpu_check.sh (`make gpu-check`), outside any preset
REPORT_DIR = "<report dir>"  # figures/generated/<preset>: build_report --out
REFERENCE_RUN = "figures/reference/<preset>-<date>"  # a finished run kept by `magicpig archive`, outside the pipeline


@dataclass(frozen=True)
class ResultFile:
    """One result file: ``name`` (or pattern) in ``folder``, written by the jobs of ``rules`` (a command outside
    the pipeline when empty: ``writer`` says which), read by the source files ``readers`` (repository paths;
    none for a table no code reads by name, kept for whoever reads the results)."""

    name: str
    folder: str
    rules: tuple[str, ...]
    writer: str
    readers: tuple[str, ...]

    @property
    def rel(self) -> str:
        """The file relative to the results root, as the report names a missing file: ``throughput/decode.csv``."""
        return f"{self.folder}/{self.name}"

    @property
    def stem(self) -> str:
        """The name less its extension."""
        return self.name.rsplit(".", 1)[0]

    @property
    def glob(self) -> str:
        """A glob pattern matching every file of a pattern entry (``tune_kl_*.json``); the name itself otherwise."""
        return re.sub(r"\{[^}]*\}", "*", self.name)

    def format(self, **fields) -> str:
        """The name with its placeholders filled (``tune_kl_{target}.json`` -> ``tune_kl_0.02.json``)."""
        return self.name.format(**fields)

    def under(self, results: str | Path) -> Path:
        """The file in a preset's results root (``results/<preset>``)."""
        return Path(results) / self.folder / self.name


# the rules of the `magicpig eval` job table (common.smk eval_rules): one per benchmark family (RULER rules of
# settings run at some lengths only add a length suffix: eval_ruler_16k), then the ablations' and the sweeps'
EVAL_RULE_NAMES = tuple(f.rule for f in FAMILIES.values()) + ("ablation_centering", "ablation_kl_grid",
                                                              "ablation_setup", "sweep_ruler")
REPORT = "magicpig/harness/report/"
THROUGHPUT_SMK = "workflow/rules/throughput.smk"
ESTIMATION_SMK = "workflow/rules/estimation.smk"
COMMON_SMK = "workflow/rules/common.smk"
ARCHIVE = "magicpig/harness/reference_runs.py"

# ---- magicpig eval: one method at one (task, length) ------------------------------------------------------

METRICS = ResultFile("metrics.json", METHOD_DIR, EVAL_RULE_NAMES, "magicpig.harness.evaluate", (
    "magicpig/harness/results_paths.py", "magicpig/harness/evaluate.py", "magicpig/harness/rescore.py",
    "magicpig/harness/results_tree.py", REPORT + "plots_accuracy.py", REPORT + "plots_sweeps.py"))
# what an eval job resumes from: written by the jobs of EVAL_RULE_NAMES but not declared as their outputs
PREDICTIONS = ResultFile("predictions.jsonl", METHOD_DIR, EVAL_RULE_NAMES, "magicpig.harness.evaluate", (
    "magicpig/harness/evaluate.py", "magicpig/harness/rescore.py", "magicpig/harness/results_tree.py"))
SETTINGS = ResultFile("settings.json", METHOD_DIR, EVAL_RULE_NAMES, "magicpig.harness.evaluate",
                      ("magicpig/harness/evaluate.py",))
LAST_RUN = ResultFile("last_run.json", "<eval out>", EVAL_RULE_NAMES, "magicpig.harness.commands.eval",
                      ("magicpig/harness/commands/eval.py",))

# ---- throughput: measured, then projected by the bandwidth model --------------------------------------------

KERNEL_CSV = ResultFile("kernel.csv", THROUGHPUT, ("bench_kernel",), "magicpig bench kernel --csv",
                        (THROUGHPUT_SMK, REPORT + "build.py"))
DECODE_CSV = ResultFile("decode.csv", THROUGHPUT, ("bench_decode", "bench_decode_shape"),
                        "magicpig bench decode --csv (also scripts/gpu_check.sh, in results/gpu/<name>)", (
                            THROUGHPUT_SMK, REPORT + "build.py", REPORT + "tables_system.py", REPORT + "tables_cpu.py",
                            REPORT + "plots_throughput.py", REPORT + "claims_system.py", REPORT + "paper_items.py"))
FIT_CSV = ResultFile("fit.csv", THROUGHPUT, ("project_hardware",), "magicpig.harness.commands.project",
                     (REPORT + "build.py",))
DECODE_PREDICTED_CSV = ResultFile("decode_predicted.csv", THROUGHPUT, ("project_hardware",),
                                  "magicpig.harness.commands.project", (REPORT + "build.py",))
PROJECTION_PAPER_HARDWARE_CSV = ResultFile(
    "projection_paper_hardware.csv", THROUGHPUT, ("project_hardware",), "magicpig.harness.commands.project",
    (REPORT + "build.py", REPORT + "plots_throughput.py", REPORT + "claims_system.py", REPORT + "paper_items.py"))
PROJECTION_PAPER_LATENCY_CSV = ResultFile(
    "projection_paper_latency.csv", THROUGHPUT, ("project_hardware",), "magicpig.harness.commands.project",
    (REPORT + "build.py", REPORT + "plots_throughput.py"))
PROJECTION_H200_CSV = ResultFile("projection_h200.csv", THROUGHPUT, ("project_hardware",),
                                 "magicpig.harness.commands.project",
                                 (REPORT + "build.py", REPORT + "plots_throughput.py"))
MACHINE_JSON = ResultFile("machine.json", GPU_RUN, (), "scripts/gpu_check.sh", (REPORT + "tables_system.py",))

# ---- estimation: attention-level experiments on captured prefills ------------------------------------------

CAPTURE = ResultFile("captures/capture_{length}_p{prompt}.safetensors", ESTIMATION, ("estimation_capture",),
                     "magicpig estimate capture --out", (ESTIMATION_SMK,))


def _experiment(name: str, *readers: str) -> ResultFile:
    """A table of `magicpig estimate all` (magicpig.harness.commands.estimate: ``<stem>.csv`` per table)."""
    return ResultFile(name, ESTIMATION, ("estimation_experiments",), "magicpig.harness.commands.estimate", readers)


SPREAD_CSV = _experiment("spread.csv", REPORT + "plots_attention.py", REPORT + "claims_system.py")
SPREAD_SUMMARY_CSV = _experiment("spread_summary.csv", REPORT + "build.py", REPORT + "paper_items.py")
ERROR_CSV = _experiment("error.csv")
ERROR_SUMMARY_CSV = _experiment("error_summary.csv", REPORT + "build.py", REPORT + "plots_attention.py",
                                REPORT + "paper_items.py")
ERROR_TOPK_VS_ORACLE_CSV = _experiment("error_topk_vs_oracle.csv", REPORT + "build.py", REPORT + "plots_attention.py",
                                       REPORT + "claims_system.py", REPORT + "paper_items.py")
ERROR_TOPK_VS_ORACLE_HEADS_CSV = _experiment("error_topk_vs_oracle_heads.csv", REPORT + "claims_system.py")
KL_GRID_CSV = _experiment("kl_grid.csv")
KL_GRID_SUMMARY_CSV = _experiment("kl_grid_summary.csv", REPORT + "build.py", REPORT + "plots_attention.py",
                                  REPORT + "claims_system.py", REPORT + "paper_items.py")
CENTERING_CSV = _experiment("centering.csv", REPORT + "claims_centering.py")
CENTERING_SUMMARY_CSV = _experiment("centering_summary.csv", REPORT + "build.py", REPORT + "plots_accuracy.py",
                                    REPORT + "claims_centering.py")
GEOMETRY_CSV = _experiment("geometry.csv", REPORT + "plots_attention.py")
GEOMETRY_SUMMARY_CSV = _experiment("geometry_summary.csv", REPORT + "build.py")
GEOMETRY_HIST_CSV = _experiment("geometry_hist.csv", REPORT + "plots_attention.py")
MASS_CURVE_CSV = _experiment("mass_curve.csv", REPORT + "plots_geometry.py", REPORT + "paper_items.py")
MASS_CURVE_SUMMARY_CSV = _experiment("mass_curve_summary.csv", REPORT + "sections_sweeps.py")
SINK_CENTER_CSV = _experiment("sink_center.csv", REPORT + "plots_geometry.py", REPORT + "paper_items.py")
SINK_CENTER_SUMMARY_CSV = _experiment("sink_center_summary.csv", REPORT + "sections_sweeps.py")
VALUE_OUTPUT_CSV = _experiment("value_output.csv", REPORT + "plots_geometry.py", REPORT + "paper_items.py")
VALUE_OUTPUT_SUMMARY_CSV = _experiment("value_output_summary.csv")
VALUE_NORM_CSV = _experiment("value_norm.csv", REPORT + "plots_geometry.py", REPORT + "paper_items.py")
VALUE_NORM_SUMMARY_CSV = _experiment("value_norm_summary.csv", REPORT + "sections_sweeps.py")

INPUTS_SIMILARITY_CSV = ResultFile("inputs_similarity.csv", ESTIMATION, ("estimation_inputs",),
                                   "magicpig.harness.estimate_inputs",
                                   (REPORT + "plots_geometry.py", REPORT + "paper_items.py"))
INPUTS_MATRIX_CSV = ResultFile("inputs_matrix.csv", ESTIMATION, ("estimation_inputs",),
                               "magicpig.harness.estimate_inputs", (REPORT + "plots_geometry.py",))
TUNE_KL_JSON = ResultFile("tune_kl_{target}.json", ESTIMATION, ("tune_kl",), "magicpig.harness.commands.tune_kl",
                          (COMMON_SMK, REPORT + "build.py"))
TUNE_KL_CANDIDATES_CSV = ResultFile("tune_kl_{target}_candidates.csv", ESTIMATION, ("tune_kl",),
                                    "magicpig.harness.commands.tune_kl", (COMMON_SMK,))


def tune_kl_target(target_cost: float) -> str:
    """The ``{target}`` of TUNE_KL_JSON and TUNE_KL_CANDIDATES_CSV: ``--target-cost`` as Python's ``:g`` writes it."""
    return f"{float(target_cost):g}"


# ---- the build and the report ------------------------------------------------------------------------------

CPU_MODULE_TXT = ResultFile("cpu_module.txt", "build", ("build_cpu_module",), "magicpig build (its stdout)",
                            ("workflow/rules/build.smk",))
REPORT_MD = ResultFile("REPORT.md", REPORT_DIR, ("report",), "magicpig.harness.report.sections",
                       ("workflow/rules/report.smk", REPORT + "sections.py", ARCHIVE))
REPORT_HTML = ResultFile("REPORT.html", REPORT_DIR, ("report",), "magicpig.harness.report.html",
                         ("workflow/rules/report.smk", ARCHIVE))

# ---- a reference run (magicpig.harness.reference_runs): the report and figures above, plus these ------------

REFERENCE_JOB_TIMES_CSV = ResultFile("job_times.csv", REFERENCE_RUN, (), "magicpig archive", (ARCHIVE,))
REFERENCE_MACHINE_JSON = replace(MACHINE_JSON, folder=REFERENCE_RUN, writer="magicpig archive", readers=(ARCHIVE,))
REFERENCE_RUN_JSON = ResultFile("run.json", REFERENCE_RUN, (), "magicpig archive", (ARCHIVE,))


# ---- the report's figures (magicpig.harness.report.figures draws each; REPORT.md embeds it) -------------------


def _figure(name: str, section: str) -> ResultFile:
    """A figure of the report, embedded by the report section ``section`` and named by paper_items."""
    return ResultFile(name, REPORT_DIR, ("report",), "magicpig.harness.report.figures",
                      (REPORT + "figures.py", REPORT + section, REPORT + "paper_items.py"))


RULER_PER_TASK_PNG = _figure("ruler_per_task.png", "build.py")
RULER_VS_COST_PNG = _figure("ruler_vs_cost.png", "build.py")
ATTENTION_SPREAD_PNG = _figure("attention_spread.png", "build.py")
ERROR_VS_BUDGET_PNG = _figure("error_vs_budget.png", "build.py")
GEOMETRY_PNG = _figure("geometry.png", "build.py")
CENTERING_PNG = _figure("centering.png", "build.py")
KL_GRID_PNG = _figure("kl_grid.png", "build.py")
TOPK_BUDGET_SWEEP_PNG = _figure("topk_budget_sweep.png", "sections_sweeps.py")
ORACLE_VS_TOPK_BUDGET_PNG = _figure("oracle_vs_topk_budget.png", "sections_sweeps.py")
CENTERING_SWEEP_PNG = _figure("centering_sweep.png", "sections_sweeps.py")
MAGICPIG_VS_TOPK_COST_PNG = _figure("magicpig_vs_topk_cost.png", "sections_sweeps.py")
ATTENTION_MASS_CURVE_PNG = _figure("attention_mass_curve.png", "sections_sweeps.py")
SINK_KEY_SIMILARITY_PNG = _figure("sink_key_similarity.png", "sections_sweeps.py")
SINK_VS_MEAN_KEY_PNG = _figure("sink_vs_mean_key.png", "sections_sweeps.py")
VALUE_VS_LOGIT_PNG = _figure("value_vs_logit.png", "sections_sweeps.py")
VALUE_NORMS_PNG = _figure("value_norms.png", "sections_sweeps.py")
THROUGHPUT_BATCH_PNG = _figure("throughput_batch.png", "build.py")
THROUGHPUT_CONTEXT_PNG = _figure("throughput_context.png", "build.py")
SPEEDUP_PAPER_HARDWARE_PNG = _figure("speedup_paper_hardware.png", "build.py")
CPU_BASELINES_PNG = _figure("cpu_baselines.png", "build.py")


RESULT_FILES: tuple[ResultFile, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, ResultFile))

# the tables `magicpig estimate all` writes (the rule estimation_experiments' outputs)
EXPERIMENT_FILES: tuple[ResultFile, ...] = tuple(f for f in RESULT_FILES if f.rules == ("estimation_experiments",))
# what `magicpig estimate inputs` writes
INPUTS_FILES: tuple[ResultFile, ...] = (INPUTS_SIMILARITY_CSV, INPUTS_MATRIX_CSV)
# what `magicpig project --out-dir` writes, by the key of its table
PROJECT_FILES: dict[str, ResultFile] = {"fit": FIT_CSV, "predicted": DECODE_PREDICTED_CSV,
                                        "paper": PROJECTION_PAPER_HARDWARE_CSV,
                                        "latency": PROJECTION_PAPER_LATENCY_CSV, "h200": PROJECTION_H200_CSV}
