"""The per-key / per-token experiments (Figs. 2a, 5c, 10, 11), the keys-across-inputs statistics (Figs. 5a/b)
and `estimate all` over several captures, on synthetic captures whose answers are known."""
import numpy as np
import pandas as pd
import pytest
import torch

from magicpig_tasks.experiments import experiments as E
from magicpig_tasks.experiments import inputs as I
from magicpig_tasks.experiments import token_level as T
from test_estimation import isotropic, make_capture


def test_mass_curve_uniform_is_the_diagonal_and_matches_spread():
    cap = isotropic(n=500, d=16, Q=2, H=2)
    flat = make_capture(torch.zeros_like(cap.queries), cap.keys, cap.values)  # q = 0: uniform attention
    df = T.mass_curve(flat, fractions=(0.01, 0.1, 0.5, 1.0))
    for r in df.itertuples():  # ceil(f·m) of m ~ 500 equal keys: f up to rounding
        assert r.fraction <= r.mass_with_sink + 1e-6 <= r.fraction + 2 / 400, r
        assert r.fraction <= r.mass_without_sink + 1e-6 <= r.fraction + 2 / 400, r
    real = T.mass_curve(cap, fractions=(0.2,))
    spread = E.spread(cap, top_frac=0.2)
    np.testing.assert_allclose(real["mass_with_sink"], spread["top_mass_with_sink"], rtol=1e-6)
    np.testing.assert_allclose(real["mass_without_sink"], spread["top_mass_without_sink"], rtol=1e-6)
    assert (real.groupby(["layer", "head"]).size() == 1).all()
    with pytest.raises(ValueError, match="fractions"):
        T.mass_curve(cap, fractions=(0.0,))


def test_sink_center_sees_a_sink_opposite_the_mean_key():
    g = torch.Generator().manual_seed(1)
    d, n = 16, 300
    c = torch.zeros(d)
    c[0] = 3.0
    k = c + 0.3 * torch.randn(1, 2, n, d, generator=g)
    k[:, 0, 0] = -c  # kv-head 0: the sink points away from the mean
    cap = make_capture(torch.randn(1, 2, 2, d, generator=g), k, torch.randn(1, 2, n, d, generator=g))
    df = T.sink_center(cap)
    assert df.loc[df.kv_head == 0, "sink_cos_center"].item() < -0.95
    assert df.loc[df.kv_head == 1, "sink_cos_center"].item() > 0.9
    assert (df["key_cos_center"] > 0.9).all()
    s = T.summary("sink-center", df)
    assert list(s["kv_head"]) == [0, 1]


def test_value_output_is_the_distance_to_the_exact_output():
    cap = isotropic(n=200, d=8, Q=3, H=2, Lc=1)
    df = T.value_output(cap, heads_per_layer=2, layer_count=1)
    assert set(df["head"]) == {0, 1} and df["is_sink"].sum() == 2
    j = cap.queries.shape[1] - 1  # no decode steps in this capture: the last query
    g = df[df["head"] == 1]
    q, k, v = cap.queries[0, j, 1].double(), cap.keys[0, 0].double(), cap.values[0, 0].double()
    logits = (k @ q) * cap.scale
    o = torch.softmax(logits, 0) @ v
    np.testing.assert_allclose(g["logit"], logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g["log_dist"], (v - o).norm(dim=-1).log().numpy(), rtol=1e-4, atol=1e-5)
    s = T.summary("value-output", df.assign(prompt="p"))
    ref = g[["logit", "log_dist"]].corr(method="spearman").iloc[0, 1]  # pandas' own Spearman
    assert s.loc[s["head"] == 1, "spearman_logit_log_dist"].item() == pytest.approx(ref, abs=1e-9)


def test_value_norm_marks_a_small_sink_value():
    cap = isotropic(n=100, d=8, Q=1, H=1, Lc=2)
    cap.values[:, :, 0] *= 0.01
    df = T.value_norm(cap)
    assert len(df) == 2 * cap.n_prompt and df["is_sink"].sum() == 2
    s = T.summary("value-norm", df.assign(prompt="p"))
    assert (s["sink_over_median"] < 0.1).all()


def test_pairwise_similarity_of_identical_and_random_vectors():
    g = torch.Generator().manual_seed(0)
    same = torch.randn(1, 1, 1, 32, generator=g).expand(10, 2, 1, 32)
    rand = torch.randn(10, 2, 1, 32, generator=g)
    sim = I.similarity({"sink_key": same, "other_key": rand})
    assert np.allclose(sim.loc[sim.quantity == "sink_key", "mean_cos"], 1.0, atol=1e-5)
    r = sim[sim.quantity == "other_key"]
    x = rand[:, 0, 0].numpy()
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    m = x @ x.T
    expect = m[~np.eye(10, dtype=bool)]
    assert r.loc[r.layer == 0, "mean_cos"].item() == pytest.approx(expect.mean(), abs=1e-5)
    assert r.loc[r.layer == 0, "min_cos"].item() == pytest.approx(expect.min(), abs=1e-5)
    mat = I.matrix({"sink_key": same, "key_mean": rand}, layer=1)
    assert len(mat) == 2 * 100 and np.allclose(mat.loc[mat.quantity == "sink_key", "cos"], 1.0, atol=1e-5)


def test_essay_sentences_are_distinct_and_sized(monkeypatch):
    text = " ".join(f"Sentence number {i} has exactly eight words here." for i in range(60))
    monkeypatch.setattr("magicpig_tasks.experiments.haystack.essay_text", lambda: text)
    got = I.essay_sentences(50, seed=3)
    assert len(got) == len(set(got)) == 50 and all(len(s.split()) == 8 for s in got)
    with pytest.raises(ValueError, match="fewer than the 70"):
        I.essay_sentences(70)


def test_estimate_all_over_two_captures_labels_every_row(tmp_path):
    from magicpig.harness.cli import main

    paths = [isotropic(n=300, d=16, Q=4, H=2, Lc=2, seed=s).save(tmp_path / f"capture_300_p{s}.pt") for s in (0, 1)]
    out = tmp_path / "res"
    args = ["estimate", "all", "--out-dir", str(out), "--layers", "all", "--kl", "6,20", "--K", "6", "--L", "20",
            "--budgets", "0.05,0.2"]
    assert main(args + [a for p in paths for a in ("--capture", str(p))]) == 0
    heads = pd.read_csv(out / "error_topk_vs_oracle_heads.csv")
    assert set(heads["prompt"]) == {"capture_300_p0", "capture_300_p1"}
    for name in ("spread", "error", "mass_curve", "value_output", "error_topk_vs_oracle", "geometry_hist"):
        assert set(pd.read_csv(out / f"{name}.csv")["prompt"]) == {"capture_300_p0", "capture_300_p1"}, name
    err = pd.read_csv(out / "error.csv")
    assert set(err.groupby("prompt")["queries"].max()) == {4}  # 8 queries in total over the two captures
    summary = pd.read_csv(out / "error_summary.csv")
    assert summary["setting"].is_unique and (summary["prompts"] == 2).all()
    assert main(args + ["--capture", str(paths[0]), "--capture", str(paths[0])]) == 2  # same name twice
