"""``SPEC@BACKEND`` (``bench decode --method``, ``decode_bench.methods``) has one reader:
magicpig.backends.parse_spec_at_backend."""
from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from magicpig.backends import BENCH_BACKENDS, SpecOnBackend, parse_spec_at_backend
from magicpig.harness.projection.bandwidth import method_family, sparse_setting


def test_spec_at_backend_has_one_reader():
    """SPEC@BACKEND splits at the last '@' into a frozen value that writes itself back; the backend is
    checked against BENCH_BACKENDS, the spec is left to parse_method."""
    given = parse_spec_at_backend("magicpig:K=10,L=150@offload")
    assert given == SpecOnBackend("magicpig:K=10,L=150", "offload") and str(given) == "magicpig:K=10,L=150@offload"
    assert parse_spec_at_backend(" dense ") == SpecOnBackend("dense", "") and str(SpecOnBackend("dense")) == "dense"
    assert {parse_spec_at_backend(f"dense@{b}").backend for b in BENCH_BACKENDS} == set(BENCH_BACKENDS)
    with pytest.raises(FrozenInstanceError):
        given.backend = "stock"
    with pytest.raises(ValueError, match="backend after '@' must be one of stock, llamacpp"):
        parse_spec_at_backend("dense@gpu")


def test_its_readers_agree():
    """bench decode, the throughput projection and the config check read the backend from the same split."""
    from magicpig.harness.bench.decode_options import parse_method_arg
    from magicpig.harness.pipeline_config import method_problems

    assert parse_method_arg("magicpig:K=8,L=75@reference") == ("magicpig:K=8,L=75", "reference")
    assert method_family("magicpig:K=8,L=75@offload") == "magicpig" and method_family("dense@stock") == "dense@stock"
    assert sparse_setting("magicpig:K=8,L=75@offload", layers=4).K == 8
    with pytest.raises(ValueError, match="--method: backend after '@'"):
        parse_method_arg("dense@gpu")
    (problem,) = method_problems("decode_bench.methods", ["dense@gpu"], eval_specs=False)
    assert problem.startswith("decode_bench.methods[0]: backend after '@' must be one of")
