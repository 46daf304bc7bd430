"""Reliability of the CLI and the CPU-module build: interrupted builds never hang later ones, the build
folder is keyed by the installation and printed correctly, locks free themselves when their process dies,
every command rejects bad arguments before loading a model, and Ctrl-C in `magicpig eval` ends with one
line and exit code 130."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from magicpig import cpu
from magicpig.harness.cli import main
from magicpig.pidlock import LockHeld, LockTimeout, PidLock

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

# A process that runs magicpig.cpu.extension._load on a folder with torch's compile step replaced by: take
# torch's own build lock (its FileBaton, as the real build does), say so, and keep "compiling".
FAKE_BUILDER = r"""
import sys, time
from pathlib import Path
from torch.utils import cpp_extension
from torch.utils.file_baton import FileBaton
from magicpig import cpu

def compiling(**kw):
    assert FileBaton(str(Path(kw["build_directory"]) / "lock")).try_acquire()
    print("compiling", flush=True)
    time.sleep(600)

cpp_extension.load = compiling
cpu.extension._load(Path(sys.argv[1]), 60.0)
"""

HOLD_LOCK = r"""
import sys, time
from magicpig.pidlock import PidLock
assert PidLock(sys.argv[1]).try_acquire()
print("holding", flush=True)
time.sleep(600)
"""


def _spawn(script: str, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([PY, "-c", script, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stdout.readline()  # blocks until the child holds its lock (or dies)
    if not line:
        proc.wait()
        pytest.fail(f"helper process ended early (rc {proc.returncode})")
    return proc


def _dead_pid() -> int:
    proc = subprocess.Popen([PY, "-c", "pass"])
    proc.wait()
    return proc.pid


def _torch_baton_would_not_wait(build_directory, **kw):
    """Stands in for cpp_extension.load: torch's FileBaton waits forever when its lock file exists."""
    from torch.utils.file_baton import FileBaton

    baton = FileBaton(os.path.join(build_directory, "lock"))
    if not baton.try_acquire():
        raise AssertionError("torch's build lock is still there: the real build would wait forever")
    baton.release()
    return "module"


# ---- item 1: an interrupted build ---------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_build_does_not_block_the_next(tmp_path, monkeypatch, capsys, sig):
    from torch.utils import cpp_extension

    folder = tmp_path / "build"
    proc = _spawn(FAKE_BUILDER, str(folder))
    proc.send_signal(sig)
    proc.wait(timeout=60)
    assert (folder / "lock").exists()  # what a killed build leaves behind
    monkeypatch.setattr(cpp_extension, "load", _torch_baton_would_not_wait)
    assert cpu.extension._load(folder, 30.0) == "module"
    assert not (folder / "lock").exists()
    assert "stale build lock" in capsys.readouterr().err


def test_lock_files_naming_a_dead_pid_are_cleared(tmp_path, monkeypatch):
    from torch.utils import cpp_extension

    folder = tmp_path / "build"
    folder.mkdir()
    pid = _dead_pid()
    (folder / "lock").write_text(f"{pid}\n")
    (folder / "build.lock").write_text(f"{pid}\n")
    monkeypatch.setattr(cpp_extension, "load", _torch_baton_would_not_wait)
    assert cpu.extension._load(folder, 30.0) == "module"


def test_waiting_for_a_live_build_says_for_whom_and_times_out(tmp_path, capsys):
    folder = tmp_path / "build"
    proc = _spawn(FAKE_BUILDER, str(folder))
    try:
        with pytest.raises(RuntimeError, match=rf"timed out .* pid {proc.pid}"):
            cpu.extension._load(folder, 0.5)
        assert f"waiting for pid {proc.pid}: building the MagicPIG CPU module in {folder}" in capsys.readouterr().err
    finally:
        proc.kill()
        proc.wait()


def test_build_timeout_setting(monkeypatch):
    monkeypatch.setenv(cpu.BUILD_TIMEOUT_ENV, "12")
    assert cpu.build_timeout() == 12.0
    monkeypatch.setenv(cpu.BUILD_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=cpu.BUILD_TIMEOUT_ENV):
        cpu.build_timeout()


@pytest.mark.parametrize("cxx", [None, "g++-no-such-version"])
def test_no_compiler_is_named_before_torchs_build(tmp_path, monkeypatch, cxx):
    from torch.utils import cpp_extension

    def torch_build(**kw):
        raise AssertionError("torch's build ran without a compiler")

    monkeypatch.setattr(cpp_extension, "load", torch_build)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    if cxx:
        monkeypatch.setenv("CXX", cxx)
    else:
        monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(RuntimeError, match=r"no C\+\+ compiler found: .*apt-get install g\+\+") as info:
        cpu.extension._load(tmp_path / "build", 5.0)
    assert (repr(cxx) if cxx else "'c++'") in str(info.value)
    # a module built before needs no compiler to load: torch's load is reached
    folder = tmp_path / "built"
    folder.mkdir()
    (folder / f"magicpig_cpu_{folder.name}.so").write_bytes(b"")
    with pytest.raises(RuntimeError, match="torch's build ran"):
        cpu.extension._load(folder, 5.0)


# ---- item 8: build folder, locks between processes -------------------------------------------------------

def test_build_prints_the_folder_that_holds_the_module(capsys):
    assert main(["build", "--no-check"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("module:"))
    folder = Path(line.split()[1])
    assert folder.parent == cpu.build_dir().parent and list(folder.glob("magicpig_cpu_*.so"))
    # torch appends its own flags to the list it is given (we give it a copy): the hash, and with it
    # build_dir(), would no longer name the folder just built
    flags = cpu.extension.CFLAGS + cpu.extension.LDFLAGS
    assert not [f for f in flags if f.startswith(("-L", "-l"))], flags


def test_build_dir_is_keyed_by_the_installation(monkeypatch):
    here = cpu.build_dir()
    monkeypatch.setattr(sys, "prefix", "/some/other/venv")
    assert cpu.build_dir() != here
    monkeypatch.undo()
    monkeypatch.setattr(sys, "executable", "/usr/bin/python-other")
    assert cpu.build_dir() != here


def test_pid_lock_is_freed_when_its_holder_dies(tmp_path):
    path = tmp_path / "x.lock"
    proc = _spawn(HOLD_LOCK, str(path))
    lock = PidLock(path)
    try:
        assert not lock.try_acquire() and lock.holder() == proc.pid
        with pytest.raises(LockTimeout, match=f"pid {proc.pid}"):
            lock.acquire(0.3, "testing", say=lambda m: None)
    finally:
        proc.kill()
        proc.wait()
    assert lock.try_acquire() and lock.holder() == os.getpid()
    lock.release()
    assert issubclass(LockTimeout, LockHeld)


# ---- item 5 / 7: bad arguments fail before any model is loaded -------------------------------------------

@pytest.fixture
def no_loading(monkeypatch):
    """Loading a model, a tokenizer or a capture fails the test."""
    import magicpig.models as models
    from magicpig_tasks.experiments import capture

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the arguments were checked")

    for mod, name in ((models, "load_model"), (models, "load_tokenizer"), (capture, "capture_for_model")):
        monkeypatch.setattr(mod, name, boom)
    monkeypatch.setattr(capture.Capture, "load", classmethod(lambda cls, p: boom()))


def _file(tmp_path, name="f.txt", data=b"x"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


BAD_INPUTS = [
    # (name, argv builder, expected text in the error)
    ("eval unwritable --out", lambda t: ["eval", "--out", str(_file(t) / "out")], "out: cannot write"),
    ("eval --device bogus", lambda t: ["eval", "--device", "bogus"], "device must be cpu, cuda"),
    ("eval --device cuda:7", lambda t: ["eval", "--device", "cuda:7"], "device"),
    ("eval --seed -1", lambda t: ["eval", "--seed", "-1"], "seed must be an integer in [0, 2**63 - 1]"),
    ("eval --seed 2**64", lambda t: ["eval", "--seed", str(2**64)], "seed must be an integer"),
    ("eval bad method", lambda t: ["eval", "--methods", "magicpig:K=99"], "K"),
    ("eval --samples 0", lambda t: ["eval", "--samples", "0"], "samples"),
    ("eval --max-new-tokens 0", lambda t: ["eval", "--max-new-tokens", "0"], "max_new_tokens"),
    ("generate --prefill-chunk 0", lambda t: ["generate", "--prompt", "hi", "--prefill-chunk", "0"],
     "--prefill-chunk must be an integer >= 1"),
    ("generate --device bogus", lambda t: ["generate", "--prompt", "hi", "--device", "bogus"], "--device"),
    ("generate empty --prompt-file", lambda t: ["generate", "--prompt-file", str(_file(t, data=b" \n"))], "is empty"),
    ("generate --prompt-file folder", lambda t: ["generate", "--prompt-file", str(t)], "--prompt-file"),
    ("generate --prompt-file not UTF-8", lambda t: ["generate", "--prompt-file", str(_file(t, data=b"\xff\xfe"))],
     "not UTF-8"),
    ("generate empty --prompt", lambda t: ["generate", "--prompt", "  "], "--prompt is empty"),
    ("generate --seed -5", lambda t: ["generate", "--prompt", "hi", "--seed", "-5"], "--seed"),
    ("generate --temperature 0", lambda t: ["generate", "--prompt", "hi", "--do-sample", "--temperature", "0"],
     "temperature"),
    ("generate --top-p 2", lambda t: ["generate", "--prompt", "hi", "--top-p", "2"], "top_p"),
    ("generate beyond the offload backend", lambda t: ["generate", "--prompt", "hi", "--backend", "offload",
                                                       "--method", "magicpig:K=2,L=300,min_collisions=256"],
     "field 'min_collisions' is 256, but the offload backend"),
    ("capture --context 10", lambda t: ["estimate", "capture", "--context", "10", "--out", str(t / "c.pt")],
     "--context"),
    ("capture --depth 2", lambda t: ["estimate", "capture", "--depth", "2", "--out", str(t / "c.pt")], "--depth"),
    ("capture --layers every:0", lambda t: ["estimate", "capture", "--layers", "every:0", "--out", str(t / "c.pt")],
     "--layers"),
    ("capture --device bogus", lambda t: ["estimate", "capture", "--device", "bogus", "--out", str(t / "c.pt")],
     "--device"),
    ("capture unwritable --out", lambda t: ["estimate", "capture", "--out", str(_file(t) / "c.pt")], "--out"),
    ("error missing --capture", lambda t: ["estimate", "error", "--capture", str(t / "none.pt")], "--capture"),
    ("error --kl 99x10", lambda t: ["estimate", "error", "--capture", str(_file(t)), "--kl", "99x10"], "--kl: K"),
    ("kl-grid --L 1", lambda t: ["estimate", "kl-grid", "--capture", str(_file(t)), "--L", "1"], "--K/--L"),
    ("spread --top-frac 0", lambda t: ["estimate", "spread", "--capture", str(_file(t)), "--top-frac", "0"],
     "--top-frac"),
    ("all unwritable --out-dir", lambda t: ["estimate", "all", "--capture", str(_file(t)),
                                            "--out-dir", str(_file(t, "g") / "o")], "--out-dir"),
    ("tune-kl --K 0", lambda t: ["tune-kl", "--target-cost", "0.02", "--K", "0,9"], "--K"),
    ("tune-kl --max-L 1", lambda t: ["tune-kl", "--target-cost", "0.02", "--max-L", "1"], "--max-L"),
    ("tune-kl missing --capture", lambda t: ["tune-kl", "--target-cost", "0.02", "--capture", str(t / "n.pt")],
     "--capture"),
    ("tune-kl unwritable --out-dir", lambda t: ["tune-kl", "--target-cost", "0.02", "--out-dir",
                                                str(_file(t) / "o")], "--out-dir"),
    ("tune-kl --layers x", lambda t: ["tune-kl", "--target-cost", "0.02", "--layers", "x"], "--layers"),
    ("bench decode --device bogus", lambda t: ["bench", "decode", "--device", "bogus"], "--device"),
    ("bench decode unwritable --csv", lambda t: ["bench", "decode", "--csv", str(_file(t) / "d.csv")], "--csv"),
    ("bench decode bad method", lambda t: ["bench", "decode", "--method", "magicpig:K=99"], "K"),
]


@pytest.mark.parametrize("name,argv,expected", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_argument_fails_before_loading(tmp_path, capsys, monkeypatch, no_loading, name, argv, expected):
    monkeypatch.chdir(tmp_path)  # a default output folder (results/...) a check makes lands here, not in the checkout
    args = argv(tmp_path)
    if args[0] == "eval":  # a valid eval command line, one value made bad
        base = {"--task": "ruler/niah_single_1", "--length": "512", "--methods": "dense", "--out": str(tmp_path / "o")}
        given = dict(zip(args[1::2], args[2::2]))
        args = ["eval"] + [x for k, v in {**base, **given}.items() for x in (k, v)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err


def test_eval_rejects_an_unknown_backend_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--task", "ruler/cwe", "--length", "4k", "--methods", "dense", "--out", str(tmp_path),
              "--backend", "bogus"])
    assert exc.value.code == 2 and "invalid choice: 'bogus'" in capsys.readouterr().err


# ---- item 9: Ctrl-C during eval ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A saved 2-layer random Llama with the embedded model's tokenizer: a model folder the CLI loads."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from magicpig.models import load_tokenizer

    tok = load_tokenizer("smollm2")
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                      initializer_range=0.2, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    folder = tmp_path_factory.mktemp("tiny_model")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_ctrl_c_during_eval_is_one_line_and_130(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    preds = out / "ruler/niah_single_1/256/dense/predictions.jsonl"
    cmd = [PY, "-m", "magicpig.harness.cli", "eval", "--model", str(tiny_model_dir), "--device", "cpu",
           "--task", "ruler/niah_single_1", "--length", "256", "--samples", "200", "--max-new-tokens", "24",
           "--methods", "dense", "--out", str(out), "--no-progress"]
    # the child starts with Ctrl-C's default action: a test run earlier in this process may have left SIGINT
    # ignored, which a child inherits, and Python then installs no KeyboardInterrupt handler
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not (preds.is_file() and preds.read_text().count("\n") >= 2):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no sample finished"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    saved = len(preds.read_text().splitlines())
    assert last == f"interrupted: {saved} of 200 samples saved; rerun to resume"
    assert 2 <= saved < 200
    # the folder lock died with the run: a new run is not refused
    assert PidLock(out / "ruler/niah_single_1/256/eval.lock").try_acquire()
    assert json.loads((preds.parent / "settings.json").read_text())["device"] == "cpu"


# ---- a full disk during eval: one line naming the file, the rows before it kept ---------------------------

def test_full_disk_during_eval_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch, tiny_model_dir):
    import errno

    import magicpig.harness.predictions as predictions
    from magicpig.atomic_io import append_line

    def no_space(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def append_on_a_full_disk(path, line):
        real_write = os.write
        if Path(path).exists():  # the first row fits, the second finds the disk full
            os.write = no_space
        try:
            append_line(path, line)
        finally:
            os.write = real_write

    out = tmp_path / "out"
    argv = ["eval", "--model", str(tiny_model_dir), "--device", "cpu", "--task", "ruler/niah_single_1",
            "--length", "256", "--samples", "3", "--max-new-tokens", "4", "--methods", "dense", "--out", str(out),
            "--no-progress"]
    monkeypatch.setattr(predictions, "append_line", append_on_a_full_disk)
    assert main(argv) == 1
    err = capsys.readouterr().err
    preds = out / "ruler/niah_single_1/256/dense/predictions.jsonl"
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(f"magicpig eval: error: No space left on device ({preds}) "
                                                   "[ENOSPC]; free some space and rerun"), err
    assert len(preds.read_text().splitlines()) == 1

# ---- the config check: an alias bomb, a huge value, the seed's bounds -----------------------------------

def _smoke_config_problems(edit, top: bool = False) -> str:
    """The config check's message for config/smoke.yaml changed by ``edit`` (its preset, or the whole
    config with ``top``)."""
    import yaml

    from magicpig.harness.pipeline_config import validate_pipeline_config

    config = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    edit(config if top else config["presets"]["smoke"])
    with pytest.raises(ValueError) as info:
        validate_pipeline_config(config, warn=lambda m: None)
    return str(info.value)


def test_a_yaml_alias_bomb_is_one_short_error():
    import yaml

    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefghijk", "bcdefghijkl")]
    bomb = yaml.safe_load("\n".join(levels))["l"]  # 9**12 strings as a reader sees them: hours to walk

    def edit(preset):
        preset["ruler"]["tasks"] = bomb

    t0 = time.monotonic()
    msg = _smoke_config_problems(edit)
    assert len(msg) < 400 and "more than 100000 values" in msg and time.monotonic() - t0 < 60, msg[:500]


def test_a_huge_value_is_quoted_back_short():
    def edit(preset):
        preset["model"] = ["x" * 100_000]

    msg = _smoke_config_problems(edit)
    assert "presets.smoke.model: " in msg and len(msg) < 1000


@pytest.mark.parametrize("seed,pattern", [
    (10**30, "seed: 1000000000000000000000000000000 is greater than the maximum of 9223372036854775807"),
    (2**63 - 1, "seed: 9223372036854775807 + presets.smoke.estimation.prompts - 1"),
    (-1, "seed: -1 is less than the minimum of 0"),
])
def test_pipeline_config_bounds_the_seed(seed, pattern):
    def edit(config):
        config["seed"] = seed

    assert pattern in _smoke_config_problems(edit, top=True)


# ---- a corrupt settings.json: said to be corrupt, and no advice that discards its rows -------------------

@pytest.mark.parametrize("damage", [b'{"seed": 0, "met', b"\xff\xfe", b"[1, 2]"])
def test_a_corrupt_settings_file_is_named_corrupt_and_its_rows_kept(tmp_path, capsys, tiny_model_dir, damage):
    out = tmp_path / "out"
    argv = ["eval", "--model", str(tiny_model_dir), "--device", "cpu", "--task", "ruler/niah_single_1",
            "--length", "256", "--samples", "1", "--max-new-tokens", "4", "--methods", "dense", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    folder = out / "ruler/niah_single_1/256/dense"
    rows = (folder / "predictions.jsonl").read_text()
    (folder / "settings.json").write_bytes(damage)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{folder / 'settings.json'} is corrupt" in err and "1 prediction row(s) beside it are intact" in err
    assert "older version" not in err and "--overwrite" not in err
    assert (folder / "predictions.jsonl").read_text() == rows


# ---- bench decode: a run id on every row, a rerun's repeat said and fitted once; load scaled to threads ----

def _bench_table(path, diagnostics=False):
    from magicpig.harness.bench.table import Table

    table = Table(path, {"model": "smollm2", "shape_only": False, "device": "cpu", "threads": 2, "isa": "avx2",
                         "dtype": "float32", "steps": 4, "warmup": 2}, diagnostics, verbose=True)
    table.start()
    return table


def _bench_row(table, ms):
    row = table.row(4096, 1, "dense", "stock", "exact")
    row.update(fits=True, ms_per_token=ms, tokens_per_s=1000 / ms, setup_seconds=0.1, sampled_fraction=1.0,
               other_cpu_load=0.0, under_load=False)
    return table.add(row)


def test_a_rerun_of_bench_decode_adds_a_row_with_its_own_run_id_and_says_so(tmp_path, capsys):
    from magicpig.harness.csv_rows import load_rows
    from magicpig.harness.projection.measured_rows import decode_items

    path = tmp_path / "decode.csv"
    first = _bench_table(path)
    _bench_row(first, 50.0)  # the run is killed after this row
    assert "already holds" not in capsys.readouterr().out
    second = _bench_table(path)
    _bench_row(second, 40.0)
    said = capsys.readouterr().out
    assert f"already holds this setting (run {first.run_id})" in said and second.run_id in said
    rows = load_rows(path)
    assert [r["run_id"] for r in rows] == [first.run_id, second.run_id] and first.run_id != second.run_id
    roles = [it["role"] for it in decode_items([path])]
    assert roles == [f"repeat: run {second.run_id} of this setting is used", "fitted"]


def test_a_decode_csv_without_run_ids_is_refused_by_name(tmp_path):
    from magicpig.harness.bench.table import COLUMNS

    path = tmp_path / "old.csv"
    path.write_text(",".join(c for c in COLUMNS if c != "run_id") + "\n")
    with pytest.raises(ValueError, match="written before rows carried a run_id"):
        _bench_table(path)


@pytest.mark.parametrize("other,threads,cores,flagged", [
    (0.92, 2, 2, True),  # the llama.cpp row: 20x slower than quiet
    (0.4, 2, 2, False),
    (0.92, 1, 2, False),  # one thread on two cores: the other core was spare
    (1.4, 1, 2, True),
    (3.0, 16, 16, False), (5.0, 16, 16, True),
    (12.5, 4, 16, False), (13.5, 4, 16, True),
])
def test_under_load_is_scaled_to_the_rows_threads(other, threads, cores, flagged):
    from magicpig.harness.bench.table import is_under_load

    assert is_under_load(other, threads, cores) is flagged


@pytest.mark.parametrize("backend", ["llamacpp", "stock", "reference"])
def test_every_backends_row_is_flagged_under_load(tmp_path, monkeypatch, backend):
    """A row of any backend measured while other processes kept 0.92 of 2 cores busy is flagged."""
    import types

    import torch

    from magicpig.harness.bench import decode_rows, memory, row_monitor, table, timed_decode

    wall = {"t": 0.0}
    monkeypatch.setattr(table, "usable_cores", lambda: 2)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(row_monitor.time, "perf_counter", lambda: wall["t"])
    monkeypatch.setattr(row_monitor.RowMonitor, "_busy", staticmethod(lambda: 10.0 + 2.92 * wall["t"]))
    monkeypatch.setattr(row_monitor.RowMonitor, "_own", lambda self: (2.0 * wall["t"], 0.0))
    monkeypatch.setattr(memory, "fit_reason", lambda est, device: "")
    monkeypatch.setattr(memory, "free_memory", lambda trim=False: None)

    def timed(*a, **k):
        wall["t"] += 10.0  # ten seconds of decoding while the other processes took 0.92 cores
        return {"step_seconds": [0.5] * 6, "setup_seconds": 0.0, "sampled_fraction": 1.0, "linear": "",
                "forward": "", "timings": None, "prefill": "run"}

    monkeypatch.setattr(decode_rows.llamacpp, "time_llamacpp", timed)
    monkeypatch.setattr(timed_decode, "time_stock", timed)
    monkeypatch.setattr(timed_decode, "time_engine", timed)
    monkeypatch.setattr(decode_rows, "repeat_batch", lambda pre, batch: pre)
    run = types.SimpleNamespace(
        steps=4, warmup=2, device=torch.device("cpu"), table=_bench_table(tmp_path / "d.csv"), llamacpp_reason="",
        malloc_policy="", stream_buffer=None, diagnostics=False, gguf_path="m.gguf", llamacpp_kv="f16",
        llamacpp_state_dir=None, stream_gbps=None, model="smollm2", net=None, tokenizer=None, offload_dtype=None, linear="auto",
        forward="auto", weights="model", estimate=lambda *a, **k: {"device": 0, "host": 0, "kv": 0, "tables": 0},
        row_setup=lambda b: {}, context_ids=lambda n: [1] * n, llamacpp_bytes_limit=lambda row: {})
    row = decode_rows.DecodeRun.measure(run, None, 256, 1, "dense", backend, "exact")
    assert row["fits"] is True and row["other_cpu_load"] == pytest.approx(0.92) and row["under_load"] is True
