"""GSM8K with 8-shot chain-of-thought (lm-eval ``gsm8k_cot``): "Q: ... A: ..." exemplars separated by blank
lines, greedy generation stopped at "Q:", "</s>", "<|im_end|>", scored by strict and flexible extraction
(the task score is strict-match; both are recorded).

No chat template and, by default, no BOS token: lm-evaluation-harness of the paper's era (0.4.x) encodes
with ``add_special_tokens=False`` unless its ``add_bos_token`` model argument is set; the ``gsm8k_add_bos``
task setting (``magicpig eval --gsm8k-add-bos``) lets the tokenizer add its special tokens as that argument
does. The paper runs MagicPIG here with a local window of 24 tokens (the paper's lm-eval setting, Sec. 5 /
Table 1): ``method_overrides`` asks the evaluator for ``local=24`` on magicpig specs that do not set it.
``length`` caps the prompt: a longer one is an error (the 8-shot prompt is ~900 tokens).
Data: a local ``.jsonl`` / ``.json`` / ``.parquet`` file with ``question`` and ``answer`` fields, or the
hub parquet mirror of openai/gsm8k (main, test).
"""
from __future__ import annotations

from magicpig_tasks.common import Sample, register
from magicpig_tasks.encoding import PromptEncoder
from magicpig_tasks.gsm8k.exemplars import EXEMPLARS
from magicpig_tasks.gsm8k.extract import exact_match, flexible_answer, gold_answer, strict_answer
from magicpig_tasks.records import LmEvalTask

HUB_URL = "https://huggingface.co/datasets/openai/gsm8k/resolve/main/main/test-00000-of-00001.parquet"
STOP = ["Q:", "</s>", "<|im_end|>"]


def fewshot_prefix() -> str:
    return "".join(f"Q: {q}\nA: {a}\n\n" for q, a in EXEMPLARS)


@register
class GSM8KCoT(LmEvalTask):
    names = ("gsm8k",)
    metric = "exact_match (strict; flexible recorded)"
    source_url = HUB_URL

    def configure(self, settings: dict) -> None:
        super().configure(settings)
        self.add_bos = settings["gsm8k_add_bos"]

    def check_record(self, index: int, record: dict) -> None:
        where = f"gsm8k: {self.data_path or self.source_url}: record {index}"
        if "question" not in record or "answer" not in record:
            raise ValueError(f"{where} needs fields 'question' and 'answer'")
        for key in ("question", "answer"):
            if not isinstance(record[key], str) or not record[key].strip():
                raise ValueError(f"{where}: field {key!r} must be a non-empty string, got {record[key]!r:.80}")
        try:
            gold_answer(record["answer"])
        except ValueError as exc:
            raise ValueError(f"{where}: field 'answer': {exc}") from None

    def sample(self, enc: PromptEncoder, row: dict, index: int, length: int) -> Sample:
        ctx, q = enc.encode(fewshot_prefix(), f"Q: {row['question']}\nA:")
        return Sample(id=f"gsm8k/{index}", context_ids=ctx, question_ids=q, references=[gold_answer(row["answer"])],
                      max_new_tokens=self.max_new_tokens, stop=list(STOP), meta={"index": index})

    def score(self, prediction: str, sample: Sample) -> float:
        return 100.0 * exact_match(strict_answer(prediction), sample.references[0])

    def extra_scores(self, prediction: str, sample: Sample) -> dict[str, float]:
        return {"strict": self.score(prediction, sample),
                "flexible": 100.0 * exact_match(flexible_answer(prediction), sample.references[0])}
