"""Bootstrap intervals on known cases, and the claims table's verdicts on synthetic numbers (every verdict
reachable)."""
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from magicpig.harness.report import build_report
from magicpig.harness.report.claims import evaluate
from magicpig.harness.report.claims_context import Context
from magicpig.harness.results_tree import load_reference
from magicpig.harness.stats.bootstrap import Interval, mean_interval, stratified_interval
from magicpig.harness.stats.verdicts import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Verdict, combine, decide


# ---- bootstrap ---------------------------------------------------------------------------------------------
def test_constant_samples_give_a_point_interval():
    iv = mean_interval([1.0] * 30)
    assert (iv.value, iv.lo, iv.hi, iv.n) == (1.0, 1.0, 1.0, 30)
    assert mean_interval([100.0] * 5).text() == "100.0 [100.0, 100.0] (n=5)"


def test_interval_is_seeded_and_brackets_the_mean():
    x = np.random.default_rng(1).normal(50, 10, 40)
    a, b = mean_interval(x), mean_interval(x)
    assert a == b
    assert a.lo < x.mean() < a.hi
    # percentile bootstrap of a mean ~ normal interval: half-width ~ 1.96 s / sqrt(n)
    half = 1.96 * x.std(ddof=1) / np.sqrt(len(x))
    assert abs((a.hi - a.lo) / 2 - half) < 0.25 * half


def test_coverage_of_the_true_mean_is_near_95_percent():
    rng = np.random.default_rng(7)
    hits = 0
    trials = 200
    for t in range(trials):
        x = rng.binomial(1, 0.7, 60) * 100.0  # per-sample string-match scores
        iv = mean_interval(x, resamples=1000, seed=t)
        hits += iv.lo <= 70.0 <= iv.hi
    assert 0.88 <= hits / trials <= 0.99


def test_stratified_average_is_the_mean_of_task_means():
    iv = stratified_interval({"a": [100.0] * 10, "b": [0.0, 0.0]})
    assert iv.value == 50.0 and iv.n == 12 and iv.lo == iv.hi == 50.0  # within-task constant: no spread


# ---- verdict logic ---------------------------------------------------------------------------------------------
def test_decide_reaches_every_verdict():
    assert decide(Interval(0.5, 0.1, 0.9, 50), 0.0, min_n=20).status == REPRODUCED
    assert decide(Interval(-0.5, -0.9, -0.1, 50), 0.0, min_n=20).status == NOT_REPRODUCED
    v = decide(Interval(0.0, -0.5, 0.5, 50), 0.0, min_n=20)
    assert v.status == NOT_TESTABLE and v.text() == "not testable here (n=50: interval [-0.5, 0.5])"
    few = decide(Interval(0.5, 0.5, 0.5, 3), 0.0, min_n=20)
    assert few.status == NOT_TESTABLE and "n=3: interval [0.5, 0.5]" in few.text()
    assert decide(Interval(float("nan"), float("nan"), float("nan"), 0), 0.0, min_n=1).reason == "missing data"
    # "below" claims
    assert decide(Interval(2.0, 0.0, 5.0, 30), 10.0, min_n=20, above=False).status == REPRODUCED
    assert decide(Interval(50.0, 40.0, 60.0, 30), 10.0, min_n=20, above=False).status == NOT_REPRODUCED


def test_combine():
    r, n, t = Verdict(REPRODUCED), Verdict(NOT_REPRODUCED, "x"), Verdict(NOT_TESTABLE, "y")
    assert combine([r, r]).status == REPRODUCED
    assert combine([r, t]).status == NOT_TESTABLE and combine([r, t]).reason == "y"
    assert combine([r, t, n]).status == NOT_REPRODUCED
    assert combine([]).status == NOT_TESTABLE


# ---- claims on synthetic results --------------------------------------------------------------------------------
def write_run(root: Path, task, length, method, scores, cost):
    folder = root / task / str(length) / method.replace(":", "@").replace(",", "+").replace("=", "-")
    folder.mkdir(parents=True)
    (folder / "predictions.jsonl").write_text(
        "".join(json.dumps({"id": f"{task}/{i}", "score": s}) + "\n" for i, s in enumerate(scores)))
    (folder / "metrics.json").write_text(json.dumps(
        {"task": task, "length": length, "method": method, "score": float(np.mean(scores)), "cost": cost,
         "status": "ok", "counts": {"scored": len(scores)}}))


def claim(results: Path, cid: str):
    return {c.id: c for c in evaluate(results, load_reference())}[cid]


def scores(n, hits):
    return [100.0] * hits + [0.0] * (n - hits)


@pytest.mark.parametrize("drop,n,status", [(0, 130, REPRODUCED), (20, 40, NOT_REPRODUCED), (0, 40, NOT_TESTABLE),
                                           (0, 3, NOT_TESTABLE)])
def test_ruler_near_dense(tmp_path, drop, n, status):
    """All pairs agreeing decides 'within 3 points' only from about 125 pairs (Newcombe's bound), not at 40."""
    acc = tmp_path / "accuracy"
    base = scores(n, n)  # dense right on every sample
    ours = base[:]
    for i in range(int(round(n * drop / 100))):
        ours[i] = 0.0
    write_run(acc, "ruler/vt", 4096, "dense", base, 1.0)
    write_run(acc, "ruler/vt", 4096, "magicpig:K=10,L=150", ours, 0.025)
    c = claim(tmp_path, "ruler_near_dense")
    assert c.verdict.status == status, c.verdict.text()
    if n == 3:
        assert "vt (n=3 < 10)" in c.verdict.text()


def test_ruler_near_dense_fails_outside_the_cost_range(tmp_path):
    acc = tmp_path / "accuracy"
    write_run(acc, "ruler/vt", 4096, "dense", scores(40, 40), 1.0)
    write_run(acc, "ruler/vt", 4096, "magicpig:K=10,L=150", scores(40, 40), 0.3)
    c = claim(tmp_path, "ruler_near_dense")
    assert c.verdict.status == NOT_REPRODUCED and "outside" in c.verdict.reason


def test_quest_lower_and_topk_aggregation(tmp_path):
    acc = tmp_path / "accuracy"
    write_run(acc, "ruler/cwe", 4096, "magicpig:K=10,L=150", scores(40, 36), 0.02)
    write_run(acc, "ruler/cwe", 4096, "quest:ratio=0.04", scores(40, 20), 0.05)
    write_run(acc, "ruler/cwe", 4096, "topk:budget=0.02", scores(40, 20), 0.025)
    assert claim(tmp_path, "ruler_quest_lower").verdict.status == REPRODUCED
    assert claim(tmp_path, "ruler_aggregation_vs_topk").verdict.status == REPRODUCED
    # a cheaper Quest run is not compared; no comparable run -> missing data
    (acc / "ruler/cwe/4096/quest@ratio-0.04/metrics.json").write_text(json.dumps(
        {"task": "ruler/cwe", "length": 4096, "method": "quest:ratio=0.04", "score": 50.0, "cost": 0.01,
         "status": "ok"}))
    c = claim(tmp_path, "ruler_quest_lower")
    assert c.verdict.status == NOT_TESTABLE and "missing data" in c.verdict.reason


def test_topk_beating_magicpig_on_aggregation_is_not_reproduced(tmp_path):
    acc = tmp_path / "accuracy"
    write_run(acc, "ruler/fwe", 4096, "magicpig:K=10,L=150", scores(40, 10), 0.02)
    write_run(acc, "ruler/fwe", 4096, "topk:budget=0.02", scores(40, 35), 0.02)
    assert claim(tmp_path, "ruler_aggregation_vs_topk").verdict.status == NOT_REPRODUCED


def _error_files(est: Path, ratio: float, top_mass: float, layers=range(1, 6), prompts=("p0", "p1", "p2", "p3")):
    est.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"layer": l, "head": 0, "dense_in_magicpig": False, "top_mass_without_sink": top_mass}
                  for l in layers]).to_csv(est / "spread.csv", index=False)
    pd.DataFrame([{"prompt": p, "layer": l, "dense_in_magicpig": False, "unique_keys": 10,
                   "topk_over_oracle": ratio * (1 + 0.01 * l + 0.05 * k)}
                  for k, p in enumerate(prompts) for l in layers]).to_csv(est / "error_topk_vs_oracle.csv", index=False)


@pytest.mark.parametrize("ratio,mass,status", [(3.0, 0.6, REPRODUCED), (0.5, 0.6, NOT_REPRODUCED),
                                               (3.0, 0.95, NOT_TESTABLE)])
def test_topk_error_above_oracle(tmp_path, ratio, mass, status):
    _error_files(tmp_path / "estimation", ratio, mass)
    assert claim(tmp_path, "topk_error_above_oracle").verdict.status == status


@pytest.mark.parametrize("ratio,status", [(3.0, REPRODUCED), (0.5, NOT_REPRODUCED)])
def test_topk_error_above_oracle_decides_on_the_long_tailed_heads(tmp_path, ratio, status):
    """With the per-head table only the long-tailed heads count: concentrated heads where TopK is as good
    as sampling (ratio 1) do not dilute the test, and the verdict names the heads."""
    est = tmp_path / "estimation"
    est.mkdir(parents=True)
    rows = [{"prompt": f"p{k}", "layer": l, "head": h, "dense_in_magicpig": False,
             "top_mass_without_sink": 0.6 if h == 0 else 0.99, "oracle_budget": b,
             "topk_over_oracle": (ratio if h == 0 else 1.0) * (1 + 0.01 * l + 0.03 * k)}
            for k in range(4) for l in range(1, 6) for h in range(3) for b in (0.01, 0.05)]
    rows.append({"prompt": "p0", "layer": 0, "head": 1, "dense_in_magicpig": True, "top_mass_without_sink": 0.5,
                 "oracle_budget": 0.01, "topk_over_oracle": 0.1})  # a dense layer: not counted
    pd.DataFrame(rows).to_csv(est / "error_topk_vs_oracle_heads.csv", index=False)
    c = claim(tmp_path, "topk_error_above_oracle")
    assert c.verdict.status == status
    assert "5 of 15 sparse-layer heads long-tailed (L1h0, L2h0" in c.measured and "n=4 prompts" in c.measured
    assert "), in 4 of 4 prompts: " in c.measured


@pytest.mark.parametrize("frac,niah,status", [(0.0005, 0, REPRODUCED), (0.004, 0, NOT_REPRODUCED),
                                              (0.0005, 40, NOT_REPRODUCED), (0.0005, None, NOT_TESTABLE)])
def test_no_centering_collapse(tmp_path, frac, niah, status):
    est = tmp_path / "estimation"
    est.mkdir()
    pd.DataFrame([{"prompt": f"p{k}", "layer": 3, "dense_in_magicpig": False, "K": 10, "L": 150, "centering": c,
                   "cost2": frac * (0.9 + 0.1 * k) if not c else 0.02} for k in range(4)
                  for c in (False, True)]).to_csv(est / "centering.csv")
    if niah is not None:
        abl = tmp_path / "ablations" / "centering"
        write_run(abl, "ruler/niah_single_1", 4096, "magicpig:K=10,L=150,centering=false", scores(40, niah), frac)
        write_run(abl, "ruler/niah_single_1", 4096, "magicpig:K=10,L=150", scores(40, 38), 0.02)
    assert claim(tmp_path, "no_centering_collapse").verdict.status == status


@pytest.mark.parametrize("scale,status", [(1.2, REPRODUCED), (5.0, NOT_REPRODUCED)])
def test_table9_fraction(tmp_path, scale, status):
    ref = load_reference()["sampled_fraction_table9"]
    est = tmp_path / "estimation"
    est.mkdir()
    pd.DataFrame([{"K": K, "L": L, "measured": scale * f} for K, row in ref["K"].items()
                  for L, f in zip(ref["L"], row)]).to_csv(est / "kl_grid_summary.csv", index=False)
    assert claim(tmp_path, "table9_fraction").verdict.status == status
    assert claim(tmp_path / "none", "table9_fraction").verdict.status == NOT_TESTABLE


def test_speedup_needs_a_gpu_and_three_runs(tmp_path):
    thr = tmp_path / "throughput"
    thr.mkdir()
    rows = [{"device": "cpu", "model": "shape:llama-3.1-8b", "context": 98304, "batch": 1, "method": m, "backend": b,
             "tokens_per_s": t, "fits": True, "search": ""}
            for m, b, t in (("dense", "stock", 10), ("magicpig", "offload", 12))]
    pd.DataFrame(rows).to_csv(thr / "decode.csv", index=False)
    pd.DataFrame([{"hardware": "L20", "speedup": 4.9, "cpu_kernel": "ours"}]).to_csv(
        thr / "projection_paper_hardware.csv", index=False)
    c = claim(tmp_path, "throughput_speedup")
    assert c.verdict.status == NOT_TESTABLE and "no GPU" in c.verdict.reason
    assert "PROJECTION" in c.measured and "4.90x" in c.measured
    for r in rows:
        r["device"] = "cuda:0"
    pd.DataFrame(rows).to_csv(thr / "decode.csv", index=False)
    c = claim(tmp_path, "throughput_speedup")  # one file without run_id: one run, whatever its ratio
    assert c.verdict.status == NOT_TESTABLE
    assert "1 independent run" in c.verdict.reason and "needs 3" in c.verdict.reason
    for ratios, status in (((1.2, 1.25, 1.15), REPRODUCED), ((0.8, 0.82, 0.78), NOT_REPRODUCED)):
        runs = [dict(r, run_id=f"run{k}", tokens_per_s=10 * ratio if r["method"] == "magicpig" else 10)
                for k, ratio in enumerate(ratios) for r in rows]
        pd.DataFrame(runs).to_csv(thr / "decode.csv", index=False)
        c = claim(tmp_path, "throughput_speedup")
        assert c.verdict.status == status, c.verdict.text()
        assert "3 runs" in c.measured and "Student t" in c.measured


def test_speedup_quote_says_which_kernel_efficiency_was_projected_and_why(tmp_path):
    """A two-row decode fit is refused: the claims line quotes the projection at the kernel CSV's measured
    efficiency and names the refusal's reasons."""
    from magicpig.harness.cli import main

    fixtures = Path(__file__).parent / "fixtures"
    two = tmp_path / "two.csv"
    rows = pd.read_csv(fixtures / "throughput_decode_cpu.csv").query("not under_load and fits and context == 8192")
    rows[(rows["batch"] == 1) & (rows["backend"] != "stock")].to_csv(two, index=False)
    assert main(["project", "--kernel-csv", str(fixtures / "throughput_kernel_cpu.csv"), "--decode-csv", str(two),
                 "--out-dir", str(tmp_path / "throughput")]) == 0
    text = claim(tmp_path, "throughput_speedup").measured
    assert "CPU kernel this suite's kernel (30% of streaming bandwidth, measured by bench kernel)" in text
    assert "[median bandwidth_ratio of 4 unflagged kernel rows; decode-row fit refused: 2 unflagged rows" in text
    assert "CPU kernel original MagicPIG kernel (8% of streaming bandwidth) [the original kernels'" in text
    # the simulated RTX 4090's projected ratio is over full attention on the CPU at 150 GB/s, beside the paper's
    assert re.search(r"RTX 4090 \(simulated: L20 capped at 24 GB\) \d+\.\d\dx over full attention on the CPU at "
                     r"a theoretical 150 GB/s \(paper 3\.3x\)", text), text
    assert "does not fit" not in text


def test_every_listed_claim_has_a_test_and_the_report_starts_with_the_table(tmp_path):
    ref = load_reference()
    items = ref["claims"]["items"]
    assert len({c["id"] for c in items}) == len(items) >= 7
    assert all({"id", "text", "needs", "test", "kind"} <= set(c) for c in items)
    results = evaluate(tmp_path, ref)
    assert all(r.verdict.status == NOT_TESTABLE for r in results)  # an empty tree decides nothing
    assert Context(tmp_path, ref).min_samples == ref["claims"]["min_samples"]
    report = build_report(tmp_path, tmp_path / "fig", "t").read_text()
    assert report.index("## Claims") < report.index("## RULER")
    assert report.count("**not testable here") == len(items)


# ---- minimum detectable effect on every undecided line ---------------------------------------------------------
def _thin_ruler(root: Path, n: int, tasks=("niah_single_1", "vt", "cwe")):
    for t in tasks:
        write_run(root / "accuracy", f"ruler/{t}", 16384, "dense", scores(n, n - 1), 1.0)
        write_run(root / "accuracy", f"ruler/{t}", 16384, "magicpig:K=10,L=150", scores(n, n - 2), 0.025)


@pytest.mark.parametrize("setup", ["empty", "thin"])
def test_every_not_testable_line_states_its_minimum_detectable_effect(tmp_path, setup):
    if setup == "thin":
        _thin_ruler(tmp_path, 3)
    results = evaluate(tmp_path, load_reference())
    open_ = [c for c in results if c.verdict.status == NOT_TESTABLE]
    assert len(open_) >= 5
    for c in open_:
        assert "minimum detectable effect: " in c.verdict.text(), (c.id, c.verdict.text())


def test_minimum_detectable_effect_of_thin_tasks_follows_the_formula(tmp_path):
    """3 tasks of 3 pairs, one pair differing by 100 points each: s^2 = 3333.3; SE = sqrt(3 x s^2 / 3) / 3."""
    from statistics import NormalDist
    _thin_ruler(tmp_path, 3)
    text = claim(tmp_path, "ruler_near_dense").verdict.text()
    z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)
    assert f"+-{z * math.sqrt(3 * (1e4 / 3) / 3) / 3:.1f} points around the margin at n=3, 3, 3 pairs" in text
    assert "below min_samples the test does not run" in text


def test_minimum_detectable_effect_of_a_straddling_interval_is_2_8_standard_errors():
    from magicpig.harness.stats import detectable
    assert detectable.from_interval(-5.0, 5.0) == pytest.approx(5.0 / 1.959964 * (1.959964 + 0.841621), rel=1e-5)
    assert detectable.from_pairs([(10, float("nan"))]) == pytest.approx(2.8016 * math.sqrt(1000 / 10), rel=1e-4)
    assert detectable.from_units(1, float("nan")) == math.inf


def test_ruler_straddle_shows_the_mde_from_its_interval(tmp_path):
    for t in ("vt", "cwe"):
        write_run(tmp_path / "accuracy", f"ruler/{t}", 16384, "dense", scores(20, 15), 1.0)
        write_run(tmp_path / "accuracy", f"ruler/{t}", 16384, "magicpig:K=10,L=150", scores(20, 14), 0.025)
    v = claim(tmp_path, "ruler_near_dense").verdict
    assert v.status == NOT_TESTABLE and "straddles -3" in v.reason
    assert re.search(r"minimum detectable effect: .*\+-\d+\.\d points around the margin \(n=40 pairs over 2 tasks, "
                     r"from this interval\)", v.text())


# ---- Holm's correction over the decided claims ---------------------------------------------------------------------
def _holm_claims(monkeypatch, pvalues):
    """Claims of a stand-in test kind decided when its p-value is within 1 - the interval level in force."""
    from magicpig.harness.report import claims as C
    from magicpig.harness.stats.paired import current_level

    def by_p(claim, ctx):  # an interval whose lower bound clears 0 exactly when p <= 1 - level
        v = decide(Interval(1.0, (1.0 - current_level()) - claim["p"] + 1e-12, 2.0, 10), 0.0, min_n=1)
        return f"p={claim['p']} at {current_level():.4g}", v
    monkeypatch.setitem(C.TESTS, "by_p", by_p)
    monkeypatch.setattr(C, "FAMILY", C.FAMILY | {"by_p"})
    return {"claims": {"items": [{"id": f"c{i}", "text": "", "kind": "by_p", "p": p} for i, p in enumerate(pvalues)]}}


@pytest.mark.parametrize("seed", range(6))
def test_holm_confirms_what_statsmodels_holm_rejects(tmp_path, monkeypatch, seed):
    """Five tested claims with p-values up to 0.06: the family is all five (decided or not), as statsmodels'."""
    from statsmodels.stats.multitest import multipletests
    p = np.round(np.random.default_rng(seed).uniform(0, 0.06, 5), 4)
    ref = _holm_claims(monkeypatch, list(p))
    results = evaluate(tmp_path, ref)
    reject = multipletests(p, alpha=0.05, method="holm")[0]
    for c, r, pv in zip(results, reject, p):
        decided_95 = pv <= 0.05
        assert (c.verdict.status == REPRODUCED) == bool(r), (p, c.id, c.verdict.text())
        assert (c.unadjusted is not None) == decided_95
        if decided_95 and not r:
            assert "not at the adjusted" in c.verdict.text() and "unadjusted 0.95: reproduced" in _cell(c)


def _cell(c):
    from magicpig.harness.report.claims import verdict_cell
    return verdict_cell(c)


def test_holm_family_and_unadjusted_verdict_in_the_rendered_table(tmp_path):
    """A strong centering claim and a marginal TopK/oracle claim (t = 3.6 on 4 prompts: passes at 95%, not at
    97.5%): Holm confirms the strong one at 97.5%, then the marginal one at 95%; Table 9 stays outside."""
    from magicpig.harness.report.claims import claims_section
    est = tmp_path / "estimation"
    est.mkdir()
    pd.DataFrame([{"prompt": f"p{k}", "layer": 3, "dense_in_magicpig": False, "K": 10, "L": 150, "centering": False,
                   "cost2": 0.0005 * (0.9 + 0.05 * k)} for k in range(5)]).to_csv(est / "centering.csv", index=False)
    abl = tmp_path / "ablations" / "centering"
    write_run(abl, "ruler/niah_single_1", 4096, "magicpig:K=10,L=150,centering=false", scores(60, 0), 0.0005)
    write_run(abl, "ruler/niah_single_1", 4096, "magicpig:K=10,L=150", scores(60, 57), 0.02)
    logs = 0.36 + 0.2 * np.array([-1.2247449, 0.0, 1.2247449, 0.0])  # mean 0.36, sd 0.2: t = 3.6
    pd.DataFrame([{"prompt": f"p{k}", "layer": layer, "head": 0, "dense_in_magicpig": False,
                   "top_mass_without_sink": 0.6, "oracle_budget": 0.02, "topk_over_oracle": math.exp(x)}
                  for k, x in enumerate(logs) for layer in range(1, 4)]).to_csv(est / "error_topk_vs_oracle_heads.csv",
                                                                                  index=False)
    t9 = load_reference()["sampled_fraction_table9"]
    pd.DataFrame([{"K": K, "L": L, "measured": f} for K, row in t9["K"].items()
                  for L, f in zip(t9["L"], row)]).to_csv(est / "kl_grid_summary.csv", index=False)
    by_id = {c.id: c for c in evaluate(tmp_path, load_reference())}
    assert by_id["no_centering_collapse"].holm.startswith("Holm step 1, family of 2: holds at 0.975")
    assert by_id["topk_error_above_oracle"].holm.startswith("Holm step 2, family of 2: holds at 0.95")
    assert by_id["table9_fraction"].holm.startswith("outside Holm's family")
    assert "at Holm's level: " in by_id["no_centering_collapse"].measured
    text = "\n".join(claims_section(tmp_path, load_reference()))
    assert "this report's family: `topk_error_above_oracle`, `no_centering_collapse`" in text
    assert "unadjusted 0.95: reproduced" in text and "Minimum detectable effect (MDE)" in text


def test_every_claim_quotes_the_papers_words_for_its_margin_and_baseline(tmp_path):
    """claims.items[*].paper_words: at least one verbatim quote per claim, each with where it stands in the paper
    (section, table, figure or appendix), shown in the rendered table's test column."""
    from magicpig.harness.report.claims import claims_section
    items = load_reference()["claims"]["items"]
    for item in items:
        words = item.get("paper_words") or []
        assert any("“" in w and "”" in w for w in words), item["id"]
        assert all(re.search(r"\((Sec\.|Table|Fig\.|App\.)", w) or "suite" in w for w in words), item["id"]
    text = "\n".join(claims_section(tmp_path, load_reference()))
    assert text.count("The paper's words: ") == len(items)
    assert "oracle sampling estimation can reduce relative error by up to 4×.” (Sec. 3.2" in text
    assert "(less than 0.1%) can be sampled by the query without centering" in text
