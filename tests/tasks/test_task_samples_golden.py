"""Every task's samples, description and scores are pinned: a digest of each (task, settings, length, seed)
case, made with the tokenizer the tests use, must match ``tests/fixtures/task_samples_golden.json``. A change
to the task code that alters one prompt token, reference, meta field, answer budget, stop string, score or
``describe()`` (the resume key) fails here, naming the case.

Regenerate the file only for an intended change of the prompts: ``python tests/tasks/test_task_samples_golden.py``.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOLDEN = FIXTURES / "task_samples_golden.json"

RULER_SYNTHETIC = ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
                   "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")
DATA = {"ruler/qa_1": "squad_dev_v2_tiny.json", "ruler/qa_2": "hotpot_dev_distractor_tiny.json",
        "longbench/qasper": "longbench_qasper_tiny.jsonl", "longbench/lcc": "longbench_lcc_tiny.jsonl",
        "longbench/trec": "longbench_trec_tiny.jsonl",
        "longbench/passage_retrieval_en": "longbench_passage_retrieval_en_tiny.jsonl",
        "gsm8k": "gsm8k_test_tiny.jsonl", "coqa": "coqa_dev_tiny.json", "mmlu_cot": "mmlu_cot_tiny.json",
        "infini_igsm/4k_close_op2": "infini_igsm_tiny.jsonl", "infini_igsm/4k_close_op4": "infini_igsm_tiny.jsonl"}


def cases() -> list[tuple[str, dict, int, int, int]]:
    """(task, settings, length, seed, count) of every pinned case."""
    out = []
    for short in RULER_SYNTHETIC:  # cwe switches its word frequencies at 4096 tokens, fwe sizes its vocabulary by length
        for length in (1024, 4096):
            for seed in (0, 3):
                out.append((f"ruler/{short}", {}, length, seed, 2))
    for template in ("meta-chat-3", "none"):
        out += [("ruler/niah_single_1", {"chat_template": template}, 1024, 0, 1),
                ("ruler/vt", {"chat_template": template}, 1024, 0, 1)]
    for name in ("ruler/qa_1", "ruler/qa_2"):
        for length in (1024, 4096):
            for seed in (0, 3):
                out.append((name, {}, length, seed, 3))
    out.append(("ruler/qa_1", {"chat_template": "none"}, 1024, 0, 1))
    for name in [n for n in DATA if not n.startswith("ruler/")]:
        for length, seed in ((4096, 0), (4096, 1), (600, 0)):  # 600: LongBench truncates, the others refuse
            out.append((name, {}, length, seed, 0))
    for template in ("meta-chat-3", "none"):
        out += [("longbench/qasper", {"chat_template": template}, 4096, 0, 0),
                ("longbench/lcc", {"chat_template": template}, 4096, 0, 0),
                ("infini_igsm/4k_close_op2", {"chat_template": template}, 4096, 0, 0)]
    out.append(("gsm8k", {"gsm8k_add_bos": True}, 4096, 0, 0))
    return out


def case_key(name: str, settings: dict, length: int, seed: int, count: int) -> str:
    extra = ",".join(f"{k}={v}" for k, v in sorted(settings.items()))
    return f"{name}|{extra}|{length}|{seed}|{count}"


def make_task(name: str, settings: dict):
    from magicpig_tasks.registry import get_task

    path = str(FIXTURES / DATA[name]) if name in DATA else None
    return get_task(name, path, settings)


def digest(tokenizer, name: str, settings: dict, length: int, seed: int, count: int) -> str:
    """sha256 of the samples (ids, prompt token ids, references, budget, stop strings, meta), the task's
    ``describe()`` and the scores of two fixed predictions per sample (``count`` 0: every record)."""
    task = make_task(name, settings)
    try:
        samples = task.build(tokenizer, length, count or len(task.records()), seed)
    except ValueError as exc:  # a prompt over the cap: the refusal is pinned too
        return "error:" + str(exc)
    rows = []
    for s in samples:
        scores = []
        for prediction in (" " + ", ".join(s.references), " nothing"):
            scores.append(task.score(prediction, s))
            scores.append(task.extra_scores(prediction, s))
        rows.append([s.id, s.context_ids, s.question_ids, s.references, s.max_new_tokens, s.stop, s.meta, scores])
    text = json.dumps({"describe": task.describe(), "samples": rows}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", cases(), ids=lambda c: case_key(*c))
def test_samples_match_the_pinned_digest(tokenizer, monkeypatch, tmp_path, case):
    monkeypatch.setenv("MAGICPIG_OFFLINE", "1")  # every case reads a fixture file or nothing
    monkeypatch.setenv("MAGICPIG_DATA", str(tmp_path / "cache"))
    assert digest(tokenizer, *case) == _golden()[case_key(*case)]


def test_every_case_is_pinned():
    assert sorted(_golden()) == sorted(case_key(*c) for c in cases())


if __name__ == "__main__":
    import os

    from magicpig.models import load_tokenizer

    os.environ["MAGICPIG_OFFLINE"] = "1"
    tok = load_tokenizer("smollm2")
    table = {}
    for c in cases():
        table[case_key(*c)] = digest(tok, *c)
        print(case_key(*c), table[case_key(*c)][:16], file=sys.stderr)
    GOLDEN.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
