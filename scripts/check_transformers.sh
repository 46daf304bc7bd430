#!/usr/bin/env bash
# The library's tests (engine, attention hook, cache, patch, methods) under both ends of the transformers
# range pinned in pyproject.toml: the lower bound's release and the newest release below the upper bound,
# each in a throwaway virtualenv with the torch that `make setup` installs. Not part of `make test` (it
# installs two transformers, minutes); `make check-transformers` runs it. PYTHON=... picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-$(grep -o 'torch==[0-9.]*' Makefile | head -1)}
range=$(grep -o '"transformers[^"]*"' pyproject.toml | tr -d '"' | sed 's/^transformers//')  # e.g. >=4.56,<5.26
low=$(sed -E 's/^>=([0-9.]+),.*/\1/' <<<"$range")
TESTS=(tests/test_engine.py tests/test_engine_api.py tests/test_hook.py tests/test_patch.py
       tests/test_decode_path.py tests/test_methods.py)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
status=0
for end in "==$low" "$range"; do
    venv="$root/venv"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install -q "$TORCH" "transformers$end" pytest pyyaml ninja psutil
    version=$("$venv/bin/python" -c "import transformers; print(transformers.__version__)")
    echo "== transformers $version (transformers$end), $TORCH"
    if PYTHONPATH="$PWD" "$venv/bin/python" -m pytest -q -p no:cacheprovider "${TESTS[@]}"; then
        echo "== transformers $version: passed"
    else
        echo "== transformers $version: FAILED"
        status=1
    fi
done
exit $status
