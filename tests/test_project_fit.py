"""The hardware model fitted to measurement (`magicpig project` with kernel + decode CSVs).

Fixtures: throughput_{decode,kernel}_cpu.csv were generated (tests/fixtures/throughput_fixtures.py) from the
physical model with known rates, 6% noise, rows measured again under load (times x1.7-2.3,
``under_load=true``) and one row that does not fit; throughput_decode_cputime_real.csv holds real rows of
this machine (see test_model_fits_real_rows_of_this_machine).
"""
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from magicpig.harness.projection import fit_policy, measured_rows
from magicpig.harness.result_files import PROJECT_FILES
from magicpig.harness.projection import (HARDWARE, Fit, SparseSetting, dtype_bytes, fit, h200_rows, leave_one_out,
                                         method_family, nnls, step_work, trust_problems)
from magicpig.shapes import load_shapes, model_shape

MODELS = load_shapes()

FIX = Path(__file__).parent / "fixtures"
DECODE, KERNEL = FIX / "throughput_decode_cpu.csv", FIX / "throughput_kernel_cpu.csv"
TRUTH = {"flops": 1 / 60e9, "kv:dense@stock": 1 / 2.8e9, "kv:dense": 1 / 4.1e9, "sparse": 1 / 4.2e9,
         "layer:dense@stock": 1.5e-3, "layer:dense": 1.0e-3, "layer:magicpig": 2.4e-3}
SMOL = model_shape("smollm2").with_dtype(4)


def grid():
    works = []
    for n in (8192, 32768):
        for b in (1, 2, 4, 8):
            for fam in ("dense@stock", "dense", "magicpig"):
                works.append(step_work(SMOL, fam, n, b, SparseSetting(sampled_fraction=0.02)))
    return works


def test_model_shapes_come_from_the_yaml_file():
    s = model_shape("smollm2")
    assert (s.name, s.layers, s.heads, s.kv_heads, s.head_dim, s.tie_embeddings) == ("smollm2-135m", 30, 9, 3, 64, True)
    assert model_shape("shape:llama-3.1-8b") is MODELS["llama-3.1-8b"]
    assert model_shape("meta-llama/Llama-3.1-8B-Instruct").layers == 32
    assert {"llama-3.1-8b", "codellama-13b", "codellama-34b"} <= set(MODELS)
    with pytest.raises(ValueError, match="model: no architecture facts.*llama-3.1-8b"):
        model_shape("gpt-9")
    with pytest.raises(ValueError, match="dtype.*float32"):
        dtype_bytes("int3")


def test_step_work_by_hand():
    w = step_work(SMOL, "dense", 32768, 2)
    assert w.weight_bytes == pytest.approx(0.135e9 * 4)  # tied embeddings: the output head reads them
    assert w.exact_kv_bytes == 2 * 30 * 32768 * (2 * 3 * 64 * 4)
    assert w.flops == pytest.approx(2 * 2 * 0.135e9)
    llama = MODELS["llama-3.1-8b"]  # untied: the input-embedding table is only looked up
    assert step_work(llama, "dense", 1024, 1).weight_bytes == pytest.approx((8.03e9 - 128256 * 4096) * 2)
    p = step_work(SMOL, "magicpig", 32768, 1, SparseSetting(10, 150, 0.02, 2, 132))
    assert p.exact_kv_bytes == (2 * 32768 + 28 * 132) * 1536
    # per query head: sampled rows + bucket ids; per kv-head: the (d, K*L) float32 projections of the hashing
    assert p.sparse_bytes == pytest.approx(28 * 9 * (0.02 * 32768 * 2 * 64 * 4 + 150 * 32 * 2)
                                           + 28 * 3 * 64 * 1500 * 4)
    with pytest.raises(ValueError, match="family must be one of"):
        step_work(SMOL, "quest", 1024, 1)


def test_stock_cache_faults_fresh_pages_above_the_mmap_threshold():
    """DynamicCache's per-step concatenation allocates each layer's keys and values anew; above glibc's 32 MiB
    mmap threshold those pages come fresh from the OS every step (a CPU run only)."""
    per_layer_keys = 32768 * 3 * 64 * 4  # 25 MB at batch 1: below the threshold
    assert per_layer_keys < 32 * 2**20 < 2 * per_layer_keys
    assert step_work(SMOL, "dense@stock", 32768, 1, host_alloc=True).fresh_bytes == 0
    two = step_work(SMOL, "dense@stock", 32768, 2, host_alloc=True)
    assert two.fresh_bytes == two.exact_kv_bytes > 0
    assert step_work(SMOL, "dense@stock", 32768, 2).fresh_bytes == 0  # a GPU run: the caching allocator
    assert step_work(SMOL, "dense", 32768, 8, host_alloc=True).fresh_bytes == 0  # our decoders grow in place


def test_method_family():
    assert method_family("dense", "stock") == method_family("dense@stock") == "dense@stock"
    assert method_family("dense", "reference") == "dense"
    assert method_family("magicpig:K=10,L=150", "offload") == method_family("magicpig@offload") == "magicpig"
    assert method_family("magicpig", "reference") is None and method_family("quest:ratio=0.04", "reference") is None


def test_nnls_keeps_coefficients_non_negative():
    import numpy as np

    A = np.array([[1.0, 1.0], [1.0, 1.01], [1.0, 0.99]])
    b = np.array([1.0, 0.5, 1.5])  # unconstrained: a large negative second coefficient
    assert np.linalg.lstsq(A, b, rcond=None)[0][1] < 0
    x = nnls(A, b)
    assert (x >= 0).all() and x[1] == 0 and x[0] == pytest.approx(1.0)
    exact = nnls(A, A @ np.array([0.3, 0.7]))
    assert exact == pytest.approx([0.3, 0.7])
    from scipy.optimize import nnls as scipy_nnls

    rng = np.random.default_rng(0)
    for _ in range(20):  # the reference implementation on random problems, many with active constraints
        A, b = rng.normal(size=(12, 6)), rng.normal(size=12)
        assert nnls(A, b) == pytest.approx(scipy_nnls(A, b)[0], abs=1e-9)


def test_fit_recovers_the_rates_from_exact_rows():
    works = grid()
    truth = Fit(14.0, TRUTH)
    f = fit(works, [truth.predict_s(w) for w in works], 14.0)
    for k, v in TRUTH.items():
        assert f.coef[k] == pytest.approx(v, rel=1e-6), k
    p = f.parameters()
    assert p["gflops"] == pytest.approx(60) and p["exact_kv_gbps[dense]"] == pytest.approx(4.1)
    assert p["sparse_efficiency (of stream)"] == pytest.approx(4.2 / 14)
    assert p["layer_overhead_ms[magicpig]"] == pytest.approx(2.4)


def test_undetermined_parameters_are_nan_not_zero():
    works = [w for w in grid() if w.family == "dense"]
    f = fit(works, [Fit(14.0, TRUTH).predict_s(w) for w in works], 14.0)
    p = f.parameters()
    assert math.isnan(p["sparse_gbps[magicpig]"]) and math.isnan(p["layer_overhead_ms[dense@stock]"])
    assert p["exact_kv_gbps[dense]"] == pytest.approx(4.1)
    with pytest.raises(ValueError, match="no unflagged measured rows"):
        fit([], [], 14.0)


def test_kernel_summary_uses_unflagged_rows_only(tmp_path):
    k = measured_rows.kernel_summary([KERNEL])
    assert (k["rows"], k["unflagged"]) == (5, 4)
    assert k["stream_gbps"] == pytest.approx(13.95) and k["efficiency"] == pytest.approx(0.305)
    loaded = tmp_path / "k.csv"
    df = pd.read_csv(KERNEL)
    df.assign(load_avg=5.0).to_csv(loaded, index=False)
    k = measured_rows.kernel_summary([loaded])
    assert k["unflagged"] == 0 and math.isnan(k["efficiency"])
    assert k["stream_gbps"] == pytest.approx(14.2) and "under load" in k["stream_source"]


def run_project(tmp_path, *extra, decode=DECODE):
    from magicpig.harness.cli import main

    out = tmp_path / "out"
    args = ["project", "--kernel-csv", str(KERNEL), "--decode-csv", str(decode), "--out-dir", str(out), *extra]
    assert main(args) == 0
    return {k: pd.read_csv(out / f.name) for k, f in PROJECT_FILES.items()}


def test_fixture_fit_within_target_and_loaded_rows_flagged(tmp_path, capsys):
    res = run_project(tmp_path)
    pred = res["predicted"]
    assert len(pred) == len(pd.read_csv(DECODE))
    assert pred["predicted_ms_per_token"].notna().all()  # every decode row gets a prediction
    fitted = pred[pred["model_role"] == "fitted"]
    assert len(fitted) == 23
    assert fitted["prediction_error"].abs().max() <= 0.25
    assert fitted["loo_error"].abs().max() <= 0.25 and fitted["loo_error"].notna().all()
    loaded = pred[pred["under_load"]]
    assert len(loaded) == 6 and (loaded["model_role"] == "flagged: under load").all()
    assert (pred.loc[pred["fits"] == False, "model_role"] == "not measured (does not fit)").all()  # noqa: E712
    out = capsys.readouterr().out
    assert "decode-row fit trusted: 23 unflagged rows" in out
    assert "PROJECTION" in out and "layer_overhead_ms[magicpig]" in out
    fit_df = res["fit"].set_index("parameter")["value"]
    assert fit_df["exact_kv_gbps[dense@stock]"] == pytest.approx(2.8, rel=0.15)
    assert fit_df["sparse_efficiency (of stream)"] == pytest.approx(0.3, rel=0.25)


def test_loaded_rows_never_enter_the_fit(tmp_path):
    df = pd.read_csv(DECODE)
    changed = tmp_path / "d.csv"
    df.assign(ms_per_token=df["ms_per_token"].where(~df["under_load"], df["ms_per_token"] * 50)).to_csv(
        changed, index=False)
    a = run_project(tmp_path / "a")["fit"].set_index("parameter")["value"]
    b = run_project(tmp_path / "b", decode=changed)["fit"].set_index("parameter")["value"]
    assert a.drop(["max abs prediction error", "max abs leave-one-out error"]).equals(
        b.drop(["max abs prediction error", "max abs leave-one-out error"]))
    # and they matter: fitted with them, the model misses the quiet rows by far more
    unflag = tmp_path / "u.csv"
    df.assign(under_load=False).to_csv(unflag, index=False)
    pred = run_project(tmp_path / "c", decode=unflag)["predicted"]
    assert pred["prediction_error"].abs().max() > 0.25


def test_reader_tolerates_minimal_columns(tmp_path):
    minimal = tmp_path / "minimal.csv"
    pd.DataFrame([
        {"model": "smollm2", "context": 8192, "method": "dense", "backend": "reference", "batch": 1,
         "ms_per_token": 170.0, "device": "cpu", "threads": 2},
        {"model": "smollm2", "context": 32768, "method": "magicpig:K=10,L=150", "backend": "offload", "batch": 2,
         "ms_per_token": 200.0},
        {"model": "smollm2", "context": 8192, "method": "quest:ratio=0.04", "backend": "reference", "batch": 1,
         "ms_per_token": 300.0},
        {"model": "someone/unknown-model", "context": 8192, "method": "dense", "batch": 1, "ms_per_token": 50.0},
    ]).to_csv(minimal, index=False)
    items = measured_rows.decode_items([minimal])
    assert [round(it["measured_s"], 3) for it in items] == [0.17, 0.2, 0.3, 0.05]
    assert [it["role"] for it in items] == ["fitted", "fitted", "not modelled (method)",
                                           "not modelled (unknown model shape)"]
    assert items[0]["work"].weight_bytes == pytest.approx(0.135e9 * 4)  # CPU rows without dtype: float32
    assert items[1]["sparse"].sampled_fraction == 0.02  # no sampled_fraction column: the default


def test_gpu_rows_are_checked_against_the_h200_projection(tmp_path):
    gpu = tmp_path / "gpu.csv"
    rows = pd.read_csv(DECODE).head(3).to_dict("records")
    rows.append({"model": "shape:llama-3.1-8b", "device": "cuda:0", "context": 16384, "batch": 1, "method": "dense",
                 "backend": "stock", "ms_per_token": 9.0, "dtype": "bfloat16", "fits": True, "under_load": False})
    pd.DataFrame(rows).to_csv(gpu, index=False)
    pred = run_project(tmp_path, decode=gpu)["predicted"]
    g = pred[pred["device"] == "cuda:0"].iloc[0]
    assert g["model_role"] == "GPU check of the H200 projection"
    h = [r for r in h200_rows(0.3) if r["context"] == 16384 and r["which"] == "batch 1"
         and r["method"] == "dense@stock"][0]
    assert g["predicted_ms_per_token"] == pytest.approx(h["ms_per_token"])
    assert g["prediction_error"] == pytest.approx(h["ms_per_token"] / 9.0 - 1)


def test_h200_projection_rows():
    rows = h200_rows(0.3)
    assert len(rows) == 18 and all("PROJECTION" in r["kind"] for r in rows)
    by = {(r["context"], r["which"], r["method"].split(":")[0].split("@")[0]): r for r in rows}
    assert all(by[(n, "batch 1", m)]["batch"] == 1 for n in (16384, 65536, 98304) for m in ("dense", "magicpig"))
    # (141 GB x 0.95 - 16.06 GB of weights) // (32 layers x 98304 x 4096 B) = 9 sequences
    assert by[(98304, "max batch", "dense")]["batch"] == by[(98304, "max batch", "dense (static cache)")]["batch"] == 9
    # stock transformers moves the cache three times a step (torch.cat read + write, attention read)
    stock, static = by[(98304, "batch 1", "dense")], by[(98304, "batch 1", "dense (static cache)")]
    kv = 32 * 98304 * 4096 / (4800e9 * 0.8) * 1e3
    assert stock["gpu_ms"] - static["gpu_ms"] == pytest.approx(2 * kv)
    hw = HARDWARE["H200"]
    assert "ASSUMED" in hw.note and hw.gpu_read_gbps == 4800 and hw.gpu_mem_gb == 141


def test_project_paper_and_latency_tables(tmp_path):
    res = run_project(tmp_path, "--host-gbps", "40")
    paper = res["paper"]
    assert set(paper["paper_speedup"]) == {1.5, 5.0, 3.3} and paper["kind"].str.contains("PROJECTION").all()
    assert paper["cpu_kernel"].str.contains("fitted to decode rows").any()
    lat = res["latency"].set_index("what")
    assert lat.loc["MagicPIG ms/token, batch 1", "paper"] == 54.0
    assert lat.loc["MagicPIG tokens/s, batch 18", "paper"] == 53.8
    assert (res["h200"]["cpu_read_gbps_assumed"] == 40).all()


def test_gpu_assumptions_can_be_corrected(tmp_path):
    a = run_project(tmp_path / "a")["h200"]
    b = run_project(tmp_path / "b", "--gpu-layer-overhead-ms", "1.3", "--gpu-efficiency", "0.4")["h200"]
    one = (a["which"] == "batch 1") & (a["method"] == "dense@stock")
    # 32 layers x 1 ms more, and the GPU part at half the bandwidth
    assert float(b.loc[one, "ms_per_token"].iloc[0] - a.loc[one, "ms_per_token"].iloc[0]) == pytest.approx(
        32 * 1.0 + float(a.loc[one, "gpu_ms"].iloc[0]))


@pytest.mark.parametrize("flag,value", [("--cpu-efficiency", "1.5"), ("--host-gbps", "-3"),
                                        ("--sampled-fraction", "0"), ("--gpu-efficiency", "0"),
                                        ("--gpu-layer-overhead-ms", "-1")])
def test_bad_values_are_refused(flag, value):
    from magicpig.harness.cli import main

    assert main(["project", flag, value]) == 2


def test_missing_csv_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such CSV"):
        measured_rows.decode_items([tmp_path / "none.csv"])


def test_report_shows_fit_errors_and_labelled_projections(tmp_path):
    from magicpig.harness.cli import main
    from magicpig.harness.report.build import throughput_section

    thr = tmp_path / "results" / "throughput"
    assert main(["project", "--kernel-csv", str(KERNEL), "--decode-csv", str(DECODE), "--out-dir", str(thr)]) == 0
    text = "\n".join(throughput_section(tmp_path / "results"))
    assert "Bandwidth model fitted to this machine" in text and "layer_overhead_ms[dense@stock]" in text
    assert "prediction_error" in text and "flagged: under load" in text
    assert "PROJECTION (bandwidth model, not measured): llama-3.1-8b on one H200" in text
    assert "MagicPIG ms/token, batch 1" in text


def test_rows_of_two_machines_are_not_fitted_together(tmp_path):
    df = pd.read_csv(DECODE)
    mixed = tmp_path / "mixed.csv"
    df.assign(cpu_model=["AMD EPYC" if i % 2 else "Intel Xeon" for i in range(len(df))]).to_csv(mixed, index=False)
    with pytest.raises(ValueError, match="decode-csv: CPU rows of 2 machines"):
        fit_policy.fit_machine(measured_rows.decode_items([mixed]), 14.0)


def test_model_fits_real_rows_of_this_machine():
    """Real rows: smollm2 on this machine, 1 thread, each step timed in process CPU time (the machine was
    shared, so wall time was not usable), 3 timed steps, contexts 2K / 8K tiled from a 1K prefill, batches
    1 / 2 / 4 (the 8K batch-4 MagicPIG row is missing: the run was cut short)."""
    items = measured_rows.decode_items([FIX / "throughput_decode_cputime_real.csv"])
    assert all(it["role"] == "fitted" for it in items) and len(items) == 17
    f = fit_policy.fit_machine(items, 10.0)
    errors = [it["predicted_s"] / it["measured_s"] - 1 for it in items]
    assert max(abs(e) for e in errors) <= 0.25
    assert 0 < f.parameters()["sparse_efficiency (of stream)"] < 1


def test_every_output_is_written_without_usable_decode_rows(tmp_path, capsys):
    loaded = tmp_path / "loaded.csv"
    pd.read_csv(DECODE).assign(under_load=True).to_csv(loaded, index=False)
    res = run_project(tmp_path / "a", decode=loaded)  # all flagged: nothing to fit, still every table
    assert (res["predicted"]["model_role"] == "flagged: under load").sum() == 29  # + 1 that does not fit
    assert res["predicted"]["predicted_ms_per_token"].isna().all() and res["fit"].empty is False
    assert "no decode row fitted" in capsys.readouterr().out
    header_only = tmp_path / "empty.csv"
    header_only.write_text(DECODE.read_text().splitlines()[0] + "\n")
    res = run_project(tmp_path / "b", decode=header_only)
    assert set(res) == set(PROJECT_FILES) and res["predicted"].empty


@pytest.mark.parametrize("row,loaded", [
    ({"under_load": "true", "load_avg": 0.0}, True),  # the benchmark's own verdict wins
    ({"under_load": False, "load_avg": 9.0}, False),
    ({"other_cpu_load": 1.5, "threads": 2}, True),
    ({"other_cpu_load": 0.5, "load_after": 5.0, "threads": 2}, False),
    ({"load_avg": 2.1, "threads": 2}, False),  # a quiet 2-core machine running a 2-thread benchmark
    ({"load_avg": 3.3, "threads": 2}, True),
    ({"load_before": 0.2, "load_after": 3.5, "threads": 2}, True),
])
def test_under_load_discounts_the_benchmarks_own_threads(row, loaded):
    assert measured_rows.under_load(row) is loaded


def test_predicted_parts_add_up_and_match_the_physics(tmp_path):
    pred = run_project(tmp_path)["predicted"]
    parts = pred[[f"predicted_{p}_ms" for p in ("weights", "flops", "exact_kv", "sparse", "overhead")]]
    assert parts.sum(axis=1).to_numpy() == pytest.approx(pred["predicted_ms_per_token"].to_numpy())
    dense = pred[pred["backend"] == "reference"]
    assert (dense["predicted_sparse_ms"] == 0).all()
    # weights at the kernel CSV's streaming bandwidth: 0.135e9 x 4 B / 13.95 GB/s
    assert dense["predicted_weights_ms"].iloc[0] == pytest.approx(0.135e9 * 4 / 13.95e9 * 1e3)
    fit_df = run_project(tmp_path / "b")["fit"].set_index("parameter")["value"]
    assert fit_df["parameters fitted"] == 8  # the fresh-page rate counts though the fit sets it to 0 (inf GB/s)
    assert fit_df["fresh_page_gbps[dense@stock]"] == math.inf


def test_a_row_without_context_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.csv"
    pd.DataFrame([{"model": "smollm2", "batch": 1, "method": "dense", "ms_per_token": 5.0}]).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="field 'context' must be a positive integer"):
        measured_rows.decode_items([bad])


def test_reads_the_columns_bench_decode_writes(tmp_path):
    from magicpig.harness.bench.table import COLUMNS

    row = dict.fromkeys(COLUMNS, "")
    row.update(model="smollm2", shape_only=False, device="cpu", context=8192, batch=2, method="magicpig",
               backend="offload", ms_per_token=150.0, tokens_per_s=13.33, sampled_fraction=0.021, fits=True,
               other_cpu_load=0.1, under_load=False, threads=2, dtype="float32", steps=8, warmup=4)
    path = tmp_path / "d.csv"
    pd.DataFrame([row, dict(row, under_load=True), dict(row, fits=False, ms_per_token="")]).to_csv(path, index=False)
    items = measured_rows.decode_items([path])
    assert [it["role"] for it in items] == ["fitted", "flagged: under load", "not measured (does not fit)"]
    assert items[0]["measured_s"] == pytest.approx(0.15) and items[0]["sparse"].sampled_fraction == 0.021
    assert items[0]["work"].batch == 2 and items[0]["shape"].bytes_per_param == 4


def test_a_two_row_fit_is_refused_and_the_measured_kernel_efficiency_used(tmp_path, capsys):
    two = tmp_path / "two.csv"
    quiet = pd.read_csv(DECODE).query("not under_load and fits and context == 8192 and batch == 1")
    quiet[quiet["backend"] != "stock"].to_csv(two, index=False)  # one torch-reference row, one MagicPIG row
    res = run_project(tmp_path / "p", decode=two)
    used = res["fit"].set_index("parameter").loc["cpu_efficiency used in projections"]
    assert used["value"] == pytest.approx(0.305)  # the kernel CSV's median bandwidth_ratio
    assert used["source"].startswith("measured by bench kernel") and "decode-row fit refused" in used["source"]
    assert "2 unflagged rows for" in used["source"] and "leave-one-out" in used["source"]
    ours = res["paper"][res["paper"]["cpu_kernel"].str.startswith("this suite's kernel")]
    assert len(ours) == 3 and ours["cpu_efficiency"].tolist() == pytest.approx([0.305] * 3)
    assert ours["cpu_kernel"].str.contains("30% of streaming bandwidth, measured by bench kernel").all()
    assert ours["cpu_efficiency_basis"].str.contains("decode-row fit refused: 2 unflagged rows").all()
    assert set(res["h200"]["cpu_efficiency"]) == {0.305}
    assert "decode-row fit refused" in capsys.readouterr().out


def test_a_fit_to_rows_from_known_rates_is_trusted_and_recovers_them():
    import random

    rng = random.Random(3)
    works, truth = grid(), Fit(14.0, TRUTH)
    ys = [truth.predict_s(w) * (1 + 0.03 * rng.uniform(-1, 1)) for w in works]  # 3% measurement noise
    f = fit(works, ys, 14.0)
    assert trust_problems(f, ys, leave_one_out(works, ys, 14.0)) == []
    p = f.parameters()
    assert p["sparse_efficiency (of stream)"] == pytest.approx(4.2 / 14, rel=0.1)
    assert p["exact_kv_gbps[dense]"] == pytest.approx(4.1, rel=0.1) and p["gflops"] == pytest.approx(60, rel=0.15)
    assert p["layer_overhead_ms[magicpig]"] == pytest.approx(2.4, rel=0.15)
    items = [{"role": "fitted", "measured_s": y, "loo_s": loo} for y, loo in zip(ys, leave_one_out(works, ys, 14.0))]
    eff = fit_policy.choose_efficiency(None, f, items, {"efficiency": 0.1, "unflagged": 4})
    assert eff.value == p["sparse_efficiency (of stream)"] and eff.source == "fitted to decode rows"
    assert eff.basis.startswith("decode-row fit trusted: 24 unflagged rows for 7 parameters")
    assert fit_policy.choose_efficiency(0.5, f, items, {}).value == 0.5


@pytest.mark.parametrize("coef,reason", [
    ({"sparse": 1 / 0.1e9}, r"fitted sparse efficiency 0.00714 is outside \[0.01, 1\]"),  # 0.1 GB/s of 14
    ({"sparse": 0.0}, r"fitted sparse efficiency inf is outside"),  # the fit charged the sparse bytes nothing
    ({}, "no MagicPIG row determined the sparse bandwidth"),
])
def test_a_degenerate_sparse_efficiency_is_refused(coef, reason):
    f = Fit(14.0, {"flops": 1 / 60e9, **coef}, used=30, determined=("flops", *coef))
    assert re.search(reason, "; ".join(trust_problems(f, [1.0] * 30, [1.1] * 30)))
    assert trust_problems(f, [1.0] * 30, [1.3] * 30)[0] == "leave-one-out error up to 30% (bound 25%)"


def test_without_kernel_or_fit_the_original_kernel_is_projected(tmp_path):
    from magicpig.harness.cli import main

    out = tmp_path / "out"
    assert main(["project", "--out-dir", str(out)]) == 0
    used = pd.read_csv(out / "fit.csv").set_index("parameter").loc["cpu_efficiency used in projections"]
    assert used["value"] == fit_policy.ORIGINAL_KERNEL_EFFICIENCY and "no decode-row fit" in used["source"]
    assert pd.read_csv(out / "projection_paper_hardware.csv")["cpu_kernel"].str.startswith("original").all()
