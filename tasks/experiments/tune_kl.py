"""Automatic choice of MagicPIG's (K, L) for a target sampling cost, from measured keys and queries.

The paper picks (K, L) by hand (the paper's Sec. 5 and Sec. 11). Here:

1. Measure the collision statistics: the distribution of cos(q, k_i - c) over the captured decode queries
   and the offloaded keys of MagicPIG's sparse layers (a fine histogram on [-1, 1]).
2. Predict the cost of every (K, L) as the mean of u(cos; K, L) over that distribution; for each K,
   take the L whose predicted cost is nearest the target (one candidate per K).
3. Predict each candidate's output error by simulation: keys sampled independently with their
   probabilities u_i, importance-weighted softmax exactly as MagicPIG computes it (no hashing).
4. Verify the best ``verify`` candidates (and the paper's hand-picked setting nearest the target) by
   measurement with the real method (SimHash tables, ≥2 collisions); choose the candidate with the lowest
   measured error among those whose measured cost is within ``tolerance`` of the target (else the one
   with the cost nearest the target). L is capped by ``max_L`` (default 300, the paper's largest): the
   hash tables' memory grows with L (the paper's Table 8), and without a cap the error keeps falling
   with larger K and L at equal cost.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Iterable

import pandas as pd
import torch

from magicpig import lsh

from magicpig_tasks.experiments.capture import Capture
from magicpig_tasks.experiments.problems import (StateCache, iter_problems, layer_batch, query_subset, relative_error, run_method,
                       select_layers, sparse_layers)

BINS = 4000


def paper_costs() -> dict[tuple[int, int], float]:
    """The paper's nominal sampled fraction per (K, L) of its RULER/LongBench settings (paper_reference.yaml)."""
    from magicpig_tasks.paper import nominal_costs

    return nominal_costs()


def paper_settings() -> list[tuple[int, int]]:
    """Every (K, L) the paper names (the paper's Sec. 5 and Sec. 11): RULER/LongBench, lm-eval, reasoning, longer contexts, 70B."""
    from magicpig_tasks.paper import kl_settings

    return [(m.K, m.L) for m in kl_settings("all")]


@dataclass
class CosineHistogram:
    """Counts of cos(q, k_i - c) in ``BINS`` equal bins over [-1, 1] (float64 counts, (BINS,))."""

    counts: torch.Tensor

    @property
    def centers(self) -> torch.Tensor:
        edges = torch.linspace(-1.0, 1.0, self.counts.numel() + 1, dtype=torch.float64)
        return (edges[:-1] + edges[1:]) / 2

    def mean_of(self, values: torch.Tensor) -> float:
        return float((values * self.counts).sum() / self.counts.sum().clamp_min(1))

    def predicted_cost(self, K: int, L: int, min_collisions: int = 2) -> float:
        return self.mean_of(lsh.collision_probability(self.centers, K, L, min_collisions))


def cosine_histogram(capture: Capture, layers: list[int], *, sinks: int = 4, local: int = 64,
                     centering: bool = True, bins: int = BINS, max_queries: int | None = None) -> CosineHistogram:
    """Histogram of the cosines the hash sees (query vs centered offloaded key) over ``layers``."""
    counts = torch.zeros(bins, dtype=torch.float64)
    queries = query_subset(capture, max_queries)
    for layer in layers:
        batch = layer_batch(capture, layer, sinks=sinks, local=local, queries=queries)
        cos = batch.cosines(centering)
        cos = cos[batch.offloaded[None, :, None, :].expand_as(cos)]
        counts += torch.histc(cos.double(), bins=bins, min=-1.0, max=1.0)
    return CosineHistogram(counts)


def l_for_cost(hist: CosineHistogram, K: int, target: float, *, max_L: int = 300, slack: float = 0.1,
               min_collisions: int = 2) -> int | None:
    """The L (2 <= L <= max_L, K*L <= MAX_KL) whose predicted cost is nearest ``target``; None when even
    that L misses the target by more than ``slack`` (relative)."""
    lo, hi = max(2, min_collisions), min(max_L, lsh.MAX_KL // K)
    if hi < lo:
        return None
    while hi - lo > 1:  # the predicted cost increases with L
        mid = (lo + hi) // 2
        if hist.predicted_cost(K, mid, min_collisions) < target:
            lo = mid
        else:
            hi = mid
    best = min((lo, hi), key=lambda L: abs(hist.predicted_cost(K, L, min_collisions) - target))
    return best if abs(hist.predicted_cost(K, best, min_collisions) - target) <= slack * target else None


def simulate_error(capture: Capture, layers: list[int], K: int, L: int, *, draws: int = 4, seed: int = 0,
                   sinks: int = 4, local: int = 64, max_queries: int | None = 4) -> tuple[float, float]:
    """(mean simulated cost, mean relative error) of MagicPIG when each offloaded key is sampled
    independently with its collision probability u_i (no hashing), importance-weighted like the method."""
    gen = torch.Generator().manual_seed(seed)
    queries = query_subset(capture, max_queries)
    errs, costs = [], []
    for layer in layers:
        b = layer_batch(capture, layer, sinks=sinks, local=local, queries=queries)
        qg = b.grouped_queries()  # (Hkv, Q, G, d)
        logits = torch.einsum("gqhd,gnd->gqhn", qg, b.k) * capture.scale
        logits = logits.masked_fill(~b.valid[None, :, None, :], float("-inf"))
        exact = torch.softmax(logits, -1) @ b.v[:, None]  # (Hkv, Q, G, d)
        u = lsh.collision_probability(b.cosines(True), K, L).float()
        corr = lsh.importance_log_weight(u)
        off = b.offloaded[None, None, :, None, :]  # (1, 1, Q, 1, n)
        static = (b.valid & ~b.offloaded)[None, None, :, None, :]
        pick = (torch.rand((draws,) + u.shape, generator=gen) < u) & off  # (R, Hkv, Q, G, n)
        lg = torch.where(pick, logits + corr, logits).masked_fill(~(pick | static), float("-inf"))
        est = torch.softmax(lg, -1) @ b.v[None, :, None]  # (R, Hkv, Q, G, d)
        errs.append(relative_error(est.flatten(0, -2)[None], exact.expand_as(est).flatten(0, -2)[None]).mean())
        costs.append((pick.sum(-1).float() / off.sum(-1).clamp_min(1)).mean())
    return float(torch.stack(costs).mean()), float(torch.stack(errs).mean())


def measure(capture: Capture, layers: list[int], K: int, L: int, *, seed: int = 0, sinks: int = 4,
            local: int = 64, max_queries: int | None = None) -> tuple[float, float]:
    """(mean sampled fraction, mean relative error) of the real MagicPIG method over ``layers`` × queries ×
    heads, with projections seeded by 43 + seed."""
    spec = f"magicpig:K={K},L={L},sinks={sinks},local={local},seed={43 + seed}"
    costs, errs = [], []
    queries = query_subset(capture, max_queries)
    for layer in layers:
        states = StateCache()
        for pb in iter_problems(capture, layer, queries):
            exact = run_method("dense", pb, capture.scale).output
            res = run_method(spec, pb, capture.scale, states=states)
            costs.append(res.cost2)
            errs.append(relative_error(res.output, exact).mean())
    return sum(costs) / len(costs), float(torch.stack(errs).mean())


@dataclass
class TuneResult:
    """The choice and the evidence: ``K``, ``L``, ``measured_cost``, ``relative_error`` (measured),
    ``predicted_cost``, ``predicted_error``; ``baseline``: the paper's setting for the target cost (by the
    paper's nominal costs), measured the same way; ``matched_baseline``: of every setting the paper names,
    the one whose predicted cost on these keys is nearest the target, measured; ``candidates``: one dict
    per candidate."""

    target_cost: float
    K: int
    L: int
    measured_cost: float
    relative_error: float
    predicted_cost: float
    predicted_error: float
    within_tolerance: bool
    tolerance: float
    baseline: dict
    matched_baseline: dict
    layers: list[int]
    candidates: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def tune_kl(capture: Capture, target_cost: float, *, layers: list[int] | None = None,
            Ks: Iterable[int] = range(6, 14), max_L: int = 300, verify: int = 3, tolerance: float = 0.25,
            seed: int = 0,
            sinks: int = 4, local: int = 64, sim_draws: int = 4, max_queries: int | None = 8,
            sim_queries: int | None = 4, progress=None) -> TuneResult:
    """Choose (K, L) for ``target_cost`` (a sampled fraction in (0, 1)) on ``capture``; see the module doc."""
    if not 0 < target_cost < 1:
        raise ValueError(f"target_cost must be a fraction in (0, 1), got {target_cost}")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance}")
    if verify < 1:
        raise ValueError(f"verify must be >= 1, got {verify}")
    Ks = [int(k) for k in Ks]
    if max_L < 2:
        raise ValueError(f"max_L must be >= 2, got {max_L}")
    bad = [k for k in Ks if not 1 <= k <= lsh.MAX_K]
    if bad:
        raise ValueError(f"Ks must lie in [1, {lsh.MAX_K}], got {bad}")
    sparse = sparse_layers(capture)  # MagicPIG runs only there: dense layers never enter the choice
    layers = sparse if layers is None else [i for i in select_layers(capture, layers) if i in sparse]
    if not layers:
        raise ValueError("no layers to tune on (every chosen layer is dense in MagicPIG)")
    say = progress or (lambda msg: None)
    say(f"cosine histogram over {len(layers)} layers")
    hist = cosine_histogram(capture, layers, sinks=sinks, local=local, max_queries=max_queries)
    cands = []
    for K in Ks:
        L = l_for_cost(hist, K, target_cost, max_L=max_L)
        if L is None:
            continue
        sim_cost, sim_err = simulate_error(capture, layers, K, L, draws=sim_draws, seed=seed, sinks=sinks,
                                           local=local, max_queries=sim_queries)
        cands.append({"K": K, "L": L, "predicted_cost": hist.predicted_cost(K, L), "simulated_cost": sim_cost,
                      "predicted_error": sim_err, "measured_cost": None, "relative_error": None})
        say(f"candidate K={K} L={L}: predicted cost {cands[-1]['predicted_cost']:.4f}, "
            f"simulated error {sim_err:.4f}")
    if not cands:
        raise ValueError(f"no (K, L) with K in {Ks} and L <= {max_L} reaches target_cost={target_cost} "
                         "within 10% (predicted)")
    cands.sort(key=lambda c: c["predicted_error"])
    for c in cands[:verify]:
        c["measured_cost"], c["relative_error"] = measure(capture, layers, c["K"], c["L"], seed=seed,
                                                          sinks=sinks, local=local, max_queries=max_queries)
        say(f"measured K={c['K']} L={c['L']}: cost {c['measured_cost']:.4f}, error {c['relative_error']:.4f}")
    verified = [c for c in cands if c["measured_cost"] is not None]
    inside = [c for c in verified if abs(c["measured_cost"] - target_cost) <= tolerance * target_cost]
    best = (min(inside, key=lambda c: c["relative_error"]) if inside
            else min(verified, key=lambda c: abs(c["measured_cost"] - target_cost)))
    costs = paper_costs()
    bK, bL = min(costs, key=lambda kl: abs(math.log(costs[kl] / target_cost)))
    b_cost, b_err = measure(capture, layers, bK, bL, seed=seed, sinks=sinks, local=local,
                            max_queries=max_queries)
    baseline = {"K": bK, "L": bL, "paper_cost": costs[(bK, bL)], "measured_cost": b_cost,
                "relative_error": b_err, "predicted_cost": hist.predicted_cost(bK, bL)}
    mK, mL = min(paper_settings(), key=lambda kl: abs(math.log(hist.predicted_cost(*kl) / target_cost)))
    if (mK, mL) == (bK, bL):
        m_cost, m_err = b_cost, b_err
    else:
        m_cost, m_err = measure(capture, layers, mK, mL, seed=seed, sinks=sinks, local=local,
                                max_queries=max_queries)
    matched = {"K": mK, "L": mL, "measured_cost": m_cost, "relative_error": m_err,
               "predicted_cost": hist.predicted_cost(mK, mL)}
    say(f"paper setting for this cost ({bK},{bL}): cost {b_cost:.4f}, error {b_err:.4f}; paper setting nearest "
        f"the target on these keys ({mK},{mL}): cost {m_cost:.4f}, error {m_err:.4f}")
    return TuneResult(target_cost=target_cost, K=best["K"], L=best["L"], measured_cost=best["measured_cost"],
                      relative_error=best["relative_error"], predicted_cost=best["predicted_cost"],
                      predicted_error=best["predicted_error"],
                      within_tolerance=abs(best["measured_cost"] - target_cost) <= tolerance * target_cost,
                      tolerance=tolerance, baseline=baseline, matched_baseline=matched, layers=layers,
                      candidates=cands)


def candidates_frame(result: TuneResult) -> pd.DataFrame:
    return pd.DataFrame(result.candidates).assign(target_cost=result.target_cost)
