"""The benchmark harness: evaluation runner, benchmarks, projection model, report and CLI.

It imports the runtime (``magicpig``) and the benchmark tasks (``magicpig_tasks``); neither imports it back.
"""
