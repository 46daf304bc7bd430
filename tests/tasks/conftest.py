"""Fixtures for the task tests: the embedded model's tokenizer (loaded once per session), a tiny random
model for it and the fixture-file folder."""
from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="session")
def tokenizer():
    from magicpig.models import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="module")
def tiny(tokenizer):
    """A 2-layer random Llama (fixed seed) whose vocabulary covers the real tokenizer (one per test module:
    an engine may patch it)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                      initializer_range=0.2, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa").eval()


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No downloads: an empty data cache and MAGICPIG_OFFLINE=1."""
    monkeypatch.setenv("MAGICPIG_OFFLINE", "1")
    monkeypatch.setenv("MAGICPIG_DATA", str(tmp_path / "cache"))
