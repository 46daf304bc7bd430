"""LongBench (Bai et al., 2023): the six tasks of the paper's Table 2 (qasper, repobench-p, lcc,
passage_retrieval_en, trec, triviaqa) with the reference prompts, budgets, truncation and metrics.

``length`` caps the prompt: a longer raw prompt keeps its first and last ``length // 2`` tokens (middle
truncation), before the prompt template is applied (qasper, passage_retrieval_en only; ``chat_template``
picks it, see magicpig_tasks.common.CHAT_TEMPLATES; the other four tasks take none, as LongBench). Samples are the
first ``count`` records in dataset order (a seeded permutation when seed != 0).
Data: a local ``.jsonl`` / ``.json`` / ``.parquet`` file (``data_path``) or the hub parquet mirror.
"""
from __future__ import annotations


from magicpig_tasks.common import PromptEncoder, Sample, Task, check_build_args, record_order, check_chat_template
from magicpig_tasks.records import read_hub_parquet, read_records
from magicpig_tasks.longbench.metrics import METRICS
from magicpig_tasks.longbench.prompts import SPECS

TASKS = tuple(SPECS)
HUB_URL = "https://huggingface.co/datasets/THUDM/LongBench/resolve/refs%2Fconvert%2Fparquet/{task}/test/0000.parquet"


class LongBenchTask(Task):
    sized = False

    def __init__(self, short: str, data_path: str | None = None, chat_template: str = "tokenizer"):
        if short not in SPECS:
            raise ValueError(f"unknown LongBench task {short!r}; known: {', '.join(SPECS)}")
        self.short = short
        self.spec = SPECS[short]
        self.data_path = data_path
        check_chat_template(chat_template)
        # the template that runs: none for the tasks LongBench prompts without one
        self.chat_template = chat_template if self.spec.chat else "none"
        self._records: list[dict] | None = None

    def settings(self) -> dict:
        return {"chat_template": self.chat_template}

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"longbench/{self.short}"

    @property
    def metric(self) -> str:  # type: ignore[override]
        return self.spec.metric

    @property
    def max_new_tokens(self) -> int:  # type: ignore[override]
        return self.spec.max_new_tokens

    def records(self) -> list[dict]:
        if self._records is None:
            if self.data_path:
                rows = read_records(self.data_path, self.name)
            else:
                rows = read_hub_parquet(HUB_URL.format(task=self.short), self.name)
            for i, r in enumerate(rows):
                for key in ("context", "input", "answers"):
                    if key not in r:
                        raise ValueError(f"{self.name}: record {i} has no field {key!r}")
            self._records = rows
        return self._records

    def build(self, tokenizer, length: int, count: int, seed: int = 0) -> list[Sample]:
        check_build_args(self.name, length, count)
        rows = self.records()
        order = record_order(len(rows), seed)
        enc = PromptEncoder(tokenizer, self.chat_template)
        return [self.sample(enc, rows[j], j, length, seed) for j in order[:count]]

    def sample(self, enc: PromptEncoder, row: dict, index: int, length: int, seed: int) -> Sample:
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
