"""NumPy kernels for pi (``--backend numpy``): no compiler, so they start at once.

A run of a few million samples per rank is over before numba is even
imported (0.4 s or more per rank, plus loading the cached kernels), so
``--backend auto`` takes these for small work (see :mod:`pympi_gpu.pi.backends`).
The Monte Carlo hit count is bit-identical to the numba and CUDA kernels
(the same integers); trapezoid chunk sums agree with theirs to rounding and,
like theirs, do not depend on the rank count.  Nothing here imports numba.
"""

from __future__ import annotations

import numpy as np

from pympi_gpu.pi.grid import chunk_size
from pympi_gpu.rng import count_hits_numpy

__all__ = ["NumpyKernels", "exact_partials_py"]


def exact_partials_py(values) -> np.ndarray:
    """Shewchuk's exact partials of ``values`` in plain Python (see ``kernels_cpu.exact_partials``)."""
    partials: list[float] = []
    for x in map(float, values):
        i = 0
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        partials[i:] = [x]
    return np.array(partials, dtype=np.float64)


class NumpyKernels:
    """The same arithmetic as the numba kernels, in NumPy."""

    name = "numpy"
    _block = 1 << 15  # float64 nodes per block: 256 KiB, inside the L2 cache

    def mc_hits(self, key: np.uint64, start: int, count: int) -> int:
        return count_hits_numpy(key, start, count) if count > 0 else 0

    def trapezoid_chunks(self, n: int, c0: int, c1: int) -> np.ndarray:
        csize = chunk_size(n)
        h = 1.0 / n
        out = np.empty(max(c1 - c0, 0))
        blk = min(self._block, csize)
        base = np.arange(blk, dtype=np.float64)
        x = np.empty(blk)
        for c in range(c0, c1):
            lo = 1 + c * csize
            hi = min(lo + csize, n)
            s = 0.0
            for b in range(lo, hi, blk):
                m = min(blk, hi - b)
                xs = x[:m]
                np.add(base[:m], float(b), out=xs)  # exact: node indices < 2**53
                xs *= h
                xs *= xs
                xs += 1.0
                np.divide(4.0, xs, out=xs)
                s += float(xs.sum())
            out[c - c0] = s
        return out

    def partials(self, sums: np.ndarray) -> np.ndarray:
        return exact_partials_py(sums)

    def warmup(self, methods=("mc", "trapezoid")) -> None:
        """Nothing to compile."""
