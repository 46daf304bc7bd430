"""The decode backends, named once: which exist, which one runs by default, and which one a method really
runs on.

``reference`` is pure torch on the model's device (the float32 ground truth); ``offload`` is MagicPIG's
heterogeneous split (exact part on the device, sampled part by the CPU module). Only a method whose own
decoder is an offload one (its class says so: ``AttentionMethod.system_backend``, "offload" for MagicPIG)
runs differently on ``offload``: every other method (dense, quest, topk, oracle, streaming) runs on the
reference decoder whatever the backend asked for, and records say so through ``effective_backend``. The
constants are torch-free, so CLI parsers can take their ``choices=`` from here.

``auto`` (the default of ``Engine``, ``patch``, ``magicpig eval`` / ``generate`` and ``EvalConfig``) is the
fast path where it exists: ``offload`` when the CPU module builds here, else ``reference``, said once on
stderr (``resolve_backend``). It never reaches a decoder: ``DecodeOptions`` and ``EvalConfig.check`` store
the backend it resolved to, so records and resume keys name the backend that ran.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

BACKENDS: tuple[str, ...] = ("reference", "offload")
AUTO_BACKEND = "auto"
BACKEND_CHOICES: tuple[str, ...] = (AUTO_BACKEND,) + BACKENDS  # what Engine, patch, eval and generate accept
DEFAULT_BACKEND = AUTO_BACKEND  # Engine, patch, magicpig eval / generate, EvalConfig
# what ``magicpig bench decode`` times: stock transformers (SDPA + DynamicCache, dense only), llama.cpp on the
# model's GGUF file (dense only) and the engine's
BENCH_BACKENDS: tuple[str, ...] = ("stock", "llamacpp") + BACKENDS
BASELINE_BACKENDS: tuple[str, ...] = ("stock", "llamacpp")  # other decoders, timed beside ours: dense only


@dataclass(frozen=True)
class SpecOnBackend:
    """A method spec and the decoder ``bench decode`` times it on, written ``SPEC@BACKEND`` (``dense@stock``).
    ``backend`` is one of BENCH_BACKENDS, or "" where the text names none (the caller's default applies).
    The spec is kept as written; ``magicpig.methods.parse_method`` reads it."""

    spec: str
    backend: str = ""

    def __str__(self) -> str:
        return f"{self.spec}@{self.backend}" if self.backend else self.spec


def parse_spec_at_backend(text: str) -> SpecOnBackend:
    """``SPEC[@BACKEND]`` -> SpecOnBackend, the one reader of that form (split at the last '@'). ValueError
    naming BENCH_BACKENDS when the backend after '@' is not one of them."""
    spec, at, backend = str(text).strip().rpartition("@")
    if not at:
        return SpecOnBackend(backend)
    if backend not in BENCH_BACKENDS:
        raise ValueError(f"backend after '@' must be one of {', '.join(BENCH_BACKENDS)}, got {backend!r} in "
                         f"{text!r}")
    return SpecOnBackend(spec, backend)


def check_backend(backend: str, field: str = "backend") -> str:
    """``backend`` if it is one of BACKENDS, else ValueError naming ``field`` and the allowed values."""
    if backend not in BACKENDS:
        raise ValueError(f"{field} must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return backend


def resolve_backend(backend: str, field: str = "backend") -> str:
    """The concrete backend ``backend`` names: ``auto`` -> ``auto_backend()``, one of BACKENDS -> itself,
    else ValueError naming ``field`` and the allowed values."""
    if backend == AUTO_BACKEND:
        return auto_backend()
    if backend not in BACKENDS:
        raise ValueError(f"{field} must be one of {', '.join(BACKEND_CHOICES)}, got {backend!r}")
    return backend


@functools.lru_cache(maxsize=1)
def auto_backend() -> str:
    """``offload`` when the CPU module builds / loads here, else ``reference`` (said once on stderr, with the
    build's first error line). Cached: the first call may build the module (minutes on a fresh checkout)."""
    from magicpig.cpu import extension

    try:
        extension.load()
        return "offload"
    except Exception as exc:  # build failures come as RuntimeError; anything else also means "not usable"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        print(f"magicpig: the CPU module does not build here ({first}); backend 'auto' decodes on the "
              "slower reference backend (pass backend 'reference' to choose it and silence this line)",
              file=sys.stderr, flush=True)
        return "reference"


def effective_backend(method_name: str, backend: str) -> str:
    """The backend method ``method_name`` actually decodes on when ``backend`` is asked for: ``offload``
    only for methods with an offload decoder, ``reference`` otherwise."""
    check_backend(backend)
    return "offload" if backend == "offload" and system_backend(method_name) == "offload" else "reference"


def system_backend(method_name: str) -> str:
    """The backend that measures a method's own system path (``bench decode``'s default): ``offload``
    where the method has an offload decoder, ``reference`` otherwise."""
    from magicpig.methods import get_method_class

    return get_method_class(method_name).system_backend


def check_backend_limits(method, backend: str) -> None:
    """ValueError naming the field when ``method`` (parsed) cannot decode on ``backend``: on ``offload`` the
    CPU module counts a key's collisions in 8 bits, so ``min_collisions`` is at most its
    ``MAX_MIN_COLLISIONS``."""
    if effective_backend(method.name, backend) != "offload":
        return
    from magicpig.cpu.env import MAX_MIN_COLLISIONS

    needed = getattr(method, "min_collisions", None)
    if isinstance(needed, int) and needed > MAX_MIN_COLLISIONS:
        raise ValueError(f"{method.name}: field 'min_collisions' is {needed}, but the offload backend counts "
                         f"collisions in 8 bits: at most {MAX_MIN_COLLISIONS} (or use backend reference)")
