"""GSM8K with 8-shot chain-of-thought (lm-eval ``gsm8k_cot``): "Q: ... A: ..." exemplars separated by blank
lines, greedy generation stopped at "Q:", "</s>", "<|im_end|>", scored by strict and flexible extraction
(the task score is strict-match; both are recorded).

No chat template and, by default, no BOS token (``add_bos=False``): lm-evaluation-harness of the paper's
era (0.4.x) encodes with ``add_special_tokens=False`` unless its ``add_bos_token`` model argument is set;
``add_bos=True`` lets the tokenizer add its special tokens as that argument does. The paper runs MagicPIG
here with a local window of 24 tokens (the paper's lm-eval setting, Sec. 5 / Table 1): ``method_overrides`` asks the evaluator for
``local=24`` on magicpig specs that do not set it.
``length`` caps the prompt: a longer one is an error (the 8-shot prompt is ~900 tokens).
Data: a local ``.jsonl`` / ``.json`` / ``.parquet`` file with ``question`` and ``answer`` fields, or the
hub parquet mirror of openai/gsm8k (main, test).
"""
from __future__ import annotations


from magicpig_tasks.common import LmEvalTask, PromptEncoder, Sample, check_build_args, record_order
from magicpig_tasks.records import read_hub_parquet, read_records
from magicpig_tasks.gsm8k.exemplars import EXEMPLARS
from magicpig_tasks.gsm8k.extract import exact_match, flexible_answer, gold_answer, strict_answer

HUB_URL = "https://huggingface.co/datasets/openai/gsm8k/resolve/main/main/test-00000-of-00001.parquet"
STOP = ["Q:", "</s>", "<|im_end|>"]


def fewshot_prefix() -> str:
    return "".join(f"Q: {q}\nA: {a}\n\n" for q, a in EXEMPLARS)


class GSM8KCoT(LmEvalTask):
    name = "gsm8k"
    metric = "exact_match (strict; flexible recorded)"

    def records(self) -> list[dict]:
        if self._records is None:
            rows = (read_records(self.data_path, self.name) if self.data_path
                    else read_hub_parquet(HUB_URL, self.name))
            for i, r in enumerate(rows):
                if "question" not in r or "answer" not in r:
                    raise ValueError(f"gsm8k: record {i} needs fields 'question' and 'answer'")
            self._records = rows
        return self._records

    def build(self, tokenizer, length: int, count: int, seed: int = 0) -> list[Sample]:
        check_build_args(self.name, length, count)
        rows = self.records()
        order = record_order(len(rows), seed)
        enc = PromptEncoder(tokenizer, "none", add_bos=self.add_bos)
        out = []
        for j in order[:count]:
            row = rows[j]
            ctx, q = enc.encode(fewshot_prefix(), f"Q: {row['question']}\nA:")
            if len(ctx) + len(q) > length:
                raise ValueError(f"gsm8k: prompt of record {j} has {len(ctx) + len(q)} tokens > length {length}")
            out.append(Sample(id=f"gsm8k/{j}", context_ids=ctx, question_ids=q,
                              references=[gold_answer(row["answer"])], max_new_tokens=self.max_new_tokens,
                              stop=list(STOP), meta={"index": j}))
        return out

    def score(self, prediction: str, sample: Sample) -> float:
        return 100.0 * exact_match(strict_answer(prediction), sample.references[0])

    def score_flexible(self, prediction: str, sample: Sample) -> float:
        return 100.0 * exact_match(flexible_answer(prediction), sample.references[0])

    def extra_scores(self, prediction: str, sample: Sample) -> dict[str, float]:
        return {"strict": self.score(prediction, sample), "flexible": self.score_flexible(prediction, sample)}
