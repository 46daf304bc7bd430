"""The library API on a transformers model: `with magicpig.patch(...)` and its undo, `attn_implementation=
"magicpig"` after `import magicpig`, and the `>>>` examples of patch, Engine, parse_method, DecodeOptions."""
import doctest
import subprocess
import sys
import textwrap

import pytest
import torch

from tiny_models import random_prompt, tiny_model
import magicpig
from magicpig import attention
from magicpig.cache import MagicPIGCache
from magicpig.engine import Engine, GenerationConfig

SPEC = "magicpig:K=10,L=150"


def _greedy(model, prompt, n=6):
    return model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)[0, len(prompt):].tolist()


def _magicpig_state(model) -> dict:
    """Everything patch may leave behind on the model."""
    return {"class": type(model), "attn": model.config._attn_implementation,
            "config": {k: v for k, v in vars(model.config).items() if k.startswith("magicpig")},
            "attrs": sorted(k for k in vars(model)
                            if k.startswith("_magicpig") or k == "_prepare_cache_for_generation")}


def test_with_patch_decodes_with_magicpig_and_restores_the_model():
    model = tiny_model("llama")
    prompt = random_prompt(200, seed=31)
    before_tokens, before = _greedy(model, prompt), _magicpig_state(model)
    assert before["attn"] == "sdpa" and before["attrs"] == [] and before["config"] == {}
    # what MagicPIG decodes on this prompt: the engine on a twin (same seed, same weights; Engine switches
    # its model to the hook for good)
    want = Engine(tiny_model("llama"), None, backend="reference").generate(
        prompt, SPEC, GenerationConfig(max_new_tokens=6, ignore_eos=True))[0]
    assert want.token_ids != before_tokens  # MagicPIG's tokens differ from exact attention's here

    with magicpig.patch(model, SPEC, backend="reference") as patched:
        assert patched is model and isinstance(model, before["class"])
        assert model.config._attn_implementation == "magicpig"
        out = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, eos_token_id=None,
                             return_dict_in_generate=True)
        cache = out.past_key_values
        assert isinstance(cache, MagicPIGCache) and cache.method.spec() == "magicpig"
        assert cache.layer_decoders == ["reference"] * 4
        assert out.sequences[0, len(prompt):].tolist() == want.token_ids

    assert _magicpig_state(model) == before
    assert type(model) is before["class"] and type(model).__name__ == "LlamaForCausalLM"
    assert _greedy(model, prompt) == before_tokens


def test_patch_by_default_decodes_magicpig_on_the_fast_path():
    """No backend given: the offload backend where the CPU module builds (``auto_backend``), with the tokens
    the engine's default decodes."""
    from magicpig.backends import auto_backend

    model, prompt = tiny_model("llama"), random_prompt(200, seed=31)
    want = Engine(tiny_model("llama"), None).generate(prompt, SPEC, GenerationConfig(max_new_tokens=6,
                                                                                      ignore_eos=True))[0]
    with magicpig.patch(model, SPEC):
        assert model.config.magicpig_backend == auto_backend() == want.backend
        out = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, eos_token_id=None,
                             return_dict_in_generate=True)
        decoders = out.past_key_values.layer_decoders
    assert out.sequences[0, len(prompt):].tolist() == want.token_ids
    if auto_backend() == "offload":
        assert "offload" in decoders and "reference" not in decoders
    else:
        assert decoders == ["reference"] * 4


def test_patch_without_with_stays_and_nested_blocks_unwind_in_order():
    model = tiny_model("llama", layers=2)
    prompt = random_prompt(120, seed=32)
    before_tokens, before = _greedy(model, prompt), _magicpig_state(model)
    assert magicpig.patch(model, "dense") is model  # no `with`: stays patched
    assert model.config._attn_implementation == "magicpig" and model.config.magicpig_method == "dense"
    assert _greedy(model, prompt) == before_tokens  # dense through the hook: the same tokens
    with magicpig.patch(model, "streaming:local=16", backend="reference"):
        assert model.config.magicpig_method == "streaming:local=16"
        with magicpig.patch(model, SPEC, backend="offload", offload_impl="torch"):
            assert model.config.magicpig_backend == "offload"
            assert model._magicpig["options"].offload_impl == "torch"
        assert model.config.magicpig_method == "streaming:local=16"
        assert model.config.magicpig_backend == "reference"
        magicpig.patch(model, "oracle:budget=8")  # a patch inside a block is undone with it
        assert model.config.magicpig_method == "oracle:budget=8"
    assert model.config.magicpig_method == "dense" and model.config._attn_implementation == "magicpig"
    assert isinstance(model, attention._Patched)


def test_with_patch_restores_after_an_error_and_refuses_bad_options_before_changing_anything():
    model = tiny_model("qwen2", layers=2)
    before = _magicpig_state(model)
    with pytest.raises(KeyError):
        with magicpig.patch(model, "dense"):
            raise KeyError("inside")
    assert _magicpig_state(model) == before
    for bad in (dict(backend="gpu"), dict(offload_impl="fast"), dict(offload_dtype="int8")):
        with pytest.raises(ValueError, match=next(iter(bad))):
            magicpig.patch(model, "dense", **bad)
    with pytest.raises(ValueError, match="no field 'M'"):
        magicpig.patch(model, "magicpig:M=3")
    assert _magicpig_state(model) == before


def test_attn_implementation_magicpig_after_import_magicpig():
    """In a fresh interpreter: `import magicpig` before transformers is loaded (the registration waits for
    transformers' model code), then `from_config(..., attn_implementation="magicpig")` decodes with an
    explicit MagicPIGCache and its tokens equal the sdpa model's with the dense method."""
    code = textwrap.dedent("""
        import inspect, sys
        import magicpig
        assert "transformers.modeling_utils" not in sys.modules
        import torch
        from transformers import AutoModelForCausalLM, LlamaConfig
        cfg = lambda: LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2)
        torch.manual_seed(0)
        hooked = AutoModelForCausalLM.from_config(cfg(), attn_implementation="magicpig").eval()
        torch.manual_seed(0)
        sdpa = AutoModelForCausalLM.from_config(cfg(), attn_implementation="sdpa").eval()
        assert hooked.config._attn_implementation == "magicpig"
        ids = torch.randint(3, 64, (1, 40))
        want = sdpa.generate(ids, max_new_tokens=5, do_sample=False)
        kw = "cache" if "cache" in inspect.signature(hooked.forward).parameters else "past_key_values"
        got = hooked.generate(ids, max_new_tokens=5, do_sample=False, **{kw: magicpig.MagicPIGCache(hooked, "dense")})
        assert torch.equal(want, got)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


@pytest.mark.parametrize("obj", ["magicpig.attention.patch", "magicpig.engine.Engine",
                                 "magicpig.methods.registry.parse_method", "magicpig.options.DecodeOptions"])
def test_docstring_examples_run(obj):
    import importlib

    module, _, name = obj.rpartition(".")
    target = getattr(importlib.import_module(module), name)
    tests = doctest.DocTestFinder(recurse=False).find(target, name, globs={name: target})
    assert tests and tests[0].examples, f"{obj} has no >>> examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
