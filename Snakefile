# MagicPIG reproduction pipeline: `snakemake --cores all` (preset from config/config.yaml).
# Every table and figure of the report comes from the results files written by the rules below; each rule's
# outputs are those files themselves (metrics.json, CSVs, figures), so deleting one reruns its job and the report.
#   snakemake --sdm conda ...                     every step in workflow/envs/magicpig.yaml instead of this Python
#   snakemake --profile profiles/slurm ...        jobs on a SLURM cluster, placed by their declared resources
#                                                 (README: On a SLURM cluster; `make slurm-check` runs it on a real one)
#   snakemake --report figures/generated/<preset>/report.html   the figures as an HTML report
import shlex
import sys

from snakemake.utils import min_version

min_version("8.0")


configfile: "config/config.yaml"


# The schema (magicpig/data/pipeline_config.schema.yaml) and what it cannot say (method specs, task names,
# (K, L) limits, the model and its context): refused here, before any job, with every problem named by its
# config path. The rules read the config with its defaults filled in.
sys.path.insert(0, workflow.basedir)
from magicpig.harness.pipeline_config import validate_pipeline_config

config.update(validate_pipeline_config(config))


report: "workflow/report/workflow.rst"


PRESET = config["preset"]
P = config["presets"][PRESET]
SEED = config["seed"]
RES = f"results/{PRESET}"
FIG = f"figures/generated/{PRESET}"


include: "workflow/rules/common.smk"


# Plain `snakemake`: the interpreter running Snakemake runs every step (no virtual environment to activate);
# with `--sdm conda` each job runs in its rule's conda env, whose `python` is the one on PATH.
PYTHON = "python" if uses_conda(workflow) else sys.executable
MAGICPIG = f"{shlex.quote(PYTHON)} -m magicpig"
ENV = "../envs/magicpig.yaml"  # a rule's conda: path is relative to its own file (workflow/rules/)
GPUS = gpus(P)  # one for each job that runs the model when the preset's device is cuda
# cores a job that uses every core asks a cluster for (job_threads; a local run gives it all of --cores)
CPUS = sized(P, 4, 16)


include: "workflow/rules/build.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/estimation.smk"
include: "workflow/rules/throughput.smk"
include: "workflow/rules/report.smk"


# `all` only gathers the targets: never a cluster job
localrules:
    all,


# The report and every results file it reads: Snakemake reruns a job whose output is missing only when that file
# is a target or a job needing it runs anyway, so listing the results here makes deleting one metrics.json rerun
# exactly its job, and then the report.
rule all:
    input:
        rules.report.output,
        EVAL_METRICS,
        ESTIMATION_FILES,
        THROUGHPUT_FILES,
    default_target: True
