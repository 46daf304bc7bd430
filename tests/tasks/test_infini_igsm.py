"""infini_igsm (paper Table 6): task names, prompt, gold and predicted answers, operation filter, offline."""
from __future__ import annotations

import pytest

from magicpig_tasks.common import TaskUnavailable
from magicpig_tasks.infini_igsm import TASKS, gold_answer, parse_task, predicted_answer
from magicpig_tasks.registry import get_task


def test_names():
    assert TASKS == ("4k_close_op2", "4k_close_op4", "4k_close_op5", "8k_close_op2", "8k_close_op4", "8k_close_op5")
    assert parse_task("8k_close_op5") == ("8k_close", 5)
    for bad in ("4k_close_op3", "16k_close_op2", "4k_close"):
        with pytest.raises(ValueError, match="unknown infini_igsm task"):
            parse_task(bad)


def test_answers():
    assert gold_answer("b = a + 2 = 5. Answer: 5.") == 5
    with pytest.raises(ValueError, match="no 'Answer: N'"):
        gold_answer("b = 5")
    assert predicted_answer("so b = 5.\nAnswer: 5.") == 5
    assert predicted_answer("**Answer:** 12") == 12
    assert predicted_answer("ANSWER: -3 and later answer: 4") == -3  # the first one counts
    assert predicted_answer("the result is \\boxed{7}") == 7
    assert predicted_answer("it is five") is None


def test_samples_from_fixture(tokenizer, fixtures):
    path = str(fixtures / "infini_igsm_tiny.jsonl")
    op2 = get_task("infini_igsm/4k_close_op2", path, {"chat_template": "none"}).build(tokenizer, 4096, 10)
    assert [s.references for s in op2] == [["5"], ["5"]]  # the op-4 record is left out
    s = op2[0]
    assert tokenizer.decode(s.prompt_ids).startswith("Problem: The number of adult owls in Pine Grove equals 3.")
    assert tokenizer.decode(s.question_ids) == " Question: What is the number of adult crows in Pine Grove? Solution: "
    task = get_task("infini_igsm/4k_close_op4", path, {"chat_template": "none"})
    (s4,) = task.build(tokenizer, 4096, 10)
    assert s4.references == ["12"] and s4.max_new_tokens == 1024
    assert task.score("c = 4 + 8 = 12. Answer: 12.", s4) == 100.0
    assert task.score("Answer: 13.", s4) == 0.0 and task.score("twelve", s4) == 0.0
    chat = get_task("infini_igsm/4k_close_op2", path).build(tokenizer, 4096, 1)[0]
    assert "<|im_start|>user" in tokenizer.decode(chat.prompt_ids)  # the model's chat template by default
    with pytest.raises(ValueError, match="tokens > length"):
        get_task("infini_igsm/4k_close_op2", path).build(tokenizer, 64, 1)


def test_offline_and_registry(offline):
    from magicpig_tasks.registry import DATA_TASKS, expand, get_task

    assert expand("infini_igsm") == [f"infini_igsm/{t}" for t in TASKS]
    assert set(expand("infini_igsm")) <= set(DATA_TASKS)
    task = get_task("infini_igsm/8k_close_op4")
    assert task.name == "infini_igsm/8k_close_op4"
    with pytest.raises(TaskUnavailable, match="MAGICPIG_OFFLINE=1"):
        task.records()
