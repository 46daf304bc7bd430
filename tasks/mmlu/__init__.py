"""MMLU with few-shot chain of thought as lm-evaluation-harness 0.4.5 (the paper's era) runs it
(``mmlu_flan_cot_fewshot``, version 2; the paper's "MMLU-Flan-Cot-Fewshot"), task ``mmlu_cot``.

Prompt per question of subject S (no chat template, no BOS by default): S's task description, then its
first 4 chain-of-thought exemplars (lm-eval's ``first_n`` sampler, ``num_fewshot: 4``), each
``Q: <question with its choices>\\nA: <worked answer ending in "The answer is (X).">\\n\\n``, then
``Q: <question>\\n(A) <c0> (B) <c1> (C) <c2> (D) <c3>\\nA: Let's think step by step.`` The description is
followed directly by the first ``Q:``, with no separator, as that lm-eval version renders it.
Greedy generation, at most 256 new tokens (lm-eval's default ``max_gen_toks``; its only stop string is
``</s>``, so the end-of-sequence token ends an answer). Answer: the first match of
``(?<=answer is )(.*)(?=.)`` (the rest of that line less its last character; ``[invalid]`` when absent),
compared with the gold ``(A)``-``(D)`` ignoring case and punctuation (lm-eval's ``exact_match``). The
score is the mean over all questions (lm-eval's ``weight_by_size``).

Data: test questions from a local file (``data_path``: records with ``subject``, ``question``, ``choices``
(4 strings), ``answer`` (0-3 or A-D)) or the hub parquet of cais/mmlu (``all``, test split, 14042
questions). Exemplars: each subject's lm-eval task file at the pinned commit ``LM_EVAL_COMMIT`` (its
``description`` and ``fewshot_config.samples``), fetched and cached by the one fetcher; or, in a local
``.json`` data file ``{"data": [...], "exemplars": {subject: {"description": ..., "samples": [{"question",
"target"}, ...]}}}``, from that file.
"""
from __future__ import annotations

import json
import re
import string
from pathlib import Path

from magicpig_tasks.common import Sample, register
from magicpig_tasks.encoding import PromptEncoder
from magicpig_tasks.records import LmEvalTask

HUB_URL = "https://huggingface.co/datasets/cais/mmlu/resolve/main/all/test-00000-of-00001.parquet"
LM_EVAL_COMMIT = "7785577ceac539f7e25cf98bbe11264466326803"  # lm-evaluation-harness, 2024-10-15
EXEMPLAR_URL = ("https://raw.githubusercontent.com/EleutherAI/lm-evaluation-harness/{commit}/lm_eval/tasks/mmlu/"
                "flan_cot_fewshot/mmlu_{subject}.yaml")
NUM_FEWSHOT = 4
LETTERS = ("(A)", "(B)", "(C)", "(D)")
INVALID = "[invalid]"
_ANSWER = re.compile(r"(?<=answer is )(.*)(?=.)")
_PUNCT = str.maketrans("", "", string.punctuation)


def extract_answer(text: str) -> str:
    """lm-eval's regex filter + take_first: the first match, stripped, or ``[invalid]``."""
    found = _ANSWER.findall(text)
    return found[0].strip() if found else INVALID


def matches(extracted: str, target: str) -> bool:
    """lm-eval's ``exact_match`` with ignore_case and ignore_punctuation (no other normalisation)."""
    return extracted.lower().translate(_PUNCT) == target.lower().translate(_PUNCT)


def gold_letter(answer) -> str:
    if isinstance(answer, str) and answer.strip().upper() in "ABCD" and len(answer.strip()) == 1:
        return LETTERS["ABCD".index(answer.strip().upper())]
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < 4:
        return LETTERS[answer]
    raise ValueError(f"mmlu_cot: answer must be 0-3 or A-D, got {answer!r}")


def question_text(question: str, choices: list[str]) -> str:
    return f"Q: {question.strip()}\n" + " ".join(f"{LETTERS[i]} {c}" for i, c in enumerate(choices)) + \
        "\nA: Let's think step by step."


def fewshot_text(exemplars: dict) -> str:
    """The subject's description and its first NUM_FEWSHOT exemplars, as lm-eval joins them."""
    samples = exemplars.get("samples") or []
    if len(samples) < NUM_FEWSHOT:
        raise ValueError(f"mmlu_cot: a subject needs {NUM_FEWSHOT} exemplars, got {len(samples)}")
    shots = "".join(f"Q: {s['question'].strip()}\nA: {s['target']}\n\n" for s in samples[:NUM_FEWSHOT])
    return str(exemplars.get("description") or "") + shots


def lm_eval_exemplars(path: Path) -> dict:
    """``description`` and ``fewshot_config.samples`` of one lm-eval subject task file."""
    import yaml

    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    samples = (cfg.get("fewshot_config") or {}).get("samples") if isinstance(cfg, dict) else None
    if not isinstance(samples, list) or not all(isinstance(s, dict) and "question" in s and "target" in s
                                                for s in samples):
        raise ValueError(f"mmlu_cot: {path} has no fewshot_config.samples with question/target")
    return {"description": cfg.get("description", ""), "samples": samples}


@register
class MMLUCoT(LmEvalTask):
    names = ("mmlu_cot",)
    metric = "exact_match (lm-eval mmlu_flan_cot_fewshot, get-answer filter)"
    source_url = HUB_URL

    def __init__(self, name: str | None = None, settings: dict | None = None, data_path: str | None = None):
        super().__init__(name, settings, data_path)
        self._exemplars: dict[str, dict] = {}

    def settings(self) -> dict:
        return {**super().settings(), "num_fewshot": NUM_FEWSHOT,
                "exemplars": "data file" if self._file_exemplars() else f"lm-eval {LM_EVAL_COMMIT[:10]}"}

    def _file_exemplars(self) -> dict | None:
        if not self.data_path or Path(self.data_path).suffix != ".json":
            return None
        data = json.loads(Path(self.data_path).read_text(encoding="utf-8"))
        return data.get("exemplars") if isinstance(data, dict) else None

    def check_record(self, index: int, record: dict) -> None:
        for key in ("subject", "question", "choices", "answer"):
            if key not in record:
                raise ValueError(f"mmlu_cot: record {index} needs field {key!r}")
        if not isinstance(record["choices"], list) or len(record["choices"]) != 4:
            raise ValueError(f"mmlu_cot: record {index} needs 4 choices, got {record['choices']!r:.80}")
        for key in ("subject", "question"):  # the prompt is built from them (choices: formatted as text)
            if not isinstance(record[key], str):
                raise ValueError(f"mmlu_cot: record {index}: field {key!r} must be a string, got "
                                 f"{type(record[key]).__name__}")
        gold_letter(record["answer"])

    def exemplars(self, subject: str) -> dict:
        if subject not in self._exemplars:
            local = self._file_exemplars()
            if local is not None:
                if subject not in local:
                    raise ValueError(f"mmlu_cot: {self.data_path} has no exemplars for subject {subject!r}")
                self._exemplars[subject] = local[subject]
            else:
                from magicpig_tasks.download import fetch

                url = EXEMPLAR_URL.format(commit=LM_EVAL_COMMIT, subject=subject)
                self._exemplars[subject] = lm_eval_exemplars(fetch(url, None, f"{self.name} exemplars"))
        return self._exemplars[subject]

    def sample(self, enc: PromptEncoder, row: dict, index: int, length: int) -> Sample:
        ctx, q = enc.encode(fewshot_text(self.exemplars(row["subject"])), question_text(row["question"], row["choices"]))
        return Sample(id=f"mmlu_cot/{index}", context_ids=ctx, question_ids=q, references=[gold_letter(row["answer"])],
                      max_new_tokens=self.max_new_tokens, stop=[], meta={"index": index, "subject": row["subject"]})

    def score(self, prediction: str, sample: Sample) -> float:
        return 100.0 * matches(extract_answer(prediction), sample.references[0])
