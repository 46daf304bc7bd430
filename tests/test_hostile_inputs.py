"""Hostile inputs that must never run code, write outside results/ or pull a file into the report: names that
become paths or reach a shell (the name grammar of magicpig.names, in the schema and the config check), every
shell line of the pipeline quoted, capture files read without pickle, and the HTML report embedding only the
image files of its own folder."""
from __future__ import annotations

import copy
import dataclasses
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from magicpig.harness.pipeline_config import load_schema, validate_pipeline_config
from magicpig.harness.report.html import render_html
from magicpig.names import NAME_PATTERN, TASK_NAME_PATTERN, name_problem, task_name_problem

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or shutil.which("snakemake")
HOSTILE_NAMES = ["x$(touch /tmp/magicpig-hostile)", "x`id`", "a;b", "a'b", 'a"b', "a b", "../../tmp/elsewhere",
                 "/abs", "", ".", "..", ".hidden", "-rf", "--help", "a/b", "a\nb", "é", "x" * 201]


def smoke_config() -> dict:
    return yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())


def problems_of(config: dict) -> str:
    with pytest.raises(ValueError) as info:
        validate_pipeline_config(config, warn=lambda m: None)
    return str(info.value)


# ---- 1. the name grammar ---------------------------------------------------------------------------------

def test_the_schema_and_the_config_check_hold_one_grammar():
    defs = load_schema()["$defs"]
    assert defs["name"]["pattern"] == NAME_PATTERN and defs["task_name"]["pattern"] == TASK_NAME_PATTERN
    for good in ("smoke", "paper-long", "a.b_c-1", "0"):
        assert not name_problem(good) and re.fullmatch(NAME_PATTERN, good)
    for bad in HOSTILE_NAMES:
        assert name_problem(bad) and not re.fullmatch(defs["name"]["pattern"], bad) or len(bad) > 200


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_preset_name_is_refused_naming_the_field(name):
    config = smoke_config()
    config["presets"][name] = config["presets"].pop("smoke")
    config["preset"] = name
    msg = problems_of(config)
    assert "- preset: " in msg and "- presets: key " in msg, msg


def test_a_hostile_preset_is_refused_even_when_the_selected_one_is_fine():
    config = smoke_config()
    config["presets"]["x$(id)"] = copy.deepcopy(config["presets"]["smoke"])
    assert "presets: key 'x$(id)' is not a name" in problems_of(config)


@pytest.mark.parametrize("block", ["ruler", "ablations", "sweeps"])
def test_a_hostile_task_name_is_refused(block):
    config = smoke_config()
    config["presets"]["smoke"][block]["tasks"] = ["../../x"]
    assert f"presets.smoke.{block}.tasks[0]: '../../x' is not a name" in problems_of(config)


def test_a_hostile_data_key_is_refused():
    config = smoke_config()
    config["data"] = {"../gsm8k": "x.jsonl"}
    assert "data: key '../gsm8k' is not a task name" in problems_of(config)


@pytest.mark.parametrize("block,key,value,pattern", [
    ("estimation", "target_cost", float("nan"), "presets.smoke.estimation.target_cost: nan is not a finite number"),
    ("sweeps", "topk_budgets", [float("inf")], "presets.smoke.sweeps.topk_budgets[0]: inf is not a finite number"),
    ("estimation", "prompts", 10**9, "presets.smoke.estimation.prompts: 1000000000 is greater than the maximum"),
    ("decode_bench", "steps", 10**12, "presets.smoke.decode_bench.steps: 1000000000000 is greater than the maximum"),
    ("decode_bench", "batches", [10**12], "presets.smoke.decode_bench.batches[0]: 1000000000000 is greater"),
    ("kernel_bench", "n", [10**15], "presets.smoke.kernel_bench.n[0]: 1000000000000000 is greater than the maximum"),
])
def test_non_finite_and_unbounded_numbers_are_refused(block, key, value, pattern):
    """NaN passes every bound (it compares false), and a billion prompts or steps is a job that never ends."""
    config = smoke_config()
    config["presets"]["smoke"][block][key] = value
    assert pattern in problems_of(config)


def test_every_registered_task_and_method_is_a_name():
    from magicpig_tasks.registry import TASK_NAMES

    from magicpig.methods.registry import METHODS

    assert all(not task_name_problem(t) for t in TASK_NAMES)
    assert all(not name_problem(m) for m in METHODS)


def test_a_method_named_like_a_path_is_not_registered():
    from magicpig.methods.base import AttentionMethod
    from magicpig.methods.registry import METHODS, register

    @dataclasses.dataclass(kw_only=True)
    class Upward(AttentionMethod):
        name = ".."

    with pytest.raises(ValueError, match=r"method name of Upward: '\.\.' is not a name"):
        register(Upward)
    assert ".." not in METHODS


@pytest.mark.parametrize("preset", ["x$(touch {marker})", "../../../../tmp/elsewhere", "/abs", ""])
def test_snakemake_dry_run_refuses_a_hostile_preset_from_the_command_line(tmp_path, preset):
    marker = tmp_path / "ran"
    value = preset.format(marker=marker)
    r = subprocess.run([SNAKEMAKE, "-n", "--cores", "1", "--config", f"preset={value}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    # `preset=` reaches the config as None (Snakemake's reading of an empty value); a long value is quoted back cut
    # short (the marker's tmp_path is long under pytest-xdist), so its start is what the message must hold
    expected = [f"- preset: {value!r}"[:70], "is not a name"] if value else ["- preset: None is not of type 'string'"]
    out = r.stdout + r.stderr
    assert r.returncode != 0 and all(part in out for part in expected), out
    assert not marker.exists()


# ---- 1b. every shell argument built from the config is quoted ----------------------------------------------

# params whose values the helpers of workflow/rules/common.smk (or the rule itself) build with shlex.quote, item
# by item; every other placeholder of a shell line must carry :q
PREQUOTED = {"params.magicpig", "params.args", "params.grid", "params.captures", "params.preset_config",
             "params.methods_module"}


def shell_lines() -> list[tuple[str, str]]:
    """(file, text) of every rule's shell: string in workflow/rules/*.smk."""
    out = []
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        lines = smk.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() == "shell:":
                text, j = "", i + 1
                while j < len(lines) and lines[j].strip().startswith('"'):
                    text += lines[j].strip()[1:-1]
                    j += 1
                out.append((smk.name, text))
    return out


def test_every_placeholder_of_every_shell_line_is_quoted():
    lines = shell_lines()
    assert len(lines) >= 10
    for name, text in lines:
        for field in re.findall(r"\{([^{}]+)\}", text):
            assert field.endswith(":q") or field in PREQUOTED, f"{name}: {{{field}}} in {text!r} is not quoted"


def test_a_hostile_data_path_reaches_the_command_as_one_argument(tmp_path):
    data = tmp_path / "a b$(touch x);`id`'q\".jsonl"
    data.write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    config = smoke_config()
    config["presets"]["smoke"]["gsm8k"]["samples"] = 1
    config["data"] = {"gsm8k": str(data)}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(config))
    r = subprocess.run([SNAKEMAKE, "eval_gsm8k", "-n", "-p", "--forceall", "--cores", "1", "--configfile",
                        str(cfg)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    command = next(line for line in r.stdout.splitlines() if " eval " in line and "--task gsm8k" in line)
    argv = shlex.split(command)
    assert f"gsm8k={data}" in argv and argv[argv.index(f"gsm8k={data}") - 1] == "--data"
    assert "--model=smollm2" in argv  # a model value can never be read as an option of its own


def test_a_data_path_with_braces_is_refused_by_the_config_check(tmp_path):
    config = smoke_config()
    config["data"] = {"gsm8k": str(tmp_path / "g{x}.jsonl")}
    assert "data.gsm8k: " in problems_of(config) and "wildcard" in problems_of(config)


# ---- 2. captures: tensors and a JSON header, never a pickle ---------------------------------------------------

def small_capture():
    from magicpig_tasks.experiments.capture import Capture

    g = torch.Generator().manual_seed(0)
    return Capture(queries=torch.randn(1, 2, 2, 8, generator=g), keys=torch.randn(1, 1, 20, 8, generator=g),
                   values=torch.randn(1, 1, 20, 8, generator=g), query_positions=torch.tensor([18, 19]), layers=[0],
                   n_prompt=19, num_layers=2, scale=0.35, meta={"model": "m", "note": "ü"})


def test_a_capture_round_trips_without_pickle(tmp_path):
    from magicpig_tasks.experiments.capture import Capture

    cap = small_capture()
    path = cap.save(tmp_path / "c.safetensors")
    assert path.read_bytes()[:1] != b"\x80" and path.read_bytes()[:2] != b"PK"
    back = Capture.load(path)
    assert torch.equal(back.keys, cap.keys) and back.layers == [0] and back.meta == cap.meta and back.scale == 0.35


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("zipped", [True, False])
def test_a_pickle_capture_is_refused_without_running_it(tmp_path, capsys, zipped):
    from magicpig.harness.cli import main

    marker = tmp_path / "ran"
    bad = tmp_path / "old.pt"
    torch.save({"format": 1, "x": _Payload(marker)}, bad, _use_new_zipfile_serialization=zipped)
    for argv in (["estimate", "error", "--capture", str(bad), "--out-dir", str(tmp_path)],
                 ["tune-kl", "--target-cost", "0.02", "--capture", str(bad), "--out-dir", str(tmp_path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "pickle-based capture of an older magicpig" in err and "magicpig estimate capture" in err, err
    assert not marker.exists()


def _tamper(tmp_path, *, header=None, tensors=None) -> Path:
    from safetensors.torch import save_file

    from magicpig_tasks.experiments.capture import HEADER_KEY

    cap = small_capture()
    base = {"queries": cap.queries, "keys": cap.keys, "values": cap.values, "query_positions": cap.query_positions}
    head = {"format": 2, "layers": [0], "n_prompt": 19, "num_layers": 2, "scale": 0.35, "meta": {}}
    path = tmp_path / "t.safetensors"
    save_file({**base, **(tensors or {})}, str(path), metadata={HEADER_KEY: json.dumps({**head, **(header or {})})})
    return path


@pytest.mark.parametrize("header,tensors,pattern", [
    ({"layers": "0"}, None, "field 'layers'"),
    ({"layers": [5]}, None, "do not fit num_layers"),
    ({"scale": -1.0}, None, "field 'scale'"),
    ({"n_prompt": True}, None, "field 'n_prompt'"),
    ({"meta": []}, None, "field 'meta'"),
    ({"extra": 1}, None, "expected"),
    ({"format": 1}, None, "not a capture file of format 2"),
    (None, {"keys": torch.full((1, 1, 20, 8), float("nan"))}, "keys hold NaN"),
    (None, {"query_positions": torch.tensor([18, 40])}, "exceed the cache length"),
    (None, {"query_positions": torch.tensor([-1, 19])}, "exceed the cache length"),
    (None, {"queries": torch.zeros(1, 2, 2, 8, dtype=torch.int32)}, "4-d float tensor"),
    (None, {"keys": torch.zeros(1, 0, 20, 8), "values": torch.zeros(1, 0, 20, 8)}, "non-empty"),
])
def test_a_tampered_capture_is_refused_naming_the_field(tmp_path, header, tensors, pattern):
    from magicpig_tasks.experiments.capture import Capture

    path = _tamper(tmp_path, header=header, tensors=tensors)
    with pytest.raises(ValueError, match=re.escape(pattern)) as info:
        Capture.load(path)
    assert str(path) in str(info.value)


def test_a_capture_whose_header_nests_past_the_parser_is_refused(tmp_path):
    from safetensors.torch import save_file

    from magicpig_tasks.experiments.capture import HEADER_KEY, Capture

    path = tmp_path / "deep.safetensors"
    save_file({"x": torch.zeros(1)}, str(path), metadata={HEADER_KEY: "[" * 100_000 + "]" * 100_000})
    with pytest.raises(ValueError, match="its header is not JSON"):
        Capture.load(path)


def test_a_capture_with_an_oversized_header_length_is_refused(tmp_path):
    from magicpig_tasks.experiments.capture import Capture

    path = tmp_path / "h.safetensors"
    path.write_bytes((2**62).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="cannot be read"):
        Capture.load(path)


# ---- 4. the HTML report embeds only image files of its own folder ---------------------------------------

def test_the_report_embeds_only_image_files_inside_its_folder(tmp_path):
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "fig.png").write_bytes(b"\x89PNG\r\n\x1a\nfig")
    (folder / "notes.txt").write_text("private")
    (tmp_path / "secret.png").write_bytes(b"\x89PNG secret")
    (folder / "link.png").symlink_to(tmp_path / "secret.png")
    md = ("![ok](fig.png) ![a](/etc/hostname) ![b](../secret.png) ![c](link.png) ![d](notes.txt) "
          "![e](https://example.invalid/x.png) ![f](sub/../../secret.png) ![g](%2e%2e/secret.png) "
          "![h](data:image/png;base64,AAAA)")
    page = render_html(md, folder)
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert sources == ["data:image/png;base64,iVBORw0KGgpmaWc="]
    assert page.count('class="not-embedded"') == 8
    assert "secret" not in "".join(sources) and "c2VjcmV0" not in page and "cHJpdmF0ZQ" not in page


def test_a_hostile_results_folder_makes_a_report_without_any_local_file(tmp_path, capsys):
    from magicpig.harness.report import build_report

    from test_report import write_metrics

    acc = tmp_path / "results" / "accuracy"
    write_metrics(acc, "ruler/cwe", 4096, "dense", 61.0, 1.0)
    write_metrics(acc, "ruler/qa_1", 4096, "dense", None, None, status="skipped",
                  reason="![x](/etc/hostname) ![y](../../secret.png) <img src=/etc/passwd> [z](javascript:alert(1))")
    write_metrics(acc, "ruler/vt", 4096, "dense", "99", 1.0)  # a score that is text
    bad = acc / "ruler/fwe/4096/dense/metrics.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"task": 5, "method": ["a"]}')
    (acc / "ruler/niah_single_1/4096/dense").mkdir(parents=True)
    (acc / "ruler/niah_single_1/4096/dense/metrics.json").write_text("[" * 100_000)
    (tmp_path / "secret.png").write_bytes(b"\x89PNG secret")
    md = build_report(tmp_path / "results", tmp_path / "fig", "test")
    page = (md.parent / "REPORT.html").read_text(encoding="utf-8")
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert sources and all(src.startswith("data:image/png;base64,") for src in sources)
    inlined = "".join(sources)
    assert "c2VjcmV0" not in inlined and 'href="javascript' not in page and "not-embedded" in page
    err = capsys.readouterr().err
    assert f"{bad} skipped: field 'task' is a int" in err and "ruler/vt/4096/dense/metrics.json skipped" in err


def test_hostile_prediction_rows_are_skipped_not_averaged(tmp_path):
    """A results folder from someone else: rows whose numbers are text, or whose JSON nests past the parser,
    are skipped with their line numbers (the samples are run again), never averaged or fatal."""
    from magicpig.harness.predictions import Predictions

    path = tmp_path / "predictions.jsonl"
    path.write_bytes(b'{"id": "a", "score": 100.0, "cost": 0.02}\n{"id": "b", "score": "100"}\n'
                     + b'{"id": "c", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b'}\n{"id": "d", "cost": true}\n')
    warnings: list[str] = []
    assert list(Predictions(path, warn=warnings.append).rows) == ["a"]
    assert [w.split(" skipped (")[1] for w in warnings] == [
        "field 'score' is a str, not a number)", "JSON nested too deeply)", "field 'cost' is a bool, not a number)"]


def test_method_folders_are_safe_path_components_whatever_a_field_holds():
    from magicpig.methods.base import AttentionMethod
    from magicpig.methods.registry import METHODS, register
    from magicpig.methods.spec_names import method_dirname
    from magicpig.names import FOLDER_PATTERN

    @dataclasses.dataclass(kw_only=True)
    class Labelled(AttentionMethod):
        name = "labelled_toy"
        label: str = "x"

    register(Labelled)
    try:
        for value in ("../../etc", "$(id)", "`id`", "a|b", "..", "/abs", "~root", "\"q\"", "x" * 300):
            folder = method_dirname(f"labelled_toy:label={value}")
            assert re.fullmatch(FOLDER_PATTERN, folder) and folder.startswith("labelled_toy"), (value, folder)
        for spec in ("dense", "magicpig:K=8,L=75,dense_layers=0/16", "topk:budget=0.02", "quest"):
            assert re.fullmatch(FOLDER_PATTERN, method_dirname(spec))
    finally:
        METHODS.pop("labelled_toy", None)


def test_a_benchmark_csv_with_an_oversized_field_is_refused_by_file_and_line(tmp_path, capsys):
    from magicpig.harness.cli import main

    path = tmp_path / "decode.csv"
    path.write_text("model,context,batch,method,ms_per_token\nsmollm2,1024,1,dense,5\nsmollm2,1024,1,"
                    + "x" * 200_000 + ",5\n")
    assert main(["project", "--decode-csv", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: line 3 is not a CSV row of a benchmark" in err and err.count("\n") == 1
