"""The counter-based generators: SplitMix64, and pi's stream of xoroshiro128+ blocks; both are sound for our use.

The Monte Carlo stream is checked against a plain-Python reference written from the published
algorithms (Vigna's SplitMix64 and xoroshiro128+ 1.0; tests/helpers/rng_reference.py), itself
checked against their published known-answer vectors; its hit counts against that reference; and
its statistics: hit counts over many seeds are binomial (z-scores, a Kolmogorov-Smirnov test),
coordinates uniform, neighbouring blocks uncorrelated."""

import math

import numpy as np
import pytest

from helpers.rng_reference import MASK, coordinate, reference_hits, splitmix64_stream, xoroshiro128plus
from pympi_gpu import rng
from pympi_gpu.rng import (BLOCK, block_hits, block_state, bits, count_hits, count_hits_numpy, miss_of, mix64,
                           pair_misses, seed_key, square32, uniform, xoro_next)


def test_known_vector():
    # First outputs of SplitMix64 seeded with 1234567 (Vigna's reference implementation).
    assert splitmix64_stream(1234567, 3) == [6457827717110365317, 3203168211198807973, 9817491932198370423]


@pytest.mark.parametrize("key", [0, 1, 1234567, MASK, int(seed_key(20240601))])
def test_counter_form_equals_sequential_stream(key):
    ref = splitmix64_stream(key, 50)
    with np.errstate(over="ignore"):  # NumPy scalars warn on wrap-around; arrays do not
        got = [int(bits(np.uint64(key), np.uint64(k))) for k in range(50)]
    assert got == ref
    # the same on NumPy arrays (the NumPy backend's path)
    with np.errstate(over="ignore"):
        arr = bits(np.uint64(key), np.arange(50, dtype=np.uint64))
    assert arr.tolist() == ref


def test_jitted_equals_python():
    from numba import njit

    rng.register_numba()  # what the kernel modules do; importing rng alone loads no numba

    @njit
    def first(key, n):
        out = np.empty(n, dtype=np.uint64)
        for k in range(n):
            out[k] = bits(key, np.uint64(k))
        return out

    key = seed_key(7)
    with np.errstate(over="ignore"):
        assert np.array_equal(first(key, 1000), bits(key, np.arange(1000, dtype=np.uint64)))


def test_seed_keys_differ_and_are_stable():
    keys = {int(seed_key(s)) for s in range(1000)}
    assert len(keys) == 1000
    assert int(seed_key(20240601)) == int(seed_key(20240601))
    assert int(seed_key(1, stream=0)) != int(seed_key(1, stream=1))


def test_mix64_is_a_bijection_on_a_sample():
    z = np.arange(1 << 16, dtype=np.uint64) * np.uint64(0x10001)
    with np.errstate(over="ignore"):
        assert np.unique(mix64(z)).size == z.size


def test_uniform_moments_and_bit_balance():
    n = 1 << 18
    key = seed_key(99)
    k = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        u = uniform(key, k)
        b = bits(key, k)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 0.002
    # every one of the 64 bits is set about half the time
    ones = np.array([np.count_nonzero(b & np.uint64(1 << i)) for i in range(64)])
    assert np.all(np.abs(ones - n / 2) < 5 * math.sqrt(n / 4))
    # chi-square of the top 8 bits over 256 bins
    counts = np.bincount((b >> np.uint64(56)).astype(np.int64), minlength=256)
    chi2 = ((counts - n / 256) ** 2 / (n / 256)).sum()
    assert chi2 < 255 + 6 * math.sqrt(2 * 255)


# ------------------------------------------------------------------ the Monte Carlo stream of pi

def test_xoroshiro_reference_matches_published_vectors():
    # rand_xoshiro's Xoroshiro128Plus test: state (1, 2), "produced with the reference implementation"
    assert xoroshiro128plus(1, 2, 10) == [3, 412333834243, 2360170716294286339, 9295852285959843169,
                                          2797080929874688578, 6019711933173041966, 3076529664176959358,
                                          3521761819100106140, 7493067640054542992, 920801338098114767]


def test_xoro_next_is_xoroshiro128plus():
    s0, s1, got = np.uint64(1), np.uint64(2), []
    with np.errstate(over="ignore"):
        for _ in range(10):
            r, s0, s1 = xoro_next(s0, s1)
            got.append(int(r))
    assert got == xoroshiro128plus(1, 2, 10)
    # element-wise on arrays (the NumPy path), from random states
    st = np.random.default_rng(1).integers(0, 2**63, (2, 64), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    a, b = st[0].copy(), st[1].copy()
    with np.errstate(over="ignore"):
        r, a, b = xoro_next(a, b)
        r2, a, b = xoro_next(a, b)
    for i in range(64):
        assert [int(r[i]), int(r2[i])] == xoroshiro128plus(int(st[0, i]), int(st[1, i]), 2)


@pytest.mark.parametrize("key", [0, MASK, int(seed_key(20240601))])
def test_block_state_is_splitmix_outputs(key):
    for j in (0, 1, 977, 2**40 + 3):
        with np.errstate(over="ignore"):
            s0, s1 = block_state(np.uint64(key), np.uint64(j))
        assert [int(s0), int(s1)] == splitmix64_stream((key + 2 * j * 0x9E3779B97F4A7C15) & MASK, 2)


def test_hit_test_is_exact_integer_geometry():
    # the word 0 is the cell centre 1/2**31: the point (1, 1)/2**31 is in; the words 0x80000000 are
    # (-2**31 + 1)/2**31 on both axes: far out
    with np.errstate(over="ignore"):  # NumPy scalars warn on wrap-around; arrays do not
        assert int(miss_of(np.uint64(0), np.uint64(0))) == 0
        assert int(miss_of(np.uint64(0x80000000), np.uint64(0x80000000))) == 1
        # along an axis: A = 2**31 - 1 (the word 0x7FFFFFFE or 0x7FFFFFFF) with B = 1 is inside
        assert int(miss_of(np.uint64(0x7FFFFFFF), np.uint64(0))) == 0
    # square32 is the exact square of the signed odd coordinate, whatever the high half holds
    for w in (0, 1, 2, 0x7FFFFFFE, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFF, 0x12345678):
        for high in (0, 0xDEADBEEF << 32):
            with np.errstate(over="ignore"):
                assert int(square32(np.uint64(w | high))) == coordinate(w) ** 2


def test_miss_of_on_both_sides_of_the_circle():
    """For many A, the B whose point is just inside and the next, on every sign: the test is the definition."""
    rng_ = np.random.default_rng(5)
    words = []
    for a in [1, 3, 12345, 2**30 + 1, 2**31 - 1] + [int(x) * 2 + 1 for x in rng_.integers(0, 2**30, 300)]:
        rest = 2**62 - a * a
        b_in = math.isqrt(rest - 1)  # the largest B with a*a + B*B < 2**62
        b_in -= 1 - b_in % 2  # odd
        for b in (b_in - 2, b_in, b_in + 2):
            if 0 < b < 2**31:
                for sa, sb in ((1, 1), (-1, 1), (1, -1), (-1, -1)):
                    words.append(((sa * a) & 0xFFFFFFFE, (sb * b) & 0xFFFFFFFF))
    x = np.array([w for w, _ in words], dtype=np.uint64)
    y = np.array([w for _, w in words], dtype=np.uint64)
    with np.errstate(over="ignore"):
        got = miss_of(x, y)
        both = pair_misses(x | (y << np.uint64(32)), y | (x << np.uint64(32)))
    want = [int(coordinate(a) ** 2 + coordinate(b) ** 2 >= 1 << 62) for a, b in words]
    assert got.tolist() == want
    assert both.tolist() == [2 * m for m in want]  # the high words hold the same point, mirrored
    assert 0 < sum(want) < len(want)


@pytest.mark.parametrize("start, count", [(0, 1), (0, 1000), (5, 1), (1023, 3), (1024, 1024), (12345, 3001),
                                          (2**40 + 5, 2049), (2**53 - 2100, 2100)])
def test_definition_equals_the_reference(start, count):
    key = seed_key(20240601)
    ref = reference_hits(key, start, count)
    with np.errstate(over="ignore"):
        assert int(count_hits(key, start, count)) == ref
    assert count_hits_numpy(key, start, count) == ref
    assert count_hits_numpy(key, start, count, lanes=2) == ref


def test_jitted_definition_equals_numpy():
    from numba import njit

    rng.register_numba()  # what the kernel modules do; importing rng alone loads no numba
    jitted = njit(count_hits)
    blk = njit(block_hits)
    key = seed_key(7)
    for start, count in [(0, 1), (3, 100_000), (2**45 + 1000, 5000), (1024, 0)]:
        assert int(jitted(key, np.int64(start), np.int64(count))) == count_hits_numpy(key, start, count)
    assert int(blk(key, np.int64(3), np.int64(10), np.int64(1000))) == reference_hits(key, 3 * BLOCK + 10, 990)


def test_hit_counts_over_seeds_are_binomial():
    """400 seeds of 2**16 samples: z-scores of the hit counts have mean 0, variance 1, a normal law (KS)."""
    from numba import njit
    from scipy import stats

    rng.register_numba()
    jitted = njit(count_hits)
    n, p = 1 << 16, math.pi / 4  # the lattice's own pi/4 is within 2e-9 of it (docs/pi.md)
    z = np.array([(int(jitted(seed_key(s), np.int64(0), np.int64(n))) - n * p) / math.sqrt(n * p * (1 - p))
                  for s in range(400)])
    assert abs(z.mean()) < 4 / math.sqrt(z.size)
    assert 0.8 < z.var() < 1.2
    assert stats.kstest(z, "norm").pvalue > 1e-3


def test_coordinates_uniform_and_blocks_uncorrelated():
    """The words are uniform on [0, 2**32) (KS), and neighbouring blocks' hit counts are uncorrelated."""
    from scipy import stats

    key = seed_key(11)
    with np.errstate(over="ignore"):
        s0, s1 = block_state(key, np.arange(2000, dtype=np.uint64))
        outs = []
        for _ in range(8):
            r, s0, s1 = xoro_next(s0, s1)
            outs.append(r)
    words = np.concatenate([np.concatenate([r & np.uint64(0xFFFFFFFF), r >> np.uint64(32)]) for r in outs])
    assert stats.kstest(words.astype(np.float64) / 2**32, "uniform").pvalue > 1e-3
    # hits of each of 4000 consecutive blocks: lag-1 correlation ~ N(0, 1/sqrt(4000))
    per_block = _block_counts(key, 4000)
    c = np.corrcoef(per_block[:-1], per_block[1:])[0, 1]
    assert abs(c) < 4 / math.sqrt(per_block.size)
    p = math.pi / 4
    assert abs(per_block.mean() - BLOCK * p) < 4 * math.sqrt(BLOCK * p * (1 - p) / per_block.size)


def _block_counts(key, nblocks):
    from numba import njit

    rng.register_numba()
    blk = njit(block_hits)
    return np.array([int(blk(key, np.int64(j), np.int64(0), np.int64(BLOCK))) for j in range(nblocks)],
                    dtype=np.float64)
