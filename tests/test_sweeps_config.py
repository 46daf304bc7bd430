"""The `sweeps` block of a preset (Figs. 1, 6c, 9a, 9b/c): the method list its jobs decode from one prefill, and
its load-time checks, each naming the config path."""
import pytest

from magicpig.harness.pipeline_config import sweep_methods, validate_pipeline_config
from magicpig.methods import canonical_spec
from test_pipeline_config import load, problems


@pytest.fixture
def smoke():
    return load("smoke.yaml")


def test_sweep_methods_in_order_each_setting_once():
    block = {"tasks": ["cwe"], "topk_budgets": [32, 0.02], "oracle_budgets": [0.02],
             "centering": {"K": 10, "L": [150, 300]}, "magicpig_kl": ["10,150", "8,75"]}
    specs = sweep_methods(block)
    assert specs == ["dense", "topk:budget=32", "topk:budget=0.02", "oracle:budget=0.02", "magicpig:K=10,L=150",
                     "magicpig:K=10,L=150,centering=false", "magicpig:K=10,L=300",
                     "magicpig:K=10,L=300,centering=false", "magicpig:K=8,L=75"]
    assert len({canonical_spec(s) for s in specs}) == len(specs)
    assert sweep_methods({"tasks": [], "topk_budgets": [0.1]}) == [] and sweep_methods(None) == []


def test_every_preset_with_a_sweep_has_the_papers_grid_points():
    cfg = validate_pipeline_config(load("config.yaml"))  # the sweeps blocks with their defaults filled in
    for name in ("cpu", "paper"):
        specs = sweep_methods(cfg["presets"][name]["sweeps"])
        assert "topk:budget=32" in specs and "oracle:budget=32" in specs, name  # Fig. 6c's 32 keys
        assert sum("centering=false" in s for s in specs) >= 3, name  # Fig. 9a: several L
        assert sum(s.startswith("topk") for s in specs) >= 5, name  # Fig. 1 / 9b/c: several budgets
    smoke = validate_pipeline_config(load("smoke.yaml"))
    assert len(sweep_methods(smoke["presets"]["smoke"]["sweeps"])) <= 10  # smoke stays small


@pytest.mark.parametrize("key,value,expect", [
    ("topk_budgets", [1.5], "presets.smoke.sweeps.topk_budgets[0]: 1.5"),
    ("oracle_budgets", [0.1, 0.1], "presets.smoke.sweeps.oracle_budgets: [0.1, 0.1] has non-unique elements"),
    ("centering", {"K": 10, "L": [150, 100000]}, "presets.smoke.sweeps.centering.L[1]: (K, L) = (10, 100000)"),
    ("magicpig_kl", ["10x150"], "presets.smoke.sweeps.magicpig_kl[0]: '10x150' does not match"),
    ("tasks", ["cwe", "fwee"], "presets.smoke.sweeps.tasks[1]: unknown RULER task 'fwee' (did you mean 'fwe'?)"),
    ("length", 100000, "presets.smoke.sweeps.length: 100000 + "),
    ("budget", [0.1], "allowed keys:"),
])
def test_bad_sweep_settings_name_the_field(smoke, key, value, expect):
    smoke["presets"]["smoke"]["sweeps"][key] = value
    assert expect in problems(smoke)
