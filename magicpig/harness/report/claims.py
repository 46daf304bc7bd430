"""The claims table: each qualitative claim of the paper (``claims:`` in ``config/paper_reference.yaml``),
what this run measured, and a verdict: reproduced / not reproduced / not testable here (why).

A claim's ``kind`` names its test (``TESTS``: accuracy tests in ``claims_accuracy``, attention-level and
system tests in ``claims_system``); the thresholds, margins and their sources are the YAML's. Accuracy
intervals are made by ``paired`` (exact or score intervals for 0/100 scores, a bootstrap that cannot collapse
for graded scores, MOVER over tasks); a comparison that rests on fewer than ``min_samples`` samples per task,
method and length, or on a baseline at the floor or ceiling, cannot decide and says so with its tasks and n.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from magicpig.harness.report.claims_accuracy import centering, near, superior
from magicpig.harness.report.claims_system import error_ratio, speedup, table9
from magicpig.harness.report.markdown import table
from magicpig.harness.report.verdicts import (NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Context,  # noqa: F401
                                              Verdict, combine, decide, testable)


@dataclass
class ClaimResult:
    id: str
    text: str
    test: str
    measured: str
    verdict: Verdict
    needs: str = ""


TESTS: dict[str, Callable[[dict, Context], tuple[str, Verdict]]] = {
    "near": near, "superior": superior, "centering": centering,
    "error_ratio": error_ratio, "table9": table9, "speedup": speedup,
}

INTERVAL_NOTE = (
    "Intervals are two-sided 95%. Per task, two methods are compared on the same samples (paired by sample "
    "id): when every score is 0 or 100, by the difference of the proportions right with Newcombe's hybrid "
    "score interval for paired proportions (built from the pairs where the two disagree; it keeps a width "
    "when none do: 20 agreeing pairs give about +-16 points); for graded scores by a percentile bootstrap of "
    "the mean paired difference (seed 0, 2000 resamples), widened to an exact bound (Clopper-Pearson on how "
    "many differences are non-zero, times the score range) when fewer than 10 differences are non-zero. A "
    "single score level uses Clopper-Pearson (0/100 scores) or the bootstrap with the same exact bound. Task "
    "averages combine the per-task intervals by MOVER (Zou & Donner). A comparison uses only tasks with at "
    "least `min_samples` samples per method at that length, leaves out tasks whose baseline leaves no room "
    "for the effect (floor / ceiling within `floor_points` of 0 / 100), and names the tasks and n it rests on. "
    "Ratios over prompts use a Student t interval of the mean log ratio. 'power' notes what the paper's own "
    "averages would give at the paper's sample count.")


def evaluate(results: Path | str, ref: dict, gpu_results: Path | str | None = None) -> list[ClaimResult]:
    """Every claim of ``ref['claims']['items']`` decided on the results tree; ``gpu_results``: the
    ``make gpu-check`` output folder (default: ``gpu`` beside ``results``)."""
    ctx = Context(Path(results), ref, Path(gpu_results) if gpu_results is not None else None)
    out = []
    for claim in ref.get("claims", {}).get("items", []):
        test = TESTS.get(claim.get("kind"))
        if test is None:
            measured, verdict = "—", testable(f"unknown test kind {claim.get('kind')!r}")
        else:
            measured, verdict = test(claim, ctx)
        out.append(ClaimResult(claim["id"], claim["text"], claim.get("test", ""), measured, verdict,
                               claim.get("needs", "")))
    return out


def claims_section(results: Path | str, ref: dict, gpu_results: Path | str | None = None) -> list[str]:
    """The Markdown of the claims table, with the note on what its intervals are."""
    claims = ref.get("claims", {})
    rows = [[f"`{c.id}`", c.text, f"`{c.needs}`" if c.needs else "—", c.test, c.measured, f"**{c.verdict.text()}**"]
            for c in evaluate(results, ref, gpu_results)]
    return ["## Claims",
            "Each of the paper's qualitative claims (`claims:` in `config/paper_reference.yaml`), what this run "
            "measured and the verdict. The test column states the test, its margin and where the margin comes "
            f"from; min_samples = {claims.get('min_samples', 20)} per task, method and length; "
            f"floor_points = {claims.get('floor_points', 5)}. " + INTERVAL_NOTE,
            table(["claim", "paper", "needs", "test", "measured here", "verdict"], rows) if rows
            else "No claims listed."]
