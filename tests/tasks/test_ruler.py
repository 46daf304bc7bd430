"""RULER generators: sizes within 2% of the target, answers present exactly as scored, reference task
structure, determinism under a seed; the scorers; the QA loaders on fixture files, offline."""
from __future__ import annotations

import math
import random
import re
from collections import Counter

import pytest

from magicpig_tasks.common import TaskUnavailable
from magicpig_tasks.registry import GROUPS, get_task
from magicpig_tasks.ruler.fwe import zeta, zipf_counts
from magicpig_tasks.ruler.qa import load_hotpotqa, load_squad
from magicpig_tasks.ruler.scoring import string_match_all, string_match_part

LENGTH = 4096
NON_QA = tuple(name.removeprefix("ruler/") for name in GROUPS["ruler/synthetic"])
_CACHE: dict = {}


def make_task(short, data_path=None, chat_template="tokenizer"):
    return get_task(f"ruler/{short}", data_path, {"chat_template": chat_template})


def built(tokenizer, short, length=LENGTH, count=2, seed=0):
    key = (short, length, count, seed)
    if key not in _CACHE:
        _CACHE[key] = make_task(short).build(tokenizer, length, count, seed)
    return _CACHE[key]


@pytest.mark.parametrize("short", NON_QA)
def test_length_within_2_percent_and_answers_present(tokenizer, short):
    samples = built(tokenizer, short)
    assert len(samples) == 2
    for s in samples:
        assert 0.98 * LENGTH <= s.n_tokens <= LENGTH, (short, s.n_tokens)
        assert s.prompt_ids == s.context_ids + s.question_ids
        text = tokenizer.decode(s.prompt_ids)
        assert s.references and all(r in text for r in s.references)
        # the scorer gives full marks to a prediction that lists the references, and less without one
        assert string_match_all(" " + ", ".join(s.references), s.references) == 100.0
        assert string_match_all(", ".join(s.references[1:]), s.references) < 100.0
        # the question part holds the query, the context part the haystack
        assert len(s.question_ids) < 200 < len(s.context_ids)
    assert samples[0].prompt_ids != samples[1].prompt_ids


@pytest.mark.parametrize("short", ["niah_single_2", "niah_multikey_2", "vt", "cwe", "fwe"])
def test_deterministic_under_seed(tokenizer, short):
    first = built(tokenizer, short)[0]
    again = make_task(short).build(tokenizer, LENGTH, 1, seed=0)[0]  # fewer samples: same sample 0
    assert again.prompt_ids == first.prompt_ids and again.references == first.references
    other = make_task(short).build(tokenizer, LENGTH, 1, seed=1)[0]
    assert other.prompt_ids != first.prompt_ids


def test_other_lengths(tokenizer):
    for length in (1024, 8192):
        s = make_task("niah_single_2").build(tokenizer, length, 1)[0]
        assert 0.98 * length <= s.n_tokens <= length


def _context_text(tokenizer, s):
    return tokenizer.decode(s.context_ids)


def test_niah_structure(tokenizer):
    single = built(tokenizer, "niah_single_1")[0]
    q = tokenizer.decode(single.question_ids)
    assert "What is the special magic number for" in q
    assert q.endswith("The special magic number for " + single.meta["queried"][0] + " mentioned in the provided text is")
    ctx = _context_text(tokenizer, single)
    assert "The grass is green. The sky is blue." in ctx and re.fullmatch(r"\d{7}", single.references[0])
    assert ctx.count("One of the special magic numbers for") == 1  # needles keep the plural
    assert "again.\nOne of the special" in ctx or "again.\nThe grass" in ctx  # one noise paragraph per line

    uuid_re = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    assert re.fullmatch(uuid_re, built(tokenizer, "niah_single_3")[0].references[0])
    mk3 = built(tokenizer, "niah_multikey_3")[0]
    assert re.fullmatch(uuid_re, mk3.references[0]) and re.fullmatch(uuid_re, mk3.meta["queried"][0])

    mk1 = built(tokenizer, "niah_multikey_1")[0]
    ctx = _context_text(tokenizer, mk1)
    assert len(mk1.references) == 1 and len(mk1.meta["keys"]) == 4
    assert all(f"for {k} is:" in ctx for k in mk1.meta["keys"])
    mk2 = built(tokenizer, "niah_multikey_2")[0]
    assert _context_text(tokenizer, mk2).count("One of the special magic numbers for") > 50  # distractor needles

    mv = built(tokenizer, "niah_multivalue")[0]
    assert len(mv.references) == 4 and len(set(mv.references)) == 4
    assert "What are all the special magic numbers for" in tokenizer.decode(mv.question_ids)
    mq = built(tokenizer, "niah_multiquery")[0]
    assert len(mq.references) == 4 and len(mq.meta["queried"]) == 4
    assert ", and " in tokenizer.decode(mq.question_ids)


def test_depths_spread_over_the_context(tokenizer):
    depths = [d for s in make_task("niah_single_2").build(tokenizer, 1024, 8) for d in s.meta["depths"]]
    assert min(depths) < 40 and max(depths) > 60


def test_vt_chain(tokenizer):
    s = built(tokenizer, "vt")[0]
    ctx = _context_text(tokenizer, s).split("\n\nMemorize and track")[-1]  # after the solved example
    names = s.references
    assert len(names) == 5
    assert f"VAR {names[0]} = {s.meta['value']}" in ctx
    positions = [ctx.index(f"VAR {names[i + 1]} = VAR {names[i]}") for i in range(4)]
    assert positions == sorted(positions) and ctx.index(f"VAR {names[0]} =") < positions[0]
    assert f"assigned the value {s.meta['value']}" in tokenizer.decode(s.question_ids)


def test_vt_layout_matches_current_ruler(tokenizer):
    """Current RULER: noise and statements on single-newline lines, a noise line between two statements, a
    solved example sized to 500 tokens, its answer after two spaces, "assigned" spelt right."""
    from magicpig_tasks.ruler.haystack import NOISE

    s = built(tokenizer, "vt")[0]
    text = _context_text(tokenizer, s)
    first = text.index("Memorize and track")
    last = text.rindex("\n\nMemorize and track")
    example, main = text[first:last], text[last + 2:]
    assert "\n\n" not in main.split("following text.\n\n", 1)[1]  # no blank lines in the haystack
    lines = main.split("following text.\n\n", 1)[1].split("\n")
    assert set(lines) - {NOISE} == {stmt for stmt in s.meta["chain"]}
    at = [i for i, line in enumerate(lines) if line != NOISE]
    assert all(b - a >= 2 for a, b in zip(at, at[1:]))  # distinct noise positions: never two statements in a row
    assert example.count(NOISE) >= 10  # the old example had 5 noise lines
    solved, names = example.rsplit(", they are: ", 1)
    assert re.fullmatch(r" [A-Z]{3}( [A-Z]{3}){4}", names)  # two spaces after the prefix (then "\n\n")
    n = len(tokenizer(solved + ", they are: ", add_special_tokens=False).input_ids)
    assert 450 < n <= 500
    assert f"variables are assigned the value {s.meta['example_value']}" in example and "assgined" not in text
    assert "assgined" not in tokenizer.decode(s.question_ids)


def test_vt_noise_positions():
    from magicpig_tasks.ruler.vt import noise_positions

    assert noise_positions([0.0, 0.0, 0.0], 3) == [0, 1, 2]
    assert noise_positions([0.99, 0.99, 0.995], 10) == [7, 8, 9]
    assert noise_positions([0.1, 0.5, 0.9], 100) == [10, 50, 90]


def test_cwe_frequencies(tokenizer):
    s = built(tokenizer, "cwe")[0]
    ctx = _context_text(tokenizer, s)
    main = ctx.split("Memorize the ones that appear most often.\n")[-1]  # the list after the solved example
    words = re.findall(r"\d+\. (\S+)", main)
    counts = Counter(words)
    assert len(s.references) == 10
    assert all(counts[w] == 30 for w in s.references)
    assert set(c for w, c in counts.items() if w not in s.references) == {3}


def test_cwe_short_context_frequencies(tokenizer):
    s = make_task("cwe").build(tokenizer, 2048, 1)[0]
    assert s.meta["freq_cw"] == 6 and s.meta["freq_ucw"] == 1
    assert 0.98 * 2048 <= s.n_tokens <= 2048


def test_fwe_top_three(tokenizer):
    s = built(tokenizer, "fwe")[0]
    ctx = _context_text(tokenizer, s)
    words = ctx.split("coded words. ")[-1].split()
    counts = Counter(w for w in words if w != "...")
    top = [w for w, _ in counts.most_common(4)]
    assert top[:3] == s.references
    assert counts[top[0]] > counts[top[1]] > counts[top[2]] > counts[top[3]]  # no tie at the cut
    assert Counter(words).most_common(1)[0][0] == "..."  # the noise is the most frequent "word"
    # floor(N k^-2 / zeta(2)) occurrences for rank k: rank 1 (the noise) ~ 4x rank 2, 9x rank 3
    noise = Counter(words)["..."]
    assert abs(noise - 4 * counts[top[0]]) <= 4 and abs(noise - 9 * counts[top[1]]) <= 9
    assert s.meta["vocab_size"] == LENGTH // 50


def test_zipf_counts():
    assert zeta(2.0) == pytest.approx(math.pi ** 2 / 6, rel=1e-10)
    assert zipf_counts(1000, 4, 2.0) == [607, 151, 67, 37]  # floor(1000 k^-2 / (pi^2/6))
    with pytest.raises(ValueError):
        zeta(1.0)


def test_string_match_all_hand_cases():
    assert string_match_all("The numbers are 123 and 456.", ["123", "456"]) == 100.0
    assert string_match_all("Only 123", ["123", "456"]) == 50.0
    assert string_match_all("nothing", ["123"]) == 0.0
    assert string_match_all("ABC-def", ["abc-DEF"]) == 100.0  # case-insensitive
    assert string_match_all("12\x0034", ["12\n34"]) == 100.0  # control chars become newlines
    assert string_match_all("anything", []) == 0.0


def test_string_match_part_hand_cases():
    assert string_match_part("It is in France.", ["France", "in France"]) == 100.0
    assert string_match_part("It is in Spain.", ["France", "Italy"]) == 0.0
    assert string_match_part("ITALY", ["France", "Italy"]) == 100.0
    assert string_match_part("x", []) == 0.0


# ---- QA --------------------------------------------------------------------------------------------
def test_squad_loader(fixtures):
    data = load_squad(fixtures / "squad_dev_v2_tiny.json")
    assert len(data.docs) == 4  # every paragraph is a document, questions or not
    assert [q for q, _, _ in data.questions] == ["In what country is Normandy located?",
                                                 "What were the Normans famed for?",
                                                 "What branch of theoretical computer science classifies problems by difficulty?"]
    q, answers, gold = data.questions[0]
    assert answers == ["France", "in France"] and "Normandy, a region in France" in data.docs[gold[0]]


def test_squad_hard_negatives(fixtures):
    """RULER's qa_1 distractors start with the other paragraphs of the question's own article."""
    data = load_squad(fixtures / "squad_dev_v2_tiny.json")
    normans = [i for i, d in enumerate(data.docs) if "Norman" in d]
    complexity = [i for i in range(len(data.docs)) if i not in normans]
    assert len(normans) == 2 and len(complexity) == 2
    for k, (_, _, gold) in enumerate(data.questions):
        article = normans if gold[0] in normans else complexity
        assert data.related[k] == [i for i in article if i != gold[0]]  # the article's other paragraph
    assert load_hotpotqa(fixtures / "hotpot_dev_distractor_tiny.json").hard_negatives(0) == []


def test_qa_1_fills_the_haystack_with_hard_negatives_first(tokenizer, fixtures, offline):
    """With room for one distractor it is always the same-article paragraph, never a random one of 3."""
    task = make_task("qa_1", str(fixtures / "squad_dev_v2_tiny.json"))
    data = task.data()
    for k, (_, _, gold) in enumerate(data.questions):
        hard = data.docs[data.related[k][0]]
        for seed in range(12):
            draft = task.draft(k, random.Random(seed))
            assert draft.meta["hard_negatives_available"] == 1 and draft.min_size == len(gold)
            ctx = draft.render(2)[0]
            assert hard in ctx and data.docs[gold[0]] in ctx and ctx.count("Document ") == 2
    # end to end: a prompt with room for gold + 1 document holds the hard negative
    full = make_task("qa_1", str(fixtures / "squad_dev_v2_tiny.json")).build(tokenizer, 4096, 1)[0]
    assert full.meta["haystack_size"] == 4 and full.meta["hard_negatives"] == 1
    for length in range(full.n_tokens - 40, full.n_tokens - 200, -10):
        s = make_task("qa_1", str(fixtures / "squad_dev_v2_tiny.json")).build(tokenizer, length, 1)[0]
        if s.meta["haystack_size"] == 2:
            break
    assert s.meta["haystack_size"] == 2 and s.meta["hard_negatives"] == 1
    assert data.docs[data.related[0][0]] in tokenizer.decode(s.prompt_ids)


def test_hotpotqa_loader(fixtures):
    data = load_hotpotqa(fixtures / "hotpot_dev_distractor_tiny.json")
    assert len(data.docs) == 6 and len(data.questions) == 2
    q, answers, gold = data.questions[0]
    assert answers == ["Lisbon"] and len(gold) == 3
    assert "Casa Aurora\nCasa Aurora is a museum founded by Ana Ferreira. The museum is located in Lisbon." in data.docs


def test_loader_errors(fixtures, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_squad(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"nope": 1}')
    with pytest.raises(ValueError, match="not a SQuAD"):
        load_squad(bad)


@pytest.mark.parametrize("short,fixture", [("qa_1", "squad_dev_v2_tiny.json"),
                                           ("qa_2", "hotpot_dev_distractor_tiny.json")])
def test_qa_samples_from_local_file(tokenizer, fixtures, short, fixture, offline):
    task = make_task(short, str(fixtures / fixture))
    samples = task.build(tokenizer, 1024, 2)
    for s in samples:
        text = tokenizer.decode(s.prompt_ids)
        assert s.n_tokens <= 1024 and "Document 1:" in text
        assert any(r in text for r in s.references)
        assert tokenizer.decode(s.question_ids).startswith("\n\nAnswer the question based on the given documents.")
        assert s.meta["question"] in tokenizer.decode(s.question_ids)
        assert s.max_new_tokens == 32
    assert task.score("in France", samples[0]) == 100.0 if short == "qa_1" else True
    # a shorter target keeps the gold documents and drops distractors
    full = make_task(short, str(fixtures / fixture)).build(tokenizer, 4096, 1)[0]
    assert full.meta["haystack_size"] == len(task.data().docs)  # every document fits in 4096 tokens
    small = make_task(short, str(fixtures / fixture)).build(tokenizer, full.n_tokens - 1, 1)[0]
    assert small.meta["haystack_size"] < len(task.data().docs)
    assert any(r in tokenizer.decode(small.prompt_ids) for r in small.references)


def test_qa_unavailable_offline(tokenizer, offline):
    with pytest.raises(TaskUnavailable, match="MAGICPIG_OFFLINE=1"):
        make_task("qa_1").build(tokenizer, 1024, 1)
    with pytest.raises(TaskUnavailable, match="HotpotQA"):
        make_task("qa_2").build(tokenizer, 1024, 1)


def test_chat_template_option(tokenizer):
    """meta-chat-3: the original MagicPIG's Llama-3 template around the task text, answer prefix after it;
    none: the plain task text. Both sized to the target like the default."""
    orig = make_task("niah_single_1", chat_template="meta-chat-3").build(tokenizer, 1024, 1)[0]
    text = tokenizer.decode(orig.prompt_ids)
    assert text.startswith("|begin_of_text|><|start_header_id|>user<|end_header_id|> A special magic number is hidden")
    q = tokenizer.decode(orig.question_ids)
    assert q.endswith(" <|eot_id|>\n<|start_header_id|>assistant<|end_header_id|> The special magic number for "
                      + orig.meta["queried"][0] + " mentioned in the provided text is")
    assert "<|im_start|>" not in text and 0.98 * 1024 <= orig.n_tokens <= 1024
    plain = make_task("niah_single_1", chat_template="none").build(tokenizer, 1024, 1)[0]
    assert tokenizer.decode(plain.prompt_ids).startswith("A special magic number is hidden")
    assert make_task("vt", chat_template="none").describe()["chat_template"] == "none"
    with pytest.raises(ValueError, match="chat_template must be one of tokenizer, meta-chat-3, none"):
        make_task("cwe", chat_template="llama-3")


def test_one_essay_reader_honours_magicpig_essays(tmp_path, monkeypatch):
    """RULER's words, the capture prompt's corpus and bench decode's tokens all come from one reader, which
    reads $MAGICPIG_ESSAYS when it is set."""
    from magicpig.harness.bench import prompts
    from magicpig_tasks.experiments import haystack as capture_haystack
    from magicpig_tasks.ruler import haystack as hs

    (tmp_path / "b.txt").write_text("  Second essay here.  ")
    (tmp_path / "a.txt").write_text("First essay.\n")
    monkeypatch.setenv("MAGICPIG_ESSAYS", str(tmp_path))
    assert hs.essay_documents() == ("First essay.\n", "  Second essay here.  ")
    assert hs.essay_words() == ("First", "essay.", "Second", "essay", "here.")
    assert hs.essay_corpus() == capture_haystack.essay_text() == "First essay.\n\nSecond essay here."

    class Chars:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

    ids = prompts.essay_tokens(Chars(), 40)
    assert "".join(map(chr, ids)).startswith("First essay.\n\nSecond essay here.First")
    monkeypatch.setenv("MAGICPIG_ESSAYS", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="neither a folder"):
        hs.essay_corpus()
