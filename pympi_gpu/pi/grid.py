"""The trapezoid rule's grid and arithmetic, written once for every backend: pure, no MPI.

The ``n - 1`` interior nodes ``x_i = i h`` (``i = 1 .. n-1``, ``h = 1/n``) are
cut into chunks of a size that depends on ``n`` alone; ranks own whole chunks.
Inside a chunk of nodes ``[lo, hi)`` with ``m = (hi - lo) // 4`` the nodes go
in groups of four, ``lo + j``, ``lo + j + m``, ``lo + j + 2m``, ``lo + j + 3m``
(``j < m``), whose four terms ``1/(1 + x^2)`` share one division, and the
last ``(hi - lo) % 4`` nodes one each (:func:`terms`).

Every group's (and lone node's) value is computed with the same float
operations in the same order on every backend and rounded to a multiple of
``2^-K`` (``K`` = :func:`scale_bits`, 47 from 2^14 to 2^34 intervals; the
value plus :func:`shift`, whose bits then count it), then added as an
integer: a chunk's sum is an exact int64 and a rank's an exact Python integer,
so no order of addition (threads, SIMD lanes, a GPU block's tree, ranks) can
change a bit of the result, which is rounded once (:func:`estimate`).  The
fixed point costs at most ``2^-(K+1)`` a group, unbiased (round half to even):
about ``2^-K / sqrt(n)`` on the estimate, far below an ulp of pi.

:func:`terms` makes the two functions from the multiply and add it is given:
plain operators for NumPy (element-wise) and numba on the CPU, which never
contract a multiply and an add into an FMA, and the CUDA kernel's explicitly
rounded ``mul.rn``/``add.rn``, which NVVM may not contract either (its
``-fma=1`` contracts plain ones, fastmath or not).
"""

from __future__ import annotations

from fractions import Fraction

from pympi_gpu.mpi.decomposition import block_range

__all__ = ["chunk_size", "n_chunks", "chunk_nodes", "rank_chunks", "MAX_CHUNKS", "scale_bits", "shift", "terms",
           "estimate"]

#: Upper bound on the number of chunks (keeps per-rank bookkeeping small).
MAX_CHUNKS = 1 << 20
_MIN_CHUNK = 1 << 14


def chunk_size(n: int) -> int:
    """Nodes per chunk for ``n`` intervals: a multiple of 4, at least 2**14."""
    c = max(_MIN_CHUNK, -(-(n - 1) // MAX_CHUNKS))
    return -(-c // 4) * 4


def n_chunks(n: int) -> int:
    """Number of chunks covering the ``n - 1`` interior nodes."""
    return max(1, -(-(n - 1) // chunk_size(n)))


def chunk_nodes(n: int, c: int) -> tuple[int, int]:
    """Interior nodes ``[lo, hi)`` of chunk ``c`` (node indices start at 1)."""
    size = chunk_size(n)
    lo = 1 + c * size
    return lo, min(lo + size, n)


def rank_chunks(n: int, size: int, rank: int) -> tuple[int, int]:
    """The chunks ``[c0, c1)`` that ``rank`` of ``size`` sums."""
    return block_range(n_chunks(n), size, rank)


def scale_bits(n: int) -> int:
    """``K``: a chunk's terms are counted in units of ``2^-K``.  A term is at most 4 (four reciprocals of
    numbers >= 1) and a chunk of ``N`` nodes has at most ``N/4 + 3`` of them, so its sum stays below ``2^62``
    (an int64); and ``K <= 49`` for :func:`shift`'s rounding."""
    return min(48, 62 - (min(chunk_size(n), n - 1) + 12).bit_length())


def shift(n: int) -> float:
    """``C = 1.5 * 2^(52 - K)``: a term ``g`` in [0, 4] added to it lands in ``C``'s binade, whose ulp is
    ``2^-K``, so ``g + C`` is ``g`` rounded to a multiple of ``2^-K`` (half to even), and the difference of
    the two floats' bits is that multiple's integer: ``bits(g + C) - bits(C) = round(g 2^K)``."""
    return 1.5 * 2.0 ** (52 - scale_bits(n))


def terms(mul, add):
    """The rule's terms made from ``mul`` and ``add`` (see the module docs): ``(quad, single)``.

    ``quad(fa, m, h, c)``: the four nodes ``fa``, ``fa + m``, ``fa + 2m``, ``fa + 3m`` (``fa``, ``m``
    node indices as exact float64s; ``x_a = fa h``, the others ``x_a`` plus ``m h``, ``2m h``, ``3m h``:
    an add where a multiply would cost more, and as accurate),
    ``sum 1/(1 + x^2)`` as ``((a+b)cd + (c+d)ab) / (abcd)`` (``a = 1 + x_a^2``: in [1, 2], nothing
    overflows; a few ulps a group, and a quarter of the divisions), plus ``c`` (:func:`shift`: the term
    rounded to the fixed point).  ``single(fi, h, c)``: one node's ``1/(1 + x^2)`` so.  Called as plain
    Python they work element-wise on NumPy arrays.
    """

    def quad(fa, m, h, c):
        xa = mul(fa, h)
        xb = add(xa, mul(m, h))
        xc = add(xa, mul(mul(2.0, m), h))
        xd = add(xa, mul(mul(3.0, m), h))
        a = add(1.0, mul(xa, xa))
        b = add(1.0, mul(xb, xb))
        c_ = add(1.0, mul(xc, xc))
        d = add(1.0, mul(xd, xd))
        ab = mul(a, b)
        cd = mul(c_, d)
        return add(add(mul(add(a, b), cd), mul(add(c_, d), ab)) / mul(ab, cd), c)

    def single(fi, h, c):
        x = mul(fi, h)
        return add(1.0 / add(1.0, mul(x, x)), c)

    return quad, single


def estimate(n: int, total: int) -> float:
    """The rule's result from ``total``, the exact sum of every chunk's integer: ``h (f(0)/2 + f(1)/2 +
    4 total 2^-K)`` with ``f(0) = 4``, ``f(1) = 2``, rounded once (a ratio of integers)."""
    k = scale_bits(n)
    return float(Fraction(4 * total + (3 << k), n << k))
