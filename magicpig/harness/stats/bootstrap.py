"""Percentile bootstrap intervals for accuracy numbers (means of per-sample scores).

Every interval uses a fixed seed, so a report rebuilt from the same results prints the same intervals.
A multi-task average (RULER's 13-task mean) is bootstrapped *stratified*: samples are resampled within each
task and the per-task means are averaged, which is how the reported number itself is formed. A percentile
bootstrap has no width when every score is equal; the claims table therefore builds its intervals with
``paired`` (exact and score intervals, this bootstrap only where scores are graded and vary).
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
