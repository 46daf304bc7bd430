"""MagicPIG's memory and compute overhead from a model's shape and (K, L): the paper's Table 8, computed.

Quantities (per sequence; ``n`` = context length, ``H_kv`` kv heads, ``d`` head dim, ``layers`` all layers):

* hash tables: every kv head of every layer keeps L tables that each hold the id of every token, so
  ``layers * H_kv * L * n * id_bytes`` (16-bit ids hold up to 65536 tokens, 32-bit ids beyond). This is the
  count the paper's 14 GB (96K, 32-bit) and 4.7 GB (64K, 16-bit) follow (in GiB, all 32 layers, ids only).
  What our tables hold differs in two ways, shown beside it: the dense layers keep no tables, and each
  table has CSR offsets, ``(2^K + 1) * 4`` bytes (``magicpig.cpu.table_nbytes``).
* random projector: one (d, K*L) Gaussian matrix in 16-bit floats, ``d * K * L * 2`` bytes.
* projection FLOPs (the paper's CO): each decode step hashes the query of every attention head and the new
  key of every kv head, ``(H + H_kv) * d * K * L`` multiply-adds per layer, against the linear projections the
  paper's Table 8 caption lists, "WQ, WK, WV, and MLP": ``hidden * (H*d + 2*H_kv*d) + 3 * hidden *
  intermediate`` (a gated MLP; the output projection WO is not in its list, and counting it too puts every
  row 7-10% under the paper's CO, while without it all six rows are within 3%).
"""
from __future__ import annotations

from dataclasses import dataclass

from magicpig.shapes import model_shape

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


def overhead(model: str, K: int, L: int, context: int, dense_layers: int = 2) -> Overhead:
    """Table 8's quantities of ``model`` with MagicPIG (K, L) at ``context`` tokens; ``dense_layers``: layers
    that attend exactly and keep no tables (magicpig's default keeps 2)."""
    if K < 1 or L < 1 or context < 1:
        raise ValueError(f"K, L, context: must be positive, got K={K}, L={L}, context={context}")
    s = model_shape(model)
    layers, kv, d = s.layers, s.kv_heads, s.head_dim
    ids = layers * kv * L * context
    held = (layers - dense_layers) * kv * L * (((1 << K) + 1) * 4 + context * (2 if context <= 65536 else 4))
    proj_macs = (s.heads + kv) * d * K * L
    qkv_mlp_macs = s.linear_macs_per_layer() - s.heads * d * s.hidden  # all but WO
    return Overhead(s.name, K, L, context,
                    tables_int16_bytes=ids * 2 if context <= 65536 else None, tables_int32_bytes=ids * 4,
                    tables_held_bytes=held, projector_bytes=d * K * L * 2,
                    projection_flops_share=proj_macs / qkv_mlp_macs)
