"""LongBench metrics, each returning a score in [0, 1] for one (prediction, ground truth) pair.

* ``qa_f1``: token F1 after SQuAD normalisation (lower case, punctuation and articles a/an/the removed,
  whitespace collapsed);
* ``code_sim``: the similarity ratio of the first prediction line that is not a comment or a code fence
  (no '`', '#', '//') to the ground truth, as the reference's ``fuzz.ratio`` of fuzzywuzzy computes it with
  its pinned requirements (no python-Levenshtein, so difflib): ``SequenceMatcher(None, a, b).ratio()``
  (autojunk on) as an integer percent, ``int(round(100 * r))``, 100 for equal strings, 0 when one is
  empty; / 100. rapidfuzz's ``fuzz.ratio`` is the normalised Indel similarity (longest common
  subsequence), which is never lower and often higher on code lines, so it is not used;
* ``classification``: the classes named in the prediction, discarding those that are a strict substring of
  the ground truth; 1/len(matches) if the ground truth is among them, else 0 (the reference removes
  items from the list while iterating over it, which can skip a removal; this version removes them all);
* ``retrieval``: with ground truth "Paragraph N", the share of numbers in the prediction equal to N.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from difflib import SequenceMatcher
from typing import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def f1_tokens(pred: Sequence[str], truth: Sequence[str]) -> float:
    common = Counter(pred) & Counter(truth)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def qa_f1(prediction: str, ground_truth: str, **_) -> float:
    return f1_tokens(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def first_code_line(prediction: str) -> str:
    for line in prediction.lstrip("\n").split("\n"):
        if "`" not in line and "#" not in line and "//" not in line:
            return line
    return ""


def fuzz_ratio(a: str, b: str) -> int:
    """fuzzywuzzy's ``fuzz.ratio`` on its difflib path: equal strings 100, an empty one 0, else the
    rounded percentage of ``SequenceMatcher(None, a, b).ratio()``."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * SequenceMatcher(None, a, b).ratio()))


def code_sim(prediction: str, ground_truth: str, **_) -> float:
    return fuzz_ratio(first_code_line(prediction), ground_truth) / 100.0


def classification(prediction: str, ground_truth: str, all_classes: Sequence[str] = (), **_) -> float:
    matches = [c for c in all_classes if c in prediction]
    matches = [c for c in matches if not (c in ground_truth and c != ground_truth)]
    return 1.0 / len(matches) if ground_truth in matches else 0.0


def retrieval(prediction: str, ground_truth: str, **_) -> float:
    m = re.findall(r"Paragraph (\d+)", ground_truth)
    if not m:
        raise ValueError(f"retrieval: ground truth {ground_truth!r} has no 'Paragraph N'")
    numbers = re.findall(r"\d+", prediction)
    if not numbers:
        return 0.0
    return sum(n == m[0] for n in numbers) / len(numbers)


METRICS = {"qa_f1": qa_f1, "code_sim": code_sim, "classification": classification, "retrieval": retrieval}
