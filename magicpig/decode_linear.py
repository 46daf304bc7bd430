"""The linear layers of a decode step on the CPU, computed by the CPU module's kernel 4.

Why: a decode step multiplies every weight matrix by one row per sequence. torch's CPU matmul runs such a
product on one thread, which reads the weights at well under the bandwidth of all cores, and the weights
are most of the bytes of a decode step (0.54 GB of the 0.59 GB of SmolLM2-135M's step at 1K context).
Kernel 4 reads each matrix once with all the module's threads. Its results equal ``F.linear`` up to
float32 summation order.

``decode_linears(model, impl)`` installs it, for the duration of a ``with`` block, on every ``nn.Linear``
of the model whose weight is a float32 / bfloat16 CPU tensor: an input of at most ``MAX_ROWS`` rows (a
decode step of up to ``MAX_ROWS`` sequences) goes to the kernel, anything larger (prefill) or anything
that needs gradients to the module's own forward. ``impl``: ``LINEAR_IMPLS``; ``auto`` is ``magicpig`` for
a CPU model when the CPU module can be built, ``torch`` otherwise.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

LINEAR_IMPLS = ("auto", "magicpig", "torch")
MAX_ROWS = 16  # input rows up to which kernel 4 runs (a decode step of up to this many sequences)
_WEIGHT_DTYPES = (torch.float32, torch.bfloat16)


def check_linear_impl(impl: str) -> str:
    if impl not in LINEAR_IMPLS:
        raise ValueError(f"linear_impl must be one of {', '.join(LINEAR_IMPLS)} (who computes the decode step's "
                         f"linear layers on the CPU), got {impl!r}")
    return impl


def resolve_linear_impl(impl: str, device: torch.device) -> str:
    """``auto`` / ``magicpig`` / ``torch`` -> the implementation that will run on ``device``."""
    check_linear_impl(impl)
    if impl == "torch":
        return "torch"
    if device.type != "cpu":
        if impl == "magicpig":
            raise ValueError(f"linear_impl='magicpig' is the CPU module's kernel; the model is on {device}")
        return "torch"
    if impl == "auto":
        from magicpig import cpu

        return "magicpig" if cpu.available() else "torch"
    return "magicpig"


def _kernel_forward(module: nn.Linear, original, kernel, isa: int, threads: int, weights: str):
    from magicpig.decode_weights import decode_weight

    weight = module.weight
    stored = decode_weight(module, weights)  # made once per block: the weights do not change inside it
    bias = None if module.bias is None else module.bias.detach().float().contiguous()
    I, O = module.in_features, module.out_features

    def forward(x: torch.Tensor) -> torch.Tensor:
        if (x.numel() > MAX_ROWS * I or x.dim() == 0 or x.shape[-1] != I or x.device.type != "cpu"
                or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
            return original(x)
        rows = x.reshape(-1, I)
        if rows.dtype != torch.float32 or not rows.is_contiguous():
            rows = rows.float().contiguous()
        y = kernel(rows, [stored], [bias], isa, threads)
        return y.view(*x.shape[:-1], O).to(x.dtype)

    return forward


@contextmanager
def decode_linears(model: nn.Module, impl: str = "auto", weights: str = "model") -> Iterator[str]:
    """Within the block, the model's eligible ``nn.Linear`` layers run small inputs through kernel 4, which
    reads their weights stored as ``weights`` (``magicpig.decode_weights.WEIGHT_FORMATS``). Yields the
    implementation that runs (``magicpig`` or ``torch``)."""
    device = next(model.parameters()).device
    chosen = resolve_linear_impl(impl, device)
    if chosen == "torch":
        yield "torch"
        return
    from magicpig import cpu

    kernel, isa, threads = cpu.load().linear, cpu.ISA_CODES[cpu.isa()], cpu.num_threads()
    patched = []
    for module in model.modules():
        w = getattr(module, "weight", None)
        if (isinstance(module, nn.Linear) and "forward" not in module.__dict__ and w is not None
                and w.device.type == "cpu" and w.dtype in _WEIGHT_DTYPES and w.is_contiguous()):
            module.forward = _kernel_forward(module, module.forward, kernel, isa, threads, weights)
            patched.append(module)
    try:
        yield "magicpig"
    finally:
        for module in patched:
            del module.forward
