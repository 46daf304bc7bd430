"""Prompt text to token ids: the prompt templates (``chat_template``), the split of a prompt into its
context and question parts, and ``fit_size``, the search for the largest material that fits a token budget.

Each sample carries its prompt as two token-id lists, ``context_ids`` and ``question_ids``, whose
concatenation is the full prompt. The two parts are tokenized separately (split at a character offset of
the rendered prompt), so setup A (prefill both) and setup B (prefill the context, decode the question) see
exactly the same token sequence.
"""
from __future__ import annotations

from typing import Callable

from magicpig_tasks.settings import check_chat_template

# The original MagicPIG's RULER template for Llama-3.1 (its ``evaluations/RULER/data/template.py``), tokenized
# with the tokenizer's special tokens (BOS) as its Hugging Face wrapper did. Its first ``<`` is missing in the
# original; kept, so the text is the same.
META_CHAT_3 = ("|begin_of_text|><|start_header_id|>user<|end_header_id|> {body} <|eot_id|>\n"
               "<|start_header_id|>assistant<|end_header_id|>")


class PromptEncoder:
    """Render (context text, question text) into token ids inside a prompt template.

    ``template`` (one of ``magicpig_tasks.settings.CHAT_TEMPLATES``): the body ``context + question`` becomes
    one user message of the tokenizer's chat template with its generation prompt (``tokenizer``; plain text
    when the tokenizer has none), is put into META_CHAT_3 (``meta-chat-3``) or stays plain (``none``);
    ``answer_prefix`` goes after it (as RULER does). The rendered string is cut where the question starts and
    both halves are tokenized separately, special-token text (``<|im_start|>`` ...) parsed as special tokens.
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
