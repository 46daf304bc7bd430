"""Load-time validation of the pipeline config (magicpig.harness.pipeline_config): every bad setting is refused with
its config path named, before any job; the real configs pass. Also `magicpig eval --samples all`."""
import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from magicpig.harness.pipeline_config import validate_pipeline_config
from magicpig.gguf_header import gguf_facts
from magicpig.models import model_facts

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or shutil.which("snakemake")


def load(name):
    return yaml.safe_load((ROOT / "config" / name).read_text())


@pytest.fixture
def smoke():
    return load("smoke.yaml")


def problems(config, warnings=None):
    """The validator's message for ``config`` (fails the test if it is accepted)."""
    with pytest.raises(ValueError) as info:
        validate_pipeline_config(config, warn=(warnings or []).append)
    return str(info.value)


@pytest.mark.parametrize("file,preset", [("config.yaml", "cpu"), ("config.yaml", "paper"), ("smoke.yaml", "smoke"),
                                         ("config.yaml", "paper-long"), ("config.yaml", "paper-long-prolong"),
                                         ("config.yaml", "paper-70b")])
def test_real_configs_pass(file, preset):
    cfg = load(file)
    cfg["preset"] = preset
    warnings = []
    validate_pipeline_config(cfg, warn=warnings.append)
    if preset.startswith("paper"):  # a hub id not in the local cache: accepted, with a warning naming the field
        assert warnings and all(f"presets.{preset}.model" in w for w in warnings)
    else:
        assert warnings == []


@pytest.mark.parametrize("block,spec,expect", [
    ("ruler", "magicpig:K=10,L=150,X=1", "has no field 'X'"),
    ("longbench", "fast", "unknown attention method 'fast'; known methods:"),
    ("gsm8k", "quest:ratio=2", "'ratio' must be in (0, 1]"),
    ("ablations", "magicpig:K=abc", "field 'K' expects int"),
])
def test_bad_method_spec_names_the_field(smoke, block, spec, expect):
    key = "kl_grid" if block == "ablations" else "methods"
    smoke["presets"]["smoke"][block][key] = ["dense", spec]
    msg = problems(smoke)
    assert f"presets.smoke.{block}.{key}[1]: " in msg and expect in msg


@pytest.mark.parametrize("methods,dup", [
    (["dense", "magicpig", "magicpig:K=10,L=150"], "presets.smoke.ruler.methods[2]: 'magicpig:K=10,L=150' is the same "
                                                   "method as presets.smoke.ruler.methods[1] 'magicpig'"),
    (["quest:ratio=0.04", "quest:page_size=16"], "presets.smoke.ruler.methods[1]"),
    (["dense", "dense"], "presets.smoke.ruler.methods[1]"),
])
def test_duplicate_or_equivalent_methods_are_refused(smoke, methods, dup):
    smoke["presets"]["smoke"]["ruler"]["methods"] = methods
    msg = problems(smoke)
    assert dup in msg and "list each setting once" in msg


def test_decode_bench_backend_suffix(smoke):
    p = smoke["presets"]["smoke"]
    p["decode_bench"]["methods"] = ["dense@reference", "magicpig@offload", "magicpig@reference"]
    validate_pipeline_config(smoke)  # same method on two backends is two measurements
    p["decode_bench"]["methods"] = ["dense@gpu"]
    msg = problems(smoke)
    assert "presets.smoke.decode_bench.methods[0]" in msg and "stock, llamacpp, reference, offload" in msg
    p["decode_bench"]["methods"] = ["dense@llamacpp", "quest@llamacpp"]
    msg = problems(smoke)
    assert "methods[1]: backend 'llamacpp' (stock transformers or llama.cpp) runs 'dense' only" in msg
    assert "methods[0]" not in msg


@pytest.mark.parametrize("block", ["ruler", "ablations"])
def test_unknown_task_names_the_field_and_the_tasks(smoke, block):
    smoke["presets"]["smoke"][block]["tasks"] = ["niah_single_1", "niah_singel_2"]
    msg = problems(smoke)
    assert f"presets.smoke.{block}.tasks[1]: unknown RULER task 'niah_singel_2'" in msg
    assert "did you mean 'niah_single_2'" in msg and "qa_2" in msg


def test_task_samples_name_tasks_of_the_block_and_counts_in_range(smoke):
    ruler = smoke["presets"]["smoke"]["ruler"]
    ruler["task_samples"] = {"vt": 4, "fwe": 9}
    msg = problems(smoke)
    assert "presets.smoke.ruler.task_samples.fwe: 'fwe' is not one of presets.smoke.ruler.tasks" in msg
    assert "task_samples.vt" not in msg
    ruler["task_samples"] = {"vt": -1}
    assert "presets.smoke.ruler.task_samples" in problems(smoke)


def test_ruler_task_samples_override_the_blocks_count():
    from magicpig.harness.pipeline_config import ruler_task_samples

    ruler = {"tasks": ["niah_single_1", "fwe", "vt"], "samples": 80, "task_samples": {"fwe": 200, "vt": 0}}
    assert ruler_task_samples(ruler) == {"niah_single_1": 80, "fwe": 200, "vt": 0}
    assert ruler_task_samples({"tasks": ["vt"], "samples": 3}) == {"vt": 3}


def test_unknown_longbench_task_lists_the_allowed(smoke):
    smoke["presets"]["smoke"]["longbench"]["tasks"] = ["narrativeqa"]
    msg = problems(smoke)
    assert "presets.smoke.longbench.tasks[0]" in msg and "triviaqa" in msg


@pytest.mark.parametrize("kl,expect", [("17,150", "K must be an integer in [1, 16]"), ("10,0", "L must be a positive"),
                                       ("16,600", "at most 8192 hash bits")])
def test_kernel_bench_kl_out_of_range(smoke, kl, expect):
    smoke["presets"]["smoke"]["kernel_bench"]["kl"] = ["10,150", kl]
    msg = problems(smoke)
    assert f"presets.smoke.kernel_bench.kl[1]: '{kl}'" in msg and expect in msg


@pytest.mark.parametrize("model,expect", [("/nonexistent/llama", "neither 'smollm2'"),
                                          ("/nonexistent/model.gguf", "does not exist")])
def test_missing_model(smoke, model, expect):
    smoke["presets"]["smoke"]["model"] = model
    msg = problems(smoke)
    assert "presets.smoke.model: " in msg and expect in msg


def test_only_the_selected_presets_model_must_exist(smoke):
    other = copy.deepcopy(smoke["presets"]["smoke"])
    other["model"] = "/elsewhere/weights"  # another machine's path
    smoke["presets"]["gpu_box"] = other
    validate_pipeline_config(smoke)
    other["ruler"]["methods"] = ["nope"]  # but its method lists are checked
    assert "presets.gpu_box.ruler.methods[0]" in problems(smoke)


@pytest.mark.parametrize("field,value,where,allowed", [
    (("ruler", "lengths"), [1024, 16384], "presets.smoke.ruler.lengths[1]: 16384 + 128 answer tokens", 8064),
    (("longbench", "max_length"), 8192, "presets.smoke.longbench.max_length: 8192", None),
    (("gsm8k", "max_length"), 8000, "presets.smoke.gsm8k.max_length: 8000 + 256 answer tokens", 7936),
    (("estimation", "length"), 9000, "presets.smoke.estimation.length: 9000 is beyond", 8192),
])
def test_lengths_beyond_the_models_context(smoke, field, value, where, allowed):
    p = smoke["presets"]["smoke"]
    p["longbench"].update(tasks=["trec"], samples=1)
    p["gsm8k"]["samples"] = "all"
    p[field[0]][field[1]] = value
    msg = problems(smoke)
    assert where in msg and "context of 'smollm2' (8192 tokens" in msg
    if allowed:
        assert f"allowed: at most {allowed}" in msg


def test_empty_lengths_are_refused(smoke):
    smoke["presets"]["smoke"]["ruler"]["lengths"] = []  # the first is also the ablations' default length
    assert "presets.smoke.ruler.lengths: [] should be non-empty" in problems(smoke)


def test_misspelled_keys_are_refused(smoke):
    smoke["sead"] = 1
    smoke["presets"]["smoke"]["ruler"]["lenghts"] = [1024]
    msg = problems(smoke)
    assert "(top level): Additional properties are not allowed ('sead' was unexpected)" in msg
    assert "did you mean 'sead' -> 'seed'?" in msg and "allowed keys: data, methods_module, overwrite, preset, presets, seed" in msg
    assert "presets.smoke.ruler: Additional properties are not allowed ('lenghts' was unexpected)" in msg


def test_every_problem_is_listed_at_once(smoke):
    p = smoke["presets"]["smoke"]
    p["ruler"]["tasks"] = ["nope"]
    p["kernel_bench"]["kl"] = ["20,10"]
    p["ruler"]["lengths"] = [65536]
    msg = problems(smoke)
    assert msg.startswith("config: 3 problem(s):")


def test_unknown_preset(smoke):
    smoke["preset"] = "nope"
    assert "preset 'nope' is not one of ['smoke']" in problems(smoke)


@pytest.mark.parametrize("block,ok", [("longbench", True), ("gsm8k", True), ("ruler", False)])
def test_samples_all_only_for_record_tasks(smoke, block, ok):
    smoke["presets"]["smoke"][block]["samples"] = "all"
    if ok:
        validate_pipeline_config(smoke)
    else:
        msg = problems(smoke)
        assert "presets.smoke.ruler.samples: 'all' is not of type 'integer'" in msg


def test_bad_sample_count_lists_the_allowed(smoke):
    smoke["presets"]["smoke"]["longbench"]["samples"] = "every"
    msg = problems(smoke)
    assert "presets.smoke.longbench.samples" in msg and "allowed: integer >= 0 or 'all'" in msg


def test_chat_template_is_schema_checked(smoke):
    smoke["presets"]["smoke"]["chat_template"] = "meta-chat-3"
    validate_pipeline_config(smoke)
    smoke["presets"]["smoke"]["chat_template"] = "llama3"
    msg = problems(smoke)
    assert "presets.smoke.chat_template: 'llama3' is not one of ['tokenizer', 'meta-chat-3', 'none']" in msg


def test_model_context_sources(tmp_path, monkeypatch):
    from magicpig.models import embedded_gguf_path

    assert model_facts("smollm2")[0]["context"] == 8192  # the embedded GGUF's own metadata
    assert gguf_facts(embedded_gguf_path())["context"] == 8192
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    assert model_facts(str(folder))[0]["context"] == 2048
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"ABCD" + bytes(64))
    with pytest.raises(ValueError):
        model_facts(str(not_gguf))
    # a hub id: the cached config.json when there is one, else unknown (a warning, not an error)
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda repo, name: None)
    facts, why = model_facts("someone/some-model")
    assert facts is None and "not in the local Hugging Face cache" in why
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda repo, name: str(folder / "config.json"))
    assert model_facts("someone/some-model")[0]["context"] == 2048


def test_local_folder_context_limits_lengths(smoke, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    smoke["presets"]["smoke"]["model"] = str(folder)
    smoke["presets"]["smoke"]["estimation"]["length"] = 1024
    smoke["presets"]["smoke"]["longbench"]["max_length"] = 1024
    validate_pipeline_config(smoke)  # 1024 + 128 fits 2048; GSM8K (4096) does not run in this preset
    smoke["presets"]["smoke"]["gsm8k"]["samples"] = 5
    assert "presets.smoke.gsm8k.max_length: 4096 + 256 answer tokens" in problems(smoke)
    smoke["presets"]["smoke"]["gsm8k"]["samples"] = 0
    smoke["presets"]["smoke"]["ruler"]["lengths"] = [1024, 2048]
    assert "presets.smoke.ruler.lengths[1]: 2048 + 128 answer tokens" in problems(smoke)


def test_snakemake_refuses_a_bad_config_at_load_time():
    """`snakemake -n` stops while loading the Snakefile, naming the field."""
    r = subprocess.run([SNAKEMAKE, "-n", "--cores", "1", "--config",
                        'presets={"cpu": {"longbench": {"methods": ["magicpig", "magicpig:K=10,L=150"]}}}'],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "presets.cpu.longbench.methods[1]: 'magicpig:K=10,L=150' is the same method" in out
    assert "Job stats" not in out  # refused before any job was planned


# ---- magicpig eval --samples all -------------------------------------------------------------------------

def test_eval_cli_parses_samples_all():
    from magicpig.harness.cli import build_parser

    parser = build_parser()
    base = ["eval", "--task", "gsm8k", "--length", "4096", "--out", "x"]
    assert parser.parse_args(base + ["--samples", "all"]).samples is None
    assert parser.parse_args(base + ["--samples", "7"]).samples == 7
    with pytest.raises(SystemExit):
        parser.parse_args(base + ["--samples", "every"])


def test_samples_all_is_refused_for_generated_tasks(tmp_path):
    from magicpig.harness.evaluate import EvalConfig

    cfg = EvalConfig(model="smollm2", methods=["dense"], tasks=["gsm8k", "ruler/cwe"], lengths=[4096], samples=None,
                     out=tmp_path)
    with pytest.raises(ValueError, match=r"samples: 'all' needs tasks with a fixed set of records.*ruler/cwe"):
        cfg.check()


class FakeEngine:
    """Answers 'x' at once: enough to see which samples the runner builds."""

    max_context = 0

    def prefill(self, ids):
        return SimpleNamespace(seconds=0.0)

    def decode(self, pre, method, config, continuation_ids=None):
        return [SimpleNamespace(text="x", cost=1.0, cost1=0.0, new_tokens=1, seconds=0.0, stop_reason="stop")]


def test_samples_all_runs_every_record(tmp_path):
    from magicpig.harness.evaluate import EvalConfig, run_eval
    from magicpig.models import load_tokenizer

    data = ROOT / "tests" / "fixtures" / "gsm8k_test_tiny.jsonl"
    n_records = len(data.read_text().splitlines())
    cfg = EvalConfig(model="smollm2", methods=["dense"], tasks=["gsm8k"], lengths=[4096], samples=None,
                     out=tmp_path, data={"gsm8k": str(data)}, progress=False)
    [m] = run_eval(cfg, model=object(), tokenizer=load_tokenizer("smollm2"),
                   engine_factory=lambda model, tok: FakeEngine(), log=lambda msg: None)
    assert m["status"] == "ok" and m["counts"]["samples"] == n_records == 3
    assert m["samples_requested"] == "all"


def test_gguf_context_after_arrays(tmp_path):
    """The header reader skips arrays of strings and numbers before the context key."""
    import gguf

    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_token_list(["a", "bb", "ccc"])
    w.add_token_scores([0.0, 1.0, 2.0])
    w.add_context_length(4096)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    assert gguf_facts(path)["context"] == 4096
    path.write_bytes(path.read_bytes()[:40])  # cut inside the header
    with pytest.raises(ValueError, match="header ends"):
        gguf_facts(path)


def test_decode_bench_shapes_need_a_stored_shape_and_valid_methods(smoke):
    smoke["presets"]["smoke"]["decode_bench"]["shapes"] = [
        {"model": "shape:codellama-13b", "lengths": [1024]},
        {"model": "shape:no-such-model", "lengths": [1024], "methods": ["magicpig:K=99"]}]
    msg = problems(smoke)
    assert "presets.smoke.decode_bench.shapes[1].model: 'shape:no-such-model' has no stored shape" in msg
    assert "presets.smoke.decode_bench.shapes[1].methods[0]" in msg
    assert "shapes[0]" not in msg
    smoke["presets"]["smoke"]["decode_bench"]["shapes"] = [{"model": "codellama-13b", "lengths": [1024]}]
    assert "shapes[0].model" in problems(smoke)  # the schema asks for the shape: prefix


def test_optional_benchmark_blocks_are_checked(smoke):
    """The `lm_eval` (Table 1's CoQA / MMLU-CoT) and `reasoning` (Table 6) blocks: schema (task names), method
    specs and the prompt cap against the model's context, each by its config path; absent: nothing to check."""
    p = smoke["presets"]["smoke"]
    validate_pipeline_config(smoke)
    p["lm_eval"] = {"tasks": ["coqa", "gsm8k"], "samples": 2, "methods": ["dense"]}
    assert "presets.smoke.lm_eval.tasks[1]: 'gsm8k' is not one of ['coqa', 'mmlu_cot']" in problems(smoke)
    p["lm_eval"] = {"tasks": ["coqa", "mmlu_cot"], "samples": 2, "max_length": 8000,
                    "methods": ["dense", "quest:ratio=2"]}
    p["reasoning"] = {"tasks": ["4k_close_op2"], "samples": "all", "methods": ["dense", "dense"]}
    msg = problems(smoke)
    assert "presets.smoke.lm_eval.methods[1]: " in msg and "'ratio' must be in (0, 1]" in msg
    assert "presets.smoke.reasoning.methods[1]: 'dense' is the same method as" in msg
    p["lm_eval"]["methods"] = ["dense"]
    p["reasoning"]["methods"] = ["dense"]
    msg = problems(smoke)
    assert "presets.smoke.lm_eval.max_length: 8000 + 256 answer tokens is beyond" in msg
    assert "presets.smoke.reasoning.max_length: 16384 + 1024 answer tokens is beyond" in msg  # the default cap
    p["reasoning"]["max_length"] = 7168
    p["lm_eval"]["samples"] = 0  # not run: its cap is not checked
    validate_pipeline_config(smoke)


# ---- defaults, filled in once ---------------------------------------------------------------------------

def test_defaults_are_filled_in_from_the_schema_and_the_fields_they_follow():
    """validate_pipeline_config returns a copy with every default: the schema's (the values it lists) and the ones
    that follow other fields (ablations and sweeps at ruler.lengths[0] with ruler.samples, the centering
    ablation at the ablations' samples, a shape's methods = the block's). What the config sets is kept, an
    optional block stays absent, and the config given is not changed."""
    from magicpig.harness.pipeline_config import load_schema

    cfg = load("config.yaml")
    given = copy.deepcopy(cfg)
    cpu_long = cfg["presets"]["cpu-long"]
    cpu_long["decode_bench"]["shapes"] = [{"model": "shape:codellama-13b", "lengths": [1024]}]
    filled = validate_pipeline_config(cfg)
    cfg["presets"]["cpu-long"]["decode_bench"].pop("shapes")
    assert cfg == given
    schema = load_schema()
    block = lambda name: schema["properties"]["presets"]["additionalProperties"]["properties"][name]["properties"]  # noqa: E731
    assert filled["data"] == {} and filled["methods_module"] == [] and filled["overwrite"] is False
    cpu, paper = filled["presets"]["cpu"], filled["presets"]["paper"]
    assert cpu["decode_bench"]["shapes"] == block("decode_bench")["shapes"]["default"] == []
    assert paper["longbench"]["max_length"] == given["presets"]["paper"]["longbench"]["max_length"]  # set: kept
    for name in ("cpu", "cpu-long", "paper-70b"):
        p, raw = filled["presets"][name], given["presets"][name]
        assert p["estimation"]["inputs"] == raw["estimation"].get("inputs", block("estimation")["inputs"]["default"])
        assert p["gsm8k"]["max_length"] == raw["gsm8k"].get("max_length", block("gsm8k")["max_length"]["default"])
    assert cpu["ablations"]["length"] == cpu["sweeps"]["length"] == cpu["ruler"]["lengths"][0]
    paper = filled["presets"]["paper"]  # leaves the ablations' sample counts out: they follow ruler.samples
    assert paper["ablations"]["samples"] == paper["ablations"]["centering_samples"] == paper["ruler"]["samples"]
    assert (cpu["ablations"]["samples"], cpu["ablations"]["centering_samples"], cpu["sweeps"]["samples"]) == (
        5, 40, 3)  # the preset's own values
    long = filled["presets"]["cpu-long"]
    assert (long["ablations"]["length"], long["ablations"]["samples"], long["ablations"]["centering_samples"]) == (
        4096, 6, 36)  # the preset's own values
    assert "sweeps" not in long and "lm_eval" not in long and "device" not in cpu  # optional: absent stays absent
    assert long["decode_bench"]["shapes"][0]["methods"] == long["decode_bench"]["methods"]


def test_schema_ships_with_the_package_and_is_found_without_the_checkout(tmp_path):
    """The schema is package data (pyproject's package-data globs cover it), read through importlib.resources: a
    copy of the packages alone, as a non-editable install has them, validates a config; without the file the
    error names it."""
    import fnmatch
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["magicpig"]
    assert any(fnmatch.fnmatch("data/pipeline_config.schema.yaml", g) for g in globs)
    site = tmp_path / "site"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "magicpig", site / "magicpig", ignore=ignore)
    shutil.copytree(ROOT / "tasks", site / "magicpig_tasks", ignore=ignore)
    code = ("import json, sys; from magicpig.harness.pipeline_config import validate_pipeline_config; "
            "print(validate_pipeline_config(json.load(sys.stdin))['seed'])")
    run = lambda: subprocess.run([sys.executable, "-c", code], input=json.dumps(load("smoke.yaml")),  # noqa: E731
                                 capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(site)})
    ok = run()
    assert ok.returncode == 0 and ok.stdout.strip() == "0", ok.stderr[-2000:]
    (site / "magicpig" / "data" / "pipeline_config.schema.yaml").unlink()
    missing = run()
    assert missing.returncode != 0
    assert "pipeline_config.schema.yaml is missing from the installed magicpig package" in missing.stderr
