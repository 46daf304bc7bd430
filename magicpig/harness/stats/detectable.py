"""Minimum detectable effects: what a claim test that did not decide could have decided at the run's n.

The claims table prints one on every "not testable here" line. Its definition (``DEFINITION``): the smallest
true distance between the quantity and the claim's margin that the test's two-sided interval (at the level
in force, 95% unless Holm's correction raised it) would put wholly on one side with 80% power, in the normal
approximation:

    MDE = (q_{1 - alpha/2} + q_{0.80}) x SE

with q the standard normal quantiles (1.96 + 0.84 = 2.80 at 95%), or Student t quantiles with n - 1 degrees
of freedom for a t interval over units. SE comes from, in this order:

* the interval the test built: SE = (upper - lower) / (2 q_{1 - alpha/2});
* the per-pair differences of tasks left out for too few samples: SE = sqrt(sum_t s_t^2 / n_t) / T over the
  T tasks, s_t^2 the sample variance of the task's paired differences, or ``ASSUMED_VARIANCE`` (0/100 scores
  that disagree on a share ``ASSUMED_DISCORDANCE`` of the pairs) when the pairs show no spread;
* a Student t interval over units (prompts, runs): SE = s / sqrt(n), s the spread of the values averaged
  (of their logs for a ratio, so the MDE is a factor).
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Mapping, Sequence

import numpy as np

from magicpig.harness.stats.paired import SCORE_RANGE, current_level, t_ppf

POWER = 0.80
ASSUMED_DISCORDANCE = 0.1  # share of 0/100 pairs on which two methods disagree, assumed where a run shows none
ASSUMED_VARIANCE = ASSUMED_DISCORDANCE * SCORE_RANGE ** 2  # points^2 of one 0/100 pair difference

DEFINITION = (
    "Minimum detectable effect (MDE): the smallest true distance from the claim's margin that the test would "
    "decide with 80% power at the run's n and the level in force (two-sided 95%, or Holm's adjusted level): "
    "(q_{1-alpha/2} + q_0.80) x SE, q normal quantiles (2.80 x SE at 95%) or Student t ones for an interval over "
    "units; SE = the interval's width / (2 q_{1-alpha/2}) where the test built one; for tasks left out for too "
    f"few samples SE = sqrt(sum of s_t^2 / n_t) / T from their paired differences (s_t^2 assumed "
    f"{ASSUMED_VARIANCE:g} points^2, 0/100 pairs disagreeing {ASSUMED_DISCORDANCE:g} of the time, where the pairs "
    "show no spread); a ratio's MDE is a factor.")


def _q(level: float) -> float:
    return NormalDist().inv_cdf(0.5 + level / 2.0)


def from_interval(lo: float, hi: float, level: float | None = None) -> float:
    """MDE (in the interval's units) of a test whose interval at ``level`` is [lo, hi]."""
    level = current_level(level)
    q = _q(level)
    return (q + NormalDist().inv_cdf(POWER)) * (hi - lo) / (2.0 * q)


def from_pairs(tasks: Sequence[tuple[int, float]], level: float | None = None) -> float:
    """MDE in points of a task average of paired differences: ``tasks`` = (n pairs, variance of the paired
    difference or NaN when unknown or zero) per task."""
    level = current_level(level)
    if not tasks:
        return math.inf
    var = sum((v if v == v and v > 0 else ASSUMED_VARIANCE) / max(n, 1) for n, v in tasks)
    return (_q(level) + NormalDist().inv_cdf(POWER)) * math.sqrt(var) / len(tasks)


def pair_variance(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[int, float]:
    """(pairs, sample variance of the paired differences a - b in points^2; NaN under 2 pairs) of one task, as
    ``from_pairs`` takes them."""
    d = np.array([a[i] - b[i] for i in a if i in b], dtype=float)
    return len(d), (float(d.var(ddof=1)) if len(d) > 1 else float("nan"))


def thin_text(label: str, thin: Sequence[tuple[int, float]], min_samples: int) -> str:
    """The MDE of a comparison whose tasks all had too few samples (``thin``: their ``pair_variance``): at their
    n, from their pairs' variance (assumed where they show none), and beside it at ``min_samples`` per task."""
    head = f"{label}: " if label else ""
    if not thin or not any(n for n, _ in thin):
        at_min = from_pairs([(min_samples, float("nan"))])
        return (f"{head}none at n=0 pairs; one task of min_samples={min_samples} 0/100 pairs disagreeing on "
                f"{ASSUMED_DISCORDANCE:.0%} of them would give +-{at_min:.1f} points")
    at_n = from_pairs(thin)
    at_min = from_pairs([(min_samples, v) for _, v in thin])
    ns = ", ".join(str(n) for n, _ in thin)
    return (f"{head}+-{at_n:.1f} points around the margin at n={ns} pairs over {len(thin)} "
            f"task{'s' * (len(thin) > 1)} (from their paired differences; below min_samples the test does not "
            f"run), +-{at_min:.1f} at {min_samples} per task")


def from_units(n: int, sd: float, level: float | None = None) -> float:
    """MDE of a Student t interval over ``n`` units whose values spread by ``sd``; inf below 2 units."""
    level = current_level(level)
    if n < 2 or not sd == sd:
        return math.inf
    return (t_ppf(0.5 + level / 2.0, n - 1) + t_ppf(POWER, n - 1)) * sd / math.sqrt(n)


def points_text(mde: float, how: str) -> str:
    """'+-4.2 points around the margin (from this interval)'."""
    if not math.isfinite(mde):
        return f"none at this n ({how})"
    return f"+-{mde:.1f} points around the margin ({how})"


def units_text(records: Sequence[tuple[str, int, float, float]]) -> str:
    """The MDE of each Student t interval over units a test built (``paired.recording_t_intervals``)."""
    out = []
    for scale, n, sd, level in records:
        unit = f"n={n} unit{'s' * (n != 1)}"
        mde = from_units(n, sd, level)
        if not math.isfinite(mde):
            out.append(f"none at {unit} (no spread between units to estimate)")
        elif scale == "log":
            out.append(f"a factor of {math.exp(mde):.2f} either side of the bar at {unit} (t, sd of log ratios "
                       f"{sd:.2g})")
        else:
            out.append(f"+-{mde:.3g} at {unit} (t, sd {sd:.2g})")
    return "; ".join(dict.fromkeys(out))
