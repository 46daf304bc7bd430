# MagicPIG reproduction pipeline: `snakemake --cores all` (preset from config/config.yaml).
# Every table and figure of the report comes from the results files written by the rules below.
import sys

from snakemake.utils import min_version, validate

min_version("8.0")

configfile: "config/config.yaml"
validate(config, "workflow/schemas/config.schema.yaml")
# What the schema cannot say (method specs, task names, (K, L) limits, the model and its context): refused
# here, before any job, with every problem named by its config path.
sys.path.insert(0, workflow.basedir)
from magicpig.harness.pipeline_config import validate_pipeline_config

validate_pipeline_config(config)

PRESET = config["preset"]
P = config["presets"][PRESET]
SEED = config.get("seed", 0)
RES = f"results/{PRESET}"
FIG = f"figures/generated/{PRESET}"
# The interpreter running Snakemake runs every step, so no virtual environment needs activating.
PYTHON = sys.executable
MAGICPIG = f"{PYTHON} -m magicpig.harness.cli"

include: "workflow/rules/common.smk"
include: "workflow/rules/build.smk"
include: "workflow/rules/accuracy.smk"
include: "workflow/rules/ablations.smk"
include: "workflow/rules/estimation.smk"
include: "workflow/rules/throughput.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        f"{FIG}/REPORT.md",
