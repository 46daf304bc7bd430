"""The eval runner: method folder names, method lists, overrides, an end-to-end run on a tiny random model
with the real tokenizer (files written, prefill once per sample, resume, setup B, skipped QA), and the CLI."""
from __future__ import annotations

import json

import pytest

from magicpig.harness.evaluate import EvalConfig, collect_metrics, effective_method, format_table, run_eval
from magicpig.methods import registry
from magicpig.methods.registry import read_spec
from magicpig.methods.spec_names import method_dirname, split_methods


def test_method_dirname():
    assert method_dirname("magicpig:K=10,L=150") == "magicpig@K-10+L-150"
    assert method_dirname("dense") == "dense"
    assert method_dirname("magicpig:dense_layers=0/16, K=9") == "magicpig@dense_layers-0.16+K-9"
    assert method_dirname("quest:page_size=16,ratio=0.04") == "quest@page_size-16+ratio-0.04"
    for bad in ("a/b", ".."):  # not a method: refused, not turned into a folder
        with pytest.raises(ValueError, match="unknown attention method"):
            method_dirname(bad)


def test_split_methods_and_fields():
    assert split_methods("dense; magicpig:K=10,L=150;") == ["dense", "magicpig:K=10,L=150"]
    assert split_methods(["dense", "topk:budget=0.02"]) == ["dense", "topk:budget=0.02"]
    with pytest.raises(ValueError, match="twice"):
        split_methods("dense;dense")
    with pytest.raises(ValueError, match="no method"):
        split_methods(" ; ")
    assert read_spec("magicpig:K=10,L=150").given == {"K", "L"} and read_spec("dense").given == frozenset()
    assert read_spec("magicpig:local=64").given == {"local"}  # given, though it is the default


def test_effective_method_overrides():
    m, applied = effective_method("magicpig:K=10", {"magicpig": {"local": 24}, "quest": {"page_size": 8}})
    assert (m.K, m.local, applied) == (10, 24, {"local": 24})
    m, applied = effective_method(read_spec("magicpig:local=64"), {"magicpig": {"local": 24}})
    assert (m.local, applied) == (64, {})


def test_one_eval_parses_each_spec_once(tmp_path, tiny, tokenizer, monkeypatch):
    """Per eval, each method spec's text is parsed once (by EvalConfig.check) and the parsed value is what
    the run passes on: its checks, two tasks x two lengths of folders, overrides and settings parse nothing."""
    import sys

    original, parsed = registry.read_spec, []

    def counting(spec):
        parsed.append(spec)
        return original(spec)

    for module in [m for m in list(sys.modules.values()) if getattr(m, "read_spec", None) is original]:
        monkeypatch.setattr(module, "read_spec", counting)
    specs = ["dense", "magicpig:K=4,L=20,local=8"]
    cfg = EvalConfig(model="tiny", methods=list(specs), tasks=["ruler/niah_single_1", "ruler/niah_single_2"],
                     lengths=[384, 512], samples=1, out=tmp_path, progress=False, max_new_tokens=2)
    metrics = run_eval(cfg, model=tiny, tokenizer=tokenizer, log=lambda m: None)
    assert len(metrics) == 2 * 2 * 2 and all(m["status"] == "ok" for m in metrics)
    assert sorted(parsed) == sorted(specs)


def test_config_errors(tmp_path):
    base = dict(model="smollm2", methods=["dense"], tasks=["ruler/cwe"], lengths=[4096], samples=1, out=tmp_path)
    with pytest.raises(ValueError, match="unknown task"):
        EvalConfig(**{**base, "tasks": ["nope"]}).check()
    with pytest.raises(ValueError, match="unknown attention method"):
        EvalConfig(**{**base, "methods": ["fast"]}).check()
    with pytest.raises(ValueError, match="setup"):
        EvalConfig(**{**base, "setup": "C"}).check()
    with pytest.raises(ValueError, match="length"):
        EvalConfig(**{**base, "lengths": [10]}).check()
    with pytest.raises(ValueError, match="samples"):
        EvalConfig(**{**base, "samples": 0}).check()
    with pytest.raises(ValueError, match="takes no data file"):
        EvalConfig(**{**base, "data": {"ruler/cwe": "x"}}).check()
    with pytest.raises(ValueError, match="backend must be one of auto, reference, offload"):
        EvalConfig(**{**base, "backend": "gpu"}).check()
    with pytest.raises(ValueError, match="prefill_dtype must be one of auto, float32, bfloat16"):
        EvalConfig(**{**base, "prefill_dtype": "fp16"}).check()


def test_config_resolves_auto_backend_and_prefill_dtype(tmp_path):
    """The defaults are 'auto'; check() stores what runs, so the resume key names it."""
    from magicpig.backends import auto_backend
    from magicpig.prefill_dtype import cpu_has_bf16

    cfg = EvalConfig(model="smollm2", methods=["dense"], tasks=["ruler/cwe"], lengths=[4096], samples=1,
                     out=tmp_path, device="cpu")
    assert (cfg.backend, cfg.prefill_dtype) == ("auto", "auto")
    cfg.check()
    assert cfg.backend == auto_backend() and cfg.backend in ("reference", "offload")
    assert cfg.prefill_dtype == ("bfloat16" if cpu_has_bf16() else "float32")


class CountingEngine:
    """Wraps the real engine and counts prefills and decodes."""

    def __init__(self, model, tokenizer):
        from magicpig.engine import Engine

        self.inner = Engine(model, tokenizer, backend="reference")
        self.max_context = self.inner.max_context
        self.prefills, self.decodes = [], []

    def prefill(self, ids):
        self.prefills.append(len(ids))
        return self.inner.prefill(ids)

    def decode(self, pre, method, config, continuation_ids=None):
        self.decodes.append((method.spec(), continuation_ids is not None))
        return self.inner.decode(pre, method, config, continuation_ids=continuation_ids)


def _run(tmp_path, tiny, tokenizer, engines, samples=2, **kw):
    kw = {"model": "tiny", "max_new_tokens": 4, **kw}
    cfg = EvalConfig(methods=["dense", "magicpig:K=4,L=20,local=8"], tasks=["ruler/niah_single_1"],
                     lengths=[384], samples=samples, out=tmp_path, progress=False, **kw)

    def factory(model, tok):
        engines.append(CountingEngine(model, tok))
        return engines[-1]

    return run_eval(cfg, model=tiny, tokenizer=tokenizer, engine_factory=factory, log=lambda m: None)


def test_run_writes_results_and_resumes(tmp_path, tiny, tokenizer):
    engines: list = []
    metrics = _run(tmp_path, tiny, tokenizer, engines)
    eng = engines[0]
    assert len(eng.prefills) == 2 and len(eng.decodes) == 4  # one prefill per sample, decoded by both methods
    assert all(n <= 384 for n in eng.prefills)
    folder = tmp_path / "ruler/niah_single_1/384/magicpig@K-4+L-20+local-8"
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["ruler/niah_single_1/384/0/0", "ruler/niah_single_1/384/0/1"]
    for r in rows:
        assert set(r) >= {"id", "prompt_tokens", "prediction", "references", "score", "cost"}
        assert 0.0 <= r["cost"] <= 1.0 and r["score"] in (0.0, 100.0)
    m = json.loads((folder / "metrics.json").read_text())
    assert m["status"] == "ok" and m["counts"]["scored"] == 2 and m["setup"] == "A" and m["seed"] == 0
    assert m["parameters"]["K"] == 4 and m["method"] == "magicpig:K=4,L=20,local=8"
    # the one machine record (magicpig.harness.machine): versions and hardware under the same keys everywhere
    assert {"torch_version", "transformers_version", "python_version"} <= set(m["machine"])
    assert m["machine"]["cpu_cores_logical"] >= 1 and m["machine"]["cpu_model"] and "gpu_name" in m["machine"]
    assert m["score"] == pytest.approx(sum(r["score"] for r in rows) / 2)
    assert len(metrics) == 2 and (tmp_path / "ruler/niah_single_1/384/dense/metrics.json").is_file()

    table = format_table(collect_metrics(tmp_path))
    assert "| ruler/niah_single_1 | 384 |" in table and "magicpig:K=4,L=20,local=8" in table

    # resume: nothing is redone, no model work at all
    engines.clear()
    again = _run(tmp_path, tiny, tokenizer, engines)
    assert engines == [] and again[1]["score"] == m["score"]

    # a torn last line (interrupted run) is dropped and that sample redone for that method only
    text = (folder / "predictions.jsonl").read_text().splitlines()
    (folder / "predictions.jsonl").write_text(text[0] + "\n" + text[1][:20])
    _run(tmp_path, tiny, tokenizer, engines)
    assert len(engines[0].prefills) == 1 and [d[0].split(",seed=")[0] for d in engines[0].decodes] == [
        "magicpig:K=4,L=20,local=8"]  # (a per-sample projection seed may follow)
    assert len((folder / "predictions.jsonl").read_text().splitlines()) == 2


def test_setup_b_feeds_the_question(tmp_path, tiny, tokenizer):
    engines: list = []
    metrics = _run(tmp_path, tiny, tokenizer, engines, samples=1, setup="B")
    eng = engines[0]
    assert all(cont for _, cont in eng.decodes)
    assert all(n < 384 - 20 for n in eng.prefills)  # only the context is prefilled
    assert all(m["setup"] == "B" for m in metrics)


def test_unavailable_task_is_reported_skipped(tmp_path, tiny, tokenizer, offline):
    cfg = EvalConfig(model="tiny", methods=["dense"], tasks=["ruler/qa_1"], lengths=[1024], samples=1,
                     out=tmp_path, progress=False)
    logs: list[str] = []
    metrics = run_eval(cfg, model=tiny, tokenizer=tokenizer, log=logs.append)
    assert metrics[0]["status"] == "skipped" and "MAGICPIG_OFFLINE" in metrics[0]["reason"]
    assert metrics[0]["score"] is None and any("SKIPPED ruler/qa_1" in line for line in logs)
    assert json.loads((tmp_path / "ruler/qa_1/1024/dense/metrics.json").read_text())["status"] == "skipped"


def test_cli_tasks_and_errors(capsys, tmp_path):
    from magicpig.harness.cli import main

    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "ruler/niah_multikey_3" in out and "longbench/repobench-p" in out and "gsm8k" in out
    assert main(["eval", "--task", "ruler/nope", "--length", "4k", "--methods", "dense", "--out", str(tmp_path)]) == 2
    assert "unknown task 'ruler/nope'" in capsys.readouterr().err
    assert main(["eval", "--task", "ruler/cwe", "--length", "4x", "--methods", "dense", "--out", str(tmp_path)]) == 2


def test_gsm8k_overrides_and_extra_scores(tmp_path, tiny, tokenizer, fixtures):
    cfg = EvalConfig(model="tiny", methods=["magicpig:K=4,L=20"], tasks=["gsm8k"], lengths=[2048], samples=1,
                     out=tmp_path, data={"gsm8k": str(fixtures / "gsm8k_test_tiny.jsonl")}, max_new_tokens=3,
                     progress=False)
    (m,) = run_eval(cfg, model=tiny, tokenizer=tokenizer, log=lambda msg: None)
    assert m["overrides_applied"] == {"local": 24} and m["parameters"]["local"] == 24
    assert m["method"] == "magicpig:K=4,L=20" and "local=24" in m["method_effective"]
    assert set(m["scores"]) == {"strict", "flexible"} and m["status"] == "ok"


# ---- resume keyed by settings, folder locks, Ctrl-C (issue #13 items 2, 8, 9) ----------------------------

UNIT = "ruler/niah_single_1/384"


@pytest.mark.parametrize("change,named", [
    ({"setup": "B"}, 'setup: "A" -> "B"'),
    ({"backend": "offload"}, 'backend: "reference" -> "offload"'),
    ({"max_new_tokens": 5}, "max_new_tokens: 4 -> 5"),
    ({"seed": 1}, "seed: 0 -> 1"),
    ({"model": "other-model"}, 'model: "tiny" -> "other-model"'),
    ({"prefill_dtype": "bfloat16"}, 'prefill_dtype: (unset) -> "bfloat16"'),  # float32 rows keep their old key
])
def test_resume_refuses_rows_made_with_other_settings(tmp_path, tiny, tokenizer, change, named):
    engines: list = []
    base = {"backend": "reference", "prefill_dtype": "float32"}  # the defaults ('auto') resolve per machine
    change = {**base, **change}
    _run(tmp_path, tiny, tokenizer, engines, samples=1, **base)
    folder = tmp_path / UNIT / "dense"
    before = (folder / "predictions.jsonl").read_text()
    engines.clear()
    with pytest.raises(ValueError, match="holds predictions made with other settings") as exc:
        _run(tmp_path, tiny, tokenizer, engines, samples=1, **change)
    assert named in str(exc.value) and "--overwrite" in str(exc.value) and "another --out" in str(exc.value)
    assert engines == [] and (folder / "predictions.jsonl").read_text() == before  # nothing ran or changed

    # --overwrite: the rows are made again with the new settings, never mixed with the old ones
    metrics = _run(tmp_path, tiny, tokenizer, engines, samples=1, overwrite=True, **change)
    assert len(engines[0].prefills) == 1 and len((folder / "predictions.jsonl").read_text().splitlines()) == 1
    stored = json.loads((folder / "settings.json").read_text())
    key, value = next((k, v) for k, v in change.items() if base.get(k) != v)
    # metrics.json: "backend" is what each method ran on (issue 14.7); the run's request is backend_requested
    recorded = "backend_requested" if key == "backend" else key
    assert stored[key] == value and all(m.get(recorded, value) == value for m in metrics)
    engines.clear()
    _run(tmp_path, tiny, tokenizer, engines, samples=1, **change)  # same settings again: plain resume
    assert engines == []


def test_resume_compares_the_whole_task_description(tmp_path, tiny, tokenizer, monkeypatch):
    import magicpig.harness.evaluate as ev

    engines: list = []
    _run(tmp_path, tiny, tokenizer, engines, samples=1)
    plain = ev._get_task

    def with_new_setting(cfg, name):  # a task setting added later shows in describe() only
        task = plain(cfg, name)
        described = task.describe()
        task.describe = lambda: {**described, "new_setting": "x"}
        return task

    monkeypatch.setattr(ev, "_get_task", with_new_setting)
    with pytest.raises(ValueError, match='task.new_setting: \\(unset\\) -> "x"'):
        _run(tmp_path, tiny, tokenizer, engines, samples=1)


def test_rows_without_recorded_settings_are_not_reused(tmp_path, tiny, tokenizer):
    engines: list = []
    _run(tmp_path, tiny, tokenizer, engines, samples=1)
    for settings in (tmp_path / UNIT).glob("*/settings.json"):
        settings.unlink()  # as written by the code before settings were recorded
    with pytest.raises(ValueError, match="no settings recorded"):
        _run(tmp_path, tiny, tokenizer, engines, samples=1)


def test_a_second_run_on_the_same_folder_is_refused(tmp_path, tiny, tokenizer):
    import os

    from magicpig.pidlock import LockHeld, PidLock

    (tmp_path / UNIT).mkdir(parents=True)
    other = PidLock(tmp_path / UNIT / "eval.lock")
    assert other.try_acquire()  # as a first run holds it (flock: a second open file is refused too)
    engines: list = []
    try:
        with pytest.raises(LockHeld, match=f"{UNIT} is being written by another magicpig eval \\(pid {os.getpid()}\\)"):
            _run(tmp_path, tiny, tokenizer, engines, samples=1)
        assert engines == [] and not list((tmp_path / UNIT).glob("*/predictions.jsonl"))
    finally:
        other.release()
    # a lock file left by a dead run (its pid gone) is taken over
    (tmp_path / UNIT / "eval.lock").write_text("999999999\n")
    assert _run(tmp_path, tiny, tokenizer, engines, samples=1)[0]["status"] == "ok"


def test_ctrl_c_keeps_the_rows_and_counts_them(tmp_path, tiny, tokenizer):
    from magicpig.harness.evaluate import EvalInterrupted

    class Interrupting(CountingEngine):
        def decode(self, pre, method, config, continuation_ids=None):
            if len(self.decodes) == 3:  # sample 0: both methods; sample 1: dense, then Ctrl-C
                raise KeyboardInterrupt
            return super().decode(pre, method, config, continuation_ids)

    cfg = EvalConfig(model="tiny", methods=["dense", "magicpig:K=4,L=20,local=8"], tasks=["ruler/niah_single_1"],
                     lengths=[384], samples=3, out=tmp_path, max_new_tokens=4, progress=False)
    with pytest.raises(EvalInterrupted) as exc:
        run_eval(cfg, model=tiny, tokenizer=tokenizer, engine_factory=Interrupting, log=lambda m: None)
    assert exc.value.summary == "interrupted: 1 of 3 samples saved; rerun to resume"
    assert len((tmp_path / UNIT / "dense/predictions.jsonl").read_text().splitlines()) == 2
    engines: list = []
    _run(tmp_path, tiny, tokenizer, engines, samples=3)  # resumes: sample 1 for magicpig, sample 2 for both
    assert len(engines[0].prefills) == 2 and len(engines[0].decodes) == 3


class DecoderReportingEngine(CountingEngine):
    """Adds ``layer_decoders`` to each result, as the engine does once it reports them (getattr-safe)."""

    def decode(self, pre, method, config, continuation_ids=None):
        out = super().decode(pre, method, config, continuation_ids=continuation_ids)
        for res in out:
            kind = "offload" if method.name == "magicpig" and self.backend == "offload" else "reference"
            res.layer_decoders = ["exact", kind]
        return out


def test_metrics_record_the_backend_that_ran(tmp_path, tiny, tokenizer):
    """backend: offload only for methods with an offload decoder; the request is kept beside it; the
    per-layer decoders are recorded when the engine's results carry them (issue 14.7)."""
    from magicpig.backends import effective_backend

    assert effective_backend("magicpig", "offload") == "offload"
    assert {effective_backend(n, "offload") for n in ("dense", "quest", "topk", "oracle", "streaming")} == {"reference"}
    assert effective_backend("magicpig", "reference") == "reference"
    with pytest.raises(ValueError, match="backend must be one of reference, offload"):
        effective_backend("dense", "gpu")

    engines: list = []

    def factory(model, tok):
        eng = DecoderReportingEngine(model, tok)
        eng.backend = "offload"
        engines.append(eng)
        return eng

    cfg = EvalConfig(model="tiny", methods=["dense", "magicpig:K=4,L=20,local=8"], tasks=["ruler/niah_single_1"],
                     lengths=[384], samples=1, out=tmp_path, progress=False, max_new_tokens=2, backend="offload")
    metrics = {m["method"]: m for m in run_eval(cfg, model=tiny, tokenizer=tokenizer, engine_factory=factory,
                                                  log=lambda m: None)}
    dense, pig = metrics["dense"], metrics["magicpig:K=4,L=20,local=8"]
    assert (dense["backend"], dense["backend_requested"]) == ("reference", "offload")
    assert (pig["backend"], pig["backend_requested"]) == ("offload", "offload")
    assert dense["layer_decoders"] == ["exact", "reference"] and pig["layer_decoders"] == ["exact", "offload"]
    row = json.loads((tmp_path / "ruler/niah_single_1/384/dense/predictions.jsonl").read_text().splitlines()[0])
    assert row["layer_decoders"] == ["exact", "reference"]

    # the real engine on the reference backend: every layer of every method on the reference decoder
    plain = run_eval(EvalConfig(**{**cfg.__dict__, "out": tmp_path / "plain", "backend": "reference"}),
                     model=tiny, tokenizer=tokenizer, engine_factory=CountingEngine, log=lambda m: None)
    assert all(m["layer_decoders"] == ["reference", "reference"] and m["backend"] == "reference" for m in plain)
