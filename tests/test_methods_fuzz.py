"""Fuzz every registered attention method (issue #13): random shapes (head dims that are not multiples of
16, GQA ratios), left padding holding NaN / inf, extreme finite values, bf16 / fp16 inputs, generated
keys after a prepared prefill, fully padded rows. Whatever the input, no NaN or inf leaves an attention
call, and the LSE is -inf only for a row where nothing was used (output 0). Seeds are fixed."""
from __future__ import annotations

import random

import pytest
import torch

from magicpig import KeyLayout, parse_method
from magicpig.methods import METHODS


def _budget(r: random.Random) -> str:
    return r.choice(["0.05", "0.5", "0.999", "1", "7", "100000"])


SPEC_DRAWS = {
    "dense": lambda r: "dense",
    "streaming": lambda r: f"streaming:sinks={r.randint(0, 6)},local={r.randint(1, 70)}",
    "topk": lambda r: f"topk:budget={_budget(r)}",
    "oracle": lambda r: f"oracle:budget={_budget(r)}",
    "quest": lambda r: (f"quest:page_size={r.choice([1, 7, 16, 64])},ratio={r.choice([0.04, 0.3, 1])},"
                        f"local={r.choice([0, 5, 64])}"),
    "magicpig": lambda r: (f"magicpig:K={r.randint(1, 12)},L={r.randint(2, 60)},sinks={r.randint(0, 6)},"
                           f"local={r.choice([0, 8, 64])},centering={r.choice(['true', 'false'])},"
                           f"min_collisions={r.choice([1, 2])},share_projections={r.choice(['true', 'false'])},"
                           f"seed={r.randint(0, 2**40)}"),
}
CASES_PER_METHOD = 40
BIG = {torch.float32: 1e15, torch.bfloat16: 1e15, torch.float16: 3e4}  # extreme but finite in float32 math
PAD_FILL = [float("nan"), float("inf"), float("-inf"), 1e30]


def test_every_registered_method_is_fuzzed():
    assert set(SPEC_DRAWS) == set(METHODS)


def _extreme(x: torch.Tensor, r: random.Random, g: torch.Generator, big: float) -> torch.Tensor:
    """Some entries huge (either sign), some exactly zero, some tiny."""
    u = torch.rand(x.shape, generator=g)
    sign = torch.where(torch.rand(x.shape, generator=g) < 0.5, -1.0, 1.0)
    x = torch.where(u < 0.05, sign * big, x)
    x = torch.where((u >= 0.05) & (u < 0.08), torch.zeros_like(x), x)
    return torch.where((u >= 0.08) & (u < 0.1), x * 1e-30, x)


def _case(name: str, index: int):
    seed = 1000 * sorted(METHODS).index(name) + index
    r = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    spec = SPEC_DRAWS[name](r)
    B, Hkv, G = r.randint(1, 3), r.choice([1, 2, 3]), r.choice([1, 2, 4])
    d = r.choice([8, 24, 40, 64])
    n0 = r.choice([1, 5, r.randint(1, 300)])
    gen = r.choice([0, 0, r.randint(1, 80)])
    n = n0 + gen
    dtype = r.choice([torch.float32, torch.bfloat16, torch.float16])
    starts = []
    for _ in range(B):  # no padding, some, or the whole prompt (a KeyLayout keeps start <= prompt_end)
        starts.append(r.choice([0, r.randint(0, n0 - 1), n0]))
    q = torch.randn(B, Hkv * G, d, generator=g) * r.choice([0.1, 1.0, 5.0])
    k = torch.randn(B, Hkv, n, d, generator=g) + r.choice([0.0, 3.0])
    v = torch.randn(B, Hkv, n, d, generator=g)
    if r.random() < 0.5:
        big = BIG[dtype]
        q, k, v = _extreme(q, r, g, big), _extreme(k, r, g, big), _extreme(v, r, g, big)
    for b, s in enumerate(starts):
        k[b, :, :s] = r.choice(PAD_FILL)
        v[b, :, :s] = r.choice(PAD_FILL)
    layout0 = KeyLayout(n0, torch.tensor(starts), torch.full((B,), n0))
    return spec, q.to(dtype), k.to(dtype), v.to(dtype), layout0, gen, seed


@pytest.mark.parametrize("name", sorted(METHODS))
def test_no_nan_or_inf_leaves_an_attention_call(name):
    for index in range(CASES_PER_METHOD):
        spec, q, k, v, layout0, gen, seed = _case(name, index)
        where = f"{spec} case {index} (q {tuple(q.shape)}, k {tuple(k.shape)}, {q.dtype}, gen {gen}, " \
                f"start {layout0.start.tolist()})"
        method = parse_method(spec)
        n0 = layout0.n
        layer = seed % 40
        state = method.prepare(k[:, :, :n0], v[:, :, :n0], layout0, layer)
        layout = layout0.grow(gen)
        r = method.attend(q, k, v, layout, state=state, layer_idx=layer,
                          generator=torch.Generator().manual_seed(seed))
        B, H, d = q.shape
        assert r.output.shape == (B, H, d) and r.output.dtype == torch.float32, where
        assert torch.isfinite(r.output).all(), where
        assert not torch.isnan(r.lse).any() and not torch.isposinf(r.lse).any(), where
        assert torch.isfinite(r.used).all() and bool((r.used <= r.candidates).all()), where
        empty = torch.isneginf(r.lse)
        assert bool((r.used[empty] == 0).all()), f"lse -inf where keys were used: {where}"
        assert bool((r.output[empty] == 0).all()), where
        has_keys = layout.valid().any(-1)
        assert bool(empty[~has_keys].all()), f"a fully padded row has a finite lse: {where}"
        if name != "magicpig":  # every other method always attends some key of a non-empty row
            assert not bool(empty[has_keys].any()), f"a row with keys attended nothing: {where}"
