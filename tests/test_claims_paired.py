"""The claims table's intervals (magicpig.harness.stats.paired) against reference implementations (scipy,
statsmodels), a published worked example of Newcombe's paired interval, and their behaviour at the edges."""
import math

import numpy as np
import pytest
from scipy import special, stats
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from magicpig.harness.stats.bootstrap import mean_interval
from magicpig.harness.stats.paired import (TaskInterval, betainc, clopper_pearson, expanded_level, level_interval,
                                           log_t_interval, mover, newcombe_paired, paper_interval, t_ppf,
                                           task_average, task_difference, wilson)


@pytest.mark.parametrize("a,b,x", [(0.5, 0.5, 0.1), (2.5, 3.5, 0.3), (1, 20, 0.05), (30, 2, 0.97), (0.5, 7, 0.8)])
def test_incomplete_beta_matches_scipy(a, b, x):
    assert betainc(a, b, x) == pytest.approx(special.betainc(a, b, x), rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("k,n", [(0, 20), (3, 20), (10, 20), (20, 20), (0, 36), (1, 400), (399, 400)])
def test_clopper_pearson_matches_scipy_exact(k, n):
    ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    lo, hi = clopper_pearson(k, n)
    assert lo == pytest.approx(ref.low, abs=1e-9) and hi == pytest.approx(ref.high, abs=1e-9)


@pytest.mark.parametrize("k,n", [(0, 20), (3, 20), (20, 20), (55, 100)])
def test_wilson_matches_statsmodels(k, n):
    lo, hi = wilson(k, n)
    ref = proportion_confint(k, n, alpha=0.05, method="wilson")
    assert lo == pytest.approx(ref[0], abs=1e-12) and hi == pytest.approx(ref[1], abs=1e-12)


@pytest.mark.parametrize("df", [1, 2, 3, 9, 40])
def test_t_quantile_matches_scipy(df):
    assert t_ppf(0.975, df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)


def test_newcombe_paired_on_the_published_example():
    """Bentur et al. (2009), airway hyper-responsiveness before/after transplant: table [[1, 1], [7, 12]];
    Fagerland, Lydersen & Laake (2014, Stat. Med. 33:2850, Table) give Newcombe's square-and-add interval
    -0.507 to -0.026 for the difference -0.286."""
    d, lo, hi = newcombe_paired(1, 1, 7, 12)
    assert d == pytest.approx(-6 / 21)
    assert round(lo, 3) == -0.507 and round(hi, 3) == -0.026


def test_newcombe_with_no_correlation_is_the_independent_hybrid_interval():
    """With disjoint sample ids the difference is unpaired: MOVER of two Wilson intervals, Newcombe's hybrid
    score interval for independent proportions, as statsmodels computes it."""
    a = {f"a{i}": 100.0 * (i < 14) for i in range(20)}
    b = {f"b{i}": 100.0 * (i < 9) for i in range(25)}
    part = task_difference("t", a, b)
    lo, hi = confint_proportions_2indep(14, 20, 9, 25, method="newcomb", compare="diff")
    assert part.lo == pytest.approx(100 * lo, abs=1e-9) and part.hi == pytest.approx(100 * hi, abs=1e-9)
    assert "unpaired" in part.how


def test_no_discordant_pair_does_not_collapse():
    for both, neither in ((20, 0), (0, 20), (10, 10)):
        d, lo, hi = newcombe_paired(both, 0, 0, neither)
        assert d == 0 and lo < -0.08 and hi > 0.08
    a = {str(i): 100.0 for i in range(20)}
    part = task_difference("t", a, dict(a))
    assert part.how == "Newcombe" and part.lo == pytest.approx(-16.11, abs=0.01) and part.hi > 16


def test_newcombe_covers_the_true_difference():
    """Coverage of the true paired difference near 95% (Newcombe reports about 95% for method 10), here at
    n=30 with a high agreement rate, where a Wald interval falls far short."""
    rng = np.random.default_rng(3)
    probs = np.array([0.80, 0.05, 0.10, 0.05])  # both right, first only, second only, neither
    true = probs[1] - probs[2]
    hits = 0
    for _ in range(2000):
        cells = rng.multinomial(30, probs)
        _, lo, hi = newcombe_paired(*cells)
        hits += lo <= true <= hi
    assert 0.92 <= hits / 2000 <= 0.99


def test_graded_differences_fall_back_to_the_exact_bound():
    """All differences zero: the bootstrap is [0, 0]; the interval is Clopper-Pearson's 97.5% bound on the
    rate of non-zero differences times the score range, on each side."""
    a = {str(i): 37.5 for i in range(20)}
    part = task_difference("t", a, dict(a))
    cp_hi = stats.binomtest(0, 20).proportion_ci(method="exact").high
    assert part.how == "bootstrap+exact"
    assert part.lo == pytest.approx(-100 * cp_hi) and part.hi == pytest.approx(100 * cp_hi)
    # three positive differences: the lower side stays the zero-count bound, the upper one grows
    b = dict(a)
    for i in range(3):
        b[str(i)] = 30.0
    part = task_difference("t", a, b)
    assert part.lo == pytest.approx(-100 * cp_hi)
    assert part.hi == pytest.approx(100 * stats.binomtest(3, 20).proportion_ci(method="exact").high)


def test_graded_differences_with_spread_use_the_bootstrap():
    rng = np.random.default_rng(0)
    base = rng.uniform(20, 80, 60)
    other = base + rng.normal(2, 5, 60)
    a = {str(i): float(v) for i, v in enumerate(other)}
    b = {str(i): float(v) for i, v in enumerate(base)}
    part = task_difference("t", a, b)
    iv = mean_interval(other - base, level=expanded_level(60, 0.95))  # the expanded percentile bootstrap
    assert part.how == "bootstrap" and (part.lo, part.hi) == pytest.approx((iv.lo, iv.hi))
    plain = mean_interval(other - base)
    assert part.lo < plain.lo and part.hi > plain.hi


def test_single_level_binary_is_clopper_pearson():
    part = level_interval("niah", [0.0] * 36)
    assert part.how == "Clopper-Pearson" and part.lo == 0
    assert part.hi == pytest.approx(100 * stats.binomtest(0, 36).proportion_ci(method="exact").high)
    assert part.hi < 10 < level_interval("niah", [0.0] * 35).hi  # 36 samples: the bound passes under 10


def test_mover_of_symmetric_intervals_adds_half_widths_in_quadrature():
    parts = [TaskInterval("a", 10, 1.0, -2.0, 4.0, "x"), TaskInterval("b", 10, 3.0, 2.0, 4.0, "x")]
    value, lo, hi = mover(parts, [0.5, 0.5])
    assert value == 2.0 and lo == pytest.approx(2 - math.sqrt(1.5 ** 2 + 0.5 ** 2))
    assert hi == pytest.approx(2 + math.sqrt(1.5 ** 2 + 0.5 ** 2))
    # a difference (weights +1, -1) takes the lower side of the first and the upper side of the second
    asym = [TaskInterval("a", 10, 5.0, 4.0, 9.0, "x"), TaskInterval("b", 10, 1.0, 0.0, 3.0, "x")]
    value, lo, hi = mover(asym, [1.0, -1.0])
    assert value == 4.0 and lo == pytest.approx(4 - math.hypot(1, 2)) and hi == pytest.approx(4 + math.hypot(4, 1))
    assert task_average(parts).n == 20


def test_log_t_interval_matches_scipy():
    r = [2.0, 3.5, 2.8, 4.1]
    iv = log_t_interval(r)
    x = np.log(r)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert (iv.lo, iv.hi) == pytest.approx((math.exp(lo), math.exp(hi)))
    one = log_t_interval([3.0])
    assert one.n == 1 and one.lo == 0 and math.isinf(one.hi)


def test_paper_power_of_the_ruler_near_dense_claim():
    """94.2 vs 91.8 at 50 x 13: even with every discordant pair one way, the lower bound is under -3."""
    value, lo, hi = paper_interval(91.8, 94.2, 50, 13, agreement=True)
    assert value == pytest.approx(-2.4) and lo < -3 < hi
    _, lo_gsm, _ = paper_interval(72.7, 57.9, 1319, 1, agreement=False)
    assert lo_gsm > 5
