"""The statistics behind every verdict this suite prints, in one place: ``bootstrap`` (the seeded percentile
bootstrap and ``Interval``), ``paired`` (paired and single-level intervals: Newcombe, Clopper-Pearson and
Wilson bounds, the hulled bootstrap, MOVER over tasks, Student t intervals of log ratios and of unit means,
the interval level in force), ``detectable`` (minimum detectable effects) and ``verdicts`` (reproduced / not
reproduced / not testable from an interval and a margin; Holm's step-down correction).

The claims table (``magicpig.harness.report.claims*``) and ``magicpig compare`` (``magicpig.harness.compare``)
both call these functions, so a comparison is decided the same way in either. Nothing here reads result files
or imports the report (tests/test_layout.py checks this).
"""
