"""SimHash primitives: codes, collision probability (checked against simulation), edge cases."""
import hashlib
import math

import pytest
import torch

from magicpig import lsh, parse_method


def test_codes_shape_range_and_bit_order():
    d, K, L = 8, 5, 7
    W = lsh.make_projections(d, K, L, num_sets=3, seed=1)
    assert W.shape == (3, d, K * L)
    x = torch.randn(2, 3, 11, d)
    codes = lsh.hash_codes(x, W, K, L)
    assert codes.shape == (2, 3, 11, L) and codes.dtype == torch.int32
    assert int(codes.min()) >= 0 and int(codes.max()) < 2 ** K
    # table j, bit b is the sign of x·W[:, j*K + b], weighted 2**b
    proj = x[0, 1, 4] @ W[1]
    j = 3
    expect = sum(int(proj[j * K + b] > 0) << b for b in range(K))
    assert int(codes[0, 1, 4, j]) == expect


def test_projections_are_seeded():
    a = lsh.make_projections(16, 4, 6, seed=7)
    b = lsh.make_projections(16, 4, 6, seed=7)
    c = lsh.make_projections(16, 4, 6, seed=8)
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("K,L,m", [(10, 150, 2), (8, 75, 2), (1, 5, 1), (3, 12, 3)])
def test_collision_probability_matches_binomial_tail(K, L, m):
    cos = torch.linspace(-1, 1, 41, dtype=torch.float64)
    u = lsh.collision_probability(cos, K, L, m)
    p = 1 - torch.arccos(cos) / math.pi
    P = p ** K
    tail = sum(float(math.comb(L, i)) * P ** i * (1 - P) ** (L - i) for i in range(m, L + 1))
    assert torch.allclose(u, tail, atol=1e-10)
    assert float(u[0]) == 0.0 and abs(float(u[-1]) - 1.0) < 1e-12
    assert bool((u[1:] >= u[:-1]).all()), "u must grow with the cosine"


def test_collision_probability_clamps_out_of_range_cosines():
    u = lsh.collision_probability(torch.tensor([1.0000001, -1.0000001, float("nan")]).float()[:2], 10, 150)
    assert torch.isfinite(u).all()
    assert torch.allclose(u, torch.tensor([1.0, 0.0]))


def test_expected_sampled_fraction_formula():
    P = 2.0 ** -10
    expect = 1 - (1 - P) ** 150 - 150 * P * (1 - P) ** 149
    assert lsh.expected_sampled_fraction(10, 150) == pytest.approx(expect, rel=1e-9)
    # more tables sample more, more bits sample less
    assert lsh.expected_sampled_fraction(10, 300) > lsh.expected_sampled_fraction(10, 150)
    assert lsh.expected_sampled_fraction(11, 150) < lsh.expected_sampled_fraction(10, 150)


@pytest.mark.parametrize("K,L", [(2, 6), (4, 20), (6, 40), (8, 75)])
@pytest.mark.parametrize("cos", [0.95, 0.6, 0.0])
def test_empirical_two_collision_frequency_matches_formula(K, L, cos):
    """Over many independent projection draws, the frequency of 'codes agree in >= 2 of L tables'
    lies within a 4.5-sigma binomial band around collision_probability."""
    d, trials = 12, 3000
    gen = torch.Generator().manual_seed(1234 + K * 100 + L)
    q = torch.zeros(d); q[0] = 1.0
    k = torch.zeros(d); k[0] = cos; k[1] = math.sqrt(max(0.0, 1 - cos * cos))
    W = torch.randn(trials, d, K * L, generator=gen)
    qc = lsh.hash_codes(q.expand(trials, 1, d), W, K, L)
    kc = lsh.hash_codes(k.expand(trials, 1, d), W, K, L)
    freq = ((qc == kc).sum(-1) >= 2).double().mean().item()
    u = float(lsh.collision_probability(torch.tensor(cos, dtype=torch.float64), K, L))
    band = 4.5 * math.sqrt(max(u * (1 - u), 1e-4) / trials)
    assert abs(freq - u) <= band, f"K={K} L={L} cos={cos}: simulated {freq:.4f} vs formula {u:.4f} ± {band:.4f}"


def test_check_kl_names_the_field():
    with pytest.raises(ValueError, match="K must"):
        lsh.check_kl(0, 10)
    with pytest.raises(ValueError, match="K must"):
        lsh.check_kl(17, 10)
    with pytest.raises(ValueError, match="L must"):
        lsh.check_kl(10, 0)
    with pytest.raises(ValueError, match="min_collisions"):
        lsh.check_kl(10, 1, 2)
    with pytest.raises(ValueError, match="K\\*L"):
        lsh.check_kl(16, 1000)


def test_cosine_of_zero_vectors_is_zero():
    c = lsh.cosine(torch.zeros(2, 4), torch.zeros(3, 4))
    assert torch.equal(c, torch.zeros(2, 3))


def test_sample_seed_is_deterministic_distinct_and_in_range():
    from magicpig.lsh import MAX_SEED, sample_seed

    seeds = [sample_seed(43, f"ruler/niah/4096/0/{i}") for i in range(200)]
    assert len(set(seeds)) == 200 and all(0 <= s <= MAX_SEED for s in seeds)
    assert sample_seed(43, "a") == sample_seed(43, "a") != sample_seed(44, "a")
    # fixed value: the same (seed, id) must give the same projections in every process and release
    digest = hashlib.blake2b(b"0:x", digest_size=8).digest()
    assert sample_seed(0, "x") == int.from_bytes(digest, "little") % (MAX_SEED + 1)
    with pytest.raises(ValueError, match="seed"):
        sample_seed(2**70, "a")


def test_projections_at_the_largest_seed_and_a_single_table():
    """seed + layer // 16 (per-block projections) must stay a valid torch seed; L=1 is valid with
    min_collisions=1."""
    assert lsh.make_projections(8, 4, 1, seed=lsh.MAX_SEED + 5).shape == (1, 8, 4)
    m = parse_method(f"magicpig:K=4,L=1,min_collisions=1,seed={lsh.MAX_SEED}")
    assert m.projections(79, 2, 8).shape == (2, 8, 4)
