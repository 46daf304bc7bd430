"""The attention methods against exact attention: one matrix over every registered method, then
method-specific properties (the paper's Sec. 4 and its baselines, Sec. 5)."""
import math

import pytest
import torch
import torch.nn.functional as F

from magicpig import KeyLayout, merge_attention, parse_method
from magicpig.methods import METHODS, MagicPIG

ALL_SPECS = ["dense", "streaming", "topk:budget=0.1", "oracle:budget=32", "quest:page_size=8,ratio=0.1",
             "magicpig:K=4,L=30", "magicpig:K=10,L=150,centering=false"]
DETERMINISTIC = [s for s in ALL_SPECS if not s.startswith("oracle")]


def make_inputs(B=2, H=8, Hkv=2, n=203, d=32, offset=0.0, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, d, generator=g)
    k = torch.randn(B, Hkv, n, d, generator=g) + offset
    v = torch.randn(B, Hkv, n, d, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def sdpa(q, k, v):
    G = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q[:, :, None], k.repeat_interleave(G, 1),
                                          v.repeat_interleave(G, 1))[:, :, 0]


GQA = [(4, 4), (8, 2), (7, 1)]


def test_every_registered_method_is_covered():
    assert {s.split(":")[0] for s in ALL_SPECS} == set(METHODS)


def unregistered_methods(modules) -> list[str]:
    """The ``AttentionMethod`` subclasses defined in ``modules`` that ``parse_method`` cannot reach: not
    registered under their name, and no base of a registered method either."""
    from magicpig.methods import AttentionMethod

    out = []
    for module in modules:
        for cls in vars(module).values():
            if (isinstance(cls, type) and issubclass(cls, AttentionMethod) and cls.__module__ == module.__name__
                    and METHODS.get(cls.name) is not cls
                    and not any(issubclass(m, cls) for m in METHODS.values())):
                out.append(f"{module.__name__}.{cls.__name__}")
    return out


def test_every_method_class_of_the_package_is_registered():
    import importlib

    from magicpig.methods import import_modules

    assert unregistered_methods([importlib.import_module(name) for name in import_modules()]) == []


def shapes_finite_and_costs(method, H, Hkv):
    """One decode step at H / H_kv: shapes, finite output and LSE, used <= candidates; returns the result."""
    q, k, v = make_inputs(H=H, Hkv=Hkv, n=157, offset=1.5)
    r = method.attend(q, k, v, KeyLayout.simple(2, 157, 140))
    assert r.output.shape == (2, H, 32) and r.output.dtype == torch.float32
    assert r.lse.shape == (2, H) and torch.isfinite(r.output).all() and torch.isfinite(r.lse).all()
    assert 0 <= r.cost2 <= 1
    assert bool((r.used <= r.candidates).all())
    return r


@pytest.mark.parametrize("spec", ALL_SPECS)
@pytest.mark.parametrize("H,Hkv", GQA)
def test_shapes_finite_and_costs(spec, H, Hkv):
    method = parse_method(spec)
    r = shapes_finite_and_costs(method, H, Hkv)
    expected_cost1 = {"dense": 0.0, "streaming": 0.0, "topk": 0.5, "oracle": 0.5, "magicpig": 0.0,
                      "quest": 1 / 8}[method.name]
    assert r.cost1 == pytest.approx(expected_cost1)


@pytest.mark.parametrize("spec", DETERMINISTIC)
def test_left_padding_equals_unpadded(spec):
    left_padding_equals_unpadded(parse_method(spec))


def left_padding_equals_unpadded(method):
    """A left-padded row of a batch gives the same result as the sequence alone."""
    q, k, v = make_inputs(B=2, n=150, offset=1.0, seed=3)
    pad = 37
    kp = torch.cat([torch.randn(2, 2, pad, 32) * 50, k], 2)  # garbage in the padding
    vp = torch.cat([torch.randn(2, 2, pad, 32) * 50, v], 2)
    lay = KeyLayout(150 + pad, torch.tensor([pad, pad]), torch.tensor([pad + 140, pad + 140]))
    padded = method.attend(q, kp, vp, lay)
    alone = method.attend(q, k, v, KeyLayout.simple(2, 150, 140))
    torch.testing.assert_close(padded.output, alone.output, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(padded.used, alone.used)


@pytest.mark.parametrize("H,Hkv,n", [(4, 4, 1), (8, 2, 203), (7, 1, 64), (12, 3, 1000)])
def test_dense_equals_sdpa(H, Hkv, n):
    q, k, v = make_inputs(H=H, Hkv=Hkv, n=n)
    r = parse_method("dense").attend(q, k, v, KeyLayout.simple(2, n))
    torch.testing.assert_close(r.output, sdpa(q, k, v), atol=1e-5, rtol=1e-5)
    scores = (q.reshape(2, Hkv, H // Hkv, -1) @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    torch.testing.assert_close(r.lse, torch.logsumexp(scores, -1).reshape(2, H))


@pytest.mark.parametrize("centering", [True, False])
def test_magicpig_sampling_everything_equals_dense(centering):
    """K=1 with many tables samples every offloaded key; the importance weights are then a constant
    -ln(1 + 1e-4) shift, so the output equals dense attention."""
    q, k, v = make_inputs(H=8, Hkv=2, n=301, offset=0.5)
    m = MagicPIG(K=1, L=400, centering=centering)
    r = m.attend(q, k, v, KeyLayout.simple(2, 301))
    assert torch.equal(r.used, r.candidates) and float(r.candidates[0, 0]) == 301 - 4 - 64
    torch.testing.assert_close(r.output, sdpa(q, k, v), atol=2e-4, rtol=2e-4)


def test_magicpig_sampling_nothing_equals_static_attention():
    q, k, v = make_inputs(H=8, Hkv=2, n=300)
    m = MagicPIG(K=16, L=2)
    r = m.attend(q, k, v, KeyLayout.simple(2, 300))
    assert float(r.used.sum()) == 0
    static = torch.zeros(300, dtype=torch.bool)
    static[:4] = True
    static[-64:] = True
    torch.testing.assert_close(r.output, sdpa(q, k[:, :, static], v[:, :, static]), atol=1e-5, rtol=1e-5)


def test_magicpig_matches_a_direct_transcription_of_the_estimator():
    """Recompute the paper's estimator (Sec. 4) literally (loops over heads) and compare to the batched reference."""
    B, H, Hkv, n, d, K, L = 1, 6, 3, 240, 16, 3, 12
    q, k, v = make_inputs(B, H, Hkv, n, d, offset=2.0, seed=11)
    m = MagicPIG(K=K, L=L, sinks=4, local=16)
    r = m.attend(q, k, v, KeyLayout.simple(B, n))
    W = m.projections(0, Hkv, d)
    for h in range(H):
        g = h // (H // Hkv)
        off = torch.arange(4, n - 16)
        c = k[0, g, off].mean(0)
        kc = k[0, g] - c
        bits_k = (kc @ W[g] > 0).reshape(n, L, K)
        bits_q = (q[0, h] @ W[g] > 0).reshape(L, K)
        agree = (bits_k == bits_q).all(-1).sum(-1)  # tables whose whole code matches
        sampled = torch.zeros(n, dtype=torch.bool)
        sampled[off] = agree[off] >= 2
        static = torch.ones(n, dtype=torch.bool)
        static[off] = False
        cos = (kc @ q[0, h]) / kc.norm(dim=-1) / q[0, h].norm()
        p = 1 - torch.arccos(cos.clamp(-1, 1)) / math.pi
        P = p ** K
        u = 1 - (1 - P) ** L - L * P * (1 - P) ** (L - 1)
        logits = kc @ q[0, h] / math.sqrt(d) - torch.log(u + 1e-4) * sampled
        logits = logits.masked_fill(~(sampled | static), float("-inf"))
        out = torch.softmax(logits, 0) @ v[0, g]
        torch.testing.assert_close(r.output[0, h], out, atol=1e-5, rtol=1e-4)
        assert float(r.used[0, h]) == float(sampled.sum())


def test_magicpig_state_keeps_generated_keys_exact():
    q, k, v = make_inputs(B=1, H=4, Hkv=2, n=200, seed=5)
    m = MagicPIG(K=16, L=2, local=8)
    lay0 = KeyLayout.simple(1, 180)
    state = m.prepare(k[:, :, :180], v[:, :, :180], lay0)
    r = m.attend(q, k, v, lay0.grow(20), state=state)
    static = torch.zeros(200, dtype=torch.bool)
    static[:4] = True
    static[172:] = True  # last 8 prompt keys and the 20 generated ones
    # generated keys are centered with the prefill center: softmax is unchanged by the shift
    torch.testing.assert_close(r.output, sdpa(q, k[:, :, static], v[:, :, static]), atol=1e-5, rtol=1e-5)


def no_nan_on_degenerate_inputs(method):
    """A zero key, a zero query, keys at cosine +1 and -1 of a query: no NaN, a finite output."""
    B, H, Hkv, n, d = 1, 4, 2, 100, 16
    q, k, v = make_inputs(B, H, Hkv, n, d)
    k[:, :, 10] = 0.0  # zero key
    q[:, 0] = 0.0  # zero query
    k[:, 0, 20] = q[:, 1] * 3  # cos = +1 for head 1
    k[:, 0, 21] = -q[:, 1]  # cos = -1
    r = method.attend(q, k, v, KeyLayout.simple(B, n))
    assert not torch.isnan(r.output).any() and not torch.isnan(r.lse).any(), method.spec()
    assert torch.isfinite(r.output).all(), method.spec()


def test_no_nan_on_degenerate_inputs():
    for spec in ALL_SPECS + ["magicpig:K=1,L=50", "magicpig:sinks=0,local=0,K=16,L=2"]:
        no_nan_on_degenerate_inputs(parse_method(spec))


def test_magicpig_with_no_static_and_no_sample_returns_zero():
    q, k, v = make_inputs(B=1, H=2, Hkv=1, n=50)
    r = MagicPIG(K=16, L=2, sinks=0, local=0).attend(q, k, v, KeyLayout.simple(1, 50))
    assert torch.equal(r.output, torch.zeros_like(r.output))
    assert bool(torch.isneginf(r.lse).all())


def test_oracle_sampling_is_unbiased():
    """The mean of many independent oracle-sampling estimates converges to dense attention within a
    tolerance derived from the per-draw variance."""
    q, k, v = make_inputs(B=1, H=2, Hkv=1, n=120, d=8, seed=2)
    q = q * 3  # peaked but not degenerate attention
    lay = KeyLayout.simple(1, 120)
    dense = parse_method("dense").attend(q, k, v, lay).output
    m = parse_method("oracle:budget=16")
    gen = torch.Generator().manual_seed(0)
    trials = 400
    est = torch.stack([m.attend(q, k, v, lay, generator=gen).output for _ in range(trials)]).mean(0)
    probs = torch.softmax((q[0] @ k[0, 0].T) / math.sqrt(8), -1)  # (H, n)
    var = probs @ v[0, 0] ** 2 - (probs @ v[0, 0]) ** 2  # per-draw variance of each output coordinate
    tol = 5 * torch.sqrt(var / (16 * trials)) + 1e-6
    assert bool(((est[0] - dense[0]).abs() <= tol).all())
    # and a single estimate is not exact (it really samples)
    assert not torch.allclose(m.attend(q, k, v, lay, generator=gen).output, dense, atol=1e-4)


def _kept_sets(spec, n=96, page_local=None):
    """Attend with identity values: the output row is the attention distribution, so its support is
    the set of kept keys."""
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, n, generator=g)
    k = torch.randn(1, 1, n, n, generator=g)
    v = torch.eye(n)[None, None]
    r = parse_method(spec).attend(q, k, v, KeyLayout.simple(1, n))
    return [set(torch.nonzero(r.output[0, h] > 0).flatten().tolist()) for h in range(2)], r


def test_topk_keeps_exactly_the_budget_of_highest_scores():
    kept, r = _kept_sets("topk:budget=0.1", n=96)
    assert all(len(s) == math.ceil(0.1 * 96) for s in kept)
    kept, r = _kept_sets("topk:budget=7", n=96)
    assert all(len(s) == 7 for s in kept) and float(r.used[0, 0]) == 7
    assert r.cost2 == pytest.approx(7 / 96)


def test_quest_keeps_whole_pages_and_the_local_window():
    n, ps, local = 96, 8, 16
    kept, r = _kept_sets(f"quest:page_size={ps},ratio=0.2,local={local}", n=n)
    for s in kept:
        assert set(range(n - local, n)) <= s
        middle = s - set(range(n - local, n))
        pages = {i // ps for i in middle}
        assert all(set(range(p * ps, (p + 1) * ps)) <= s for p in pages), "pages must be kept whole"
        assert len(pages) == math.ceil(0.2 * n / ps)
    assert r.cost1 == pytest.approx(1 / ps)
    assert r.cost2 == pytest.approx((math.ceil(0.2 * n / ps) * ps + local) / n)


def test_quest_selects_the_page_holding_the_best_key():
    n, d = 128, 16
    g = torch.Generator().manual_seed(9)
    q = torch.randn(1, 1, d, generator=g)
    k = torch.randn(1, 1, n, d, generator=g) * 0.1
    k[0, 0, 37] = q[0, 0] * 5  # a dominant key in page 37 // 16 = 2
    v = torch.eye(n, d * 8)[None, None]
    r = parse_method("quest:page_size=16,ratio=0.0625,local=16").attend(q, k, v, KeyLayout.simple(1, n))
    support = set(torch.nonzero(r.output[0, 0] > 0).flatten().tolist())
    assert set(range(32, 48)) <= support


def test_streaming_keeps_sinks_and_recent():
    kept, r = _kept_sets("streaming:sinks=4,local=10", n=96)
    assert kept[0] == set(range(4)) | set(range(86, 96))


def test_merge_of_disjoint_sets_equals_attention_over_the_union():
    q, k, v = make_inputs(B=2, H=8, Hkv=2, n=150)
    dense = parse_method("dense")
    mask = torch.rand(150, generator=torch.Generator().manual_seed(1)) < 0.3
    a = dense.attend(q, k[:, :, mask], v[:, :, mask], KeyLayout.simple(2, int(mask.sum())))
    b = dense.attend(q, k[:, :, ~mask], v[:, :, ~mask], KeyLayout.simple(2, int((~mask).sum())))
    full = dense.attend(q, k, v, KeyLayout.simple(2, 150))
    out, lse = merge_attention(a.output, a.lse, b.output, b.lse)
    torch.testing.assert_close(out, full.output, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, full.lse, atol=1e-5, rtol=1e-5)


def test_merge_with_empty_sets_never_nans():
    o = torch.randn(3, 4)
    lse = torch.randn(3)
    empty_o, empty_lse = torch.zeros(3, 4), torch.full((3,), float("-inf"))
    out, l2 = merge_attention(o, lse, empty_o, empty_lse)
    torch.testing.assert_close(out, o)
    torch.testing.assert_close(l2, lse)
    out, l2 = merge_attention(empty_o, empty_lse, empty_o, empty_lse)
    assert torch.equal(out, torch.zeros(3, 4)) and bool(torch.isneginf(l2).all())


def bf16_inputs_are_accepted(method):
    q, k, v = make_inputs(dtype=torch.bfloat16)
    r = method.attend(q, k, v, KeyLayout.simple(2, 203))
    assert r.output.dtype == torch.float32 and torch.isfinite(r.output).all()


def test_bf16_inputs_are_accepted():
    for spec in ALL_SPECS:
        bf16_inputs_are_accepted(parse_method(spec))


def test_shape_errors_are_clear():
    q, k, v = make_inputs(H=6, Hkv=4)
    with pytest.raises(ValueError, match="multiple"):
        parse_method("dense").attend(q, k, v, KeyLayout.simple(2, 203))
    q, k, v = make_inputs()
    with pytest.raises(ValueError, match="layout"):
        parse_method("dense").attend(q, k, v, KeyLayout.simple(2, 100))


def test_dense_layer_defaults():
    assert parse_method("magicpig").dense_layer_set(32) == {0, 16}
    assert parse_method("magicpig").dense_layer_set(80) == {0, 16, 32, 48}
    assert parse_method("magicpig").dense_layer_set(48) == {0, 16, 32}  # CodeLlama-34B
    assert parse_method("magicpig").dense_layer_set(30) == {0, 16}
    assert parse_method("quest").dense_layer_set(32) == {0, 1}
    assert parse_method("streaming").dense_layer_set(32) == set()
    assert parse_method("magicpig:dense_layers=none").dense_layer_set(32) == set()
    assert parse_method("topk:dense_layers=0/5/31").dense_layer_set(32) == {0, 5, 31}


@pytest.mark.parametrize("num_layers", range(1, 101))
def test_magicpig_dense_layers_follow_the_original_for_every_depth(num_layers):
    """The original's accuracy reference (cache_ref.py) decodes every layer sparsely except 0, 16, 32, 48."""
    assert MagicPIG().dense_layer_set(num_layers) == {i for i in (0, 16, 32, 48) if i < num_layers}


@pytest.mark.parametrize("spec", ["magicpig:dense_layers=0/32", "topk:dense_layers=999", "dense:dense_layers=32"])
def test_dense_layers_outside_the_model_are_refused(spec):
    m = parse_method(spec)
    with pytest.raises(ValueError, match=r"dense_layers.*32 layers.*0\.\.31"):
        m.dense_layer_set(32)


def test_negative_dense_layers_are_refused_when_parsed():
    with pytest.raises(ValueError, match="dense_layers.*>= 0"):
        parse_method("magicpig:dense_layers=-1")


# ---- Quest: every valid key reachable (issue #12.1) ------------------------------------------------------
QUEST_LAYOUTS = [  # (n_prompt per row, left padding per row, generated keys, page_size, local, H, Hkv)
    ([1001, 1001], [0, 0], 0, 16, 64, 4, 4),
    ([1001, 700], [0, 301], 0, 64, 64, 8, 2),
    ([130, 97], [0, 33], 90, 16, 64, 6, 3),
    ([15, 40], [25, 0], 5, 16, 0, 4, 1),
    ([3, 1], [0, 2], 0, 16, 0, 4, 2),
    ([77, 77], [0, 0], 200, 7, 5, 2, 1),
    ([200, 64], [0, 136], 3, 1, 0, 4, 2),
]


def _quest_inputs(prompts, pads, gen, seed=0, H=4, Hkv=2, d=16):
    n = max(p + a for p, a in zip(prompts, pads)) + gen
    assert all(p + a == prompts[0] + pads[0] for p, a in zip(prompts, pads)), "rows must end together"
    q, k, v = make_inputs(B=len(prompts), H=H, Hkv=Hkv, n=n, d=d, offset=0.5, seed=seed)
    lay = KeyLayout(n, torch.tensor(pads), torch.tensor([a + p for p, a in zip(prompts, pads)]))
    return q, k, v, lay


@pytest.mark.parametrize("prompts,pads,gen,ps,local,H,Hkv", QUEST_LAYOUTS)
def test_quest_at_ratio_one_is_dense_attention(prompts, pads, gen, ps, local, H, Hkv):
    q, k, v, lay = _quest_inputs(prompts, pads, gen, H=H, Hkv=Hkv)
    r = parse_method(f"quest:page_size={ps},ratio=1,local={local}").attend(q, k, v, lay)
    dense = parse_method("dense").attend(q, k, v, lay)
    torch.testing.assert_close(r.output, dense.output, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(r.lse, dense.lse, atol=1e-5, rtol=1e-5)
    assert torch.equal(r.used, r.candidates)


def test_quest_keeps_the_prompt_tail_after_the_pages_and_every_generated_key():
    """n_prompt = 1001, page 16, local 64: pages cover [0, 928); keys 928..1000 and 150 generated keys
    are always attended (the old code dropped 9 prompt keys and all but 64 generated ones)."""
    n_prompt, gen, ps = 1001, 150, 16
    n = n_prompt + gen
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 8, generator=g)
    k = torch.randn(1, 1, n, 8, generator=g)
    v = torch.eye(n)[None, None]
    m = parse_method(f"quest:page_size={ps},ratio=0.02")
    r = m.attend(q, k, v, KeyLayout.simple(1, n, n_prompt))
    paged = (n_prompt - 64) // ps * ps
    assert paged == 928
    pages = math.ceil(0.02 * n_prompt / ps)
    for h in range(2):
        kept = set(torch.nonzero(r.output[0, h] > 0).flatten().tolist())
        assert set(range(paged, n)) <= kept
        middle = kept - set(range(paged, n))
        assert len(middle) == pages * ps
        assert all(set(range(p * ps, p * ps + ps)) <= kept for p in {i // ps for i in middle}), "whole pages"
    assert float(r.used[0, 0]) == pages * ps + (n - paged)


def test_quest_without_local_window_on_rows_shorter_than_a_page():
    q, k, v, lay = _quest_inputs([5, 9], [4, 0], 0)
    r = parse_method("quest:local=0").attend(q, k, v, lay)
    dense = parse_method("dense").attend(q, k, v, lay)
    torch.testing.assert_close(r.output, dense.output, atol=1e-5, rtol=1e-5)
    assert torch.equal(r.used, r.candidates)


def test_quest_budget_counts_pages_of_the_prompt():
    """ratio is a fraction of the row's valid prompt keys, rounded up to whole pages, capped at its pages."""
    m = parse_method("quest:page_size=16,ratio=0.04")
    lay = KeyLayout(1100, torch.tensor([0, 100, 1000]), torch.tensor([1000, 1000, 1000]))
    pages, budget = m.pages(lay)
    assert pages.tolist() == [(1000 - 64) // 16, (900 - 64) // 16, 0]
    assert budget.tolist() == [math.ceil(40 / 16), math.ceil(36 / 16), 0]


# ---- NaN in the padding never leaks ----------------------------------------------------------------------
@pytest.mark.parametrize("spec", ALL_SPECS)
def test_nan_in_padding_does_not_leak(spec):
    nan_in_padding_does_not_leak(parse_method(spec), deterministic=spec in DETERMINISTIC)


def nan_in_padding_does_not_leak(method, deterministic: bool):
    """NaN in the left padding: a finite output and LSE; a deterministic method's padded row equals the
    row alone."""
    q, k, v = make_inputs(B=2, n=150, offset=1.0, seed=3)
    pad = 37
    nan = torch.full((2, 2, pad, 32), float("nan"))
    kp, vp = torch.cat([nan, k], 2), torch.cat([nan, v], 2)
    kp[1, :, pad - 5:pad] = k[1, :, :5]  # row 1 starts 5 keys earlier
    vp[1, :, pad - 5:pad] = v[1, :, :5]
    lay = KeyLayout(150 + pad, torch.tensor([pad, pad - 5]), torch.tensor([pad + 140, pad + 140]))
    r = method.attend(q, kp, vp, lay, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(r.output).all() and torch.isfinite(r.lse).all()
    if deterministic:
        alone = method.attend(q[:1], k[:1], v[:1], KeyLayout.simple(1, 150, 140))
        torch.testing.assert_close(r.output[:1], alone.output, atol=1e-5, rtol=1e-5)


def test_oracle_on_a_fully_padded_row():
    q, k, v = make_inputs(B=2, n=50)
    lay = KeyLayout(50, torch.tensor([0, 50]), torch.tensor([50, 50]))
    r = parse_method("oracle:budget=8").attend(q, k, v, lay, generator=torch.Generator().manual_seed(0))
    assert torch.equal(r.output[1], torch.zeros_like(r.output[1])) and bool(torch.isneginf(r.lse[1]).all())
    assert float(r.used[1].sum()) == 0 and torch.isfinite(r.output).all()
    assert torch.isfinite(r.lse[0]).all() and float(r.used[0, 0]) > 0


def test_magicpig_draws_projections_per_sample():
    a, b = MagicPIG().for_sample("s/0"), MagicPIG().for_sample("s/1")
    assert a.seed != b.seed and a == MagicPIG().for_sample("s/0")
    assert not torch.equal(a.projections(0, 2, 16), b.projections(0, 2, 16))
    fixed = parse_method("magicpig:projection_draw=fixed")
    assert fixed.for_sample("s/0") is fixed
    assert parse_method("dense").for_sample("s/0") == parse_method("dense")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("spec", DETERMINISTIC)
def test_cuda_matches_cpu(spec):
    q, k, v = make_inputs(offset=1.0)
    cpu = parse_method(spec).attend(q, k, v, KeyLayout.simple(2, 203))
    gpu = parse_method(spec).attend(q.cuda(), k.cuda(), v.cuda(), KeyLayout.simple(2, 203, device="cuda"))
    torch.testing.assert_close(gpu.output.cpu(), cpu.output, atol=1e-3, rtol=1e-3)


def test_layout_padded_prefix_is_read_once_and_follows_growth():
    lay = KeyLayout(10, torch.tensor([0, 4, 10]), torch.tensor([10, 10, 10]))
    assert lay.padded_prefix() == 10  # a fully padded row
    grown = lay.grow(5)
    assert grown._max_start == 10 and grown.padded_prefix() == 10 and grown.to("cpu").padded_prefix() == 10
    assert KeyLayout.simple(2, 7).padded_prefix() == 0
    import dataclasses
    assert dataclasses.replace(lay, start=torch.tensor([0, 1, 2])).padded_prefix() == 2


def test_method_dataclasses_are_keyword_only_and_subclass_freely():
    """Methods are keyword-only dataclasses: a subclass adds fields (with or without defaults) after the
    base's ``dense_layers``; specs list a method's own fields first, ``dense_layers`` last, and every
    registered method round-trips through its spec string."""
    import dataclasses

    from magicpig.methods import method_fields
    from magicpig.methods.exact import Dense

    for name, cls in METHODS.items():
        assert all(f.kw_only for f in dataclasses.fields(cls)), name
        assert [f for f, _, _ in method_fields(name)][-1] == "dense_layers"
        spec = f"{name}:dense_layers=1/0"
        method = parse_method(spec)
        assert method.dense_layers == (0, 1) and method.spec() == f"{name}:dense_layers=0/1"
        assert parse_method(method.spec()) == method
    assert parse_method("magicpig:dense_layers=0/3,K=8").spec() == "magicpig:K=8,dense_layers=0/3"
    assert list(parse_method("quest").params()) == ["page_size", "ratio", "local", "dense_layers"]
    with pytest.raises(TypeError):
        MagicPIG(8)  # keyword-only

    @dataclasses.dataclass(kw_only=True)
    class Tempered(Dense):
        name = "tempered-test"
        temperature: float  # no default, after the base's defaulted field
        floor: int = 0

    m = Tempered(temperature=0.5, dense_layers=(1,))
    assert m.spec() == "tempered-test:temperature=0.5,dense_layers=1"
    assert list(m.params()) == ["temperature", "floor", "dense_layers"]
    with pytest.raises(TypeError):
        Tempered()


def test_a_method_chooses_its_own_decoder():
    """The cache asks each layer's decoder of the method (``make_decoder``), for every backend."""
    import dataclasses

    from tiny_models import tiny_config
    from magicpig.cache import MagicPIGCache
    from magicpig.methods.exact import Dense

    asked = []

    @dataclasses.dataclass(kw_only=True)
    class Recording(Dense):
        name = "recording-test"

        def make_decoder(self, k, v, layout, layer_idx, ctx):
            asked.append((layer_idx, ctx.backend, ctx.is_dense(layer_idx)))
            return ctx.exact(k, v, layout, layer_idx)  # the fused exact decoder even on the reference backend

    config = tiny_config("llama")
    cache = MagicPIGCache(config, Recording(dense_layers=(1,)), "reference")
    _, k, v = make_inputs(B=1, Hkv=config.num_key_value_heads, n=50,
                          d=config.hidden_size // config.num_attention_heads)
    cache.start_decoding([k] * cache.num_layers, [v] * cache.num_layers, KeyLayout.simple(1, 50))
    assert asked == [(i, "reference", i == 1) for i in range(cache.num_layers)]
    assert cache.layer_decoders == ["exact"] * cache.num_layers


def run_matrix(method, deterministic: bool = True) -> None:
    """The matrix's checks of one method (a new method passes them before its own tests)."""
    for H, Hkv in GQA:
        shapes_finite_and_costs(method, H, Hkv)
    if deterministic:
        left_padding_equals_unpadded(method)
    no_nan_on_degenerate_inputs(method)
    bf16_inputs_are_accepted(method)
    nan_in_padding_does_not_leak(method, deterministic)
