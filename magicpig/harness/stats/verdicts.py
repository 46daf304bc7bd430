"""Verdict rules of the claims table and of ``magicpig compare``.

A verdict is reproduced / not reproduced / not testable here (why). ``decide`` turns an interval and a margin
into one; ``combine`` merges the verdicts of several comparisons of one claim.
"""
from __future__ import annotations

import math
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterable

from magicpig.harness.stats.bootstrap import LEVEL, Interval
from magicpig.harness.stats.paired import collecting, interval_level

REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE = "reproduced", "not reproduced", "not testable here"


@dataclass(frozen=True)
class Verdict:
    status: str  # one of REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE
    reason: str = ""
    mde: str = ""  # not testable: the minimum detectable effect at the run's n (``detectable``)

    def text(self) -> str:
        if self.status == NOT_TESTABLE:
            parts = [p for p in (self.reason, f"minimum detectable effect: {self.mde}" if self.mde else "") if p]
            return f"{NOT_TESTABLE} ({'; '.join(parts)})" if parts else NOT_TESTABLE
        return self.status + (f" ({self.reason})" if self.reason else "")


def testable(reason: str, mde: str = "") -> Verdict:
    """A 'not testable here' verdict with its reason and minimum detectable effect."""
    return Verdict(NOT_TESTABLE, reason, mde)


# Where ``decide`` records each test it makes as (n, min_n, status), so the claims table knows which claims
# reached a test (Holm's family, claims.holm); None: off.
_TESTS_MADE: ContextVar[list | None] = ContextVar("tests_made", default=None)


def recording_tests():
    """Within the block, each ``decide`` call appends (n, min_n, status) to the yielded list."""
    return collecting(_TESTS_MADE)


def decide(iv: Interval, threshold: float, *, min_n: int, above: bool = True, strict: bool = False) -> Verdict:
    """``_decide``, recorded when ``recording_tests`` is on."""
    v = _decide(iv, threshold, min_n=min_n, above=above, strict=strict)
    made = _TESTS_MADE.get()
    if made is not None:
        made.append((iv.n, min_n, v.status))
    return v


def _decide(iv: Interval, threshold: float, *, min_n: int, above: bool = True, strict: bool = False) -> Verdict:
    """Verdict of "the quantity is above (``above``) or below ``threshold``" from its interval.

    Reproduced when the whole interval is on the claimed side, not reproduced when it is wholly on the
    other, otherwise (or with n < ``min_n``) not testable. ``strict``: the threshold itself is not on the
    claimed side (superiority: a lower bound of exactly 0 does not show a gain); otherwise it is."""
    if iv.n == 0 or math.isnan(iv.value):
        return testable("missing data")
    where = f"n={iv.n}: interval [{iv.lo:.3g}, {iv.hi:.3g}]"
    if iv.n < min_n:
        return testable(f"{where}; fewer than {min_n} samples")
    if above:
        ok = iv.lo > threshold if strict else iv.lo >= threshold
        bad = iv.hi <= threshold if strict else iv.hi < threshold
    else:
        ok = iv.hi < threshold if strict else iv.hi <= threshold
        bad = iv.lo >= threshold if strict else iv.lo > threshold
    if ok:
        return Verdict(REPRODUCED)
    if bad:
        return Verdict(NOT_REPRODUCED)
    return testable(where)


def combine(verdicts: Iterable[Verdict]) -> Verdict:
    """One verdict from several comparisons: any not reproduced wins, then all reproduced, else not testable
    (with the reasons of the undecided ones)."""
    vs = list(verdicts)
    if not vs:
        return testable("missing data")
    bad = [v for v in vs if v.status == NOT_REPRODUCED]
    if bad:
        return Verdict(NOT_REPRODUCED, "; ".join(v.reason for v in bad if v.reason))
    open_ = [v for v in vs if v.status == NOT_TESTABLE]
    if not open_:
        return Verdict(REPRODUCED)
    return testable("; ".join(dict.fromkeys(v.reason for v in open_ if v.reason)),
                    "; ".join(dict.fromkeys(v.mde for v in open_ if v.mde)))


def holm_step_down(first: list[Verdict], family: list[int], rerun: Callable[[int], tuple[Verdict, str]],
                   alpha: float = 1.0 - LEVEL) -> list[tuple[Verdict, str, str]]:
    """Holm's step-down correction over the tests ``family`` (indices into ``first``, their verdicts at the
    unadjusted level): (verdict, note, measured at the adjusted level) per test; (its first verdict, '', '')
    for a test outside the family. ``rerun(i)``: test i again at the interval level in force, as
    (verdict, what it measured).

    Each test is a two-sided interval test of its margin, so its p-value is at most alpha' exactly when
    it, re-run with 1 - alpha' intervals, decides the same way. With m tests in the family, each step
    re-runs the k tests not yet confirmed at level 1 - alpha / k; those that keep a decided verdict are
    confirmed (their ordered p-values are within alpha / k) and leave; when none does, the decided rest are not
    testable after the correction (undecided ones never confirm). A test made of several comparisons is decided
    at a level as a whole (reproduced: all comparisons; not reproduced: any one)."""
    out: list[tuple[Verdict, str, str]] = [(v, "", "") for v in first]
    m, step, remaining = len(family), 0, list(family)
    while any(first[i].status != NOT_TESTABLE for i in remaining):
        step += 1
        level = 1.0 - alpha / len(remaining)
        with interval_level(level):
            again = {i: rerun(i) for i in remaining if first[i].status != NOT_TESTABLE}
        kept = [i for i in again if again[i][0].status == first[i].status]
        for i, (verdict, measured) in again.items():
            if i in kept:
                out[i] = (verdict, f"Holm step {step}, family of {m}: holds at {level:.4g} "
                                   f"(alpha {alpha:g} / {len(remaining)})", measured)
            elif not kept:
                note = (f"Holm: decided at the unadjusted {LEVEL:g} ({first[i].status}) but not at the "
                        f"adjusted {level:.4g} (alpha {alpha:g} / {len(remaining)}, family of {m})")
                out[i] = (testable(note + (f"; {verdict.reason}" if verdict.reason else ""),
                                   verdict.mde or "none computed at the adjusted level"), note, measured)
        if not kept:
            break
        remaining = [i for i in remaining if i not in kept]
    for i in family:
        if first[i].status == NOT_TESTABLE:
            out[i] = (first[i], f"in Holm's family of {m} (tested, not decided)", "")
    return out
