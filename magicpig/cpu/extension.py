"""The compiled extension (C++ sources in ``magicpig/csrc``): building, loading and the build lock.

``load()`` compiles on first use with ``torch.utils.cpp_extension.load`` and ninja into
``$MAGICPIG_BUILD_DIR`` or ``~/.cache/magicpig``, in a folder named by a hash of the sources, the flags and
the Python installation; importing this file compiles nothing. One process builds a folder at a time
(``build.lock``, freed by the kernel if the builder dies; others wait up to ``$MAGICPIG_BUILD_TIMEOUT``
seconds, saying for whom).
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
from pathlib import Path

import torch

from magicpig.pidlock import LockTimeout, PidLock

BUILD_DIR_ENV = "MAGICPIG_BUILD_DIR"
BUILD_TIMEOUT_ENV = "MAGICPIG_BUILD_TIMEOUT"
DEFAULT_BUILD_TIMEOUT = 1800.0  # seconds to wait for another process's build of the same folder
CFLAGS = ["-O3", "-fopenmp", "-fno-math-errno"]
LDFLAGS = ["-fopenmp"]
CSRC = Path(__file__).resolve().parent.parent / "csrc"
SOURCES = ["bindings.cpp", "build_tables.cpp", "retrieve.cpp", "attend.cpp", "exact.cpp",
           "linear.cpp", "decode_layer.cpp", "append.cpp", "prefill.cpp", "isa_scalar.cpp", "isa_avx2.cpp",
           "isa_avx512.cpp"]
HEADERS = ["bindings_checks.h", "bindings_layer.h", "bindings_loop.h", "magicpig_cpu.h", "attend_impl.h",
           "linear_impl.h", "probe_impl.h", "isa_variant.h"]


def _install_key() -> str:
    """The Python installation and source folder the module is built for: two environments or checkouts
    sharing the cache (same sources, other interpreter, torch or source path, which the build files
    name) get separate folders instead of rebuilding each other's."""
    return "|".join([sys.version, sys.executable, sys.prefix, torch.__version__, str(Path(torch.__file__).parent),
                     str(CSRC)])


def _source_hash() -> str:
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update(name.encode())
        h.update((CSRC / name).read_bytes())
    h.update(" ".join(CFLAGS + LDFLAGS).encode())
    h.update(_install_key().encode())
    return h.hexdigest()[:16]


def build_dir() -> Path:
    """Folder holding the compiled module: ``$MAGICPIG_BUILD_DIR/<hash>`` or ``~/.cache/magicpig/<hash>``,
    the hash covering the sources, the flags and the installation (``_install_key``)."""
    env = os.environ.get(BUILD_DIR_ENV)
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "magicpig"
    return base / _source_hash()


def build_timeout() -> float:
    """Seconds to wait for another process's build (``$MAGICPIG_BUILD_TIMEOUT``, default 1800)."""
    text = os.environ.get(BUILD_TIMEOUT_ENV, "").strip()
    try:
        value = float(text) if text else DEFAULT_BUILD_TIMEOUT
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{BUILD_TIMEOUT_ENV} must be a positive number of seconds, got {text!r}")
    return value


@functools.lru_cache(maxsize=1)
def load():
    """Build the extension if needed (cached on disk) and return the loaded module.

    Raises RuntimeError carrying the compiler output when the build fails, or naming the process it
    waited for when another build held the folder longer than ``build_timeout()``.
    """
    return _load(build_dir(), build_timeout())


def _load(folder: Path, timeout: float):
    """Build / load the module in ``folder`` under the folder's build lock (see ``_build_lock``)."""
    from torch.utils import cpp_extension

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeError(f"cannot create the CPU module's build folder {folder}: {exc} "
                           f"(set {BUILD_DIR_ENV} to a writable folder)") from None
    name = f"magicpig_cpu_{folder.name}"
    if not (folder / f"{name}.so").is_file():
        check_compiler()  # before torch's build, whose first words without one are a misleading warning
    lock = _build_lock(folder, timeout)
    try:
        # copies: torch appends its own flags to these lists in place, which would change build_dir()
        return cpp_extension.load(
            name=name,
            sources=[str(CSRC / s) for s in SOURCES],
            extra_cflags=list(CFLAGS),
            extra_ldflags=list(LDFLAGS),
            extra_include_paths=[str(CSRC)],
            build_directory=str(folder),
            verbose=False,
        )
    except Exception as exc:  # compiler / ninja failures come as RuntimeError or CalledProcessError
        output = getattr(exc, "output", None)
        if isinstance(output, bytes):
            output = output.decode(errors="replace")
        raise RuntimeError(f"building the MagicPIG CPU module in {folder} failed: {exc}"
                           + (f"\n{output}" if output else "")) from exc
    finally:
        lock.release()


def check_compiler() -> str:
    """The C++ compiler torch's build will run (``$CXX``, else ``c++``, as torch picks it), found on PATH;
    RuntimeError saying what to install when there is none."""
    compiler = os.environ.get("CXX", "").strip() or "c++"
    found = shutil.which(compiler)
    if found:
        return found
    given = f"$CXX={compiler!r} is not" if os.environ.get("CXX", "").strip() else "'c++' is not"
    raise RuntimeError(
        f"no C++ compiler found: {given} on PATH, and the MagicPIG CPU module is compiled on this machine. Install "
        "one (Debian/Ubuntu: apt-get install g++; Fedora/RHEL: dnf install gcc-c++; conda: conda install -c "
        "conda-forge gxx_linux-64, as environment.yml does; macOS: brew install gcc, for OpenMP), or set CXX to "
        "its path, then rerun")


def _build_lock(folder: Path, timeout: float) -> PidLock:
    """Take ``folder/build.lock`` (waiting, with messages, up to ``timeout`` s for a live builder) and
    clear a stale torch build lock.

    torch's ``cpp_extension`` guards the folder with a bare ``lock`` file (its FileBaton) that a killed
    build leaves behind, and waits forever for it to go away. Every build of this folder runs under our
    pid lock, which the kernel frees when its holder dies; so a ``lock`` found while we hold ours was
    left by an interrupted build and is removed (ninja redoes the unfinished compile steps).
    """
    lock = PidLock(folder / "build.lock")
    try:
        lock.acquire(timeout, f"building the MagicPIG CPU module in {folder}")
    except (LockTimeout, OSError) as exc:
        raise RuntimeError(f"MagicPIG CPU module: {exc}") from None
    baton = folder / "lock"
    if baton.exists():
        print(f"removing the stale build lock {baton} of an interrupted build", file=sys.stderr, flush=True)
        baton.unlink(missing_ok=True)
    return lock


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether the module can be built / loaded here (cached); never raises."""
    try:
        load()
        return True
    except Exception:
        return False
