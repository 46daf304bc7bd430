"""Attention-level experiments on synthetic captures whose answers are known (no model needed)."""
import math

import pytest
import torch

from magicpig import lsh
from magicpig.methods import MagicPIG
from magicpig_tasks import paper
from magicpig_tasks.experiments import experiments as E
from magicpig_tasks.experiments.capture import Capture, parse_layers
from magicpig_tasks.experiments.problems import iter_problems, layer_batch, query_subset, run_method


def make_capture(q, k, v, *, n_prompt=None, positions=None, num_layers=4, layers=None):
    """q: (Lc, Q, H, d); k, v: (Lc, Hkv, n, d). Queries sit at the last Q positions by default."""
    Lc, Q = q.shape[:2]
    n = k.shape[2]
    positions = torch.arange(n - Q, n) if positions is None else positions
    return Capture(queries=q, keys=k, values=v, query_positions=positions,
                   layers=list(range(1, 1 + Lc)) if layers is None else layers,
                   n_prompt=n if n_prompt is None else n_prompt, num_layers=num_layers,
                   scale=1.0 / math.sqrt(q.shape[-1]))


def planted_tail(n=2000, d=16, head=20, head_logit=8.0, seed=0):
    """Attention with a few strong keys (value e1) and a long uniform tail (value e2 + small noise).

    The head logit is chosen so the head and the tail carry about equal mass. Returns one layer, one query,
    one head (H = H_kv = 1) capture.
    """
    g = torch.Generator().manual_seed(seed)
    q = torch.zeros(d)
    q[0] = 1.0
    k = torch.zeros(n, d)
    k[:, 1:] = torch.randn(n, d - 1, generator=g) * 0.01
    # logit = q·k * scale with scale = 1/sqrt(d): head keys get s, the tail 0, with head*exp(s) ≈ (n-head)
    s = math.log((n - head) / head)
    k[:head, 0] = s * math.sqrt(d)
    perm = torch.randperm(n - 1, generator=g)[: head] + 1
    kk = k.clone()
    kk[perm], kk[:head] = k[:head], k[perm]  # spread the head keys over the context (not at the sinks)
    v = torch.zeros(n, d)
    v[:, 1] = 1.0
    v += torch.randn(n, d, generator=g) * 0.05
    v[perm] = 0.0
    v[perm, 0] = 1.0
    return make_capture(q.view(1, 1, 1, d), kk.view(1, 1, n, d), v.view(1, 1, n, d))


def isotropic(n=3000, d=64, Q=4, H=2, Hkv=1, Lc=1, offset=0.0, q_sign=1.0, seed=0):
    """Gaussian keys (optionally plus a common offset along e0) and Gaussian queries (plus q_sign·e0·offset)."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(Lc, Hkv, n, d, generator=g)
    k[..., 0] += offset
    q = torch.randn(Lc, Q, H, d, generator=g)
    q[..., 0] += q_sign * offset
    v = torch.randn(Lc, Hkv, n, d, generator=g)
    return make_capture(q, k, v)


# ---- capture container --------------------------------------------------------------------------------------
def test_capture_roundtrip_and_validation(tmp_path):
    cap = isotropic(n=50, d=8)
    path = cap.save(tmp_path / "c.pt")
    back = Capture.load(path)
    assert torch.equal(back.keys, cap.keys) and back.layers == cap.layers and back.scale == cap.scale
    with pytest.raises(ValueError, match="query_positions"):
        make_capture(cap.queries, cap.keys, cap.values, positions=torch.tensor([1, 2, 3, 50]))
    with pytest.raises(FileNotFoundError, match="capture"):
        Capture.load(tmp_path / "missing.pt")


def test_parse_layers():
    assert parse_layers("all", 4) == [0, 1, 2, 3]
    assert parse_layers("every:2", 5) == [0, 2, 4]
    assert parse_layers("0,2-3", 5) == [0, 2, 3]
    with pytest.raises(ValueError, match="layers"):
        parse_layers("7", 5)
    with pytest.raises(ValueError, match="layers"):
        parse_layers("a-b", 5)


def test_problems_see_keys_up_to_their_position():
    cap = isotropic(n=40, d=8, Q=3)
    cap.n_prompt = 38  # the last two keys were generated
    pbs = list(iter_problems(cap, 1))
    assert [pb.k.shape[2] for pb in pbs] == [38, 39, 40]
    assert [pb.prompt_end for pb in pbs] == [38, 38, 38]
    b = layer_batch(cap, 1, sinks=4, local=10)
    assert b.valid.sum(-1).tolist() == [38, 39, 40]
    assert b.offloaded.sum(-1).tolist() == [38 - 14] * 3  # sinks and local window excluded, generated keys too
    assert query_subset(cap, 2) == [0, 2] and query_subset(cap, None) is None


def test_layer_batch_cosines_match_explicit_centering():
    cap = isotropic(n=300, d=16, Q=2, H=4, Hkv=2, offset=3.0)
    b = layer_batch(cap, 1, sinks=4, local=8)
    cos = b.cosines(True)  # (Hkv, Q, G, n)
    for j in range(2):
        keys = cap.keys[0].float()
        c = keys[:, b.offloaded[j]].mean(1, keepdim=True)
        qg = cap.queries[0, j].reshape(2, 2, 16)
        ref = lsh.cosine(qg, keys - c)
        torch.testing.assert_close(cos[:, j], ref, atol=1e-4, rtol=1e-4)


# ---- 1. spread ------------------------------------------------------------------------------------------------
def test_spread_uniform_vs_concentrated_and_sink():
    n, d = 1000, 16
    # uniform attention: a zero query
    cap = make_capture(torch.zeros(1, 1, 1, d), torch.randn(1, 1, n, d), torch.randn(1, 1, n, d))
    row = E.spread(cap).iloc[0]
    assert row.top_mass_with_sink == pytest.approx(0.2, abs=1e-3)
    assert row.sink_mass == pytest.approx(1 / n, rel=1e-3)
    # a sink key with a huge logit and a uniform rest: with the sink the top 20% holds ~all mass, without 20%
    q = torch.zeros(1, 1, 1, d)
    q[..., 0] = 1.0
    k = torch.zeros(1, 1, n, d)
    k[..., 0, 0] = 80.0  # logit 80 / sqrt(16) = 20
    k[..., 1:, 1:] = torch.randn(n - 1, d - 1)
    row = E.spread(make_capture(q, k, torch.randn(1, 1, n, d))).iloc[0]
    assert row.sink_mass > 0.99 and row.top_mass_with_sink > 0.99
    assert row.top_mass_without_sink == pytest.approx(0.2, abs=2e-3)
    # the planted tail: 20 keys hold half the mass, the uniform rest the other half
    row = E.spread(planted_tail()).iloc[0]
    assert 0.5 < row.top_mass_without_sink < 0.7
    assert row.top2pct_mass_without_sink < 0.55


# ---- 2. error -------------------------------------------------------------------------------------------------
def test_error_topk_biased_on_uniform_tail_oracle_not():
    cap = planted_tail()
    df = E.error(cap, budgets=[0.02], kl=[(8, 75)], matched=False, seed=1)
    topk = df[df.method == "topk"].iloc[0]
    oracle = df[df.method == "oracle"].iloc[0]
    mp = df[df.method == "magicpig"].iloc[0]
    assert topk.rel_error_mean > 0.5  # misses half the mass: the tail's mean value
    assert oracle.rel_error_mean < 0.35
    assert topk.rel_error_mean > 2 * oracle.rel_error_mean
    assert math.isfinite(mp.rel_error_mean) and 0 < mp.cost2 < 1


def test_error_exact_at_full_budget_and_matched_rows():
    cap = isotropic(n=400, d=16, Q=2, H=2, Hkv=1)
    df = E.error(cap, budgets=[0.9999], kl=[(7, 40)], matched=True)
    assert (df[df.method == "topk"].query("matched_to == ''").rel_error_mean < 1e-5).all()
    matched = df[df.matched_to != ""]
    assert set(matched.method) == {"topk", "oracle"} and (matched.matched_to == "magicpig:K=7,L=40").all()
    assert set(df.setting) == {"magicpig(7,40)", "topk@0.9999", "oracle@0.9999", "topk=magicpig(7,40)",
                               "oracle=magicpig(7,40)"}
    mp_used = df[df.method == "magicpig"].keys_used.iloc[0]
    topk_m = matched[matched.method == "topk"].iloc[0]
    assert topk_m.keys_used == pytest.approx(round(mp_used + 4 + 64), abs=1)
    with pytest.raises(ValueError, match="budgets"):
        E.error(cap, budgets=[0.0])


# ---- 3. (K, L) grid -------------------------------------------------------------------------------------------
def test_nested_fraction_equals_method_cost():
    cap = isotropic(n=1500, d=32, Q=2, H=2, Hkv=1)
    layer = cap.layers[0]
    K, L = 6, 40
    method = MagicPIG(K=K, L=L)
    b = layer_batch(cap, layer)
    proj = method.projections(layer, 1, 32)
    frac = E.nested_sampled_fractions(b, proj, K, [10, L])[L]
    ref = [run_method(method, pb, cap.scale).cost2 for pb in iter_problems(cap, layer)]
    assert frac == pytest.approx(sum(ref) / len(ref), abs=1e-6)  # cost2 is float32


def test_kl_grid_measured_matches_prediction_on_isotropic_keys():
    cap = isotropic(n=3000, d=64, Q=4, H=2)
    df = E.kl_grid(cap, Ks=[7, 8], Ls=[75, 150])
    assert len(df) == 4
    for r in df.itertuples():
        assert r.measured == pytest.approx(r.predicted, rel=0.2)
        # cosines of isotropic keys spread with std ~ 1/sqrt(d) around 0 and u is convex there: the real
        # fraction exceeds the well-spread formula (which assumes every cosine is exactly 0)
        assert r.measured > r.formula
        assert r.paper_table9 == paper.table9()[r.K][r.L]  # Table 9, from config/paper_reference.yaml
    # more tables sample more, more bits sample less
    g = df.set_index(["K", "L"]).measured
    assert g[(7, 150)] > g[(7, 75)] > g[(8, 75)]


# ---- 4. centering ---------------------------------------------------------------------------------------------
def test_centering_rescues_keys_with_common_offset():
    # keys share a large offset, queries point against it: uncentered cosines ~ -0.9, nothing collides
    cap = isotropic(n=3000, d=64, Q=2, H=2, offset=25.0, q_sign=-1.0)
    df = E.centering(cap, kl=[(8, 75)])
    on = df[df.centering].iloc[0]
    off = df[~df.centering].iloc[0]
    assert off.cost2 < 1e-3 and off.predicted < 1e-3
    assert on.cost2 > 0.5 * lsh.expected_sampled_fraction(8, 75)
    assert off.cos_mean < -0.8 and abs(on.cos_mean) < 0.05


# ---- 5. geometry ----------------------------------------------------------------------------------------------
def test_geometry_planted_offset_and_sink():
    cap = isotropic(n=2000, d=32, Q=2, H=2, offset=10.0)
    q = cap.queries[0, :, :, :].clone()
    cap.keys[0, 0, 0] = q[0, 0] * 5  # the sink key points along the first query
    row = E.geometry(cap).iloc[0]
    assert row.k_cos_center > 0.8 and row.center_norm_ratio > 0.8  # keys dominated by their common offset
    assert abs(row.qk_cos_centered_mean) < 0.05
    assert row.qk_cos_centered_std > 0.1
    # per-head mean: head 0 of query 0 has cosine 1 to the sink
    assert row.q_cos_sink > 0.2


def test_geometry_hist_counts_every_offloaded_key_and_sees_the_offset():
    cap = isotropic(n=2000, d=32, Q=2, H=2, offset=10.0)
    hist = E.geometry_hist(cap, bins=20)
    assert set(hist.quantity) == {"k_cos_sink", "k_cos_center", "qk_cos", "qk_cos_centered"}
    per = hist.groupby("quantity")["count"].sum()  # the same offloaded keys behind every histogram:
    assert per["k_cos_sink"] == per["k_cos_center"] > 0  # one count per (kv-head, query, key),
    assert per["qk_cos"] == per["qk_cos_centered"] == 2 * per["k_cos_sink"]  # per query head (2 per kv-head)
    center = hist[hist.quantity == "k_cos_center"]
    assert center[center.bin_lo >= 0.8]["count"].sum() > 0.9 * center["count"].sum()  # keys share the offset
    cen = hist[hist.quantity == "qk_cos_centered"]
    assert cen[(cen.bin_lo >= -0.5) & (cen.bin_hi <= 0.5)]["count"].sum() > 0.9 * cen["count"].sum()


def test_topk_vs_oracle_interpolates_at_equal_unique_keys():
    import pandas as pd

    rows = [dict(layer=3, dense_in_magicpig=False, method="topk", budget=b, keys_used=n, rel_error_mean=e,
                 matched_to="") for b, n, e in ((0.01, 10, 0.4), (0.1, 1000, 0.004))]
    rows += [dict(layer=3, dense_in_magicpig=False, method="oracle", budget=0.05, keys_used=100, rel_error_mean=0.01,
                  matched_to=""),
             dict(layer=3, dense_in_magicpig=False, method="oracle", budget=0.5, keys_used=5000,
                  rel_error_mean=0.001, matched_to="")]  # outside TopK's range: dropped
    out = E.topk_vs_oracle(pd.DataFrame(rows))
    assert len(out) == 1
    assert out.topk_error.iloc[0] == pytest.approx(0.04)  # log-log midpoint of (10, 0.4) and (1000, 0.004)
    assert out.topk_over_oracle.iloc[0] == pytest.approx(4.0)


def test_topk_vs_oracle_per_head_marks_the_long_tailed_heads():
    cap = isotropic(n=1500, d=32, Q=2, H=2)
    df = E.error(cap, budgets=[0.01, 0.05, 0.2], kl=[(8, 75)], matched=False)
    assert {len(E.split_heads(c)) for c in df["head_rel_error"]} == {cap.num_heads}
    spread_df = E.spread(cap)
    heads = E.topk_vs_oracle_heads(df, spread_df, long_tail_below=2.0)  # every head counts as long-tailed
    assert set(heads["head"]) == set(range(cap.num_heads)) and heads["long_tailed"].all()
    assert (heads["topk_over_oracle"] > 0).all()
    assert not E.topk_vs_oracle_heads(df, spread_df, long_tail_below=0.0)["long_tailed"].any()
    # the per-head keys average back to the layer's mean
    row = df[df.method == "oracle"].iloc[0]
    assert sum(E.split_heads(row.head_keys_used)) / cap.num_heads == pytest.approx(row.keys_used, rel=1e-4)


def test_paper_numbers_come_from_the_reference_file_by_setting():
    """Table 9 and the paper's (K, L) settings are read from config/paper_reference.yaml, keyed by (K, L)."""
    t9 = paper.table9()
    assert t9[9][150] == 0.054 and t9[11][75] == 0.0015 and set(t9) == {7, 8, 9, 10, 11}
    assert E.paper_kl() == [(10, 150), (10, 170), (9, 120), (8, 75)]
    assert paper.nominal_costs()[(10, 170)] == 0.025
    assert (11, 300) in [(m.K, m.L) for m in paper.kl_settings("all")]
    with pytest.raises(ValueError, match="groups"):
        paper.kl_settings("nope")
    assert paper.system_value("max_throughput_tokens_per_s", "tokens_per_s", hardware="L20", batch=18) == 53.8
    with pytest.raises(ValueError, match="2 entries"):
        paper.system_value("max_throughput_tokens_per_s", "tokens_per_s", hardware="L20")


def test_kl_pair_has_one_parser_and_one_spelling():
    assert lsh.parse_kl("10,150") == (10, 150) == lsh.parse_kl(" 10x150 ")
    assert lsh.format_kl(10, 150) == "10,150" and lsh.parse_kl(lsh.format_kl(9, 120)) == (9, 120)
    for bad in ("10by150", "10,150,9,120", "10", ""):
        with pytest.raises(ValueError, match="K,L"):
            lsh.parse_kl(bad)
