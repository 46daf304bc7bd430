"""The decode benchmark (magicpig bench decode) without the real model: tiny and shape-only models."""
import csv

import pytest
import torch

from tiny_models import random_prompt, tiny_model
from magicpig.harness.bench import decode as bench_decode, decode_options, llamacpp, memory, prompts, row_monitor, \
    table, timed_decode
from magicpig.harness.cli import main
from magicpig.engine import Engine, GenerationConfig
from magicpig.shapes import ModelShape, model_shape


class ByteTokenizer:
    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [b % 250 + 3 for b in text.encode("utf-8")]}


def test_essay_tokens_has_exact_length():
    ids = prompts.essay_tokens(ByteTokenizer(), 5000)
    assert len(ids) == 5000 and len(set(ids)) > 20


def test_tile_prefill_repeats_the_cache_and_decodes():
    model = tiny_model("llama", layers=2)
    engine = Engine(model, None)
    pre = engine.prefill(random_prompt(40, seed=1))
    big = prompts.tile_prefill(pre, 100)
    assert big.n == 100 and big.keys[0].shape[2] == 100
    assert torch.equal(big.keys[1][:, :, 40:80], pre.keys[1]) and torch.equal(big.values[0][:, :, 80:], pre.values[0][:, :, :20])
    res = Engine(model, None, backend="offload", offload_impl="torch").decode(
        big, "magicpig:K=4,L=20,local=8", GenerationConfig(max_new_tokens=3, ignore_eos=True))[0]
    assert res.new_tokens == 3 and len(res.step_seconds) == 2 and 0 <= res.cost <= 1


def test_run_rejects_bad_arguments_before_loading():
    with pytest.raises(ValueError, match="fill"):
        bench_decode.run(fill="copy")
    with pytest.raises(ValueError, match="steps"):
        bench_decode.run(steps=0)


# ---- the throughput experiment (bench decode) --------------------------------------------------------
TINY = "shape:tiny-llama"


def test_method_arguments_and_the_stock_backend():
    assert decode_options.parse_method_arg("dense@stock") == ("dense", "stock")
    assert decode_options.parse_method_arg("dense") == ("dense", "reference")
    assert decode_options.parse_method_arg("magicpig:K=10,L=150") == ("magicpig", "offload")
    assert decode_options.parse_method_arg("dense@llamacpp") == ("dense", "llamacpp")
    for backend in ("stock", "llamacpp"):
        with pytest.raises(ValueError, match=f"{backend}.*dense"):
            decode_options.parse_method_arg(f"magicpig@{backend}")
    with pytest.raises(ValueError, match="backend"):
        decode_options.parse_method_arg("dense@gpu")


def test_repeat_batch_is_a_view_and_every_row_decodes_alike():
    model = tiny_model("llama", layers=2)
    pre = Engine(model, None).prefill(random_prompt(30, seed=2))
    big = prompts.repeat_batch(pre, 3)
    assert big.batch == 3 and big.keys[0].shape[0] == 3
    assert big.keys[0].data_ptr() == pre.keys[0].data_ptr()  # no copy
    res = Engine(model, None).decode(big, "dense", GenerationConfig(max_new_tokens=4, ignore_eos=True))
    assert res[0].token_ids == res[1].token_ids == res[2].token_ids


def _shape(dtype=torch.float32):
    return ModelShape.of_config(model_shape("llama-3.1-8b").config(), dtype)


def test_estimate_counts_the_kv_cache_and_tables():
    s = _shape(torch.bfloat16)
    stock = memory.estimate_row(s, "dense", "stock", 98304, 1, 160)
    # Llama-3.1-8B, 96K, bf16: 12.9 GB of KV per sequence
    assert stock["kv"] == 2 * 32 * 8 * 98304 * 128 * 2 and stock["host"] == 0
    assert stock["device"] >= stock["kv"]
    four = memory.estimate_row(s, "dense", "stock", 98304, 4, 160)
    assert four["kv"] == 4 * stock["kv"] and four["device"] > 3.9 * stock["device"]
    pig = memory.estimate_row(s, "magicpig:K=10,L=150", "offload", 98304, 1, 160)
    # the sparse layers' KV and tables live in host memory (Table 8: 14 GB of tables, int32 ids at 96K)
    assert 13e9 < pig["tables"] < 15.5e9 and pig["host"] > pig["tables"] + 0.9 * stock["kv"] * 30 / 32
    assert pig["device"] < stock["device"] / 2


def test_fit_reason_names_the_numbers():
    cpu = torch.device("cpu")
    assert memory.fit_reason({"device": 10, "host": 10}, cpu, {"host": 1000}) == ""
    why = memory.fit_reason({"device": 6e9, "host": 6e9}, cpu, {"host": 10e9})
    assert "12.00 GB of host memory" in why and "10.00 GB available" in why
    cuda = torch.device("cuda")
    why = memory.fit_reason({"device": 6e9, "host": 1e9}, cuda, {"host": 10e9, "device": 5e9})
    assert "cuda memory" in why and "host" not in why


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_bench_decode_grid_on_a_shape_model(tmp_path, capsys):
    out = tmp_path / "d.csv"
    rc = main(["bench", "decode", "--model", TINY, "--context", "128", "--batch", "1", "--batch", "2",
               "--steps", "2", "--warmup", "1", "--csv", str(out)])
    assert rc == 0
    rows = _rows(out)
    assert [(r["batch"], r["method"], r["backend"]) for r in rows] == [
        ("1", "dense", "stock"), ("1", "dense", "reference"), ("1", "magicpig", "offload"),
        ("2", "dense", "stock"), ("2", "dense", "reference"), ("2", "magicpig", "offload")]
    for col in table.COLUMNS:
        assert col in rows[0]
    for r in rows:
        assert r["fits"] == "true" and r["shape_only"] == "true" and r["fill"] == "exact"
        ms, tps, b = float(r["ms_per_token"]), float(r["tokens_per_s"]), int(r["batch"])
        assert ms > 0 and tps == pytest.approx(1000 * b / ms, rel=0.01)
        assert int(r["kv_bytes"]) == b * 2 * 4 * 2 * 128 * 32 * 4 and float(r["peak_host_mb"]) > 0
        assert r["steps"] == "2" and r["warmup"] == "1" and "steal_cpu" not in r  # diagnostics are off
    assert int(rows[2]["table_bytes"]) > 0 and 0 < float(rows[2]["sampled_fraction"]) < 1
    text = capsys.readouterr().out
    assert "vs stock" in text and "1.00x" in text and "shape-only" in text


def test_context_that_cannot_fit_is_refused_with_the_numbers_not_allocated(tmp_path, capsys):
    out = tmp_path / "d.csv"
    rc = main(["bench", "decode", "--model", TINY, "--fill", "tile", "--tile-base", "64",
               "--context", "4000000000", "--steps", "1", "--warmup", "0", "--csv", str(out)])
    assert rc == 1
    rows = _rows(out)
    assert len(rows) == 3 and all(r["fits"] == "false" and "GB of host memory" in r["reason"] for r in rows)
    assert "no configuration fits" in capsys.readouterr().err


def test_max_throughput_finds_the_largest_batch_the_memory_allows(tmp_path, monkeypatch):
    n = 4096  # the weights and the prefill need less than a 3-sequence row
    s = ModelShape.of_config(model_shape("tiny-llama").config(), torch.float32)
    need = {b: memory.estimate_row(s, "dense", "stock", n, b, 2)["device"] for b in (3, 4)}
    assert memory.estimate_prefill(s, n, n, 64)["device"] < need[3]
    free = (need[3] + need[4]) / 2 / memory.MEMORY_MARGIN  # room for 3 sequences, not 4
    monkeypatch.setattr(memory, "available_memory", lambda device: {"host": int(free)})
    rows = bench_decode.run(TINY, (n,), ["dense@stock"], batches=(1, 8), steps=1, warmup=1, prefill_chunk=64,
                            csv_path=str(tmp_path / "d.csv"), max_throughput=True, max_batch=64, verbose=False)
    assert [(r["batch"], r["fits"], r["search"]) for r in rows] == [(1, True, ""), (8, False, ""),
                                                                    (3, True, "max-batch")]
    assert "estimate" in rows[1]["reason"]


def test_max_throughput_backs_off_on_a_real_oom(tmp_path, monkeypatch):
    real = timed_decode.time_stock

    def flaky(net, pre, steps, warmup, after_step=None):
        if pre.batch > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return real(net, pre, steps, warmup, after_step)

    monkeypatch.setattr(timed_decode, "time_stock", flaky)
    rows = bench_decode.run(TINY, (128,), ["dense@stock"], batches=(4,), steps=1, warmup=1,
                            csv_path=str(tmp_path / "d.csv"), max_throughput=True, max_batch=8, verbose=False)
    assert rows[0]["fits"] is False and rows[0]["reason"].startswith("out of memory")
    best = rows[-1]
    assert best["search"].startswith("max-batch") and best["batch"] == 2 and best["fits"] is True


def test_diagnostics_add_the_time_breakdown_and_the_in_row_bandwidth(tmp_path, monkeypatch):
    def fake(net, tokenizer, pre, spec, backend, steps, warmup, offload_dtype=None, linear="auto", forward="auto",
             weights="model", after_step=None):
        for i in range(steps + warmup):
            if after_step is not None:  # the in-row bandwidth reads: --diagnostics only
                after_step(i)
        return {"step_seconds": [0.01] * (steps + warmup), "setup_seconds": 0.0, "sampled_fraction": 0.02,
                "timings": {"cpu_attend": 0.004 * steps, "transfer": 0.001 * steps, "setup": 3.0},
                "linear": "magicpig" if linear == "auto" else linear,
                "forward": "magicpig" if forward == "auto" else forward}

    monkeypatch.setattr(timed_decode, "time_engine", fake)
    rows = bench_decode.run(TINY, (128,), ["magicpig@offload"], steps=6, warmup=2,
                            csv_path=str(tmp_path / "d.csv"), verbose=False, diagnostics=True)
    assert rows[0]["cpu_attend_ms"] == pytest.approx(4.0) and rows[0]["transfer_ms"] == pytest.approx(1.0)
    assert rows[0]["hash_ms"] == "" and rows[0]["ms_per_token"] == pytest.approx(10.0)
    assert rows[0]["linear"] == "magicpig"  # who computed the linear layers is recorded per row
    assert rows[0]["forward"] == "magicpig"  # and who ran the layer loop
    # the machine's bandwidth during the row: a read after timed steps 0 and 4 of 6 (every 4th)
    assert rows[0]["stream_gbps_steps"] > 0 and rows[0]["stream_samples"] == 2
    assert rows[0]["x_after_read"] == pytest.approx(1.0)  # equal fake steps: the reads change nothing
    assert "setup_ms" not in rows[0]  # the decoder set-up is once per decode: setup_seconds, not per step
    assert rows[0]["steal_cpu"] >= 0 and rows[0]["load_before"] >= 0
    assert rows[0]["stream_gbps"] > 0 and rows[0]["bytes_per_step"] > 0  # the bytes-limit: the run-start read
    plain = bench_decode.run(TINY, (128,), ["magicpig@offload"], steps=6, warmup=2,
                             csv_path=str(tmp_path / "e.csv"), verbose=False)
    assert "cpu_attend_ms" not in plain[0] and "stream_gbps_steps" not in plain[0]
    assert _rows(tmp_path / "e.csv")[0].keys() == set(table.COLUMNS)


def test_offload_dtype_reaches_the_engine_and_the_csv(tmp_path):
    out = tmp_path / "d.csv"
    rc = main(["bench", "decode", "--model", TINY, "--context", "128", "--method", "magicpig@offload",
               "--offload-dtype", "bfloat16", "--steps", "1", "--warmup", "1", "--csv", str(out)])
    assert rc == 0
    row = _rows(out)[0]
    assert row["offload_dtype"] == "bfloat16" and row["fits"] == "true"
    with pytest.raises(ValueError, match="offload_dtype"):
        bench_decode.run(TINY, (128,), ["magicpig@offload"], steps=1, warmup=0, offload_dtype="int8",
                         csv_path=str(tmp_path / "e.csv"), verbose=False)


def test_a_csv_of_the_other_diagnostics_setting_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr("magicpig.models.load_model", lambda *a, **k: pytest.fail("model loaded"))
    for diagnostics, columns, flag in ((False, table.COLUMNS + table.DIAGNOSTIC_COLUMNS, "with"),
                                       (True, table.COLUMNS, "without")):
        path = tmp_path / f"{flag}.csv"
        path.write_text(",".join(columns) + "\n")
        with pytest.raises(ValueError, match=f"written {flag} --diagnostics"):
            bench_decode.run("smollm2", (256,), ["dense"], csv_path=str(path), device="cpu", diagnostics=diagnostics)


def test_allocator_is_converged_recorded_and_trimmed_before_each_row(tmp_path, monkeypatch):
    applied, trims = [], []
    monkeypatch.setattr(memory, "converge_allocator", lambda: applied.append(1) or "converged")
    monkeypatch.setattr(memory, "free_memory", lambda trim=False: trims.append(trim))
    out = tmp_path / "d.csv"
    rc = main(["bench", "decode", "--model", TINY, "--context", "128", "--method", "dense@stock",
               "--method", "magicpig@offload", "--steps", "1", "--warmup", "0", "--csv", str(out)])
    assert rc == 0 and applied == [1]
    assert [r["malloc_policy"] for r in _rows(out)] == ["converged", "converged"]
    assert trims.count(True) == 4  # before and after each of the two rows


def test_forward_choice_reaches_the_engine_and_the_csv(tmp_path):
    rows = {}
    for forward in ("transformers", "magicpig"):
        out = tmp_path / f"{forward}.csv"
        rc = main(["bench", "decode", "--model", TINY, "--context", "128", "--method", "dense@stock",
                   "--method", "magicpig@offload", "--forward", forward, "--steps", "1", "--warmup", "0",
                   "--csv", str(out)])
        assert rc == 0
        rows[forward] = {r["backend"]: r for r in _rows(out)}
    assert rows["magicpig"]["offload"]["forward"] == "magicpig"
    assert rows["transformers"]["offload"]["forward"] == "transformers"
    assert rows["magicpig"]["stock"]["forward"] == "transformers"  # stock is transformers' own decode


def test_row_monitor_reports_steal_and_this_process_kernel_share(monkeypatch):
    import os
    import time

    with row_monitor.RowMonitor(torch.device("cpu")) as mon:  # without --diagnostics: the reader's fields
        pass
    assert set(mon.fields()) == {"peak_host_mb", "peak_device_mb", "other_cpu_load", "under_load"}

    def busy(work, seconds=0.5):
        steal = iter([10.0, 10.25])  # the hypervisor gave 0.25 s of the machine's time elsewhere
        monkeypatch.setattr(row_monitor.RowMonitor, "_steal", staticmethod(lambda: next(steal)))
        outer = time.perf_counter()
        with row_monitor.RowMonitor(torch.device("cpu"), diagnostics=True) as mon:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                work()
        return mon.fields(), time.perf_counter() - outer

    (syscalls, syscalls_wall), (arithmetic, arithmetic_wall) = busy(lambda: os.stat("/")), busy(lambda: sum(range(200)))
    for f, wall in ((syscalls, syscalls_wall), (arithmetic, arithmetic_wall)):
        # the steal over the monitor's own wall time, which lies between the busy loop's 0.5 s and the wall time
        # around the whole block (however long a loaded machine made it); fields() rounds to 3 decimals
        assert 0.25 / wall - 1e-3 <= f["steal_cpu"] <= 0.25 / 0.5 + 1e-3
        assert 0.0 <= f["own_sys_share"] <= 1.0
    assert syscalls["own_sys_share"] > arithmetic["own_sys_share"]


def test_step_bandwidth_reads_after_every_nth_timed_step_and_checks_the_next_step():
    buf = torch.ones(1 << 16, dtype=torch.int64)
    sampler = row_monitor.StepBandwidth(buf, 1, warmup=2, every=3)
    for i in range(10):
        sampler(i)
    assert len(sampler.seconds) == 3 and sampler.followed == {3, 6, 9}  # after steps 2, 5 and 8
    assert sampler.gbps() == pytest.approx(3 * buf.numel() * 8 / sum(sampler.seconds) / 1e9)
    steps = [1.0] * 10
    for i in (3, 6, 9):
        steps[i] = 2.0
    assert sampler.after_read(steps) == pytest.approx(2.0)  # a read that slowed the next step shows
    assert row_monitor.StepBandwidth(buf, 1, warmup=5).gbps() is None  # no read yet: no figure


def test_bytes_limit_counts_weights_kv_and_sampled_rows():
    from magicpig.harness import projection as hardware

    shape = model_shape("smollm2")
    row = {"method": "dense", "backend": "stock", "dtype": "float32", "context": 8192, "batch": 2,
           "ms_per_token": 100.0, "sampled_fraction": 1.0}
    got = table.bytes_limit("smollm2", row, stream_gbps=10.0)
    weights = shape.params_read * 4
    kv = 2 * 30 * 8192 * (2 * 3 * 64 * 4)  # batch x layers x tokens x K+V bytes of 3 kv heads, fp32
    assert got["bytes_per_step"] == int(weights + kv)
    assert got["bytes_limit_ms"] == pytest.approx(1000 * (weights + kv) / 10e9, rel=1e-3)
    assert got["x_bytes_limit"] == pytest.approx(100.0 / got["bytes_limit_ms"], rel=1e-3)
    sparse = table.bytes_limit("smollm2", dict(row, method="magicpig:K=10,L=150", backend="offload",
                                                      sampled_fraction=0.03), 10.0)
    projections = 28 * 3 * 64 * 10 * 150 * 4  # the queries' hashing reads each kv-head's (d, K*L) float32
    # 2 of 30 layers dense + 3% of the rest, and the projections
    assert weights + projections < sparse["bytes_per_step"] < weights + 0.2 * kv + projections
    q8 = table.bytes_limit("smollm2", dict(row, backend="reference", weights="q8_0"), 10.0)
    assert q8["bytes_per_step"] == int(shape.params_read * 1.125 + kv)  # int8 + a float32 scale per 32 weights
    assert table.bytes_limit("smollm2", dict(row, method="quest"), 10.0) == {}  # not modelled
    assert table.bytes_limit("smollm2", dict(row, backend="llamacpp"), 10.0) == {}  # its row has its own
    assert table.bytes_limit("smollm2", row, None) == {}  # not a CPU run: no bandwidth measured


def test_one_machine_record_with_the_same_keys_everywhere():
    """eval's metrics.json, bench decode's machine.json and rows, bench kernel's rows: one record, one key
    per fact (magicpig.harness.machine)."""
    import subprocess
    import sys

    from magicpig.harness import machine
    from magicpig.harness.bench import kernel as bench_kernel

    rec = machine.machine_record("cpu")
    assert tuple(rec) == machine.KEYS and rec["device"] == "cpu" and rec["gpu_name"] is None
    assert rec["cpu_cores_logical"] >= 1 and rec["torch_version"] == torch.__version__ and rec["threads"] >= 1
    desc = machine.machine_record("cpu", load_cpu_module=True)
    assert tuple(desc) == machine.KEYS and desc["isa"] != "not loaded"  # the benchmarks load the CPU module
    shared = ("cpu_model", "isa", "threads", "torch_version")
    assert set(shared) <= set(table.COLUMNS)
    assert set(shared) <= set(bench_kernel.Row.__dataclass_fields__)
    # describing the machine compiles nothing: a fresh process without the module says so
    code = "from magicpig.harness.machine import machine_record; print(machine_record('cpu')['isa'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "not loaded", out.stderr[-500:]


def test_backends_are_named_once():
    from magicpig import backends
    from magicpig.harness import evaluate
    from magicpig.harness.cli import build_parser

    assert decode_options.BACKENDS == ("stock", "llamacpp") + backends.BACKENDS == backends.BENCH_BACKENDS
    assert evaluate.EvalConfig.__dataclass_fields__["backend"].default == backends.DEFAULT_BACKEND
    parser = build_parser()
    for argv in (["eval", "--task", "gsm8k", "--length", "4096", "--out", "x", "--method", "dense"],
                 ["generate", "--prompt", "hi"]):
        args = parser.parse_args(argv)
        assert args.backend == backends.DEFAULT_BACKEND
    assert decode_options.parse_method_arg("magicpig")[1] == "offload" == backends.system_backend("magicpig")
    assert decode_options.parse_method_arg("quest")[1] == "reference" == backends.system_backend("quest")


def test_llamacpp_rows_say_why_they_cannot_run(tmp_path, monkeypatch):
    rows = bench_decode.run(TINY, (128,), ["dense@llamacpp", "dense"], steps=1, warmup=0,
                            csv_path=str(tmp_path / "d.csv"), verbose=False)
    llama, ours = rows
    assert (llama["backend"], llama["fits"], llama["fill"]) == ("llamacpp", False, "exact")
    assert "GGUF" in llama["reason"]  # a shape-only model has no file for llama.cpp
    assert ours["fits"] is True and ours["weights"] in ("q8_0", "model")
    assert ours["runtime_version"].startswith("magicpig")
    monkeypatch.setattr(llamacpp, "bindings_installed", lambda: False)
    assert llamacpp.unavailable_reason("model.gguf") == "llama.cpp bindings not installed (make setup-llamacpp)"
    with pytest.raises(ValueError, match="llamacpp_kv must be one of f16, q8_0"):
        bench_decode.run(TINY, (128,), ["dense@llamacpp"], llamacpp_kv="q4", csv_path=str(tmp_path / "e.csv"))
    with pytest.raises(ValueError, match="weights must be one of model, bfloat16, q8_0"):
        bench_decode.run(TINY, (128,), ["dense"], weights="int4", csv_path=str(tmp_path / "e.csv"))


@pytest.mark.skipif(not llamacpp.bindings_installed(), reason="llama.cpp bindings not installed (make setup-llamacpp)")
def test_llamacpp_rows_decode_the_embedded_gguf(tmp_path):
    """llama.cpp prefills the context for real: its first greedy token is the float32 model's, and batch 2
    decodes two sequences (the context copied to the second)."""
    from magicpig.models import load_model, resolve

    src = resolve("smollm2")
    path = f"{src.path}/{src.gguf_file}"
    net, tok = load_model("smollm2")
    ids = prompts.essay_tokens(tok, 300)
    with torch.no_grad():
        want = int(net(torch.tensor([ids])).logits[0, -1].argmax())
    for batch in (1, 2):
        out = llamacpp.time_llamacpp(path, ids, batch, steps=3, warmup=1, threads=2)
        assert len(out["step_seconds"]) == 4 and out["linear"] == "llamacpp"
        assert out["first_token"] == want
    rows = bench_decode.run("smollm2", (300,), ["dense@llamacpp"], batches=(2,), steps=2, warmup=1,
                            csv_path=str(tmp_path / "d.csv"), verbose=False)
    assert rows[0]["fits"] is True and rows[0]["weights"] == "gguf Q4_1", rows[0]
    assert rows[0]["runtime_version"].startswith("llama-cpp-python") and rows[0]["x_bytes_limit"] != ""


@pytest.mark.skipif(not llamacpp.bindings_installed(), reason="llama.cpp bindings not installed (make setup-llamacpp)")
def test_llamacpp_state_dir_restores_an_earlier_runs_prefill(tmp_path, monkeypatch):
    """With a state folder the prefill runs once: a later run (a fresh process: its in-memory copy gone)
    restores it from the folder and decodes the same tokens; other ids get their own file; a record that does
    not describe its state file is refused by name; a file where the folder should be is refused up front."""
    from magicpig.models import resolve

    src = resolve("smollm2")
    path = f"{src.path}/{src.gguf_file}"
    tok_ids = list(range(1000, 1200))
    state = tmp_path / "state"
    monkeypatch.setattr(llamacpp, "_prefilled", {})
    first = llamacpp.time_llamacpp(path, tok_ids, 1, steps=3, warmup=0, threads=2, state_dir=str(state))
    assert first["prefill"] == "run"
    files = sorted(p.suffix for p in state.iterdir())
    assert files == [".json", ".state"]
    monkeypatch.setattr(llamacpp, "_prefilled", {})  # as in a new process
    again = llamacpp.time_llamacpp(path, tok_ids, 1, steps=3, warmup=0, threads=2, state_dir=str(state))
    assert again["prefill"] == "restored" and again["first_token"] == first["first_token"]
    assert again["last_tokens"] == first["last_tokens"]  # the restored cache decodes as the prefilled one
    kept = llamacpp.time_llamacpp(path, tok_ids, 1, steps=3, warmup=0, threads=2, state_dir=str(state))
    assert kept["prefill"] == "kept"
    other = llamacpp.time_llamacpp(path, tok_ids[:-1], 1, steps=1, warmup=0, threads=2, state_dir=str(state))
    assert other["prefill"] == "run" and len(list(state.glob("*.state"))) == 2
    record = next(p for p in state.glob("*.json") if p.stem == next(state.glob("*.state")).stem)
    record.write_text('{"first_token": 1, "bytes": 3}')
    monkeypatch.setattr(llamacpp, "_prefilled", {})
    with pytest.raises(ValueError, match="does not describe"):
        for ids in (tok_ids, tok_ids[:-1]):
            llamacpp.time_llamacpp(path, ids, 1, steps=1, warmup=0, threads=2, state_dir=str(state))
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="llamacpp_state_dir .* is not a folder"):
        bench_decode.run("smollm2", (128,), ["dense@llamacpp"], llamacpp_state_dir=str(tmp_path / "file"),
                         csv_path=str(tmp_path / "e.csv"))
