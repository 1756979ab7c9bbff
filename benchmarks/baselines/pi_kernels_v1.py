"""Baseline: pympi's numba pi kernels as they were before issue 10, for side-by-side timing.

The Monte Carlo loop recomputed the SplitMix64 state ``key + (k + 1) * GAMMA`` for every
sample (a 64-bit multiply, emulated with three 32-bit ones on AVX2) and tested the point
with more shifts; the trapezoid loop converted int64 node indices to float64 (no AVX2
instruction: the loop ran scalar there).  Same results as the current kernels; only the
speed differs.
"""

import numpy as np
from numba import njit

from pympi_gpu import rng
from pympi_gpu.rng import bits

rng.register_numba()
_ONE, _ZERO = np.uint64(1), np.uint64(0)
_S34, _S2, _LOW30, _R2 = np.uint64(34), np.uint64(2), np.uint64((1 << 30) - 1), np.uint64(1 << 62)


@njit(inline="always")
def mc_hit(key, k):
    """The hit test of rng.inside before issue 10."""
    h = bits(key, k)
    a = ((h >> _S34) << _ONE) | _ONE
    b = (((h >> _S2) & _LOW30) << _ONE) | _ONE
    return _ONE if a * a + b * b < _R2 else _ZERO


@njit(cache=True, error_model="numpy")
def mc_count(key, start, count):
    hits = np.uint64(0)
    k0 = np.uint64(start)
    for i in range(count):
        hits += mc_hit(key, k0 + np.uint64(i))
    return hits


@njit(cache=True, error_model="numpy", fastmath=True)
def node_sum(lo, hi, h):
    m = (hi - lo) // 4
    s = 0.0
    for j in range(m):
        i = lo + j
        xa = i * h
        xb = (i + m) * h
        xc = (i + 2 * m) * h
        xd = (i + 3 * m) * h
        a = 1.0 + xa * xa
        b = 1.0 + xb * xb
        c = 1.0 + xc * xc
        d = 1.0 + xd * xd
        ab = a * b
        cd = c * d
        s += ((a + b) * cd + (c + d) * ab) / (ab * cd)
    t = 0.0
    for i in range(lo + 4 * m, hi):
        x = i * h
        t += 1.0 / (1.0 + x * x)
    return 4.0 * (s + t)


@njit(cache=True, error_model="numpy")
def _chunks(n, c0, c1, csize):
    h = 1.0 / n
    out = np.empty(c1 - c0)
    for c in range(c0, c1):
        lo = 1 + c * csize
        out[c - c0] = node_sum(lo, min(lo + csize, n), h)
    return out


def trapezoid_chunks(n, c0, c1, csize):
    """Chunk sums as the old ``_trap_chunks`` with one thread."""
    return _chunks(np.int64(n), np.int64(c0), np.int64(c1), np.int64(csize))
