"""The counter-based generator is SplitMix64, and it is statistically sound for our use."""

import math

import numpy as np
import pytest

from pympi_gpu import rng
from pympi_gpu.rng import GAMMA, bits, count_hits_numpy, counter, hit_of, inside, mc_hit, mix64, seed_key, uniform

MASK = (1 << 64) - 1


def splitmix64_stream(state, count):
    """The sequential SplitMix64 generator (Vigna's reference), in plain Python ints."""
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        out.append(z ^ (z >> 31))
    return out


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


def test_hit_test_is_exact_integer_geometry():
    # corner cells: the cell centre nearest the origin is in, the far corner is out
    low = np.uint64(0)
    high = np.uint64(MASK)
    assert bool(inside(low)) and not bool(inside(high))
    # a point just inside / outside the circle along the u axis (v = 0)
    u_in = (1 << 30) - 1  # (2u+1)^2 + 1 < 2^62
    v0 = 0
    h = np.uint64((u_in << 34) | (v0 << 2))
    assert bool(inside(h))
    with np.errstate(over="ignore"):
        assert int(mc_hit(np.uint64(0), np.uint64(0))) == int(inside(bits(np.uint64(0), np.uint64(0))))


def test_importing_rng_loads_no_numba():
    code = "import sys; import pympi_gpu.rng; assert 'numba' not in sys.modules"
    import subprocess
    import sys

    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def _hits_reference(key, start, count):
    with np.errstate(over="ignore"):
        k = np.arange(start, start + count, dtype=np.uint64)
        return int(np.count_nonzero(inside(bits(key, k))))


@pytest.mark.parametrize("start, count, block", [(0, 100_000, 1 << 15), (12_345, 99_999, 1 << 15),
                                                 (2**52, 5, 1 << 15), (7, 1, 1 << 15), (3, 10_001, 1000)])
def test_count_hits_numpy_equals_the_definition(start, count, block):
    key = seed_key(20240601)
    assert count_hits_numpy(key, start, count, block=block) == _hits_reference(key, start, count)


def test_additive_state_equals_counter():
    """Stepping the state by GAMMA (the kernels' loops) gives the stream's outputs exactly."""
    from numba import njit

    rng.register_numba()

    @njit
    def stepped(key, start, n):
        out = np.empty(n, dtype=np.uint64)
        state = counter(key, np.uint64(start))
        for i in range(n):
            out[i] = hit_of(state)
            state += GAMMA
        return out

    key = seed_key(3)
    start = 2**53 - 600  # near the largest count, where the state wraps many times
    with np.errstate(over="ignore"):
        want = np.array([int(mc_hit(key, np.uint64(start + i))) for i in range(500)], dtype=np.uint64)
    assert np.array_equal(stepped(key, start, 500), want)


def _inside_definition(h: int) -> bool:
    """The hit test as defined: cell centre ((2u+1), (2v+1)) / 2**31 in the quarter disc."""
    u, v = h >> 34, (h >> 2) & ((1 << 30) - 1)
    return (2 * u + 1) ** 2 + (2 * v + 1) ** 2 < 2**62


def test_inside_matches_its_definition_at_random_and_on_the_circle():
    import math

    rng_ = np.random.default_rng(5)
    hs = [int(x) for x in rng_.integers(0, 2**63, 20_000, dtype=np.uint64) * np.uint64(2)
          + rng_.integers(0, 2, 20_000, dtype=np.uint64)]
    # cells on both sides of the circle: for a u, the v whose centre is just in, and the next
    for u in [0, 1, 12345, 2**29, 2**30 - 1] + [int(x) for x in rng_.integers(0, 2**30, 200)]:
        rest = 2**62 - (2 * u + 1) ** 2
        v = max(0, (math.isqrt(max(rest - 1, 0)) - 1) // 2)
        for dv in (-1, 0, 1, 2):
            if 0 <= v + dv < 2**30:
                hs.append((u << 34) | ((v + dv) << 2) | 3)
    arr = np.array(hs, dtype=np.uint64)
    with np.errstate(over="ignore"):
        got = inside(arr)
    assert got.tolist() == [_inside_definition(h) for h in hs]
    assert 0 < int(got.sum()) < len(hs)


def test_jitted_inside_matches_numpy():
    from numba import njit

    rng.register_numba()

    @njit
    def hits(h):
        out = np.empty(h.size, dtype=np.bool_)
        for i in range(h.size):
            out[i] = inside(h[i])
        return out

    h = np.random.default_rng(6).integers(0, 2**63, 50_000, dtype=np.uint64) * np.uint64(2)
    with np.errstate(over="ignore"):
        assert np.array_equal(hits(h), inside(h))
