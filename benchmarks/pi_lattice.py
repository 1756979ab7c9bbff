#!/usr/bin/env python3
"""The Monte Carlo stream's own pi: what pympi-pi's estimate tends to with infinitely many samples.

A sample is the centre ``(A, B) / 2**31`` of one of the 2**31 x 2**31 cells of side 2**-30 over
[-1, 1]^2 (``A``, ``B`` odd, ``pympi_gpu.rng.square32``), each drawn with probability 2**-62, and a
hit if ``A**2 + B**2 < 2**62``.  So the estimate's mean is ``pi_L = 4 N / 2**62``, ``N`` the
number of cell centres inside the disc.  By symmetry ``N = 4 Q``, ``Q`` the count for odd
``A, B >= 1``: for each odd ``A`` the odd ``B`` up to ``isqrt(2**62 - A**2 - 1)``.  Counted here
exactly (2**30 integer square roots, a few seconds with numba) and compared with pi and with the
bound of docs/pi.md: every cell whose centre is on the wrong side of the circle meets the
circle, and a quarter circle, monotone, meets at most 2 x 2**30 cells, so
``|pi_L - pi| <= 4 * 2 * 2**30 * 2**-60 = 2**-27``.

    python benchmarks/pi_lattice.py
"""

from __future__ import annotations

from decimal import Decimal, getcontext

import numpy as np
from numba import njit, prange

PI = Decimal("3.141592653589793238462643383279502884197")


@njit(parallel=True)
def quarter_count(chunks: int) -> int:
    """Q: odd A, B >= 1 with A**2 + B**2 < 2**62 (exact int64 arithmetic)."""
    r2 = np.int64(1) << 62
    per = (np.int64(1) << 30) // chunks
    out = np.zeros(chunks, np.int64)
    for c in prange(chunks):
        s = np.int64(0)
        for i in range(c * per, (c + 1) * per):
            a = 2 * i + 1
            rest = r2 - a * a - 1  # B**2 <= rest
            m = np.int64(np.sqrt(np.float64(rest)))
            while m * m > rest:
                m -= 1
            while (m + 1) * (m + 1) <= rest:
                m += 1
            s += (m + 1) // 2  # odd B in [1, m]
        out[c] = s
    return out.sum()


def main() -> None:
    getcontext().prec = 40
    q = int(quarter_count(1024))
    pi_l = Decimal(4 * 4 * q) / Decimal(2**62)
    bound = Decimal(2) ** -27
    print(f"cell centres inside: N = 4 Q = {4 * q} of 2**62")
    print(f"pi_L = 4 N / 2**62 = {pi_l}")
    print(f"pi_L - pi = {pi_l - PI:.6e} (relative {(pi_l - PI) / PI:.3e}); bound 2**-27 = {bound:.3e} "
          f"(relative {bound / PI:.3e})")


if __name__ == "__main__":
    main()
