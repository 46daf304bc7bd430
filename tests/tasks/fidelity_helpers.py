"""Test helpers for the prompt-fidelity tests (importable by the task test modules)."""
from __future__ import annotations


class BosTokenizer:
    """Wraps the test tokenizer so that it adds a BOS id (1) in front when asked for special tokens, as
    Llama's tokenizers do (the embedded SmolLM2 tokenizer adds none)."""

    def __init__(self, inner, chat_template=None):
        self.inner, self.chat_template = inner, chat_template

    def __call__(self, text, add_special_tokens=True):
        ids = self.inner(text, add_special_tokens=False).input_ids
        return type("Encoding", (), {"input_ids": ([1] if add_special_tokens else []) + list(ids)})()

    def decode(self, ids):
        return self.inner.decode(ids)
