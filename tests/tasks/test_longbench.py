"""LongBench metrics on hand-worked examples, the loader and prompts on fixture files, truncation."""
from __future__ import annotations

import pytest

from magicpig_tasks.common import TaskUnavailable
from magicpig_tasks.registry import get_task
from magicpig_tasks.longbench.metrics import (classification, code_sim, first_code_line, fuzz_ratio, normalize_answer, qa_f1,
                                     retrieval)


def longbench(short, data_path=None, chat_template="tokenizer"):
    return get_task(f"longbench/{short}", data_path, {"chat_template": chat_template})


def test_normalize_answer():
    assert normalize_answer("The  Cat, sat on a mat!") == "cat sat on mat"
    assert normalize_answer("An apple; THE end.") == "apple end"
    assert normalize_answer("theory") == "theory"  # articles only as whole words


def test_qa_f1_hand_worked():
    assert qa_f1("the RULER benchmark", "RULER") == pytest.approx(2 * 0.5 * 1 / 1.5)  # P 1/2, R 1
    assert qa_f1("Paris", "Paris.") == 1.0
    assert qa_f1("London", "Paris") == 0.0
    assert qa_f1("", "Paris") == 0.0
    assert qa_f1("x b b", "b b c") == pytest.approx(2 / 3)  # common b,b: P 2/3, R 2/3
    assert qa_f1("a b b", "b b c") == pytest.approx(0.8)  # "a" is dropped: P 1, R 2/3
    assert qa_f1("the", "a") == 0.0  # both normalise to nothing


def test_code_sim_first_code_line():
    assert first_code_line("\n# comment\n```python\nx = 1\ny = 2") == "x = 1"
    assert first_code_line("// c\n`a`") == ""
    assert code_sim("x = 1\nmore", "x = 1") == 1.0
    assert code_sim("# note\nreturn a", "return b") == pytest.approx(0.88)  # 2*7/16 = 87.5% -> 88
    assert code_sim("abc", "abd") == pytest.approx(0.67)  # 2*2/6 = 66.7% -> 67
    assert code_sim("", "abc") == 0.0


def test_code_sim_is_fuzzywuzzys_difflib_ratio():
    """LongBench's fuzzywuzzy (pinned requirements, no python-Levenshtein) runs on difflib; rapidfuzz's
    ratio (LCS-based) gives 68 on this pair and 59 on the long one, where difflib's autojunk drops the
    digits, comma and space (each in more than 1% of a 200+ character string) from the matching."""
    assert code_sim("public void setName(String name) {", "public String getName() {") == pytest.approx(0.64)
    a = "values = [" + ", ".join(str(i) for i in range(60)) + "]"
    b = "values = [" + ", ".join(str(i) for i in range(0, 120, 2)) + "]"
    assert code_sim(a, b) == pytest.approx(0.06)
    assert fuzz_ratio("", "") == 100 and fuzz_ratio("x", "") == 0  # equal strings first, then empty ones
    assert fuzz_ratio("abc", "abd") == 67


def test_classification_hand_worked():
    classes = ["Location", "Other location", "City", "Country"]
    assert classification("City", "City", all_classes=classes) == 1.0
    assert classification("City or Country", "City", all_classes=classes) == 0.5
    assert classification("Country", "City", all_classes=classes) == 0.0
    # "Location" is inside the ground truth "Other location"? no (case differs) -> both match, 1/2
    assert classification("Other location", "Other location", all_classes=classes) == 1.0
    # a class that is a strict substring of the ground truth is not counted against it
    assert classification("Other location", "Other location", all_classes=["location", "Other location"]) == 1.0
    assert classification("nothing", "City", all_classes=classes) == 0.0
    assert classification("City", "City", all_classes=[]) == 0.0


def test_retrieval_hand_worked():
    assert retrieval("Paragraph 12", "Paragraph 12") == 1.0
    assert retrieval("Paragraph 3 or Paragraph 12", "Paragraph 12") == 0.5
    assert retrieval("I do not know", "Paragraph 12") == 0.0
    assert retrieval("Paragraph 1", "Paragraph 12") == 0.0  # whole numbers only
    with pytest.raises(ValueError, match="Paragraph N"):
        retrieval("1", "12")


def test_trec_from_fixture(tokenizer, fixtures):
    task = longbench("trec", str(fixtures / "longbench_trec_tiny.jsonl"))
    samples = task.build(tokenizer, 4096, 5)
    assert len(samples) == 2  # the file has two records
    s = samples[0]
    text = tokenizer.decode(s.prompt_ids)
    assert "<|im_start|>" not in text  # trec: no chat template
    assert text.startswith("Please determine the type of the question below.")
    assert text.endswith("Type: City\n\nWhat is the capital of Peru ?")
    assert s.max_new_tokens == 64 and s.references == ["City"]
    assert task.score("City\nCountry", s) == 100.0  # first line only
    assert task.score("\nCity or Country", s) == 50.0
    assert task.score("Country\nCity", s) == 0.0


def test_qasper_chat_and_scoring(tokenizer, fixtures):
    task = longbench("qasper", str(fixtures / "longbench_qasper_tiny.jsonl"))
    s = task.build(tokenizer, 4096, 1)[0]
    q = tokenizer.decode(s.question_ids)
    assert tokenizer.decode(s.context_ids).startswith("<|im_start|>system")  # chat template
    assert "Question: Which dataset do the authors evaluate on?\n\nAnswer:" in q
    assert q.endswith("<|im_start|>assistant\n")
    assert s.max_new_tokens == 128
    assert task.score("RULER", s) == 100.0  # max over the two answers
    assert task.score("the RULER benchmark suite", s) == pytest.approx(100 * 2 * (2 / 3) / (2 / 3 + 1))


def test_lcc_and_retrieval_prompts(tokenizer, fixtures):
    lcc = longbench("lcc", str(fixtures / "longbench_lcc_tiny.jsonl")).build(tokenizer, 4096, 1)[0]
    text = tokenizer.decode(lcc.prompt_ids)
    assert text.startswith("Please complete the code given below. \nimport os") and text.endswith("Next line of code:\n")
    pr_task = longbench("passage_retrieval_en", str(fixtures / "longbench_passage_retrieval_en_tiny.jsonl"))
    pr = pr_task.build(tokenizer, 4096, 1)[0]
    assert tokenizer.decode(pr.question_ids).split("<|im_end|>")[0].endswith("The answer is: ")
    assert pr_task.score("Paragraph 1", pr) == 100.0 and pr.max_new_tokens == 32


def test_middle_truncation(tokenizer, fixtures, tmp_path):
    long_ctx = " ".join(f"word{i}" for i in range(3000))
    path = tmp_path / "trec.jsonl"
    path.write_text('{"input": "Q?", "context": "%s", "answers": ["City"], "all_classes": ["City"]}\n' % long_ctx)
    s = longbench("trec", str(path)).build(tokenizer, 512, 1)[0]
    text = tokenizer.decode(s.prompt_ids)
    assert s.meta["truncated"] and s.n_tokens <= 520
    assert text.startswith("Please determine the type") and text.endswith("word2999\nQ?")
    assert "word1500 " not in text  # the middle is gone


def test_bad_records_and_offline(tokenizer, tmp_path, offline):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"input": "q", "answers": ["a"]}\n')
    with pytest.raises(ValueError, match="field 'context'"):
        longbench("trec", str(bad)).build(tokenizer, 1024, 1)
    with pytest.raises(ValueError, match="unknown task 'longbench/narrativeqa'"):
        longbench("narrativeqa")
    with pytest.raises(FileNotFoundError):
        longbench("trec", str(tmp_path / "missing.jsonl")).build(tokenizer, 1024, 1)


def test_hub_unreachable_is_task_unavailable(monkeypatch, tmp_path):
    """The hub parquet goes through the one fetcher (magicpig_tasks.download): a failed download is
    TaskUnavailable naming the URL and the reason."""
    import urllib.request

    import magicpig_tasks.records as records

    def boom(url, timeout=None):
        raise OSError("network is unreachable")

    for name in ("MAGICPIG_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MAGICPIG_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(urllib.request, "urlopen", boom)
    with pytest.raises(TaskUnavailable, match="THUDM/LongBench.*network is unreachable"):
        longbench("trec").records()
    assert records  # module imported


@pytest.mark.parametrize("switch", ["MAGICPIG_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"])
def test_hub_data_offline_and_cached(monkeypatch, tmp_path, fixtures, switch):
    """Offline (any of the three switches), a file that is not cached is TaskUnavailable naming the switch,
    without touching the network; once cached it is read from the cache, offline too."""
    import shutil
    import urllib.request

    from magicpig_tasks import download
    from magicpig_tasks.longbench import HUB_URL

    for name in ("MAGICPIG_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(switch, "1")
    monkeypatch.setenv("MAGICPIG_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: pytest.fail("offline mode used the network"))
    with pytest.raises(TaskUnavailable, match=f"{switch}=1"):
        longbench("trec").records()
    import pandas as pd

    url = HUB_URL.format(task="trec")
    cached = download.cache_dir() / download.cache_name(url)
    cached.parent.mkdir(parents=True)
    pd.read_json(fixtures / "longbench_trec_tiny.jsonl", lines=True).to_parquet(cached)
    assert cached.suffix == ".parquet" and "THUDM" in cached.name
    rows = longbench("trec").records()
    assert rows and {"context", "input", "answers"} <= set(rows[0])
    assert shutil.os.path.isfile(cached)


def test_chat_template_setting(tokenizer, fixtures):
    """qasper takes the chosen template (the original MagicPIG's meta-chat-3, or none); lcc stays plain."""
    path = str(fixtures / "longbench_qasper_tiny.jsonl")
    meta = longbench("qasper", path, chat_template="meta-chat-3").build(tokenizer, 4096, 1)[0]
    text = tokenizer.decode(meta.prompt_ids)
    assert text.startswith("|begin_of_text|><|start_header_id|>user<|end_header_id|> You are given a scientific")
    assert text.endswith("Answer: <|eot_id|>\n<|start_header_id|>assistant<|end_header_id|>")
    plain = longbench("qasper", path, chat_template="none").build(tokenizer, 4096, 1)[0]
    assert tokenizer.decode(plain.prompt_ids).startswith("You are given a scientific article")
    lcc_path = str(fixtures / "longbench_lcc_tiny.jsonl")
    lcc = longbench("lcc", lcc_path, chat_template="meta-chat-3")
    assert lcc.describe()["chat_template"] == "none"
    default = longbench("lcc", lcc_path).build(tokenizer, 4096, 1)[0]
    assert lcc.build(tokenizer, 4096, 1)[0].prompt_ids == default.prompt_ids
    for short in ("qasper", "lcc"):
        with pytest.raises(ValueError, match="chat_template must be one of"):
            longbench(short, path, chat_template="chatml")
