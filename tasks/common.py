"""What every benchmark task shares: the sample type, the task interface, prompt encoding and sizing.

A task turns (tokenizer, target length, sample count, seed) into ``Sample`` objects and scores a
generated string against a sample's references. Each sample carries its prompt as two token-id lists,
``context_ids`` and ``question_ids``, whose concatenation is the full prompt:

* setup A (the paper's): prefill ``prompt_ids`` = context + question, then decode the answer;
* setup B: prefill only ``context_ids``, then feed ``question_ids`` through the decode path.

The two parts are tokenized separately (split at a character offset of the rendered prompt), so both
setups see exactly the same token sequence.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence


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

    Subclasses set ``name`` (e.g. ``ruler/cwe``), ``metric`` (a short label), ``max_new_tokens`` and
    implement ``build`` and ``score``. ``method_overrides`` maps a method name to field values that the
    evaluator applies when the user's spec does not set that field (GSM8K: ``{"magicpig": {"local": 24}}``).
    ``sized``: whether ``length`` sets the prompt size (RULER) or only caps it (LongBench, GSM8K).
    """

    name: ClassVar[str] = ""
    metric: ClassVar[str] = ""
    max_new_tokens: ClassVar[int] = 32
    sized: ClassVar[bool] = True
    method_overrides: ClassVar[dict[str, dict[str, Any]]] = {}

    def build(self, tokenizer, length: int, count: int, seed: int = 0) -> list[Sample]:
        """``count`` samples sized for ``length`` tokens; deterministic in (task, length, index, seed)."""
        raise NotImplementedError

    def score(self, prediction: str, sample: Sample) -> float:
        """Score of one prediction in [0, 100]."""
        raise NotImplementedError

    def aggregate(self, scores: Sequence[float]) -> float:
        """Task score from per-sample scores (mean, in [0, 100]); NaN-free: 0 samples -> 0.0."""
        return float(sum(scores) / len(scores)) if scores else 0.0

    def settings(self) -> dict[str, Any]:
        """The task's prompt settings (chat template, BOS ...) that change its samples; in ``describe``."""
        return {}

    def describe(self) -> dict[str, Any]:
        """What identifies the task's prompts and scoring (recorded in metrics.json, part of the resume key)."""
        return {"task": self.name, "metric": self.metric, "max_new_tokens": self.max_new_tokens,
                "method_overrides": self.method_overrides, **self.settings()}


class LmEvalTask(Task):
    """A data-backed task of the paper's Table 1, run as lm-evaluation-harness 0.4 runs it: a plain prompt (no
    chat template), a BOS token only when asked, a 256-token answer and MagicPIG's 24-token local window. The
    records come from ``data_path`` (``--data TASK=PATH``) or the hub, read once (``self._records``)."""

    max_new_tokens: ClassVar[int] = 256
    sized: ClassVar[bool] = False
    method_overrides = {"magicpig": {"local": 24}}

    def __init__(self, data_path: str | None = None, add_bos: bool = False):
        if not isinstance(add_bos, bool):
            raise ValueError(f"{self.name}: add_bos must be true or false, got {add_bos!r}")
        self.data_path = data_path
        self.add_bos = add_bos
        self._records: list[dict] | None = None

    def settings(self) -> dict[str, Any]:
        return {"chat_template": "none", "add_bos": self.add_bos}


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


# Prompt templates a task can wrap its text in (``chat_template`` task setting):
# * tokenizer: the tokenizer's own chat template (for Llama-3.1 a system block with dates), today's default;
# * meta-chat-3: the original MagicPIG's RULER template for Llama-3.1 (its ``evaluations/RULER/data/
#   template.py``), written out below, tokenized with the tokenizer's special tokens (BOS) as its
#   Hugging Face wrapper did. Its first ``<`` is missing in the original; kept, so the text is the same;
# * none: the plain text (tokenized with the tokenizer's special tokens).
CHAT_TEMPLATES = ("tokenizer", "meta-chat-3", "none")
META_CHAT_3 = ("|begin_of_text|><|start_header_id|>user<|end_header_id|> {body} <|eot_id|>\n"
               "<|start_header_id|>assistant<|end_header_id|>")


def check_chat_template(value: str) -> str:
    """``value`` if it names a prompt template, else a ValueError naming the field and the choices."""
    if value not in CHAT_TEMPLATES:
        raise ValueError(f"chat_template must be one of {', '.join(CHAT_TEMPLATES)}, got {value!r}")
    return value


class PromptEncoder:
    """Render (context text, question text) into token ids inside a prompt template.

    ``template`` (one of CHAT_TEMPLATES): the body ``context + question`` becomes one user message of the
    tokenizer's chat template with its generation prompt (``tokenizer``; plain text when the tokenizer has
    none), is put into META_CHAT_3 (``meta-chat-3``) or stays plain (``none``); ``answer_prefix`` goes after
    it (as RULER does). The rendered string is cut where the question starts and both halves are tokenized
    separately, special-token text (``<|im_start|>`` ...) parsed as special tokens.
    ``add_bos``: whether the tokenizer adds its special tokens (BOS) in front; default: not with the
    tokenizer's chat template (it writes BOS itself), otherwise yes.
    """

    def __init__(self, tokenizer, template: str = "tokenizer", add_bos: bool | None = None):
        self.tokenizer = tokenizer
        self.template = check_chat_template(template)
        if template == "tokenizer" and getattr(tokenizer, "chat_template", None) is None:
            self.template = "none"
        self.add_bos = (self.template != "tokenizer") if add_bos is None else bool(add_bos)

    def render(self, context: str, question: str, answer_prefix: str = "") -> tuple[str, str]:
        """The prompt string split into (context part, question part)."""
        body = context + question
        if self.template == "none":
            return context, question + answer_prefix
        if self.template == "meta-chat-3":
            full = META_CHAT_3.format(body=body)
        else:
            full = self.tokenizer.apply_chat_template([{"role": "user", "content": body}], tokenize=False,
                                                      add_generation_prompt=True)
        start = full.find(body)
        if start < 0:
            raise ValueError("chat template changed the message text; cannot split context and question")
        cut = start + len(context)
        return full[:cut], full[cut:] + answer_prefix

    def encode(self, context: str, question: str, answer_prefix: str = "") -> tuple[list[int], list[int]]:
        """(context_ids, question_ids) as python int lists."""
        ctx_text, q_text = self.render(context, question, answer_prefix)
        ctx = self.tokenizer(ctx_text, add_special_tokens=self.add_bos).input_ids
        q = self.tokenizer(q_text, add_special_tokens=False).input_ids
        return list(ctx), list(q)

    def count(self, context: str, question: str, answer_prefix: str = "") -> int:
        c, q = self.encode(context, question, answer_prefix)
        return len(c) + len(q)


def fit_size(n_tokens: Callable[[int], int], target: int, guess: int, lo: int = 0, hi: int | None = None) -> int:
    """The largest size s in [lo, hi] with ``n_tokens(s) <= target`` (``n_tokens`` non-decreasing in s).

    Starts from ``guess``, brackets by doubling / halving, then bisects: about log2 of the bracket
    width calls. Returns ``lo`` when even ``lo`` is too long (the caller checks and reports).
    """
    guess = max(lo, guess if hi is None else min(guess, hi))
    cache: dict[int, int] = {}

    def length(s: int) -> int:
        if s not in cache:
            cache[s] = n_tokens(s)
        return cache[s]

    if length(guess) <= target:
        good, step = guess, max(1, guess // 16)
        while True:
            nxt = good + step if hi is None else min(good + step, hi)
            if nxt == good or length(nxt) > target:
                bad = nxt if nxt != good else good + 1
                break
            good, step = nxt, step * 2
    else:
        bad, step = guess, max(1, guess // 16)
        while True:
            nxt = max(lo, bad - step)
            if length(nxt) <= target:
                good = nxt
                break
            if nxt == lo:
                return lo
            bad, step = nxt, step * 2
    while bad - good > 1:
        mid = (good + bad) // 2
        if length(mid) <= target:
            good = mid
        else:
            bad = mid
    return good
