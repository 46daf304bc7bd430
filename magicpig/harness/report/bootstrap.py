"""Percentile bootstrap intervals for accuracy numbers (means of per-sample scores).

Every interval uses a fixed seed, so a report rebuilt from the same results prints the same intervals.
A multi-task average (RULER's 13-task mean) is bootstrapped *stratified*: samples are resampled within each
task and the per-task means are averaged, which is how the reported number itself is formed. A difference
of two methods on the same samples (same ids) is bootstrapped *paired*: one index draw serves both methods,
so the shared difficulty of a sample cancels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95
SEED = 0


@dataclass(frozen=True)
class Interval:
    """A point estimate, its percentile bootstrap interval [lo, hi] and the sample count n behind it."""
    value: float
    lo: float
    hi: float
    n: int

    def text(self, digits: int = 1) -> str:
        """'91.8 [88.0, 95.0] (n=50)'; the interval is omitted when there are no samples."""
        if self.n == 0:
            return "— (n=0)"
        return f"{self.value:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}] (n={self.n})"

    def bounds(self, digits: int = 1) -> str:
        return f"[{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def _percentiles(stats: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _strata_means(strata: Sequence[np.ndarray], rng: np.random.Generator, resamples: int) -> np.ndarray:
    """(resamples,) bootstrap replicates of the mean over strata of each stratum's mean."""
    out = np.zeros(resamples)
    for x in strata:
        idx = rng.integers(0, len(x), size=(resamples, len(x)))
        out += x[idx].mean(axis=1)
    return out / len(strata)


def mean_interval(values: Sequence[float], *, resamples: int = RESAMPLES, level: float = LEVEL,
                  seed: int = SEED) -> Interval:
    """Mean of ``values`` (one score per sample) with its percentile bootstrap interval."""
    return stratified_interval({"": values}, resamples=resamples, level=level, seed=seed)


def stratified_interval(strata: Mapping[str, Sequence[float]], *, resamples: int = RESAMPLES,
                        level: float = LEVEL, seed: int = SEED) -> Interval:
    """Mean over strata (tasks) of each stratum's mean, resampling samples within each stratum.

    ``strata``: task -> per-sample scores; empty strata are dropped. n = total samples."""
    xs = [np.asarray(v, dtype=float) for v in strata.values() if len(v)]
    n = sum(len(x) for x in xs)
    if not xs:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    value = float(np.mean([x.mean() for x in xs]))
    lo, hi = _percentiles(_strata_means(xs, _rng(seed), resamples), level)
    return Interval(value, lo, hi, n)


def difference_interval(a: Mapping[str, Mapping[str, float]], b: Mapping[str, Mapping[str, float]], *,
                        resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED) -> Interval:
    """(mean over tasks of A) - (mean over tasks of B), stratified by task.

    ``a``, ``b``: task -> {sample id: score}. Only tasks both have are used. Within a task, samples whose
    ids both have are resampled paired; when the ids do not overlap the two are resampled independently.
    n = the smaller of the two sample counts used."""
    rng = _rng(seed)
    tasks = [t for t in a if t in b and a[t] and b[t]]
    if not tasks:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    reps = np.zeros(resamples)
    value, na, nb = 0.0, 0, 0
    for t in tasks:
        common = [i for i in a[t] if i in b[t]]
        if common:
            d = np.array([a[t][i] - b[t][i] for i in common], dtype=float)
            idx = rng.integers(0, len(d), size=(resamples, len(d)))
            reps += d[idx].mean(axis=1)
            value += d.mean()
            na += len(d)
            nb += len(d)
        else:
            xa, xb = np.array(list(a[t].values()), float), np.array(list(b[t].values()), float)
            reps += _strata_means([xa], rng, resamples) - _strata_means([xb], rng, resamples)
            value += xa.mean() - xb.mean()
            na += len(xa)
            nb += len(xb)
    reps /= len(tasks)
    lo, hi = _percentiles(reps, level)
    return Interval(float(value / len(tasks)), lo, hi, min(na, nb))


def ratio_log_interval(ratios: Sequence[float], *, resamples: int = RESAMPLES, level: float = LEVEL,
                       seed: int = SEED) -> Interval:
    """Geometric mean of positive ``ratios`` with the bootstrap interval of it (resampling the ratios)."""
    x = np.log(np.clip(np.asarray(ratios, dtype=float), 1e-12, None))
    if not len(x):
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    iv = mean_interval(x, resamples=resamples, level=level, seed=seed)
    return Interval(float(np.exp(iv.value)), float(np.exp(iv.lo)), float(np.exp(iv.hi)), iv.n)
