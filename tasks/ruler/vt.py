"""RULER variable tracking (vt): one chain of 4 hops of variable assignments hidden in repeated noise.

Follows current NVIDIA/RULER (``scripts/data/synthetic/variable_tracking.py`` and the ``variable_tracking``
entry of ``scripts/data/synthetic/constants.py`` at commit c3f5e3b, July 2026; the vt code last changed in
9f1c84d, June 2025):

* a chain is ``VAR A = 12345``, ``VAR B = VAR A ``, ... (5 variables of five random capital letters; the
  copies keep RULER's trailing space); its statements go at distinct, increasing positions among the noise
  lines, at least one noise line between two statements; all lines are joined with single newlines;
* one solved example goes first: its own chain (three-letter names, its own value) in as many noise lines
  as fit in 500 tokens of the model's tokenizer (RULER sizes it with ``max_seq_length=500``), followed by
  its answer prefix, two spaces and the five names, a newline, then a newline before the task itself.

The original MagicPIG fork lays the prompt out differently (everything joined with spaces). The answer
prefix uses RULER's corrected spelling "assigned" (the fork has "assgined").
"""
from __future__ import annotations

import random
import string

from magicpig_tasks.common import Draft, register
from magicpig_tasks.encoding import fit_size
from magicpig_tasks.ruler import haystack as hs
from magicpig_tasks.ruler.base import RulerTask

TEMPLATE = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
            "{context}\nQuestion: Find all variables that are assigned the value {query} in the text above.")
ANSWER_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} "
                 "variables are assigned the value {query}, they are: ")
EXAMPLE_TOKENS = 500  # RULER's size of the solved example (its max_seq_length for it)


def _var_names(rng: random.Random, count: int, avoid: set[str], letters: int = 5) -> list[str]:
    out: list[str] = []
    while len(out) < count:
        v = "".join(rng.choices(string.ascii_uppercase, k=letters))
        if v not in avoid:
            avoid.add(v)
            out.append(v)
    return out


def _chain(rng: random.Random, hops: int, avoid: set[str], letters: int = 5) -> tuple[list[str], list[str], str]:
    names = _var_names(rng, hops + 1, avoid, letters)
    value = str(rng.randint(10000, 99999))
    stmts = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]} " for j in range(hops)]
    return stmts, names, value


def noise_positions(fracs: list[float], noise_count: int) -> list[int]:
    """Distinct increasing noise-line indices in [0, noise_count) for the sorted fractions ``fracs``
    (RULER samples them without replacement); needs noise_count >= len(fracs)."""
    out: list[int] = []
    for j, f in enumerate(fracs):
        p = max(int(f * noise_count), out[-1] + 1 if out else 0)
        out.append(min(p, noise_count - (len(fracs) - j)))
    return out


def _context(stmts: list[str], fracs: list[float], noise_count: int) -> str:
    """Noise lines with statement j inserted before noise line ``position_j`` (RULER: index p_j + j)."""
    lines = [hs.NOISE] * noise_count
    for j, (stmt, p) in enumerate(zip(stmts, noise_positions(fracs, noise_count))):
        lines.insert(p + j, stmt)
    return "\n".join(lines).replace(". \n", ".\n")


@register
class VariableTracking(RulerTask):
    names = ("ruler/vt",)
    max_new_tokens = 30
    num_hops = 4

    def example(self, stmts: list[str], names: list[str], value: str, fracs: list[float], tokenizer) -> str:
        """The solved example, its noise sized to EXAMPLE_TOKENS tokens of ``tokenizer`` (question and prefix
        included, no special tokens), ending in a newline."""
        prefix = ANSWER_PREFIX.format(num_v=self.num_hops + 1, query=value)

        def text(n: int) -> str:
            return TEMPLATE.format(context=_context(stmts, fracs, n), query=value) + prefix

        def n_tokens(n: int) -> int:
            return len(tokenizer(text(n), add_special_tokens=False).input_ids)

        n = fit_size(n_tokens, EXAMPLE_TOKENS, guess=15, lo=self.num_hops + 1)
        return text(n) + " " + " ".join(names) + "\n"

    def make(self, rng: random.Random, length: int, tokenizer) -> Draft:
        taken: set[str] = set()
        ex_stmts, ex_names, ex_value = _chain(rng, self.num_hops, taken, letters=3)
        ex_fracs = sorted(rng.random() for _ in ex_stmts)
        stmts, names, value = _chain(rng, self.num_hops, taken)
        fracs = sorted(rng.random() for _ in stmts)
        example = self.example(ex_stmts, ex_names, ex_value, ex_fracs, tokenizer)
        head, tail = TEMPLATE.split("{context}")
        tail = tail.format(query=value)
        prefix = ANSWER_PREFIX.format(num_v=self.num_hops + 1, query=value)

        def render(s: int) -> tuple[str, str, str]:
            return example + "\n" + head + _context(stmts, fracs, s), tail, prefix

        return Draft(render, names, 45.0, {"value": value, "chain": stmts, "example_value": ex_value},
                     min_size=self.num_hops + 1)
