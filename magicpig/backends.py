"""The decode backends, named once: which exist, which one runs by default, and which one a method really
runs on.

``reference`` is pure torch on the model's device (the float32 ground truth); ``offload`` is MagicPIG's
heterogeneous split (exact part on the device, sampled part by the CPU module). Only a method whose own
decoder is an offload one (its class says so: ``AttentionMethod.system_backend``, "offload" for MagicPIG)
runs differently on ``offload``: every other method (dense, quest, topk, oracle, streaming) runs on the
reference decoder whatever the backend asked for, and records say so through ``effective_backend``. The
constants are torch-free, so CLI parsers can take their ``choices=`` from here. ``DecodeOptions`` holds
the backend with the other settings of a decode, checked once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BACKENDS: tuple[str, ...] = ("reference", "offload")
DEFAULT_BACKEND = "reference"  # Engine, patch, magicpig eval / generate, EvalConfig
# what ``magicpig bench decode`` times: stock transformers (SDPA + DynamicCache, dense only) and the engine's
BENCH_BACKENDS: tuple[str, ...] = ("stock",) + BACKENDS


def check_backend(backend: str, field: str = "backend") -> str:
    """``backend`` if it is one of BACKENDS, else ValueError naming ``field`` and the allowed values."""
    if backend not in BACKENDS:
        raise ValueError(f"{field} must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return backend


@dataclass(frozen=True)
class DecodeOptions:
    """How a decode runs, validated once (here) and passed whole to ``Engine``, ``MagicPIGCache`` and
    ``magicpig.decoders.DecoderContext``.

    backend: ``BACKENDS`` (``reference`` = pure torch on the model's device, ``offload`` = MagicPIG's
    device + CPU split); offload_impl: which CPU layer class the offload backend uses
    (``magicpig.cpu_torch.OFFLOAD_IMPLS``); concurrent: queue the device's exact part before the CPU part
    runs (``magicpig.decoders.OffloadDecoder``); offload_dtype: how offloaded keys/values are stored in
    CPU memory (``"float32"``, ``"bfloat16"``, a torch dtype, or None / ``"auto"`` = by the model's dtype;
    stored as the torch dtype or None); linear: who computes a decode step's linear layers
    (``magicpig.decode_linear.LINEAR_IMPLS``; ``Engine``'s ``linear_impl``); forward: who runs a decode
    step's layer loop (``magicpig.decode_forward.FORWARD_IMPLS``; ``Engine``'s ``decode_forward``).
    Each error names the field.

    >>> DecodeOptions(backend="offload", offload_dtype="bfloat16").offload_dtype
    torch.bfloat16
    >>> DecodeOptions(backend="gpu")
    Traceback (most recent call last):
    ...
    ValueError: backend must be one of reference, offload, got 'gpu'
    """

    backend: str = DEFAULT_BACKEND
    offload_impl: str = "auto"
    concurrent: bool = True
    offload_dtype: Any = None
    linear: str = "auto"
    forward: str = "auto"

    def __post_init__(self):
        from magicpig.cpu_torch import OFFLOAD_IMPLS
        from magicpig.decode_forward import FORWARD_IMPLS
        from magicpig.decode_linear import LINEAR_IMPLS
        from magicpig.decoders import offload_dtype_of

        check_backend(self.backend)
        for name, allowed, what in (("offload_impl", OFFLOAD_IMPLS, "the CPU layer class of the offload backend"),
                                    ("linear", LINEAR_IMPLS, "who computes the decode step's linear layers"),
                                    ("forward", FORWARD_IMPLS, "who runs a decode step's layer loop")):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)} ({what}), got {value!r}")
        if not isinstance(self.concurrent, bool):
            raise ValueError(f"concurrent must be True or False, got {self.concurrent!r}")
        object.__setattr__(self, "offload_dtype", offload_dtype_of(self.offload_dtype))

    @classmethod
    def of(cls, options: "DecodeOptions | None", **settings) -> "DecodeOptions":
        """``options`` when given (then every keyword in ``settings`` must be at its default, so that no
        setting is silently dropped), else ``DecodeOptions(**settings)``: the keyword arguments of
        ``Engine``, ``MagicPIGCache`` and ``magicpig.patch``."""
        if options is None:
            return cls(**settings)
        if not isinstance(options, cls):
            raise ValueError(f"options must be a DecodeOptions, got {type(options).__name__}")
        defaults = cls.__dataclass_fields__
        given = sorted(k for k, v in settings.items() if v != defaults[k].default)
        if given:
            raise ValueError(f"options= and {', '.join(f'{k}=' for k in given)} both given: set "
                             f"{', '.join(given)} in the DecodeOptions")
        return options


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
    from magicpig.cpu_env import MAX_MIN_COLLISIONS

    needed = getattr(method, "min_collisions", None)
    if isinstance(needed, int) and needed > MAX_MIN_COLLISIONS:
        raise ValueError(f"{method.name}: field 'min_collisions' is {needed}, but the offload backend counts "
                         f"collisions in 8 bits: at most {MAX_MIN_COLLISIONS} (or use backend reference)")
