"""Checks of a ``magicpig eval`` run that need its tasks or the model's config, made before any sample is
built or the model loaded: every data file reads as a non-empty list of records holding the samples asked
for, and every generated prompt (RULER) fits the model's context with its answer."""
from __future__ import annotations

from typing import Any


def check_task_data(cfg: Any, tasks: dict[str, Any]) -> None:
    """Read each task's local data file (``cfg.data``) now: an unreadable or empty file, or fewer records
    than ``cfg.samples``, raises ValueError naming the task and the file."""
    for name, task in tasks.items():
        path = cfg.data.get(name)
        if not path:
            continue
        count = len(task.records())  # a RecordsTask: raises for an unreadable or empty file, naming it
        if task.one_sample_per_record and isinstance(cfg.samples, int) and cfg.samples > count:
            raise ValueError(f"samples: {cfg.samples} asked for {name}, but its data file {path} holds "
                             f"{count} records; ask for at most {count}, or 'all'")


def model_context_length(cfg: Any, model: Any = None) -> int | None:
    """The model's trained context in tokens, from a loaded ``model`` or from its config file (no weights
    loaded); None when it cannot be read here (a hub id outside the local cache, a model that does not
    resolve: loading it reports that)."""
    from magicpig.models import max_context, model_context

    if model is not None:
        config = getattr(model, "config", None)
        return (max_context(config) or None) if config is not None else None
    try:
        return model_context(cfg.model)[0]
    except (ValueError, OSError):
        return None


def check_generated_lengths(cfg: Any, tasks: dict[str, Any], context: int | None) -> None:
    """A generated task's prompt is ``length`` tokens; with its answer it must fit ``context`` (unless
    ``cfg.allow_long_context``). Checked before any haystack is built."""
    if context is None or cfg.allow_long_context:
        return
    for name, task in tasks.items():
        if not name.startswith("ruler/"):
            continue  # LongBench / GSM8K lengths are caps; their prompts are checked when built
        budget = cfg.max_new_tokens or task.max_new_tokens
        for length in cfg.lengths:
            if length + budget > context:
                raise ValueError(f"length: {name} at {length} needs {length + budget} tokens (prompt + "
                                 f"{budget} answer tokens), over the model's context {context}; allowed: at "
                                 f"most {context - budget}, or pass --allow-long-context")
