"""Issue 42 items 1 and 3: the prefill dtype (``magicpig.prefill_dtype``: detection, ``auto``, the engine's
bfloat16 prefill handing float32 keys to decode) and the ``auto`` backend's fallback when the CPU module does
not build."""
from __future__ import annotations

import pytest
import torch

from tiny_models import random_prompt, tiny_model
from magicpig import backends, prefill_dtype
from magicpig.engine import Engine, GenerationConfig
from magicpig.prefill_dtype import cpu_flags, resolve_prefill_dtype

CPUINFO_X86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx512f avx512_bf16 amx_tile\n\n" \
              "processor\t: 1\nflags\t\t: fpu\n"


def test_cpu_flags_reads_the_first_processor():
    assert cpu_flags(CPUINFO_X86) == {"fpu", "sse2", "avx512f", "avx512_bf16", "amx_tile"}
    assert cpu_flags("Features\t: fp asimd bf16\n") == {"fp", "asimd", "bf16"}
    assert cpu_flags("no flags here") == set()


@pytest.mark.parametrize("flags,want", [("avx512f avx512_bf16", "bfloat16"), ("amx_bf16 amx_tile", "bfloat16"),
                                        ("avx2 avx512f", "float32")])
def test_auto_is_bfloat16_only_on_a_cpu_with_native_bf16(tmp_path, monkeypatch, flags, want):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    monkeypatch.setattr(prefill_dtype, "CPUINFO", info)
    prefill_dtype.cpu_has_bf16.cache_clear()
    try:
        assert resolve_prefill_dtype("auto", "cpu") == want
        assert resolve_prefill_dtype("auto", "cuda") == "float32"  # CPU flags say nothing about a GPU
        assert resolve_prefill_dtype("float32", "cpu") == "float32"
        assert resolve_prefill_dtype("bfloat16", "cuda") == "bfloat16"
    finally:
        prefill_dtype.cpu_has_bf16.cache_clear()


def test_unreadable_cpuinfo_means_no_bf16(tmp_path, monkeypatch):
    monkeypatch.setattr(prefill_dtype, "CPUINFO", tmp_path / "missing")
    prefill_dtype.cpu_has_bf16.cache_clear()
    try:
        assert resolve_prefill_dtype("auto", "cpu") == "float32"
    finally:
        prefill_dtype.cpu_has_bf16.cache_clear()


def test_bad_prefill_dtype_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="prefill_dtype must be one of auto, float32, bfloat16, got 'fp16'"):
        resolve_prefill_dtype("fp16", "cpu")
    with pytest.raises(ValueError, match="prefill_dtype must be one of"):
        Engine(tiny_model("llama", layers=2), None, prefill_dtype="half")


def test_bfloat16_prefill_hands_float32_keys_to_decode_and_stays_close():
    model = tiny_model("llama", layers=2)
    prompt = random_prompt(300, seed=50)
    exact = Engine(model, None)  # the library's default: the exact float32 prefill
    fast = Engine(model, None, prefill_dtype="bfloat16")
    assert (exact.prefill_dtype, fast.prefill_dtype) == ("float32", "bfloat16")
    ref, pre = exact.prefill(prompt), fast.prefill(prompt)
    assert all(k.dtype == torch.float32 for k in pre.keys + pre.values) and pre.logits.dtype == torch.float32
    # the bfloat16 prefill ran (its keys differ from float32's) and stays within bfloat16's precision
    diff = max((a - b).abs().max().item() for a, b in zip(ref.keys + ref.values, pre.keys + pre.values))
    scale = max(a.abs().max().item() for a in ref.keys + ref.values)
    assert 0 < diff < 0.05 * scale
    assert 0 < (ref.logits - pre.logits).abs().max().item() < 0.05 * ref.logits.abs().max().item()
    # decode from it: same dtype path as from the float32 prefill
    res = fast.decode(pre, "dense", GenerationConfig(max_new_tokens=3, ignore_eos=True))[0]
    assert res.new_tokens == 3


def test_auto_backend_falls_back_to_reference_saying_so_once(monkeypatch, capsys):
    from magicpig.cpu import extension

    def broken():
        raise RuntimeError("building the MagicPIG CPU module failed: no compiler\nmore lines")

    monkeypatch.setattr(extension, "load", broken)
    backends.auto_backend.cache_clear()
    try:
        assert backends.resolve_backend("auto") == "reference"
        assert backends.resolve_backend("auto") == "reference"
        err = capsys.readouterr().err
        assert err.count("magicpig: the CPU module does not build here") == 1 and "no compiler" in err
        assert "more lines" not in err
        assert backends.resolve_backend("offload") == "offload"  # an explicit choice is kept
    finally:
        backends.auto_backend.cache_clear()
    with pytest.raises(ValueError, match="backend must be one of auto, reference, offload, got 'gpu'"):
        backends.resolve_backend("gpu")


def test_auto_backend_is_offload_where_the_cpu_module_builds():
    from magicpig.cpu import extension

    assert backends.auto_backend() == ("offload" if extension.available() else "reference")
    assert Engine(tiny_model("llama", layers=2), None).backend == backends.auto_backend()
