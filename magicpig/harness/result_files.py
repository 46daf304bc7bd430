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
# a GPU run of scripts/gpu_check.sh committed as reference data (its folder of results/gpu, the rows of any reruns
# appended to its decode.csv with their own run_id); reports read it beside results/gpu
REFERENCE_GPU_RUN = "figures/reference/gpu-check-<gpu name>-<date>"


@dataclass(frozen=True)
class ResultFile:
    """One result file: ``name`` (or pattern) in ``folder``, written by the jobs of ``rules`` (a command outside
    the pipeline when empty: ``writer`` says which), read by the source files ``readers`` (repository paths;
    none for a table no code reads by name, kept for whoever reads the results). ``caption``: for a file that
    `snakemake --report` shows (REPORT.html, each figure), its caption there (reStructuredText; the report rule
    writes it to a caption file, workflow/rules/common.smk ``report_caption``)."""

    name: str
    folder: str
    rules: tuple[str, ...]
    writer: str
    readers: tuple[str, ...]
    caption: str = ""

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


def rule_of(rules, name: str) -> bool:
    """Whether the job-table rule ``name`` is one of ``rules`` or the per-length rule of one (eval_ruler_16k)."""
    return any(name == rule or name.startswith(f"{rule}_") for rule in rules)
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
DECODE_CSV = ResultFile("decode.csv", THROUGHPUT, ("bench_decode",),
                        "magicpig bench decode --csv (also scripts/gpu_check.sh, in results/gpu/<name>)", (
                            THROUGHPUT_SMK, REPORT + "build.py", REPORT + "tables_system.py", "magicpig/harness/results_tree.py",
                            REPORT + "plots_throughput.py", REPORT + "claims_system.py", REPORT + "paper_items.py"))
# decode.csv of each model that decode_bench.shapes measures by shape only
SHAPE_DECODE_CSV = replace(DECODE_CSV, folder=f"{THROUGHPUT}/shapes/<name>", rules=("bench_decode_shape",),
                           writer="magicpig bench decode --csv", readers=(COMMON_SMK,))
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
                                 (REPORT + "build.py", REPORT + "plots_throughput.py", REPORT + "tables_system.py"))
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
MASS_CURVE_SUMMARY_CSV = _experiment("mass_curve_summary.csv", REPORT + "build.py")
SINK_CENTER_CSV = _experiment("sink_center.csv", REPORT + "plots_geometry.py", REPORT + "paper_items.py")
SINK_CENTER_SUMMARY_CSV = _experiment("sink_center_summary.csv", REPORT + "build.py")
VALUE_OUTPUT_CSV = _experiment("value_output.csv", REPORT + "plots_geometry.py", REPORT + "paper_items.py")
VALUE_OUTPUT_SUMMARY_CSV = _experiment("value_output_summary.csv")
VALUE_NORM_CSV = _experiment("value_norm.csv", REPORT + "plots_geometry.py", REPORT + "paper_items.py")
VALUE_NORM_SUMMARY_CSV = _experiment("value_norm_summary.csv", REPORT + "build.py")

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
                         ("workflow/rules/report.smk", ARCHIVE), caption=(
    "The whole report (``REPORT.md`` rendered to HTML): the claims checked against the paper, then every "
    "reproduced table beside the paper's (RULER Table 3, LongBench Table 2, GSM8K-CoT Table 1, the ablations, the "
    "attention-level experiments, throughput measured here and the projections, marked as such), with the figures."))

# ---- a reference run (magicpig.harness.reference_runs): the report and figures above, plus these ------------

REFERENCE_JOB_TIMES_CSV = ResultFile("job_times.csv", REFERENCE_RUN, (), "magicpig archive", (ARCHIVE,))
REFERENCE_MACHINE_JSON = replace(MACHINE_JSON, folder=REFERENCE_RUN, writer="magicpig archive", readers=(ARCHIVE,))
REFERENCE_RUN_JSON = ResultFile("run.json", REFERENCE_RUN, (), "magicpig archive", (ARCHIVE,))


# ---- the report's figures (magicpig.harness.report.figures draws each; REPORT.md embeds it) -------------------


# the caption of a figure without one of its own
FIGURE_CAPTION = ("A figure of the report, drawn from this run's results files; ``REPORT.html`` has the table it "
                  "comes from, beside the paper's numbers. A figure whose data is missing says so on the figure.")


def _figure(name: str, section: str, caption: str = FIGURE_CAPTION) -> ResultFile:
    """A figure of the report, embedded by the report section ``section`` and named by paper_items; ``caption``:
    what the HTML report of `snakemake --report` says under it."""
    return ResultFile(name, REPORT_DIR, ("report",), "magicpig.harness.report.figures",
                      (REPORT + "figures.py", REPORT + section, REPORT + "paper_items.py"), caption)


RULER_PER_TASK_PNG = _figure("ruler_per_task.png", "build.py", (
    "RULER score per task and method (string match, x100) of Table 3's settings, one panel per context length of "
    "the preset, with the tables' 95% intervals as whiskers (Clopper-Pearson for 0/100 scores, else bootstrap with "
    "an exact bound); dashed lines: the paper's Table 3 average of the same setting at its first length (the "
    "paper prints no per-task cells)."))
RULER_VS_COST_PNG = _figure("ruler_vs_cost.png", "build.py", (
    "RULER average (the tables' task average and its MOVER interval over the task intervals) against the measured "
    "cost2 (fraction of the offloaded keys used), one marker per (method, length), beside the paper's Table 3 "
    "averages at the settings' nominal cost2."))
ATTENTION_SPREAD_PNG = _figure("attention_spread.png", "build.py", (
    "Attention spread (paper Figure 2b): the attention mass in the top 20% of keys per layer, with and without "
    "the attention sink (mean over heads), and its spread over heads, on the captured prefill."))
ERROR_VS_BUDGET_PNG = _figure("error_vs_budget.png", "build.py", (
    "Relative output error against cost2 for TopK, oracle sampling and MagicPIG (means over MagicPIG's sparse "
    "layers; paper Figures 3, 4 and 6a/b, at 16K there), and the TopK / oracle error ratio at equal distinct keys "
    "per layer beside the paper's \"up to 4x\"."))
GEOMETRY_PNG = _figure("geometry.png", "build.py", (
    "Geometry of queries and keys (paper Figure 5): per-layer cosines of queries and keys to the sink key and to "
    "the key mean, and cos(q, k) before and after centering (mean ± std)."))
CENTERING_PNG = _figure("centering.png", "build.py", (
    "Centering ablation (paper Figure 9a): accuracy per task with and without centering the keys (the tables' "
    "95% intervals as whiskers, a zero marked on the axis; the paper's no-centering NIAH and FWE as crosses), and "
    "the sampled fraction per (K, L) with and without centering beside the paper's \"under 0.1%\" line."))
KL_GRID_PNG = _figure("kl_grid.png", "build.py", (
    "Sampled fraction of the keys for MagicPIG's (K, L) grid against L, one line per K: measured on the captured "
    "keys, the well-spread p = 1/2 formula, and the paper's Table 9."))
TOPK_BUDGET_SWEEP_PNG = _figure("topk_budget_sweep.png", "build.py")
ORACLE_VS_TOPK_BUDGET_PNG = _figure("oracle_vs_topk_budget.png", "build.py")
CENTERING_SWEEP_PNG = _figure("centering_sweep.png", "build.py")
MAGICPIG_VS_TOPK_COST_PNG = _figure("magicpig_vs_topk_cost.png", "build.py")
ATTENTION_MASS_CURVE_PNG = _figure("attention_mass_curve.png", "build.py")
SINK_KEY_SIMILARITY_PNG = _figure("sink_key_similarity.png", "build.py")
SINK_VS_MEAN_KEY_PNG = _figure("sink_vs_mean_key.png", "build.py")
VALUE_VS_LOGIT_PNG = _figure("value_vs_logit.png", "build.py")
VALUE_NORMS_PNG = _figure("value_norms.png", "build.py")
THROUGHPUT_BATCH_PNG = _figure("throughput_batch.png", "build.py", (
    "Decode throughput (tokens/s) against batch size: measured on this machine, beside the PROJECTION "
    "(bandwidth model, not measured) on one H200 and the paper's L20 points."))
THROUGHPUT_CONTEXT_PNG = _figure("throughput_context.png", "build.py", (
    "Decode latency (ms per token) against context length: measured on this machine, beside the PROJECTION (one "
    "H200, batch 1; bandwidth model, not measured) and the paper's 54 ms at batch 1 on the simulated RTX 4090 (an "
    "L20 capped at 24 GB; Llama-3.1-8B, 96K, (10,150); Fig. 8c) set against the projection on that machine, with "
    "its baseline (full attention on the CPU at a theoretical 150 GB/s: the KV cache read from host memory at that "
    "rate, the weights on the GPU, the step their sum) projected at batch 1."))
SPEEDUP_PAPER_HARDWARE_PNG = _figure("speedup_paper_hardware.png", "build.py", (
    "Speed-up of MagicPIG over the paper's baseline of each setting (Sec. 5.2, Baselines): measured over GPU-only "
    "full attention when decode.csv has GPU rows, and the PROJECTION (bandwidth model, not measured) for the "
    "paper's three machines beside the paper's ratios: A100 1.5x and L20 5.0x over full attention on the GPU, the "
    "simulated RTX 4090's 3.3x over full attention on the CPU at a theoretical 150 GB/s. The projected CPU "
    "baseline reads the whole KV cache from host memory at 150 GB/s and the weights on the GPU (its bandwidth "
    "times its efficiency, plus a per-layer overhead), one after the other, at the largest batch whose cache fits "
    "host memory."))
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
# the report's figures, in the order the report rule declares them as outputs
REPORT_FIGURES: tuple[ResultFile, ...] = tuple(f for f in RESULT_FILES if f.writer == "magicpig.harness.report.figures")


# ---- what each section of the report reads ------------------------------------------------------------------
# report.sections.SECTIONS gives each section its entry of SECTION_READS; the workflow's report rule takes every
# file they name as its inputs (workflow/rules/common.smk report_inputs), so that the report reruns when one
# changes. The map lives here, not beside the sections, because the Snakefile reads it when it loads and this
# module imports nothing heavy. A section's reads include those of the figures it embeds.


def eval_results(*rules: str) -> ResultFile:
    """The metrics.json (with the predictions.jsonl beside it) written by the eval jobs of ``rules``; a
    benchmark family's rule stands for its per-length rules too (eval_ruler: eval_ruler_16k, ...)."""
    return replace(METRICS, rules=rules)


# the eval results of each benchmark family, by its block: what its accuracy table shows
_FAMILY_READS = {f.block: (eval_results(f.rule),) for f in FAMILIES.values()}
_ACCURACY = eval_results(*(f.rule for f in FAMILIES.values()))
_ABLATIONS = eval_results("ablation_centering", "ablation_kl_grid", "ablation_setup")
_SWEEPS = eval_results("sweep_ruler")
_PROJECTED = tuple(PROJECT_FILES.values())

SECTION_READS: dict[str, tuple[ResultFile, ...]] = {
    **_FAMILY_READS,
    "table1": _FAMILY_READS["gsm8k"] + _FAMILY_READS["lm_eval"],
    "skipped": (_ACCURACY, _ABLATIONS),
    "claims": (_ACCURACY, _ABLATIONS, CENTERING_CSV, CENTERING_SUMMARY_CSV, SPREAD_CSV, ERROR_TOPK_VS_ORACLE_CSV,
               ERROR_TOPK_VS_ORACLE_HEADS_CSV, KL_GRID_SUMMARY_CSV, DECODE_CSV, PROJECTION_PAPER_HARDWARE_CSV),
    "disagreements": (_ACCURACY,),
    "ablations": (_ABLATIONS, CENTERING_SUMMARY_CSV),
    "kl_tables": (_ACCURACY,),
    # the sweeps, beside the RULER runs of the main grid
    "sweeps": (_SWEEPS, *_FAMILY_READS["ruler"], MASS_CURVE_SUMMARY_CSV, SINK_CENTER_SUMMARY_CSV,
               VALUE_NORM_SUMMARY_CSV),
    # every table of `magicpig estimate all` and tune-kl's files, the ones no code reads by name included
    "estimation": EXPERIMENT_FILES + (TUNE_KL_JSON, TUNE_KL_CANDIDATES_CSV),
    "throughput": (KERNEL_CSV, DECODE_CSV) + _PROJECTED,
    "tokens": (MASS_CURVE_CSV, SINK_CENTER_CSV, VALUE_OUTPUT_CSV, VALUE_NORM_CSV) + INPUTS_FILES,
    "table7": (DECODE_CSV,),
    "table8": (),
    "shapes": (SHAPE_DECODE_CSV,),
    # the GPU runs (results/gpu, the committed figures/reference/gpu-check-*) are outside the preset's results:
    # no job of the pipeline writes them; their rows are set beside the preset's H200 projection
    "gpu": (PROJECTION_H200_CSV,),
}
