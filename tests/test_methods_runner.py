"""Method plumbing through the runner and the engine: per-sample SimHash projections (issue #12.10: each
sample decodes with seed = sample_seed(seed, sample id), recorded in its prediction row; projection_draw=fixed
keeps the seed) and dense_layers checked against the model before any prefill (issue #13.7)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from magicpig.harness.evaluate import EvalConfig, run_eval
from magicpig.lsh import sample_seed


class RecordingEngine:
    """Stands in for the engine: records the method each decode gets, generates nothing."""

    max_context = 0

    def __init__(self):
        self.methods = []

    def prefill(self, ids):
        return SimpleNamespace(seconds=0.0)

    def decode(self, pre, method, config, continuation_ids=None):
        self.methods.append(method)
        return [SimpleNamespace(text="", cost=0.02, cost1=0.0, new_tokens=0, seconds=0.0, stop_reason="length")]


@pytest.fixture(scope="module")
def tokenizer():
    from magicpig.models import load_tokenizer

    return load_tokenizer("smollm2")


def test_runner_draws_projections_per_sample_and_records_the_seed(tmp_path, tokenizer):
    eng = RecordingEngine()
    specs = ["magicpig:K=4,L=20", "magicpig:K=4,L=20,projection_draw=fixed,seed=7", "dense"]
    cfg = EvalConfig(model="fake", methods=list(specs), tasks=["ruler/niah_single_1"], lengths=[384],
                     samples=3, out=tmp_path, max_new_tokens=2, progress=False)
    run_eval(cfg, model=object(), tokenizer=tokenizer, engine_factory=lambda m, t: eng, log=lambda m: None)
    base = tmp_path / "ruler/niah_single_1/384"
    rows = {d: [json.loads(x) for x in (base / d / "predictions.jsonl").read_text().splitlines()]
            for d in ("magicpig@K-4+L-20", "magicpig@K-4+L-20+projection_draw-fixed+seed-7", "dense")}
    per_sample = rows["magicpig@K-4+L-20"]
    assert [r["method_seed"] for r in per_sample] == [sample_seed(43, r["id"]) for r in per_sample]
    assert len({r["method_seed"] for r in per_sample}) == 3
    assert [r["method_seed"] for r in rows["magicpig@K-4+L-20+projection_draw-fixed+seed-7"]] == [7, 7, 7]
    assert all("method_seed" not in r for r in rows["dense"])
    used = [m.seed for m in eng.methods if m.name == "magicpig" and m.projection_draw == "per_sample"]
    assert used == [r["method_seed"] for r in per_sample]  # the engine really got the per-sample seed
    metrics = json.loads((base / "magicpig@K-4+L-20" / "metrics.json").read_text())
    assert metrics["parameters"]["seed"] == 43 and metrics["parameters"]["projection_draw"] == "per_sample"


def test_engine_refuses_dense_layers_beyond_the_model_before_prefill(monkeypatch):
    from tiny_models import random_prompt, tiny_model

    from magicpig.engine import Engine

    engine = Engine(tiny_model("llama"), None)  # 4 layers
    monkeypatch.setattr(engine, "prefill", lambda ids: pytest.fail("prefill ran before the spec was checked"))
    with pytest.raises(ValueError, match=r"dense_layers.*4 layers: valid indices are 0\.\.3"):
        engine.generate(random_prompt(20), "magicpig:dense_layers=0/4")
    assert engine.check_method("magicpig:dense_layers=0/3").dense_layers == (0, 3)
