"""Model architectures as data: ``ModelShape`` and the one reader of ``magicpig/data/model_shapes.yaml``.

The file holds the published config.json facts of the models the benchmarks build without their weights
(``--model shape:NAME``), that the hardware model projects and that Table 8 is computed from. A loaded
model's shape comes from its transformers config instead (``ModelShape.of_config``).

>>> s = model_shape("llama-3.1-8b")
>>> (s.layers, s.heads, s.kv_heads, s.head_dim)
(32, 32, 8, 128)
>>> s.kv_bytes(1024) / 2**20  # keys + values of 1024 tokens in bf16, MiB
128.0
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

# the real models magicpig.models loads by name -> their stored shape (Qwen2.5-Coder-0.5B has Qwen2.5-0.5B's)
ALIASES = {"smollm2": "smollm2-135m", "qwen2.5-coder-0.5b": "qwen2.5-0.5b"}
MODEL_TYPES = ("llama", "mistral", "qwen2")
_REQUIRED = ("hf_id", "model_type", "num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden",
             "intermediate", "vocab", "rope_theta", "max_position_embeddings", "tie_embeddings",
             "attention_bias", "params_b")


def shapes_file():
    """The packaged model_shapes.yaml (a Traversable: works from a wheel as well as a checkout)."""
    return resources.files("magicpig") / "data" / "model_shapes.yaml"


@dataclass(frozen=True)
class ModelShape:
    """Architecture facts of one model; ``bytes_per_param``: bytes of one element of the model's dtype."""

    name: str
    params_b: float  # parameters, billions
    layers: int
    heads: int
    kv_heads: int
    head_dim: int = 128
    bytes_per_param: int = 2
    hidden: int = 0
    vocab: int = 0
    tie_embeddings: bool = False
    intermediate: int = 0
    model_type: str = "llama"
    hf_id: str = ""
    rope_theta: float = 10000.0
    max_position_embeddings: int = 0
    attention_bias: bool = False
    rope_scaling: dict | None = field(default=None, compare=False, hash=False)

    @classmethod
    def of_config(cls, config, dtype, name: str = "") -> "ModelShape":
        """The shape of a transformers ``config`` whose weights are ``dtype`` (a torch dtype)."""
        import torch

        heads = int(config.num_attention_heads)
        hidden = int(config.hidden_size)
        return cls(name or str(getattr(config, "name_or_path", "") or ""), 0.0, int(config.num_hidden_layers),
                   heads, int(getattr(config, "num_key_value_heads", None) or heads),
                   int(getattr(config, "head_dim", None) or hidden // heads),
                   torch.empty((), dtype=dtype).element_size(), hidden, int(config.vocab_size),
                   bool(getattr(config, "tie_word_embeddings", False)), int(config.intermediate_size),
                   str(getattr(config, "model_type", "llama")))

    @property
    def elem(self) -> int:
        """Bytes per element of the model's dtype."""
        return self.bytes_per_param

    def with_dtype(self, elem: int) -> "ModelShape":
        return replace(self, bytes_per_param=elem)

    def kv_bytes_per_token_layer(self, elem: int | None = None) -> int:
        return 2 * self.kv_heads * self.head_dim * (elem or self.bytes_per_param)

    def kv_bytes(self, n: int, batch: int = 1, layers: int | None = None) -> int:
        """Keys + values of ``n`` tokens of ``batch`` sequences over ``layers`` (default all) layers."""
        return batch * (self.layers if layers is None else layers) * n * self.kv_bytes_per_token_layer()

    @property
    def weight_bytes(self) -> float:
        """Bytes of all parameters (what GPU memory must hold)."""
        return self.params_b * 1e9 * self.bytes_per_param

    @property
    def params_read(self) -> float:
        """Parameters a decode step reads: all but an untied input-embedding table (a lookup of B rows)."""
        embed = 0 if self.tie_embeddings else self.vocab * self.hidden
        return self.params_b * 1e9 - embed

    def linear_macs_per_layer(self) -> int:
        """Multiply-adds of one layer's linear layers for one token: q, k, v, o projections and a gated MLP."""
        h, d = self.heads, self.head_dim
        return self.hidden * (h * d + 2 * self.kv_heads * d) + h * d * self.hidden \
            + 3 * self.hidden * self.intermediate

    def config(self):
        """A transformers config of this architecture (full attention in every layer), marked shape-only."""
        from transformers import AutoConfig

        kw: dict[str, Any] = dict(
            vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.intermediate,
            num_hidden_layers=self.layers, num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            head_dim=self.head_dim, max_position_embeddings=self.max_position_embeddings,
            rope_theta=float(self.rope_theta), tie_word_embeddings=self.tie_embeddings, bos_token_id=1,
            eos_token_id=2, pad_token_id=0)
        if self.rope_scaling:
            kw["rope_scaling"] = dict(self.rope_scaling)
        if self.model_type == "llama":
            kw["attention_bias"] = self.attention_bias
        elif self.model_type == "mistral":
            kw["sliding_window"] = None
        elif self.model_type == "qwen2":
            kw.update(use_sliding_window=False, sliding_window=None)
        config = AutoConfig.for_model(self.model_type, **kw)
        config.magicpig_shape_only = self.name
        return config


def _parse(name: str, f: dict, where: str) -> ModelShape:
    missing = [k for k in _REQUIRED if k not in f]
    if missing:
        raise ValueError(f"{where}: entry {name!r} lacks {', '.join(missing)}")
    if f["model_type"] not in MODEL_TYPES:
        raise ValueError(f"{where}: entry {name!r} has model_type {f['model_type']!r}; "
                         f"supported: {', '.join(MODEL_TYPES)}")
    return ModelShape(name, float(f["params_b"]), int(f["num_layers"]), int(f["num_heads"]), int(f["num_kv_heads"]),
                      int(f["head_dim"]), hidden=int(f["hidden"]), vocab=int(f["vocab"]),
                      tie_embeddings=bool(f["tie_embeddings"]), intermediate=int(f["intermediate"]),
                      model_type=str(f["model_type"]), hf_id=str(f["hf_id"]), rope_theta=float(f["rope_theta"]),
                      max_position_embeddings=int(f["max_position_embeddings"]),
                      attention_bias=bool(f["attention_bias"]), rope_scaling=f.get("rope_scaling"))


def load_shapes(path=None) -> dict[str, ModelShape]:
    """Every entry of model_shapes.yaml (``path``: another file of the same form), by key."""
    if path is None:
        return dict(_packaged())
    return _read(path)


def _read(path) -> dict[str, ModelShape]:
    import yaml

    with open(path, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    return {key: _parse(key, facts, str(path)) for key, facts in raw.items()}


@functools.lru_cache(maxsize=1)
def _packaged() -> dict[str, ModelShape]:
    with resources.as_file(shapes_file()) as path:
        return _read(path)


def shape_names() -> list[str]:
    """Keys of model_shapes.yaml (the names ``shape:NAME`` accepts)."""
    return list(_packaged())


def model_shape(model: str) -> ModelShape:
    """The stored shape of ``model``: a key of model_shapes.yaml, ``shape:KEY``, its hub id (or the id's last
    part), or an alias of a model ``magicpig.models`` loads by name (``smollm2``)."""
    shapes = _packaged()
    name = str(model).strip().removeprefix("shape:")
    name = ALIASES.get(name, name).lower()
    if name in shapes:
        return shapes[name]
    by_hub = {s.hf_id.lower(): s for s in shapes.values()}
    found = by_hub.get(name) or by_hub.get(name.rstrip("/").split("/")[-1]) \
        or next((s for s in shapes.values() if s.hf_id.lower().split("/")[-1] == name.rstrip("/").split("/")[-1]),
                None)
    if found is None:
        raise ValueError(f"model: no architecture facts for {model!r} in model_shapes.yaml; known: "
                         + ", ".join(f"shape:{k}" for k in shapes) + " (or their hub ids, or 'smollm2')")
    return found
