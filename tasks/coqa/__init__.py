"""CoQA as lm-evaluation-harness 0.4 (the paper's era) runs it (task ``coqa``, version 3): one sample per
story of the validation split (500), the question being the story's LAST turn.

Prompt (no chat template, no BOS by default, as lm-eval encodes): the story, a blank line, then every
earlier turn as ``Q: <question>\\n\\nA: <answer>\\n\\n`` and the last one as ``Q: <question>\\n\\nA:``; zero-shot.
Greedy generation stopped at ``"\\nQ:"`` (lm-eval's ``until``), at most 256 new tokens (its default
``max_gen_toks``). The prediction is the generation's first line, stripped. Scores (``metrics``): SQuAD
exact match and token F1 against the turn's answer and its additional answers, each averaged over the
leave-one-out gold sets when there are several answers (lm-eval's ``compute_scores``).

The paper's Table 1 gives one number per task; lm-eval reports both ``em`` and ``f1`` for CoQA. The task
score here is F1 (the usual headline number of CoQA, and the one near the paper's 78.5 for
Llama-3.1-8B-Instruct); exact match is recorded beside it (``extra_scores``). This choice is ours: the paper
does not say which metric its column shows.

Data: a local ``.json`` / ``.jsonl`` / ``.parquet`` file (``data_path``) or the CoQA dev set (``HUB_URL``, the
file lm-eval's ``EleutherAI/coqa`` loader reads), through the one fetcher. Both layouts are read: the
original (``questions`` / ``answers`` lists of turn dicts, ``additional_answers`` a dict of such lists)
and the Hugging Face one (``questions`` / ``answers`` dicts of lists: ``{"input_text": [...]}``).
"""
from __future__ import annotations

from magicpig_tasks.common import Sample, register
from magicpig_tasks.coqa.metrics import coqa_scores
from magicpig_tasks.encoding import PromptEncoder
from magicpig_tasks.records import LmEvalTask

HUB_URL = "https://nlp.stanford.edu/data/coqa/coqa-dev-v1.0.json"
STOP = ["\nQ:"]


def turn_texts(field, what: str) -> list[str]:
    """The ``input_text`` of each turn from either layout (list of turn dicts, or a dict of lists)."""
    if isinstance(field, dict):
        texts = field.get("input_text")
    elif isinstance(field, list):
        texts = [t.get("input_text") if isinstance(t, dict) else None for t in field]
    else:
        texts = None
    if not isinstance(texts, list) or not texts or any(not isinstance(t, str) for t in texts):
        raise ValueError(f"coqa: {what} needs a non-empty list of turns with 'input_text' strings")
    return texts


def prompt_parts(story: str, questions: list[str], answers: list[str]) -> tuple[str, str]:
    """(context, question) of lm-eval's ``doc_to_text``: the story and the earlier turns, then the last
    question ending in ``A:``."""
    context = story + "\n\n" + "".join(f"Q: {q}\n\nA: {a}\n\n" for q, a in zip(questions[:-1], answers[:-1]))
    return context, f"Q: {questions[-1]}\n\nA:"


def gold_answers(record: dict, answers: list[str]) -> list[str]:
    """The last turn's answer, then each additional answer of that turn not equal to an earlier one
    ignoring case (lm-eval's ``doc_to_target``)."""
    turn = len(answers) - 1
    gold = [answers[turn]]
    extra = record.get("additional_answers") or {}
    for key in extra:
        texts = turn_texts(extra[key], f"additional_answers[{key!r}]")
        if turn < len(texts) and texts[turn].lower() not in (g.lower() for g in gold):
            gold.append(texts[turn])
    return gold


@register
class CoQA(LmEvalTask):
    names = ("coqa",)
    metric = "f1 (SQuAD token F1, lm-eval coqa; em recorded)"
    source_url = HUB_URL

    def check_record(self, index: int, record: dict) -> None:
        if not isinstance(record.get("story"), str):
            raise ValueError(f"coqa: record {index} needs a 'story' string")
        q = turn_texts(record.get("questions"), f"record {index} 'questions'")
        a = turn_texts(record.get("answers"), f"record {index} 'answers'")
        if len(q) != len(a):
            raise ValueError(f"coqa: record {index} has {len(q)} questions and {len(a)} answers")

    def sample(self, enc: PromptEncoder, row: dict, index: int, length: int) -> Sample:
        questions, answers = turn_texts(row["questions"], "questions"), turn_texts(row["answers"], "answers")
        ctx, q = enc.encode(*prompt_parts(row["story"], questions, answers))
        return Sample(id=f"coqa/{row.get('id', index)}", context_ids=ctx, question_ids=q,
                      references=gold_answers(row, answers), max_new_tokens=self.max_new_tokens, stop=list(STOP),
                      meta={"index": index, "turns": len(questions)})

    @staticmethod
    def prediction_text(prediction: str) -> str:
        """lm-eval's ``process_results``: the generation stripped, its first line."""
        return prediction.strip().split("\n")[0]

    def score(self, prediction: str, sample: Sample) -> float:
        return 100.0 * coqa_scores(sample.references, self.prediction_text(prediction))["f1"]

    def extra_scores(self, prediction: str, sample: Sample) -> dict[str, float]:
        scores = coqa_scores(sample.references, self.prediction_text(prediction))
        return {"f1": 100.0 * scores["f1"], "em": 100.0 * scores["em"]}
