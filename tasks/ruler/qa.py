"""RULER question answering: qa_1 (SQuAD v2.0 dev) and qa_2 (HotpotQA dev, distractor setting).

A sample is one question with its gold document(s) mixed among distractor documents, as many as fit in the
target length, in a random order. As in RULER (``scripts/data/synthetic/qa.py``), qa_1's distractors are
first the other paragraphs of the question's own SQuAD article (hard negatives; a random subset of them
when not all fit), then random paragraphs of the other articles; qa_2's are random documents of the rest
of the dataset. Scored with string_match_part. Sample i uses question i of the dataset (question order
permuted when seed != 0). RULER shuffles every prompt's documents with the same fixed seed (so the gold
document sits at the same place in all prompts of one size); here each sample has its own random order.

Data: a local file (``data_path``: the official SQuAD ``dev-v2.0.json`` or HotpotQA
``hotpot_dev_distractor_v1.json``) or a download from the official URL into the cache; when neither is
possible the task raises ``TaskUnavailable`` with the reason, and the evaluator reports it as skipped.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from magicpig_tasks.common import Draft, TaskUnavailable, check_build_args, record_order, register, sample_rng
from magicpig_tasks.records import RecordsTask
from magicpig_tasks.ruler.base import RulerTask

TEMPLATE = ("Answer the question based on the given documents. Only give me the answer and do not output any "
            "other words.\n\nThe following are given documents.\n\n{context}\n\nAnswer the question based on "
            "the given documents. Only give me the answer and do not output any other words.\n\n"
            "Question: {query}")
ANSWER_PREFIX = " Answer:"
DOCUMENT = "Document {i}:\n{text}"

SQUAD_URL = "https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v2.0.json"
HOTPOT_URL = "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json"


@dataclass
class QAData:
    """docs: every distinct document; questions: (question, answers, indices of its gold docs);
    related: per question, the indices of its hard-negative documents (SQuAD: the other paragraphs of its
    article), empty when the dataset has none."""

    docs: list[str]
    questions: list[tuple[str, list[str], list[int]]]
    related: list[list[int]] = field(default_factory=list)

    def hard_negatives(self, question: int) -> list[int]:
        return self.related[question] if self.related else []


def load_squad(path: str | Path) -> QAData:
    """SQuAD v2.0 JSON -> answerable questions, each with its paragraph as the gold document and the other
    paragraphs of its article as hard negatives."""
    data = _read_json(path, "ruler/qa_1 (SQuAD v2.0)")
    try:
        docs = sorted({p["context"] for art in data["data"] for p in art["paragraphs"]})
        index = {d: i for i, d in enumerate(docs)}
        questions, related = [], []
        for art in data["data"]:
            article = list(dict.fromkeys(index[p["context"]] for p in art["paragraphs"]))
            for p in art["paragraphs"]:
                gold = index[p["context"]]
                for qa in p["qas"]:
                    if not qa.get("is_impossible", False) and qa["answers"]:
                        answers = [a["text"] for a in qa["answers"]]
                        if not all(isinstance(x, str) for x in [p["context"], qa["question"], *answers]):
                            raise TypeError(f"question {qa.get('id', len(questions))!r}: its context, question "
                                            "and answer texts must be strings")
                        questions.append((qa["question"], answers, [gold]))
                        related.append([d for d in article if d != gold])
    except KeyError as exc:
        raise ValueError(f"ruler/qa_1: {path} is not a SQuAD v2.0 file (missing {exc})") from None
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"ruler/qa_1: {path} is not a SQuAD v2.0 file ({exc})") from None
    return QAData(docs, questions, related)


def load_hotpotqa(path: str | Path) -> QAData:
    """HotpotQA distractor JSON -> questions, each with its ten paragraphs ("title\\ntext") as gold docs."""
    data = _read_json(path, "ruler/qa_2 (HotpotQA)")
    try:
        def doc(title, sents):
            return f"{title}\n{''.join(sents)}"

        docs = sorted({doc(t, s) for d in data for t, s in d["context"]})
        index = {d: i for i, d in enumerate(docs)}
        questions = [(d["question"], [d["answer"]], [index[doc(t, s)] for t, s in d["context"]]) for d in data]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"ruler/qa_2: {path} is not a HotpotQA distractor file ({exc})") from exc
    return QAData(docs, questions)


def _read_json(path, what):
    """The JSON value of data file ``path``; ValueError naming the task (``what``) and the file when it is not
    UTF-8 JSON."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what}: data file {p} does not exist")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what}: data file {p} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what}: data file {p} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg})") from None
    except RecursionError:
        raise ValueError(f"{what}: data file {p} nests its JSON too deeply") from None


@register
class QATask(RulerTask, RecordsTask):
    """A RULER QA task: its records are the dataset's answerable questions; each sample is sized like the
    synthetic tasks' (``SyntheticTask.fit``), its haystack made of documents."""

    names = ("ruler/qa_1", "ruler/qa_2")
    groups = ("ruler",)
    metric = "string_match_part"
    max_new_tokens = 32
    one_sample_per_record = False  # sample i asks question i modulo their count, with its own haystack
    _data: QAData | None = None

    def data(self) -> QAData:
        """The documents and questions, read on first use (``TaskUnavailable`` when they cannot be had)."""
        if self._data is None:
            from magicpig_tasks.download import fetch

            if self.name == "ruler/qa_1":
                path = self.data_path or fetch(SQUAD_URL, "squad_dev_v2.0.json", "ruler/qa_1 (SQuAD v2.0 dev)")
                self._data = load_squad(path)
            else:
                path = self.data_path or fetch(HOTPOT_URL, "hotpot_dev_distractor_v1.json",
                                               "ruler/qa_2 (HotpotQA dev distractor)")
                self._data = load_hotpotqa(path)
            if not self._data.questions:
                raise TaskUnavailable(f"{self.name}: no answerable question in {path}")
        return self._data

    def records(self) -> list[tuple[str, list[str], list[int]]]:
        """The questions: (question, answers, indices of its gold documents)."""
        return self.data().questions

    def build(self, tokenizer, length: int, count: int, seed: int = 0):
        questions = self.records()  # fails (TaskUnavailable) before any other work
        order = record_order(len(questions), seed)
        check_build_args(self.name, length, count)
        enc = self.encoder(tokenizer)
        out = []
        for i in range(count):
            question = order[i % len(order)]
            s = self.fit(enc, length, self.draft(question, sample_rng(self.name, length, i, seed)),
                         f"{self.name}/{length}/{seed}/{i}")
            n_gold = len(questions[question][2])
            s.meta["hard_negatives"] = min(s.meta["hard_negatives_available"], s.meta["haystack_size"] - n_gold)
            out.append(s)
        return out

    def draft(self, index: int, rng: random.Random) -> Draft:
        """Question ``index`` among as many documents as fit: its gold ones, then hard negatives, then others."""
        data = self.data()
        question, answers, gold = data.questions[index]
        gold_set = set(gold)
        hard = [i for i in data.hard_negatives(index) if i not in gold_set]
        hard_set = set(hard)
        others = [i for i in range(len(data.docs)) if i not in gold_set and i not in hard_set]
        rng.shuffle(hard)
        rng.shuffle(others)
        others = hard + others  # hard negatives first: a prefix of this list fills the haystack
        keys = {i: rng.random() for i in gold}
        head, tail = TEMPLATE.split("{context}")
        tail = tail.format(query=question)

        def render(s: int) -> tuple[str, str, str]:
            chosen = list(gold) + others[:max(0, s - len(gold))]
            for i in chosen:
                if i not in keys:
                    keys[i] = rng.random()
            chosen.sort(key=lambda i: keys[i])
            ctx = "\n\n".join(DOCUMENT.format(i=j + 1, text=data.docs[d]) for j, d in enumerate(chosen))
            return head + ctx, tail, ANSWER_PREFIX

        return Draft(render, answers, 6.0, {"question": question, "question_index": index,
                                            "hard_negatives_available": len(hard)},
                     min_size=len(gold), max_size=len(data.docs))
