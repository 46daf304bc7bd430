"""The bandwidth model used for hardware projections: hand-checked cases and monotonicity."""
import math

import pytest

from magicpig.harness.projection import (HARDWARE, Hardware, cpu_full_attention, gpu_full_attention, magicpig_offload,
                                         paper_baselines)
from magicpig.shapes import ModelShape, load_shapes

MODELS = load_shapes()

TOY = ModelShape("toy", params_b=1.0, layers=4, heads=8, kv_heads=2, head_dim=64)
HW = Hardware("toy-gpu", gpu_mem_gb=10, gpu_read_gbps=1000, host_mem_gb=100, cpu_read_gbps=100, cpu_efficiency=0.5)


def test_full_attention_by_hand():
    # KV per sequence: 4 layers * 1000 tokens * (2 * 2 kv heads * 64 * 2 bytes) = 2.048 MB
    p = gpu_full_attention(TOY, HW, 1000, batch=3)
    assert p.batch == 3
    assert p.step_s == pytest.approx((2e9 + 3 * 2.048e6) / 1e12)
    assert p.tokens_per_s == pytest.approx(3 / p.step_s)


def test_full_attention_batch_is_capped_by_gpu_memory():
    p = gpu_full_attention(TOY, HW, 1_000_000)  # 2.048 GB per sequence, 7.5 GB free
    assert p.batch == 3
    assert gpu_full_attention(MODELS["llama-3.1-8b"], HARDWARE["RTX4090"], 98304).batch == 0


def test_magicpig_step_is_the_sum_of_gpu_and_cpu_parts():
    # the sparse CPU part runs between a layer's GPU parts (only the small static part overlaps it)
    p = magicpig_offload(TOY, HW, 100_000, 0.02, 10, 150, dense_layers=1, batch=8)
    assert p.gpu_s > 0 and p.cpu_s > 0
    assert p.step_s == pytest.approx(p.gpu_s + p.cpu_s)
    faster_cpu = magicpig_offload(TOY, Hardware(**{**HW.__dict__, "cpu_efficiency": 1.0}), 100_000, 0.02, 10, 150,
                                  dense_layers=1, batch=8)
    assert faster_cpu.cpu_s == pytest.approx(p.cpu_s / 2)


def test_more_sampling_costs_more_cpu_time():
    lo = magicpig_offload(TOY, HW, 100_000, 0.01, 10, 150, batch=4)
    hi = magicpig_offload(TOY, HW, 100_000, 0.05, 10, 150, batch=4)
    assert hi.cpu_s > lo.cpu_s


def test_offload_beats_gpu_only_when_kv_dominates():
    m, hw = MODELS["codellama-13b"], HARDWARE["L20"]
    full = gpu_full_attention(m, hw, 16384)
    pig = magicpig_offload(m, hw, 16384, 0.02, 10, 150)
    assert pig.batch > full.batch and pig.tokens_per_s > full.tokens_per_s
    assert math.isfinite(pig.step_s)


def test_project_cli_writes_labelled_rows(tmp_path, capsys):
    import pandas as pd

    from magicpig.harness.cli import main

    out = tmp_path / "p.csv"
    assert main(["project", "--cpu-efficiency", "0.4", "--csv", str(out)]) == 0
    df = pd.read_csv(out)
    assert len(df) == 6 and df["kind"].str.contains("not a measurement").all()
    assert set(df["paper_speedup"]) == {1.5, 5.0, 3.3}
    assert "PROJECTION" in capsys.readouterr().out
    assert main(["project", "--cpu-efficiency", "1.5"]) == 2


def test_overhead_and_gpu_efficiency_are_charged():
    slow = Hardware(**{**HW.__dict__, "gpu_efficiency": 0.5, "layer_overhead_ms": 1.0})
    base, p = gpu_full_attention(TOY, HW, 1000, batch=3), gpu_full_attention(TOY, slow, 1000, batch=3)
    assert p.step_s == pytest.approx(2 * base.step_s + TOY.layers * 1e-3)


def test_magicpig_batch_is_capped_by_host_memory():
    m, hw = MODELS["llama-3.1-8b"], HARDWARE["H200"]
    # per sequence at 96K: 30 sparse layers x (98304 x 4096 B of KV + 8 x 150 x 98304 x 4 B of ids) = 26.2 GB
    host_seq = 30 * 98304 * 4096 + 30 * 8 * 150 * 98304 * 4
    assert magicpig_offload(m, hw, 98304, 0.02, 10, 150).batch == int(hw.host_mem_gb * 1e9 // host_seq)
    assert magicpig_offload(m, hw, 98304, 0.02, 10, 150, batch=1).batch == 1


def test_paper_figures_are_matched_to_rows_by_setting(monkeypatch):
    """Each projected row carries the paper's figure of its own (hardware, model, context, method), read
    from config/paper_reference.yaml: reordering the file's entries changes no row's paper value."""
    from magicpig.harness.projection import hardware as projection

    rows = {r["hardware"]: r for r in projection.paper_projection_rows(0.4)}
    assert rows[HARDWARE["A100"].name]["paper_speedup"] == 1.5 and rows[HARDWARE["A100"].name]["context"] == 16384
    assert rows[HARDWARE["L20"].name]["paper_speedup"] == 5.0 and rows[HARDWARE["L20"].name]["model"] == "codellama-13b"
    assert rows[HARDWARE["RTX4090"].name]["paper_speedup"] == 3.3 and rows[HARDWARE["RTX4090"].name]["context"] == 98304
    original = projection.paper_entries
    monkeypatch.setattr(projection, "paper_entries", lambda name: list(reversed(original(name))))
    flipped = {r["hardware"]: r for r in projection.paper_projection_rows(0.4)}
    assert {k: r["paper_speedup"] for k, r in flipped.items()} == {k: r["paper_speedup"] for k, r in rows.items()}
    lat = {r["what"]: r for r in projection.latency_rows(0.3)}
    assert lat["MagicPIG ms/token, batch 1"]["paper"] == 54.0 and lat["MagicPIG ms/token, batch 1"]["batch"] == 1
    # the 54 ms/token is the simulated RTX 4090's (Fig. 8c), projected on that machine, not on the L20
    assert lat["MagicPIG ms/token, batch 1"]["hardware"] == HARDWARE["RTX4090"].name
    assert lat["MagicPIG tokens/s, batch 18"]["paper"] == 53.8
    assert lat["GPU-only full attention tokens/s, largest batch"]["paper"] == 30.5
    assert "paper" not in lat["MagicPIG tokens/s, largest batch that fits"]


def test_cpu_full_attention_by_hand():
    """The KV cache read from host memory at the given rate, the weights on the GPU, the step their sum."""
    p = cpu_full_attention(TOY, HW, 1000, kv_read_gbps=50, batch=3)
    assert p.batch == 3
    assert p.gpu_s == pytest.approx(2e9 / 1e12) and p.cpu_s == pytest.approx(3 * 2.048e6 / 50e9)
    assert p.step_s == pytest.approx(p.gpu_s + p.cpu_s)
    # the batch is capped by host memory (100 GB / 2.048 GB per sequence at 1M tokens), not by the GPU's 10 GB
    assert cpu_full_attention(TOY, HW, 1_000_000, kv_read_gbps=50).batch == 48
    assert gpu_full_attention(TOY, HW, 1_000_000).batch == 3
    with pytest.raises(ValueError, match="kv_read_gbps"):
        cpu_full_attention(TOY, HW, 1000, kv_read_gbps=0)


def test_rtx4090_ratio_is_over_cpu_full_attention_at_the_papers_bandwidth():
    """Fig. 8c's 3.3x is over full attention on the CPU at 150 GB/s (Sec. 5.2): the projection computes that
    baseline (GPU-only full attention does not fit there) and prints a finite ratio beside the paper's; the A100
    and L20 stay over GPU-only full attention."""
    from magicpig.harness.projection import hardware as projection
    from magicpig.shapes import model_shape

    assert paper_baselines()["cpu_full"]["kv_read_gbps"] == 150
    rows = {r["hardware"]: r for r in projection.paper_projection_rows(0.3)}
    rtx = rows[HARDWARE["RTX4090"].name]
    assert rtx["baseline"] == "cpu_full" and rtx["baseline_kv_read_gbps"] == 150 and rtx["paper_speedup"] == 3.3
    base = cpu_full_attention(model_shape("llama-3.1-8b"), HARDWARE["RTX4090"], 98304, 150)
    assert base.batch >= 1 and rtx["full_tokens_per_s"] == pytest.approx(base.tokens_per_s)
    assert math.isfinite(rtx["speedup"]) and rtx["speedup"] == pytest.approx(rtx["magicpig_tokens_per_s"]
                                                                            / base.tokens_per_s)
    assert "does not fit" not in rtx["note"] and "150 GB/s" in rtx["note"]
    for key in ("A100", "L20"):
        row = rows[HARDWARE[key].name]
        assert row["baseline"] == "gpu_full" and math.isnan(row["baseline_kv_read_gbps"])
    # the baseline is bound by the host bandwidth: a faster host memory raises its throughput
    fast = cpu_full_attention(model_shape("llama-3.1-8b"), HARDWARE["RTX4090"], 98304, 300)
    assert fast.tokens_per_s > base.tokens_per_s
    lat = {r["what"]: r for r in projection.latency_rows(0.3)}
    b1 = [r for w, r in lat.items() if w.startswith("baseline ms/token, batch 1")]
    assert len(b1) == 1 and b1[0]["baseline"] == "cpu_full" and b1[0]["projected"] == pytest.approx(
        cpu_full_attention(model_shape("llama-3.1-8b"), HARDWARE["RTX4090"], 98304, 150, batch=1).ms_per_token)


def test_a_throughput_entry_without_a_known_baseline_is_refused(monkeypatch):
    from magicpig.harness.projection import hardware as projection

    entries = projection.paper_entries("throughput_speedup")
    for change, message in (({"baseline": "tpu_full"}, "baseline 'tpu_full' is not a key"), ({}, "no 'baseline'")):
        bad = [dict({k: v for k, v in entries[0].items() if k != "baseline"}, **change)] + entries[1:]
        monkeypatch.setattr(projection, "paper_entries", lambda name, bad=bad: bad)
        with pytest.raises(ValueError, match=message):
            projection.paper_projection_rows(0.3)
