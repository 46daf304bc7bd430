"""The claims table: each qualitative claim of the paper (``claims:`` in ``config/paper_reference.yaml``),
what this run measured, and a verdict: reproduced / not reproduced / not testable here (why).

A claim's ``kind`` names its test (``TESTS``: accuracy tests in ``claims_accuracy`` and ``claims_centering``,
attention-level and system tests in ``claims_system``); the thresholds, margins and their sources are the YAML's,
and ``INTERVAL_NOTE`` (printed above the table) says how the intervals are made.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from magicpig.harness.report.claims_accuracy import near, superior
from magicpig.harness.report.claims_centering import centering
from magicpig.harness.report.claims_context import Context
from magicpig.harness.report.claims_system import error_ratio, speedup, table9
from magicpig.harness.report.markdown import table
from magicpig.harness.stats import detectable
from magicpig.harness.stats.bootstrap import LEVEL
from magicpig.harness.stats.paired import recording_t_intervals
from magicpig.harness.stats.verdicts import NOT_TESTABLE, Verdict, holm_step_down, recording_tests, testable


@dataclass
class ClaimResult:
    id: str
    text: str
    test: str
    measured: str
    verdict: Verdict  # decided lines: the Holm-adjusted verdict
    needs: str = ""
    unadjusted: Verdict | None = None  # the verdict at the unadjusted level, where Holm's step applied
    holm: str = ""  # how Holm's step treated the claim: its adjusted level, or why it is outside the family
    paper_words: tuple[str, ...] = ()  # the paper's own words for the claim's margin and baseline, with where


TESTS: dict[str, Callable[[dict, Context], tuple[str, Verdict]]] = {
    "near": near, "superior": superior, "centering": centering,
    "error_ratio": error_ratio, "table9": table9, "speedup": speedup,
}
# the kinds decided by intervals: the claims of these kinds decided in one report form Holm's family
FAMILY = frozenset({"near", "superior", "centering", "error_ratio", "speedup"})

INTERVAL_NOTE = (
    "Intervals are two-sided 95%. Per task, two methods are compared on the same samples (paired by sample "
    "id): when every score is 0 or 100, by the difference of the proportions right with Newcombe's hybrid "
    "score interval for paired proportions (built from the pairs where the two disagree; it keeps a width "
    "when none do: 20 agreeing pairs give about +-16 points); for graded scores by a percentile bootstrap of "
    "the mean paired difference (seed 0, 2000 resamples; percentiles at the expanded level that gives it the "
    "Student t width, since the plain percentile bootstrap undercovers at n = 10-20), widened to an exact bound (Clopper-Pearson on how "
    "many differences are non-zero, times the score range) when fewer than 10 differences are non-zero. A "
    "single score level uses Clopper-Pearson (0/100 scores) or the bootstrap with the same exact bound. Task "
    "averages combine the per-task intervals by MOVER (Zou & Donner). A comparison uses only tasks with at "
    "least `min_samples` samples per method at that length, leaves out tasks whose baseline leaves no room "
    "for the effect (floor / ceiling within `floor_points` of 0 / 100), and names the tasks and n it rests on. "
    "Ratios over prompts use a Student t interval of the mean log ratio; the sampled fraction over prompts the "
    "Student t interval widened to the bootstrap-t interval where that is wider (a fraction near 0 is skewed). "
    "Every procedure's coverage is simulated at n = 10, 20, 40, 100 (tests/test_interval_coverage.py). 'power' notes what the paper's own "
    "averages would give at the paper's sample count.")


@dataclass(frozen=True)
class Run:
    """One run of a claim's test: what it measured, its verdict, and whether it reached a test (an interval on
    at least the claim's minimum n was compared with the margin, whatever the outcome)."""
    measured: str
    verdict: Verdict
    tested: bool


def _run(claim: dict, ctx: Context) -> Run:
    """One claim's test at the interval level in force; a not testable verdict without a minimum detectable
    effect gets the one of the t intervals over units its test built (or says it has none)."""
    test = TESTS.get(claim.get("kind"))
    if test is None:
        return Run("—", testable(f"unknown test kind {claim.get('kind')!r}", "none (no test)"), False)
    with recording_t_intervals() as built, recording_tests() as made:
        measured, verdict = test(claim, ctx)
    if verdict.status == NOT_TESTABLE and not verdict.mde:
        mde = detectable.units_text(built) or "none at this n (no interval was formed: no data to form it from)"
        verdict = replace(verdict, mde=mde)
    return Run(measured, verdict, any(n >= min_n for n, min_n, _ in made))


def holm(claims: list[dict], first: list[Run], ctx: Context) -> list[tuple[Verdict, str, str]]:
    """Holm's correction (``verdicts.holm_step_down``) over the family of claims (``FAMILY`` kinds) whose test
    ran at the unadjusted level, decided or not (a claim without data to test is outside: it has no p-value)."""
    def rerun(i: int) -> tuple[Verdict, str]:
        r = _run(claims[i], ctx)
        return r.verdict, r.measured

    family = [i for i, (c, r) in enumerate(zip(claims, first)) if c.get("kind") in FAMILY and r.tested]
    return holm_step_down([r.verdict for r in first], family, rerun)


def evaluate(results: Path | str, ref: dict, gpu_folders: Sequence[Path] | None = None) -> list[ClaimResult]:
    """Every claim of ``ref['claims']['items']`` decided on the results tree, the decided ones after Holm's
    correction (``holm``); ``gpu_folders``: the GPU runs read (default: ``results_tree.gpu_run_folders``)."""
    ctx = Context(Path(results), ref, gpu_folders)
    claims = list(ref.get("claims", {}).get("items", []))
    first = [_run(c, ctx) for c in claims]
    out = []
    for claim, run, (verdict, note, measured_adj) in zip(claims, first, holm(claims, first, ctx)):
        measured = run.measured
        if measured_adj and measured_adj != measured:
            measured = f"{measured}; at Holm's level: {measured_adj}"
        if not note and run.verdict.status != NOT_TESTABLE:
            note = "outside Holm's family: decided by a rule on point values, not by an interval"
        out.append(ClaimResult(claim["id"], claim["text"], claim.get("test", ""), measured, verdict,
                               claim.get("needs", ""), run.verdict if note.startswith("Holm") else None, note,
                               tuple(claim.get("paper_words") or ())))
    return out


def claims_section(results: Path | str, ref: dict, gpu_folders: Sequence[Path] | None = None) -> list[str]:
    """The Markdown of the claims table, with the note on what its intervals are."""
    claims = ref.get("claims", {})
    results_ = evaluate(results, ref, gpu_folders)
    rows = [[f"`{c.id}`", c.text, f"`{c.needs}`" if c.needs else "—", test_cell(c), c.measured, verdict_cell(c)]
            for c in results_]
    family = [c.id for c in results_ if c.holm.startswith("Holm") or c.holm.startswith("in Holm")]
    return ["## Claims",
            "Each of the paper's qualitative claims (`claims:` in `config/paper_reference.yaml`), what this run "
            "measured and the verdict. The test column states the test, its margin and where the margin comes "
            "from, in the paper's words (section, table or figure); "
            f"min_samples = {claims.get('min_samples', 20)} per task, method and length; "
            f"floor_points = {claims.get('floor_points', 5)}. " + INTERVAL_NOTE + " " + holm_note(family) + " "
            + detectable.DEFINITION,
            table(["claim", "paper", "needs", "test", "measured here", "verdict"], rows) if rows
            else "No claims listed."]


def test_cell(c: ClaimResult) -> str:
    """The test with the paper's own words for its margin and baseline (``paper_words``)."""
    return f"{c.test}. The paper's words: " + "; ".join(c.paper_words) if c.paper_words else c.test


def verdict_cell(c: ClaimResult) -> str:
    """The verdict (Holm-adjusted where Holm's step applied) with the unadjusted verdict beside it."""
    cell = f"**{c.verdict.text()}**"
    if c.unadjusted is not None:
        cell += f" — {c.holm}; unadjusted {LEVEL:g}: {c.unadjusted.text()}"
    elif c.holm:
        cell += f" — {c.holm}"
    return cell


def holm_note(family: list[str]) -> str:
    """The table text on Holm's correction, naming this report's family."""
    names = ", ".join(f"`{i}`" for i in family) if family else "none in this report"
    return ("Multiplicity: the claims whose interval test ran in this report (decided or not) form one family for "
            f"Holm's step-down correction (family-wise error 5%; this report's family: {names}); the decided "
            "ones are re-tested at 1 - 0.05/k for k = the family members not yet confirmed, and the verdict column "
            "shows the adjusted verdict with the unadjusted 95% one beside it; 'measured here' gives the "
            "unadjusted intervals, then the intervals at Holm's level. Claims without data for a test, and claims "
            "decided by a rule on point values (Table 9's cells), are outside the family. Within a claim of "
            "several comparisons, 'reproduced' needs every comparison (no adjustment needed), 'not reproduced' "
            "any one.")
