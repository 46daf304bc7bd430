"""CoQA and MMLU-CoT (the paper's Table 1 beside GSM8K-CoT) as lm-evaluation-harness 0.4.5 prompts and
scores them: prompt text, gold answers, answer extraction, metrics, fixture loading, the offline hub path."""
from __future__ import annotations

import json
import shutil

import pytest

from magicpig_tasks.coqa import CoQA, gold_answers, prompt_parts, turn_texts
from magicpig_tasks.coqa.metrics import coqa_scores, exact, token_f1
from magicpig_tasks.common import TaskUnavailable
from magicpig_tasks.mmlu import (EXEMPLAR_URL, INVALID, LM_EVAL_COMMIT, MMLUCoT, extract_answer, fewshot_text,
                                 gold_letter, matches, question_text)
from magicpig_tasks.registry import get_task


# ---- CoQA ------------------------------------------------------------------------------------------------

def test_coqa_prompt_and_golds(tokenizer, fixtures):
    task = get_task("coqa", str(fixtures / "coqa_dev_tiny.json"))
    samples = task.build(tokenizer, 2048, 10)
    assert [s.id for s in samples] == ["coqa/story-a", "coqa/story-b"]
    a = samples[0]
    assert tokenizer.decode(a.prompt_ids) == (
        "Mara keeps three goats on a hill farm. The oldest goat is called Pip, and it likes carrots.\n\n"
        "Q: How many goats does Mara keep?\n\nA: three\n\n"
        "Q: What is the oldest one called?\n\nA: Pip\n\n"
        "Q: What does it like?\n\nA:")
    assert tokenizer.decode(a.question_ids) == "Q: What does it like?\n\nA:"
    # the last turn's answer, then additional answers that differ ignoring case ("Carrots" does not)
    assert a.references == ["carrots", "the carrots"]
    assert a.stop == ["\nQ:"] and a.max_new_tokens == 256
    assert samples[1].references == ["at nine on weekdays"]
    assert tokenizer.decode(samples[1].prompt_ids).endswith("weekdays.\n\nQ: When does the library open?\n\nA:")
    with pytest.raises(ValueError, match="tokens > length"):
        task.build(tokenizer, 64, 1)


def test_coqa_scores():
    assert exact("The Carrots!", "carrots") == 1.0 and exact("carrots", "carrot") == 0.0
    assert token_f1("at nine on weekdays", "nine") == pytest.approx(2 * 1 * 0.25 / 1.25)  # p 1, r 1/4
    assert token_f1("", "") == 1.0 and token_f1("the", "nine") == 0.0  # "the" normalises to nothing
    # one gold: plain max; several: mean over leave-one-out sets
    assert coqa_scores(["nine"], "at nine") == {"em": 0.0, "f1": pytest.approx(2 / 3)}
    s = coqa_scores(["carrots", "the carrots", "orange carrots"], "carrots")
    # leaving out gold 0 -> max(1, 2/3) = 1; out 1 -> 1; out 2 -> 1 (all three sets still hold an exact match)
    assert s == {"em": 1.0, "f1": 1.0}
    s = coqa_scores(["carrots", "turnips"], "carrots")
    assert s == {"em": 0.5, "f1": 0.5}  # leaving "carrots" out scores 0
    with pytest.raises(ValueError, match="at least one gold"):
        coqa_scores([], "x")


def test_coqa_task_scores_first_line(tokenizer, fixtures):
    task = get_task("coqa", str(fixtures / "coqa_dev_tiny.json"))
    s = task.build(tokenizer, 2048, 1)[0]
    assert task.score(" carrots\nQ: next", s) == 100.0
    # golds "carrots", "the carrots" -> "carrots" both; F1 of "carrots and hay" = 2*(1/3)*1/(4/3) = 0.5
    assert task.score("\n\n carrots and hay", s) == pytest.approx(50.0)
    extra = task.extra_scores(" Carrots.", s)
    assert extra == {"f1": 100.0, "em": 100.0}
    assert task.extra_scores(" hay", s) == {"f1": 0.0, "em": 0.0}
    assert "f1" in task.metric and task.describe()["method_overrides"] == {"magicpig": {"local": 24}}


def test_coqa_hugging_face_layout(tmp_path, tokenizer, fixtures):
    """The hub's dict-of-lists layout gives the same prompts and golds as the original file."""
    orig = json.loads((fixtures / "coqa_dev_tiny.json").read_text())["data"]
    hf = []
    for r in orig:
        row = {"id": r["id"], "story": r["story"],
               "questions": {"input_text": [t["input_text"] for t in r["questions"]]},
               "answers": {"input_text": [t["input_text"] for t in r["answers"]]}}
        if "additional_answers" in r:
            row["additional_answers"] = {k: {"input_text": [t["input_text"] for t in v]}
                                         for k, v in r["additional_answers"].items()}
        hf.append(row)
    path = tmp_path / "coqa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in hf))
    a = get_task("coqa", str(fixtures / "coqa_dev_tiny.json")).build(tokenizer, 2048, 2)
    b = get_task("coqa", str(path)).build(tokenizer, 2048, 2)
    assert [(s.prompt_ids, s.references) for s in a] == [(s.prompt_ids, s.references) for s in b]


def test_coqa_bad_records(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"story": "s", "questions": {"input_text": ["a", "b"]},
                                "answers": {"input_text": ["x"]}}) + "\n")
    with pytest.raises(ValueError, match="2 questions and 1 answers"):
        get_task("coqa", str(path)).records()
    path.write_text(json.dumps({"questions": [], "answers": []}) + "\n")
    with pytest.raises(ValueError, match="'story'"):
        get_task("coqa", str(path)).records()
    assert turn_texts({"input_text": ["q"]}, "x") == ["q"]
    assert prompt_parts("S", ["q1", "q2"], ["a1", "a2"]) == ("S\n\nQ: q1\n\nA: a1\n\n", "Q: q2\n\nA:")
    assert gold_answers({}, ["a1", "a2"]) == ["a2"]


def test_coqa_offline_is_unavailable(offline):
    with pytest.raises(TaskUnavailable, match="MAGICPIG_OFFLINE=1"):
        get_task("coqa").records()


# ---- MMLU-CoT --------------------------------------------------------------------------------------------

def test_mmlu_extraction_and_matching():
    assert extract_answer("So it is 7. The answer is (B).") == "(B)"
    assert extract_answer("the answer is (C)\nmore text") == "(C"  # lm-eval drops the line's last character
    assert extract_answer("The answer is (A). Then the answer is (D).") == "(A). Then the answer is (D)"
    assert extract_answer("no conclusion") == INVALID
    assert matches("(B)", "(B)") and matches("(c", "(C)") and matches("b", "(B)")
    assert not matches("(A). Then the answer is (D)", "(A)") and not matches(INVALID, "(A)")
    assert gold_letter(2) == "(C)" and gold_letter("d") == "(D)"
    with pytest.raises(ValueError, match="0-3 or A-D"):
        gold_letter(4)
    assert question_text(" Q? ", ["w", "x", "y", "z"]) == "Q: Q?\n(A) w (B) x (C) y (D) z\nA: Let's think step by step."


def test_mmlu_prompt_from_fixture(tokenizer, fixtures):
    task = get_task("mmlu_cot", str(fixtures / "mmlu_cot_tiny.json"))
    samples = task.build(tokenizer, 4096, 5)
    assert [s.references for s in samples] == [["(B)"], ["(A)"], ["(D)"]]
    text = tokenizer.decode(samples[0].prompt_ids)
    assert text.startswith("Multiple choice questions about fixture arithmetic.\n\nQ: What is 1 + 1?\n(A) 1 (B) 2 "
                           "(C) 3 (D) 4\nA: Let's think step by step. One plus one is two. The answer is (B).\n\n")
    assert text.count("\nA: Let's think step by step.") == 5  # 4 exemplars (num_fewshot 4 of 5) + the question
    assert "What is 0 + 7?" not in text
    assert text.endswith("Q: What is 3 + 4?\n(A) 6 (B) 7 (C) 8 (D) 12\nA: Let's think step by step.")
    assert tokenizer.decode(samples[1].question_ids).startswith("Q: Which colour is a ripe tomato?\n")
    assert samples[0].stop == [] and samples[0].max_new_tokens == 256
    assert task.score(" 3 + 4 = 7. The answer is (B).", samples[0]) == 100.0
    assert task.score(" The answer is (A).", samples[0]) == 0.0
    assert task.score(" It is 7.", samples[0]) == 0.0
    assert task.describe()["exemplars"] == "data file" and task.describe()["num_fewshot"] == 4


def test_mmlu_exemplars_from_lm_eval_task_file(offline, tmp_path, monkeypatch, tokenizer, fixtures):
    """Without exemplars in the data file they come from lm-eval's subject file at the pinned commit,
    through the fetcher's cache (here pre-filled: offline, nothing is downloaded)."""
    from magicpig_tasks.download import cache_dir, cache_name

    data = tmp_path / "mmlu.jsonl"
    data.write_text(json.dumps({"subject": "fixture_subject", "question": "Which is 3?",
                                "choices": ["1", "2", "3", "4"], "answer": 2}) + "\n")
    task = get_task("mmlu_cot", str(data))
    with pytest.raises(TaskUnavailable, match="MAGICPIG_OFFLINE=1"):
        task.build(tokenizer, 4096, 1)
    url = EXEMPLAR_URL.format(commit=LM_EVAL_COMMIT, subject="fixture_subject")
    cache_dir().mkdir(parents=True, exist_ok=True)
    shutil.copy(fixtures / "lm_eval_mmlu_fixture_subject.yaml", cache_dir() / cache_name(url))
    s = get_task("mmlu_cot", str(data)).build(tokenizer, 4096, 1)[0]
    text = tokenizer.decode(s.prompt_ids)
    # the description runs straight into the first exemplar, as lm-eval 0.4.5 renders it
    assert text.startswith("Multiple choice questions about a fixture subject.Q: Which is a prime?\n(A) 4 (B) 6 ")
    assert "Which is odd?" not in text and text.count("The answer is") == 4
    assert text.endswith("Q: Which is 3?\n(A) 1 (B) 2 (C) 3 (D) 4\nA: Let's think step by step.")


def test_mmlu_bad_records(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"subject": "s", "question": "q", "choices": ["a", "b"], "answer": 0}) + "\n")
    with pytest.raises(ValueError, match="4 choices"):
        get_task("mmlu_cot", str(path)).records()
    with pytest.raises(ValueError, match="4 exemplars"):
        fewshot_text({"description": "d", "samples": [{"question": "q", "target": "t"}]})


def test_registry_names_the_new_tasks():
    from magicpig_tasks.registry import DATA_TASKS, expand

    assert expand("lm_eval") == ["gsm8k", "coqa", "mmlu_cot"]
    assert {"coqa", "mmlu_cot"} <= set(DATA_TASKS)
    assert isinstance(get_task("coqa"), CoQA) and isinstance(get_task("mmlu_cot"), MMLUCoT)
