"""Exact-softmax methods over a chosen key subset: dense, streaming (sink + local), TopK, Quest."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from magicpig.methods.base import (AttentionMethod, AttentionResult, BudgetMethod, attend_logits, budget_count,
                                   check_min, check_shapes, default_scale, grouped_scores, per_head)
from magicpig.methods.registry import register

NEG_INF = float("-inf")


def _mask_logits(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """keep: (B, n) or (B, H_kv, G, n) boolean."""
    if keep.dim() == 2:
        keep = keep[:, None, None, :]
    return scores.masked_fill(~keep, NEG_INF)


@register
@dataclass(kw_only=True)
class Dense(AttentionMethod):
    """Exact attention over every valid key."""

    name = "dense"

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        valid = layout.valid()
        out, lse = attend_logits(_mask_logits(grouped_scores(q, k, default_scale(q, scale)), valid), v, layout)
        n = per_head(valid, q.shape[1])
        return AttentionResult(out, lse, n, n, 0.0)


@register
@dataclass(kw_only=True)
class Streaming(AttentionMethod):
    """StreamingLLM-style static pattern: the first ``sinks`` and the last ``local`` keys."""

    name = "streaming"
    sinks: int = 4
    local: int = 64

    def __post_init__(self):
        super().__post_init__()
        check_min(self, 0, "sinks", "local")
        if self.sinks == 0 and self.local == 0:
            raise ValueError("streaming: fields 'sinks' and 'local' are both 0, so no key would be attended; "
                             "give at least one of them a value >= 1")

    def default_dense_layers(self, num_layers):
        return ()

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        keep = layout.sinks(self.sinks) | layout.recent(self.local)
        out, lse = attend_logits(_mask_logits(grouped_scores(q, k, default_scale(q, scale)), keep), v, layout)
        H = q.shape[1]
        return AttentionResult(out, lse, per_head(keep, H), per_head(layout.valid(), H), 0.0)


@register
@dataclass(kw_only=True)
class TopK(BudgetMethod):
    """Oracle TopK: exact top-k keys by score per query head, renormalised softmax; ``budget`` keys (a
    fraction of the valid keys or a count, ``BudgetMethod``)."""

    name = "topk"

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        scores = _mask_logits(grouped_scores(q, k, default_scale(q, scale)), layout.valid())
        count = budget_count(self.budget, layout.num_valid())  # (B,)
        kmax = int(count.max())
        top = scores.topk(kmax, dim=-1).indices  # (B, Hkv, G, kmax)
        rank_ok = (torch.arange(kmax, device=q.device) < count[:, None, None, None]).expand_as(top)
        keep = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, top, rank_ok)
        out, lse = attend_logits(scores.masked_fill(~keep, NEG_INF), v, layout)
        H = q.shape[1]
        return AttentionResult(out, lse, per_head(keep, H), per_head(layout.valid(), H), 0.5)


@register
@dataclass(kw_only=True)
class Quest(AttentionMethod):
    """Quest: the prompt is cut into pages of ``page_size`` keys, each summarised by the elementwise min and
    max of its keys; the best pages are attended exactly together with everything that is not paged.

    As in the original code, per row with ``n_prompt`` valid prompt keys, the pages cover the first
    ``P = max(0, n_prompt - local) // page_size * page_size`` prompt keys (counted from the row's first
    valid key); the prompt tail after them (the last ``local`` prompt keys plus up to ``page_size - 1``
    more) and every generated key are always kept. Budget: ``ceil(ratio * n_prompt / page_size)`` pages,
    at most the row's pages, i.e. ``ratio`` is the fraction of the prompt given to selected pages, on top
    of the always-kept keys; ``ratio=1`` keeps every key (exact attention).

    Page score = Σ_d max(q_d·min_d, q_d·max_d), an upper bound of q·k within the page.
    """

    name = "quest"
    page_size: int = 16
    ratio: float = 0.04
    local: int = 64

    def __post_init__(self):
        super().__post_init__()
        check_min(self, 1, "page_size")
        if not 0 < self.ratio <= 1:
            raise ValueError(f"quest: field 'ratio' must be in (0, 1], got {self.ratio}")
        check_min(self, 0, "local")

    def pages(self, layout) -> tuple[torch.Tensor, torch.Tensor]:
        """(pages (B,), budget (B,)): the number of pages of each row and how many of them are selected."""
        ps = self.page_size
        n_prompt = (layout.prompt_end - layout.start).clamp_min(0)
        pages = (n_prompt - self.local).clamp_min(0) // ps
        budget = torch.ceil(self.ratio * n_prompt.double() / ps - 1e-9).to(torch.long)  # 1e-9: 0.07*100/7 is 1
        return pages, torch.minimum(budget, pages)

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        B, H, d = q.shape
        Hkv, n = k.shape[1], k.shape[2]
        G, ps = H // Hkv, self.page_size
        valid = layout.valid()
        pages, budget = self.pages(layout)
        pmax, kp = int(pages.max()), int(budget.max())
        rel = layout.index() - layout.start[:, None]  # (B, n) position from the row's first valid key
        paged = valid & (rel < (pages * ps)[:, None])
        keep = (valid & ~paged)[:, None, None, :].expand(B, Hkv, G, n)
        if kp > 0:
            # the keys of page j of row b are start_b + j*ps .. start_b + (j+1)*ps - 1: all valid
            pos = (layout.start[:, None] + torch.arange(pmax * ps, device=q.device)[None]).clamp_max(n - 1)
            kpg = torch.gather(k, 2, pos[:, None, :, None].expand(B, Hkv, pmax * ps, d)).float()
            kpg = kpg.reshape(B, Hkv, pmax, ps, d)
            kmin, kmax = kpg.amin(3), kpg.amax(3)  # (B, Hkv, P, d)
            qg = q.float().reshape(B, Hkv, G, d)
            # Σ_d max(q_d·min_d, q_d·max_d) = relu(q)·max + min(q, 0)·min, since min_d <= max_d
            score = qg.clamp_min(0) @ kmax.transpose(-1, -2) + qg.clamp_max(0) @ kmin.transpose(-1, -2)
            page_ok = torch.arange(pmax, device=q.device)[None] < pages[:, None]  # (B, P)
            score = score.masked_fill(~page_ok[:, None, None, :], NEG_INF)
            top = score.topk(kp, dim=-1).indices
            rank_ok = (torch.arange(kp, device=q.device) < budget[:, None, None, None]).expand_as(top)
            chosen = torch.zeros(B, Hkv, G, pmax + 1, dtype=torch.bool, device=q.device)
            chosen.scatter_(-1, top, rank_ok)  # column pmax: "not paged", never chosen
            key_page = torch.where(paged, rel // ps, torch.full_like(rel, pmax))
            keep = keep | torch.gather(chosen, -1, key_page[:, None, None, :].expand(B, Hkv, G, n))
        scores = grouped_scores(q, k, default_scale(q, scale))
        out, lse = attend_logits(scores.masked_fill(~keep, NEG_INF), v, layout)
        return AttentionResult(out, lse, per_head(keep, H), per_head(valid, H), 1.0 / ps)
