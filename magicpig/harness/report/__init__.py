"""Regenerate the report: tables and figures from the results files, each beside the paper's numbers.

Nothing here holds a number of its own: reproduced values come from ``results/<preset>/`` and the paper's
from ``config/paper_reference.yaml``.
"""
from magicpig.harness.report.sections import build_report

__all__ = ["build_report"]
