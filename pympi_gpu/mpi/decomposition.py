"""Block distribution of a global index range over ranks: pure functions, no MPI.

Rank ``r`` of ``size`` owns the half-open range ``[start, stop)``; the first
``n % size`` ranks own one item more, so every item is owned exactly once and
the total is exactly ``n`` for any ``size``.
"""

from __future__ import annotations

__all__ = ["block_range", "block_counts", "block_starts", "block_owner"]


def _check(n: int, size: int) -> None:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")


def block_range(n: int, size: int, rank: int) -> tuple[int, int]:
    """Return ``(start, stop)`` of the block of ``rank`` in ``range(n)``."""
    _check(n, size)
    if not 0 <= rank < size:
        raise ValueError(f"rank must be in [0, {size}), got {rank}")
    q, r = divmod(n, size)
    start = rank * q + min(rank, r)
    return start, start + q + (rank < r)


def block_counts(n: int, size: int) -> list[int]:
    """Return the number of items of every rank (sums to ``n``)."""
    _check(n, size)
    q, r = divmod(n, size)
    return [q + (k < r) for k in range(size)]


def block_starts(n: int, size: int) -> list[int]:
    """Return the first index of every rank's block."""
    counts = block_counts(n, size)
    starts, acc = [], 0
    for c in counts:
        starts.append(acc)
        acc += c
    return starts


def block_owner(i: int, n: int, size: int) -> int:
    """Return the rank that owns global index ``i``."""
    _check(n, size)
    if not 0 <= i < n:
        raise ValueError(f"index must be in [0, {n}), got {i}")
    q, r = divmod(n, size)
    big = r * (q + 1)
    return i // (q + 1) if i < big else r + (i - big) // q
