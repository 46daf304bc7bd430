"""The decode benchmark's prompts and the shapes of its prefilled caches: essay text (or random ids for a
shape-only model), a needle-in-a-haystack prompt, a cache tiled along the sequence (``--fill tile``) and one
repeated to the batch (the original's protocol: the prompt repeated B times)."""
from __future__ import annotations

import torch

NEEDLE = "The secret passkey is {key}. Remember it: the passkey is {key}."
QUESTION = "What is the secret passkey mentioned in the text above? Answer with the number only."


def essay_tokens(tokenizer, n_tokens: int) -> list[int]:
    """``n_tokens`` token ids of the essay haystack (``magicpig_tasks.ruler.haystack.essay_corpus``: sorted by
    file name, ``$MAGICPIG_ESSAYS`` honoured), repeated if needed."""
    from magicpig_tasks.ruler.haystack import essay_corpus

    ids = tokenizer(essay_corpus(), add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError("the haystack tokenized to nothing")
    return (ids * -(-n_tokens // len(ids)))[:n_tokens]


def random_tokens(vocab: int, n_tokens: int, seed: int = 0) -> list[int]:
    """``n_tokens`` random ids in [3, vocab) (the prompt of a shape-only model: timing needs no text)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, max(4, vocab), (n_tokens,), generator=g).tolist()


def needle_prompt(tokenizer, n_tokens: int, depth: float = 0.5, key: int = 68413) -> tuple[list[int], str]:
    """A needle-in-a-haystack chat prompt of about ``n_tokens`` tokens: the needle sentence inserted at
    ``depth`` (0..1) of the essay haystack, then the question. Returns (ids, expected answer)."""
    from magicpig.models import prompt_ids

    if not 0 <= depth <= 1:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    needle = NEEDLE.format(key=key)
    overhead = len(prompt_ids(tokenizer, needle + "\n\n" + QUESTION))
    hay = essay_tokens(tokenizer, max(16, n_tokens - overhead))
    cut = int(len(hay) * depth)
    text = tokenizer.decode(hay[:cut]) + " " + needle + " " + tokenizer.decode(hay[cut:])
    return prompt_ids(tokenizer, text + "\n\n" + QUESTION), str(key)


def tile_prefill(pre, n_target: int):
    """Repeat a batch-1 prefill's keys/values along the sequence up to ``n_target`` keys (same number of
    keys, same key statistics; the positions of the copies repeat)."""
    from magicpig.engine import Prefill
    from magicpig.methods import KeyLayout

    if pre.batch != 1:
        raise ValueError("tile_prefill works on a single prompt")
    reps = -(-n_target // pre.n)
    keys = [k.repeat(1, 1, reps, 1)[:, :, :n_target].contiguous() for k in pre.keys]
    values = [v.repeat(1, 1, reps, 1)[:, :, :n_target].contiguous() for v in pre.values]
    dev = pre.layout.start.device
    layout = KeyLayout(n_target, torch.zeros(1, dtype=torch.long, device=dev),
                       torch.full((1,), n_target, dtype=torch.long, device=dev))
    return Prefill(keys, values, layout, pre.logits, [(pre.prompt_ids[0] * reps)[:n_target]], pre.seconds)


def repeat_batch(pre, batch: int):
    """The batch-1 prefill ``pre`` as ``batch`` identical sequences. Keys/values are expanded views, so
    nothing is copied until a decoder builds."""
    from magicpig.engine import Prefill
    from magicpig.methods import KeyLayout

    if pre.batch != 1:
        raise ValueError("repeat_batch works on a single prompt")
    if batch == 1:
        return pre
    keys = [k.expand(batch, -1, -1, -1) for k in pre.keys]
    values = [v.expand(batch, -1, -1, -1) for v in pre.values]
    layout = KeyLayout(pre.n, pre.layout.start.expand(batch).contiguous(),
                       pre.layout.prompt_end.expand(batch).contiguous())
    return Prefill(keys, values, layout, pre.logits.expand(batch, -1), pre.prompt_ids * batch, pre.seconds)
