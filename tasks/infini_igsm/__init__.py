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

from magicpig_tasks.common import Sample, register
from magicpig_tasks.encoding import PromptEncoder
from magicpig_tasks.records import RecordsTask

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


@register
class InfiniIGSM(RecordsTask):
    names = tuple(f"infini_igsm/{short}" for short in TASKS)
    groups = ("infini_igsm",)
    max_new_tokens = 1024
    metric = "accuracy (integer after 'Answer:')"

    def configure(self, settings: dict) -> None:
        super().configure(settings)
        self.set_name, self.ops = parse_task(self.name.removeprefix("infini_igsm/"))

    @property
    def source_url(self) -> str:  # type: ignore[override]
        size, kind = self.set_name.split("_")
        return HUB_URL.format(size=size, kind=kind, op=self.ops)

    def check_record(self, index: int, record: dict) -> None:
        for key in ("problem", "question", "solution"):
            if not isinstance(record.get(key), str):
                raise ValueError(f"{self.name}: record {index} needs a string field {key!r}")
        gold_answer(record["solution"])

    def load(self) -> list[dict]:
        """The records with this task's number of operations (a file may mix them: its ``op`` field)."""
        return [r for r in super().load() if "op" not in r or int(r["op"]) == self.ops]

    def sample(self, enc: PromptEncoder, row: dict, index: int, length: int) -> Sample:
        ctx, q = enc.encode(f"Problem: {row['problem']}", f" Question: {row['question']} Solution: ")
        return Sample(id=f"{self.name}/{index}", context_ids=ctx, question_ids=q,
                      references=[str(gold_answer(row["solution"]))], max_new_tokens=self.max_new_tokens,
                      stop=[], meta={"index": index, "ops": self.ops})

    def score(self, prediction: str, sample: Sample) -> float:
        pred = predicted_answer(prediction)
        return 100.0 * (pred is not None and str(pred) == sample.references[0])
