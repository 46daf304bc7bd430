"""RULER scoring: sub-string matching of the references in the prediction, case-insensitive, x100.

* ``string_match_all`` (niah, vt, cwe, fwe): the fraction of references found in the prediction;
* ``string_match_part`` (qa): 1 if any reference is found, else 0.

Predictions are cleaned first as the reference does: control characters become newlines, then the
string is stripped.
"""
from __future__ import annotations

import re
from typing import Sequence

_CONTROL = re.compile(r"[\x00-\x1f]")


def clean_prediction(text: str) -> str:
    return _CONTROL.sub("\n", text.strip()).strip()


def string_match_all(prediction: str, references: Sequence[str]) -> float:
    """100 x (references contained in the prediction) / (number of references); 0 with no reference."""
    if not references:
        return 0.0
    pred = clean_prediction(prediction).lower()
    return 100.0 * sum(r.lower() in pred for r in references) / len(references)


def string_match_part(prediction: str, references: Sequence[str]) -> float:
    """100 if any reference is contained in the prediction, else 0."""
    pred = clean_prediction(prediction).lower()
    return 100.0 * float(any(r.lower() in pred for r in references))
