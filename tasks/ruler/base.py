"""Shared machinery of the RULER tasks: sizing a sample to the target token length, scoring.

``length`` is the prompt length in tokens (chat template and answer prefix included, measured with the
model's own tokenizer); the answer budget ``max_new_tokens`` comes on top of it. Each sample is the
largest haystack whose prompt fits in ``length`` tokens, so prompts land just under the target.
"""
from __future__ import annotations

import random
from typing import Callable, ClassVar

from magicpig_tasks.common import PromptEncoder, Sample, Task, check_build_args, check_chat_template, fit_size, sample_rng
from magicpig_tasks.ruler.scoring import string_match_all, string_match_part

# A rendering of one sample at haystack size s: (context text, question text, answer prefix).
Render = Callable[[int], tuple[str, str, str]]


class RulerTask(Task):
    """A RULER task: subclasses implement ``make(rng) -> (render, references, guess, meta)`` where
    ``render(s)`` renders the prompt with haystack size ``s`` (monotone in s), ``references`` is a list
    or a function of s (when the answer depends on the haystack), and ``guess`` is a rough size for 1000
    tokens of haystack. ``chat_template``: the prompt template (magicpig_tasks.common.CHAT_TEMPLATES)."""

    metric: ClassVar[str] = "string_match_all"
    max_new_tokens: ClassVar[int] = 128

    def __init__(self, chat_template: str = "tokenizer"):
        self.chat_template = check_chat_template(chat_template)
        self._length = 4096  # the length being built: tasks whose material scales with it (cwe, fwe) read it


    def settings(self) -> dict:
        return {"chat_template": self.chat_template}

    def make(self, rng: random.Random) -> tuple[Render, list[str], float, dict]:
        raise NotImplementedError

    def build(self, tokenizer, length: int, count: int, seed: int = 0) -> list[Sample]:
        check_build_args(self.name, length, count)
        enc = PromptEncoder(tokenizer, self.chat_template)
        return [self.build_one(enc, length, i, seed) for i in range(count)]

    def build_one(self, enc: PromptEncoder, length: int, index: int, seed: int) -> Sample:
        rng = sample_rng(self.name, length, index, seed)
        self._length = length
        render, refs, per_1k, meta = self.make(rng)
        size = fit_size(lambda s: enc.count(*render(s)), length, guess=max(1, int(per_1k * length / 1000)),
                        lo=self.min_size(), hi=self.max_size())
        ctx, q, prefix = render(size)
        ctx_ids, q_ids = enc.encode(ctx, q, prefix)
        if len(ctx_ids) + len(q_ids) > length:
            raise ValueError(f"{self.name}: length {length} is too short for the task's template and needles "
                             f"({len(ctx_ids) + len(q_ids)} tokens with the smallest haystack)")
        refs = refs(size) if callable(refs) else refs
        meta = dict(meta, haystack_size=size, answer_prefix=prefix)
        return Sample(id=f"{self.name}/{length}/{seed}/{index}", context_ids=ctx_ids, question_ids=q_ids,
                      references=list(refs), max_new_tokens=self.max_new_tokens, stop=[], meta=meta)

    def min_size(self) -> int:
        return 0

    def max_size(self) -> int | None:
        """Largest haystack size the task's material allows (None: unbounded)."""
        return None

    def score(self, prediction: str, sample: Sample) -> float:
        if self.metric == "string_match_part":
            return string_match_part(prediction, sample.references)
        return string_match_all(prediction, sample.references)
