"""pi kernels against references, without MPI."""

import math

import numpy as np
import pytest

from pympi_gpu.pi import grid
from pympi_gpu.pi.kernels_cpu import NumbaKernels, NumpyKernels, exact_partials
from pympi_gpu.rng import seed_key


@pytest.fixture(scope="module")
def numba_k():
    k = NumbaKernels()
    k.warmup()
    return k


def python_hits(key, start, count):
    """Plain-Python reference of the hit count (SplitMix64 + integer disc test)."""
    mask = (1 << 64) - 1
    hits = 0
    for k in range(start, start + count):
        z = (int(key) + (k + 1) * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        a, b = 2 * (z >> 34) + 1, 2 * ((z >> 2) & ((1 << 30) - 1)) + 1
        hits += a * a + b * b < 1 << 62
    return hits


@pytest.mark.parametrize("start, count", [(0, 1), (0, 1000), (12345, 777), (2**40, 513)])
def test_mc_hits_match_python_reference(numba_k, start, count):
    key = seed_key(3)
    ref = python_hits(key, start, count)
    assert numba_k.mc_hits(key, start, count) == ref
    assert NumpyKernels().mc_hits(key, start, count) == ref


def test_mc_split_anywhere_gives_same_total(numba_k):
    key = seed_key(11)
    n = 100_003
    whole = numba_k.mc_hits(key, 0, n)
    for cut in (1, 17, 50_000, 99_999):
        assert numba_k.mc_hits(key, 0, cut) + numba_k.mc_hits(key, cut, n - cut) == whole


def test_mc_parallel_equals_serial(numba_k):
    import numba

    from pympi_gpu.pi.kernels_cpu import _mc_count, _mc_count_parallel

    key = seed_key(5)
    n = (1 << 21) + 12345  # several parallel blocks and a ragged end
    serial = int(_mc_count(key, np.int64(7), np.int64(n)))
    assert int(_mc_count_parallel(key, np.int64(7), np.int64(n))) == serial
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert numba_k.mc_hits(key, 7, n) == serial
    finally:
        numba.set_num_threads(old)


_MASK = (1 << 64) - 1
_GAMMA, _M1, _M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _state_of(h):
    """The SplitMix64 state whose output is ``h`` (the finaliser inverted)."""
    def unxorshift(z, k):
        x = z
        for _ in range(64 // k + 1):
            x = z ^ (x >> k)
        return x

    z = unxorshift(h, 31) * pow(_M2, -1, 1 << 64) & _MASK
    z = unxorshift(z, 27) * pow(_M1, -1, 1 << 64) & _MASK
    return unxorshift(z, 30)


def _edge_outputs():
    """Outputs whose point lies just inside or just outside the disc, and the extremes."""
    r2 = 1 << 62
    for u in (0, 1, 12345, 759250124, (1 << 30) - 1):
        a = 2 * u + 1
        v_in = (math.isqrt(r2 - a * a - 1) - 1) // 2  # largest v inside
        for v in {max(v_in, 0), min(v_in + 1, (1 << 30) - 1)}:
            for junk in (0, 0b11 | 0b11 << 32):  # the bits the test ignores
                yield (u << 34) | (v << 2) | junk


def test_mc_vector_code_equals_scalar_loop(numba_k):
    """mc_simd's explicit vectors count as the scalar loop, in every lane and at every edge."""
    from pympi_gpu.pi import mc_simd
    from pympi_gpu.pi.kernels_cpu import _mc_count_scalar
    from pympi_gpu.pi.kernels_cpu import _mc_count_vector as _mc_count

    keys = [seed_key(9), np.uint64(_MASK), np.uint64(0)]  # incl. states wrapping past 2**64
    for key in keys:
        for count in (0, 1, mc_simd.WIDTH - 1, mc_simd.WIDTH, 5 * mc_simd.WIDTH + 7, 100_003):
            assert _mc_count(key, np.int64(3), np.int64(count)) == _mc_count_scalar(
                key, np.int64(3), np.int64(count)), (key, count)
    # Points on the circle's edge, placed in each lane of each chain and in the scalar tail.
    n = 2 * mc_simd.WIDTH + 3
    for h in _edge_outputs():
        state = _state_of(h)
        for k in (0, 1, mc_simd.LANES + 2, mc_simd.WIDTH - 1, mc_simd.WIDTH + 5, n - 1):
            key = np.uint64((state - (k + 1) * _GAMMA) & _MASK)
            ref = python_hits(key, 0, n)
            assert numba_k.mc_hits(key, 0, n) == ref
            assert int(_mc_count(key, np.int64(0), np.int64(n))) == ref
            assert int(_mc_count_scalar(key, np.int64(0), np.int64(n))) == ref


def test_mc_estimate_statistics(numba_k):
    n = 4_000_000
    p = numba_k.mc_hits(seed_key(2024), 0, n) / n
    stderr = math.sqrt(p * (1 - p) / n)
    assert abs(p - math.pi / 4) < 5 * stderr


@pytest.mark.parametrize("n", [2, 3, 5, 1000, grid.chunk_size(10**6) + 1, 3 * (1 << 14) + 7, 10**6 + 3])
def test_grid_covers_every_interior_node_once(n):
    nodes = []
    for c in range(grid.n_chunks(n)):
        lo, hi = grid.chunk_nodes(n, c)
        assert lo < hi or n == 2 and lo == hi
        nodes.append((lo, hi))
    assert nodes[0][0] == 1 and nodes[-1][1] == n
    assert all(b == c for (_, b), (c, _) in zip(nodes, nodes[1:]))
    for size in (1, 2, 3, 5):
        owned = [grid.rank_chunks(n, size, r) for r in range(size)]
        assert owned[0][0] == 0 and owned[-1][1] == grid.n_chunks(n)


def test_chunk_size_bounds_chunk_count():
    for n in (10, 10**8, 10**12, 2**53):
        assert grid.chunk_size(n) % 4 == 0
        assert grid.n_chunks(n) <= grid.MAX_CHUNKS


def trapezoid_reference(n):
    """Trapezoid rule with exact summation of correctly rounded terms (slow, small n)."""
    h = 1.0 / n
    terms = [4.0 / (1.0 + (i * h) ** 2) for i in range(1, n)]
    return math.fsum(terms + [3.0]) / n


@pytest.mark.parametrize("n", [2, 3, 10, 1001, 70_001])
def test_trapezoid_matches_reference(numba_k, n):
    for k in (numba_k, NumpyKernels()):
        sums = k.trapezoid_chunks(n, 0, grid.n_chunks(n))
        got = math.fsum(list(exact_partials(sums)) + [3.0]) / n
        assert got == pytest.approx(trapezoid_reference(n), rel=4e-16, abs=0)


def test_trapezoid_converges_to_pi(numba_k):
    n = 10**7
    sums = numba_k.trapezoid_chunks(n, 0, grid.n_chunks(n))
    est = math.fsum(list(exact_partials(sums)) + [3.0]) / n
    # trapezoid truncation error is -h^2/6 for this integrand
    assert abs(est - math.pi + 1 / (6 * n * n)) < 4 * math.ulp(math.pi)


def test_exact_partials_are_exact():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(10_000) * 10.0 ** rng.integers(-20, 20, 10_000)
    x = np.concatenate([x, [1e100, 1.0, -1e100]])
    p = exact_partials(x)
    assert math.fsum(p) == math.fsum(x)
    # splitting the input anywhere and fsum-ing the partials of the pieces is still exact
    pieces = np.split(x, [3, 5000, 9999])
    assert math.fsum(np.concatenate([exact_partials(q) for q in pieces])) == math.fsum(x)
