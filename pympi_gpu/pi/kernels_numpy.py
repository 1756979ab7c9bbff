"""NumPy kernels for pi (``--backend numpy``): no compiler, so they start at once.

A run of a few million samples per rank is over before numba is even
imported (0.4 s or more per rank, plus loading the cached kernels), so
``--backend auto`` takes these for small work (see :mod:`pympi_gpu.pi.backends`).
The Monte Carlo hit count and the trapezoid rule's chunk sums are the numba
and CUDA kernels' integers, bit for bit (the same arithmetic: :mod:`~pympi_gpu.rng`,
:mod:`~pympi_gpu.pi.grid`).  Nothing here imports numba.
"""

from __future__ import annotations

import numpy as np

from pympi_gpu.pi import grid
from pympi_gpu.rng import count_hits_numpy

__all__ = ["NumpyKernels"]


def _quad_in_place(fa, m: float, h: float, c: float, work) -> np.ndarray:
    """:func:`~pympi_gpu.pi.grid.terms`' ``quad`` of the groups whose first nodes are ``fa``: the same IEEE
    operations in the same order, each into a buffer of ``work`` (six arrays as long as ``fa``) instead of
    a new array (2.5x faster).  Returns the terms plus ``c``, in ``work[0]``."""
    a, b, cc, d, ab, cd = work
    np.multiply(fa, h, out=a)  # x_a
    np.add(a, m * h, out=b)  # x_b = x_a + m h
    np.add(a, 2.0 * m * h, out=cc)
    np.add(a, 3.0 * m * h, out=d)
    for x in (a, b, cc, d):  # 1 + x^2
        np.multiply(x, x, out=x)
        x += 1.0
    np.multiply(a, b, out=ab)
    np.multiply(cc, d, out=cd)
    a += b  # a + b
    cc += d  # c + d
    a *= cd
    cc *= ab
    a += cc  # (a+b) cd + (c+d) ab
    ab *= cd  # ab cd
    a /= ab
    a += c
    return a


_, _single = grid.terms(lambda x, y: x * y, lambda x, y: x + y)  # the last nodes: at most three a chunk


class NumpyKernels:
    """The same arithmetic as the numba kernels, in NumPy."""

    name = "numpy"
    _block = 1 << 15  # groups a pass: 256 KiB an array

    def mc_hits(self, key: np.uint64, start: int, count: int) -> int:
        return count_hits_numpy(key, start, count) if count > 0 else 0

    def trapezoid_chunks(self, n: int, c0: int, c1: int) -> np.ndarray:
        """Each chunk's integer sum (:mod:`~pympi_gpu.pi.grid`): the groups of several chunks at a time (all
        but the last have the same length), ``_block`` groups a pass at most."""
        h, c = 1.0 / n, grid.shift(n)
        unit = np.uint64(np.float64(c).view(np.uint64))
        out = np.zeros(max(c1 - c0, 0), np.int64)
        k = c0
        while k < c1:
            lo, hi = grid.chunk_nodes(n, k)
            m = (hi - lo) // 4
            count = 1 if hi - lo < grid.chunk_size(n) else max(1, min(c1 - k, self._block // max(m, 1)))
            if count > 1 and grid.chunk_nodes(n, k + count - 1)[1] - grid.chunk_nodes(n, k + count - 1)[0] != hi - lo:
                count -= 1  # the last chunk is shorter: on its own
            for j in range(0, m, self._block):  # (a chunk of more than _block groups: in parts)
                w = min(self._block, m - j)
                starts = lo + j + (hi - lo) * np.arange(count, dtype=np.float64)  # exact: node indices < 2**53
                fa = (starts[:, None] + np.arange(w, dtype=np.float64)).reshape(-1)
                terms = _quad_in_place(fa, float(m), h, c, np.empty((6, fa.size)))
                with np.errstate(over="ignore"):  # modulo 2^64: each chunk's sum is below 2^62
                    sums = (terms.view(np.uint64).reshape(count, w) - unit).sum(axis=1, dtype=np.uint64)
                out[k - c0:k - c0 + count] += sums.view(np.int64)
            if hi - lo > 4 * m:  # (the last chunk's last nodes: a full chunk has none)
                tail = np.arange(lo + 4 * m, hi, dtype=np.float64)
                out[k - c0] += int((_single(tail, h, c).view(np.uint64) - unit).sum())
            k += count
        return out

    def warmup(self, methods=("mc", "trapezoid")) -> None:
        """Nothing to compile."""
