"""The transformers hook: exact prefill attention, `attn_implementation="magicpig"`, `magicpig.patch`."""
import inspect

import pytest
import torch

from tiny_models import random_prompt, tiny_model
from magicpig import active_layer, attention
from magicpig.engine import Engine, GenerationConfig


def test_registered_with_attention_and_mask_interfaces():
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    attention.register()
    assert AttentionInterface._global_mapping["magicpig"] is attention.magicpig_attention
    mask = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping["magicpig"]  # sdpa_mask, None for any plain chunk
    padded = torch.tensor([[False, True, True, True]])
    assert torch.equal(mask(batch_size=1, q_length=2, kv_length=4, q_offset=2, attention_mask=padded),
                       sdpa_mask(batch_size=1, q_length=2, kv_length=4, q_offset=2, attention_mask=padded))
    assert mask(batch_size=1, q_length=2, kv_length=4, q_offset=2) is None


@pytest.mark.parametrize("padded", [False, True])
def test_exact_attention_blocks_match_sdpa(padded):
    torch.manual_seed(0)
    B, H, Hkv, q, kv, d = 2, 4, 2, 9, 13, 8
    query, key, value = torch.randn(B, H, q, d), torch.randn(B, Hkv, kv, d), torch.randn(B, Hkv, kv, d)
    pos = torch.arange(kv)
    mask = (pos[None, :] <= (pos[kv - q:, None]))[None, None].expand(B, 1, q, kv).clone()
    if padded:
        mask[1, :, :, :6] = False  # row 1 left-padded by 6: its first queries see nothing
    out = attention.exact_attention(query, key, value, mask, None, block=4)
    rep = lambda x: x.repeat_interleave(H // Hkv, 1)
    ref = torch.nn.functional.scaled_dot_product_attention(query, rep(key), rep(value), attn_mask=mask)
    rows = mask.any(-1, keepdim=True)
    ref = torch.where(rows, ref, torch.zeros(())).transpose(1, 2)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    if not padded:  # mask None means plain causal with the queries at the last q positions
        causal = attention.exact_attention(query, key, value, None, None, block=4)
        torch.testing.assert_close(causal, ref, atol=1e-5, rtol=1e-5)


def test_dense_through_hook_matches_model_attention(tiny_kind):
    model = tiny_model(tiny_kind)
    prompt = random_prompt(37, seed=3)
    own = model.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False)[0, len(prompt):].tolist()
    engine = Engine(model, None)
    res = engine.generate(prompt, "dense", GenerationConfig(max_new_tokens=10, ignore_eos=True))[0]
    assert res.token_ids == own
    assert res.cost == pytest.approx(1.0)
    # the one-line patch + ordinary generate gives the same tokens
    attention.patch(model, "dense")
    patched = model.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False)[0, len(prompt):]
    assert patched.tolist() == own


@pytest.mark.parametrize("backend", ["reference", "offload"])
def test_patched_generate_equals_engine(backend):
    """model.generate after magicpig.patch (batch, left padding from the tokenizer-style mask) decodes
    like the engine with the same method and backend."""
    model = tiny_model("llama", layers=3)
    method = "magicpig:K=4,L=24,local=16,sinks=2"
    prompts = [random_prompt(150, seed=5), random_prompt(120, seed=6)]
    engine = Engine(model, None, backend=backend, offload_impl="torch")
    want = [r.token_ids for r in engine.generate(prompts, method, GenerationConfig(max_new_tokens=6,
                                                                                   ignore_eos=True))]
    attention.patch(model, method, backend=backend, offload_impl="torch")
    ids = torch.zeros(2, 150, dtype=torch.long)
    mask = torch.zeros(2, 150, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, 150 - len(p):] = torch.tensor(p)
        mask[b, 150 - len(p):] = 1
    out = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0,
                         eos_token_id=None)
    assert out[:, 150:].tolist() == want
    import gc

    gc.collect()  # the hook holds the finished generate()'s cache only weakly
    assert active_layer._local.cache() is None


def test_decode_without_magicpig_cache_is_a_clear_error():
    model = tiny_model("qwen2", layers=2)
    attention.use_hook(model)
    with pytest.raises(RuntimeError, match="MagicPIGCache"):
        model.generate(torch.tensor([random_prompt(12)]), max_new_tokens=3, do_sample=False)


def test_patch_rejects_bad_backend():
    model = tiny_model("llama", layers=2)
    with pytest.raises(ValueError, match="backend"):
        attention.patch(model, "dense", backend="gpu")


def test_attn_implementation_name_at_load_time():
    """`attn_implementation="magicpig"` at load, then generate with an explicit MagicPIGCache."""
    from magicpig.cache import MagicPIGCache

    attention.register()
    sdpa = tiny_model("mistral", layers=3)
    hooked = tiny_model("mistral", layers=3, attn_implementation="magicpig")
    assert hooked.config._attn_implementation == "magicpig"
    ids = torch.tensor([random_prompt(30, seed=9)])
    want = sdpa.generate(ids, max_new_tokens=6, do_sample=False)
    # the generate keyword of a cache: `cache` from transformers 5, `past_key_values` before
    kw = "cache" if "cache" in inspect.signature(hooked.forward).parameters else "past_key_values"
    got = hooked.generate(ids, max_new_tokens=6, do_sample=False, **{kw: MagicPIGCache(hooked, "dense")})
    assert torch.equal(want, got)


def _project_imports(path):
    """magicpig modules a source file imports, read from its AST (every import, also inside functions)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("magicpig"):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("magicpig")}
    return found


def test_active_layer_hand_off_lives_in_one_module():
    """The hand-off (set by the cache, read by the hook, cleared by the engine) has one home that imports
    no project module; cache, attention and the decoders never import each other back."""
    from pathlib import Path

    import magicpig

    root = Path(magicpig.__file__).parent
    files = {name: [root / f"{name}.py"] for name in ("active_layer", "cache", "attention", "engine", "decoders")}
    files["cpu_torch"] = [root / "cpu" / "torch_twin.py"]
    files["cpu"] = sorted(set((root / "cpu").glob("*.py")) - set(files["cpu_torch"]))
    imports = {name: set().union(*map(_project_imports, paths)) for name, paths in files.items()}
    assert imports["active_layer"] == set()
    assert "magicpig.active_layer.set_active" in imports["cache"]
    assert "magicpig.active_layer.get_active" in imports["attention"]
    assert "magicpig.active_layer.clear_active" in imports["engine"]
    assert not any(m.startswith("magicpig.attention") for m in imports["cache"] | imports["decoders"])
    assert not any(m.startswith(("magicpig.cache", "magicpig.cpu", "magicpig.engine")) for m in imports["decoders"])
    assert not any(m.startswith("magicpig.decoders") for m in imports["cpu_torch"])
    for name in ("set_active", "get_active", "clear_active"):  # defined once
        assert all(f"def {name}(" not in path.read_text() for m in files if m != "active_layer" for path in files[m])
    methods = root / "methods"
    assert not any(m.startswith(("magicpig.decoders", "magicpig.cache", "magicpig.cpu"))
                   for f in methods.glob("*.py") for m in _project_imports(f))
