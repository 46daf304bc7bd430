"""RULER frequent word extraction (fwe): a text of coded 6-letter words whose frequencies follow a Zipf
law; the model names the three most frequent coded words.

As in the reference: a vocabulary of ``length // 50`` random coded words in a random order; for a text of
N words the word of rank k appears floor(N * k^-alpha / zeta(alpha)) times (alpha 2.0), all shuffled; the
rank-1 word is replaced by the noise "..." (the prompt asks to ignore the dots), so the answer is ranks
2-4. N is the largest that fits the target length.
"""
from __future__ import annotations

import math
import random
import string

from magicpig_tasks.common import Draft, register
from magicpig_tasks.ruler.base import RulerTask

TEMPLATE = ("Read the following coded text and track the frequency of each coded word. Find the three most "
            "frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. Please "
            "ignore the dots '....'. What are the three most frequently appeared words in the above coded text?")
ANSWER_PREFIX = (" Answer: According to the coded text above, the three most frequently appeared words are:")
NOISE = "..."


def zeta(alpha: float, terms: int = 10_000) -> float:
    """Riemann zeta(alpha) for alpha > 1: partial sum plus the Euler-Maclaurin tail (error < 1e-12)."""
    if alpha <= 1:
        raise ValueError(f"fwe: alpha must be > 1, got {alpha}")
    head = math.fsum(k ** -alpha for k in range(1, terms))
    return head + terms ** (1 - alpha) / (alpha - 1) + 0.5 * terms ** -alpha


def zipf_counts(n_words: int, vocab: int, alpha: float) -> list[int]:
    """Occurrences of ranks 1..vocab in a text of ``n_words`` words."""
    z = zeta(alpha)
    return [int(n_words * k ** -alpha / z) for k in range(1, vocab + 1)]


@register
class FrequentWords(RulerTask):
    names = ("ruler/fwe",)
    max_new_tokens = 50
    alpha = 2.0
    word_len = 6
    min_words = 64  # enough words for ranks 2-4 to appear with distinct counts

    def make(self, rng: random.Random, length: int, tokenizer) -> Draft:
        size = max(4, length // 50)
        vocab: set[str] = set()
        while len(vocab) < size:
            vocab.add("".join(rng.choices(string.ascii_lowercase, k=self.word_len)))
        words = sorted(vocab)
        rng.shuffle(words)
        words[0] = NOISE
        shuffle_seed = rng.getrandbits(32)
        head, tail = TEMPLATE.split("{context}")

        def render(n: int) -> tuple[str, str, str]:
            text = [w for w, c in zip(words, zipf_counts(n, len(words), self.alpha)) for _ in range(c)]
            random.Random(shuffle_seed).shuffle(text)
            return head + " ".join(text), tail, ANSWER_PREFIX

        return Draft(render, words[1:4], 1000 / 1.3, {"alpha": self.alpha, "vocab_size": size},
                     min_size=self.min_words)
