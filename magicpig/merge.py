"""Exact merge of two partial attentions over disjoint key sets by their log-sum-exps."""
from __future__ import annotations

import torch


def merge_attention(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
                    lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine softmax-attention outputs of two disjoint key sets into the output over their union.

    out_*: (..., d); lse_*: (...) natural-log log-sum-exp of each set's logits (-inf for an empty set).
    Returns (out, lse) in float32. Two empty sets give output 0 and lse -inf, never NaN.
    """
    lse_a, lse_b = lse_a.float(), lse_b.float()
    m = torch.maximum(lse_a, lse_b)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    wa = torch.exp(lse_a - m_safe)
    wb = torch.exp(lse_b - m_safe)
    total = wa + wb
    denom = total.clamp_min(torch.finfo(torch.float32).tiny)
    out = (wa.unsqueeze(-1) * out_a.float() + wb.unsqueeze(-1) * out_b.float()) / denom.unsqueeze(-1)
    lse = torch.where(total > 0, m_safe + torch.log(denom), torch.full_like(m, float("-inf")))
    return out, lse
