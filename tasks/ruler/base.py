"""What the RULER tasks share: their groups, answer budget and scoring.

``length`` is the prompt length in tokens (chat template and answer prefix included, measured with the
model's own tokenizer); the answer budget ``max_new_tokens`` comes on top of it. Each sample is the
largest haystack whose prompt fits in ``length`` tokens (``magicpig_tasks.common.SyntheticTask``).
"""
from __future__ import annotations

from typing import ClassVar

from magicpig_tasks.common import Sample, SyntheticTask
from magicpig_tasks.ruler.scoring import string_match_all, string_match_part


class RulerTask(SyntheticTask):
    """A synthetic RULER task: ``make`` draws one sample's needles and haystack (``SyntheticTask``)."""

    groups = ("ruler", "ruler/synthetic")
    metric: ClassVar[str] = "string_match_all"
    max_new_tokens: ClassVar[int] = 128

    def score(self, prediction: str, sample: Sample) -> float:
        if self.metric == "string_match_part":
            return string_match_part(prediction, sample.references)
        return string_match_all(prediction, sample.references)
