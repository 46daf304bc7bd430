"""MagicPIG's memory and compute overhead from a model's shape and (K, L): the paper's Table 8, computed.

Quantities (per sequence; ``n`` = context length, ``H_kv`` kv heads, ``d`` head dim, ``layers`` all layers):

* hash tables: every kv head of every layer keeps L tables that each hold the id of every token, so
  ``layers * H_kv * L * n * id_bytes`` (16-bit ids hold up to 65536 tokens, 32-bit ids beyond). This is the
  count the paper's 14 GB (96K, 32-bit) and 4.7 GB (64K, 16-bit) follow (in GiB, all 32 layers, ids only).
  What our tables hold differs in two ways, shown beside it: the dense layers keep no tables, and each
  table has CSR offsets, ``(2^K + 1) * 4`` bytes (``magicpig.cpu.table_nbytes``).
* random projector: one (d, K*L) Gaussian matrix in 16-bit floats, ``d * K * L * 2`` bytes.
* projection FLOPs: each decode step hashes the query of every attention head and the new key of every kv
  head, ``(H + H_kv) * d * K * L`` multiply-adds per layer, against the layer's linear layers
  ``hidden * (H*d + 2*H_kv*d) + H*d*hidden + 3 * hidden * intermediate`` (q, k, v, o and a gated MLP).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SHAPES_FILE = Path(__file__).resolve().parents[1] / "data" / "model_shapes.yaml"
GIB = 1024 ** 3


@dataclass(frozen=True)
class Overhead:
    """Table 8's quantities for one (model, K, L, context)."""

    model: str
    K: int
    L: int
    context: int
    tables_int16_bytes: int | None  # None: the context does not fit 16-bit ids
    tables_int32_bytes: int
    tables_held_bytes: int  # what magicpig's tables hold: sparse layers only, ids + CSR offsets
    projector_bytes: int
    projection_flops_share: float

    def row(self) -> dict:
        return {"model": self.model, "K": self.K, "L": self.L, "context": self.context,
                "tables_int16_gib": None if self.tables_int16_bytes is None else self.tables_int16_bytes / GIB,
                "tables_int32_gib": self.tables_int32_bytes / GIB, "tables_held_gib": self.tables_held_bytes / GIB,
                "projector_kb": self.projector_bytes / 1000, "projection_flops_share": self.projection_flops_share}


def shape_fields(model: str, path: Path | str = SHAPES_FILE) -> dict:
    """The config.json fields of ``model`` (a key of model_shapes.yaml, or ``shape:KEY``)."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        shapes = yaml.safe_load(fh)
    key = model.removeprefix("shape:")
    if key not in shapes:
        raise ValueError(f"model: {model!r} is not in {Path(path).name}; known: {sorted(shapes)}")
    return shapes[key]


def linear_macs_per_layer(s: dict) -> int:
    """Multiply-adds of one layer's linear layers for one token: q, k, v, o projections and a gated MLP."""
    h, d, hidden = s["num_heads"], s["head_dim"], s["hidden"]
    attn = hidden * (h * d + 2 * s["num_kv_heads"] * d) + h * d * hidden
    return attn + 3 * hidden * s["intermediate"]


def overhead(model: str, K: int, L: int, context: int, dense_layers: int = 2) -> Overhead:
    """Table 8's quantities of ``model`` with MagicPIG (K, L) at ``context`` tokens; ``dense_layers``: layers
    that attend exactly and keep no tables (magicpig's default keeps 2)."""
    if K < 1 or L < 1 or context < 1:
        raise ValueError(f"K, L, context: must be positive, got K={K}, L={L}, context={context}")
    s = shape_fields(model)
    layers, kv, d = s["num_layers"], s["num_kv_heads"], s["head_dim"]
    ids = layers * kv * L * context
    held = (layers - dense_layers) * kv * L * (((1 << K) + 1) * 4 + context * (2 if context <= 65536 else 4))
    proj_macs = (s["num_heads"] + kv) * d * K * L
    return Overhead(model.removeprefix("shape:"), K, L, context,
                    tables_int16_bytes=ids * 2 if context <= 65536 else None, tables_int32_bytes=ids * 4,
                    tables_held_bytes=held, projector_bytes=d * K * L * 2,
                    projection_flops_share=proj_macs / linear_macs_per_layer(s))
