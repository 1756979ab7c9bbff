"""CPU kernels for pi, numba-compiled (the NumPy ones are in ``kernels_numpy``).

Each backend provides ``mc_hits(key, start, count)`` and
``trapezoid_chunks(n, c0, c1)``.  All compute the same integers, bit for bit:
the Monte Carlo hit count (integer arithmetic on the same counter-based
stream) and the trapezoid rule's chunk sums (:mod:`~pympi_gpu.pi.grid`: the
same float operations a term, counted in fixed point).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import get_num_threads, njit, prange
from numba.core import types
from numba.extending import intrinsic, register_jitable

from pympi_gpu import rng
from pympi_gpu.device.jitcache import guard_cache, keyed_by_code, sources
from pympi_gpu.pi import grid, mc_simd
from pympi_gpu.pi.kernels_numpy import NumpyKernels
from pympi_gpu.rng import BLOCK, block_hits, count_hits

guard_cache()  # this module's kernels are cached: numba's cache mended first (see jitcache)

rng.register_numba()

__all__ = ["NumbaKernels", "NumpyKernels", "count_scalar"]

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


@register_jitable
def _mul(a, b):
    return a * b


@register_jitable
def _add(a, b):
    return a + b


#: the rule's terms (grid.terms) with the plain operators: LLVM contracts no multiply and add without fastmath
_quad, _single = (register_jitable(f) for f in grid.terms(_mul, _add))


@intrinsic
def _bits(typingctx, x):
    """The bits of a float64 as an int64 (a reinterpretation: no instruction)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@njit(cache=True, nogil=True, error_model="numpy")
def _chunk_sum(lo, hi, h, c):
    """The integer sum of the terms of nodes ``[lo, hi)`` (:mod:`~pympi_gpu.pi.grid`): groups of four, then the
    last nodes one each, each ``bits(term + c) - bits(c)``.

    No fastmath: the terms are the IEEE operations :func:`~pympi_gpu.pi.grid.terms` writes, and the sum is of
    int64s, which LLVM vectorises without reassociating anything.  The groups go as four streams a pass
    (a quarter of them apart: four times the independent work between two divisions, 1.3x faster with
    AVX2 and 1.1x with AVX-512 than one).  A group's first node is carried as a float64 (exact below 2**53)
    plus an int32 offset: AVX2 has no vector int64 -> float64 conversion (AVX-512DQ has), and with one the
    loop ran scalar there, 4x slower.
    """
    m = (hi - lo) // 4
    fm = float(m)
    q = m // 4
    f0 = float(lo)
    f1, f2, f3 = f0 + float(q), f0 + float(2 * q), f0 + float(3 * q)
    unit = _bits(c)
    s = np.int64(0)
    for j in range(q):
        fj = float(np.int32(j))
        s += (((_bits(_quad(f0 + fj, fm, h, c)) - unit) + (_bits(_quad(f1 + fj, fm, h, c)) - unit))
              + ((_bits(_quad(f2 + fj, fm, h, c)) - unit) + (_bits(_quad(f3 + fj, fm, h, c)) - unit)))
    for j in range(4 * q, m):
        s += _bits(_quad(f0 + float(j), fm, h, c)) - unit
    for i in range(lo + 4 * m, hi):
        s += _bits(_single(float(i), h, c)) - unit
    return s


@njit(cache=True, parallel=True, nogil=True, error_model="numpy")
def _trap_chunks(n, c0, c1, csize, c):
    h = 1.0 / n
    out = np.empty(c1 - c0, np.int64)
    for k in prange(c0, c1):
        lo = 1 + k * csize
        out[k - c0] = _chunk_sum(lo, min(lo + csize, n), h, c)
    return out


# the terms are grid.py's code: a change there must not load the kernels compiled from the old
for _kernel in (_chunk_sum, _trap_chunks):
    keyed_by_code(_kernel, sources(grid))


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
            return np.empty(0, np.int64)
        return _trap_chunks(np.int64(n), np.int64(c0), np.int64(c1), np.int64(grid.chunk_size(n)), grid.shift(n))

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
            self.trapezoid_chunks(1 << 15, 0, grid.n_chunks(1 << 15))
