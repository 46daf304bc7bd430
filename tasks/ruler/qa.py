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

from magicpig_tasks.common import TaskUnavailable
from magicpig_tasks.download import fetch
from magicpig_tasks.ruler.base import Render, RulerTask

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
    data = _read_json(path, "qa_1 (SQuAD v2.0)")
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
                        questions.append((qa["question"], [a["text"] for a in qa["answers"]], [gold]))
                        related.append([d for d in article if d != gold])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"qa_1: {path} is not a SQuAD v2.0 file (missing {exc})") from exc
    return QAData(docs, questions, related)


def load_hotpotqa(path: str | Path) -> QAData:
    """HotpotQA distractor JSON -> questions, each with its ten paragraphs ("title\\ntext") as gold docs."""
    data = _read_json(path, "qa_2 (HotpotQA)")
    try:
        def doc(title, sents):
            return f"{title}\n{''.join(sents)}"

        docs = sorted({doc(t, s) for d in data for t, s in d["context"]})
        index = {d: i for i, d in enumerate(docs)}
        questions = [(d["question"], [d["answer"]], [index[doc(t, s)] for t, s in d["context"]]) for d in data]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"qa_2: {path} is not a HotpotQA distractor file ({exc})") from exc
    return QAData(docs, questions)


def _read_json(path, what):
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what}: data file {p} does not exist")
    return json.loads(p.read_text(encoding="utf-8"))


class QATask(RulerTask):
    metric = "string_match_part"
    max_new_tokens = 32

    def __init__(self, short: str, data_path: str | None = None, chat_template: str = "tokenizer"):
        super().__init__(chat_template)
        if short not in ("qa_1", "qa_2"):
            raise ValueError(f"unknown RULER QA task {short!r}; known: qa_1, qa_2")
        self.short = short
        self.data_path = data_path
        self._data: QAData | None = None
        self._seed = 0
        self._index = 0

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"ruler/{self.short}"

    def data(self) -> QAData:
        if self._data is None:
            if self.short == "qa_1":
                path = self.data_path or fetch(SQUAD_URL, "squad_dev_v2.0.json", "ruler/qa_1 (SQuAD v2.0 dev)")
                self._data = load_squad(path)
            else:
                path = self.data_path or fetch(HOTPOT_URL, "hotpot_dev_distractor_v1.json",
                                               "ruler/qa_2 (HotpotQA dev distractor)")
                self._data = load_hotpotqa(path)
            if not self._data.questions:
                raise TaskUnavailable(f"{self.name}: no answerable question in {path}")
        return self._data

    def build(self, tokenizer, length, count, seed=0):
        data = self.data()  # fails (TaskUnavailable) before any other work
        order = list(range(len(data.questions)))
        if seed:
            random.Random(seed).shuffle(order)
        from magicpig_tasks.common import PromptEncoder, check_build_args
        check_build_args(self.name, length, count)
        enc = PromptEncoder(tokenizer, self.chat_template)
        out = []
        for i in range(count):
            self._index = order[i % len(order)]
            s = self.build_one(enc, length, i, seed)
            n_gold = len(data.questions[self._index][2])
            s.meta["hard_negatives"] = min(s.meta["hard_negatives_available"], s.meta["haystack_size"] - n_gold)
            out.append(s)
        return out

    def max_size(self) -> int:
        return len(self.data().docs)

    def make(self, rng: random.Random) -> tuple[Render, list[str], float, dict]:
        data = self.data()
        question, answers, gold = data.questions[self._index]
        gold_set = set(gold)
        hard = [i for i in data.hard_negatives(self._index) if i not in gold_set]
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

        return render, answers, 6.0, {"question": question, "question_index": self._index,
                                      "hard_negatives_available": len(hard)}

    def min_size(self) -> int:
        return len(self.data().questions[self._index][2])
