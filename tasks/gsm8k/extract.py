"""Answer extraction and matching for GSM8K chain-of-thought (lm-eval ``gsm8k_cot`` conventions).

* strict: the number in "The answer is N." (first occurrence);
* flexible: the last number-like string in the generation;
* match: exact string equality after removing commas, '$', a leading "... #### " and a trailing period,
  case-insensitively. An extraction that finds nothing yields ``"[invalid]"``, which never matches.
"""
from __future__ import annotations

import re

INVALID = "[invalid]"
_STRICT = re.compile(r"The answer is (\-?[0-9\.\,]+).")
_FLEX = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_IGNORE = (re.compile(r","), re.compile(r"\$"), re.compile(r"(?s).*#### "), re.compile(r"\.$"))


def strict_answer(text: str) -> str:
    m = _STRICT.search(text)
    return m.group(1) if m else INVALID


def flexible_answer(text: str) -> str:
    found = _FLEX.findall(text)
    if not found:
        return INVALID
    a, b = found[-1]
    return (a or b).strip()


def normalise(text: str) -> str:
    text = text.strip()
    for pattern in _IGNORE:
        text = pattern.sub("", text)
    return text.strip().lower()


def exact_match(extracted: str, target: str) -> float:
    if extracted == INVALID:
        return 0.0
    return float(normalise(extracted) == normalise(target))


def gold_answer(solution: str) -> str:
    """The final answer of a GSM8K solution ("... #### 72") -> "72"."""
    if "####" not in solution:
        raise ValueError(f"gsm8k: solution has no '####' final answer: {solution[-80:]!r}")
    return normalise(solution.split("####")[-1])
