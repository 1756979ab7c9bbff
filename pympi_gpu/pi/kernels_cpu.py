"""CPU kernels for pi, numba-compiled (the NumPy ones are in ``kernels_numpy``).

Each backend provides ``mc_hits(key, start, count)``,
``trapezoid_chunks(n, c0, c1)`` and ``partials(sums)``.  All compute the same
quantities: the Monte Carlo hit count is bit-identical between them (integer
arithmetic on the same counter-based stream); trapezoid chunk sums agree to
rounding.
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from pympi_gpu import rng
from pympi_gpu.pi import mc_simd
from pympi_gpu.pi.grid import chunk_size, n_chunks
from pympi_gpu.pi.kernels_numpy import NumpyKernels
from pympi_gpu.rng import BLOCK, block_hits, count_hits

rng.register_numba()

__all__ = ["NumbaKernels", "NumpyKernels", "exact_partials", "count_scalar"]

_PAR_BLOCKS = 1 << 10  # stream blocks per parallel work item (2**20 samples)
_LOW32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


@njit(cache=True, nogil=True, error_model="numpy")
def _blocks(key, j0, nblocks):
    """Hits of the whole blocks ``j0 .. j0 + nblocks - 1``: mc_simd's groups, their undecided blocks by the definition."""
    hits = np.uint64(0)
    for g in range(0, nblocks, mc_simd.GROUP):
        j = j0 + g
        res = mc_simd.group_counts(key, np.uint64(j), np.uint64(min(mc_simd.GROUP, nblocks - g)))
        hits += res & _LOW32
        mask = res >> _S32
        i = 0
        while mask:
            if mask & np.uint64(1):
                hits += block_hits(key, j + i, 0, BLOCK)
            mask >>= np.uint64(1)
            i += 1
    return hits


@njit(cache=True, nogil=True, error_model="numpy")
def _whole_blocks(start, count):
    """The whole blocks ``[j0, j1)`` inside samples ``[start, start + count)`` (``j1 <= j0`` if none)."""
    return (start + BLOCK - 1) // BLOCK, (start + count) // BLOCK


@njit(cache=True, nogil=True, error_model="numpy")
def _mc_count_vector(key, start, count):
    """Hits among samples ``[start, start + count)``: whole blocks in mc_simd, the ragged ends by the definition."""
    j0, j1 = _whole_blocks(start, count)
    if j1 <= j0:
        return count_hits(key, start, count)
    end = start + count
    return (count_hits(key, start, j0 * BLOCK - start) + _blocks(key, j0, j1 - j0)
            + count_hits(key, j1 * BLOCK, end - j1 * BLOCK))


@njit(cache=True, nogil=True, error_model="numpy")
def count_scalar(key, start, count):
    """The same count by the definition alone (rng.count_hits), one sample at a time."""
    return count_hits(key, start, count)


_mc_count = _mc_count_vector


@njit(cache=True, parallel=True, nogil=True, error_model="numpy")
def _mc_count_parallel(key, start, count):
    """The same count, the whole blocks over numba's threads in items of _PAR_BLOCKS."""
    j0, j1 = _whole_blocks(start, count)
    if j1 <= j0:
        return count_hits(key, start, count)
    nitems = (j1 - j0 + _PAR_BLOCKS - 1) // _PAR_BLOCKS
    partial = np.zeros(nitems, dtype=np.uint64)
    for t in prange(nitems):
        j = j0 + t * _PAR_BLOCKS
        partial[t] = _blocks(key, j, min(_PAR_BLOCKS, j1 - j))
    end = start + count
    return (partial.sum() + count_hits(key, start, j0 * BLOCK - start)
            + count_hits(key, j1 * BLOCK, end - j1 * BLOCK))


@njit(cache=True, error_model="numpy", fastmath=True)
def _node_sum(lo, hi, h):
    """Sum of 4/(1+x^2) over nodes x = i*h, i in [lo, hi).

    Four nodes share one division: 1/a + 1/b + 1/c + 1/d is evaluated as
    ((a+b)cd + (c+d)ab) / (abcd).  With a..d in [1, 2] nothing can overflow,
    each group costs a few ulps at most, and division, the bottleneck of the
    naive loop, runs a quarter as often.

    The node index is carried as a float64 (exact: indices stay below 2**53),
    so ``x`` is bit for bit ``i * h`` as before, but no int64 -> float64
    conversion is left in the loop: AVX2 has no vector instruction for it
    (AVX-512DQ has), and with one the loop ran scalar there, 4x slower.
    """
    m = (hi - lo) // 4
    fm = float(m)
    fi = float(lo)
    s = 0.0
    for _ in range(m):
        xa = fi * h
        xb = (fi + fm) * h
        xc = (fi + 2.0 * fm) * h
        xd = (fi + 3.0 * fm) * h
        fi += 1.0
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


@njit(cache=True, parallel=True, nogil=True, error_model="numpy")
def _trap_chunks(n, c0, c1, csize):
    h = 1.0 / n
    out = np.empty(c1 - c0)
    for c in prange(c0, c1):
        lo = 1 + c * csize
        out[c - c0] = _node_sum(lo, min(lo + csize, n), h)
    return out


@njit(cache=True)
def exact_partials(values):
    """Shewchuk's exact summation: non-overlapping partials whose sum is exact.

    ``math.fsum`` of the returned partials (from any number of ranks, in any
    order) is the correctly rounded sum of every value that went in, which is
    what makes the trapezoid result independent of the rank count.
    """
    partials = np.empty(64)
    n = 0
    for x in values:
        i = 0
        for j in range(n):
            y = partials[j]
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo != 0.0:
                partials[i] = lo
                i += 1
            x = hi
        if i == partials.size:  # pragma: no cover - needs > 64 partials
            partials = np.concatenate((partials, np.empty(64)))
        partials[i] = x
        n = i + 1
    return partials[:n].copy()


class NumbaKernels:
    """numba-compiled CPU kernels (``--backend numba``)."""

    name = "numba"

    def mc_hits(self, key: np.uint64, start: int, count: int) -> int:
        if count <= 0:
            return 0
        if get_num_threads() > 1 and count > 2 * _PAR_BLOCKS * BLOCK:
            return int(_mc_count_parallel(key, np.int64(start), np.int64(count)))
        return int(_mc_count(key, np.int64(start), np.int64(count)))

    def trapezoid_chunks(self, n: int, c0: int, c1: int) -> np.ndarray:
        if c1 <= c0:
            return np.empty(0)
        return _trap_chunks(np.int64(n), np.int64(c0), np.int64(c1), np.int64(chunk_size(n)))

    def partials(self, sums: np.ndarray) -> np.ndarray:
        return exact_partials(sums) if sums.size else np.empty(0)

    def warmup(self, methods=("mc", "trapezoid")) -> None:
        """Compile (or load from the cache) the kernels ``methods`` will run.

        Only those: each cached kernel costs tens of milliseconds to load,
        which is most of a short run.
        """
        if "mc" in methods:
            if get_num_threads() > 1:
                _mc_count_parallel(np.uint64(1), np.int64(0), np.int64(16))
            else:
                self.mc_hits(np.uint64(1), 0, 16)
        if "trapezoid" in methods:
            self.trapezoid_chunks(1 << 15, 0, n_chunks(1 << 15))
            exact_partials(np.ones(2))
