"""The recording attention on a tiny random Llama (no weights), the haystack prompt, the CLI wiring."""
import json

import pytest
import torch

from magicpig_tasks.experiments.capture import capture_model
from magicpig_tasks.experiments.haystack import build_prompt


class CharTokenizer:
    """A byte-level stand-in tokenizer: one id per UTF-8 byte (ids < 256)."""

    chat_template = None

    def __call__(self, text, add_special_tokens=False, return_tensors=None):
        ids = list(text.encode("utf-8"))
        return {"input_ids": torch.tensor([ids]) if return_tensors == "pt" else ids}

    def decode(self, ids):
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def tiny_llama():
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()


def test_capture_records_cache_and_queries(tiny_llama):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    tok = CharTokenizer()
    text = "the quick brown fox jumps over the lazy dog " * 3
    n = len(text)
    cap = capture_model(tiny_llama, tok, text, decode_steps=3, prompt_queries=2, dtype=torch.float32)
    assert cap.queries.shape == (2, 5, 4, 8) and cap.keys.shape == (2, 2, n + 3, 8)
    assert cap.query_positions.tolist() == [n - 2, n - 1, n, n + 1, n + 2]
    assert tiny_llama.config._attn_implementation == "sdpa"  # restored
    # the same tokens through plain sdpa give the same cache
    gen = list(text.encode("utf-8"))
    with torch.no_grad():
        first = tiny_llama(torch.tensor([gen])).logits[0, -1].argmax()
    ids = torch.tensor([gen + [int(first)]])
    with torch.no_grad():
        out = tiny_llama(ids, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    keys0 = cache.layers[0].keys[0]
    torch.testing.assert_close(cap.keys[0, :, : n + 1], keys0, atol=1e-5, rtol=1e-5)
    # the last prompt query of layer 0, recomputed by hand: RoPE(q_proj(norm(embed)))
    m = tiny_llama.model
    with torch.no_grad():
        x = m.layers[0].input_layernorm(m.embed_tokens(ids[:, :n]))
        q = m.layers[0].self_attn.q_proj(x).view(1, n, 4, 8).transpose(1, 2)
        k = m.layers[0].self_attn.k_proj(x).view(1, n, 2, 8).transpose(1, 2)
        cos, sin = m.rotary_emb(x, torch.arange(n)[None])
        q, _ = apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(cap.queries[0, 1], q[0, :, -1], atol=1e-5, rtol=1e-5)


def test_haystack_prompt_fits_and_holds_the_needle():
    tok = CharTokenizer()
    p = build_prompt(tok, 3000, depth=0.25, seed=3)
    assert 2900 <= p.n_tokens <= 3000
    needle = f"One of the special magic numbers for {p.key} is: {p.value}."
    assert needle in p.text
    pos = p.text.index(needle) / len(p.text)
    assert 0.15 < pos < 0.35
    assert p.text.rstrip().endswith("mentioned in the provided text is")
    with pytest.raises(ValueError, match="depth"):
        build_prompt(tok, 3000, depth=1.5)


def test_haystack_offset_gives_another_text_and_wraps_around():
    from magicpig_tasks.experiments.haystack import essay_text

    tok = CharTokenizer()
    base = build_prompt(tok, 2000, seed=3)
    other = build_prompt(tok, 2000, seed=3, offset=50_000)
    assert other.text != base.text and other.key == base.key and 1900 <= other.n_tokens <= 2000
    corpus = len(tok(essay_text(), add_special_tokens=False)["input_ids"])
    assert build_prompt(tok, 2000, seed=3, offset=corpus).text == base.text
    with pytest.raises(ValueError, match="offset"):
        build_prompt(tok, 2000, offset=-1)


def test_cli_runs_experiments_on_a_capture(tmp_path, capsys):
    from magicpig.harness.cli import main
    from test_estimation import isotropic

    cap = isotropic(n=400, d=16, Q=2, H=2, Lc=2)
    path = cap.save(tmp_path / "cap.pt")
    out = tmp_path / "res"
    assert main(["estimate", "all", "--capture", str(path), "--out-dir", str(out), "--layers", "all",
                 "--kl", "7x40", "--K", "6", "--L", "20,40", "--budgets", "0.05", "--json"]) == 0
    from magicpig.harness.estimate_experiments import NAMES

    report = json.loads(capsys.readouterr().out)
    assert set(report) == set(NAMES)
    for name in NAMES:
        stem = name.replace("-", "_")
        assert (out / f"{stem}.csv").is_file() and (out / f"{stem}_summary.csv").is_file()
    assert (out / "error_topk_vs_oracle_heads.csv").is_file() and (out / "geometry_hist.csv").is_file()
    alone = tmp_path / "error_only"  # the error experiment alone also says which heads are long-tailed
    assert main(["estimate", "error", "--capture", str(path), "--out-dir", str(alone), "--layers", "all", "--kl", "7,40",
                 "--budgets", "0.05,0.2"]) == 0
    assert (alone / "error_topk_vs_oracle_heads.csv").is_file()
    assert main(["estimate", "error", "--capture", str(path), "--kl", "10by150"]) == 2
    assert main(["tune-kl", "--capture", str(path), "--target-cost", "2", "--out-dir", str(tmp_path / "tuned")]) == 2


@pytest.mark.slow
def test_capture_embedded_model_short_prompt():
    """The embedded SmolLM2 at a short haystack: capture two layers, then the spread and grid experiments."""
    from magicpig_tasks.experiments import experiments as E
    from magicpig_tasks.experiments.capture import capture_for_model

    cap = capture_for_model("smollm2", 600, layers="3,20", decode_steps=2, device="cpu")
    assert cap.layers == [3, 20] and cap.num_layers == 30 and cap.head_dim == 64
    assert cap.queries.shape == (2, 3, 9, 64) and cap.keys.shape[:2] == (2, 3)
    assert cap.n_keys == cap.n_prompt + 2 and 550 <= cap.n_prompt <= 600
    spread = E.spread(cap)
    assert ((spread.top_mass_with_sink >= 0.2) & (spread.top_mass_with_sink <= 1.0)).all()
    grid = E.kl_grid(cap, layers=[20], Ks=[8], Ls=[75])
    assert 0 < grid.measured.iloc[0] < 1
