"""Intervals for the claims table that stay honest at small n and at the edges of the score range.

Scores are per sample on [0, ``SCORE_RANGE``] (string match x 100, F1 x 100). Two methods run on the same
samples, so a comparison is paired by sample id, task by task:

* binary task (every score of both methods is 0 or 100): the difference of the two proportions right, with
  Newcombe's hybrid score interval for paired proportions (Newcombe 1998, Stat. Med. 17:2635, method 10:
  the Wilson intervals of the two marginal proportions combined with the estimated correlation phi of the
  paired outcomes). It is built from the discordant counts and the margins, and keeps a width when no pair
  disagrees: 20 pairs that all agree give about +-16 points, never [0, 0].
* graded task: the percentile bootstrap of the mean paired difference (``bootstrap.mean_interval``'s seeded
  resamples), its percentiles taken at the expanded level that gives it the Student t width (``expanded_level``:
  the plain percentile bootstrap undercovers at n = 10-20). When
  fewer than ``FEW`` differences are non-zero the bootstrap has next to nothing to resample (all zero gives
  [0, 0]), so the interval is widened to the hull with an exact bound: the mean difference lies in
  [-R * P(d < 0), +R * P(d > 0)] with R the score range, and each probability is bounded by the one-sided
  97.5% Clopper-Pearson bound of its count.
* several tasks (RULER's average of task scores): the per-task intervals are combined with MOVER (Zou &
  Donner 2008, the method of variance estimates recovery): for the mean of T independent task differences
  d_t with intervals [l_t, u_t], L = mean d - sqrt(sum (d_t - l_t)^2) / T and U = mean d +
  sqrt(sum (u_t - d_t)^2) / T. It keeps each task's asymmetry, so a task at the boundary stays honest.
* a single level (the uncentered NIAH score near 0): Clopper-Pearson for a binary task; for a graded one the
  bootstrap, hulled with the analogous exact bound around the most frequent value when fewer than ``FEW``
  samples differ from it; tasks again combined with MOVER.
* unpaired samples (ids that do not overlap): MOVER of the two levels' intervals (for binary tasks with
  Wilson intervals this is Newcombe's hybrid score interval for independent proportions).
* geometric-mean ratios over a handful of units (prompts): Student t interval of the mean log ratio; a mean
  over units (the sampled fraction per prompt): the Student t interval of the mean widened to the
  bootstrap-t interval where that is wider (a fraction near 0 is right-skewed).

Every interval is two-sided at ``LEVEL`` unless a call or ``interval_level`` sets another; the bootstraps use ``bootstrap``'s fixed seed. Nothing here needs
scipy: the incomplete beta function is evaluated by its continued fraction and inverted by bisection
(tests/test_claims_paired.py compares with scipy and statsmodels).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Mapping, Sequence

import numpy as np

from magicpig.harness.stats.bootstrap import LEVEL, RESAMPLES, SEED, Interval

SCORE_RANGE = 100.0
FEW = 10  # below this many non-zero differences (or samples off the most frequent score) the exact bound joins

# The level every interval here uses when a call names none. Holm's correction (claims.holm) re-runs whole
# claim tests at an adjusted level; setting it here reaches every interval a test builds without threading a
# level argument through each test.
_LEVEL: ContextVar[float] = ContextVar("interval_level", default=LEVEL)
# Where Student t intervals over units (prompts, runs) record (n, sd of what they average, level), so the
# claims table can state the minimum detectable effect of a test that did not decide (claims.py); None: off.
_T_RECORD: ContextVar[list | None] = ContextVar("t_intervals_built", default=None)


@contextmanager
def interval_level(level: float):
    """Within the block, every interval built here without an explicit level is two-sided at ``level``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"interval level must lie in (0, 1), got {level}")
    token = _LEVEL.set(level)
    try:
        yield
    finally:
        _LEVEL.reset(token)


def current_level(level: float | None = None) -> float:
    """``level`` when given, else the level set by ``interval_level`` (default ``LEVEL``)."""
    return _LEVEL.get() if level is None else level


@contextmanager
def collecting(var: ContextVar):
    """Within the block, ``var`` holds a fresh list, yielded, that the code the block runs appends its records to."""
    out: list = []
    token = var.set(out)
    try:
        yield out
    finally:
        var.reset(token)


def recording_t_intervals():
    """Within the block, each Student t interval over units appends (scale, n, sd, level) to the yielded list:
    scale 'log' (``log_t_interval``: sd of the log ratios) or 'linear' (``mean_t_interval``)."""
    return collecting(_T_RECORD)


def _record(scale: str, n: int, sd: float, level: float) -> None:
    rec = _T_RECORD.get()
    if rec is not None:
        rec.append((scale, n, sd, level))


# ---- special functions --------------------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _invert(f, target: float, lo: float, hi: float) -> float:
    """x in [lo, hi] with f(x) = target for an increasing f (bisection to machine precision)."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-14 * max(1.0, abs(mid)):
            break
    return 0.5 * (lo + hi)


def beta_ppf(q: float, a: float, b: float) -> float:
    """Quantile of the Beta(a, b) distribution."""
    return _invert(lambda x: betainc(a, b, x), q, 0.0, 1.0)


@lru_cache(maxsize=4096)
def t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t distribution with ``df`` degrees of freedom, q in (0, 1) (cached: a bisection)."""
    def cdf(t: float) -> float:
        tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
        return 1.0 - tail if t > 0 else tail

    return _invert(cdf, q, -1e6, 1e6)


def _z(level: float) -> float:
    return NormalDist().inv_cdf(0.5 + level / 2.0)


# ---- one proportion -------------------------------------------------------------------------------------------
def clopper_pearson(k: float, n: int, level: float | None = None) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a proportion from k successes of n."""
    level = current_level(level)
    alpha = 1.0 - level
    lo = 0.0 if k <= 0 else beta_ppf(alpha / 2.0, k, n - k + 1)
    hi = 1.0 if k >= n else beta_ppf(1.0 - alpha / 2.0, k + 1, n - k)
    return lo, hi


def wilson(k: float, n: float, level: float | None = None) -> tuple[float, float]:
    """Wilson score interval of a proportion from k successes of n (k may be fractional)."""
    level = current_level(level)
    z = _z(level)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


# ---- paired proportions ---------------------------------------------------------------------------------------
def newcombe_paired(both: float, first_only: float, second_only: float, neither: float,
                    level: float | None = None) -> tuple[float, float, float]:
    """(p1 - p2, lower, upper) for paired binary outcomes, Newcombe's method 10.

    ``both`` pairs right under both, ``first_only`` right under the first only (the discordant count b),
    ``second_only`` right under the second only (c), ``neither``. p1 = (both + b) / n, p2 = (both + c) / n.
    phi, the correlation of the pair, is (both * neither - b * c) / sqrt(product of the margins), taken as 0
    when a margin is empty, and reduced by n/2 when positive (Newcombe's correction: 0 up to n/2)."""
    level = current_level(level)
    n = both + first_only + second_only + neither
    if n <= 0:
        return float("nan"), float("nan"), float("nan")
    r1, r2 = both + first_only, both + second_only
    p1, p2 = r1 / n, r2 / n
    l1, u1 = wilson(r1, n, level)
    l2, u2 = wilson(r2, n, level)
    margins = r1 * (n - r1) * r2 * (n - r2)
    cross = both * neither - first_only * second_only
    if margins <= 0:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(margins)
    elif cross >= 0:
        phi = 0.0
    else:
        phi = cross / math.sqrt(margins)
    d = p1 - p2
    lower = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    upper = d + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return d, max(-1.0, lower), min(1.0, upper)


# ---- per task ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskInterval:
    """One task's estimate (a difference or a level, in points) with its interval and how it was made."""
    task: str
    n: int
    value: float
    lo: float
    hi: float
    how: str  # "Newcombe", "Clopper-Pearson", "bootstrap", "bootstrap+exact", "Wilson (unpaired)", ...
    base: float = float("nan")  # the baseline's mean score on this task (differences)
    other: float = float("nan")  # the compared method's mean score on this task (differences)


def _is_binary(values: np.ndarray, score_range: float) -> bool:
    return bool(np.all((values == 0.0) | (values == score_range)))


def expanded_level(n: int, level: float) -> float:
    """The percentile level the bootstrap of a mean of ``n`` values uses for a ``level`` interval: the
    percentile bootstrap is about as wide as the z interval with the divide-by-n standard deviation, so it
    undercovers at small n; taking its percentiles at 2 Phi(sqrt(n / (n - 1)) t_{n-1}) - 1 instead widens it to
    the Student t width (Hesterberg 2015, "expanded percentile interval"; at n = 10, level 0.95 -> 0.983)."""
    if n < 2:
        return level
    return 2.0 * NormalDist().cdf(math.sqrt(n / (n - 1.0)) * t_ppf(0.5 + level / 2.0, n - 1)) - 1.0


def bootstrap_bounds(rows: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Expanded percentile bootstrap bounds of the mean of each row of ``rows`` (R, n): the resamples of
    ``bootstrap.mean_interval`` (its seed and count, so one row gives exactly its interval at the expanded
    level), drawn once and applied to every row as resample counts (one matrix product)."""
    rows = np.atleast_2d(np.asarray(rows, dtype=float))
    n = rows.shape[1]
    idx = np.random.default_rng(SEED).integers(0, n, size=(RESAMPLES, n))
    counts = np.zeros((RESAMPLES, n))
    np.add.at(counts, (np.arange(RESAMPLES)[:, None], idx), 1.0)
    means = rows @ counts.T / n  # (R, RESAMPLES)
    tail = (1.0 - expanded_level(n, level)) / 2.0
    lo, hi = np.quantile(means, [tail, 1.0 - tail], axis=1)
    return lo, hi


def graded_bounds(rows: np.ndarray, *, floor: float, ceil: float, centre: str, level: float | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lo, hi, exact_joined) per row of graded values on [floor, ceil]: the expanded percentile bootstrap,
    hulled with the exact bound when fewer than ``FEW`` values of the row differ from its centre: ``centre``
    'zero' (paired differences: the mean lies in [floor * P(d < 0), ceil * P(d > 0)]) or 'mode' (a level: the
    mean lies in [m - (m - floor) P(x < m), m + (ceil - m) P(x > m)], m the most frequent value), each P at its
    one-sided Clopper-Pearson bound. Vectorised over rows so the coverage simulation runs this very code."""
    level = current_level(level)
    rows = np.atleast_2d(np.asarray(rows, dtype=float))
    n = rows.shape[1]
    lo, hi = bootstrap_bounds(rows, level)
    mean = rows.mean(axis=1)
    if centre == "zero":
        m = np.zeros(len(rows))
    else:
        m = np.array([float(v[np.argmax(c)]) for v, c in (np.unique(r, return_counts=True) for r in rows)])
    below, above = (rows < m[:, None]).sum(axis=1), (rows > m[:, None]).sum(axis=1)
    joined = (below + above) < FEW
    cp = {k: clopper_pearson(k, n, level)[1] for k in set(below[joined].tolist()) | set(above[joined].tolist())}
    for i in np.flatnonzero(joined):
        lo[i] = min(lo[i], m[i] - (m[i] - floor) * cp[int(below[i])])
        hi[i] = max(hi[i], m[i] + (ceil - m[i]) * cp[int(above[i])])
    return mean, lo, hi, joined


def level_interval(task: str, values: Sequence[float], *, score_range: float = SCORE_RANGE,
                   level: float | None = None, binary_method: str = "Clopper-Pearson") -> TaskInterval:
    """Mean score of one task with its interval: Clopper-Pearson (or Wilson) when binary, else the bootstrap
    hulled with the exact bound when fewer than ``FEW`` samples differ from the most frequent score."""
    level = current_level(level)
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return TaskInterval(task, 0, float("nan"), float("nan"), float("nan"), "no samples")
    if _is_binary(x, score_range):
        k = int((x == score_range).sum())
        lo, hi = clopper_pearson(k, n, level) if binary_method == "Clopper-Pearson" else wilson(k, n, level)
        return TaskInterval(task, n, float(x.mean()), lo * score_range, hi * score_range, binary_method)
    mean, lo, hi, joined = graded_bounds(x[None, :], floor=0.0, ceil=score_range, centre="mode", level=level)
    return TaskInterval(task, n, float(mean[0]), float(lo[0]), float(hi[0]),
                        "bootstrap+exact" if joined[0] else "bootstrap")


def task_difference(task: str, a: Mapping[str, float], b: Mapping[str, float], *,
                        score_range: float = SCORE_RANGE, level: float | None = None) -> TaskInterval:
    """(mean of A) - (mean of B) on one task, paired on the sample ids both have (see the module doc)."""
    level = current_level(level)
    common = [i for i in a if i in b]
    if not common:
        la = level_interval(task, list(a.values()), score_range=score_range, level=level, binary_method="Wilson")
        lb = level_interval(task, list(b.values()), score_range=score_range, level=level, binary_method="Wilson")
        m = mover([la, lb], [1.0, -1.0])
        return TaskInterval(task, min(la.n, lb.n), m[0], m[1], m[2], f"{la.how} (unpaired, MOVER)", lb.value,
                            la.value)
    xa = np.array([a[i] for i in common], dtype=float)
    xb = np.array([b[i] for i in common], dtype=float)
    n = len(common)
    if _is_binary(xa, score_range) and _is_binary(xb, score_range):
        ra, rb = xa == score_range, xb == score_range
        d, lo, hi = newcombe_paired(int((ra & rb).sum()), int((ra & ~rb).sum()), int((~ra & rb).sum()),
                                    int((~ra & ~rb).sum()), level)
        return TaskInterval(task, n, d * score_range, lo * score_range, hi * score_range, "Newcombe",
                            float(xb.mean()), float(xa.mean()))
    mean, lo, hi, joined = graded_bounds((xa - xb)[None, :], floor=-score_range, ceil=score_range, centre="zero",
                                         level=level)
    return TaskInterval(task, n, float(mean[0]), float(lo[0]), float(hi[0]),
                        "bootstrap+exact" if joined[0] else "bootstrap", float(xb.mean()), float(xa.mean()))


# ---- combining tasks ------------------------------------------------------------------------------------------
def mover(parts: Sequence[TaskInterval], weights: Sequence[float]) -> tuple[float, float, float]:
    """(sum w_t x_t, lower, upper) by MOVER from independent estimates x_t with intervals [l_t, u_t]."""
    value = sum(w * p.value for p, w in zip(parts, weights))
    down = sum((w * (p.value - p.lo) if w > 0 else w * (p.value - p.hi)) ** 2 for p, w in zip(parts, weights))
    up = sum((w * (p.hi - p.value) if w > 0 else w * (p.lo - p.value)) ** 2 for p, w in zip(parts, weights))
    return value, value - math.sqrt(down), value + math.sqrt(up)


def task_average(parts: Sequence[TaskInterval]) -> Interval:
    """Mean over tasks of the task estimates with its MOVER interval; n = all samples (pairs) used."""
    parts = [p for p in parts if p.n]
    if not parts:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    value, lo, hi = mover(parts, [1.0 / len(parts)] * len(parts))
    return Interval(value, lo, hi, sum(p.n for p in parts))


def methods_used(parts: Sequence[TaskInterval]) -> str:
    """'Newcombe' / 'Newcombe, bootstrap+exact' ... plus '; MOVER over tasks' when there are several."""
    hows = ", ".join(dict.fromkeys(p.how for p in parts))
    return hows + ("; MOVER over tasks" if len(parts) > 1 else "")


# ---- ratios over a few units ------------------------------------------------------------------------------------
def log_t_interval(ratios: Sequence[float], level: float | None = None) -> Interval:
    """Geometric mean of positive ratios (one per unit, e.g. prompt) with the Student t interval of the mean
    log ratio, exponentiated; a single unit has no interval (lo = 0, hi = inf)."""
    level = current_level(level)
    x = np.log(np.clip(np.asarray(ratios, dtype=float), 1e-12, None))
    n = len(x)
    if n == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    mean = float(x.mean())
    _record("log", n, float(x.std(ddof=1)) if n > 1 else float("nan"), level)
    if n == 1:
        return Interval(math.exp(mean), 0.0, math.inf, 1)
    half = t_ppf(0.5 + level / 2.0, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)


def _row_quantiles(x: np.ndarray, qs: Sequence[float]) -> list[np.ndarray]:
    """Each q quantile of the finite values of each row (linear interpolation, as ``np.quantile``), NaN for a
    row without any: ``np.nanquantile`` row by row, in one sort."""
    xs = np.sort(x, axis=1)  # NaN sorts last
    k = np.isfinite(xs).sum(axis=1)
    rows, last = np.arange(len(xs)), np.maximum(k - 1, 0)
    out = []
    for q in qs:
        pos = q * last
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, last)
        out.append(np.where(k > 0, xs[rows, lo] + (pos - lo) * (xs[rows, hi] - xs[rows, lo]), np.nan))
    return out


def unit_mean_bounds(rows: np.ndarray, level: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of the mean of each row of ``rows`` (R, n), one value per unit: the hull of the Student t interval
    and the bootstrap-t interval (studentized resamples, ``bootstrap``'s seed and count). The t interval alone
    undercovers a right-skewed mean such as a sampled fraction near 0 (90% at n = 10 for Beta(1, 2000)
    fractions, tests/test_interval_coverage.py); the bootstrap-t follows the skew. A row of one value has no
    interval (-inf, inf)."""
    level = current_level(level)
    rows = np.atleast_2d(np.asarray(rows, dtype=float))
    n = rows.shape[1]
    if n < 2:
        return np.full(len(rows), -math.inf), np.full(len(rows), math.inf)
    mean, sd = rows.mean(axis=1), rows.std(axis=1, ddof=1)
    se = sd / math.sqrt(n)
    t = t_ppf(0.5 + level / 2.0, n - 1)
    idx = np.random.default_rng(SEED).integers(0, n, size=(RESAMPLES, n))
    counts = np.zeros((RESAMPLES, n))
    np.add.at(counts, (np.arange(RESAMPLES)[:, None], idx), 1.0)
    m1, m2 = rows @ counts.T / n, (rows * rows) @ counts.T / n
    se_star = np.sqrt(np.maximum(m2 - m1 * m1, 0.0) * n / (n - 1.0) / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_star = np.where(se_star > 0, (m1 - mean[:, None]) / se_star, np.nan)
    tail = (1.0 - level) / 2.0
    q_lo, q_hi = _row_quantiles(t_star, [tail, 1.0 - tail])
    q_lo, q_hi = np.where(np.isnan(q_lo), -t, q_lo), np.where(np.isnan(q_hi), t, q_hi)
    return np.minimum(mean - t * se, mean - q_hi * se), np.maximum(mean + t * se, mean - q_lo * se)


def mean_t_interval(values: Sequence[float], level: float | None = None, *, floor: float | None = None,
                    ceil: float | None = None) -> Interval:
    """Arithmetic mean of one value per unit (e.g. a sampled fraction per prompt) with ``unit_mean_bounds``'s
    interval (Student t, widened to the bootstrap-t where that is wider), clipped to [``floor``, ``ceil``] when
    given (a fraction cannot leave [0, 1]); a single unit has no interval."""
    level = current_level(level)
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    _record("linear", n, float(x.std(ddof=1)) if n > 1 else float("nan"), level)
    lo, hi = (float(v[0]) for v in unit_mean_bounds(x[None, :], level))
    lo, hi = (lo if floor is None else max(floor, lo)), (hi if ceil is None else min(ceil, hi))
    return Interval(float(x.mean()), lo, hi, n)


# ---- power: what the paper's own numbers would give ---------------------------------------------------------------
def paper_interval(p_method: float, p_base: float, n_per_task: int, tasks: int, *, agreement: bool,
                   level: float | None = None) -> tuple[float, float, float]:
    """(difference, lower, upper) in points that a run with the paper's average scores (treated as
    proportions right) would give at ``n_per_task`` x ``tasks`` pairs, every task alike: with ``agreement``
    the discordant pairs all go one way (the narrowest interval the means allow), else the two methods err
    independently."""
    level = current_level(level)
    p1, p2, n = p_method / 100.0, p_base / 100.0, float(n_per_task)
    if agreement:
        both = min(p1, p2) * n
        cells = (both, max(p1 - p2, 0.0) * n, max(p2 - p1, 0.0) * n, (1 - max(p1, p2)) * n)
    else:
        cells = (p1 * p2 * n, p1 * (1 - p2) * n, (1 - p1) * p2 * n, (1 - p1) * (1 - p2) * n)
    d, lo, hi = newcombe_paired(*cells, level=level)
    part = TaskInterval("", n_per_task, d * 100, lo * 100, hi * 100, "Newcombe")
    value, lo, hi = mover([part] * tasks, [1.0 / tasks] * tasks)
    return value, lo, hi


def paper_power(p_method: float, p_base: float, n_per_task: int, tasks: int, threshold: float, *,
                strict: bool) -> str:
    """What the paper's averages would give at its n (``paper_interval``, both ways) against a test whose
    lower bound must clear ``threshold`` (strictly with ``strict``), in words."""
    m, b, n, t = p_method, p_base, n_per_task, tasks
    best = paper_interval(m, b, n, t, agreement=True)
    indep = paper_interval(m, b, n, t, agreement=False)

    def passes(iv) -> bool:
        return iv[1] > threshold if strict else iv[1] >= threshold

    verdict = ("would pass even if the methods erred independently" if passes(indep) else
               "would pass only if their errors overlap closely" if passes(best) else
               "would NOT pass this test even at best: the test is stricter than the paper's own evidence")
    return (f"power: the paper's {m:g} vs {b:g} at its n ({n} x {t} task{'s' * (t > 1)}, scores as 0/100) "
            f"give [{best[1]:+.1f}, {best[2]:+.1f}] with all discordant pairs one way, "
            f"[{indep[1]:+.1f}, {indep[2]:+.1f}] with independent errors: {verdict}")
