"""RULER variable tracking (vt): one chain of 4 hops of variable assignments hidden in repeated noise.

A chain is ``VAR A = 12345``, ``VAR B = VAR A``, ... (5 variables of five random capital letters) spread
over lines of noise; the model is asked for every variable holding the value. The prompt starts with one
short solved example (its own chain, three-letter names, 5 noise lines), as the reference does.
"""
from __future__ import annotations

import random
import string

from . import haystack as hs
from .base import Render, RulerTask

TEMPLATE = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
            "{context}\nQuestion: Find all variables that are assigned the value {query} in the text above.")
# "assgined" is the reference's spelling, kept so prompts match it.
ANSWER_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} "
                 "variables are assgined the value {query}, they are: ")


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


def _context(stmts: list[str], fracs: list[float], noise_count: int) -> str:
    lines = [hs.NOISE + "\n"] * noise_count  # the reference's noise line ends in a newline
    for j, (stmt, f) in enumerate(zip(stmts, fracs)):
        lines.insert(int(f * noise_count) + j, stmt)
    return "\n".join(lines).replace(". \n", ".\n")


class VariableTracking(RulerTask):
    name = "ruler/vt"
    max_new_tokens = 30
    num_chains = 1
    num_hops = 4
    example_noise = 5

    def make(self, rng: random.Random) -> tuple[Render, list[str], float, dict]:
        taken: set[str] = set()
        ex_stmts, ex_names, ex_value = _chain(rng, self.num_hops, taken, letters=3)
        ex_fracs = sorted(rng.random() for _ in ex_stmts)
        stmts, names, value = _chain(rng, self.num_hops, taken)
        fracs = sorted(rng.random() for _ in stmts)
        n_v = self.num_hops + 1
        example = (TEMPLATE.format(context=_context(ex_stmts, ex_fracs, self.example_noise), query=ex_value)
                   + ANSWER_PREFIX.format(num_v=n_v, query=ex_value) + " ".join(ex_names))
        head, tail = TEMPLATE.split("{context}")
        tail = tail.format(query=value)
        prefix = ANSWER_PREFIX.format(num_v=n_v, query=value)

        def render(s: int) -> tuple[str, str, str]:
            return example + "\n\n" + head + _context(stmts, fracs, s), tail, prefix

        return render, names, 45.0, {"value": value, "chain": stmts}
