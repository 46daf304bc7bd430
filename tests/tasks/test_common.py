"""magicpig_tasks.common: size fitting, prompt encoding and the task registry."""
from __future__ import annotations

import pytest
from fidelity_helpers import BosTokenizer

from magicpig_tasks.common import sample_rng
from magicpig_tasks.encoding import META_CHAT_3, PromptEncoder, fit_size
from magicpig_tasks.registry import DATA_TASKS, GROUPS, TASK_NAMES, expand, get_task
from magicpig_tasks.settings import CHAT_TEMPLATES, SETTINGS, check_chat_template, task_settings


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
        get_task("ruler/cwe", settings={"chat_template": "meta-chat"})


def test_task_settings_in_describe():
    """describe() (recorded in metrics.json, part of the resume key) names the template that runs."""
    def template(name, value):
        return get_task(name, settings={"chat_template": value}).describe()["chat_template"]

    assert get_task("ruler/vt").describe()["chat_template"] == "tokenizer"
    assert template("ruler/niah_single_1", "meta-chat-3") == "meta-chat-3"
    assert template("ruler/qa_1", "none") == "none"
    assert template("longbench/qasper", "meta-chat-3") == "meta-chat-3"
    assert template("longbench/lcc", "meta-chat-3") == "none"
    assert template("infini_igsm/4k_close_op2", "none") == "none"
    g = get_task("gsm8k").describe()
    assert g["add_bos"] is False and g["chat_template"] == "none"
    assert get_task("gsm8k", settings={"gsm8k_add_bos": True}).describe()["add_bos"] is True
    assert get_task("coqa", settings={"gsm8k_add_bos": True}).describe()["add_bos"] is False  # GSM8K's only


def test_task_settings_defaults_and_errors():
    """One dict of settings: defaults filled in, unknown names and bad values refused naming the setting."""
    assert task_settings() == {"chat_template": "tokenizer", "gsm8k_add_bos": False}
    assert task_settings({"chat_template": "none"}) == {"chat_template": "none", "gsm8k_add_bos": False}
    assert {name: s.default for name, s in SETTINGS.items()} == task_settings()
    with pytest.raises(ValueError, match="task settings: unknown 'chat_templte'; known: chat_template, gsm8k_add_bos"):
        task_settings({"chat_templte": "none"})
    with pytest.raises(ValueError, match="gsm8k_add_bos must be true or false, got 'yes'"):
        get_task("gsm8k", settings={"gsm8k_add_bos": "yes"})


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


def test_groups_and_data_tasks_come_from_the_task_classes():
    """The groups and DATA_TASKS are derived from the registered classes, in the order of the built-in
    modules."""
    assert list(GROUPS) == ["ruler", "ruler/synthetic", "longbench", "lm_eval", "infini_igsm"]
    assert GROUPS["ruler"][-2:] == ("ruler/qa_1", "ruler/qa_2") and "ruler/qa_1" not in GROUPS["ruler/synthetic"]
    assert GROUPS["lm_eval"] == ("gsm8k", "coqa", "mmlu_cot") and len(GROUPS["infini_igsm"]) == 6
    assert DATA_TASKS == ("ruler/qa_1", "ruler/qa_2") + GROUPS["longbench"] + GROUPS["lm_eval"] + GROUPS["infini_igsm"]
    assert len(TASK_NAMES) == 28 and len(set(TASK_NAMES)) == 28


def test_every_task_class_of_the_package_is_registered():
    """A task module the registry does not import never registers: every concrete task class defined in
    magicpig_tasks (outside experiments/) is registered under each of its names."""
    import importlib
    import inspect
    import pkgutil

    import magicpig_tasks
    from magicpig_tasks.common import TASKS, Task

    found = []
    for info in pkgutil.walk_packages(magicpig_tasks.__path__, "magicpig_tasks."):
        if info.name.startswith("magicpig_tasks.experiments"):
            continue
        module = importlib.import_module(info.name)
        found += [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                  if issubclass(cls, Task) and cls.__module__ == info.name and cls.names]
    assert found and all(TASKS.get(name) is cls for cls in found for name in cls.names)
    assert sorted(TASKS) == sorted(n for cls in set(found) for n in cls.names)
