"""Shared helpers (no tests) of the tests of the CPU module (magicpig.cpu): random offloaded layers and a
reference of the sampled-only attention."""
from __future__ import annotations

import pytest
import torch

from magicpig import cpu, lsh


def require_module():
    if not cpu.available():
        try:
            cpu.load()
        except RuntimeError as exc:  # pragma: no cover - shows the compiler output
            pytest.fail(f"the CPU module does not build: {exc}")


def random_layer(B, Hkv, G, n_max, d, K, L, *, counts=None, seed=0, offset=0.0, dtype=torch.float32):
    """Random centered keys / values, their codes, queries and query codes (one projection per kv-head)."""
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(B, Hkv, n_max, d, generator=gen) + offset
    keys = keys - keys.mean(2, keepdim=True)
    values = torch.randn(B, Hkv, n_max, d, generator=gen)
    q = torch.randn(B, Hkv * G, d, generator=gen) * 2
    proj = lsh.make_projections(d, K, L, num_sets=Hkv, seed=seed + 1)
    keys = keys.to(dtype)
    values = values.to(dtype)
    codes = lsh.hash_codes(keys.float(), proj, K, L)  # (B, Hkv, n_max, L)
    q_codes = lsh.hash_codes(q.reshape(B, Hkv, G, d), proj, K, L).reshape(B, Hkv * G, L)
    if counts is None:
        counts = torch.full((B,), n_max, dtype=torch.int64)
    return keys, values, codes, torch.as_tensor(counts, dtype=torch.int64), q, q_codes


def reference_sets(codes, counts, q_codes, min_collisions):
    """[b][h] sorted int64 ids with >= min_collisions equal codes, rows < counts[b]."""
    B, Hkv = codes.shape[:2]
    H = q_codes.shape[1]
    G = H // Hkv
    sets = []
    for b in range(B):
        row = []
        for h in range(H):
            c = int(counts[b])
            hits = (codes[b, h // G, :c] == q_codes[b, h]).sum(-1)
            row.append((hits >= min_collisions).nonzero().squeeze(1))
        sets.append(row)
    return sets


def reference_attend(keys, values, counts, codes, q, q_codes, K, L, min_collisions, scale=None):
    """Torch reference of OffloadedLayer.attend: (out (B,H,d), lse (B,H), sampled (B,H))."""
    B, Hkv, _, d = keys.shape
    H = q.shape[1]
    G = H // Hkv
    scale = d ** -0.5 if scale is None else scale
    sets = reference_sets(codes, counts, q_codes, min_collisions)
    out = torch.zeros(B, H, d)
    lse = torch.full((B, H), float("-inf"))
    sampled = torch.zeros(B, H, dtype=torch.int32)
    for b in range(B):
        for h in range(H):
            idx = sets[b][h]
            sampled[b, h] = idx.numel()
            if idx.numel() == 0:
                continue
            k = keys[b, h // G, idx].float()
            v = values[b, h // G, idx].float()
            qq = q[b, h].float()
            cos = lsh.cosine(qq[None], k)[0]
            u = lsh.collision_probability(cos, K, L, min_collisions)
            logits = scale * (k @ qq) + lsh.importance_log_weight(u.float())
            lse[b, h] = torch.logsumexp(logits, 0)
            out[b, h] = torch.softmax(logits, 0) @ v
    return out, lse, sampled


def compact_reference(k, v, state, dtype=torch.float32):
    """The offloaded rows of the reference's prefill state (``MagicPIG.prepare``), compacted to the front of
    each sequence: (keys centred with state.center, values, codes = state.codes of the same rows, counts)."""
    offloaded = state.offloaded.cpu()
    B, Hkv, d, L = k.shape[0], k.shape[1], k.shape[3], state.codes.shape[-1]
    counts = offloaded.sum(1).to(torch.int64)
    m = int(counts.max())
    keys, values = torch.zeros(B, Hkv, m, d, dtype=dtype), torch.zeros(B, Hkv, m, d, dtype=dtype)
    codes = torch.zeros(B, Hkv, m, L, dtype=torch.int32)
    for b in range(B):
        idx = offloaded[b].nonzero().squeeze(1)
        c = idx.numel()
        keys[b, :, :c] = (k[b][:, idx].float() - state.center[b, :, None]).to(dtype)
        values[b, :, :c] = v[b][:, idx].to(dtype)
        codes[b, :, :c] = state.codes[b][:, idx]
    return keys, values, codes, counts


def isa_params():
    """ISA variants to test: every supported one (the scalar fallback always)."""
    return ["scalar", "avx2", "avx512"]


def use_isa(monkeypatch, name):
    require_module()
    if name not in cpu.supported_isas():
        pytest.skip(f"this CPU cannot run the {name} variant")
    monkeypatch.setenv(cpu.ISA_ENV, name)
    assert cpu.isa() == name
