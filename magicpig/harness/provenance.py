"""Provenance of one prediction row: what made its prompt and its answer, so that two runs can be checked to
have asked the same questions the same way before their scores are paired (``magicpig compare``).

The evaluation runner stores, in each row of predictions.jsonl, a ``provenance`` object::

    prompt_sha256   SHA-256 of the exact prompt token ids (setup A's prefill: context + question), hex
    chat_template   the template the prompt was rendered in (after the tokenizer's fallback to 'none')
    truncation      {side: 'middle' | 'none', length: the token cap, truncated: whether this prompt was cut}
    decoding        {greedy, max_new_tokens, stop, setup}

Only what the runner itself knows is recorded. The field is optional: rows written before it existed read as
"no provenance", which ``differences`` reports as unchecked rather than as a difference.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping

FIELDS = ("prompt_sha256", "chat_template", "truncation", "decoding")


def prompt_hash(token_ids: Iterable[int]) -> str:
    """SHA-256 (hex) of a token id sequence, written as decimal ids joined by commas."""
    return hashlib.sha256(",".join(str(int(t)) for t in token_ids).encode("ascii")).hexdigest()


def unit_provenance(task, tokenizer, length: int, setup: str) -> dict[str, Any]:
    """The part shared by every sample of one (task, length): template, truncation rule, setup."""
    return {"chat_template": task.encoder(tokenizer).template,
            "truncation": {"side": getattr(task, "truncation_side", None)
                           or ("not declared" if getattr(task, "truncates", False) else "none"),
                           "length": int(length)},
            "setup": setup}


def sample_provenance(unit: Mapping[str, Any], sample, max_new_tokens: int) -> dict[str, Any]:
    """The ``provenance`` object of one row (module docstring) from ``unit_provenance`` and the sample."""
    truncation = dict(unit["truncation"], truncated=bool(sample.meta.get("truncated", False)))
    return {"prompt_sha256": prompt_hash(sample.prompt_ids), "chat_template": unit["chat_template"],
            "truncation": truncation,
            "decoding": {"greedy": True, "max_new_tokens": int(max_new_tokens), "stop": list(sample.stop),
                         "setup": unit["setup"]}}


def _text(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def differences(rows_a: Mapping[str, dict], rows_b: Mapping[str, dict], ids: Iterable[str]
                ) -> tuple[list[str], int]:
    """(one line per provenance field that differs between the paired rows, the number of pairs that could
    not be checked because a row has no provenance). A line names the field, on how many pairs it differs
    and one example: "chat_template differs on 20 of 20 pairs (e.g. 'x/3': "none" vs "tokenizer")"."""
    ids = list(ids)
    unchecked = 0
    counts: dict[str, int] = {}
    example: dict[str, str] = {}
    for i in ids:
        pa, pb = rows_a[i].get("provenance"), rows_b[i].get("provenance")
        if not isinstance(pa, dict) or not isinstance(pb, dict):
            unchecked += 1
            continue
        for key in FIELDS:
            va, vb = pa.get(key), pb.get(key)
            if isinstance(va, dict) and isinstance(vb, dict):
                subkeys = sorted(set(va) | set(vb))
                diffs = [(f"{key}.{k}", va.get(k), vb.get(k)) for k in subkeys if va.get(k) != vb.get(k)]
            else:
                diffs = [(key, va, vb)] if va != vb else []
            for name, x, y in diffs:
                counts[name] = counts.get(name, 0) + 1
                example.setdefault(name, f"e.g. {i!r}: {_text(x)} vs {_text(y)}")
    checked = len(ids) - unchecked
    return [f"{name} differs on {n} of {checked} pairs ({example[name]})" for name, n in counts.items()], unchecked
