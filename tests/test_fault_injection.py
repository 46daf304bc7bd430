"""Fault injection: hostile method specs and environment values, torn and foreign lines, processes killed
mid-write, a full disk (an injected ENOSPC), empty and malformed inputs, unbounded sizes. Each case ends in
the correct result or one clear error naming the field or file, before any model or sample work."""
from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from magicpig.atomic_io import CsvAppender, append_line, write_text_atomic
from magicpig.harness.cli import main
from magicpig.harness.csv_rows import load_rows
from magicpig.harness.predictions import Predictions
from magicpig.methods import KeyLayout, canonical_spec, method_fields, parse_method
from magicpig.methods.registry import METHODS
from magicpig.methods.spec_names import check_dirnames, method_dirname, split_methods

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def no_loading(monkeypatch):
    """Loading a model, a tokenizer or building a sample fails the test."""
    import magicpig.models as models
    from magicpig_tasks.common import SyntheticTask, Task
    from magicpig_tasks.records import RecordsTask

    def boom(*a, **k):
        raise AssertionError("a model was loaded or a sample built before the arguments were checked")

    for name in ("load_model", "load_tokenizer"):
        monkeypatch.setattr(models, name, boom)
    for cls in (Task, SyntheticTask, RecordsTask):
        monkeypatch.setattr(cls, "build", boom)


def eval_error(capsys, *extra: str, out: Path, methods=("--methods", "dense")) -> str:
    """stderr of a `magicpig eval` that must fail with exit code 2 and one line."""
    argv = ["eval", "--task", "ruler/niah_single_1", "--length", "512", *methods, "--out", str(out),
            "--no-progress", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


# ---- 1. one spec grammar: a list inside a spec never merges or splits methods -----------------------------

def test_list_values_use_one_separator_that_never_splits_methods():
    assert parse_method("magicpig:dense_layers=0/15").dense_layers == (0, 15)
    assert canonical_spec("magicpig:dense_layers=15/0") == "magicpig:dense_layers=0/15"
    with pytest.raises(ValueError, match=r"'dense_layers'.*whitespace inside a value.*'/'"):
        parse_method("magicpig:dense_layers=0 15")  # was read as 015 by eval, (0, 15) by generate
    with pytest.raises(ValueError, match=r"'dense_layers'.*separated by '/'.*';' separates methods"):
        parse_method("magicpig:dense_layers=0;15")
    with pytest.raises(ValueError, match=r"holds ';': give one spec per --method"):
        split_methods(["magicpig:dense_layers=2;dense"])  # was two methods, silently
    with pytest.raises(ValueError, match=r"'15' .* is not a method.*dense_layers=0/16"):
        split_methods("dense;magicpig:dense_layers=0;15")
    assert split_methods("dense; magicpig:dense_layers=0/15") == ["dense", "magicpig:dense_layers=0/15"]


@pytest.mark.parametrize("spec,pattern", [
    ("magicpig:dense_layers=0 15", "whitespace"),
    ("magicpig:dense_layers=2;dense", "holds ';'"),
    ("magicpig:K=１１", "ASCII"),
])
def test_eval_refuses_a_hostile_method_before_loading(tmp_path, capsys, no_loading, spec, pattern):
    assert pattern in eval_error(capsys, out=tmp_path / "o", methods=("--method", spec))


def test_eval_lists_and_parse_read_a_spec_the_same_way():
    for spec in ("magicpig:dense_layers=0/15", "topk:budget=0.02,dense_layers=none"):
        assert split_methods([spec]) == [spec]
        assert parse_method(spec) == parse_method(split_methods(spec)[0])


# ---- 2. digits are ASCII; two methods never share a folder ------------------------------------------------

@pytest.mark.parametrize("raw", ["１１", "1_1", "+-1", "1e1", "١١"])
def test_non_ascii_or_odd_integers_are_refused_naming_the_field(raw):
    with pytest.raises(ValueError, match="field 'K'"):
        parse_method(f"magicpig:K={raw}")


def test_full_width_digits_no_longer_share_a_folder(tmp_path, capsys, no_loading):
    err = eval_error(capsys, out=tmp_path / "o", methods=("--methods", "magicpig:K=１１;magicpig:K=１２"))
    assert "field 'K'" in err and "ASCII" in err


def _valid_values(name: str):
    """A few values of every field of method ``name``, as spec text."""
    for field, kind, default in method_fields(name):
        if "list" in kind:
            yield field, ["none", "0", "1/0", "0/1/2"]
        elif kind.startswith("bool"):
            yield field, ["true", "false"]
        elif kind.startswith("int"):
            yield field, ["1", "2", "12", "21"]
        elif kind.startswith("float"):
            yield field, ["0.5", "0.05", "1e-05", "5e-06", ".5", "0.25"]
        elif kind.startswith("one of"):
            yield field, kind.removeprefix("one of ").split("|")


def test_folder_names_are_injective_over_many_specs():
    """Every valid spec of every method with one or two fields set: equal folders only for equal methods."""
    folders: dict[str, str] = {}
    for name in METHODS:
        options = list(_valid_values(name))
        specs = [name] + [f"{name}:{f}={v}" for f, vs in options for v in vs]
        specs += [f"{name}:{f}={v},{g}={w}" for i, (f, vs) in enumerate(options) for g, ws in options[i + 1:]
                  for v in vs[:2] for w in ws[:2]]
        for spec in specs:
            try:
                canon = canonical_spec(spec)
            except ValueError:
                continue
            folder = method_dirname(spec)
            assert "/" not in folder and len(folder) <= 120
            assert folders.setdefault(folder, canon) == canon, (spec, folder, folders[folder])
    assert len(folders) > 100


def test_existing_folder_names_are_kept():
    assert method_dirname("magicpig:K=10,L=150") == "magicpig@K-10+L-150"
    assert method_dirname("magicpig:dense_layers=0/16,K=9") == "magicpig@dense_layers-0.16+K-9"
    assert method_dirname("quest:page_size=16,ratio=0.04") == "quest@page_size-16+ratio-0.04"


def test_a_300_digit_value_gets_a_short_distinct_folder():
    long_a, long_b = f"magicpig:sinks={'9' * 300}", f"magicpig:sinks={'9' * 299}8"
    a, b = method_dirname(long_a), method_dirname(long_b)
    assert len(a) <= 120 and "~" in a and a != b
    check_dirnames([long_a, long_b, "magicpig"])


# ---- 3. empty or malformed data files -------------------------------------------------------------------

@pytest.mark.parametrize("task,content,pattern", [
    ("longbench/lcc", b"", "holds no records"),
    ("longbench/lcc", b"\n\n", "holds no records"),
    ("gsm8k", b"", "holds no records"),
    ("gsm8k", b'{"question": "q", "answer": "a"}\n\n{"question": \n', "line 3: not valid JSON"),
    ("gsm8k", b'{"question": "q", "answer": "a"}\n\xff\xfe\n', "not UTF-8 (line 2"),
    ("gsm8k", b'[1, 2]\n', "line 1: a JSON list, not an object"),
    ("gsm8k", b'{"question": 5, "answer": 4}\n', "record 0: field 'question' must be a non-empty string, got 5"),
    ("gsm8k", b'{"question": "q", "answer": "4"}\n', "record 0: field 'answer': gsm8k: solution has no '####'"),
    ("ruler/qa_1", b'{"data": [', "ruler/qa_1 (SQuAD v2.0): data file"),
    ("gsm8k", b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 1: its JSON nests too deeply"),
    ("longbench/lcc", b'{"context": 5, "input": "x", "answers": ["a"]}\n', "record 0: field 'context' must be a string"),
    ("ruler/qa_1", b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests its JSON too deeply"),
    ("ruler/qa_1", b'{"data": [{"paragraphs": [{"context": "c", "qas": [{"question": 7, "answers": [{"text": "a"}]}]}]}]}',
     "is not a SQuAD v2.0 file (question 0: its context, question and answer texts must be strings)"),
])
def test_bad_data_file_is_refused_naming_file_and_line(tmp_path, capsys, no_loading, task, content, pattern):
    data = tmp_path / "data.jsonl"
    data.write_bytes(content)
    argv = ["eval", "--task", task, "--length", "4096", "--methods", "dense", "--samples", "1",
            "--data", f"{task}={data}", "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert pattern in err and str(data) in err, err
    assert not (tmp_path / "o" / task).exists() or not any((tmp_path / "o" / task).rglob("metrics.json"))


def test_more_samples_than_records_is_refused(tmp_path, capsys, no_loading):
    data = FIXTURES / "gsm8k_test_tiny.jsonl"
    count = sum(1 for line in data.read_text().splitlines() if line.strip())
    argv = ["eval", "--task", "gsm8k", "--length", "4096", "--methods", "dense", "--samples", str(count + 1),
            "--data", f"gsm8k={data}", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert f"holds {count} records" in capsys.readouterr().err


# ---- 4. bench decode's CSV: appended, never rewritten; two writers keep both ----------------------------

COLUMNS = ["context", "method", "ms_per_token"]


def _append_rows(path: str, tag: str, count: int) -> None:
    csv = CsvAppender(path, COLUMNS)
    csv.start()
    for i in range(count):
        csv.append({"context": i, "method": f"{tag}, with a comma", "ms_per_token": 1.5})


def test_two_writers_into_one_csv_keep_every_row(tmp_path):
    path = str(tmp_path / "decode.csv")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_rows, args=(path, tag, 150)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    _append_rows(path, "c", 5)  # a later run appends too
    rows = load_rows(path)
    assert [sum(r["method"].startswith(t) for r in rows) for t in "abc"] == [150, 150, 5]
    assert Path(path).read_text().count("context,method,ms_per_token") == 1


def test_csv_with_other_columns_is_refused_before_work(tmp_path):
    path = tmp_path / "decode.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=f"{path}.*other columns"):
        CsvAppender(path, COLUMNS).start()
    assert path.read_text() == "a,b\n1,2\n"


def test_bench_decode_appends_rows_and_refuses_a_foreign_csv_before_loading(tmp_path, monkeypatch):
    import magicpig.harness.bench.decode as bd

    path = tmp_path / "d.csv"
    path.write_text("x,y\n")
    monkeypatch.setattr("magicpig.models.load_model", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(ValueError, match="other columns"):
        bd.run("smollm2", contexts=(256,), methods=[("dense", "reference")], csv_path=str(path), device="cpu")


def test_full_disk_mid_row_leaves_no_torn_row(tmp_path, monkeypatch, capsys):
    path = tmp_path / "decode.csv"
    csv = CsvAppender(path, COLUMNS)
    csv.start()
    csv.append({"context": 1, "method": "dense", "ms_per_token": 2.0})
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[: len(data) // 2]))
    with pytest.raises(OSError) as exc:
        csv.append({"context": 2, "method": "magicpig", "ms_per_token": 3.0})
    assert exc.value.errno == errno.ENOSPC
    monkeypatch.setattr(os, "write", real_write)
    csv.append({"context": 3, "method": "topk", "ms_per_token": 4.0})
    assert [r["context"] for r in load_rows(path)] == [1, 3]
    assert "skipped" not in capsys.readouterr().err


def test_torn_csv_row_is_skipped_by_line_and_the_next_row_starts_a_new_line(tmp_path, capsys):
    path = tmp_path / "decode.csv"
    path.write_text("context,method,ms_per_token\n1,dense,2.0\n2,magi")  # a killed writer of another kind
    CsvAppender(path, COLUMNS).append({"context": 3, "method": "topk", "ms_per_token": 4.0})
    assert [r["context"] for r in load_rows(path)] == [1, 3]
    assert f"{path}: line 3 skipped (2 of 3 cells)" in capsys.readouterr().err


def test_project_refuses_an_empty_csv_by_name(tmp_path, capsys):
    empty = tmp_path / "kernel.csv"
    empty.write_bytes(b"")
    assert main(["project", "--kernel-csv", str(empty), "--out-dir", str(tmp_path / "p")]) == 2
    assert f"{empty}: empty CSV" in capsys.readouterr().err


# ---- 5. predictions.jsonl: torn, foreign and id-less lines ----------------------------------------------

def test_torn_line_inside_a_multibyte_character_is_skipped_and_cut(tmp_path):
    path = tmp_path / "predictions.jsonl"
    good = json.dumps({"id": "s0", "prediction": "café"}, ensure_ascii=False) + "\n"
    torn = (json.dumps({"id": "s1", "prediction": "naïve"}, ensure_ascii=False)).encode()
    cut = torn[: torn.index("ï".encode()) + 1]  # ends after the first byte of a 2-byte character
    path.write_bytes(good.encode() + cut)
    warnings: list[str] = []
    preds = Predictions(path, warn=warnings.append)
    assert list(preds.rows) == ["s0"]
    assert warnings == [f"{path}: line 2 skipped (torn last line without a newline, {len(cut)} bytes, from an "
                        "interrupted write); it is cut off the file"]
    assert path.read_bytes() == good.encode()
    preds.append({"id": "s1", "prediction": "naïve"})
    assert list(Predictions(path, warn=pytest.fail).rows) == ["s0", "s1"]


def test_whole_last_row_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b"}')
    assert list(Predictions(path, warn=pytest.fail).rows) == ["a", "b"]
    assert path.read_bytes() == b'{"id": "a"}\n{"id": "b"}\n'


def test_foreign_and_id_less_lines_are_skipped_with_their_line_numbers(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_bytes(b'{"id": "a"}\n\n{"no_id": 1}\n\xff\xfe\n[1]\n{"id": "a"}\nnot json\n{"id": "b"}\n')
    warnings: list[str] = []
    assert list(Predictions(path, warn=warnings.append).rows) == ["a", "b"]
    assert [w.split(" skipped")[0].rsplit(" ", 1)[-1] for w in warnings] == ["3", "4", "5", "6", "7"]
    assert all(str(path) in w for w in warnings)


# ---- 6. empty batches and bad layouts: a ValueError, never a signal ----------------------------------------

@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_refuses_an_empty_batch(name):
    q, k = torch.randn(0, 4, 16), torch.randn(0, 2, 32, 16)
    with pytest.raises(ValueError, match="batch B=0"):
        parse_method(name).attend(q, k, k.clone(), KeyLayout.simple(0, 32))


def _non_finite_case(where: str):
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 16), torch.randn(1, 2, 300, 16), torch.randn(1, 2, 300, 16)
    if where == "key":
        k[0, 0, 100, 3] = float("inf")
    else:
        q[0, 0, 3] = float("nan")
    layout = KeyLayout(300, torch.tensor([0]), torch.tensor([300]))
    return q, k, v, layout


@pytest.mark.parametrize("name", sorted(METHODS))
def test_an_infinite_key_coordinate_stays_in_its_own_score(name):
    """Every head where exact attention stays finite stays finite (MagicPIG's center took the inf to every
    key of the head: NaN)."""
    q, k, v, layout = _non_finite_case("key")
    dense = parse_method("dense").attend(q, k, v, layout).output
    out = parse_method(name).attend(q, k, v, layout, generator=torch.Generator().manual_seed(0)).output
    finite_heads = torch.isfinite(dense).all(-1)
    assert finite_heads.any() and not finite_heads.all()
    assert torch.isfinite(out[finite_heads]).all()


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_nan_query_gives_nan_from_every_method(name):
    """A NaN query has no softmax: its head's output is NaN (oracle sampling drew from a placeholder)."""
    q, k, v, layout = _non_finite_case("query")
    out = parse_method(name).attend(q, k, v, layout, generator=torch.Generator().manual_seed(0)).output
    assert torch.isnan(out[0, 0]).all() and torch.isfinite(out[0, 1:]).all()


@pytest.mark.parametrize("start,prompt_end,n,pattern", [
    ([5], [8], 4, "0 <= start <= prompt_end <= n"),
    ([-1], [4], 8, "0 <= start"),
    ([4], [2], 8, "start <= prompt_end"),
    ([0.5], [4], 8, "start must be a \\(B,\\) integer tensor"),
    ([0, 1], [4], 8, "same \\(B,\\) shape"),
])
def test_key_layout_is_validated(start, prompt_end, n, pattern):
    with pytest.raises(ValueError, match=pattern):
        KeyLayout(n, torch.tensor(start), torch.tensor(prompt_end))
    with pytest.raises(ValueError, match="n must be an int"):
        KeyLayout(8.0, torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long))


def test_cpu_module_refuses_an_empty_batch_in_python():
    """Run in a child: before the check, these calls killed the process with SIGFPE."""
    code = r"""
import torch
from magicpig import cpu, lsh
k = torch.randn(0, 2, 64, 16)
proj = lsh.make_projections(16, 4, 8, num_sets=2, seed=0)
for call in (lambda: cpu.hash_keys(k, None, proj, 4, 8),
             lambda: cpu.OffloadedLayer.build(k, k, torch.zeros(0, 2, 64, 8, dtype=torch.int32),
                                              torch.zeros(0, dtype=torch.long), 4, 8),
             lambda: cpu.exact_kernel(1)(torch.randn(0, 4, 16), k, k, 0.25)):
    try:
        call()
    except ValueError as exc:
        assert "batch B" in str(exc), exc
    else:
        raise SystemExit("no error")
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def test_offload_layer_uses_its_own_min_collisions():
    from magicpig import cpu, lsh

    k = torch.randn(1, 1, 40, 16)
    proj = lsh.make_projections(16, 4, 1, num_sets=1, seed=0)
    layer = cpu.OffloadedLayer.from_prefill(k, k.clone(), torch.zeros(1, 1, 16), proj,
                                            torch.zeros(1, dtype=torch.long), torch.full((1,), 40), 4, 1,
                                            min_collisions=1)
    assert layer.min_collisions == 1


# ---- 7. unbounded sizes are refused before any haystack ---------------------------------------------------

@pytest.mark.parametrize("extra,pattern", [
    (["--length", "2147483648"], "length must be integers in [64, 1048576]"),
    (["--samples", "10000000"], "samples must be an integer in [1, 10000]"),
    (["--length", "65536"], "over the model's context 8192"),
    (["--length", "512"], "length: 512 given more than once"),
])
def test_sizes_are_bounded_before_any_work(tmp_path, capsys, no_loading, extra, pattern):
    t0 = time.monotonic()
    err = eval_error(capsys, *extra, out=tmp_path / "o")
    assert pattern in err and time.monotonic() - t0 < 30, err


# ---- 8/9. the pipeline: hostile specs, layers, backend limits and the overwrite switch in the config -------

def _pipeline_problems(edit) -> str:
    import yaml

    from magicpig.harness.pipeline_config import validate_pipeline_config

    config = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    edit(config["presets"]["smoke"])
    with pytest.raises(ValueError) as info:
        validate_pipeline_config(config, warn=lambda m: None)
    return str(info.value)


@pytest.mark.parametrize("spec,pattern", [
    ("magicpig:dense_layers=0 15", "presets.smoke.ruler.methods[1]: method 'magicpig': field 'dense_layers'"),
    ("magicpig:K=１２", "presets.smoke.ruler.methods[1]: method 'magicpig': field 'K'"),
    ("magicpig:dense_layers=0/40", "presets.smoke.ruler.methods[1]: magicpig: field 'dense_layers' names layer(s) "
                                   "[40] but the model has 30 layers"),
    ("magicpig:L=300,min_collisions=256", "presets.smoke.ruler.methods[1]: magicpig: field 'min_collisions' is "
                                          "256, but the offload backend"),
])
def test_pipeline_config_refuses_what_would_fail_late(spec, pattern):
    def edit(preset):
        preset["backend"] = "offload"
        preset["ruler"]["methods"] = ["dense", spec]

    assert pattern in _pipeline_problems(edit)


def test_pipeline_config_bounds_samples_and_lengths():
    def edit(preset):
        preset["ruler"]["samples"] = 10_000_000
        preset["ruler"]["lengths"] = [2_147_483_648]

    msg = _pipeline_problems(edit)
    assert "presets.smoke.ruler.samples: 10000000 is greater than the maximum of 10000" in msg
    assert "presets.smoke.ruler.lengths[0]: 2147483648 is greater than the maximum of 1048576" in msg


# ---- 9. environment values, model folders, captures, kernel arguments ------------------------------------

@pytest.mark.parametrize("var,value,pattern", [
    ("MAGICPIG_THREADS", "10000", "MAGICPIG_THREADS must be an integer in [1, 1024]"),
    ("MAGICPIG_THREADS", "٤", "MAGICPIG_THREADS"),
    ("MAGICPIG_THREADS", "-3", "MAGICPIG_THREADS"),
    ("MAGICPIG_ISA", "avx9000", "MAGICPIG_ISA must be one of auto, scalar, avx2, avx512"),
])
def test_bad_environment_is_refused_before_the_model_loads(tmp_path, capsys, no_loading, monkeypatch,
                                                            var, value, pattern):
    monkeypatch.setenv(var, value)
    assert pattern in eval_error(capsys, out=tmp_path / "o")


def test_model_folder_with_only_config_is_refused_by_name(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 4096}))
    err = eval_error(capsys, "--model", str(folder), "--samples", "1", out=tmp_path / "o")
    assert f"folder {folder} has config.json but no weights and no tokenizer files" in err


def test_corrupt_capture_is_refused_by_name(tmp_path, capsys):
    bad = tmp_path / "c.pt"
    bad.write_bytes(b"garbage\n")
    assert main(["estimate", "error", "--capture", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"capture file {bad} cannot be read" in err and err.count("\n") == 1


def test_bench_kernel_refuses_an_odd_bf16_head_dim(tmp_path, capsys):
    assert main(["bench", "kernel", "--head-dim", "7", "--n", "1024", "--csv", str(tmp_path / "k.csv")]) == 2
    assert "--head-dim must be a positive even integer" in capsys.readouterr().err


def test_build_folder_depends_on_the_source_path(monkeypatch, tmp_path):
    """Two checkouts of the same sources sharing one cache get two folders (the build files name the
    source paths, so one folder would be rebuilt at every switch)."""
    import shutil

    from magicpig import cpu

    here = cpu.build_dir()
    other_checkout = Path(shutil.copytree(cpu.extension.CSRC, tmp_path / "other_checkout"))
    monkeypatch.setattr(cpu.extension, "CSRC", other_checkout)
    there = cpu.build_dir()
    assert there != here and there.parent == here.parent


# ---- 10. kills and a full disk while results are written ----------------------------------------------------

def test_full_disk_while_writing_json_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    path.write_text('{"old": 1}\n')
    import builtins

    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, text):
            self.f.write(text[:3])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(builtins, "open", lambda p, mode="r", **k: Full(real_open(p, mode, **k))
                        if str(p).endswith(".tmp") else real_open(p, mode, **k))
    with pytest.raises(OSError):
        write_text_atomic(path, '{"new": 2}\n')
    monkeypatch.undo()
    assert path.read_text() == '{"old": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_full_disk_on_a_small_tmpfs(tmp_path):
    """A real ENOSPC where this runs as root with mount rights; skipped elsewhere."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        path = mnt / "predictions.jsonl"
        written = 0
        with pytest.raises(OSError) as exc:
            for i in range(10_000):
                append_line(path, json.dumps({"id": f"s{i}", "prediction": "é" * 200}, ensure_ascii=False))
                written += 1
        assert exc.value.errno == errno.ENOSPC
        rows = Predictions(path, warn=lambda m: None).rows
        assert len(rows) == written  # every row that returned is whole; the failed one left nothing
        with pytest.raises(OSError):
            write_text_atomic(mnt / "metrics.json", "x" * 200_000)
        assert not list(mnt.glob("*.tmp")) and not list(mnt.glob(".*.tmp"))
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


KILLED_WRITER = r"""
import json, sys
from magicpig.harness.predictions import Predictions
preds = Predictions(sys.argv[1])
print("ready", flush=True)
i = len(preds.rows)
while True:
    preds.append({"id": f"s{i}", "prediction": "ü" * (i % 97)})
    i += 1
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_writer_killed_mid_append_loses_no_finished_row(tmp_path, sig):
    path = tmp_path / "predictions.jsonl"
    for _ in range(2):
        proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        proc.send_signal(sig)
        proc.wait(30)
        rows = Predictions(path, warn=lambda m: None).rows
        assert list(rows) == [f"s{i}" for i in range(len(rows))] and rows
        assert path.read_bytes().endswith(b"\n")
