"""The results-tree readers under the name the report's section builders import them by; they live in
``magicpig.harness.results_tree`` (``magicpig compare`` reads results too)."""
from magicpig.harness.results_tree import canonical, collect_metrics, load_reference, read_csv  # noqa: F401
