"""LongBench (Bai et al., 2023): the six tasks of the paper's Table 2 (qasper, repobench-p, lcc,
passage_retrieval_en, trec, triviaqa) with the reference prompts, budgets, truncation and metrics.

``length`` caps the prompt: a longer raw prompt keeps its first and last ``length // 2`` tokens (middle
truncation), before the prompt template is applied (qasper, passage_retrieval_en only; the ``chat_template``
setting picks it; the other four tasks take none, as LongBench). Samples are the first ``count`` records in
dataset order (a seeded permutation when seed != 0).
Data: a local ``.jsonl`` / ``.json`` / ``.parquet`` file (``data_path``) or the hub parquet mirror.
"""
from __future__ import annotations

from magicpig_tasks.common import Sample, register
from magicpig_tasks.encoding import PromptEncoder
from magicpig_tasks.longbench.metrics import METRICS
from magicpig_tasks.longbench.prompts import SPECS, LongBenchSpec
from magicpig_tasks.records import RecordsTask

HUB_URL = "https://huggingface.co/datasets/THUDM/LongBench/resolve/refs%2Fconvert%2Fparquet/{task}/test/0000.parquet"


@register
class LongBenchTask(RecordsTask):
    names = tuple(f"longbench/{short}" for short in SPECS)
    groups = ("longbench",)
    truncates = True
    truncation_side = "middle"  # recorded in each prediction's provenance (magicpig.harness.provenance)

    @property
    def short(self) -> str:
        return self.name.removeprefix("longbench/")

    @property
    def spec(self) -> LongBenchSpec:
        return SPECS[self.short]

    def configure(self, settings: dict) -> None:
        # the template that runs: none for the tasks LongBench prompts without one
        self.chat_template = settings["chat_template"] if self.spec.chat else "none"

    @property
    def metric(self) -> str:  # type: ignore[override]
        return self.spec.metric

    @property
    def max_new_tokens(self) -> int:  # type: ignore[override]
        return self.spec.max_new_tokens

    @property
    def source_url(self) -> str:  # type: ignore[override]
        return HUB_URL.format(task=self.short)

    def check_record(self, index: int, record: dict) -> None:
        for key in ("context", "input", "answers"):
            if key not in record:
                raise ValueError(f"{self.name}: record {index} has no field {key!r}")
        if not isinstance(record["context"], str):  # the prompt is built around it (input and answers: str())
            raise ValueError(f"{self.name}: record {index}: field 'context' must be a string, got "
                             f"{type(record['context']).__name__}")

    def sample(self, enc: PromptEncoder, row: dict, index: int, length: int) -> Sample:
        head, tail = self.spec.template.split("{context}")
        context = head + row["context"]
        question = tail.replace("{input}", str(row["input"]))
        tok = enc.tokenizer
        ids = tok(context + question, add_special_tokens=False).input_ids
        truncated = len(ids) > length
        if truncated:
            half = length // 2
            text = tok.decode(ids[:half], skip_special_tokens=True) + tok.decode(ids[-half:], skip_special_tokens=True)
            if text.endswith(question):
                context, question = text[:len(text) - len(question)], question
            else:  # the question part itself was cut: everything counts as context
                context, question = text, ""
        ctx_ids, q_ids = enc.encode(context, question)
        answers = row["answers"] if isinstance(row["answers"], list) else [row["answers"]]
        return Sample(id=f"{self.name}/{row.get('_id', index)}", context_ids=ctx_ids, question_ids=q_ids,
                      references=[str(a) for a in answers], max_new_tokens=self.max_new_tokens, stop=[],
                      meta={"all_classes": row.get("all_classes") or [], "truncated": truncated,
                            "index": index, "length_field": row.get("length")})

    def score(self, prediction: str, sample: Sample) -> float:
        if self.spec.first_line:
            prediction = prediction.lstrip("\n").split("\n")[0]
        fn = METRICS[self.spec.metric]
        classes = sample.meta.get("all_classes") or []
        return 100.0 * max((fn(prediction, gt, all_classes=classes) for gt in sample.references), default=0.0)
