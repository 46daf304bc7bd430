"""infini_igsm (Zhou, 2024): the long-context grade-school-math reasoning sets of the paper's Table 6
(Appendix D.3), ``4k_close`` and ``8k_close`` (hub datasets YangZhoumill/infini_igsm_{4k,8k}_noise_close),
each scored at 2, 4 and 5 operations. Task names: ``infini_igsm/<set>_op<N>``, e.g. ``infini_igsm/4k_close_op2``.

The paper gives no prompt or scoring details for these sets; this loader follows the public evaluation
script of the same author for its successor (GSM-Infinite): one user message ``Problem: <problem>
Question: <question> Solution: `` in the model's chat template, greedy generation, and the integer after
the first ``Answer: `` of the generation (case-insensitive, also ``\\boxed{N}``) compared with the
integer after ``Answer: `` in the record's ``solution``. Answer budget: 1024 new tokens (our choice: long
enough for the worked solutions of 5-operation problems).

Data: a local ``.jsonl`` / ``.json`` / ``.parquet`` file (``data_path``) whose records have ``problem``,
``question`` and ``solution`` (and, when the file mixes operation counts, ``op``: only records with the
task's count are used), or the hub's parquet conversion of the set's ``ops_<N>`` split (``HUB_URL``; the
split layout is the GSM-Infinite one and could not be checked here, where the hub is unreachable).
"""
from __future__ import annotations

import re

from magicpig_tasks.common import PromptEncoder, Sample, Task, check_build_args, check_chat_template, record_order
from magicpig_tasks.records import read_hub_parquet, read_records

SETS = ("4k_close", "8k_close")
OPS = (2, 4, 5)
TASKS = tuple(f"{s}_op{n}" for s in SETS for n in OPS)
HUB_URL = ("https://huggingface.co/datasets/YangZhoumill/infini_igsm_{size}_noise_{kind}/resolve/"
           "refs%2Fconvert%2Fparquet/default/ops_{op}/0000.parquet")
INVALID = None
_GOLD = re.compile(r"Answer:\s*(-?\d+)")
_PRED = (re.compile(r"answer:\s*\**\s*(-?\d+)", re.IGNORECASE), re.compile(r"\\boxed\{\s*(-?\d+)\s*\}"))


def parse_task(short: str) -> tuple[str, int]:
    """'4k_close_op2' -> ('4k_close', 2); ValueError naming the known tasks otherwise."""
    m = re.fullmatch(r"(\w+?)_op(\d+)", short)
    if not m or m.group(1) not in SETS or int(m.group(2)) not in OPS:
        raise ValueError(f"unknown infini_igsm task {short!r}; known: {', '.join(TASKS)}")
    return m.group(1), int(m.group(2))


def gold_answer(solution: str) -> int:
    m = _GOLD.search(solution)
    if not m:
        raise ValueError(f"infini_igsm: solution has no 'Answer: N': {solution[-80:]!r}")
    return int(m.group(1))


def predicted_answer(text: str) -> int | None:
    """The integer after the first 'answer:' (any case, bold marks allowed), else in the first \\boxed{};
    None when neither is there."""
    for pattern in _PRED:
        m = pattern.search(text)
        if m:
            return int(m.group(1))
    return INVALID


class InfiniIGSM(Task):
    sized = False
    max_new_tokens = 1024
    metric = "accuracy (integer after 'Answer:')"

    def __init__(self, short: str, data_path: str | None = None, chat_template: str = "tokenizer"):
        self.short = short
        self.set_name, self.ops = parse_task(short)
        self.data_path = data_path
        self.chat_template = check_chat_template(chat_template)
        self._records: list[dict] | None = None

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"infini_igsm/{self.short}"

    def settings(self) -> dict:
        return {"chat_template": self.chat_template}

    def records(self) -> list[dict]:
        if self._records is None:
            if self.data_path:
                rows = read_records(self.data_path, self.name)
            else:
                size, kind = self.set_name.split("_")
                rows = read_hub_parquet(HUB_URL.format(size=size, kind=kind, op=self.ops), self.name)
            for i, r in enumerate(rows):
                for key in ("problem", "question", "solution"):
                    if not isinstance(r.get(key), str):
                        raise ValueError(f"{self.name}: record {i} needs a string field {key!r}")
                gold_answer(r["solution"])
            self._records = [r for r in rows if "op" not in r or int(r["op"]) == self.ops]
        return self._records

    def build(self, tokenizer, length: int, count: int, seed: int = 0) -> list[Sample]:
        check_build_args(self.name, length, count)
        rows = self.records()
        enc = PromptEncoder(tokenizer, self.chat_template)
        out = []
        for j in record_order(len(rows), seed)[:count]:
            row = rows[j]
            ctx, q = enc.encode(f"Problem: {row['problem']}", f" Question: {row['question']} Solution: ")
            if len(ctx) + len(q) > length:
                raise ValueError(f"{self.name}: prompt of record {j} has {len(ctx) + len(q)} tokens > length {length}")
            out.append(Sample(id=f"{self.name}/{j}", context_ids=ctx, question_ids=q,
                              references=[str(gold_answer(row["solution"]))], max_new_tokens=self.max_new_tokens,
                              stop=[], meta={"index": j, "ops": self.ops}))
        return out

    def score(self, prediction: str, sample: Sample) -> float:
        pred = predicted_answer(prediction)
        return 100.0 * (pred is not None and str(pred) == sample.references[0])
