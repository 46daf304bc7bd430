"""Checks of command-line values shared by the commands, run before anything expensive (loading a model,
building samples, capturing). Each raises ValueError naming the option and what it accepts."""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

DEVICE_TYPES = ("cpu", "cuda")
_LAYERS = re.compile(r"all|every:[1-9][0-9]*|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")
SEED_LIMIT = 2**63  # the engine seeds torch generators with seed and seed + 1 (64-bit)


def check_device(value: str | None, field: str = "--device") -> str | None:
    """``None`` (automatic), ``cpu``, ``cuda`` or ``cuda:N`` of a device present here."""
    if value is None:
        return None
    import torch

    try:
        dev = torch.device(value)
    except (RuntimeError, ValueError, TypeError):
        dev = None
    if dev is None or dev.type not in DEVICE_TYPES:
        raise ValueError(f"{field} must be cpu, cuda or cuda:N, got {value!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{field} {value}: no CUDA device is available here; use {field} cpu")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"{field} {value}: only {count} CUDA device(s) here (cuda:0..cuda:{count - 1})")
    return value


def check_seed(value: int, field: str = "--seed") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < SEED_LIMIT:
        raise ValueError(f"{field} must be an integer in [0, 2**63 - 1], got {value!r}")
    return value


def check_kl_option(text: str, field: str = "--kl") -> tuple[int, int]:
    """One ``K,L`` option value: magicpig.lsh's one (K, L) parser, then its limits, errors naming the option.
    Each value holds one pair, so a list in one value is refused with a hint to repeat the option."""
    from magicpig.lsh import check_kl, parse_kl

    try:
        K, L = parse_kl(text)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}; repeat {field} for more pairs") from None
    try:
        check_kl(K, L)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None
    return K, L


def check_min(value, minimum: int, field: str):
    """An integer >= minimum."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{field} must be an integer >= {minimum}, got {value!r}")
    return value


def check_writable_dir(path: str | Path, field: str) -> Path:
    """Create the folder if needed and make sure a file can be written in it."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ValueError(f"{field}: cannot write to {path}: {exc.strerror or exc}") from None
    return path


def check_writable_file(path: str | Path, field: str) -> Path:
    """The folder of ``path`` is writable (created if needed), and ``path`` is not a folder."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{field}: {path} is a folder, expected a file path")
    check_writable_dir(path.parent if str(path.parent) else Path(os.curdir), field)
    return path


def check_layer_spec(value: str | None, field: str = "--layers") -> str | None:
    """The syntax of a layer selection (``all``, ``every:N``, ``0,2,5-9``); the range is checked once the
    model's layer count is known."""
    if value is None:
        return None
    compact = ",".join(p for p in "".join(value.split()).split(",") if p)  # as parse_layers: empty items dropped
    if not _LAYERS.fullmatch(compact) or any(
            int(lo) > int(hi) for lo, _, hi in (p.partition("-") for p in compact.split(",") if "-" in p)):
        raise ValueError(f"{field} must be 'all', 'every:N' (N >= 1) or a list like '0,2,5-9', got {value!r}")
    return compact


def check_fraction(value: float, field: str, *, closed_low: bool = False, closed_high: bool = True) -> float:
    """A number in (0, 1] (or [0, 1] / (0, 1) as asked)."""
    lo_ok = value >= 0 if closed_low else value > 0
    hi_ok = value <= 1 if closed_high else value < 1
    if not (lo_ok and hi_ok):
        raise ValueError(f"{field} must be in {'[' if closed_low else '('}0, 1{']' if closed_high else ')'}, "
                         f"got {value}")
    return value
