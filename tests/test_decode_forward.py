"""magicpig.decode_forward: our decode loop against transformers' forward, and where it refuses."""
from __future__ import annotations

import pytest
import torch

from magicpig import cpu
from magicpig.decode_forward import DecodeForward, check_forward_impl, unsupported_reason
from magicpig.engine import Engine, GenerationConfig
from tiny_models import TINY_KINDS, random_prompt, tiny_model

pytestmark = pytest.mark.skipif(not cpu.available(), reason="the CPU module cannot be built here")

METHODS = [("dense", "reference"), ("magicpig:K=4,L=20", "offload"), ("quest:page_size=8,ratio=0.3", "reference"),
           ("dense", "offload")]


def biased_llama():
    """A Llama with biases on every projection (attention_bias, mlp_bias) and an explicit head_dim."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(3)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=24, attention_bias=True,
                      mlp_bias=True, initializer_range=0.2, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()


def decode_both(model, spec, backend, continuation):
    """The same batch decoded by transformers' forward and by our loop, both with kernel 4's linears."""
    prompts = [random_prompt(130, seed=11), random_prompt(77, seed=12)]  # left padding in the batch
    out = {}
    for impl in ("transformers", "magicpig"):
        engine = Engine(model, backend=backend, linear_impl="magicpig", decode_forward=impl)
        pre = engine.prefill(prompts)
        out[impl] = engine.decode(pre, spec, GenerationConfig(max_new_tokens=6, ignore_eos=True, return_logits=True),
                                  continuation_ids=continuation)
    return out


@pytest.mark.parametrize("kind", [*TINY_KINDS, "biased-llama"])
@pytest.mark.parametrize("spec,backend", METHODS)
def test_decode_loop_logits_equal_transformers(kind, spec, backend):
    model = biased_llama() if kind == "biased-llama" else tiny_model(kind)
    continuation = [random_prompt(5, seed=13)]  # forced tokens: both paths see the same inputs
    out = decode_both(model, spec, backend, continuation)
    for ref, ours in zip(out["transformers"], out["magicpig"]):
        assert ref.forward == "transformers" and ours.forward == "magicpig"
        assert len(ours.logits) == len(ref.logits) == 6
        for a, b in zip(ref.logits, ours.logits):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-4)
        assert ours.token_ids == ref.token_ids
        assert ours.layer_decoders == ref.layer_decoders


def test_decode_loop_matches_transformers_with_torch_linears():
    """Against transformers with torch's own linear layers: equal up to float32 summation order."""
    model = tiny_model("qwen2")
    prompt = random_prompt(90, seed=21)
    logits = {}
    for linear, impl in (("torch", "transformers"), ("magicpig", "magicpig")):
        engine = Engine(model, backend="reference", linear_impl=linear, decode_forward=impl)
        res = engine.generate(prompt, "dense", GenerationConfig(max_new_tokens=5, ignore_eos=True,
                                                                return_logits=True))[0]
        assert res.forward == impl and res.linear == linear
        logits[impl] = torch.stack(res.logits)
    torch.testing.assert_close(logits["magicpig"], logits["transformers"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rope_type", ["default", "linear", "dynamic"])
def test_rotary_table_holds_the_modules_values(rope_type):
    """cos / sin read from DecodeForward's table of ROTARY_BLOCK positions equal the rotary module's own, bit for
    bit, across the table's blocks and for a batch at different positions; a dynamic type skips the table."""
    from transformers import AutoModelForCausalLM

    from magicpig.decode_forward import ROTARY_BLOCK
    from tiny_models import tiny_config

    config = tiny_config("llama")
    config.rope_parameters = dict(config.rope_parameters, rope_type=rope_type, factor=2.0)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    assert model.model.rotary_emb.rope_type == rope_type
    fwd = DecodeForward(model)
    assert fwd.rotary_table_ok == (rope_type != "dynamic")
    h = torch.zeros(2, 1, model.config.hidden_size)
    for pos in ([5, 5], [ROTARY_BLOCK + 4, 7], [3 * ROTARY_BLOCK - 1, 3 * ROTARY_BLOCK], [0, 2]):
        positions = torch.tensor(pos)[:, None]
        cos, sin = fwd._rotary(h, positions)
        want_cos, want_sin = model.model.rotary_emb(h, positions)
        assert cos.shape == (2, want_cos.shape[-1]) and cos.is_contiguous() and sin.is_contiguous()
        assert torch.equal(cos, want_cos[:, 0]) and torch.equal(sin, want_sin[:, 0])
    assert (fwd.rotary_table[1] is not None) == fwd.rotary_table_ok


def test_auto_uses_the_loop_only_where_it_applies():
    model = tiny_model("llama")
    assert unsupported_reason(model) is None
    assert Engine(model).step_forward is not None
    assert Engine(model, linear_impl="torch").step_forward is None  # the loop runs kernel 4 only
    with pytest.raises(ValueError, match="linear_impl='torch'"):
        Engine(model, linear_impl="torch", decode_forward="magicpig")
    assert Engine(model, decode_forward="transformers").step_forward is None


def test_unsupported_models_are_named():
    bf16 = tiny_model("llama").to(torch.bfloat16)
    assert "bfloat16" in unsupported_reason(bf16)
    assert Engine(bf16).step_forward is None
    with pytest.raises(ValueError, match="decode_forward='magicpig' cannot run this model: .*bfloat16"):
        Engine(bf16, decode_forward="magicpig")
    hooked = tiny_model("llama")
    hooked.model.layers[1].mlp.register_forward_hook(lambda *a: None)
    assert "forward hooks" in unsupported_reason(hooked)
    gelu = tiny_model("llama")
    gelu.config.hidden_act = "gelu"
    assert "hidden_act='gelu'" in unsupported_reason(gelu)
    with pytest.raises(ValueError, match="hidden_act"):
        DecodeForward(gelu)
    with pytest.raises(ValueError, match="decode_forward must be one of"):
        check_forward_impl("eager")
