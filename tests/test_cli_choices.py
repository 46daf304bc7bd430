"""Every ``choices=`` list of the ``magicpig`` command is the runtime's own constant, the one the runtime
validates against, so a new backend, linear implementation, weight format ... reaches the CLI without a
second edit. A new option with choices must be added to EXPECTED: the test fails on one it does not know."""
from __future__ import annotations

import argparse

import pytest
import torch

from magicpig.backends import BACKEND_CHOICES
from magicpig.decode_forward import FORWARD_IMPLS
from magicpig.decode_linear import LINEAR_IMPLS
from magicpig.decode_weights import WEIGHT_FORMATS
from magicpig.decoders import OFFLOAD_DTYPE_CHOICES, OFFLOAD_DTYPES
from magicpig.harness.bench import decode_options, kernel as bench_kernel, llamacpp
from magicpig.harness.cli import build_parser
from magicpig.options import SETUPS
from magicpig.prefill_dtype import PREFILL_DTYPES
from magicpig_tasks.experiments.capture import KV_DTYPES
from magicpig_tasks.settings import SETTINGS

EXPECTED = {
    ("bench kernel", "--dist"): bench_kernel.DISTS,
    ("bench kernel", "--dtype"): tuple(OFFLOAD_DTYPES),
    ("bench decode", "--fill"): decode_options.FILLS,
    ("bench decode", "--dtype"): decode_options.DTYPES,
    ("bench decode", "--offload-dtype"): OFFLOAD_DTYPE_CHOICES,
    ("bench decode", "--linear"): LINEAR_IMPLS,
    ("bench decode", "--forward"): FORWARD_IMPLS,
    ("bench decode", "--weights"): WEIGHT_FORMATS,
    ("bench decode", "--llamacpp-kv"): tuple(llamacpp.KV_TYPES),
    ("estimate capture", "--kv-dtype"): KV_DTYPES,
    ("eval", "--setup"): SETUPS,
    ("eval", "--backend"): BACKEND_CHOICES,
    ("eval", "--prefill-dtype"): PREFILL_DTYPES,
    ("eval", "--decode-weights"): WEIGHT_FORMATS,
    ("generate", "--backend"): BACKEND_CHOICES,
    ("generate", "--prefill-dtype"): PREFILL_DTYPES,
    **{("eval", s.option): tuple(s.choices) for s in SETTINGS.values() if s.choices},
}


def option_choices(parser: argparse.ArgumentParser, command: tuple[str, ...] = ()):
    """(sub-command path, option, choices) of every option with a choices list, sub-commands included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from option_choices(sub, command + (name,))
        elif action.choices is not None:
            yield " ".join(command), action.option_strings[0], tuple(action.choices)


def test_every_cli_choices_list_is_the_runtime_constant():
    found = {(command, option): choices for command, option, choices in option_choices(build_parser())}
    assert set(found) == set(EXPECTED)  # an unknown option with choices, or one no longer found
    for key, choices in found.items():
        assert choices == tuple(EXPECTED[key]), key


def test_the_runtime_refuses_what_the_cli_refuses():
    """The constants are what the runtime checks: a value outside them is refused there too."""
    from magicpig.decode_weights import check_weight_format
    from magicpig.decoders import offload_dtype_of

    assert offload_dtype_of("bfloat16") is torch.bfloat16 and offload_dtype_of("auto") is None
    with pytest.raises(ValueError, match="auto, float32, bfloat16"):
        offload_dtype_of("float16")
    with pytest.raises(ValueError, match="model, bfloat16, q8_0"):
        check_weight_format("q4_0")
    from magicpig_tasks.experiments.capture import capture_for_model

    with pytest.raises(ValueError, match="kv_dtype must be one of float16, float32, bfloat16"):
        capture_for_model("smollm2", 128, kv_dtype=torch.float64)  # refused before the model loads
