"""tasks.common: size fitting, prompt encoding and the task registry."""
from __future__ import annotations

import pytest

from tasks.common import PromptEncoder, fit_size, sample_rng
from tasks.registry import GROUPS, TASK_NAMES, expand, get_task


@pytest.mark.parametrize("guess", [1, 7, 50, 400, 5000])
def test_fit_size_finds_largest_fitting(guess):
    f = lambda s: 10 + 3 * s  # noqa: E731
    assert fit_size(f, 1000, guess) == 330  # 10 + 3*330 = 1000
    assert fit_size(f, 1001, guess) == 330
    assert fit_size(f, 1002, guess) == 330
    assert fit_size(f, 1003, guess) == 331


def test_fit_size_bounds():
    f = lambda s: 100 + s  # noqa: E731
    assert fit_size(f, 50, 10) == 0  # nothing fits: lo returned, the caller reports
    assert fit_size(f, 10_000, 10, hi=40) == 40


def test_sample_rng_independent_streams():
    a = sample_rng("t", 4096, 0, 0).random()
    assert a == sample_rng("t", 4096, 0, 0).random()
    assert a != sample_rng("t", 4096, 1, 0).random()
    assert a != sample_rng("t", 4096, 0, 1).random()
    assert a != sample_rng("u", 4096, 0, 0).random()


def test_prompt_encoder_split_matches_parts(tokenizer):
    enc = PromptEncoder(tokenizer, chat=True)
    ctx_text, q_text = enc.render("Some context. ", "Question?", " Answer:")
    assert "<|im_start|>user" in ctx_text and ctx_text.endswith("Some context. ")
    assert q_text.startswith("Question?") and q_text.endswith("assistant\n Answer:")
    c, q = enc.encode("Some context. ", "Question?", " Answer:")
    assert tokenizer.decode(c + q) == ctx_text + q_text
    plain = PromptEncoder(tokenizer, chat=False)
    c2, q2 = plain.encode("Some context. ", "Question?")
    assert "<|im_start|>" not in tokenizer.decode(c2 + q2)


def test_registry_expand_and_errors():
    assert len(GROUPS["ruler"]) == 13 and len(GROUPS["ruler/synthetic"]) == 11 and len(GROUPS["longbench"]) == 6
    assert expand("ruler/cwe,gsm8k;ruler/cwe") == ["ruler/cwe", "gsm8k"]
    assert expand(["longbench"])[0] == "longbench/qasper"
    assert expand(["ruler/vt,ruler/fwe", "gsm8k"]) == ["ruler/vt", "ruler/fwe", "gsm8k"]  # repeated and/or comma lists
    with pytest.raises(ValueError, match="unknown task 'ruler/nope'"):
        expand("ruler/nope")
    with pytest.raises(ValueError, match="takes no data file"):
        get_task("ruler/cwe", data_path="x.json")
    for name in TASK_NAMES:
        assert get_task(name).name == name
