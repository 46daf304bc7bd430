"""Exact-softmax methods over a chosen key subset: dense, streaming (sink + local), TopK, Quest."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .base import (AttentionMethod, AttentionResult, attend_logits, budget_count, check_shapes,
                   default_scale, grouped_scores, per_head)
from .registry import register

NEG_INF = float("-inf")


def _mask_logits(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """keep: (B, n) or (B, H_kv, G, n) boolean."""
    if keep.dim() == 2:
        keep = keep[:, None, None, :]
    return scores.masked_fill(~keep, NEG_INF)


@register
@dataclass
class Dense(AttentionMethod):
    """Exact attention over every valid key."""

    name = "dense"
    dense_layers: tuple[int, ...] | None = None

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        valid = layout.valid()
        out, lse = attend_logits(_mask_logits(grouped_scores(q, k, default_scale(q, scale)), valid), v)
        n = per_head(valid, q.shape[1])
        return AttentionResult(out, lse, n, n, 0.0)


@register
@dataclass
class Streaming(AttentionMethod):
    """StreamingLLM-style static pattern: the first ``sinks`` and the last ``local`` keys."""

    name = "streaming"
    sinks: int = 4
    local: int = 64
    dense_layers: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.sinks < 0:
            raise ValueError(f"streaming: field 'sinks' must be >= 0, got {self.sinks}")
        if self.local < 0:
            raise ValueError(f"streaming: field 'local' must be >= 0, got {self.local}")

    def default_dense_layers(self, num_layers):
        return ()

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        keep = layout.sinks(self.sinks) | layout.recent(self.local)
        out, lse = attend_logits(_mask_logits(grouped_scores(q, k, default_scale(q, scale)), keep), v)
        H = q.shape[1]
        return AttentionResult(out, lse, per_head(keep, H), per_head(layout.valid(), H), 0.0)


@register
@dataclass
class TopK(AttentionMethod):
    """Oracle TopK: exact top-k keys by score per query head, renormalised softmax.

    ``budget`` < 1 is a fraction of the valid keys, >= 1 a key count.
    """

    name = "topk"
    budget: float = 0.02
    dense_layers: tuple[int, ...] | None = None

    def __post_init__(self):
        if not self.budget > 0:
            raise ValueError(f"topk: field 'budget' must be > 0 (fraction < 1 or count >= 1), got {self.budget}")

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        scores = _mask_logits(grouped_scores(q, k, default_scale(q, scale)), layout.valid())
        count = budget_count(self.budget, layout.num_valid())  # (B,)
        kmax = int(count.max())
        top = scores.topk(kmax, dim=-1).indices  # (B, Hkv, G, kmax)
        rank_ok = (torch.arange(kmax, device=q.device) < count[:, None, None, None]).expand_as(top)
        keep = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, top, rank_ok)
        out, lse = attend_logits(scores.masked_fill(~keep, NEG_INF), v)
        H = q.shape[1]
        return AttentionResult(out, lse, per_head(keep, H), per_head(layout.valid(), H), 0.5)


@register
@dataclass
class Quest(AttentionMethod):
    """Quest: pages of ``page_size`` keys summarised by elementwise min/max; keep the best pages
    (a ``ratio`` of the valid keys) plus the last ``local`` keys; exact softmax over the kept keys.

    Page score = Σ_d max(q_d·min_d, q_d·max_d), an upper bound of q·k within the page. Pages are
    counted from each sequence's first valid key; only whole pages before the local window compete.
    """

    name = "quest"
    page_size: int = 16
    ratio: float = 0.04
    local: int = 64
    dense_layers: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.page_size < 1:
            raise ValueError(f"quest: field 'page_size' must be >= 1, got {self.page_size}")
        if not 0 < self.ratio <= 1:
            raise ValueError(f"quest: field 'ratio' must be in (0, 1], got {self.ratio}")
        if self.local < 0:
            raise ValueError(f"quest: field 'local' must be >= 0, got {self.local}")

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        B, H, d = q.shape
        Hkv, n = k.shape[1], k.shape[2]
        ps = self.page_size
        valid = layout.valid()
        local = layout.recent(self.local)
        rel = layout.index() - layout.start[:, None]  # (B, n) position from the first valid key
        page = torch.where(valid, rel // ps, torch.zeros_like(rel))
        num_pages = max(1, math.ceil(n / ps))
        # a page competes when all of its keys are valid and before the local window
        window_lo = (n - self.local)
        page_end = layout.start[:, None] + (torch.arange(num_pages, device=q.device)[None] + 1) * ps
        page_ok = page_end <= min(window_lo, n)  # (B, P)
        idx = page[:, None, :, None].expand(B, Hkv, n, d)
        kf = k.float()
        big = torch.finfo(torch.float32).max
        kmin = torch.full((B, Hkv, num_pages, d), big, device=q.device).scatter_reduce(
            2, idx, kf.masked_fill(~valid[:, None, :, None], big), "amin")
        kmax = torch.full((B, Hkv, num_pages, d), -big, device=q.device).scatter_reduce(
            2, idx, kf.masked_fill(~valid[:, None, :, None], -big), "amax")
        qg = q.float().reshape(B, Hkv, H // Hkv, 1, d)
        page_score = torch.maximum(qg * kmin[:, :, None], qg * kmax[:, :, None]).sum(-1)  # (B,Hkv,G,P)
        page_score = page_score.masked_fill(~page_ok[:, None, None, :], NEG_INF)
        budget_pages = torch.ceil(self.ratio * layout.num_valid() / ps).to(torch.long)
        budget_pages = torch.minimum(budget_pages, page_ok.sum(-1))  # (B,)
        kp = max(1, int(budget_pages.max()))
        kp = min(kp, num_pages)
        top = page_score.topk(kp, dim=-1).indices
        rank_ok = (torch.arange(kp, device=q.device) < budget_pages[:, None, None, None]).expand_as(top)
        chosen = torch.zeros_like(page_score, dtype=torch.bool).scatter_(-1, top, rank_ok)  # (B,Hkv,G,P)
        pidx = page[:, None, None, :].expand(B, Hkv, H // Hkv, n)
        keep = (torch.gather(chosen, -1, pidx) & valid[:, None, None, :]) | local[:, None, None, :]
        scores = grouped_scores(q, k, default_scale(q, scale))
        out, lse = attend_logits(scores.masked_fill(~keep, NEG_INF), v)
        return AttentionResult(out, lse, per_head(keep, H), per_head(valid, H), 1.0 / ps)
