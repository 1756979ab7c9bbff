"""pi kernels against references, without MPI."""

import math

import numpy as np
import pytest

from helpers.rng_reference import reference_hits
from pympi_gpu.pi import grid
from pympi_gpu.pi.kernels_cpu import NumbaKernels, NumpyKernels
from pympi_gpu.rng import BLOCK, seed_key


@pytest.fixture(scope="module")
def numba_k():
    k = NumbaKernels()
    k.warmup()
    return k


python_hits = reference_hits  # the stream from the published algorithms, in plain Python (test_rng)


@pytest.mark.parametrize("start, count", [(0, 1), (0, 1000), (12345, 777), (2**40, 513), (1000, 3 * 1024 + 50)])
def test_mc_hits_match_python_reference(numba_k, start, count):
    key = seed_key(3)
    ref = python_hits(key, start, count)
    assert numba_k.mc_hits(key, start, count) == ref
    assert NumpyKernels().mc_hits(key, start, count) == ref


def test_mc_split_anywhere_gives_same_total(numba_k):
    key = seed_key(11)
    n = 100_003
    whole = numba_k.mc_hits(key, 0, n)
    for cut in (1, 17, 1024, 50_000, 99_999):
        assert numba_k.mc_hits(key, 0, cut) + numba_k.mc_hits(key, cut, n - cut) == whole


def test_mc_parallel_equals_serial(numba_k):
    import numba

    from pympi_gpu.pi.kernels_cpu import _mc_count, _mc_count_parallel

    key = seed_key(5)
    n = (1 << 21) + 12345  # several parallel items and ragged ends
    serial = int(_mc_count(key, np.int64(7), np.int64(n)))
    assert int(_mc_count_parallel(key, np.int64(7), np.int64(n))) == serial
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert numba_k.mc_hits(key, 7, n) == serial
    finally:
        numba.set_num_threads(old)


_MASK = (1 << 64) - 1


def test_mc_vector_code_equals_the_definition(numba_k):
    """mc_simd's groups, with their ragged ends and partial groups, count as the definition, sample by sample."""
    from pympi_gpu.pi import mc_simd
    from pympi_gpu.pi.kernels_cpu import count_scalar, _mc_count_vector

    group = mc_simd.GROUP * BLOCK
    for key in (seed_key(9), np.uint64(_MASK), np.uint64(0)):
        for start, count in ((3, 0), (3, 1), (0, group), (5, group + BLOCK), (BLOCK - 1, 3 * group + 2),
                             (2**50 + 17, 2 * group - 5)):
            assert _mc_count_vector(key, np.int64(start), np.int64(count)) == count_scalar(
                key, np.int64(start), np.int64(count)), (key, start, count)


def test_mc_undecided_blocks_are_counted_exactly():
    """Over 24,576 blocks the float filter leaves some undecided (about one in 1,300); the total is still exact."""
    from numba import njit

    from pympi_gpu.pi import mc_simd
    from pympi_gpu.pi.kernels_cpu import _blocks, count_scalar

    @njit
    def undecided(key, j0, nblocks):
        n = 0
        for g in range(0, nblocks, mc_simd.GROUP):
            mask = mc_simd.group_counts(key, np.uint64(j0 + g), np.uint64(min(mc_simd.GROUP, nblocks - g))) >> 32
            while mask:
                n += int(mask & np.uint64(1))
                mask >>= np.uint64(1)
        return n

    key, nblocks = seed_key(4), 24_576
    assert undecided(key, 0, nblocks) >= 3  # about 19 expected: the slow path ran
    assert int(_blocks(key, np.int64(0), np.int64(nblocks))) == int(
        count_scalar(key, np.int64(0), np.int64(nblocks * BLOCK)))


@pytest.mark.parametrize("fused", [False, True])
def test_float_filter_bound(fused):
    """mc_simd's thresholds decide only what float32 proves: for points within 2**-19 of the circle, every
    sample below the lower threshold is a hit and every one at or above the upper one a miss."""
    from pympi_gpu.pi.mc_simd import _HI, _LO

    rng_ = np.random.default_rng(8)
    a = rng_.integers(-(2**31), 2**31, 400_000, dtype=np.int64)
    a |= 1
    target = 2.0**62 * (1 + rng_.uniform(-2**-19, 2**-19, a.size))
    b2 = np.maximum(target - a.astype(np.float64) ** 2, 1.0)
    b = np.minimum(np.sqrt(b2), 2**31 - 1).astype(np.int64) | 1
    b *= np.where(rng_.integers(0, 2, a.size) == 1, 1, -1)
    exact = a * a + b * b < 2**62  # int64: exact, the squares are below 2**62
    # the words: the low bit of each cleared half the time (the filter converts the raw word)
    wa = np.where(rng_.integers(0, 2, a.size) == 1, a, a & ~1)
    wb = np.where(rng_.integers(0, 2, a.size) == 1, b, b & ~1)
    x, y = wa.astype(np.int32).astype(np.float32), wb.astype(np.int32).astype(np.float32)
    if fused:  # one rounding of x*x + fl(y*y): x*x is exact in float64
        f = (x.astype(np.float64) ** 2 + (y * y).astype(np.float64)).astype(np.float32)
    else:
        f = x * x + y * y
    assert not np.any(~exact & (f < np.float32(_LO)))
    assert not np.any(exact & (f >= np.float32(_HI)))
    assert np.count_nonzero((f >= np.float32(_LO)) & (f < np.float32(_HI))) > 0  # the band is there


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


def estimate(kernels, n, ranks=1):
    """The rule's result as the driver makes it over ``ranks`` ranks (their integers added exactly)."""
    return grid.estimate(n, sum(sum(kernels.trapezoid_chunks(n, *grid.rank_chunks(n, ranks, r)).tolist())
                                for r in range(ranks)))


@pytest.mark.parametrize("n", [2, 3, 10, 1001, 70_001])
def test_trapezoid_matches_reference(numba_k, n):
    ref = trapezoid_reference(n)
    for k in (numba_k, NumpyKernels()):
        assert abs(estimate(k, n) - ref) <= 8 * math.ulp(ref)  # the groups' formula: a few ulps a group


def test_trapezoid_converges_to_pi(numba_k):
    n = 10**7
    est = estimate(numba_k, n)
    # trapezoid truncation error is -h^2/6 for this integrand
    assert abs(est - math.pi + 1 / (6 * n * n)) < 2 * math.ulp(math.pi)
    assert estimate(numba_k, 10**8) == math.pi  # the rule's own error, 1.7e-17, is below half an ulp


def _sweep():
    """Interval counts across the scales: the smallest, around chunk boundaries (one, two and three
    chunks, a chunk's groups of four and its last nodes), the issue's (1000, 40,000) and 80 drawn at random
    from 40 to 2e6 on a log scale."""
    size = grid.chunk_size(10)
    ns = set(range(2, 40)) | {1000, 40_000, 10**6}
    ns |= {k * size + d for k in (1, 2, 3) for d in range(-5, 6)}
    rng = np.random.default_rng(60)
    ns |= {int(x) for x in np.exp(rng.uniform(math.log(40), math.log(2e6), 80))}
    return sorted(ns)


def test_trapezoid_bit_identical_at_every_n(numba_k):
    """One order of sums and the same rounding: NumPy, numba on 1 and 2 threads, over 1, 2 and 3 ranks'
    chunks, the same integers and the same result bit for bit at every n of the sweep (issue 60, item 8:
    the numba and NumPy results differed in the last bit at 1000 intervals).  The GPU kernel's, under the
    simulator: tests/gpu/test_pi_cuda_sim.py."""
    import numba

    numpy_k, old = NumpyKernels(), numba.get_num_threads()
    try:
        for n in _sweep():
            whole = numpy_k.trapezoid_chunks(n, 0, grid.n_chunks(n))
            for threads in (1, 2):
                numba.set_num_threads(threads)
                got = numba_k.trapezoid_chunks(n, 0, grid.n_chunks(n))
                assert got.dtype == np.int64 and np.array_equal(got, whole), (n, threads)
            result = grid.estimate(n, sum(whole.tolist()))
            assert all(estimate(numba_k, n, ranks) == result for ranks in (2, 3)), n
    finally:
        numba.set_num_threads(old)


def test_trapezoid_fixed_point_cannot_overflow():
    """A chunk's integer stays an int64 at every size: at most (N/4 + 3) terms of at most 4 * 2^K."""
    for n in (2, 5, 2**14, 2**14 + 13, 10**8, 2**34, 2**34 + 1, 10**12, 2**53):
        nodes = min(grid.chunk_size(n), n - 1)
        k = grid.scale_bits(n)
        assert (nodes // 4 + 3) * 4 * 2**k < 2**63 and k <= 48, n
        assert grid.shift(n) == 1.5 * 2.0 ** (52 - k)
        assert 2.0 ** (52 - k) <= grid.shift(n) < grid.shift(n) + 4 < 2.0 ** (53 - k)  # C + a term: C's binade
