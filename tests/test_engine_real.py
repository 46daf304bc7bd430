"""On the embedded model (slow): 4K needle-in-a-haystack with dense and MagicPIG, and the CLI."""
import json
import subprocess
import sys

import pytest


@pytest.fixture(scope="module")
def smollm2():
    from magicpig.models import load_model

    return load_model("smollm2", device="cpu")


@pytest.mark.slow
def test_needle_4k_answered_by_dense_and_magicpig(smollm2):
    from magicpig.harness.bench.prompts import needle_prompt
    from magicpig.engine import Engine, GenerationConfig

    model, tok = smollm2
    ids, answer = needle_prompt(tok, 4096, depth=0.5)
    assert 4000 <= len(ids) <= 4096
    pre = Engine(model, tok).prefill(ids)
    cfg = GenerationConfig(max_new_tokens=16)
    dense = Engine(model, tok).decode(pre, "dense", cfg)[0]
    sparse = Engine(model, tok, backend="offload").decode(pre, "magicpig:K=10,L=150", cfg)[0]
    assert answer in dense.text, dense.text
    assert answer in sparse.text, sparse.text
    assert 0 < sparse.cost < 0.1  # a few percent of the offloaded keys


@pytest.mark.slow
def test_cli_generate_json(tmp_path):
    prompt = tmp_path / "q.txt"
    prompt.write_text("What is the capital of France? Answer in one word.")
    out = subprocess.run([sys.executable, "-m", "magicpig.harness.cli", "generate", "--model", "smollm2", "--method",
                          "magicpig:K=10,L=150", "--prompt-file", str(prompt), "--max-new-tokens", "8", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("answer", "cost", "tokens_per_s", "prompt_tokens", "new_tokens"):
        assert key in record
    assert 0 < record["new_tokens"] <= 8 and record["prompt_tokens"] > 10
