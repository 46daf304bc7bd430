"""Coverage simulation of every interval procedure the claims table uses (magicpig.harness.stats.paired).

Each procedure is run, as the claims call it, on synthetic data whose true value is known, at n = 10, 20, 40
and 100, with ties and values at the bounds of the score range (0/100 scores with p near 0 and 1, graded
scores piled on 0 or 100, differences that are almost all zero). The share of replicates whose nominal 95%
interval holds the true value must reach

    ACCEPT(reps) = 0.95 - ALLOWANCE - 3 * sqrt(0.95 * 0.05 / reps)

3 binomial standard errors of the simulated coverage below nominal (a procedure at exactly 95% fails with
probability about 0.1% per cell), less ALLOWANCE for the approximate procedures (score, MOVER, bootstrap,
t intervals on skewed data), whose true coverage may sit a little under nominal at some parameter points;
exact Clopper-Pearson gets no allowance. At 4000 replicates the band is coverage >= 0.930 (approximate)
and >= 0.940 (exact). The RNG is seeded, so the test is deterministic.

Point values are compared with scipy / statsmodels where they implement the same procedure.
"""
import math
from functools import lru_cache

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from magicpig.harness.stats.paired import (SCORE_RANGE, TaskInterval, clopper_pearson, graded_bounds,
                                           log_t_interval, mean_t_interval, mover, newcombe_paired,
                                           unit_mean_bounds)

NOMINAL, REPS, ALLOWANCE = 0.95, 4000, 0.01
NS = (10, 20, 40, 100)
LEVELS = np.array([0.0, 25.0, 50.0, 75.0, 100.0])  # graded scores with ties (e.g. partial-credit string match)


def accept(reps: int, exact: bool = False) -> float:
    return NOMINAL - (0.0 if exact else ALLOWANCE) - 3.0 * math.sqrt(NOMINAL * (1 - NOMINAL) / reps)


def covered(lo, hi, truth) -> float:
    return float(np.mean((np.asarray(lo) <= truth) & (truth <= np.asarray(hi))))


def rng(*key) -> np.random.Generator:
    return np.random.default_rng([20261204, *key])


@lru_cache(maxsize=None)
def _newcombe(both: int, first: int, second: int, neither: int) -> tuple[float, float]:
    return newcombe_paired(both, first, second, neither)[1:]


def newcombe_runs(cells: np.ndarray) -> np.ndarray:
    """(R, 2) Newcombe bounds in points for (R, 4) cell counts (both, first only, second only, neither)."""
    return SCORE_RANGE * np.array([_newcombe(*map(int, c)) for c in cells])


def test_the_acceptance_band_at_the_replicate_count():
    assert accept(4000) == pytest.approx(0.9297, abs=1e-4) and accept(4000, exact=True) == pytest.approx(0.9397,
                                                                                                         abs=1e-4)


# ---- exact Clopper-Pearson (a single 0/100 score level) -----------------------------------------------------
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("p", [0.005, 0.05, 0.5, 0.95, 0.995])
def test_clopper_pearson_covers(n, p):
    k = rng(1, n, int(p * 1000)).binomial(n, p, REPS)
    table = np.array([clopper_pearson(i, n) for i in range(n + 1)])
    assert covered(table[k, 0], table[k, 1], p) >= accept(REPS, exact=True)


@pytest.mark.parametrize("n", NS)
def test_clopper_pearson_matches_statsmodels_at_every_count(n):
    ref = np.array(proportion_confint(np.arange(n + 1), n, alpha=0.05, method="beta")).T
    ours = np.array([clopper_pearson(i, n) for i in range(n + 1)])
    assert ours == pytest.approx(np.nan_to_num(ref, nan=0.0), abs=1e-9)


# ---- paired 0/100 scores: Newcombe per task, MOVER over tasks ----------------------------------------------------
# (both right, first only, second only): agreement near the floor and the ceiling, a zero cell, high discordance
PAIRED_CELLS = [(0.01, 0.005, 0.005), (0.97, 0.01, 0.0), (0.0, 0.02, 0.0), (0.4, 0.1, 0.05), (0.85, 0.1, 0.02),
                (0.45, 0.05, 0.05), (0.2, 0.3, 0.2)]


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("cell", PAIRED_CELLS)
def test_newcombe_paired_covers(n, cell):
    both, first, second = cell
    counts = rng(2, n, PAIRED_CELLS.index(cell)).multinomial(n, [both, first, second, 1 - both - first - second],
                                                             size=REPS)
    bounds = newcombe_runs(counts)
    assert covered(bounds[:, 0], bounds[:, 1], SCORE_RANGE * (first - second)) >= accept(REPS)


@pytest.mark.parametrize("n", NS)
def test_mover_over_tasks_covers(n):
    """RULER-style task average of 4 paired differences, the tasks at different places of the score range."""
    tasks = [PAIRED_CELLS[i] for i in (1, 3, 4, 6)]
    g = rng(3, n)
    per_task = []
    for both, first, second in tasks:
        counts = g.multinomial(n, [both, first, second, 1 - both - first - second], size=REPS)
        est = SCORE_RANGE * (counts[:, 1] - counts[:, 2]) / n
        per_task.append((est, newcombe_runs(counts)))
    lo, hi = np.empty(REPS), np.empty(REPS)
    for r in range(REPS):
        parts = [TaskInterval("", n, float(e[r]), float(b[r, 0]), float(b[r, 1]), "Newcombe") for e, b in per_task]
        _, lo[r], hi[r] = mover(parts, [0.25] * 4)
    truth = SCORE_RANGE * np.mean([first - second for _, first, second in tasks])
    assert covered(lo, hi, truth) >= accept(REPS)


# ---- graded scores: the bootstrap, hulled with the Clopper-Pearson bound when few values move --------------------
def graded_pairs(g, n: int, pa, pb, same: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(R, n) paired scores on LEVELS: B repeats A's score with probability ``same``, else draws its own."""
    a = g.choice(LEVELS, size=(REPS, n), p=pa)
    b = np.where(g.random((REPS, n)) < same, a, g.choice(LEVELS, size=(REPS, n), p=pb))
    return a, b, float((LEVELS @ np.asarray(pa) - LEVELS @ np.asarray(pb)) * (1 - same))


GRADED = {  # name: (scores of A, scores of B, share of pairs that tie)
    "middle": ([0.1, 0.2, 0.3, 0.2, 0.2], [0.2, 0.2, 0.3, 0.2, 0.1], 0.5),
    "ceiling": ([0, 0, 0.02, 0.08, 0.9], [0, 0, 0.05, 0.1, 0.85], 0.7),
    "mostly_tied_at_floor": ([0.9, 0.05, 0.03, 0.01, 0.01], [0.95, 0.03, 0.01, 0.01, 0.0], 0.9),
    "no_ties": ([0.1, 0.2, 0.3, 0.2, 0.2], [0.3, 0.3, 0.2, 0.1, 0.1], 0.0),
}


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("name", sorted(GRADED))
def test_graded_paired_difference_covers(n, name):
    a, b, truth = graded_pairs(rng(4, n, sorted(GRADED).index(name)), n, *GRADED[name])
    _, lo, hi, _ = graded_bounds(a - b, floor=-SCORE_RANGE, ceil=SCORE_RANGE, centre="zero")
    assert covered(lo, hi, truth) >= accept(REPS)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("p", [[0.0, 0.0, 0.01, 0.03, 0.96], [0.9, 0.04, 0.03, 0.02, 0.01], [0.2, 0.2, 0.2, 0.2, 0.2]])
def test_graded_level_covers(n, p):
    x = rng(5, n, int(p[0] * 100)).choice(LEVELS, size=(REPS, n), p=p)
    _, lo, hi, _ = graded_bounds(x, floor=0.0, ceil=SCORE_RANGE, centre="mode")
    assert covered(lo, hi, float(LEVELS @ np.asarray(p))) >= accept(REPS)


@pytest.mark.parametrize("n", NS)
def test_paired_t_cross_check_on_graded_scores(n):
    """Where the differences spread (no pile-up at a bound), the bootstrap interval agrees with the paired
    Student t interval (scipy) to a small share of its width, and both cover; where almost every pair ties
    at the floor, the paired t collapses and undercovers while the claims' interval keeps its coverage."""
    g = rng(6, n)
    a = g.integers(0, 21, size=(REPS, n)) * 5.0  # F1-like scores in steps of 5: differences rarely tie at 0
    b = np.clip(a - g.integers(-6, 9, size=(REPS, n)) * 5.0, 0.0, SCORE_RANGE)
    grid_a, grid_k = np.meshgrid(np.arange(21) * 5.0, np.arange(-6, 9) * 5.0)  # every equally likely (a, shift)
    truth = float(np.mean(grid_a - np.clip(grid_a - grid_k, 0.0, SCORE_RANGE)))
    d = a - b
    mean, lo, hi, joined = graded_bounds(d, floor=-SCORE_RANGE, ceil=SCORE_RANGE, centre="zero")
    tlo, thi = stats.t.interval(NOMINAL, n - 1, loc=d.mean(axis=1), scale=stats.sem(d, axis=1))
    assert mean == pytest.approx(d.mean(axis=1)) and (~joined).sum() >= REPS // 4
    boot = ~joined
    assert np.median((np.abs(lo - tlo) + np.abs(hi - thi))[boot]) / np.median((thi - tlo)[boot]) < 0.1
    assert covered(lo, hi, truth) >= accept(REPS) and covered(tlo, thi, truth) >= accept(REPS)
    a, b, truth = graded_pairs(rng(7, n), n, *GRADED["mostly_tied_at_floor"])
    d = a - b
    _, lo, hi, _ = graded_bounds(d, floor=-SCORE_RANGE, ceil=SCORE_RANGE, centre="zero")
    sem = np.nan_to_num(stats.sem(d, axis=1))
    half = stats.t.ppf(0.975, n - 1) * sem
    mean_d = d.mean(axis=1)
    assert covered(lo, hi, truth) >= accept(REPS)
    assert covered(mean_d - half, mean_d + half, truth) < accept(REPS)


# ---- Student t over units (prompts, runs) ---------------------------------------------------------------------------
@pytest.mark.parametrize("n", NS)
def test_log_t_interval_covers_the_geometric_mean_ratio(n):
    """Ratios per prompt, log-normal around a true geometric mean of 1.6 (TopK/oracle error ratios)."""
    logs = rng(8, n).normal(math.log(1.6), 0.5, size=(REPS, n))
    ivs = [log_t_interval(np.exp(row)) for row in logs]
    assert covered([iv.lo for iv in ivs], [iv.hi for iv in ivs], 1.6) >= accept(REPS)


@pytest.mark.parametrize("n", NS)
def test_mean_t_interval_covers_a_skewed_fraction_near_zero(n):
    """A sampled fraction per prompt near 0 (Beta(1, 2000): mean 0.05%, skewness 2), clipped to [0, 1]."""
    x = rng(9, n).beta(1.0, 2000.0, size=(REPS, n))
    lo, hi = unit_mean_bounds(x)
    assert covered(np.maximum(lo, 0.0), np.minimum(hi, 1.0), 1.0 / 2001.0) >= accept(REPS)
    one = mean_t_interval(x[0], floor=0.0, ceil=1.0)  # the claims' call: one row of the same procedure
    assert (one.lo, one.hi) == pytest.approx((max(lo[0], 0.0), hi[0]), rel=1e-12)


@pytest.mark.parametrize("n", [2, 5, 12])
def test_t_intervals_match_scipy(n):
    x = rng(10, n).lognormal(0.3, 0.4, n)
    lo, hi = stats.t.interval(NOMINAL, n - 1, loc=np.log(x).mean(), scale=stats.sem(np.log(x)))
    iv = log_t_interval(x)
    assert (iv.lo, iv.hi) == pytest.approx((math.exp(lo), math.exp(hi)), rel=1e-9)
    lo, hi = stats.t.interval(NOMINAL, n - 1, loc=x.mean(), scale=stats.sem(x))
    iv = mean_t_interval(x)  # the Student t interval, widened to the bootstrap-t where that is wider
    assert iv.value == pytest.approx(x.mean()) and iv.lo <= lo + 1e-12 and iv.hi >= hi - 1e-12
    assert iv.hi - iv.lo < 3 * (hi - lo)
