"""Tiny random Llama / Qwen2 / Mistral models (a few layers, hidden 64-128, GQA).

Built from transformers' own configs with ``from_config`` under a fixed seed, so every test sees the
same weights. ``initializer_range`` is raised so the random models have peaked next-token
distributions (greedy decoding then does not hinge on float ties).
"""
from __future__ import annotations

import torch

TINY_KINDS = ("llama", "qwen2", "mistral")


def tiny_config(kind: str, *, layers: int = 4, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
                vocab: int = 256, max_positions: int = 4096):
    """A transformers config of the given family with GQA (heads / kv_heads)."""
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads,
                  max_position_embeddings=max_positions, initializer_range=0.2, tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if kind == "llama":
        return LlamaConfig(**common)
    if kind == "qwen2":
        return Qwen2Config(**common, use_sliding_window=False)
    if kind == "mistral":
        return MistralConfig(**common, sliding_window=None)
    raise ValueError(f"unknown tiny model kind {kind!r}; known: {TINY_KINDS}")


def tiny_model(kind: str = "llama", seed: int = 0, attn_implementation: str = "sdpa", **overrides):
    """A float32 eval-mode tiny model with fixed random weights."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(kind, **overrides), dtype=torch.float32,
                                             attn_implementation=attn_implementation)
    return model.eval()


def random_prompt(n: int, seed: int = 0, vocab: int = 256) -> list[int]:
    """n token ids in [3, vocab) (0-2 are pad/bos/eos)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()
