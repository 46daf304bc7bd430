#!/usr/bin/env bash
# The GPU check: what a user with one CUDA GPU runs (`make gpu-check`) to measure this suite's throughput
# claims on their machine, in about 9 minutes, without network access and without model weights.
#
#   1. build and self-check the CPU module (magicpig build)
#   2. the CUDA tests (pytest -k cuda: the tests named *cuda*, skipped on machines without a GPU)
#   3. magicpig bench decode on shape:llama-3.1-8b (random weights, bf16, timing only): GPU-only full
#      attention (dense@stock: stock transformers SDPA + DynamicCache) vs MagicPIG (10,150) offload at
#      16K / 64K / 96K, batch 1 and the largest batch that fits (--max-throughput, capped at 8); 32 warm-up
#      + 32 timed steps; the caches are tiled from one exact 16K prefill. MagicPIG's setup (its hash tables,
#      built by the CPU module) dominates the time: on one H200 with 16 CPU threads (figures/reference/
#      gpu-check-nvidia-h200-2026-12-04) 84 s at 64K batch 8, 109 s at 96K batch 4; the benchmark needs
#      about 7 of the 9 minutes.
#
# Output: results/gpu/<gpu-name>/ with machine.json (GPU, memory, driver, CPU, cores, host memory,
# torch / CUDA), build.log, tests.log, decode.csv, decode.log, summary.txt; the summary is printed.
#
# Options / environment:
#   --dry or MAGICPIG_GPU_CHECK_DRY=1   a few-second rehearsal on the CPU (shape:tiny-llama, contexts 256 /
#                                       512, 2 + 2 steps); the test suite runs it (tests/test_gpu_check.py)
#   PYTHON=...                          the interpreter (default .venv/bin/python, else python3); nothing is
#                                       installed
#   GPU_CHECK_OUT=DIR                   output folder (default results/gpu/<gpu-name>, dry: results/gpu/dry-cpu)
#   GPU_CHECK_CONTEXTS / GPU_CHECK_BATCHES / GPU_CHECK_STEPS / GPU_CHECK_WARMUP / GPU_CHECK_MAX_BATCH
#                                       override the grid (space-separated lists for the first two)
#   GPU_CHECK_BENCH_TIMEOUT             seconds for the benchmark (default 450; decode.csv is rewritten after
#                                       every row, so rows finished before a timeout are kept)
set -uo pipefail

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; }

DRY="${MAGICPIG_GPU_CHECK_DRY:-0}"
for arg in "$@"; do
  case "$arg" in
    --dry) DRY=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown option '$arg' (allowed: --dry, --help)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.." || exit 2
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c "import magicpig, torch" 2>/dev/null; then
  echo "gpu_check: $PYTHON cannot import magicpig and torch; set PYTHON= to the environment's python" >&2
  exit 2
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1  # the GPU machine has no network
MAGICPIG=("$PYTHON" -m magicpig.harness.cli)

if [ "$DRY" = "1" ]; then
  DEVICE=cpu MODEL=shape:tiny-llama DTYPE=float32 TILE_BASE=256
  CONTEXTS="${GPU_CHECK_CONTEXTS:-256 512}" BATCHES="${GPU_CHECK_BATCHES:-1 2}"
  STEPS="${GPU_CHECK_STEPS:-2}" WARMUP="${GPU_CHECK_WARMUP:-2}" MAX_BATCH="${GPU_CHECK_MAX_BATCH:-2}"
  NAME=dry-cpu
else
  if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA device visible to torch (use --dry to rehearse on the CPU)" >&2
    exit 1
  fi
  DEVICE=cuda MODEL=shape:llama-3.1-8b DTYPE=bfloat16 TILE_BASE=16384
  CONTEXTS="${GPU_CHECK_CONTEXTS:-16384 65536 98304}" BATCHES="${GPU_CHECK_BATCHES:-1}"
  STEPS="${GPU_CHECK_STEPS:-32}" WARMUP="${GPU_CHECK_WARMUP:-32}" MAX_BATCH="${GPU_CHECK_MAX_BATCH:-8}"
  NAME=$("$PYTHON" -c "import re, torch; print(re.sub(r'[^A-Za-z0-9]+', '-', torch.cuda.get_device_name(0)).strip('-').lower())")
fi
OUT="${GPU_CHECK_OUT:-results/gpu/$NAME}"
BENCH_TIMEOUT="${GPU_CHECK_BENCH_TIMEOUT:-450}"
mkdir -p "$OUT" || exit 2
START=$(date +%s)
echo "gpu_check: $([ "$DRY" = 1 ] && echo 'DRY run (CPU rehearsal)' || echo "GPU $NAME") -> $OUT"

"$PYTHON" - "$OUT/machine.json" "$DEVICE" <<'PY' || { echo "gpu_check: machine description failed" >&2; exit 1; }
import json, sys
from magicpig.harness.machine import machine_record
info = machine_record(sys.argv[2], load_cpu_module=True)
with open(sys.argv[1], "w") as fh:
    json.dump(info, fh, indent=1)
print("machine: " + ", ".join(f"{k}={info[k]}" for k in ("gpu_name", "gpu_memory_gb", "gpu_driver", "cpu_model",
                                                          "cpu_cores_logical", "host_memory_gb", "torch_version",
                                                          "cuda_version") if k in info))
PY

# 1. the CPU module (cached after the first build)
BUILD_ARGS=(); [ "$DRY" = 1 ] && BUILD_ARGS=(--no-check)
timeout 120 "${MAGICPIG[@]}" build "${BUILD_ARGS[@]}" > "$OUT/build.log" 2>&1
BUILD_RC=$?
echo "build: rc=$BUILD_RC ($(grep -m1 '^isa:' "$OUT/build.log" || echo 'see build.log'))"

# 2. the CUDA tests (the dry run only checks that the selection collects)
if [ "$DRY" = 1 ]; then
  timeout 90 "$PYTHON" -m pytest -q --collect-only -k cuda tests/test_methods.py > "$OUT/tests.log" 2>&1
else
  timeout 90 "$PYTHON" -m pytest -q -k cuda tests > "$OUT/tests.log" 2>&1
fi
TESTS_RC=$?
echo "cuda tests: rc=$TESTS_RC ($(tail -n 1 "$OUT/tests.log"))"

# 3. the throughput experiment
ARGS=(--model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" --fill tile --tile-base "$TILE_BASE"
      --method dense@stock --method "magicpig:K=10,L=150@offload" --steps "$STEPS" --warmup "$WARMUP"
      --max-throughput --max-batch "$MAX_BATCH" --csv "$OUT/decode.csv")
for n in $CONTEXTS; do ARGS+=(--context "$n"); done
for b in $BATCHES; do ARGS+=(--batch "$b"); done
timeout "$BENCH_TIMEOUT" "${MAGICPIG[@]}" bench decode "${ARGS[@]}" > "$OUT/decode.log" 2>&1
BENCH_RC=$?
[ "$BENCH_RC" = 124 ] && echo "bench decode: stopped after ${BENCH_TIMEOUT} s; the rows finished so far are kept"

{
  echo "GPU check $([ "$DRY" = 1 ] && echo '(DRY: CPU rehearsal, not a measurement)') on $NAME, $(date -u +%FT%TZ)"
  echo "model $MODEL ($DTYPE, random weights: shape-only timing), contexts $CONTEXTS, batches $BATCHES" \
       "+ max batch <= $MAX_BATCH, $WARMUP warm-up + $STEPS timed steps"
  echo "build rc=$BUILD_RC, cuda tests rc=$TESTS_RC ($(tail -n 1 "$OUT/tests.log")), bench rc=$BENCH_RC"
  if [ -s "$OUT/decode.csv" ]; then
    "$PYTHON" -c "import sys; from magicpig.harness.bench.table import summary; from magicpig.harness.csv_rows import load_rows; print(summary(load_rows(sys.argv[1])))" "$OUT/decode.csv"
  else
    echo "no decode rows (see $OUT/decode.log):"; tail -n 20 "$OUT/decode.log"
  fi
  echo "took $(( $(date +%s) - START )) s; files in $OUT"
} | tee "$OUT/summary.txt"

# any step that failed (the bench: also no row fitting, or the timeout) fails the check; rows are kept
if [ "$BUILD_RC" != 0 ] || [ "$TESTS_RC" != 0 ] || [ "$BENCH_RC" != 0 ]; then
  exit 1
fi
exit 0
