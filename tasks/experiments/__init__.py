"""Attention-level experiments of MagicPIG (estimation error, sampling cost, centering, geometry) and
automatic (K, L) selection, run on queries/keys/values captured from one exact prefill of a real model.

Modules: ``haystack`` (the long prompt), ``capture`` (recording attention + safetensors capture files), ``problems``
(turning a capture into per-layer decode problems), ``experiments`` (the five experiments, one function
each, each returning a pandas DataFrame), ``tune_kl`` (choose (K, L) for a target cost).
"""
