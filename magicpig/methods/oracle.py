"""Oracle sampling: i.i.d. draws from the exact softmax, output = mean of the drawn values."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from magicpig.methods.base import (AttentionResult, BudgetMethod, budget_count, check_shapes, default_scale,
                                   grouped_scores, per_head)
from magicpig.methods.registry import register


@register
@dataclass(kw_only=True)
class OracleSampling(BudgetMethod):
    """Draw ``budget`` indices with replacement from softmax(q·k); the mean of their values is an
    unbiased estimate of the attention output. Cost2 counts the unique keys drawn.

    ``budget`` in (0, 1) is a fraction of the valid keys (rounded up), an integer >= 1 a draw count. The
    LSE reported is the exact one (the method needs every score anyway: Cost1 = 0.5).
    """

    name = "oracle"

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        B, H, d = q.shape
        Hkv, n = k.shape[1], k.shape[2]
        valid = layout.valid()
        scores = grouped_scores(q, k, default_scale(q, scale)).masked_fill(~valid[:, None, None, :], float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        count = budget_count(self.budget, layout.num_valid())  # (B,), 0 for a row without valid keys
        draws = int(count.max())
        if draws == 0:  # nothing valid anywhere: output 0, lse -inf
            zero = torch.zeros(B, H, device=q.device)
            return AttentionResult(torch.zeros(B, H, d, device=q.device), lse.reshape(B, H), zero,
                                   per_head(valid, H), 0.5)
        # an empty row draws from a placeholder uniform distribution; its draws are not taken
        probs = torch.softmax(scores.masked_fill(~torch.isfinite(lse)[..., None], 0.0), dim=-1).reshape(B * H, n)
        idx = torch.multinomial(probs.cpu() if generator is not None and generator.device.type == "cpu"
                                else probs, draws, replacement=True, generator=generator).to(q.device)
        idx = idx.reshape(B, Hkv, H // Hkv, draws)
        take = (torch.arange(draws, device=q.device) < count[:, None, None, None])  # (B,1,1,draws)
        vals = torch.gather(v[:, :, None].expand(B, Hkv, H // Hkv, n, d), 3,
                            idx[..., None].expand(*idx.shape, d)).float()
        vals = vals.masked_fill(~take[..., None], 0.0)  # untaken draws may point at padding
        out = vals.sum(3) / count.clamp_min(1)[:, None, None, None].to(torch.float32)
        # a row whose softmax is undefined (a NaN score, or +inf: a NaN or inf query or key) has no distribution
        # to draw from: its output is NaN, as exact attention's is, instead of draws from a placeholder
        undefined = torch.isnan(scores).any(-1) | torch.isnan(lse) | torch.isposinf(lse)  # (B, Hkv, G)
        out = out.masked_fill(undefined[..., None], float("nan"))
        hit = torch.zeros(B, Hkv, H // Hkv, n, device=q.device).scatter_(-1, idx, take.expand_as(idx).float())
        return AttentionResult(out.reshape(B, H, d), lse.reshape(B, H), per_head(hit > 0, H),
                               per_head(valid, H), 0.5)
