"""Keys across many short inputs (paper Figs. 5a, 5b): is the sink key, and is the mean key, nearly the same
vector whatever the input?

Two sets of exact prefills of the model, keys recorded by ``capture.capture_model``:
- ``random_inputs`` sequences of ``length`` uniformly random token ids (special tokens excluded; the first
  token is random too, so a shared sink key is not a shared first token);
- ``sentences`` single sentences of the essay corpus (``haystack.essay_text``), each prefilled alone.

For every (layer, kv-head), ``similarity`` gives the mean and minimum pairwise cosine across inputs of
- ``sink_key``: the key at position 0 of each random input (Fig. 5a),
- ``key_mean``: the mean of a sentence's keys at positions 1.. (Fig. 5b),
- ``other_key``: the key at the middle position of each random input, for scale (a non-sink key).
``matrix`` keeps the full pairwise cosine matrix of the sink keys and of the key means at one layer
and kv-head (the heat maps of the figure).
"""
from __future__ import annotations

import random
import re

import pandas as pd
import torch

from magicpig_tasks.experiments.capture import capture_model

QUANTITIES = ("sink_key", "key_mean", "other_key")


def essay_sentences(count: int, *, min_words: int = 8, max_words: int = 40, seed: int = 0) -> list[str]:
    """``count`` distinct sentences of the essay corpus with ``min_words``..``max_words`` words, drawn at
    random (``seed``) in corpus order."""
    from magicpig_tasks.experiments.haystack import essay_text

    parts = re.split(r"(?<=[.!?])\s+", " ".join(essay_text().split()))
    pool = list(dict.fromkeys(p for p in parts if min_words <= len(p.split()) <= max_words))
    if len(pool) < count:
        raise ValueError(f"the essay corpus has {len(pool)} sentences of {min_words}-{max_words} words, "
                         f"fewer than the {count} asked for")
    rng = random.Random(seed)
    return [pool[i] for i in sorted(rng.sample(range(len(pool)), count))]


def random_token_ids(tokenizer, count: int, length: int, *, seed: int = 0) -> list[torch.Tensor]:
    """``count`` sequences of ``length`` random token ids from the tokenizer's ordinary vocabulary."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    vocab = [i for i in range(len(tokenizer)) if i not in special]
    g = torch.Generator().manual_seed(seed)
    pick = torch.tensor(vocab)
    return [pick[torch.randint(len(vocab), (length,), generator=g)] for _ in range(count)]


def _keys(model, tokenizer, *, text=None, ids=None) -> torch.Tensor:
    """All layers' prompt keys of one exact prefill: (layers, H_kv, n, d) float32."""
    cap = capture_model(model, tokenizer, text, input_ids=ids, decode_steps=0, prompt_queries=1,
                        dtype=torch.float32)
    return cap.keys[:, :, : cap.n_prompt].float()


def pairwise(x: torch.Tensor) -> torch.Tensor:
    """Cosine matrix of the rows of ``x`` (..., N, d) -> (..., N, N)."""
    x = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return x @ x.transpose(-1, -2)


def collect(model, tokenizer, *, inputs: int = 32, sentences: int = 50, length: int = 64, seed: int = 0,
            progress=None) -> dict[str, torch.Tensor]:
    """Per quantity of ``QUANTITIES`` the stacked vectors (N, layers, H_kv, d): one per random input (sink
    key, middle key) or per sentence (key mean)."""
    if inputs < 2 or sentences < 2:
        raise ValueError(f"inputs and sentences must be >= 2 (pairs are compared), got {inputs}, {sentences}")
    if length < 3:
        raise ValueError(f"length must be >= 3 tokens, got {length}")
    say = progress or (lambda msg: None)
    sink, other = [], []
    for i, ids in enumerate(random_token_ids(tokenizer, inputs, length, seed=seed)):
        k = _keys(model, tokenizer, ids=ids)
        sink.append(k[:, :, 0])
        other.append(k[:, :, length // 2])
        if (i + 1) % 8 == 0:
            say(f"random inputs: {i + 1}/{inputs}")
    means = []
    for i, text in enumerate(essay_sentences(sentences, seed=seed)):
        k = _keys(model, tokenizer, text=text)
        means.append(k[:, :, 1:].mean(2))
        if (i + 1) % 10 == 0:
            say(f"sentences: {i + 1}/{sentences}")
    return {"sink_key": torch.stack(sink), "key_mean": torch.stack(means), "other_key": torch.stack(other)}


def similarity(vectors: dict[str, torch.Tensor]) -> pd.DataFrame:
    """Rows per (quantity, layer, kv-head): mean and minimum of the off-diagonal pairwise cosines across
    inputs, and the number of inputs."""
    rows = []
    for name, x in vectors.items():
        N, Lm, Hkv, _ = x.shape
        cos = pairwise(x.permute(1, 2, 0, 3))  # (layers, Hkv, N, N)
        off = ~torch.eye(N, dtype=torch.bool)
        vals = cos[..., off]  # (layers, Hkv, N*(N-1))
        for layer in range(Lm):
            for g in range(Hkv):
                v = vals[layer, g]
                rows.append({"quantity": name, "layer": layer, "kv_head": g, "mean_cos": float(v.mean()),
                             "min_cos": float(v.min()), "inputs": N})
    return pd.DataFrame(rows)


def matrix(vectors: dict[str, torch.Tensor], layer: int, kv_head: int = 0) -> pd.DataFrame:
    """The pairwise cosine matrices of the sink keys and the key means at one (layer, kv-head): rows
    quantity, layer, kv_head, i, j, cos."""
    rows = []
    for name in ("sink_key", "key_mean"):
        cos = pairwise(vectors[name][:, layer, kv_head])
        N = cos.shape[0]
        rows += [{"quantity": name, "layer": layer, "kv_head": kv_head, "i": i, "j": j, "cos": float(cos[i, j])}
                 for i in range(N) for j in range(N)]
    return pd.DataFrame(rows)
