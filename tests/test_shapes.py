"""Shape-only models (``shape:NAME``) and model-file checks in magicpig.models."""
import pytest
import torch

from magicpig import models, shapes
from magicpig.gguf_header import gguf_data_extent
from magicpig.harness.cli import main


@pytest.mark.parametrize("name", shapes.shape_names())
def test_every_stored_shape_builds_with_its_published_parameter_count(name):
    shape = shapes.model_shape(name)
    cfg = shape.config()
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (
        shape.layers, shape.heads, shape.kv_heads, shape.head_dim)
    assert not getattr(cfg, "sliding_window", None)  # MagicPIG decodes full-attention layers only
    params = models.shape_weight_bytes(name, torch.bfloat16) / 2
    assert params == pytest.approx(shape.params_b * 1e9, rel=0.01)
    back = shapes.ModelShape.of_config(cfg, torch.bfloat16, name)
    assert (back.layers, back.heads, back.kv_heads, back.head_dim, back.hidden, back.intermediate, back.vocab,
            back.tie_embeddings) == (shape.layers, shape.heads, shape.kv_heads, shape.head_dim, shape.hidden,
                                     shape.intermediate, shape.vocab, shape.tie_embeddings)


def test_a_shapes_file_missing_a_field_names_the_entry_and_the_field(tmp_path):
    bad = tmp_path / "shapes.yaml"
    bad.write_text("toy:\n  hf_id: a/b\n  model_type: llama\n  num_layers: 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"'toy' lacks .*num_heads"):
        shapes.load_shapes(bad)


def test_shape_model_is_built_on_the_target_device_in_the_target_dtype():
    meta = models.build_shape_model("llama-3.1-8b", device="meta", dtype=torch.bfloat16)
    assert all(p.device.type == "meta" and p.dtype == torch.bfloat16 for p in meta.parameters())
    net, tok = models.load_model("shape:tiny-llama", device="cpu", dtype=torch.bfloat16, allow_shape=True)
    assert tok is None and models.is_shape_only(net)
    assert all(p.dtype == torch.bfloat16 for p in net.parameters())
    out = net(torch.randint(0, 512, (2, 40))).logits
    assert torch.isfinite(out).all() and out.float().std() > 0


def test_shape_models_are_reproducible_and_tied_when_the_real_model_is():
    a = models.build_shape_model("tiny-llama", seed=3)
    b = models.build_shape_model("tiny-llama", seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    tied = models.build_shape_model("smollm2-135m", device="meta")
    assert tied.lm_head.weight is tied.model.embed_tokens.weight


def test_unknown_shape_lists_the_known_ones():
    with pytest.raises(ValueError, match="shape:llama-3.1-8b"):
        models.resolve("shape:llama-9", allow_shape=True)


def test_accuracy_paths_refuse_shape_models():
    for call in (lambda: models.resolve("shape:tiny-llama"), lambda: models.load_model("shape:tiny-llama"),
                 lambda: models.load_tokenizer("shape:tiny-llama")):
        with pytest.raises(ValueError, match="shape-only"):
            call()


def test_generate_command_refuses_a_shape_model(capsys):
    assert main(["generate", "--model", "shape:tiny-llama", "--prompt", "hi"]) == 2
    assert "shape-only" in capsys.readouterr().err


# ---- GGUF integrity --------------------------------------------------------------------------------
def _write_gguf(path):
    import numpy as np
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_tensor("a.weight", np.ones((64, 32), dtype=np.float32))
    w.add_tensor("b.weight", np.ones((16,), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_extent_matches_a_complete_file(tmp_path):
    path = tmp_path / "m.gguf"
    _write_gguf(path)
    end, _ = gguf_data_extent(path)
    assert end <= path.stat().st_size and end > 64 * 32 * 4
    assert models.resolve(str(path)).gguf_file == "m.gguf"


@pytest.mark.parametrize("keep", [0.95, 0.3, 0.01])
def test_truncated_gguf_is_a_clear_error_naming_the_file(tmp_path, keep):
    full = tmp_path / "full.gguf"
    _write_gguf(full)
    data = full.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:max(8, int(len(data) * keep))])
    with pytest.raises(ValueError, match=r"cut\.gguf.*(truncated|damaged)"):
        models.resolve(str(cut))


def test_empty_gguf_is_a_clear_error(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.gguf"):
        models.resolve(str(path))
