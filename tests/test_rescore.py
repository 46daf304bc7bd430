"""``magicpig rescore``: a results folder written by the runner, re-scored after a deliberate scorer change,
gets new metrics while every predictions.jsonl stays byte-identical."""
from __future__ import annotations

import json

import pytest

from magicpig.harness.cli import main
from magicpig.harness.compare import Side, compare
from magicpig.harness.evaluate import EvalConfig, run_eval
from magicpig.harness.rescore import rescore

TASK = "ruler/niah_single_1"


@pytest.fixture(scope="module")
def tiny():
    """(a 2-layer random Llama over the embedded model's vocabulary, that tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from magicpig.models import load_tokenizer

    tokenizer = load_tokenizer("smollm2")
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                      initializer_range=0.2, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg).eval(), tokenizer


def run_tiny(tiny, out, methods, **kw):
    model, tokenizer = tiny
    run_eval(EvalConfig(model="tiny", methods=methods, tasks=[TASK], lengths=[384], samples=3, out=out,
                        max_new_tokens=4, progress=False, **kw),
             model=model, tokenizer=tokenizer, log=lambda m: None)


@pytest.fixture(scope="module")
def written(tiny, tmp_path_factory):
    """A results folder of two methods written by the runner on the tiny model."""
    out = tmp_path_factory.mktemp("results")
    run_tiny(tiny, out, ["dense", "magicpig:K=4,L=20,local=8"])
    return out


def _snapshot(root):
    return {p: p.read_bytes() for p in sorted(root.rglob("predictions.jsonl"))}


def test_runner_rows_carry_meta_and_provenance(written):
    rows = [json.loads(line) for line in (written / TASK / "384" / "dense" / "predictions.jsonl").read_text()
            .splitlines()]
    for r in rows:
        prov = r["provenance"]
        assert len(prov["prompt_sha256"]) == 64 and prov["chat_template"] in ("tokenizer", "none", "meta-chat-3")
        assert prov["truncation"] == {"side": "none", "length": 384, "truncated": False}
        assert prov["decoding"]["max_new_tokens"] == 4 and prov["decoding"]["setup"] == "A"
        assert isinstance(r["meta"], dict)
    # both methods saw the same prompts: their provenance pairs, so compare accepts them
    c = compare(Side(written, "dense"), Side(written, "magicpig:K=4,L=20,local=8"))
    assert c.rows[0]["n"] == 3 and not [w for w in c.warnings if "MISMATCH" in w or "provenance" in w]


def test_rescore_after_a_scorer_change_updates_metrics_only(written, monkeypatch, capsys):
    from magicpig_tasks.registry import get_task

    before = _snapshot(written)
    assert len(before) == 2
    cls = type(get_task(TASK))
    monkeypatch.setattr(cls, "score", lambda self, prediction, sample: 100.0 if sample.id.endswith("/0") else 0.0)
    assert main(["rescore", str(written)]) == 0
    assert "2 metrics.json rewritten" in capsys.readouterr().out
    assert _snapshot(written) == before  # byte-identical
    for folder in ("dense", "magicpig@K-4+L-20+local-8"):
        m = json.loads((written / TASK / "384" / folder / "metrics.json").read_text())
        assert m["score"] == pytest.approx(100.0 / 3)
        scores = m["rescored"]["sample_scores"]
        assert scores == {f"{TASK}/384/0/{i}": (100.0 if i == 0 else 0.0) for i in range(3)}
    # the report's per-sample reader and compare read the re-scored scores, not the rows' stored ones
    from magicpig.harness.results_tree import sample_scores

    assert sample_scores(written / TASK / "384" / "dense" / "metrics.json") == scores
    c = compare(Side(written, "dense"), Side(written, "magicpig:K=4,L=20,local=8"))
    assert c.rows[0]["mean_a"] == pytest.approx(100.0 / 3) and c.rows[0]["difference"] == 0.0


def test_rescore_refuses_an_unknown_metric_and_a_missing_folder(written, tmp_path):
    with pytest.raises(ValueError, match="metric: ruler/niah_single_1 has no score 'em'"):
        rescore(written, metric="em")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        rescore(tmp_path / "nowhere")


def test_rescore_with_another_metric(tmp_path, monkeypatch):
    """A task with two scores (GSM8K: strict, flexible): --metric picks the second as the score."""
    folder = tmp_path / "gsm8k" / "2048" / "dense"
    folder.mkdir(parents=True)
    rows = [{"id": "gsm8k/0", "prediction": "The answer is 42.", "references": ["42"], "score": 0.0},
            {"id": "gsm8k/1", "prediction": "#### 7", "references": ["7"], "score": 100.0}]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "metrics.json").write_text(json.dumps({"task": "gsm8k", "length": 2048, "method": "dense",
                                                     "status": "ok", "score": 50.0, "counts": {"scored": 2}}))
    before = _snapshot(tmp_path)
    (done,) = rescore(tmp_path, metric="flexible")
    m = json.loads((folder / "metrics.json").read_text())
    assert m["metric"] == "flexible" and m["score"] == pytest.approx(100.0) and done.changed == 1
    assert set(m["scores"]) == {"strict", "flexible"} and m["scores"]["strict"] == pytest.approx(50.0)
    assert _snapshot(tmp_path) == before


def test_runs_with_other_prompts_are_refused_naming_the_provenance(written, tiny, tmp_path):
    """Another chat template: the same sample ids, other prompt tokens; compare names both differences."""
    run_tiny(tiny, tmp_path, ["dense"], task_settings={"chat_template": "none"})
    with pytest.raises(ValueError) as err:
        compare(Side(written, "dense"), Side(tmp_path))
    text = str(err.value)
    assert "provenance prompt_sha256 differs on 3 of 3 pairs" in text
    assert "provenance chat_template differs on 3 of 3 pairs" in text and '"tokenizer" vs "none"' in text


def test_an_eval_parses_each_method_spec_once(tiny, tmp_path, monkeypatch):
    """The spec strings are read at the edge (EvalConfig.check) and passed on parsed: over a whole eval of two
    methods, three samples, the prefill, decode, folders and metrics, each text goes through the parser once."""
    from collections import Counter

    from magicpig.harness import evaluate
    from magicpig.methods import registry, spec_names

    calls = Counter()
    parse = registry.read_spec

    def counted(text):
        calls[text] += 1
        return parse(text)

    for module in (registry, evaluate, spec_names):
        monkeypatch.setattr(module, "read_spec", counted)
    specs = ["dense", "magicpig:K=4,L=20,local=8"]
    run_tiny(tiny, tmp_path, specs)
    assert (tmp_path / TASK / "384" / "dense" / "predictions.jsonl").is_file()
    assert calls == Counter(specs), calls
