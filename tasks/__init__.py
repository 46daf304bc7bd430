"""Benchmark tasks: ruler/, longbench/, gsm8k/ (accuracy; names in ``tasks.registry``) and estimation/."""
