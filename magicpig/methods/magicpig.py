"""MagicPIG: LSH sampling with importance weights (the paper's Sec. 4), the pure-torch reference backend."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from magicpig import lsh
from magicpig.methods.base import (AttentionMethod, AttentionResult, KeyLayout, attend_logits, check_min, check_shapes,
                                   default_scale, grouped_scores, masked_keys, per_head)
from magicpig.methods.registry import register

CHUNK = 8192  # keys per block when counting collisions (bounds memory at B*H*CHUNK*L bytes)
ProjectionDraw = Literal["per_sample", "fixed"]
PROJECTION_DRAWS = get_args(ProjectionDraw)
PAPER_DENSE_LAYERS = (0, 16, 32, 48)  # the original's accuracy reference: these layers of any model


@dataclass
class MagicPIGState:
    """What prefill leaves for decoding one layer.

    center: (B, H_kv, d) float32 mean of the offloaded keys (zeros without centering);
    codes: (B, H_kv, n0, L) int32 bucket codes of the n0 prefill keys (centered);
    offloaded: (B, n0) bool, the sampled candidates S0; projections: (S, d, K*L), S = H_kv or 1.
    """

    center: torch.Tensor
    codes: torch.Tensor
    offloaded: torch.Tensor
    projections: torch.Tensor

    @property
    def n_prefill(self) -> int:
        return int(self.codes.shape[2])


def split_static_offloaded(layout: KeyLayout, sinks: int, local: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(static, offloaded) masks (B, n): static = sinks ∪ last ``local`` prompt keys ∪ generated keys;
    offloaded = every other valid key."""
    valid = layout.valid()
    static = valid & (layout.sinks(sinks) | layout.prompt_local(local) | layout.generated())
    return static, valid & ~static


@register
@dataclass(kw_only=True)
class MagicPIG(AttentionMethod):
    """LSH sampling: a key of S0 is sampled iff its SimHash code equals the query's in at least
    ``min_collisions`` of ``L`` tables of ``K`` bits; its logit gets -ln(u + 1e-4) where u is its
    collision probability. Sinks, the last ``local`` prompt keys and generated keys are exact.

    Projections: one Gaussian (d, K*L) matrix per kv-head per block of 16 layers, seeded from ``seed``
    (the paper's accuracy setting); ``share_projections=true`` uses one matrix for every layer and head
    (the paper's system setting). ``projection_draw=per_sample`` (default; the original draws new
    projections for every sample): the evaluation runner decodes each sample with
    ``seed = lsh.sample_seed(seed, sample id)`` (``for_sample``) and records it; ``fixed``: every sample
    uses ``seed``. A direct ``attend`` / engine call always uses ``seed`` as given.
    """

    name = "magicpig"
    system_backend = "offload"
    K: int = 10
    L: int = 150
    sinks: int = 4
    local: int = 64
    centering: bool = True
    min_collisions: int = 2
    seed: int = 43
    share_projections: bool = False
    projection_draw: ProjectionDraw = "per_sample"

    def __post_init__(self):
        super().__post_init__()
        try:
            lsh.check_kl(self.K, self.L, self.min_collisions)
            lsh.check_seed(self.seed)
        except ValueError as exc:
            raise ValueError(f"magicpig: {exc}") from None
        check_min(self, 0, "sinks", "local")
        if self.projection_draw not in PROJECTION_DRAWS:
            raise ValueError(f"magicpig: field 'projection_draw' must be one of {', '.join(PROJECTION_DRAWS)}, "
                             f"got {self.projection_draw!r}")

    def default_dense_layers(self, num_layers: int) -> tuple[int, ...]:
        """The original's rule: layers 0, 16, 32 and 48, those the model has ({0, 16} of 32 layers,
        {0, 16, 32} of 48, {0, 16, 32, 48} of 80, {0} up to 16)."""
        return tuple(i for i in PAPER_DENSE_LAYERS if i < num_layers)

    def for_sample(self, sample_id: str) -> "MagicPIG":
        """Per-sample projections (``projection_draw=per_sample``): the seed becomes
        ``lsh.sample_seed(seed, sample_id)``; ``fixed``: unchanged."""
        if self.projection_draw == "fixed":
            return self
        return dataclasses.replace(self, seed=lsh.sample_seed(self.seed, sample_id))

    def projections(self, layer_idx: int, num_kv_heads: int, head_dim: int,
                    device: torch.device | str | None = None) -> torch.Tensor:
        """(S, d, K*L) float32 projections for ``layer_idx``: S = num_kv_heads, or 1 when shared."""
        if self.share_projections:
            return lsh.make_projections(head_dim, self.K, self.L, num_sets=1, seed=self.seed, device=device)
        return lsh.make_projections(head_dim, self.K, self.L, num_sets=num_kv_heads,
                                    seed=self.seed + layer_idx // 16, device=device)

    def make_decoder(self, k, v, layout, layer_idx, ctx):
        """Backend ``offload``: the paper's system path -- the device + CPU split (``ctx.offload``) on the
        sparse layers, fused exact attention in the model's dtype (``ctx.exact``) on the dense ones.
        Backend ``reference``: this method's ``attend`` on the device (the base's choice)."""
        if ctx.backend != "offload":
            return super().make_decoder(k, v, layout, layer_idx, ctx)
        if ctx.is_dense(layer_idx):
            return ctx.exact(k, v, layout, layer_idx)
        return ctx.offload(self, k, v, layout, layer_idx)

    def prepare(self, k, v, layout, layer_idx=0) -> MagicPIGState:
        _, offloaded = split_static_offloaded(layout, self.sinks, self.local)
        kf = masked_keys(k, layout)  # padding may hold NaN: it must not reach the center
        if self.centering:
            # a key with a non-finite coordinate stays out of the mean: through the center it would reach every
            # key of its head (inf - inf = NaN), where exact attention keeps it to its own score
            finite = torch.isfinite(kf).all(-1, keepdim=True)  # (B, Hkv, n, 1)
            w = (offloaded[:, None, :, None] & finite).to(torch.float32)
            center = (kf.masked_fill(~finite, 0.0) * w).sum(2) / w.sum(2).clamp_min(1.0)
        else:
            center = torch.zeros(kf.shape[0], kf.shape[1], kf.shape[3], device=k.device)
        proj = self.projections(layer_idx, k.shape[1], k.shape[-1], device=k.device)
        codes = lsh.hash_codes(kf - center[:, :, None], proj, self.K, self.L)
        return MagicPIGState(center, codes, offloaded, proj)

    def attend(self, q, k, v, layout, *, scale=None, state=None, layer_idx=0, generator=None):
        check_shapes(q, k, v, layout)
        if state is None:
            state = self.prepare(k, v, layout, layer_idx)
        B, H, d = q.shape
        Hkv, n = k.shape[1], k.shape[2]
        G = H // Hkv
        n0 = state.n_prefill
        if n0 > n:
            raise ValueError(f"magicpig: state covers {n0} keys but the cache holds only {n}")
        valid = layout.valid()
        offloaded = torch.zeros_like(valid)
        offloaded[:, :n0] = state.offloaded
        static = valid & ~offloaded

        kc = k.float() - state.center[:, :, None]
        logits = grouped_scores(q, kc, default_scale(q, scale))  # (B, Hkv, G, n)
        qg = q.float().reshape(B, Hkv, G, d)
        qcodes = lsh.hash_codes(qg, state.projections, self.K, self.L)  # (B, Hkv, G, L)
        sampled = torch.zeros(B, Hkv, G, n, dtype=torch.bool, device=q.device)
        correction = torch.zeros(B, Hkv, G, n, device=q.device)
        for lo in range(0, n0, CHUNK):
            hi = min(n0, lo + CHUNK)
            hits = (state.codes[:, :, None, lo:hi, :] == qcodes[:, :, :, None, :]).sum(-1, dtype=torch.int32)
            sampled[..., lo:hi] = (hits >= self.min_collisions) & offloaded[:, None, None, lo:hi]
            cos = lsh.cosine(qg, kc[:, :, lo:hi])
            u = lsh.collision_probability(cos, self.K, self.L, self.min_collisions)
            weight = lsh.importance_log_weight(u.float())
            # no collision probability for a key with a non-finite coordinate (its cosine is NaN): its logit
            # is kept as exact attention has it; a non-finite query keeps its NaN weights, so its head is NaN
            # as the CPU kernel and exact attention make it
            bad_key = ~torch.isfinite(kc[:, :, lo:hi]).all(-1)[:, :, None, :]
            correction[..., lo:hi] = torch.where(bad_key, 0.0, weight)
        keep = sampled | static[:, None, None, :]
        logits = torch.where(sampled, logits + correction, logits).masked_fill(~keep, float("-inf"))
        out, lse = attend_logits(logits, v, layout)
        return AttentionResult(out, lse, per_head(sampled, H), per_head(offloaded, H), 0.0)
