"""RULER common word extraction (cwe): a numbered list of words where 10 common words appear 30 times
each and every other word 3 times; the model names the 10 common ones.

Reference settings: freq_cw 30, freq_ucw 3, num_cw 10; one solved example (40 words, frequencies 10 and
3) goes first. Below 4096 tokens the reference lowers the frequencies to 6 and 1 (example: 20 words,
3 and 1), kept here. Words come from the wonderwords adjective, noun and verb lists (~8.5K words), which
caps the list near 100K tokens at the reference frequencies.
"""
from __future__ import annotations

import random

from magicpig_tasks.common import Draft, register
from magicpig_tasks.ruler import haystack as hs
from magicpig_tasks.ruler.base import RulerTask

TEMPLATE = ("Below is a numbered list of words. In these words, some appear more often than others. "
            "Memorize the ones that appear most often.\n{context}\n"
            "Question: What are the 10 most common words in the above list?")
ANSWER_PREFIX = " Answer: The top 10 words that appear most often in the list are:"


def numbered(words: list[str]) -> str:
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))


def word_list(common: list[str], uncommon: list[str], freq_c: int, freq_u: int, seed: int) -> list[str]:
    words = common * freq_c + uncommon * freq_u
    random.Random(seed).shuffle(words)
    return words


def vocabulary() -> list[str]:
    adjs, nouns, verbs = hs.word_lists()
    return sorted(set(adjs) | set(nouns) | set(verbs))


@register
class CommonWords(RulerTask):
    names = ("ruler/cwe",)
    max_new_tokens = 120
    freq_cw = 30
    freq_ucw = 3
    num_cw = 10

    def make(self, rng: random.Random, length: int, tokenizer) -> Draft:
        vocab = vocabulary()
        order = rng.sample(vocab, len(vocab))
        ex_words, words = order[:40], order[40:]
        small = length < 4096
        ex_n, ex_fc, ex_fu = (20, 3, 1) if small else (40, 10, 3)
        fc, fu = (6, 1) if small else (self.freq_cw, self.freq_ucw)
        ex_common, ex_uncommon = ex_words[:self.num_cw], ex_words[self.num_cw:ex_n]
        example = (TEMPLATE.format(context=numbered(word_list(ex_common, ex_uncommon, ex_fc, ex_fu,
                                                               rng.getrandbits(32))))
                   + ANSWER_PREFIX + " " + numbered(ex_common))
        common = words[:self.num_cw]
        shuffle_seed = rng.getrandbits(32)
        head, tail = TEMPLATE.split("{context}")

        def render(s: int) -> tuple[str, str, str]:
            ctx = numbered(word_list(common, words[self.num_cw:self.num_cw + s], fc, fu, shuffle_seed))
            return example + "\n" + head + ctx, tail, ANSWER_PREFIX

        return Draft(render, common, 1000 / (4.0 * fu + 0.1), {"freq_cw": fc, "freq_ucw": fu},
                     max_size=len(vocab) - self.num_cw - 40)
