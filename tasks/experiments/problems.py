"""Decode problems taken from a capture: for one layer and one captured query position p, the query
attends to keys [0, p]; keys before ``n_prompt`` are prompt keys, later ones were generated.

Everything here works for any attention method of ``magicpig.methods`` through its ``attend``; the
per-layer state of a method (``prepare``) is built once per distinct prompt prefix and reused by every
query of that prefix, which is exactly what decoding does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from magicpig.methods import AttentionMethod, AttentionResult, KeyLayout, MagicPIG, parse_method

from magicpig_tasks.experiments.capture import Capture


@dataclass
class Problem:
    """One decode query of one layer.

    q: (1, H, d) float32; k, v: (1, H_kv, p+1, d) float32; layout: its KeyLayout (prompt_end =
    min(p+1, n_prompt)); position p; layer (model layer index); query index j into the capture.
    """

    layer: int
    j: int
    position: int
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    layout: KeyLayout

    @property
    def prompt_end(self) -> int:
        return int(self.layout.prompt_end[0])


def sparse_layers(capture: Capture) -> list[int]:
    """Captured layers that MagicPIG does not keep dense by default (layers 0, 16, 32, 48 that exist)."""
    dense = set(MagicPIG().dense_layer_set(capture.num_layers))
    return [i for i in capture.layers if i not in dense]


def select_layers(capture: Capture, layers: list[int] | None) -> list[int]:
    """``layers`` checked against the capture (None: every captured layer)."""
    if layers is None:
        return list(capture.layers)
    missing = [i for i in layers if i not in capture.layers]
    if missing:
        raise ValueError(f"layers {missing} were not captured; captured layers: {capture.layers}")
    return list(layers)


def iter_problems(capture: Capture, layer: int, queries: list[int] | None = None) -> Iterator[Problem]:
    """The decode problems of ``layer``, ordered by query index (``queries``: subset of indices)."""
    s = capture.layer_slot(layer)
    k_all = capture.keys[s].float().unsqueeze(0)
    v_all = capture.values[s].float().unsqueeze(0)
    for j in (range(capture.queries.shape[1]) if queries is None else queries):
        p = int(capture.query_positions[j])
        n = p + 1
        layout = KeyLayout.simple(1, n, min(n, capture.n_prompt))
        yield Problem(layer, j, p, capture.queries[s, j].float().unsqueeze(0), k_all[:, :, :n], v_all[:, :, :n],
                      layout)


class StateCache:
    """Method states keyed by (method spec, layer, prompt_end): ``prepare`` runs once per prefix."""

    def __init__(self):
        self._states: dict[tuple[str, int, int], object] = {}

    def get(self, method: AttentionMethod, problem: Problem):
        key = (method.spec(), problem.layer, problem.prompt_end)
        if key not in self._states:
            n0 = problem.prompt_end
            layout = KeyLayout.simple(1, n0, n0)
            self._states[key] = method.prepare(problem.k[:, :, :n0], problem.v[:, :, :n0], layout, problem.layer)
        return self._states[key]

    def clear(self) -> None:
        self._states.clear()


def run_method(method: AttentionMethod | str, problem: Problem, scale: float, *, states: StateCache | None = None,
               generator: torch.Generator | None = None) -> AttentionResult:
    """``method.attend`` on one problem, with the prefix state from ``states`` when given."""
    method = parse_method(method)
    state = states.get(method, problem) if states is not None else None
    return method.attend(problem.q, problem.k, problem.v, problem.layout, scale=scale, state=state,
                         layer_idx=problem.layer, generator=generator)


def relative_error(estimate: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """‖ô − o‖ / ‖o‖ per head: estimate, exact (B, H, d) -> (B, H) float32 (0/0 counts as 0)."""
    num = (estimate.float() - exact.float()).norm(dim=-1)
    den = exact.float().norm(dim=-1)
    return torch.where(den > 0, num / den.clamp_min(1e-30), num)


def static_count(problem: Problem, sinks: int, local: int) -> int:
    """How many keys of ``problem`` MagicPIG keeps exactly (sinks, local window, generated keys)."""
    from magicpig.methods import split_static_offloaded

    static, _ = split_static_offloaded(problem.layout, sinks, local)
    return int(static.sum())


@dataclass
class LayerBatch:
    """All captured queries of one layer at once, for experiments that need no attention method.

    q: (Q, H, d) float32; k, v: (H_kv, n, d) float32 (the whole cache); valid: (Q, n) bool, key i visible
    to query j (i <= position j); offloaded: (Q, n) bool, MagicPIG's sampled candidates for query j
    (visible prompt keys minus ``sinks`` first keys and the ``local`` last prompt keys).
    """

    layer: int
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    valid: torch.Tensor
    offloaded: torch.Tensor

    def grouped_queries(self) -> torch.Tensor:
        """(H_kv, Q, G, d): query head h = g*G + i reads kv-head g."""
        Q, H, d = self.q.shape
        Hkv = self.k.shape[0]
        return self.q.reshape(Q, Hkv, H // Hkv, d).permute(1, 0, 2, 3)

    def centers(self) -> torch.Tensor:
        """(H_kv, Q, d) mean of the offloaded keys of each query (zeros where none)."""
        w = self.offloaded.float()  # (Q, n)
        return torch.einsum("qn,gnd->gqd", w, self.k) / w.sum(-1).clamp_min(1)[None, :, None]

    def cosines(self, centered: bool) -> torch.Tensor:
        """(H_kv, Q, G, n) float32 cos(q, k_i - c_j) (``centered``) or cos(q, k_i), computed from dot
        products without materialising per-query centered keys."""
        qg = self.grouped_queries()  # (Hkv, Q, G, d)
        qk = torch.einsum("gqhd,gnd->gqhn", qg, self.k)
        kn2 = (self.k * self.k).sum(-1)[:, None, None, :]  # (Hkv,1,1,n)
        if centered:
            c = self.centers()  # (Hkv, Q, d)
            qc = torch.einsum("gqhd,gqd->gqh", qg, c)[..., None]
            kc = torch.einsum("gnd,gqd->gqn", self.k, c)[:, :, None, :]
            cc = (c * c).sum(-1)[:, :, None, None]
            qk = qk - qc
            kn2 = (kn2 - 2 * kc + cc).clamp_min(0)
        qn = qg.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        return (qk / qn / kn2.sqrt().clamp_min(1e-12)).clamp(-1, 1)


def layer_batch(capture: Capture, layer: int, *, sinks: int = 4, local: int = 64,
                queries: list[int] | None = None) -> LayerBatch:
    """The LayerBatch of ``layer`` (``queries``: subset of query indices, default all)."""
    from magicpig.methods import split_static_offloaded

    s = capture.layer_slot(layer)
    idx = list(range(capture.queries.shape[1])) if queries is None else list(queries)
    pos = capture.query_positions[idx]
    n = capture.n_keys
    ar = torch.arange(n)
    valid = ar[None, :] <= pos[:, None]
    offloaded = torch.zeros(len(idx), n, dtype=torch.bool)
    for r, p in enumerate(pos.tolist()):
        layout = KeyLayout.simple(1, p + 1, min(p + 1, capture.n_prompt))
        offloaded[r, : p + 1] = split_static_offloaded(layout, sinks, local)[1][0]
    return LayerBatch(layer, capture.queries[s, idx].float(), capture.keys[s].float(), capture.values[s].float(),
                      valid, offloaded)


def query_subset(capture: Capture, max_queries: int | None) -> list[int] | None:
    """Up to ``max_queries`` query indices spread evenly over the captured ones (None: all)."""
    nq = capture.queries.shape[1]
    if max_queries is None or max_queries >= nq:
        return None
    if max_queries < 1:
        raise ValueError(f"max_queries must be >= 1, got {max_queries}")
    return sorted({round(i * (nq - 1) / max(1, max_queries - 1)) for i in range(max_queries)})
