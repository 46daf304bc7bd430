"""``DecodeOptions``: how a decode runs (backend and the offload, linear and forward implementations),
checked once and passed whole to ``Engine``, ``MagicPIGCache`` and ``magicpig.decoders.DecoderContext``.

The modules that name the allowed values are imported when an instance is built, so importing this one
(``import magicpig`` does) stays light.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from magicpig.backends import DEFAULT_BACKEND, resolve_backend

# how ``Engine.answer`` feeds a question: A prefills context + question (the paper's), B prefills the
# context and decodes the question one token at a time with the method
SETUPS: tuple[str, ...] = ("A", "B")


@dataclass(frozen=True)
class DecodeOptions:
    """How a decode runs, validated once (here) and passed whole to ``Engine``, ``MagicPIGCache`` and
    ``magicpig.decoders.DecoderContext``.

    backend: ``BACKEND_CHOICES`` (``reference`` = pure torch on the model's device, ``offload`` = MagicPIG's
    device + CPU split, ``auto`` (default) = ``offload`` when the CPU module builds here, else ``reference``;
    stored as the backend it resolved to); offload_impl: which CPU layer class the offload backend uses
    (``magicpig.cpu.torch_twin.OFFLOAD_IMPLS``); concurrent: queue the device's exact part before the CPU part
    runs (``magicpig.decoders.OffloadDecoder``); offload_dtype: how offloaded keys/values are stored in
    CPU memory (``"float32"``, ``"bfloat16"``, a torch dtype, or None / ``"auto"`` = by the model's dtype;
    stored as the torch dtype or None); linear: who computes a decode step's linear layers
    (``magicpig.decode_linear.LINEAR_IMPLS``; ``Engine``'s ``linear_impl``); forward: who runs a decode
    step's layer loop (``magicpig.decode_forward.FORWARD_IMPLS``; ``Engine``'s ``decode_forward``); weights:
    how kernel 4 stores the linear weights it reads (``magicpig.decode_weights.WEIGHT_FORMATS``; ``model`` =
    the model's own tensors, the exact decode; ``Engine``'s ``decode_weights``). Each error names the field.

    >>> DecodeOptions(backend="offload", offload_dtype="bfloat16").offload_dtype
    torch.bfloat16
    >>> DecodeOptions(backend="gpu")
    Traceback (most recent call last):
    ...
    ValueError: backend must be one of auto, reference, offload, got 'gpu'
    """

    backend: str = DEFAULT_BACKEND
    offload_impl: str = "auto"
    concurrent: bool = True
    offload_dtype: Any = None
    linear: str = "auto"
    forward: str = "auto"
    weights: str = "model"

    def __post_init__(self):
        from magicpig.cpu.torch_twin import OFFLOAD_IMPLS
        from magicpig.decode_forward import FORWARD_IMPLS
        from magicpig.decode_linear import LINEAR_IMPLS
        from magicpig.decode_weights import WEIGHT_FORMATS
        from magicpig.decoders import offload_dtype_of

        object.__setattr__(self, "backend", resolve_backend(self.backend))
        for name, allowed, what in (("offload_impl", OFFLOAD_IMPLS, "the CPU layer class of the offload backend"),
                                    ("linear", LINEAR_IMPLS, "who computes the decode step's linear layers"),
                                    ("forward", FORWARD_IMPLS, "who runs a decode step's layer loop"),
                                    ("weights", WEIGHT_FORMATS, "how kernel 4 stores the decode step's weights")):
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
