"""magicpig_tasks.common: size fitting, prompt encoding and the task registry."""
from __future__ import annotations

import pytest
from fidelity_helpers import BosTokenizer

from magicpig_tasks.common import CHAT_TEMPLATES, META_CHAT_3, PromptEncoder, check_chat_template, fit_size, sample_rng
from magicpig_tasks.registry import GROUPS, TASK_NAMES, expand, get_task


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
    enc = PromptEncoder(tokenizer, "tokenizer")
    ctx_text, q_text = enc.render("Some context. ", "Question?", " Answer:")
    assert "<|im_start|>user" in ctx_text and ctx_text.endswith("Some context. ")
    assert q_text.startswith("Question?") and q_text.endswith("assistant\n Answer:")
    c, q = enc.encode("Some context. ", "Question?", " Answer:")
    assert tokenizer.decode(c + q) == ctx_text + q_text
    plain = PromptEncoder(tokenizer, "none")
    c2, q2 = plain.encode("Some context. ", "Question?")
    assert "<|im_start|>" not in tokenizer.decode(c2 + q2)


def test_meta_chat_3_template_is_the_original_magicpig_one(tokenizer):
    """The original's Llama-3 template (typo in its first token kept), answer prefix after it, and BOS
    added by the tokenizer as the original's Hugging Face wrapper did."""
    enc = PromptEncoder(tokenizer, "meta-chat-3")
    ctx_text, q_text = enc.render("Some context. ", "Question?", " Answer:")
    assert ctx_text == "|begin_of_text|><|start_header_id|>user<|end_header_id|> Some context. "
    assert q_text == "Question? <|eot_id|>\n<|start_header_id|>assistant<|end_header_id|> Answer:"
    assert META_CHAT_3.format(body="X") == ("|begin_of_text|><|start_header_id|>user<|end_header_id|> X <|eot_id|>\n"
                                            "<|start_header_id|>assistant<|end_header_id|>")
    bos = BosTokenizer(tokenizer)
    c, q = PromptEncoder(bos, "meta-chat-3").encode("Some context. ", "Question?")
    assert c[0] == 1 and 1 not in q
    c, _ = PromptEncoder(bos, "tokenizer").encode("Some context. ", "Question?")  # no template: plain + BOS
    assert c[0] == 1
    c, _ = PromptEncoder(bos, "none", add_bos=False).encode("Some context. ", "Question?")
    assert c[0] != 1
    assert PromptEncoder(tokenizer, "tokenizer").add_bos is False  # the chat template writes its own BOS


def test_chat_template_checked(tokenizer):
    assert CHAT_TEMPLATES == ("tokenizer", "meta-chat-3", "none")
    assert check_chat_template("none") == "none"
    with pytest.raises(ValueError, match="chat_template must be one of tokenizer, meta-chat-3, none, got 'llama'"):
        PromptEncoder(tokenizer, "llama")
    with pytest.raises(ValueError, match="chat_template must be one of"):
        get_task("ruler/cwe", chat_template="meta-chat")


def test_task_settings_in_describe():
    """describe() (recorded in metrics.json, part of the resume key) names the template that runs."""
    assert get_task("ruler/vt").describe()["chat_template"] == "tokenizer"
    assert get_task("ruler/niah_single_1", chat_template="meta-chat-3").describe()["chat_template"] == "meta-chat-3"
    assert get_task("ruler/qa_1", chat_template="none").describe()["chat_template"] == "none"
    assert get_task("longbench/qasper", chat_template="meta-chat-3").describe()["chat_template"] == "meta-chat-3"
    assert get_task("longbench/lcc", chat_template="meta-chat-3").describe()["chat_template"] == "none"
    g = get_task("gsm8k").describe()
    assert g["add_bos"] is False and g["chat_template"] == "none"
    assert get_task("gsm8k", gsm8k_add_bos=True).describe()["add_bos"] is True


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
