"""GSM8K-CoT: exemplars and prompt format, answer extraction (strict / flexible), matching, fixture loading."""
from __future__ import annotations

import pytest

from magicpig_tasks.gsm8k import STOP, fewshot_prefix
from magicpig_tasks.gsm8k.exemplars import EXEMPLARS
from magicpig_tasks.registry import get_task
from magicpig_tasks.gsm8k.extract import INVALID, exact_match, flexible_answer, gold_answer, normalise, strict_answer


def test_exemplars():
    assert len(EXEMPLARS) == 8
    assert all(a.rstrip().endswith(".") and "The answer is " in a for _, a in EXEMPLARS)
    p = fewshot_prefix()
    assert p.startswith("Q: There are 15 trees in the grove.") and p.count("\nA: ") == 8 and p.endswith(".\n\n")


def test_strict_extraction():
    assert strict_answer("5 + 4 = 9. The answer is 9.") == "9"
    assert strict_answer("The answer is 1,234.") == "1,234"
    assert strict_answer("The answer is -3.5 dollars") == "-3.5"
    assert strict_answer("So 9 apples.") == INVALID


def test_flexible_extraction():
    assert flexible_answer("She has 3 + 4 = 7 apples, then 12.") == "12."
    assert flexible_answer("It costs $1,200 in total") == "$1,200"
    assert flexible_answer("answer: 5") == "5"
    assert flexible_answer("no digits") == INVALID


def test_matching():
    assert normalise("$1,200.") == "1200"
    assert exact_match("1,200", "1200") == 1.0
    assert exact_match("$7.", "7") == 1.0
    assert exact_match("7.5", "7") == 0.0
    assert exact_match(INVALID, "7") == 0.0
    assert gold_answer("Work 3 + 4 = 7\n#### 7") == "7"
    assert gold_answer("#### 2,400") == "2400"
    with pytest.raises(ValueError, match="####"):
        gold_answer("no final answer")


def test_samples_from_fixture(tokenizer, fixtures):
    task = get_task("gsm8k", str(fixtures / "gsm8k_test_tiny.jsonl"))
    samples = task.build(tokenizer, 2048, 10)
    assert [s.references for s in samples] == [["7"], ["2400"], ["7"]]
    s = samples[1]
    text = tokenizer.decode(s.prompt_ids)
    assert text == fewshot_prefix() + "Q: A shop sells 1,200 pens a day. How many pens does it sell in 2 days?\nA:"
    assert tokenizer.decode(s.question_ids).startswith("Q: A shop sells")
    assert s.stop == STOP and s.max_new_tokens == 256
    assert task.score(" 1200 * 2 = 2400. The answer is 2,400.", s) == 100.0
    assert task.score(" 1200 * 2 = 2400 pens.", s) == 0.0  # strict needs "The answer is"
    assert task.extra_scores(" 1200 * 2 = 2400 pens.", s) == {"strict": 0.0, "flexible": 100.0}
    assert task.extra_scores(" so it is 2400.", s)["flexible"] == 100.0  # "2400." loses its period
    assert task.extra_scores(" 2400 pens, 3 boxes", s)["flexible"] == 0.0  # the last number counts
    with pytest.raises(ValueError, match="tokens > length"):
        task.build(tokenizer, 200, 1)


def test_method_overrides():
    from magicpig.harness.evaluate import effective_method

    task = get_task("gsm8k")
    m, applied = effective_method("magicpig:K=10,L=220", task.method_overrides)
    assert m.local == 24 and applied == {"local": 24}
    m, applied = effective_method("magicpig:K=10,L=220,local=64", task.method_overrides)
    assert m.local == 64 and applied == {}
    m, applied = effective_method("dense", task.method_overrides)
    assert applied == {}


def test_no_bos_by_default_as_lm_eval(tokenizer, fixtures):
    """lm-eval of the paper's era encodes without special tokens: no BOS unless gsm8k_add_bos is set."""
    from fidelity_helpers import BosTokenizer

    bos = BosTokenizer(tokenizer)
    path = str(fixtures / "gsm8k_test_tiny.jsonl")
    plain = get_task("gsm8k", path).build(bos, 2048, 1)[0]
    assert plain.context_ids[0] != 1
    assert plain.context_ids == tokenizer(fewshot_prefix(), add_special_tokens=False).input_ids
    with_bos = get_task("gsm8k", path, {"gsm8k_add_bos": True}).build(bos, 2048, 1)[0]
    assert with_bos.context_ids == [1] + plain.context_ids and with_bos.question_ids == plain.question_ids
    assert get_task("gsm8k").describe()["add_bos"] is False and get_task("gsm8k", settings={"gsm8k_add_bos": True}).describe()["add_bos"] is True
    with pytest.raises(ValueError, match="add_bos must be true or false"):
        get_task("gsm8k", settings={"gsm8k_add_bos": "yes"})
