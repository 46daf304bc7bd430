"""Pieces of the decode benchmark that run without the real model."""
import pytest
import torch

from tiny_models import random_prompt, tiny_model
from magicpig import bench_decode
from magicpig.engine import Engine, GenerationConfig


class ByteTokenizer:
    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [b % 250 + 3 for b in text.encode("utf-8")]}


def test_essay_tokens_has_exact_length():
    ids = bench_decode.essay_tokens(ByteTokenizer(), 5000)
    assert len(ids) == 5000 and len(set(ids)) > 20


def test_tile_prefill_repeats_the_cache_and_decodes():
    model = tiny_model("llama", layers=2)
    engine = Engine(model, None)
    pre = engine.prefill(random_prompt(40, seed=1))
    big = bench_decode.tile_prefill(pre, 100)
    assert big.n == 100 and big.keys[0].shape[2] == 100
    assert torch.equal(big.keys[1][:, :, 40:80], pre.keys[1]) and torch.equal(big.values[0][:, :, 80:], pre.values[0][:, :, :20])
    res = Engine(model, None, backend="offload", offload_impl="torch").decode(
        big, "magicpig:K=4,L=20,local=8", GenerationConfig(max_new_tokens=3, ignore_eos=True))[0]
    assert res.new_tokens == 3 and len(res.step_seconds) == 2 and 0 <= res.cost <= 1


def test_run_rejects_bad_arguments_before_loading():
    with pytest.raises(ValueError, match="fill"):
        bench_decode.run(fill="copy")
    with pytest.raises(ValueError, match="steps"):
        bench_decode.run(steps=0)
