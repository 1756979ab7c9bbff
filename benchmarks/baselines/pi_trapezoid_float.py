"""Baseline: pympi's trapezoid kernel before issue 60, for side-by-side timing.

A chunk's sum was a float64, added with fastmath (LLVM reassociated it across the SIMD lanes and
fused the multiplies and adds): correct to rounding, but its last bits depended on the vector width
and differed from the NumPy and CUDA kernels' (issue 60, item 8).  Today's kernel
(``pympi_gpu.pi.kernels_cpu``) counts each group's term as an integer instead.
"""

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy", fastmath=True)
def node_sum(lo, hi, h):
    """Sum of 4/(1+x^2) over nodes x = i*h, i in [lo, hi): four nodes a division, a float sum."""
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


@njit(cache=True, error_model="numpy")
def _chunks(n, c0, c1, csize):
    h = 1.0 / n
    out = np.empty(c1 - c0)
    for c in range(c0, c1):
        lo = 1 + c * csize
        out[c - c0] = node_sum(lo, min(lo + csize, n), h)
    return out


def trapezoid_chunks(n, c0, c1, csize):
    """Chunk sums as the kernel before issue 60 with one thread (floats)."""
    return _chunks(np.int64(n), np.int64(c0), np.int64(c1), np.int64(csize))
