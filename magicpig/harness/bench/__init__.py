"""Benchmarks: ``kernel`` times one decode step of one layer on the CPU module, ``decode`` the whole model
(the paper's throughput experiment, split by job into ``decode_*``, ``timed_decode`` and ``row_monitor``)
with its ``prompts``, ``memory`` check and ``table`` of rows. How to read their results: docs/benchmarking.md."""
