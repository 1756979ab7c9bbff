"""The global grid of the trapezoid rule: pure arithmetic, no MPI.

The ``n - 1`` interior nodes ``x_i = i / n`` (``i = 1 .. n-1``) are cut into
chunks of a size that depends on ``n`` alone.  Ranks own whole chunks; every
chunk sum is computed by the same code whatever rank computes it, and chunk
sums are added exactly (:func:`exact_sum`), so the result is bit-identical for
any number of ranks.
"""

from __future__ import annotations


from pympi_gpu.mpi.decomposition import block_range

__all__ = ["chunk_size", "n_chunks", "chunk_nodes", "rank_chunks", "MAX_CHUNKS"]

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
