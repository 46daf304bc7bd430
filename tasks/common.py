"""What every benchmark task shares: the sample type, the task interface and its registry, and the base of
the synthetic tasks (drawn from a seeded RNG and sized to a target length).

A task turns (tokenizer, target length, sample count, seed) into ``Sample`` objects and scores a generated
string against a sample's references. Each sample carries its prompt as ``context_ids`` + ``question_ids``:

* setup A (the paper's): prefill ``prompt_ids`` = context + question, then decode the answer;
* setup B: prefill only ``context_ids``, then feed ``question_ids`` through the decode path.

Task classes register with ``@register`` under the names in their ``names``; ``magicpig_tasks.registry``
builds them by name. The data-backed tasks derive from ``magicpig_tasks.records.RecordsTask``.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

from magicpig_tasks.encoding import PromptEncoder, fit_size
from magicpig_tasks.settings import task_settings


class TaskUnavailable(RuntimeError):
    """The task's data cannot be obtained here (e.g. no network and no local file); the message says why."""


@dataclass
class Sample:
    """One benchmark input.

    context_ids / question_ids: token ids (python ints); prompt_ids = context_ids + question_ids.
    references: the gold answers as the task's scorer expects them.
    max_new_tokens: the task's answer budget; stop: stop strings for generation.
    meta: task-specific extras (depths, classes, the raw question ...), JSON-serialisable.
    """

    id: str
    context_ids: list[int]
    question_ids: list[int]
    references: list[str]
    max_new_tokens: int
    stop: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_ids(self) -> list[int]:
        return list(self.context_ids) + list(self.question_ids)

    @property
    def n_tokens(self) -> int:
        return len(self.context_ids) + len(self.question_ids)


class Task:
    """Base class of a benchmark task.

    Subclasses set ``names`` (the names it is built by, e.g. ``("ruler/cwe",)``; one class may serve several),
    ``groups`` (the task groups that include it, e.g. ``("ruler",)``), ``metric`` (a short label) and
    ``max_new_tokens``, and implement ``build`` and ``score``. ``configure`` takes the task settings it reads
    (``magicpig_tasks.settings``; by default the prompt template, ``chat_template``) and ``settings`` reports
    them. ``method_overrides`` maps a method name to field values that the evaluator applies when the user's
    spec does not set that field (GSM8K: ``{"magicpig": {"local": 24}}``).
    """

    names: ClassVar[tuple[str, ...]] = ()
    groups: ClassVar[tuple[str, ...]] = ()
    metric: ClassVar[str] = ""
    max_new_tokens: ClassVar[int] = 32
    method_overrides: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, name: str | None = None, settings: Mapping[str, Any] | None = None):
        """``name``: one of ``names`` (may be left out when there is only one); ``settings``: task settings,
        the others take their defaults."""
        if name is None and len(self.names) == 1:
            name = self.names[0]
        if name not in self.names:
            raise ValueError(f"unknown task {name!r} for {type(self).__name__}; its names: {', '.join(self.names)}")
        self.name = name
        self.configure(task_settings(settings))

    def configure(self, settings: dict[str, Any]) -> None:
        """Take the settings this task reads from ``settings`` (every task setting, checked)."""
        self.chat_template = settings["chat_template"]

    def encoder(self, tokenizer) -> PromptEncoder:
        """What renders and tokenizes this task's prompts: its template, the tokenizer's BOS rule."""
        return PromptEncoder(tokenizer, self.chat_template)

    def build(self, tokenizer, length: int, count: int, seed: int = 0) -> list[Sample]:
        """``count`` samples sized for ``length`` tokens; deterministic in (task, length, index, seed)."""
        raise NotImplementedError

    def score(self, prediction: str, sample: Sample) -> float:
        """Score of one prediction in [0, 100]."""
        raise NotImplementedError

    def extra_scores(self, prediction: str, sample: Sample) -> dict[str, float]:
        """Further named scores of one prediction, recorded beside ``score`` (GSM8K: strict and flexible)."""
        return {}

    def aggregate(self, scores: Sequence[float]) -> float:
        """Task score from per-sample scores (mean, in [0, 100]); NaN-free: 0 samples -> 0.0."""
        return float(sum(scores) / len(scores)) if scores else 0.0

    def settings(self) -> dict[str, Any]:
        """The task's prompt settings (chat template, BOS ...) that change its samples; in ``describe``."""
        return {"chat_template": self.chat_template}

    def describe(self) -> dict[str, Any]:
        """What identifies the task's prompts and scoring (recorded in metrics.json, part of the resume key)."""
        return {"task": self.name, "metric": self.metric, "max_new_tokens": self.max_new_tokens,
                "method_overrides": self.method_overrides, **self.settings()}


TASKS: dict[str, type[Task]] = {}


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: make ``cls`` buildable under each of its ``names`` (``get_task``), in the groups of
    its ``groups``. A name already taken is refused."""
    if not cls.names:
        raise ValueError(f"{cls.__name__}: a task class needs names")
    taken = [n for n in cls.names if n in TASKS]
    if taken:
        raise ValueError(f"{cls.__name__}: task name(s) {', '.join(taken)} already registered")
    TASKS.update({name: cls for name in cls.names})
    return cls


# A rendering of one drawn sample at material size s: (context text, question text, answer prefix).
Render = Callable[[int], tuple[str, str, str]]


@dataclass
class Draft:
    """One drawn sample before sizing. ``render(s)``: the prompt with ``s`` units of material (haystack lines,
    words, documents ...), its token count non-decreasing in s; ``per_1k``: a rough s for 1000 tokens (where
    the size search starts); ``min_size`` / ``max_size``: the sizes its material allows (None: unbounded)."""

    render: Render
    references: Sequence[str]
    per_1k: float
    meta: dict[str, Any] = field(default_factory=dict)
    min_size: int = 0
    max_size: int | None = None


class SyntheticTask(Task):
    """A task whose samples are drawn, not read: ``make(rng, length, tokenizer)`` draws one ``Draft`` from the
    sample's own RNG (``sample_rng``) for a ``length``-token prompt, and ``build`` gives each its largest
    material size whose prompt, in the ``chat_template`` setting's template, fits in ``length`` tokens
    (answer prefix included; the answer budget comes on top), so prompts land just under the target."""

    def make(self, rng: random.Random, length: int, tokenizer) -> Draft:
        """One sample's material; ``tokenizer`` only for material measured in tokens (vt's solved example)."""
        raise NotImplementedError

    def build(self, tokenizer, length: int, count: int, seed: int = 0) -> list[Sample]:
        check_build_args(self.name, length, count)
        enc = self.encoder(tokenizer)
        return [self.fit(enc, length, self.make(sample_rng(self.name, length, i, seed), length, tokenizer),
                         f"{self.name}/{length}/{seed}/{i}") for i in range(count)]

    def fit(self, enc: PromptEncoder, length: int, draft: Draft, sample_id: str) -> Sample:
        """The sample of ``draft`` at its largest size that fits ``length`` tokens."""
        size = fit_size(lambda s: enc.count(*draft.render(s)), length,
                        guess=max(1, int(draft.per_1k * length / 1000)), lo=draft.min_size, hi=draft.max_size)
        ctx, q, prefix = draft.render(size)
        ctx_ids, q_ids = enc.encode(ctx, q, prefix)
        if len(ctx_ids) + len(q_ids) > length:
            raise ValueError(f"{self.name}: length {length} is too short for the task's template and needles "
                             f"({len(ctx_ids) + len(q_ids)} tokens with the smallest haystack)")
        meta = dict(draft.meta, haystack_size=size, answer_prefix=prefix)
        return Sample(id=sample_id, context_ids=ctx_ids, question_ids=q_ids, references=list(draft.references),
                      max_new_tokens=self.max_new_tokens, stop=[], meta=meta)


def sample_rng(task: str, length: int, index: int, seed: int) -> random.Random:
    """A private RNG per (task, length, sample index, seed): samples do not depend on how many are drawn."""
    key = f"{task}|{length}|{index}|{seed}".encode()
    return random.Random(zlib.crc32(key) ^ (seed * 0x9E3779B1 & 0xFFFFFFFF))


def record_order(n_records: int, seed: int) -> list[int]:
    """The order in which a dataset task takes its records: file order for seed 0 (the paper's runs take
    the first records), a seeded shuffle otherwise."""
    order = list(range(n_records))
    if seed:
        random.Random(seed).shuffle(order)
    return order


def check_build_args(task: str, length: int, count: int, minimum: int = 64) -> None:
    """Raise a clear ValueError for a bad length or count before any expensive work."""
    if not isinstance(length, int) or length < minimum:
        raise ValueError(f"{task}: length must be an int >= {minimum} tokens, got {length!r}")
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"{task}: samples must be an int >= 0, got {count!r}")
