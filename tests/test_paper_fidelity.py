"""The paper* presets run the paper's settings, table by table: models, (K, L) and budgets, lengths, tasks, samples,
local window, sinks and dense layers, held against the paper's numbers typed once in config/paper_reference.yaml
(its `settings` block and each table's rows), and against what a dry run of each preset schedules.

A drift of either side fails here: a preset that drops or adds a setting, a reference row edited without the
preset, a length or sample count that is not the paper's, a method that runs at one length but not another.
"""
from __future__ import annotations

import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from magicpig.backends import parse_spec_at_backend
from magicpig.harness.pipeline_config import ruler_methods_by_length, validate_pipeline_config
from magicpig.lsh import parse_kl
from magicpig.methods import canonical_spec, parse_method
from magicpig_tasks import paper

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
SETTINGS = paper.settings()
TABLES = SETTINGS["tables"]
PAPER_PRESETS = sorted({preset for t in TABLES.values() for preset in t["runs"]})
# Table 1's columns (lm_eval_table1.tasks) -> the preset block and task name that run them
TABLE1_TASKS = {"gsm8k_cot": ("gsm8k", "gsm8k"), "coqa": ("lm_eval", "coqa"), "mmlu_cot": ("lm_eval", "mmlu_cot")}
# the architecture (a key of magicpig/data/model_shapes.yaml) of each paper model, for its layer count
ARCHITECTURES = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
                 "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
                 "aws-prototyping/MegaBeam-Mistral-7B-512k": "mistral-7b",
                 "princeton-nlp/Llama-3-8B-ProLong-512k-Instruct": "llama-3.1-8b",
                 "meta-llama/Llama-2-7b-chat-hf": "llama-3.1-8b", "codellama/CodeLlama-13b-hf": "codellama-13b"}


@lru_cache(maxsize=1)
def presets() -> dict:
    """Every preset with its defaults filled in, as the pipeline reads it."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return validate_pipeline_config(config, warn=lambda _: None)["presets"]


def canon(specs) -> set[str]:
    return {canonical_spec(s) for s in specs}


def setting_spec(setting: str) -> str:
    """A (K, L) table's setting ("full" or "K,L") as a method spec."""
    if setting == "full":
        return "dense"
    K, L = parse_kl(setting)
    return f"magicpig:K={K},L={L}"


def rows(table: str, model: str) -> dict:
    """The paper's rows of ``table`` for ``model``: method spec -> values."""
    return paper.table_section(table)[model]


def runs_of(table: str):
    return [pytest.param(table, preset, model, id=f"{table}-{preset}")
            for preset, model in TABLES[table]["runs"].items()]


def sparse(specs):
    """The paper's sparse methods of ``specs`` (MagicPIG and Quest; the TopK / oracle / StreamingLLM baselines
    beside them are not the paper's rows)."""
    return [m for m in map(parse_method, specs) if m.name in ("magicpig", "quest")]


def test_every_table_is_run_by_a_preset_of_its_model():
    ref = paper.load()
    assert set(TABLES) == {f"table{i}" for i in (1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13)}
    for table, entry in TABLES.items():
        for preset, model in entry["runs"].items():
            assert preset in presets(), (table, preset)
            assert ref["paper_models"][presets()[preset]["model"]] == model, (table, preset)
            assert presets()[preset].get("device") == "cuda", preset


@pytest.mark.parametrize("table,preset,model", runs_of("table1"))
def test_table1_lm_eval(table, preset, model):
    p, section = presets()[preset], paper.table_section(table)
    assert [TABLE1_TASKS[c][1] for c in section["tasks"] if TABLE1_TASKS[c][0] == "lm_eval"] == p["lm_eval"]["tasks"]
    for block in ("gsm8k", "lm_eval"):
        assert canon(p[block]["methods"]) == canon(rows(table, model)), (block, preset)
        assert p[block]["samples"] == TABLES[table]["samples"]
        window = SETTINGS["local_window"][TABLES[table]["window"]]
        assert {m.local for m in sparse(p[block]["methods"])} == {window}  # MagicPIG and Quest alike
    assert set(section["costs"][model]) == set(rows(table, model))


@pytest.mark.parametrize("table,preset,model", runs_of("table2"))
def test_table2_longbench(table, preset, model):
    p, section = presets()[preset], paper.table_section(table)
    values = rows(table, model)
    columns = [t for i, t in enumerate(section["tasks"]) if t != "average"
               and any(v[i] is not None for v in values.values())]
    assert p["longbench"]["tasks"] == columns
    assert canon(p["longbench"]["methods"]) == canon(values)
    assert p["longbench"]["samples"] == TABLES[table]["samples"]
    assert {m.local for m in sparse(p["longbench"]["methods"])} == {SETTINGS["local_window"]["longbench"]}
    assert set(section["costs"][model]) == set(values)


@pytest.mark.parametrize("table,preset,model", runs_of("table3") + runs_of("table4") + runs_of("table5"))
def test_ruler_tables_every_setting_at_every_length(table, preset, model):
    """Tables 3-5: the 13 tasks, 50 samples each, every row of the model at every length of the table."""
    p, section = presets()[preset], paper.table_section(table)
    assert p["ruler"]["tasks"] == SETTINGS["ruler"]["tasks"]
    assert p["ruler"]["samples"] == SETTINGS["ruler"]["samples"] == TABLES[table]["samples"]
    by_length = ruler_methods_by_length(p["ruler"])
    for n in section["lengths"]:
        assert canon(rows(table, model)) <= canon(by_length[n]), (preset, n)
    for specs in by_length.values():
        assert {m.local for m in sparse(specs)} == {SETTINGS["local_window"]["ruler"]}
        assert {m.sinks for m in sparse(specs) if m.name == "magicpig"} == {SETTINGS["sinks"]}


@pytest.mark.parametrize("table,preset,model", runs_of("table10") + runs_of("table11") + runs_of("table12")
                         + runs_of("table13"))
def test_kl_tables_average_all_13_tasks_at_their_lengths(table, preset, model):
    """Tables 10-13: each (K, L) setting (and full) on all 13 RULER tasks, 50 samples, at the table's lengths."""
    p, section = presets()[preset], paper.table_section(table)
    settings = section["settings"] if "settings" in section else list(section["rows"])
    lengths = section.get("lengths") or [section["length"]]
    assert p["ruler"]["tasks"] == SETTINGS["ruler"]["tasks"] and p["ruler"]["samples"] == TABLES[table]["samples"]
    by_length = ruler_methods_by_length(p["ruler"])
    for n in lengths:
        assert n in by_length, (preset, n)
        assert canon(setting_spec(s) for s in settings) <= canon(by_length[n]), (preset, n)


def test_table10_runs_11_300_only_where_the_paper_reports_it():
    """(11,300) is a Table 10 setting, at its lengths (and 96K, which its 128K column matches), in no RULER list."""
    p = presets()["paper-long"]["ruler"]
    assert canonical_spec("magicpig:K=11,L=300") not in canon(p["methods"])
    at = [n for n, specs in ruler_methods_by_length(p).items() if canonical_spec("magicpig:K=11,L=300") in canon(specs)]
    lengths = paper.table_section("table10")["lengths"]
    assert set(lengths) <= set(at) <= set(lengths) | {98304}


@pytest.mark.parametrize("table,preset,model", runs_of("table6"))
def test_table6_reasoning(table, preset, model):
    p, section = presets()[preset], paper.table_section(table)
    assert p["reasoning"]["tasks"] == [f"{s}_op{n}" for s in section["sets"] for n in section["ops"]]
    for s in section["sets"]:
        assert canon(p["reasoning"]["methods"]) == canon(section[model][s])
    assert p["reasoning"]["samples"] == TABLES[table]["samples"]


@pytest.mark.parametrize("table,preset,model", runs_of("table7"))
def test_table7_benchmarks_its_six_settings(table, preset, model):
    """Table 7's six (K, L) at its context, and no other MagicPIG setting (the old list had (8,90), not (11,300))."""
    db, section = presets()[preset]["decode_bench"], paper.table_section(table)
    ours = {canonical_spec(m) for m in db["methods"] if parse_method(parse_spec_at_backend(m).spec).name == "magicpig"}
    assert ours == canon(section["rows"])
    assert section["context"] in db["lengths"] and db["max_throughput"] and 1 in db["batches"]
    assert (db["steps"], db["warmup"]) == (128, 32)  # the paper's protocol (PAPER.md: 32 warm-up, 128 timed)


@pytest.mark.parametrize("preset", PAPER_PRESETS)
def test_dense_layers_are_the_papers(preset):
    """MagicPIG's dense layers on each preset's model: layer-{0, 16} of 32 layers, {0,16,32,48} of 80."""
    shapes = yaml.safe_load((ROOT / "magicpig" / "data" / "model_shapes.yaml").read_text())
    p = presets()[preset]
    layers = shapes[ARCHITECTURES[p["model"]]]["num_layers"]
    specs = list(p["ruler"]["methods"]) + [m for e in p["ruler"]["length_methods"] for m in e["methods"]]
    specs += [m for b in ("longbench", "gsm8k", "lm_eval", "reasoning") if b in p for m in p[b]["methods"]]
    magicpig = [m for m in sparse(specs) if m.name == "magicpig"]
    expected = SETTINGS["dense_layers"].get(layers)
    if expected is None:  # a layer count the paper states no rule for (CodeLlama-13B: 40): the original's rule
        assert layers == 40 and all(m.dense_layer_set(layers) == {0, 16, 32} for m in magicpig)
    else:
        assert magicpig and all(m.dense_layer_set(layers) == set(expected) for m in magicpig)


# ---- what a dry run schedules ------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def scheduled(preset: str) -> tuple[set, set]:
    """({(task, length, canonical method, samples)} of the `magicpig eval` accuracy jobs, {(context, canonical
    method)} of `bench decode`) that `snakemake -n -p --config preset=<preset>` would run."""
    r = subprocess.run([SNAKEMAKE, "-n", "-p", "--forceall", "--cores", "2", "--config", f"preset={preset}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    evals, decode = set(), set()
    for line in r.stdout.splitlines():
        words = shlex.split(line.split(">", 1)[0]) if " -m magicpig " in line else []
        words = [part for w in words for part in (w.split("=", 1) if w.startswith("--") and "=" in w else [w])]
        opts = {}
        for flag, value in zip(words, words[1:]):
            opts.setdefault(flag, []).append(value)
        if "eval" in words and opts.get("--out", [""])[0].endswith("/accuracy"):
            evals |= {(t, int(n), canonical_spec(m), opts["--samples"][0]) for t in opts["--task"]
                      for n in opts["--length"] for m in opts["--method"]}
        if "bench" in words and "decode" in words and "--model" in opts and not opts["--model"][0].startswith("shape:"):
            decode |= {(int(n), canonical_spec(m)) for n in opts["--context"]
                       for m in opts["--method"] if not parse_spec_at_backend(m).backend}
    return evals, decode


def expected_jobs(table: str, model: str) -> set:
    """(task, length or None, canonical method, samples) the paper's ``table`` needs for ``model``."""
    section, samples = paper.table_section(table), str(TABLES[table].get("samples", ""))
    ruler = [f"ruler/{t}" for t in SETTINGS["ruler"]["tasks"]]
    if table == "table1":
        tasks = [TABLE1_TASKS[c][1] for c in section["tasks"]]
        return {(t, None, canonical_spec(m), samples) for t in tasks for m in section[model]}
    if table == "table2":
        values = section[model]
        tasks = [t for i, t in enumerate(section["tasks"]) if t != "average"
                 and any(v[i] is not None for v in values.values())]
        return {(f"longbench/{t}", None, canonical_spec(m), samples) for t in tasks for m in values}
    if table in ("table3", "table4", "table5"):
        return {(t, n, canonical_spec(m), samples) for t in ruler for n in section["lengths"] for m in section[model]}
    settings = section["settings"] if "settings" in section else list(section["rows"])
    lengths = section.get("lengths") or [section["length"]]
    return {(t, n, canonical_spec(setting_spec(s)), samples) for t in ruler for n in lengths for s in settings}


@pytest.mark.parametrize("preset", PAPER_PRESETS)
def test_dry_run_schedules_every_setting_of_its_tables(preset):
    evals, decode = scheduled(preset)
    lengthless = {(t, m, s) for t, _, m, s in evals}
    checked = 0
    for table, entry in TABLES.items():
        model = entry["runs"].get(preset)
        if model is None:
            continue
        if table == "table7":
            section = paper.table_section(table)
            assert {(section["context"], canonical_spec(m)) for m in section["rows"]} <= decode
        elif table == "table6":
            section = paper.table_section(table)
            want = {(f"infini_igsm/{s}_op{n}", canonical_spec(m), "all") for s in section["sets"]
                    for n in section["ops"] for m in section[model][s]}
            assert want <= lengthless
        else:
            want = expected_jobs(table, model)
            missing = sorted(w for w in want if (w if w[1] is not None else (w[0], w[2], w[3])) not in
                             (evals if w[1] is not None else lengthless))
            assert not missing, (table, missing[:5], len(missing))
        checked += 1
    assert checked  # every paper* preset runs at least one table


def test_dry_run_runs_no_ruler_setting_twice_and_no_ablation_setting_at_other_lengths():
    """The paper preset's per-length settings run at their length only: (10,135) at 64K, (7,35) at 16K."""
    evals, _ = scheduled("paper")
    at = {}
    for task, n, method, _ in evals:
        if task == "ruler/cwe":
            at.setdefault(method, set()).add(n)
    assert at[canonical_spec("magicpig:K=10,L=135")] == {65536}
    assert at[canonical_spec("magicpig:K=7,L=35")] == {16384}
    assert at[canonical_spec("magicpig:K=10,L=150")] == {16384, 32768, 65536, 98304}


def test_length_methods_are_checked_by_config_path():
    """A length_methods entry at a length RULER does not run, or repeating a setting of `methods`, is refused."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    ruler = config["presets"]["paper"]["ruler"]
    ruler["length_methods"] = [{"lengths": [12345], "methods": ["magicpig:K=10,L=240"]},
                               {"lengths": [16384], "methods": ["magicpig:L=150,K=10", "magicpig:K=99,L=1"]}]
    with pytest.raises(ValueError) as err:
        validate_pipeline_config(config, warn=lambda _: None)
    text = str(err.value)
    assert "presets.paper.ruler.length_methods[0].lengths[0]: 12345 is not one of presets.paper.ruler.lengths" in text
    assert "presets.paper.ruler.length_methods[1].methods[1]" in text
    ruler["length_methods"] = [{"lengths": [16384], "methods": ["magicpig:L=150,K=10"]}]
    with pytest.raises(ValueError, match=r"length_methods\[0\]\.methods\[0\]: 'magicpig:L=150,K=10' is already run "
                                         r"at 16384 by presets\.paper\.ruler\.methods"):
        validate_pipeline_config(config, warn=lambda _: None)
