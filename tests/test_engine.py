"""The engine: reference vs offload backends, fork, batching, setups A/B, stopping, cost accounting."""
from types import SimpleNamespace

import pytest
import torch

from tiny_models import random_prompt, tiny_model
from magicpig.engine import Engine, GenerationConfig

METHOD = "magicpig:K=4,L=24,local=16"


def _close_logits(a, b, atol=1e-4):
    assert len(a.logits) == len(b.logits)
    for x, y in zip(a.logits, b.logits):
        torch.testing.assert_close(x, y, atol=atol, rtol=1e-4)


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def test_reference_and_offload_agree(tiny_kind):
    model = tiny_model(tiny_kind)
    cfg = GenerationConfig(max_new_tokens=8, ignore_eos=True, return_logits=True)
    pre = Engine(model, None).prefill([random_prompt(260, seed=1), random_prompt(200, seed=2)])
    ref = Engine(model, None, backend="reference").decode(pre, METHOD, cfg)
    off = Engine(model, None, backend="offload", offload_impl="torch").decode(pre, METHOD, cfg)
    for r, o in zip(ref, off):
        assert r.token_ids == o.token_ids
        _close_logits(r, o)
        assert 0 < r.cost < 1 and r.cost == pytest.approx(o.cost, abs=1e-6)


def test_offload_with_compiled_cpu_module_agrees():
    from magicpig import cpu

    if not cpu.available():
        pytest.skip("compiled CPU module not buildable here")
    model = tiny_model("mistral")
    cfg = GenerationConfig(max_new_tokens=6, ignore_eos=True, return_logits=True)
    engine = Engine(model, None)
    pre = engine.prefill([random_prompt(300, seed=4), random_prompt(180, seed=5)])
    ref = engine.decode(pre, METHOD, cfg)
    off = Engine(model, None, backend="offload", offload_impl="compiled").decode(pre, METHOD, cfg)
    for r, o in zip(ref, off):
        assert r.token_ids == o.token_ids
        _close_logits(r, o)
        assert r.cost == pytest.approx(o.cost, abs=1e-6)


def test_offload_sequential_equals_concurrent(llama):
    cfg = GenerationConfig(max_new_tokens=5, ignore_eos=True, return_logits=True)
    pre = Engine(llama, None).prefill(random_prompt(200, seed=7))
    a = Engine(llama, None, backend="offload", offload_impl="torch", concurrent=True).decode(pre, METHOD, cfg)[0]
    b = Engine(llama, None, backend="offload", offload_impl="torch", concurrent=False).decode(pre, METHOD, cfg)[0]
    assert a.token_ids == b.token_ids
    _close_logits(a, b, atol=1e-6)


def test_after_step_runs_between_the_timed_steps(llama, monkeypatch):
    """after_step(i) follows decode forward i, outside its time, and does not change the decode.

    The engine reads a virtual clock that only the hook moves (by an hour a call), so the check is exact at any
    machine load: a hook inside a timed step would put its hour into that step's time."""
    import magicpig.engine as engine_module

    cfg = GenerationConfig(max_new_tokens=5, ignore_eos=True)
    engine = Engine(llama, None)
    pre = engine.prefill(random_prompt(100, seed=3))
    clock = [0.0]
    monkeypatch.setattr(engine_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    seen = []

    def slow_hook(i):
        seen.append(i)
        clock[0] += 3600.0

    res = engine.decode(pre, METHOD, cfg, after_step=slow_hook)[0]
    assert seen == list(range(len(res.step_seconds))) == [0, 1, 2, 3]  # 5 tokens: 4 forwards
    assert res.step_seconds == [0.0] * 4
    assert res.token_ids == engine.decode(pre, METHOD, cfg)[0].token_ids


@pytest.mark.parametrize("backend", ["reference", "offload"])
def test_fork_equals_fresh_decode(llama, backend):
    engine = Engine(llama, None, backend=backend, offload_impl="torch")
    prompt = random_prompt(220, seed=8)
    cfg = GenerationConfig(max_new_tokens=6, ignore_eos=True, return_logits=True)
    pre = engine.prefill(prompt)
    keys0 = [k.clone() for k in pre.keys]
    table = engine.fork(pre, [METHOD, "dense", "streaming:local=16", "quest:page_size=8,ratio=0.2"], cfg)
    again = engine.decode(pre, METHOD, cfg)[0]
    fresh = engine.generate(prompt, METHOD, cfg)[0]
    first = table[next(iter(table))][0]
    assert first.token_ids == again.token_ids == fresh.token_ids
    _close_logits(first, fresh, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(keys0, pre.keys))  # decode never mutates the prefill
    assert set(table) == {METHOD, "dense", "streaming:local=16", "quest:page_size=8,ratio=0.2"}


@pytest.mark.parametrize("method", ["dense", METHOD, "topk:budget=0.1", "oracle:budget=32"])
def test_batch_equals_one_by_one(llama, method):
    engine = Engine(llama, None)
    prompts = [random_prompt(n, seed=n) for n in (230, 150, 190)]
    cfg = GenerationConfig(max_new_tokens=6, ignore_eos=True, return_logits=True)
    batch = engine.generate(prompts, method, cfg)
    for p, got in zip(prompts, batch):
        alone = engine.generate(p, method, cfg)[0]
        if method.startswith("oracle"):  # random draws depend on the batch; check shapes/finite only
            assert got.new_tokens == alone.new_tokens and all(torch.isfinite(x).all() for x in got.logits)
            continue
        assert got.token_ids == alone.token_ids
        assert got.prompt_tokens == len(p)
        _close_logits(got, alone, atol=1e-4)
        assert got.cost == pytest.approx(alone.cost, abs=1e-6)


def test_setup_b_dense_equals_setup_a(llama):
    engine = Engine(llama, None)
    context, question = random_prompt(120, seed=11), random_prompt(7, seed=12)
    cfg = GenerationConfig(max_new_tokens=6, ignore_eos=True, return_logits=True)
    a = engine.generate(context + question, "dense", cfg)[0]
    b = engine.decode(engine.prefill(context), "dense", cfg, continuation_ids=question)[0]
    assert a.token_ids == b.token_ids and b.continuation_tokens == len(question)
    _close_logits(a, b, atol=1e-4)
    assert b.decode_steps == a.decode_steps + len(question)
    via = engine.answer(context, question, "dense", cfg, setup="B")[0]
    assert via.token_ids == b.token_ids
    assert engine.answer(context, question, "dense", cfg, setup="A")[0].token_ids == a.token_ids
    # batched setup B with different question lengths equals one-by-one
    qs = [question, question[:3]]
    pre = engine.prefill([context, context[:90]])
    both = engine.decode(pre, METHOD, cfg, continuation_ids=qs)
    for ctx, q, got in zip([context, context[:90]], qs, both):
        alone = engine.decode(engine.prefill(ctx), METHOD, cfg, continuation_ids=q)[0]
        assert got.token_ids == alone.token_ids


class CharTokenizer:
    """Token t decodes to chr(ord('a') + t % 26); 2 is EOS."""
    eos_token_id = 2
    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(ord("a") + t % 26) for t in ids if not (skip_special_tokens and t == 2))


def test_eos_stop_strings_and_length(llama):
    engine = Engine(llama, CharTokenizer())
    prompt = random_prompt(60, seed=13)
    free = engine.generate(prompt, "dense", GenerationConfig(max_new_tokens=8, ignore_eos=True))[0]
    assert free.stop_reason == "length" and free.new_tokens == 8
    eos_at = free.token_ids[3]
    stopped = engine.generate(prompt, "dense", GenerationConfig(max_new_tokens=8, eos_token_ids=[eos_at]))[0]
    assert stopped.stop_reason == "eos" and stopped.token_ids == free.token_ids[:free.token_ids.index(eos_at)]
    stop = free.text[4:6]
    cut = engine.generate(prompt, "dense", GenerationConfig(max_new_tokens=8, stop=[stop], ignore_eos=True))[0]
    assert cut.stop_reason == "stop" and cut.text == free.text[:free.text.find(stop)]
    assert stop not in cut.text


def test_sampling_is_seeded(llama):
    engine = Engine(llama, None)
    pre = engine.prefill(random_prompt(50, seed=14))
    cfg = lambda s: GenerationConfig(max_new_tokens=10, do_sample=True, temperature=2.0, top_p=0.95, top_k=50,
                                     seed=s, ignore_eos=True)
    a, b, c = (engine.decode(pre, "dense", cfg(s))[0].token_ids for s in (1, 1, 2))
    assert a == b and a != c


def test_streaming_cost_is_the_kept_fraction(llama):
    engine = Engine(llama, None)
    n = 100
    res = engine.generate(random_prompt(n, seed=15), "streaming:sinks=4,local=16",
                          GenerationConfig(max_new_tokens=4, ignore_eos=True))[0]
    # decode steps see n+1, n+2, n+3 keys, of which 4 + 16 are kept
    want = sum(20 / (n + t) for t in (1, 2, 3)) / 3
    assert res.decode_steps == 3 and res.cost == pytest.approx(want, rel=1e-5)


def test_magicpig_cost_follows_the_sampled_fraction(llama):
    """More tables (larger L) sample more of the offloaded keys."""
    engine = Engine(llama, None)
    pre = engine.prefill(random_prompt(400, seed=16))
    cfg = GenerationConfig(max_new_tokens=4, ignore_eos=True)
    low = engine.decode(pre, "magicpig:K=6,L=10,local=16", cfg)[0].cost
    high = engine.decode(pre, "magicpig:K=6,L=80,local=16", cfg)[0].cost
    assert 0 <= low < high <= 1


def test_long_context_is_a_clear_error():
    model = tiny_model("llama", layers=2, max_positions=64)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        Engine(model, None).prefill(random_prompt(80))
    engine = Engine(model, None, allow_long_context=True)
    assert engine.generate(random_prompt(80), "dense", GenerationConfig(max_new_tokens=2))[0].new_tokens <= 2


@pytest.mark.parametrize("bad, field", [(dict(max_new_tokens=-1), "max_new_tokens"), (dict(top_p=0), "top_p"),
                                        (dict(temperature=0), "temperature"), (dict(stop=[""]), "stop")])
def test_bad_generation_config(bad, field):
    with pytest.raises(ValueError, match=field):
        GenerationConfig(**bad)


def test_bad_engine_arguments(llama):
    with pytest.raises(ValueError, match="backend"):
        Engine(llama, None, backend="cuda")
    with pytest.raises(ValueError, match="prompt_ids"):
        Engine(llama, None).prefill([])
    with pytest.raises(ValueError, match="unknown attention method"):
        Engine(llama, None).generate([5, 6, 7], "nope")


def test_sliding_window_models_are_refused():
    model = tiny_model("mistral", layers=2)
    model.config.sliding_window = 16
    with pytest.raises(ValueError, match="sliding_window"):
        Engine(model, None).prefill(random_prompt(20))


def test_offload_row_without_offloaded_keys(llama):
    """A short prompt (all keys static) batched with a long one: no NaN, same as reference."""
    cfg = GenerationConfig(max_new_tokens=4, ignore_eos=True, return_logits=True)
    pre = Engine(llama, None).prefill([random_prompt(12, seed=20), random_prompt(200, seed=21)])
    ref = Engine(llama, None).decode(pre, METHOD, cfg)
    off = Engine(llama, None, backend="offload", offload_impl="torch").decode(pre, METHOD, cfg)
    for r, o in zip(ref, off):
        assert r.token_ids == o.token_ids
        _close_logits(r, o)
        assert all(torch.isfinite(x).all() for x in o.logits)
    assert off[0].cost == 0.0 and off[1].cost > 0


def test_cost_meter_counts_only_active_rows():
    """The one cost accumulator: a row's cost is the mean over the steps in which it consumed a real token;
    a step without sparse layers still counts; a model without sparse layers costs 1, no step costs 0."""
    from magicpig.cache import CostMeter

    meter = CostMeter(3)
    meter.add((torch.tensor([0.2, 0.4, 0.9]), 0.5), torch.tensor([True, True, False]))
    meter.add((torch.tensor([0.4, 0.8, 0.9]), 0.25), torch.tensor([True, False, False]))
    meter.add(None, torch.tensor([True, False, False]))
    assert meter.row(0, True) == (pytest.approx(0.2), pytest.approx(0.25), 3)
    assert meter.row(1, True) == (pytest.approx(0.4), pytest.approx(0.5), 1)
    assert meter.row(2, True) == (0.0, 0.0, 0)
    assert meter.row(0, False) == (1.0, 0.0, 3) and meter.row(2, False) == (0.0, 0.0, 0)
