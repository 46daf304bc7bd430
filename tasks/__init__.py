"""Benchmark tasks: ruler/, longbench/, gsm8k/ (accuracy; names in ``magicpig_tasks.registry``) and estimation/."""
