"""The task settings: the options that change a task's prompts, given to every task as one dict.

``task_settings(given)`` is the one place where their defaults are filled in and their values checked; each
task reads the ones it uses (``Task.configure``) and records them in ``describe()``. ``magicpig eval`` makes
one flag per setting from ``SETTINGS`` (a string setting takes one of its ``choices``, a boolean one is a
switch that turns it on).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

# Prompt templates a task can wrap its text in (``chat_template``):
# * tokenizer: the tokenizer's own chat template (for Llama-3.1 a system block with dates), the default;
# * meta-chat-3: the original MagicPIG's RULER template for Llama-3.1 (its ``evaluations/RULER/data/
#   template.py``), written out in ``magicpig_tasks.common.META_CHAT_3``;
# * none: the plain text (tokenized with the tokenizer's special tokens).
CHAT_TEMPLATES = ("tokenizer", "meta-chat-3", "none")


@dataclass(frozen=True)
class TaskSetting:
    """One task setting: its ``magicpig eval`` flag, default and help; ``choices`` for a string setting."""

    option: str
    default: str | bool
    help: str
    choices: tuple[str, ...] = ()


SETTINGS: dict[str, TaskSetting] = {
    "chat_template": TaskSetting(
        "--chat-template", "tokenizer",
        "prompt template of the RULER and infini_igsm tasks and of the LongBench tasks whose reference prompt "
        "takes one (qasper, passage_retrieval_en): tokenizer (the tokenizer's own chat template), meta-chat-3 "
        "(the original MagicPIG's Llama-3 template, no system block), none (plain text); GSM8K, CoQA, MMLU-CoT "
        "and the other LongBench tasks take none", CHAT_TEMPLATES),
    "gsm8k_add_bos": TaskSetting(
        "--gsm8k-add-bos", False,
        "start GSM8K prompts with the tokenizer's BOS token (default: none, as lm-eval 0.4 of the paper's era)"),
}


def check_chat_template(value: str) -> str:
    """``value`` if it names a prompt template, else a ValueError naming the field and the choices."""
    if value not in CHAT_TEMPLATES:
        raise ValueError(f"chat_template must be one of {', '.join(CHAT_TEMPLATES)}, got {value!r}")
    return value


def task_settings(given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every task setting: the ``given`` values, checked, and the defaults of the others. ValueError naming
    the setting for an unknown name or a bad value."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise ValueError(f"task settings: unknown {', '.join(map(repr, unknown))}; known: {', '.join(SETTINGS)}")
    out = {}
    for name, setting in SETTINGS.items():
        value = given.get(name, setting.default)
        if setting.choices and value not in setting.choices:
            raise ValueError(f"{name} must be one of {', '.join(setting.choices)}, got {value!r}")
        if isinstance(setting.default, bool) and not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        out[name] = value
    return out
