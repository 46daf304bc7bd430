"""The engine's settings and stopping: one DecodeOptions validated once and passed whole, and stop
strings found from the decoded tail with the whole decode's cut."""
import random

import pytest
import torch

from tiny_models import random_prompt, tiny_model
from magicpig import DecodeOptions
from magicpig.cache import MagicPIGCache
from magicpig.engine import Engine, GenerationConfig, StopStrings


@pytest.mark.parametrize("field, value", [("backend", "gpu"), ("offload_impl", "fast"), ("concurrent", "yes"),
                                          ("offload_dtype", "float16"), ("linear", "mkl"), ("forward", "eager")])
def test_decode_options_name_the_bad_field(field, value):
    with pytest.raises(ValueError, match=f"^{field} must be"):
        DecodeOptions(**{field: value})


def test_decode_options_normalise_and_refuse_a_second_source():
    assert DecodeOptions(offload_dtype="bfloat16").offload_dtype is torch.bfloat16
    assert DecodeOptions(offload_dtype="auto").offload_dtype is None
    assert DecodeOptions(offload_dtype=torch.float32) == DecodeOptions(offload_dtype="float32")
    options = DecodeOptions(backend="offload")
    assert DecodeOptions.of(options, backend="auto") is options  # keywords at their defaults
    with pytest.raises(ValueError, match="options= and backend= both given"):
        DecodeOptions.of(options, backend="reference")  # not the default any more: a second source
    with pytest.raises(ValueError, match="options= and backend=, concurrent= both given"):
        DecodeOptions.of(options, backend="offload", concurrent=False)
    with pytest.raises(ValueError, match="options must be a DecodeOptions"):
        DecodeOptions.of({"backend": "offload"})


def test_engine_passes_one_options_object_down_to_the_decoders():
    model = tiny_model("llama", layers=2)
    options = DecodeOptions(backend="offload", offload_impl="torch", concurrent=False, linear="torch")
    engine = Engine(model, None, options=options)
    assert engine.options is options and engine.backend == "offload"
    assert Engine(model, None, backend="offload", offload_impl="torch", concurrent=False,
                  linear_impl="torch").options == options  # the keyword form builds the same options
    with pytest.raises(ValueError, match="options= and backend="):
        Engine(model, None, backend="offload", options=options)
    cache = MagicPIGCache(model, "magicpig:K=4,L=8,local=8", options=options)
    assert cache.options is options and cache.context.options is options and cache.context.backend == "offload"
    # the keyword and the options form decode the same tokens
    prompt = random_prompt(150, seed=40)
    cfg = GenerationConfig(max_new_tokens=5, ignore_eos=True)
    a = engine.generate(prompt, "magicpig:K=4,L=20,local=16", cfg)[0]
    b = Engine(model, None, backend="offload", offload_impl="torch", concurrent=False,
               linear_impl="torch").generate(prompt, "magicpig:K=4,L=20,local=16", cfg)[0]
    assert a.token_ids == b.token_ids and a.cost == b.cost and a.layer_decoders == ["exact", "offload"]


class ByteTokenizer:
    """Token t decodes to a byte string; the answer is their concatenation read as UTF-8 (a split
    character reads as U+FFFD until completed) with spaces before '.' removed, as transformers'
    clean_up_tokenization_spaces does; 2 is a special token, skipped."""

    PIECES = [b"a", b"b", b" ", b"\n", b".", b"ab", b"\xc3", b"\xa9", b"\xe2\x82", b"\xac", b" .", b"x"]

    def decode(self, ids, skip_special_tokens=True):
        data = b"".join(self.PIECES[t] for t in ids if not (skip_special_tokens and t == 2))
        return data.decode("utf-8", errors="replace").replace(" .", ".")


def _first_stop(tokenizer, tokens, stop):
    """What the decode loop computed before it checked the tail only: the whole answer after every token."""
    for t in range(1, len(tokens) + 1):
        text = tokenizer.decode(tokens[:t], skip_special_tokens=True)
        cut = min((text.find(s) for s in stop if s in text), default=-1)
        if cut >= 0:
            return t, text[:cut]
    return None, None


def test_stop_strings_from_the_tail_equal_the_whole_decode():
    tok, rng = ByteTokenizer(), random.Random(0)
    stops = [["\n"], [".\n"], ["é"], ["€a"], ["ab\nab"], ["a.", "\n\n"], ["b" * 12], ["\ufffd"]]
    found = 0
    for trial in range(400):
        tokens = [rng.randrange(len(ByteTokenizer.PIECES)) for _ in range(rng.randrange(1, 80))]
        stop = stops[trial % len(stops)]
        want_at, want_text = _first_stop(tok, tokens, stop)
        checker, got_at, got_text = StopStrings(tok, stop), None, None
        for t in range(1, len(tokens) + 1):
            got_text = checker.check(tokens[:t])
            if got_text is not None:
                got_at = t
                break
        assert (got_at, got_text) == (want_at, want_text), (tokens, stop)
        found += want_at is not None
    assert 100 < found < 400  # both outcomes were exercised


def test_stop_strings_decode_a_bounded_window():
    class Counting(ByteTokenizer):
        decoded = 0

        def decode(self, ids, skip_special_tokens=True):
            Counting.decoded += len(ids)
            return super().decode(ids, skip_special_tokens)

    checker = StopStrings(Counting(), ["\n\n"])
    tokens = [0, 1] * 500  # "abab...": never stops
    for t in range(1, len(tokens) + 1):
        assert checker.check(tokens[:t]) is None
    assert Counting.decoded < 40 * len(tokens)  # the whole answer each step would be ~len**2 / 2 = 500,000
