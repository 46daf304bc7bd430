"""The eight needle-in-a-haystack tasks of RULER.

A needle is the sentence "One of the special magic {values} for {key} is: {value}."; the model is asked
for the values of one or more queried keys. Settings per task (haystack, key kind, value kind, number of
keys / values per key / queried keys) follow the reference configuration:

=================  ========  =====  =======  ==  ==  ==
task               haystack  keys   values   k   v   q
=================  ========  =====  =======  ==  ==  ==
niah_single_1      repeat    words  numbers  1   1   1
niah_single_2      essay     words  numbers  1   1   1
niah_single_3      essay     words  uuids    1   1   1
niah_multikey_1    essay     words  numbers  4   1   1
niah_multikey_2    needle    words  numbers  1   1   1
niah_multikey_3    needle    uuids  uuids    1   1   1
niah_multivalue    essay     words  numbers  1   4   1
niah_multiquery    essay     words  numbers  4   1   4
=================  ========  =====  =======  ==  ==  ==

"repeat" is the noise paragraph repeated (one paragraph per line), "essay" the Paul Graham essays, "needle"
a haystack made only of distractor needles (other keys with other values, one per line). In the essay,
needles go between sentences at depths drawn from 40 evenly spaced depths (0-100%); in the line haystacks
at uniformly random line positions. As in the reference, the needle sentences keep the plural value kind
("numbers") even when the question is worded for a single answer.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from magicpig_tasks.common import Draft, register
from magicpig_tasks.ruler import haystack as hs
from magicpig_tasks.ruler.base import RulerTask

TEMPLATE = ("Some special magic {kind} are hidden within the following text. Make sure to memorize it. "
            "I will quiz you about the {kind} afterwards.\n{context}\n"
            "What are all the special magic {kind} for {query} mentioned in the provided text?")
ANSWER_PREFIX = " The special magic {kind} for {query} mentioned in the provided text are"
NEEDLE = "One of the special magic {kind} for {key} is: {value}."


def singular(text: str) -> str:
    """The reference's wording for a single expected answer."""
    return (text.replace("Some", "A").replace("are all", "is").replace("are", "is")
            .replace("answers", "answer"))


@dataclass(frozen=True)
class NiahConfig:
    haystack: str  # repeat | essay | needle
    key_kind: str
    value_kind: str
    num_keys: int = 1
    num_values: int = 1
    num_queries: int = 1


CONFIGS = {
    "niah_single_1": NiahConfig("repeat", "words", "numbers"),
    "niah_single_2": NiahConfig("essay", "words", "numbers"),
    "niah_single_3": NiahConfig("essay", "words", "uuids"),
    "niah_multikey_1": NiahConfig("essay", "words", "numbers", num_keys=4),
    "niah_multikey_2": NiahConfig("needle", "words", "numbers"),
    "niah_multikey_3": NiahConfig("needle", "uuids", "uuids"),
    "niah_multivalue": NiahConfig("essay", "words", "numbers", num_values=4),
    "niah_multiquery": NiahConfig("essay", "words", "numbers", num_keys=4, num_queries=4),
}

# haystack units per 1000 tokens (a starting guess for the size search)
_PER_1K = {"repeat": 42, "essay": 720, "needle": 40}


@register
class NiahTask(RulerTask):
    names = tuple(f"ruler/{short}" for short in CONFIGS)

    def make(self, rng: random.Random, length: int, tokenizer) -> Draft:
        cfg = CONFIGS[self.name.removeprefix("ruler/")]
        plural = kind = cfg.value_kind
        one = cfg.num_queries * cfg.num_values == 1
        template, prefix = TEMPLATE, ANSWER_PREFIX
        if one:
            template, prefix, kind = singular(template), singular(prefix), kind[:-1]
        keys = hs.distinct(cfg.key_kind, cfg.num_keys, rng)
        values = [hs.distinct(cfg.value_kind, cfg.num_values, rng) for _ in keys]
        needles = [NEEDLE.format(kind=plural, key=k, value=v) for k, vs in zip(keys, values) for v in vs]
        rng.shuffle(needles)
        queried = rng.sample(range(len(keys)), cfg.num_queries)
        answers = [v for i in queried for v in values[i]]
        qkeys = [keys[i] for i in queried]
        query = qkeys[0] if len(qkeys) == 1 else ", ".join(qkeys[:-1]) + ", and " + qkeys[-1]
        meta = {"keys": keys, "queried": qkeys}

        if cfg.haystack in ("needle", "repeat"):
            taken = set(keys) | {v for vs in values for v in vs}
            dist_rng = random.Random(rng.getrandbits(64))
            pool: list[str] = []
            fracs = [rng.random() for _ in needles]
            meta["depths"] = [round(100 * f, 1) for f in fracs]

            def haystack_lines(s: int) -> list[str]:
                if cfg.haystack == "repeat":
                    return [hs.NOISE] * s
                while len(pool) < s:
                    k = hs.distinct(cfg.key_kind, 1, dist_rng, taken)[0]
                    v = hs.distinct(cfg.value_kind, 1, dist_rng, taken)[0]
                    taken.update((k, v))
                    pool.append(NEEDLE.format(kind=plural, key=k, value=v))
                return pool[:s]

            def context(s: int) -> str:
                lines = list(haystack_lines(s))
                for needle, f in sorted(zip(needles, fracs), key=lambda t: -t[1]):
                    lines.insert(int(f * len(lines) + 0.5), needle)
                return "\n".join(lines)
        else:
            depths = sorted(rng.sample(hs.DEPTHS, len(needles)))
            meta["depths"] = depths

            def context(s: int) -> str:
                return " ".join(hs.insert_at_depths(hs.split_sentences(hs.essay_text(s)), needles, depths))

        head, tail = template.split("{context}")
        head = head.format(kind=kind)
        tail = tail.format(kind=kind, query=query)
        ans = prefix.format(kind=kind, query=query)

        def render(s: int) -> tuple[str, str, str]:
            return head + context(s), tail, ans

        return Draft(render, answers, _PER_1K[cfg.haystack], meta)
