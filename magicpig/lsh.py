"""SimHash machinery of MagicPIG: projections, key centering, bucket codes, collision probability.

Shapes follow the paper (the paper's Sec. 4): a Gaussian matrix ``W`` of shape ``(d, K*L)``; table ``j``
uses columns ``j*K .. j*K+K-1``; bit ``b`` of a table's code is ``x·W[:, j*K+b] > 0`` weighted ``2**b``.
"""
from __future__ import annotations

import hashlib
import math

import torch

MAX_K = 16  # bucket codes are stored in 16 bits by the CPU module
MAX_KL = 8192  # d * K*L floats per projection set; beyond this hashing costs more than attention
IMPORTANCE_FLOOR = 1e-4  # logits of sampled keys get -ln(u + 1e-4): at most ln(1e4) of up-weighting
MAX_SEED = 2**62 - 1  # projection seeds; + layer // 16 stays inside torch's 64-bit seed range


def check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}] (2**62 - 1), got {seed!r}")


def sample_seed(seed: int, sample_id: object) -> int:
    """The projection seed of one sample: a hash of (seed, sample id) in [0, MAX_SEED].

    Deterministic across processes and machines (blake2b, not Python's salted ``hash``), so a resumed or
    re-run evaluation draws the same projections for the same sample.
    """
    check_seed(seed)
    digest = hashlib.blake2b(f"{seed}:{sample_id}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (MAX_SEED + 1)


def check_kl(K: int, L: int, min_collisions: int = 2) -> None:
    """Raise ValueError naming the field when (K, L, min_collisions) is not usable."""
    if not isinstance(K, int) or not 1 <= K <= MAX_K:
        raise ValueError(f"K must be an integer in [1, {MAX_K}], got {K!r}")
    if not isinstance(L, int) or L < 1:
        raise ValueError(f"L must be a positive integer, got {L!r}")
    if not isinstance(min_collisions, int) or not 1 <= min_collisions <= L:
        raise ValueError(f"min_collisions (default 2) must be an integer in [1, L] = [1, {L}], got "
                         f"min_collisions={min_collisions!r} with L={L}: lower min_collisions or raise L")
    if K * L > MAX_KL:
        raise ValueError(f"K*L = {K * L} is too large (K={K}, L={L}); at most {MAX_KL} hash bits per key")


def parse_kl(text: str) -> tuple[int, int]:
    """One bare (K, L) pair, written ``K,L`` as the paper does (``10,150``); ``10x150`` is read too.

    Where a method is meant, write its spec (``magicpig:K=10,L=150``) instead; a bare pair is only for
    grids of hash settings (``bench kernel --kl``, ``estimate --kl``, ``config kernel_bench.kl``).
    Raises ValueError naming the expected form; the pair's limits are ``check_kl``'s."""
    parts = str(text).strip().lower().replace("x", ",").split(",")
    try:
        K, L = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"expected one (K, L) pair written K,L (e.g. 10,150), got {text!r}") from None
    return K, L


def format_kl(K: int, L: int) -> str:
    """The one spelling of a bare (K, L) pair: ``10,150`` (``parse_kl`` reads it back)."""
    return f"{int(K)},{int(L)}"


def make_projections(head_dim: int, K: int, L: int, *, num_sets: int = 1, seed: int = 43,
                     device: torch.device | str | None = None,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Gaussian SimHash projections.

    Returns a tensor of shape ``(num_sets, head_dim, K*L)`` drawn from N(0, 1) with a CPU generator
    seeded by ``seed`` (so the same seed gives the same planes on every device).
    """
    check_kl(K, L, 1)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    w = torch.randn(num_sets, head_dim, K * L, generator=gen, dtype=torch.float32)
    return w.to(device=device, dtype=dtype)


def hash_codes(x: torch.Tensor, projections: torch.Tensor, K: int, L: int) -> torch.Tensor:
    """Bucket codes of ``x`` in each of the L tables.

    x: ``(..., S, n, d)`` with ``S`` projection sets broadcast against ``projections`` ``(S, d, K*L)``
    (S may be 1 on either side). Returns int32 codes ``(..., S, n, L)`` in ``[0, 2**K)``.
    """
    proj = x.to(projections.dtype) @ projections  # (..., S, n, K*L)
    bits = (proj > 0).reshape(*proj.shape[:-1], L, K).to(torch.float32)
    # bits @ 2**b in float32 is exact for K <= 16 (codes < 2**24) and much faster than an integer sum
    weights = 2.0 ** torch.arange(K, device=x.device, dtype=torch.float32)
    return (bits @ weights).to(torch.int32)


def collision_probability(cos: torch.Tensor, K: int, L: int, min_collisions: int = 2) -> torch.Tensor:
    """Probability that a key at cosine ``cos`` to the query shares its bucket in at least
    ``min_collisions`` of the L tables (each table: K independent hyperplanes).

    p = 1 - arccos(cos)/pi; P = p**K; u = P(Binomial(L, P) >= min_collisions). Cosines are clamped
    to [-1, 1] so rounding never produces NaN. Computed in float64 for accuracy of 1 - (1-P)**L.
    """
    c = cos.to(torch.float64).clamp(-1.0, 1.0)
    p = 1.0 - torch.arccos(c) / math.pi
    P = p.pow(K)
    q = 1.0 - P
    # P(X < m) for X ~ Binomial(L, P), summed term by term (m is small: 1 or 2 in practice).
    below = torch.zeros_like(P)
    for i in range(min_collisions):
        below = below + float(math.comb(L, i)) * P.pow(i) * q.pow(L - i)
    return (1.0 - below).clamp(0.0, 1.0).to(cos.dtype if cos.is_floating_point() else torch.float32)


def expected_sampled_fraction(K: int, L: int, min_collisions: int = 2) -> float:
    """Sampled fraction B/n for well-spread keys (hyperplane agreement p = 1/2)."""
    return float(collision_probability(torch.tensor(0.0, dtype=torch.float64), K, L, min_collisions))


def cosine(q: torch.Tensor, k: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Cosine between query rows ``q (..., G, d)`` and key rows ``k (..., n, d)`` -> ``(..., G, n)``;
    zero vectors give cosine 0 rather than NaN."""
    qn = q.norm(dim=-1, keepdim=True).clamp_min(eps)
    kn = k.norm(dim=-1).clamp_min(eps)
    return (q @ k.transpose(-1, -2)) / qn / kn.unsqueeze(-2)


def importance_log_weight(u: torch.Tensor) -> torch.Tensor:
    """The logit correction ``-ln(u + 1e-4)`` applied to sampled keys."""
    return -torch.log(u + IMPORTANCE_FLOOR)
